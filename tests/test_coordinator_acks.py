"""The group coordinator writes as Kafka's does, with acks=all: an offset commit or a group's assignment is
answered only once the high watermark of its `__consumer_offsets` partition covers it, and a write the
replicas do not confirm gets GroupMetadataManager's error (storeOffsets / storeGroup mappings).

`Replicas` below stands in for the one call of the broker's ReplicaManager the coordinator waits on,
`wait_for_commit(topic, partition, required_offset, timeout_ms) -> error code` (the acks=all purgatory of
the replication work): the test decides when the "followers" have the write and moves the real log's high
watermark itself. The last test runs the real ReplicaManager's purgatory once it has that method.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kafkalite.coordinator import OFFSETS_TOPIC, Errors, GroupCoordinator
from kafkalite.manager.log_manager import LogManager
from kafkalite.storage.producer_state import AppendOrigin
from tests.support.coordinator import COMMIT, FAST, FETCH, SimConsumer, eventually, manager


class Replicas:
    """Holds each write until the test says how it ends (see the module doc)."""

    def __init__(self, lm: LogManager) -> None:
        self.lm = lm
        self.waiting: list[tuple[int, int, int, asyncio.Future[int]]] = []

    async def wait_for_commit(self, topic: str, partition: int, required_offset: int, timeout_ms: int) -> int:
        assert topic == OFFSETS_TOPIC
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.waiting.append((partition, required_offset, timeout_ms, fut))
        return await fut

    def finish(self, code: int = 0) -> tuple[int, int, int]:
        """End the oldest waiting write; with success the partition's HW first moves over it."""
        partition, required, timeout_ms, fut = self.waiting.pop(0)
        if code == 0:
            self.lm.get_log(OFFSETS_TOPIC, partition).update_high_watermark(required)
        fut.set_result(code)
        return partition, required, timeout_ms


def held_coordinator(path: Path, **props: Any) -> tuple[GroupCoordinator, Replicas]:
    """A coordinator whose appends leave the HW where it was (followers have not fetched yet)."""
    lm = manager(path)
    replicas = Replicas(lm)

    def writer(partition: int, batch: bytearray) -> int:
        lg = lm.get_or_create_log(OFFSETS_TOPIC, partition)
        return lg.append_as_leader(batch, 0, AppendOrigin.COORDINATOR).first_offset

    return GroupCoordinator(lm, {**FAST, **props}, writer=writer, replicas=replicas), replicas


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
    async def main():
        coord, replicas = held_coordinator(tmp_path, **{"offsets.commit.timeout.ms": 1234})
        await coord.load()
        answer = asyncio.ensure_future(call(coord, COMMIT, 8, commit("g", 42, epoch=7)))
        await eventually(lambda: bool(replicas.waiting), what="the commit to wait for its replicas")
        await asyncio.sleep(0.05)
        assert not answer.done()
        assert await fetched(coord, "g") is None  # not visible before the HW covers it
        partition, required, timeout_ms = replicas.finish(0)
        assert partition == coord.coordinator_key_partition("g") and required == 1 and timeout_ms == 1234
        assert code_of(await answer) == 0
        got = await fetched(coord, "g")
        assert got is not None and (got["committed_offset"], got["committed_leader_epoch"]) == (42, 7)
        coord.close()

    asyncio.run(main())


@pytest.mark.parametrize(("replication_error", "answered"), [
    (Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.COORDINATOR_NOT_AVAILABLE),
    (Errors.NOT_ENOUGH_REPLICAS, Errors.COORDINATOR_NOT_AVAILABLE),
    (Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_COORDINATOR),
    (Errors.REQUEST_TIMED_OUT, Errors.REQUEST_TIMED_OUT),  # storeOffsets passes it on; clients retry
])
def test_offset_commit_the_replicas_did_not_confirm(tmp_path, replication_error, answered):
    async def main():
        coord, replicas = held_coordinator(tmp_path)
        await coord.load()
        answer = asyncio.ensure_future(call(coord, COMMIT, 8, commit("g", 5)))
        await eventually(lambda: bool(replicas.waiting), what="the commit to wait")
        replicas.finish(replication_error)
        assert code_of(await answer) == answered
        assert await fetched(coord, "g") is None
        coord.close()

    asyncio.run(main())


def test_commits_confirmed_out_of_order_keep_the_later_one(tmp_path):
    async def main():
        coord, replicas = held_coordinator(tmp_path)
        await coord.load()
        first = asyncio.ensure_future(call(coord, COMMIT, 8, commit("g", 10)))
        await eventually(lambda: len(replicas.waiting) == 1, what="the first commit")
        second = asyncio.ensure_future(call(coord, COMMIT, 8, commit("g", 20)))
        await eventually(lambda: len(replicas.waiting) == 2, what="the second commit")
        replicas.waiting.reverse()
        replicas.finish(0)  # the HW passes both; the later write's waiter happens to wake first
        assert code_of(await second) == 0
        replicas.finish(0)
        assert code_of(await first) == 0
        got = await fetched(coord, "g")
        assert got is not None and got["committed_offset"] == 20
        coord.close()

    asyncio.run(main())


