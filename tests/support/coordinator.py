"""Shared pieces of the coordinator tests: a real LogManager on tmp_path, and a simulated consumer.

`SimConsumer` plays what a Kafka consumer's ConsumerCoordinator does over the group APIs (join with the
MEMBER_ID_REQUIRED round trip, range-assign as leader, sync, heartbeat, rejoin on REBALANCE_IN_PROGRESS,
reset on UNKNOWN_MEMBER_ID), calling `GroupCoordinator.handle` with request bodies shaped as the broker
will decode them. Real clients over the wire are the broker's tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkalite.clock import Clock, MockClock
from kafkalite.coordinator import GroupCoordinator
from kafkalite.coordinator.consumer_protocol import decode_assignment, encode_assignment, encode_subscription
from kafkalite.error_codes import ErrorCode
from kafkalite.manager.log_manager import LogManager, ManagerConfig
from kafkalite.protocol.api_keys import ApiKey
from kafkalite.scheduler import MockScheduler
from tests.support import T0

JOIN, SYNC, HEARTBEAT, LEAVE = ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP
COMMIT, FETCH, DESCRIBE = ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS
LIST, DELETE = ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS

FAST = {
    "offsets.topic.num.partitions": 4,
    "group.initial.rebalance.delay.ms": 100,
    "group.min.session.timeout.ms": 10,
}


def manager(path: Path, clock: Clock | None = None) -> LogManager:
    clock = clock or MockClock(T0)
    return LogManager([path], config=ManagerConfig(), scheduler=MockScheduler(clock), clock=clock)  # type: ignore[arg-type]


def coordinator(lm: LogManager, clock: Clock | None = None, **props: Any) -> GroupCoordinator:
    cfg = {**FAST, **{k.replace("_", "."): v for k, v in props.items()}}
    return GroupCoordinator(lm, cfg, clock=clock or MockClock(T0))


async def eventually(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def range_assign(members: list[dict[str, Any]], topic_partitions: dict[str, int]) -> dict[str, bytes]:
    """The range assignor over members sorted by id (what the elected leader computes)."""
    ids = sorted(m["member_id"] for m in members)
    out: dict[str, dict[str, list[int]]] = {mid: {} for mid in ids}
    for topic, n in topic_partitions.items():
        per, extra = divmod(n, len(ids))
        start = 0
        for i, mid in enumerate(ids):
            count = per + (1 if i < extra else 0)
            if count:
                out[mid][topic] = list(range(start, start + count))
            start += count
    return {mid: encode_assignment(parts) for mid, parts in out.items()}


class SimConsumer:
    def __init__(self, coord: GroupCoordinator, group: str, topics: dict[str, int], client_id: str, *,
                 version: int = 7, instance_id: str | None = None, session_ms: int = 1000, rebalance_ms: int = 3000,
                 heartbeat_ms: int = 40) -> None:
        self.coord = coord
        self.group = group
        self.topics = topics
        self.client_id = client_id
        self.version = version
        self.instance_id = instance_id
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.heartbeat_ms = heartbeat_ms
        self.member_id = ""
        self.generation = -1
        self.assignment: dict[str, list[int]] = {}
        self.joins = 0
        self.task: asyncio.Task[None] | None = None
        self.errors: list[int] = []

    async def call(self, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return await self.coord.handle(api, version, body, self.client_id, "127.0.0.1")

    def join_body(self) -> dict[str, Any]:
        return {"group_id": self.group, "session_timeout_ms": self.session_ms,
                "rebalance_timeout_ms": self.rebalance_ms, "member_id": self.member_id,
                "group_instance_id": self.instance_id, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": encode_subscription(sorted(self.topics))}],
                "reason": None}

    async def join_and_sync(self) -> None:
        while True:
            self.assignment = {}
            resp = await self.call(JOIN, self.version, self.join_body())
            err = resp["error_code"]
            if err == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = resp["member_id"]
                continue
            if err == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if err == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            assert err == 0, f"JoinGroup failed: {err}"
            self.joins += 1
            self.member_id = resp["member_id"]
            self.generation = resp["generation_id"]
            assignments = []
            if resp["leader"] == self.member_id and not resp["skip_assignment"]:
                assignments = [{"member_id": mid, "assignment": a}
                               for mid, a in range_assign(resp["members"], self.topics).items()]
            sync = await self.call(SYNC, min(self.version, 5), {
                "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": self.instance_id, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": assignments})
            if sync["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if sync["error_code"] in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                self.member_id = "" if sync["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID else self.member_id
                continue
            assert sync["error_code"] == 0, f"SyncGroup failed: {sync['error_code']}"
            self.assignment = decode_assignment(sync["assignment"])
            return

    async def heartbeat(self) -> int:
        resp = await self.call(HEARTBEAT, min(self.version, 4), {
            "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": self.instance_id})
        return resp["error_code"]

    async def _run(self) -> None:
        if self.generation < 0:
            await self.join_and_sync()
        while True:
            await asyncio.sleep(self.heartbeat_ms / 1000)
            err = await self.heartbeat()
            if err:
                self.errors.append(err)
                if err == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                await self.join_and_sync()

    def start(self) -> SimConsumer:
        self.task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def kill(self) -> None:
        """Stop without LeaveGroup, as a crashed process would."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None

    async def leave(self) -> dict[str, Any]:
        await self.kill()
        if self.version >= 3:
            return await self.call(LEAVE, 5, {"group_id": self.group, "members": [
                {"member_id": self.member_id, "group_instance_id": self.instance_id, "reason": "closing"}]})
        return await self.call(LEAVE, 1, {"group_id": self.group, "member_id": self.member_id})

    def owned(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.assignment.items() for p in ps}


def stable_and_covering(coord: GroupCoordinator, group: str, consumers: list[SimConsumer],
                        topics: dict[str, int]) -> bool:
    """The group is Stable, every consumer is in its current generation, and the assignment is disjoint
    and complete."""
    g = coord.groups.get(group)
    if g is None or str(g.state) != "Stable" or len(g.members) != len(consumers):
        return False
    if any(c.generation != g.generation_id or c.member_id not in g.members for c in consumers):
        return False
    owned = [tp for c in consumers for tp in c.owned()]
    expected = {(t, p) for t, n in topics.items() for p in range(n)}
    return len(owned) == len(set(owned)) and set(owned) == expected
