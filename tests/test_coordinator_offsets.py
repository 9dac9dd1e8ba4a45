"""Committed offsets: OffsetCommit/OffsetFetch across versions, persistence in `__consumer_offsets` across a
restart, retention (offsets.retention.minutes), DeleteGroups, OffsetDelete, transactional replay, and lag."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kafkalite.clock import MockClock
from kafkalite.coordinator import OFFSETS_TOPIC, GroupCoordinator
from kafkalite.coordinator.consumer_protocol import encode_subscription
from kafkalite.coordinator.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from kafkalite.error_codes import ErrorCode
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.records.control import ControlRecordType, build_end_txn_marker
from kafkalite.storage.log import FetchIsolation
from kafkalite.storage.producer_state import AppendOrigin
from tests.support import T0
from tests.support.coordinator import (
    COMMIT,
    DELETE,
    DESCRIBE,
    FETCH,
    HEARTBEAT,
    JOIN,
    LIST,
    SYNC,
    SimConsumer,
    coordinator,
    eventually,
    manager,
    stable_and_covering,
)

MINUTE = 60_000
RETENTION_MIN = 10


async def call(coord: GroupCoordinator, api: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
    return await coord.handle(api, version, body, "client", "127.0.0.1")


def commit_body(group: str, offsets: dict[tuple[str, int], int], generation: int = -1, member: str = "",
                metadata: str | None = "") -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                                         "committed_metadata": metadata, "commit_timestamp": -1})
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def errors_of(resp: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"] for t in resp["topics"] for p in t["partitions"]}


async def fetch_all(coord: GroupCoordinator, group: str) -> dict[tuple[str, int], int]:
    resp = await call(coord, FETCH, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
    g = resp["groups"][0]
    assert g["error_code"] == 0
    return {(t["name"], p["partition_index"]): p["committed_offset"] for t in g["topics"] for p in t["partitions"]}


def test_commit_and_fetch_across_versions(tmp_path):
    async def main():
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load()
        body = commit_body("g", {("a", 0): 10, ("a", 1): 11, ("b", 0): 20}, metadata="meta")
        assert set(errors_of(await call(coord, COMMIT, 8, body)).values()) == {0}
        # v1: one group, explicit partitions; an uncommitted partition reads -1
        v1 = await call(coord, FETCH, 1, {"group_id": "g", "topics": [{"name": "a", "partition_indexes": [0, 5]}]})
        assert v1["topics"] == [{"name": "a", "partitions": [
            {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": -1, "metadata": "meta",
             "error_code": 0},
            {"partition_index": 5, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": 0}]}]
        # v2+: null topics means every committed offset
        v7 = await call(coord, FETCH, 7, {"group_id": "g", "topics": None, "require_stable": True})
        assert v7["error_code"] == 0
        assert {(t["name"], p["partition_index"]) for t in v7["topics"] for p in t["partitions"]} == \
            {("a", 0), ("a", 1), ("b", 0)}
        # v8: several groups in one request
        v8 = await call(coord, FETCH, 8, {"groups": [
            {"group_id": "g", "topics": [{"name": "b", "partition_indexes": [0]}]},
            {"group_id": "unknown", "topics": None}], "require_stable": False})
        assert v8["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 20
        assert v8["groups"][1] == {"group_id": "unknown", "topics": [], "error_code": 0}
        # a commit without a group creates a "simple" group, listed with an empty protocol type
        listed = await call(coord, LIST, 3, {})
        assert listed["groups"] == [{"group_id": "g", "protocol_type": "", "group_state": "Empty",
                                     "group_type": "classic"}]
        # OffsetCommit v1 carries a commit timestamp per partition; v6+ a leader epoch
        v1c = commit_body("g", {("a", 0): 12})
        v1c["topics"][0]["partitions"][0].update(commit_timestamp=T0 - 5, committed_leader_epoch=9)
        await call(coord, COMMIT, 1, {**v1c, "generation_id": -1})
        om = coord.committed_offsets("g")[("a", 0)]
        assert (om.offset, om.commit_timestamp, om.leader_epoch) == (12, T0 - 5, -1)
        await call(coord, COMMIT, 6, v1c)
        assert coord.committed_offsets("g")[("a", 0)].leader_epoch == 9
        coord.close()
        lm.shutdown()

    asyncio.run(main())


def test_commit_validation(tmp_path):
    async def main():
        lm = manager(tmp_path)
        coord = GroupCoordinator(lm, {"offsets.topic.num.partitions": 2, "group.min.session.timeout.ms": 10,
                                      "group.initial.rebalance.delay.ms": 0, "offset.metadata.max.bytes": 8},
                                 clock=MockClock(T0), partition_exists=lambda t, p: t != "missing" and p < 3)
        await coord.load()
        # an unknown group with a generation: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from v9
        assert set(errors_of(await call(coord, COMMIT, 8, commit_body("x", {("a", 0): 1}, 3, "m"))).values()) == \
            {ErrorCode.ILLEGAL_GENERATION}
        assert set(errors_of(await call(coord, COMMIT, 9, commit_body("x", {("a", 0): 1}, 3, "m"))).values()) == \
            {ErrorCode.GROUP_ID_NOT_FOUND}
        assert "x" not in coord.groups
        errs = errors_of(await call(coord, COMMIT, 8, commit_body("x", {("a", 0): 1, ("a", 7): 1, ("missing", 0): 1})))
        assert errs == {("a", 0): 0, ("a", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        errs = errors_of(await call(coord, COMMIT, 8, commit_body("x", {("a", 1): 1}, metadata="123456789")))
        assert errs == {("a", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}
        assert set(errors_of(await call(coord, COMMIT, 8, commit_body("", {("a", 0): 1}))).values()) == \
            {ErrorCode.INVALID_GROUP_ID}
        # members of a real group commit with their generation
        join = {"group_id": "g", "session_timeout_ms": 5000, "rebalance_timeout_ms": 5000, "member_id": "",
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": encode_subscription(["a"])}]}
        j = await call(coord, JOIN, 3, join)
        mid = j["member_id"]
        # between JoinGroup and SyncGroup: REBALANCE_IN_PROGRESS
        assert set(errors_of(await call(coord, COMMIT, 8, commit_body("g", {("a", 0): 1}, 1, mid))).values()) == \
            {ErrorCode.REBALANCE_IN_PROGRESS}
        await call(coord, SYNC, 3, {"group_id": "g", "generation_id": 1, "member_id": mid, "assignments": []})
        assert set(errors_of(await call(coord, COMMIT, 8, commit_body("g", {("a", 0): 1}, 1, mid))).values()) == {0}
        assert set(errors_of(await call(coord, COMMIT, 8, commit_body("g", {("a", 0): 1}, 2, mid))).values()) == \
            {ErrorCode.ILLEGAL_GENERATION}
        assert set(errors_of(await call(coord, COMMIT, 8, commit_body("g", {("a", 0): 1}, 1, "who"))).values()) == \
            {ErrorCode.UNKNOWN_MEMBER_ID}
        # no generation and no member id against a group with members
        assert set(errors_of(await call(coord, COMMIT, 8, commit_body("g", {("a", 0): 1}))).values()) == \
            {ErrorCode.UNKNOWN_MEMBER_ID}
        coord.close()
        lm.shutdown()

    asyncio.run(main())


@pytest.mark.slow
def test_commits_and_group_survive_a_restart(tmp_path):
    topics = {"t": 6}

    async def first_life():
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load()
        consumers = [SimConsumer(coord, "g", topics, f"c{i}", session_ms=600).start() for i in range(3)]
        await eventually(lambda: stable_and_covering(coord, "g", consumers, topics), what="Stable")
        for n, c in enumerate(consumers):
            resp = await call(coord, COMMIT, 8, commit_body(
                "g", {tp: 100 * (n + 1) + tp[1] for tp in c.owned()}, c.generation, c.member_id))
            assert set(errors_of(resp).values()) == {0}
        committed = await fetch_all(coord, "g")
        members = {c.member_id: c.owned() for c in consumers}
        for c in consumers:
            await c.kill()
        coord.close()
        lm.shutdown()
        return committed, members, consumers[0].generation

    async def second_life(committed, members, generation):
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load()
        assert await fetch_all(coord, "g") == committed
        v1 = await call(coord, FETCH, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 5]}]})
        assert [p["committed_offset"] for p in v1["topics"][0]["partitions"]] == [committed[("t", 0)],
                                                                                 committed[("t", 5)]]
        group = coord.groups["g"]
        assert str(group.state) == "Stable" and group.generation_id == generation
        described = coord.describe_group("g")
        assert {m["member_id"]: {("t", p) for p in m["assigned_partitions"].get("t", [])}
                for m in described["members"]} == members
        # nobody heartbeats after the restart: the members expire and the group ends Empty
        await eventually(lambda: str(group.state) == "Empty", timeout=5, what="loaded members expire")
        assert await fetch_all(coord, "g") == committed
        coord.close()
        lm.shutdown()

    committed, members, generation = asyncio.run(first_life())
    assert len(committed) == 6
    asyncio.run(second_life(committed, members, generation))


def test_offsets_retention(tmp_path):
    clock = MockClock(T0)

    async def main():
        lm = manager(tmp_path, clock)
        coord = coordinator(lm, clock, offsets_retention_minutes=RETENTION_MIN)
        await coord.load()
        # a simple group: retention counts from each commit
        await call(coord, COMMIT, 8, commit_body("simple", {("a", 0): 1}))
        clock.sleep(5 * MINUTE)
        await call(coord, COMMIT, 8, commit_body("simple", {("a", 1): 2}))
        # OffsetCommit v2 with a retention time: expires at commit time + retention, whatever the group does
        await call(coord, COMMIT, 2, {**commit_body("legacy", {("a", 0): 3}), "generation_id": -1,
                                      "retention_time_ms": 2 * MINUTE})
        # a consumer group: Stable with a subscription to "a" (and an old commit on "b")
        join = {"group_id": "live", "session_timeout_ms": 600_000, "rebalance_timeout_ms": 600_000, "member_id": "",
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": encode_subscription(["a"])}]}
        j = await call(coord, JOIN, 3, join)
        mid = j["member_id"]
        await call(coord, SYNC, 3, {"group_id": "live", "generation_id": 1, "member_id": mid, "assignments": []})
        await call(coord, COMMIT, 8, commit_body("live", {("a", 0): 5, ("b", 0): 6}, 1, mid))
        assert coord.cleanup_group_metadata() == 0  # nothing is due yet

        clock.sleep(3 * MINUTE)  # T0+8: the legacy commit expired (at T0+7), and its group goes with it
        assert coord.cleanup_group_metadata() == 2
        assert "legacy" not in coord.groups
        clock.sleep(3 * MINUTE)  # T0+11: the first simple commit is 11 minutes old
        assert coord.cleanup_group_metadata() == 1
        assert set(coord.committed_offsets("simple")) == {("a", 1)}
        clock.sleep(4 * MINUTE)  # T0+15: simple a-1 and live b-0 (a topic it does not subscribe to) are 10
        assert coord.cleanup_group_metadata() == 3  # ... and the simple group has nothing left
        assert "simple" not in coord.groups
        assert set(coord.committed_offsets("live")) == {("a", 0)}  # a subscribed topic stays while Stable

        # the member leaves: the group is Empty, and its offsets expire retention after that moment
        await call(coord, 13, 0, {"group_id": "live", "member_id": mid})
        assert str(coord.groups["live"].state) == "Empty"
        clock.sleep(5 * MINUTE)
        assert coord.cleanup_group_metadata() == 0
        clock.sleep(5 * MINUTE)
        assert coord.cleanup_group_metadata() == 2  # live's last offset, then the Empty group
        assert coord.groups == {} and len(coord.offsets) == 0
        coord.close()
        lm.shutdown()

    asyncio.run(main())

    async def after_restart():
        lm = manager(tmp_path, clock)
        coord = coordinator(lm, clock)
        await coord.load()
        assert coord.groups == {} and len(coord.offsets) == 0  # the tombstones were replayed
        # the legacy commit was written with OffsetCommitValue version 1 (the expire timestamp)
        lg = lm.get_log(OFFSETS_TOPIC, coord.coordinator_key_partition("legacy"))
        values = [r.value for b in lg.batches(0, FetchIsolation.LOG_END) for r in b.records()
                  if r.key == encode_offset_commit_key(OffsetCommitKey("legacy", "a", 0))]
        assert values[0] == encode_offset_commit_value(OffsetCommitValue(3, "", T0 + 5 * MINUTE, -1,
                                                                         T0 + 7 * MINUTE))
        assert values[0][:2] == b"\x00\x01" and values[-1] is None
        coord.close()
        lm.shutdown()

    asyncio.run(after_restart())


def test_expiry_runs_on_its_interval(tmp_path):
    clock = MockClock(T0)

    async def main():
        lm = manager(tmp_path, clock)
        coord = coordinator(lm, clock, offsets_retention_minutes=1, offsets_retention_check_interval_ms=50)
        await coord.load()
        await call(coord, COMMIT, 8, commit_body("s", {("a", 0): 1}))
        clock.sleep(2 * MINUTE)
        await eventually(lambda: "s" not in coord.groups, timeout=3, what="periodic expiry")
        coord.close()
        lm.shutdown()

    asyncio.run(main())


def test_delete_groups(tmp_path):
    async def main():
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load()
        await call(coord, COMMIT, 8, commit_body("empty", {("a", 0): 1, ("a", 1): 2}))
        c = SimConsumer(coord, "busy", {"a": 2}, "c", session_ms=5000)
        await c.join_and_sync()
        resp = await call(coord, DELETE, 2, {"groups_names": ["empty", "busy", "nope"]})
        assert resp["results"] == [{"group_id": "empty", "error_code": 0},
                                   {"group_id": "busy", "error_code": ErrorCode.NON_EMPTY_GROUP},
                                   {"group_id": "nope", "error_code": ErrorCode.GROUP_ID_NOT_FOUND}]
        assert "empty" not in coord.groups and coord.committed_offsets("empty") == {}
        assert await fetch_all(coord, "empty") == {}
        d = await call(coord, DESCRIBE, 6, {"groups": ["empty"]})
        assert (d["groups"][0]["error_code"], d["groups"][0]["group_state"]) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
        d = await call(coord, DESCRIBE, 5, {"groups": ["empty"]})
        assert (d["groups"][0]["error_code"], d["groups"][0]["group_state"]) == (0, "Dead")
        # the tombstones: two offsets and the group, in one batch
        lg = lm.get_log(OFFSETS_TOPIC, coord.coordinator_key_partition("empty"))
        last = list(lg.batches(0, FetchIsolation.LOG_END))[-1]
        assert [r.value for r in last.records()] == [None, None, None]
        coord.close()
        lm.shutdown()
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load()
        assert "empty" not in coord.groups and await fetch_all(coord, "empty") == {}
        assert "busy" in coord.groups
        coord.close()
        lm.shutdown()

    asyncio.run(main())


def test_offset_delete(tmp_path):
    """OffsetDelete as Kafka's handleDeleteOffsets: an Empty group loses the offsets asked for (tombstones, so a
    restart agrees); a consumer group with members only those of topics it does not consume; unknown partitions
    and groups are named."""
    from kafkalite.protocol import ApiKey

    def body(group: str, tps: list[tuple[str, int]]) -> dict[str, Any]:
        topics: dict[str, list[dict[str, int]]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append({"partition_index": p})
        return {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

    async def main():
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load()
        offsets = {("a", 0): 1, ("a", 1): 2, ("b", 0): 3}
        await call(coord, COMMIT, 8, commit_body("empty", offsets))
        c = SimConsumer(coord, "busy", {"a": 2}, "c", session_ms=5000)
        await c.join_and_sync()
        await call(coord, COMMIT, 8, commit_body("busy", {("b", 0): 4}))
        resp = await call(coord, ApiKey.OFFSET_DELETE, 0, body("empty", [("a", 1), ("b", 0), ("b", 7)]))
        assert resp["error_code"] == 0 and errors_of(resp) == {("a", 1): 0, ("b", 0): 0, ("b", 7): 0}
        assert await fetch_all(coord, "empty") == {("a", 0): 1}
        resp = await call(coord, ApiKey.OFFSET_DELETE, 0, body("busy", [("a", 0), ("b", 0)]))
        assert resp["error_code"] == 0
        assert errors_of(resp) == {("a", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, ("b", 0): 0}
        assert await fetch_all(coord, "busy") == {}
        resp = await call(coord, ApiKey.OFFSET_DELETE, 0, body("nope", [("a", 0)]))
        assert (resp["error_code"], resp["topics"]) == (ErrorCode.GROUP_ID_NOT_FOUND, [])
        coord.close()
        lm.shutdown()
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load()
        assert await fetch_all(coord, "empty") == {("a", 0): 1} and "empty" in coord.groups
        assert await fetch_all(coord, "busy") == {}
        coord.close()
        lm.shutdown()

    asyncio.run(main())


def test_transactional_offset_commits_replay_on_their_markers(tmp_path):
    lm = manager(tmp_path)
    coord = coordinator(lm)
    lg = coord.topic.log(coord.coordinator_key_partition("txg"))

    def txn(pid: int, partition: int, offset: int) -> bytearray:
        return build_batch([SimpleRecord(encode_offset_commit_key(OffsetCommitKey("txg", "a", partition)),
                                         encode_offset_commit_value(OffsetCommitValue(offset, "", T0)), T0)],
                           producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)

    lg.append_as_leader(txn(7, 0, 70))
    lg.append_as_leader(txn(8, 1, 80))
    lg.append_as_leader(build_end_txn_marker(ControlRecordType.COMMIT, 7, 0, timestamp=T0),
                        origin=AppendOrigin.COORDINATOR)
    lg.append_as_leader(build_end_txn_marker(ControlRecordType.ABORT, 8, 0, timestamp=T0),
                        origin=AppendOrigin.COORDINATOR)
    lg.append_as_leader(build_batch([SimpleRecord(b"\x00\x09junk", b"", T0)]))  # a key version from the future
    coord.load_offline()
    assert {tp: om.offset for tp, om in coord.committed_offsets("txg").items()} == {("a", 0): 70}
    lm.shutdown()


def test_lag_per_partition(tmp_path):
    async def main():
        lm = manager(tmp_path)
        coord = coordinator(lm)
        await coord.load()
        c = SimConsumer(coord, "g", {"t": 3}, "cli", session_ms=5000)
        await c.join_and_sync()
        await call(coord, COMMIT, 8, commit_body("g", {("t", 0): 5, ("t", 1): 9, ("old", 0): 3}, c.generation,
                                                 c.member_id))
        rows = coord.group_lag("g", {("t", 0): 10, ("t", 1): 9, ("t", 2): 4})
        assert [(r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag, r.consumer_id) for r in rows] == [
            ("old", 0, 3, None, None, None),
            ("t", 0, 5, 10, 5, c.member_id),
            ("t", 1, 9, 9, 0, c.member_id),
            ("t", 2, None, 4, None, c.member_id)]
        assert rows[1].host == "/127.0.0.1" and rows[1].client_id == "cli"
        hb = await call(coord, HEARTBEAT, 4, {"group_id": "g", "generation_id": c.generation,
                                              "member_id": c.member_id})
        assert hb["error_code"] == 0
        coord.close()
        lm.shutdown()

    asyncio.run(main())


def test_offsets_topic_is_compacted_and_keeps_its_partition_count(tmp_path):
    lm = manager(tmp_path)
    for p in range(3):  # partitions that exist before the coordinator, opened with the broker defaults
        lm.get_or_create_log(OFFSETS_TOPIC, p)
    assert not lm.get_log(OFFSETS_TOPIC, 0).config.compact
    coord = coordinator(lm)  # asks for 4 partitions; the 3 on disk win, so groups stay where they are
    assert coord.num_partitions == 3
    assert coord.coordinator_key_partition("Hello World") == 862545276 % 3
    assert all(lm.get_log(OFFSETS_TOPIC, p).config.compact for p in range(3))
    assert lm.get_log(OFFSETS_TOPIC, 0).config.segment_bytes == 100 * 1024 * 1024
    lm.shutdown()
    lm = manager(tmp_path)
    coord = coordinator(lm, offsets_topic_num_partitions=2)
    coord.ensure_offsets_topic()
    assert sorted(p for t, p in lm.logs if t == OFFSETS_TOPIC) == [0, 1, 2]
    lm.shutdown()


def test_first_write_creates_the_whole_offsets_topic(tmp_path):
    async def main():
        lm = manager(tmp_path)
        coord = coordinator(lm, offsets_topic_num_partitions=7)
        await coord.load()
        assert not [p for t, p in lm.logs if t == OFFSETS_TOPIC]
        await call(coord, COMMIT, 8, commit_body("g", {("a", 0): 1}))
        # every partition exists, so a restart infers the same count and finds the group where it was
        assert sorted(p for t, p in lm.logs if t == OFFSETS_TOPIC) == list(range(7))
        coord.close()
        lm.shutdown()
        lm = manager(tmp_path)
        coord = coordinator(lm)  # configured for 4 partitions now; the 7 on disk decide
        await coord.load()
        assert coord.num_partitions == 7 and await fetch_all(coord, "g") == {("a", 0): 1}
        coord.close()
        lm.shutdown()

    asyncio.run(main())
