"""The group coordinator writes as Kafka's does, with acks=all: an offset commit or a group's assignment is
answered only once the high watermark of its `__consumer_offsets` partition covers it, and a write the
replicas do not confirm gets GroupMetadataManager's error (storeOffsets / storeGroup mappings).

Everything is the broker's own: a ReplicaManager whose `__consumer_offsets`-0 this broker leads with a
follower in its ISR, the coordinator writing through `append_for_coordinator` and waiting in
`wait_for_commit`, exactly as server.py wires them. The follower is played from the leader's side: its
replica fetches go through `ReplicaManager.fetch(..., replica_id=...)`, which records its position, moves
the HW and wakes the waiters, as a real follower's fetches do. Leadership and ISR changes are what the
cluster glue applies from the controller's LeaderAndIsr (make_leader / make_follower, then a wake-up).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.metadata import MetadataStore
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.coordinator import OFFSETS_TOPIC, GroupCoordinator
from kafkalite.error_codes import ErrorCode
from kafkalite.manager.log_manager import LogManager
from kafkalite.replication.partition import Partition
from kafkalite.storage.log import FetchIsolation
from tests.support.coordinator import COMMIT, FAST, FETCH, SimConsumer, eventually, manager

NODE, FOLLOWER = 1, 2
KEY = (OFFSETS_TOPIC, 0)


class OffsetsLeader:
    """A broker (ReplicaManager, LogManager, group coordinator) leading `__consumer_offsets`-0 (the only
    partition, so every group lives there) at epoch 1 with `isr` out of replicas [NODE, FOLLOWER]."""

    def __init__(self, path: Path, **props: Any) -> None:
        cfg = BrokerConfig.load(None, {"log.dirs": str(path / "data"), "node.id": NODE})
        self.lm = LogManager(cfg.log_dirs, cfg.log_config(), cfg.manager_config())
        self.rm = ReplicaManager(cfg, self.lm, MetadataStore(self.lm.dirs[0].path))
        self.rm.startup()
        self.coord = GroupCoordinator(self.lm, {**FAST, "offsets.topic.num.partitions": 1, **props},
                                      writer=functools.partial(self.rm.append_for_coordinator, OFFSETS_TOPIC),
                                      replicas=self.rm)

    async def start(self, isr: tuple[int, ...] = (NODE, FOLLOWER), min_insync_replicas: int | None = None
                    ) -> Partition:
        await self.coord.load()
        self.coord.ensure_offsets_topic()
        if min_insync_replicas is not None:
            self.lm.update_topic_config(OFFSETS_TOPIC, {**self.lm.topic_configs.get(OFFSETS_TOPIC, {}),
                                                        "min.insync.replicas": min_insync_replicas})
        self.part = self.rm.get_partition(*KEY)
        self.controller_says(lambda p: p.make_leader(1, list(isr), [NODE, FOLLOWER]))
        assert self.part.log.config.min_insync_replicas == (min_insync_replicas or 1)
        return self.part

    def controller_says(self, change: Callable[[Partition], object]) -> None:
        """Apply a LeaderAndIsr to the partition and wake its waiters, as the cluster glue does."""
        change(self.part)
        self.rm.purgatory.wake(KEY)

    async def replica_fetch(self, offset: int | None = None) -> None:
        """The follower's fetch from `offset` (its log end; by default the leader's: it has everything so
        far), through the leader's replica fetch path."""
        offset = self.part.log_end_offset if offset is None else offset
        [read] = await self.rm.fetch([(*KEY, offset, 1 << 20, self.part.leader_epoch, -1)], max_wait_ms=0,
                                     min_bytes=0, max_bytes=1 << 20, isolation=FetchIsolation.LOG_END,
                                     replica_id=FOLLOWER, log_start_offsets=[0])
        assert read.error == 0 and read.diverging is None

    def parked(self) -> int:
        """Writes waiting in the acks=all purgatory."""
        return len(self.rm.purgatory)

    def close(self) -> None:
        self.coord.close()
        self.lm.shutdown()


def run(path: Path, scenario: Callable[[OffsetsLeader], Awaitable[None]], **props: Any) -> None:
    async def main() -> None:
        leader = OffsetsLeader(path, **props)
        try:
            await scenario(leader)
        finally:
            leader.close()

    asyncio.run(main())


