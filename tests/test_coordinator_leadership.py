"""Group state follows leadership of `__consumer_offsets` partitions (cluster mode; Kafka's
GroupCoordinator.onElection / onResignation): a real GroupCoordinator over a real LogManager, started
with no partition, loads one partition's groups on election (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and
forgets them on resignation (NOT_COORDINATOR, also for a parked JoinGroup)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kafkalite.coordinator import GroupCoordinator
from kafkalite.error_codes import ErrorCode
from tests.support.coordinator import COMMIT, FETCH, JOIN, SimConsumer, coordinator, eventually, manager

TOPICS = {"t": 2}


async def call(coord: GroupCoordinator, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    return await coord.handle(api, version, body, "client", "127.0.0.1")


def commit_body(group: str, offset: int, generation: int = -1, member_id: str = "") -> dict[str, Any]:
    return {"group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


async def fetched(coord: GroupCoordinator, group: str) -> tuple[int, int]:
    """(top-level error, committed offset of t-0) from OffsetFetch v7."""
    res = await call(coord, FETCH, 7, {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}],
                                       "require_stable": False})
    parts = [p for t in res["topics"] for p in t["partitions"]]
    return res["error_code"], parts[0]["committed_offset"] if parts else -1


def two_groups_on_two_partitions(coord: GroupCoordinator) -> tuple[str, str]:
    a = "a"
    pa = coord.coordinator_key_partition(a)
    b = next(f"b{i}" for i in range(100) if coord.coordinator_key_partition(f"b{i}") != pa)
    return a, b


@pytest.mark.slow
def test_groups_of_a_partition_load_on_election_and_unload_on_resignation(tmp_path):
    async def main() -> None:
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load(lead_all=False)
        try:
            a, b = two_groups_on_two_partitions(coord)
            pa, pb = coord.coordinator_key_partition(a), coord.coordinator_key_partition(b)
            # led by no one here yet
            res = await call(coord, COMMIT, 8, commit_body(a, 5))
            assert res["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_COORDINATOR
            assert (await fetched(coord, a))[0] == ErrorCode.NOT_COORDINATOR

            coord.on_election(pa, 0)
            coord.on_election(pb, 0)
            # the load runs in the background: until it ends, the group's requests are asked to retry
            assert (await fetched(coord, a))[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            res = await call(coord, COMMIT, 8, commit_body(a, 5))
            assert res["topics"][0]["partitions"][0]["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            await eventually(lambda: coord.owns(pa) and coord.owns(pb), what="partitions loaded")

            member = SimConsumer(coord, a, TOPICS, "c1", session_ms=5000)
            await member.join_and_sync()
            res = await call(coord, COMMIT, 8, commit_body(a, 7, member.generation, member.member_id))
            assert res["topics"][0]["partitions"][0]["error_code"] == 0
            res = await call(coord, COMMIT, 8, commit_body(b, 11))
            assert res["topics"][0]["partitions"][0]["error_code"] == 0
            assert await fetched(coord, a) == (0, 7)

            # a second member's JoinGroup parks while the first is asked to rejoin
            first = await call(coord, JOIN, 7, {**member.join_body(), "member_id": ""})
            assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
            parked = asyncio.get_running_loop().create_task(
                call(coord, JOIN, 7, {**member.join_body(), "member_id": first["member_id"]}))
            await eventually(lambda: str(coord.groups[a].state) == "PreparingRebalance", what="rebalance")
            assert not parked.done()

            coord.on_resignation(pa, 1)
            assert (await asyncio.wait_for(parked, 5))["error_code"] == ErrorCode.NOT_COORDINATOR
            assert a not in coord.groups and not coord.committed_offsets(a)
            assert await member.heartbeat() == ErrorCode.NOT_COORDINATOR
            assert (await fetched(coord, a))[0] == ErrorCode.NOT_COORDINATOR
            assert await fetched(coord, b) == (0, 11)  # another partition's groups stay

            coord.on_election(pa, 0)  # older than the resignation: ignored
            assert not coord.is_loading(pa) and not coord.owns(pa)

            coord.on_election(pa, 2)
            assert (await fetched(coord, a))[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert await member.heartbeat() == ErrorCode.NONE  # heartbeats are answered blindly while loading
            await eventually(lambda: coord.owns(pa), what="partition reloaded")
            assert await fetched(coord, a) == (0, 7)  # back from the log
            assert str(coord.groups[a].state) == "Stable" and member.member_id in coord.groups[a].members
            assert await member.heartbeat() == ErrorCode.NONE

            # a resignation while loading cancels the load: nothing of the partition is kept
            coord.on_resignation(pb, 1)
            coord.on_election(pb, 2)
            coord.on_resignation(pb, 3)
            await asyncio.sleep(0.2)
            assert not coord.owns(pb) and not coord.is_loading(pb) and b not in coord.groups
            assert (await fetched(coord, b))[0] == ErrorCode.NOT_COORDINATOR
        finally:
            coord.close()
            lm.shutdown()

    asyncio.run(main())


def test_single_broker_mode_leads_every_partition_from_the_start(tmp_path):
    async def main() -> None:
        lm = manager(tmp_path)
        first = coordinator(lm)
        await first.load()
        assert (await call(first, COMMIT, 8, commit_body("g", 3)))["topics"][0]["partitions"][0]["error_code"] == 0
        first.close()
        again = coordinator(lm)
        await again.load()
        try:
            assert await fetched(again, "g") == (0, 3)
            again.on_resignation(again.coordinator_key_partition("g"), 5)  # no effect: it leads everything
            assert await fetched(again, "g") == (0, 3)
        finally:
            again.close()
            lm.shutdown()

    asyncio.run(main())