def test_oversized_commit_is_invalid_commit_offset_size(tmp_path):
    """storeOffsets maps a batch over max.message.bytes to INVALID_COMMIT_OFFSET_SIZE (not a server error)."""
    async def main():
        lm = manager(tmp_path)
        coord = GroupCoordinator(lm, FAST)
        await coord.load()
        coord.ensure_offsets_topic()
        lm.update_topic_config(OFFSETS_TOPIC, {**lm.topic_configs.get(OFFSETS_TOPIC, {}), "max.message.bytes": 300})
        resp = await call(coord, COMMIT, 8, commit("g", 1, metadata="m" * 1000))
        assert code_of(resp) == Errors.INVALID_COMMIT_OFFSET_SIZE
        coord.close()

    asyncio.run(main())


def test_sync_group_waits_for_the_assignment_to_replicate(tmp_path):
    async def main():
        coord, replicas = held_coordinator(tmp_path)
        await coord.load()
        member = SimConsumer(coord, "g", {"t": 2}, "c1")
        joined = asyncio.ensure_future(member.join_and_sync())
        # the first write is the new group's own (written without waiting), the assignment's waits
        await eventually(lambda: bool(replicas.waiting), what="the assignment to wait for its replicas")
        await asyncio.sleep(0.05)
        assert not joined.done()
        replicas.finish(0)
        await asyncio.wait_for(joined, 5)
        assert member.assignment == {"t": [0, 1]}
        coord.close()

    asyncio.run(main())


def test_sync_group_timeout_is_rebalance_in_progress(tmp_path):
    """storeGroup: REQUEST_TIMED_OUT -> REBALANCE_IN_PROGRESS (members rejoin), and no assignment is given."""
    async def main():
        coord, replicas = held_coordinator(tmp_path)
        await coord.load()
        member = SimConsumer(coord, "g", {"t": 2}, "c1")
        sync_errors: list[int] = []
        real_call = member.call

        async def recording(api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
            resp = await real_call(api, version, body)
            if api == 14:  # SyncGroup
                sync_errors.append(resp["error_code"])
            return resp

        member.call = recording  # type: ignore[method-assign]
        joined = asyncio.ensure_future(member.join_and_sync())
        await eventually(lambda: bool(replicas.waiting), what="the assignment to wait")
        replicas.finish(Errors.REQUEST_TIMED_OUT)
        await eventually(lambda: bool(replicas.waiting), what="the rejoin's assignment to wait")
        replicas.finish(0)
        await asyncio.wait_for(joined, 5)
        assert sync_errors == [Errors.REBALANCE_IN_PROGRESS, 0]
        assert member.assignment == {"t": [0, 1]}
        coord.close()

    asyncio.run(main())


def test_commit_waits_for_real_followers(tmp_path):
    """With the replication work merged: a commit to a `__consumer_offsets` partition whose ISR has a
    follower that has not fetched times out (REQUEST_TIMED_OUT, not visible); once the follower has
    fetched past it, a commit succeeds."""
    from kafkalite.broker.replica_manager import ReplicaManager

    if not hasattr(ReplicaManager, "wait_for_commit"):
        pytest.skip("ReplicaManager.wait_for_commit (the acks=all purgatory) is not on this branch yet")
    from kafkalite.broker.config import BrokerConfig
    from kafkalite.broker.metadata import MetadataStore
    from kafkalite.broker.topic_admin import TopicAdmin

    node = 1

    async def main():
        cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path / "data"), "node.id": node})
        lm = LogManager(cfg.log_dirs, cfg.log_config(), cfg.manager_config())
        rm = ReplicaManager(cfg, lm, MetadataStore(lm.dirs[0].path))
        TopicAdmin(rm).startup()
        rm.startup()
        try:
            def writer(partition: int, batch: bytearray) -> int:
                return rm.append_records(OFFSETS_TOPIC, partition, batch, origin=AppendOrigin.COORDINATOR).first_offset

            coord = GroupCoordinator(rm, {**FAST, "offsets.topic.num.partitions": 1,
                                          "offsets.commit.timeout.ms": 300}, writer=writer)
            await coord.load()
            coord.ensure_offsets_topic()
            part = rm.get_partition(OFFSETS_TOPIC, 0)
            part.make_leader(1, [node, node + 1], [node, node + 1])
            assert code_of(await call(coord, COMMIT, 8, commit("g", 3))) == Errors.REQUEST_TIMED_OUT
            assert await fetched(coord, "g") is None
            part.update_follower_fetch_state(node + 1, part.log.log_end_offset, 0, 0)  # it may commit later
            answer = asyncio.ensure_future(call(coord, COMMIT, 8, commit("g", 4)))
            await asyncio.sleep(0.05)
            part.update_follower_fetch_state(node + 1, part.log.log_end_offset, 0, 0)
            rm.purgatory.wake((OFFSETS_TOPIC, 0))
            assert code_of(await answer) == 0
            assert (await fetched(coord, "g") or {}).get("committed_offset") == 4
            coord.close()
        finally:
            lm.shutdown()

    asyncio.run(main())