async def call(coord: GroupCoordinator, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    return await coord.handle(api, version, body, "client", "127.0.0.1")


def commit(group: str, offset: int, epoch: int = -1, metadata: str = "") -> dict[str, Any]:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": epoch, "committed_metadata": metadata,
                                                     "commit_timestamp": -1}]}]}


def code_of(resp: dict[str, Any]) -> int:
    return resp["topics"][0]["partitions"][0]["error_code"]


async def fetched(coord: GroupCoordinator, group: str) -> dict[str, Any] | None:
    resp = await call(coord, FETCH, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
    parts = [p for t in resp["groups"][0]["topics"] for p in t["partitions"]]
    return parts[0] if parts else None


def test_offset_commit_is_answered_and_visible_only_once_replicated(tmp_path):
    async def scenario(leader: OffsetsLeader) -> None:
        part = await leader.start()
        coord = leader.coord
        answer = asyncio.ensure_future(call(coord, COMMIT, 8, commit("g", 42, epoch=7)))
        await eventually(lambda: leader.parked() == 1, what="the commit to wait for its replicas")
        assert part.log_end_offset == 1 and part.high_watermark == 0
        await leader.replica_fetch(0)  # the follower has nothing yet: the HW stays
        await asyncio.sleep(0.05)
        assert not answer.done()
        assert await fetched(coord, "g") is None  # not visible before the HW covers it
        await leader.replica_fetch()  # the follower has the commit
        assert part.high_watermark == 1
        assert code_of(await answer) == 0
        got = await fetched(coord, "g")
        assert got is not None and (got["committed_offset"], got["committed_leader_epoch"]) == (42, 7)

    run(tmp_path, scenario)


async def _isr_shrinks_after_the_follower_fetched(leader: OffsetsLeader) -> None:
    """The follower gets the commit and the HW moves over it; before the waiting commit runs again, the
    controller takes the follower out of the ISR (its broker died): committed, but with an ISR below
    min.insync.replicas (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
    await leader.start(min_insync_replicas=2)
    answer = asyncio.ensure_future(call(leader.coord, COMMIT, 8, commit("g", 5)))
    await eventually(lambda: leader.parked() == 1, what="the commit to wait")
    await leader.replica_fetch()  # no suspension between this and the LeaderAndIsr
    assert leader.part.high_watermark == leader.part.log_end_offset
    leader.controller_says(lambda p: p.make_leader(2, [NODE], [NODE, FOLLOWER]))
    assert code_of(await answer) == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def _isr_below_min_insync_replicas(leader: OffsetsLeader) -> None:
    """The ISR is already below min.insync.replicas: the append itself is refused (NOT_ENOUGH_REPLICAS),
    nothing is written."""
    part = await leader.start(isr=(NODE,), min_insync_replicas=2)
    assert code_of(await call(leader.coord, COMMIT, 8, commit("g", 5))) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert part.log_end_offset == 0


async def _leadership_moves_while_waiting(leader: OffsetsLeader) -> None:
    """The controller makes the follower the leader while the commit waits (NOT_LEADER_OR_FOLLOWER)."""
    await leader.start()
    answer = asyncio.ensure_future(call(leader.coord, COMMIT, 8, commit("g", 5)))
    await eventually(lambda: leader.parked() == 1, what="the commit to wait")
    leader.controller_says(lambda p: p.make_follower(FOLLOWER, 2, [FOLLOWER], [NODE, FOLLOWER]))
    assert code_of(await answer) == ErrorCode.NOT_COORDINATOR


async def _follower_never_fetches(leader: OffsetsLeader) -> None:
    """offsets.commit.timeout.ms passes without the follower fetching (REQUEST_TIMED_OUT, passed on by
    storeOffsets: clients retry)."""
    part = await leader.start()
    answer = asyncio.ensure_future(call(leader.coord, COMMIT, 8, commit("g", 5)))
    await asyncio.sleep(0.1)
    assert not answer.done()
    assert code_of(await asyncio.wait_for(answer, 5)) == ErrorCode.REQUEST_TIMED_OUT
    assert part.log_end_offset == 1 and part.high_watermark == 0  # written, maybe committed later


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [
    _isr_shrinks_after_the_follower_fetched, _isr_below_min_insync_replicas, _leadership_moves_while_waiting,
    _follower_never_fetches,
], ids=lambda f: f.__name__.strip("_"))
def test_offset_commit_the_replicas_did_not_confirm(tmp_path, scenario):
    async def checked(leader: OffsetsLeader) -> None:
        await scenario(leader)
        assert await fetched(leader.coord, "g") is None

    run(tmp_path, checked, **{"offsets.commit.timeout.ms": 400})


def test_commits_confirmed_out_of_order_keep_the_later_one(tmp_path):
    """A commit waits for the follower; the controller then takes the follower out of the ISR, which moves
    the HW over it, but the waiting commit is woken only later (the cluster glue applies LeaderAndIsr off
    the event loop and wakes the waiters after). A later commit arriving in between is committed at once
    and applied first; when the earlier one completes it must not overwrite it (Kafka's olderThan)."""
    async def scenario(leader: OffsetsLeader) -> None:
        part = await leader.start()
        coord = leader.coord
        first = asyncio.ensure_future(call(coord, COMMIT, 8, commit("g", 10)))
        await eventually(lambda: leader.parked() == 1, what="the first commit to wait")
        part.make_leader(2, [NODE], [NODE, FOLLOWER])  # the glue's worker thread; its wake-up comes later
        assert part.high_watermark == 1
        assert code_of(await call(coord, COMMIT, 8, commit("g", 20))) == 0
        assert not first.done()  # the later commit was answered (and applied) first
        assert code_of(await first) == 0
        got = await fetched(coord, "g")
        assert got is not None and got["committed_offset"] == 20

    run(tmp_path, scenario)


def test_oversized_commit_is_invalid_commit_offset_size(tmp_path):
    """storeOffsets maps a batch over max.message.bytes to INVALID_COMMIT_OFFSET_SIZE (not a server error)."""
    async def main():
        lm = manager(tmp_path)
        coord = GroupCoordinator(lm, FAST)
        await coord.load()
        coord.ensure_offsets_topic()
        lm.update_topic_config(OFFSETS_TOPIC, {**lm.topic_configs.get(OFFSETS_TOPIC, {}), "max.message.bytes": 300})
        resp = await call(coord, COMMIT, 8, commit("g", 1, metadata="m" * 1000))
        assert code_of(resp) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        coord.close()

    asyncio.run(main())


def test_sync_group_waits_for_the_assignment_to_replicate(tmp_path):
    async def scenario(leader: OffsetsLeader) -> None:
        part = await leader.start()
        member = SimConsumer(leader.coord, "g", {"t": 2}, "c1")
        joined = asyncio.ensure_future(member.join_and_sync())
        # the first write is the new group's own (written without waiting), the assignment's waits
        await eventually(lambda: leader.parked() == 1, what="the assignment to wait for its replicas")
        await asyncio.sleep(0.05)
        assert not joined.done()
        assert part.log_end_offset == 2 and part.high_watermark == 0
        await leader.replica_fetch()
        await asyncio.wait_for(joined, 5)
        assert member.assignment == {"t": [0, 1]}

    run(tmp_path, scenario)


@pytest.mark.slow
def test_sync_group_timeout_is_rebalance_in_progress(tmp_path):
    """storeGroup: REQUEST_TIMED_OUT -> REBALANCE_IN_PROGRESS (members rejoin), and no assignment is given."""
    async def scenario(leader: OffsetsLeader) -> None:
        await leader.start()
        member = SimConsumer(leader.coord, "g", {"t": 2}, "c1")
        sync_errors: list[int] = []
        real_call = member.call

        async def recording(api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
            resp = await real_call(api, version, body)
            if api == 14:  # SyncGroup
                sync_errors.append(resp["error_code"])
            return resp

        member.call = recording  # type: ignore[method-assign]
        joined = asyncio.ensure_future(member.join_and_sync())
        await eventually(lambda: bool(sync_errors), what="the assignment's write to time out")
        assert sync_errors == [ErrorCode.REBALANCE_IN_PROGRESS] and member.assignment != {"t": [0, 1]}
        await eventually(lambda: leader.parked() == 1, what="the rejoin's assignment to wait")
        await leader.replica_fetch()
        await asyncio.wait_for(joined, 5)
        assert sync_errors == [ErrorCode.REBALANCE_IN_PROGRESS, 0]
        assert member.assignment == {"t": [0, 1]}

    run(tmp_path, scenario, **{"offsets.commit.timeout.ms": 300})
