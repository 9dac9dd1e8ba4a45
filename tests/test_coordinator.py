"""The classic rebalance protocol through GroupCoordinator.handle: joins, syncs, heartbeats, leaves,
session and rebalance timeouts, the initial delay, MEMBER_ID_REQUIRED, static membership, versions."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from kafkalite.coordinator import GroupCoordinator
from kafkalite.coordinator.consumer_protocol import encode_assignment, encode_subscription
from kafkalite.error_codes import ErrorCode
from tests.support.coordinator import (
    DESCRIBE,
    HEARTBEAT,
    JOIN,
    LEAVE,
    LIST,
    SYNC,
    SimConsumer,
    coordinator,
    eventually,
    manager,
    stable_and_covering,
)

TOPICS = {"t": 6}


def join_body(group: str = "g", member_id: str = "", session: int = 300, rebalance: int = 1000,
              instance: str | None = None, protocols: list[tuple[str, bytes]] | None = None,
              protocol_type: str = "consumer") -> dict[str, Any]:
    protocols = protocols if protocols is not None else [("range", encode_subscription(["t"]))]
    return {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": protocol_type,
            "protocols": [{"name": n, "metadata": m} for n, m in protocols], "reason": None}


def run(tmp_path, scenario, **props: Any) -> None:
    """Run an async scenario against a loaded coordinator over a real LogManager in tmp_path."""
    async def main() -> None:
        lm = manager(tmp_path)
        coord = coordinator(lm, **props)
        await coord.load()
        try:
            await scenario(coord)
        finally:
            coord.close()
            lm.shutdown()

    asyncio.run(main())


async def call(coord: GroupCoordinator, api: int, version: int, body: dict[str, Any],
               client: str = "client") -> dict[str, Any]:
    return await coord.handle(api, version, body, client, "127.0.0.1")


async def stop(*consumers: SimConsumer) -> None:
    for c in consumers:
        await c.kill()


def test_three_members_six_partitions_disjoint_complete_assignment(tmp_path):
    async def scenario(coord):
        consumers = [SimConsumer(coord, "g", TOPICS, f"c{i}").start() for i in range(3)]
        await eventually(lambda: stable_and_covering(coord, "g", consumers, TOPICS), what="3-member Stable group")
        group = coord.groups["g"]
        assert group.generation_id == 1  # the initial delay gathered all three into one generation
        assert sorted(len(c.owned()) for c in consumers) == [2, 2, 2]
        assert all(c.joins == 1 for c in consumers)
        # the assignment the leader sent is what each member got, and what DescribeGroups shows
        described = (await call(coord, DESCRIBE, 5, {"groups": ["g"], "include_authorized_operations": False}))
        d = described["groups"][0]
        assert (d["error_code"], d["group_state"], d["protocol_type"], d["protocol_data"]) == \
            (0, "Stable", "consumer", "range")
        by_id = {m["member_id"]: m for m in d["members"]}
        for c in consumers:
            m = by_id[c.member_id]
            assert m["member_assignment"] == encode_assignment(c.assignment)
            assert m["member_metadata"] == encode_subscription(["t"])
            assert (m["client_id"], m["client_host"]) == (c.client_id, "/127.0.0.1")
        listed = await call(coord, LIST, 4, {"states_filter": ["stable"]})
        assert listed["groups"] == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable",
                                     "group_type": "classic"}]
        assert (await call(coord, LIST, 4, {"states_filter": ["Empty"]}))["groups"] == []
        await stop(*consumers)

    run(tmp_path, scenario)


@pytest.mark.slow
def test_join_leave_and_kill_each_rebalance_to_stable(tmp_path):
    async def scenario(coord):
        consumers = [SimConsumer(coord, "g", TOPICS, f"c{i}").start() for i in range(3)]
        await eventually(lambda: stable_and_covering(coord, "g", consumers, TOPICS), what="first Stable")
        gen = coord.groups["g"].generation_id

        consumers.append(SimConsumer(coord, "g", TOPICS, "c3").start())  # a member joins
        await eventually(lambda: stable_and_covering(coord, "g", consumers, TOPICS), what="Stable after a join")
        assert coord.groups["g"].generation_id == gen + 1
        assert sorted(len(c.owned()) for c in consumers) == [1, 1, 2, 2]

        leaving = consumers.pop(0)  # a member leaves (LeaveGroup v5)
        resp = await leaving.leave()
        assert resp["error_code"] == 0 and resp["members"][0]["error_code"] == 0
        await eventually(lambda: stable_and_covering(coord, "g", consumers, TOPICS), what="Stable after a leave")
        assert coord.groups["g"].generation_id == gen + 2

        killed = consumers.pop(0)  # a member dies: no heartbeats, no LeaveGroup
        started = time.monotonic()
        await killed.kill()
        await eventually(lambda: stable_and_covering(coord, "g", consumers, TOPICS), what="Stable after a kill")
        assert time.monotonic() - started >= killed.session_ms / 1000 * 0.9
        assert killed.member_id not in coord.groups["g"].members
        assert coord.groups["g"].generation_id == gen + 3
        await stop(*consumers)

    run(tmp_path, scenario)


def test_member_id_required_round_trip(tmp_path):
    async def scenario(coord):
        first = await call(coord, JOIN, 4, join_body(), client="my-client")
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        member_id = first["member_id"]
        assert member_id.startswith("my-client-") and len(member_id) == len("my-client-") + 36
        assert first["generation_id"] == -1 and first["protocol_name"] == "" and first["members"] == []
        group = coord.groups["g"]
        assert member_id in group.pending_join_members and not group.members
        second = await call(coord, JOIN, 4, join_body(member_id=member_id), client="my-client")
        assert (second["error_code"], second["member_id"], second["leader"], second["generation_id"]) == \
            (0, member_id, member_id, 1)
        assert [m["member_id"] for m in second["members"]] == [member_id]
        # v3 and older join at once: no round trip
        old = await call(coord, JOIN, 3, join_body(group="g2"), client="old")
        assert old["error_code"] == 0 and old["member_id"].startswith("old-")

    run(tmp_path, scenario)


def test_pending_member_that_never_returns_expires(tmp_path):
    async def scenario(coord):
        resp = await call(coord, JOIN, 7, join_body(session=100))
        pending = resp["member_id"]
        assert pending in coord.groups["g"].pending_join_members
        await eventually(lambda: not coord.groups["g"].pending_join_members, timeout=2, what="pending expiry")
        late = await call(coord, JOIN, 7, join_body(member_id=pending))
        assert late["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID

    run(tmp_path, scenario)


@pytest.mark.slow
def test_initial_rebalance_delay_gathers_late_joiners(tmp_path):
    async def scenario(coord):
        started = time.monotonic()
        first = asyncio.ensure_future(call(coord, JOIN, 3, join_body(rebalance=5000)))
        await asyncio.sleep(0.1)
        assert not first.done()
        second = asyncio.ensure_future(call(coord, JOIN, 3, join_body(rebalance=5000)))
        a, b = await asyncio.gather(first, second)
        elapsed = time.monotonic() - started
        # the delay restarted when the second member arrived: two delays, one generation
        assert 0.45 <= elapsed < 2.0
        assert a["generation_id"] == b["generation_id"] == 1
        assert a["leader"] == b["leader"] == a["member_id"]
        assert len(a["members"]) == 2 and b["members"] == []

    run(tmp_path, scenario, group_initial_rebalance_delay_ms=250)


@pytest.mark.slow
def test_rebalance_timeout_drops_members_that_do_not_rejoin(tmp_path):
    async def scenario(coord):
        a = asyncio.ensure_future(call(coord, JOIN, 3, join_body(session=5000, rebalance=300), client="a"))
        b = asyncio.ensure_future(call(coord, JOIN, 3, join_body(session=5000, rebalance=300), client="b"))
        ja, jb = await asyncio.gather(a, b)
        leader = ja if ja["leader"] == ja["member_id"] else jb
        follower = jb if leader is ja else ja
        gen = leader["generation_id"]
        sync_f = asyncio.ensure_future(call(coord, SYNC, 3, {
            "group_id": "g", "generation_id": gen, "member_id": follower["member_id"], "assignments": []}))
        sync_l = await call(coord, SYNC, 3, {
            "group_id": "g", "generation_id": gen, "member_id": leader["member_id"],
            "assignments": [{"member_id": leader["member_id"], "assignment": b"L"},
                            {"member_id": follower["member_id"], "assignment": b"F"}]})
        assert sync_l["assignment"] == b"L" and (await sync_f)["assignment"] == b"F"
        # the leader rejoins (asks for a rebalance); the follower's session is long but it never rejoins
        started = time.monotonic()
        rejoin = await call(coord, JOIN, 3, join_body(member_id=leader["member_id"], session=5000, rebalance=300))
        assert time.monotonic() - started >= 0.25
        assert rejoin["generation_id"] == gen + 1
        assert [m["member_id"] for m in rejoin["members"]] == [leader["member_id"]]
        hb = await call(coord, HEARTBEAT, 3, {"group_id": "g", "generation_id": gen,
                                              "member_id": follower["member_id"]})
        assert hb["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID

    run(tmp_path, scenario)


@pytest.mark.slow
def test_member_that_never_syncs_is_removed(tmp_path):
    async def scenario(coord):
        a = asyncio.ensure_future(call(coord, JOIN, 3, join_body(session=5000, rebalance=300)))
        b = asyncio.ensure_future(call(coord, JOIN, 3, join_body(session=5000, rebalance=300)))
        ja, jb = await asyncio.gather(a, b)
        leader, follower = (ja, jb) if ja["leader"] == ja["member_id"] else (jb, ja)
        await call(coord, SYNC, 3, {"group_id": "g", "generation_id": 1, "member_id": leader["member_id"],
                                    "assignments": []})
        assert str(coord.groups["g"].state) == "Stable"
        # the follower never sends SyncGroup: after the rebalance timeout it is out and the group rebalances
        await eventually(lambda: follower["member_id"] not in coord.groups["g"].members, timeout=3,
                         what="pending sync expiry")
        assert str(coord.groups["g"].state) == "PreparingRebalance"

    run(tmp_path, scenario)


def test_heartbeat_errors(tmp_path):
    async def scenario(coord):
        hb = {"group_id": "nope", "generation_id": 1, "member_id": "m"}
        assert (await call(coord, HEARTBEAT, 4, hb))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        consumers = [SimConsumer(coord, "g", TOPICS, f"c{i}").start() for i in range(2)]
        await eventually(lambda: stable_and_covering(coord, "g", consumers, TOPICS), what="Stable")
        await stop(*consumers)
        c = consumers[0]
        ok = {"group_id": "g", "generation_id": c.generation, "member_id": c.member_id}
        assert (await call(coord, HEARTBEAT, 4, ok))["error_code"] == 0
        assert (await call(coord, HEARTBEAT, 4, {**ok, "generation_id": 99}))["error_code"] == \
            ErrorCode.ILLEGAL_GENERATION
        assert (await call(coord, HEARTBEAT, 4, {**ok, "member_id": "x"}))["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
        assert (await call(coord, HEARTBEAT, 4, {**ok, "group_id": ""}))["error_code"] == ErrorCode.INVALID_GROUP_ID
        # a new member starts a rebalance: the others learn it from their heartbeats
        pending = asyncio.ensure_future(call(coord, JOIN, 3, join_body(session=5000)))
        await eventually(lambda: str(coord.groups["g"].state) == "PreparingRebalance", what="rebalance")
        assert (await call(coord, HEARTBEAT, 4, ok))["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS
        pending.cancel()

    run(tmp_path, scenario)


def test_protocol_and_parameter_checks(tmp_path):
    async def scenario(coord):
        bad = await call(coord, JOIN, 5, join_body(protocols=[]))
        assert bad["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await call(coord, JOIN, 5, join_body(protocol_type="")))["error_code"] == \
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await call(coord, JOIN, 5, join_body(session=5)))["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await call(coord, JOIN, 5, join_body(group="")))["error_code"] == ErrorCode.INVALID_GROUP_ID
        assert (await call(coord, JOIN, 5, join_body(group="fresh", member_id="ghost")))["error_code"] == \
            ErrorCode.UNKNOWN_MEMBER_ID
        first = await call(coord, JOIN, 3, join_body(group="p"))
        assert first["error_code"] == 0
        # a second member that shares no protocol with the group, or has another protocol type
        other = await call(coord, JOIN, 3, join_body(group="p", protocols=[("roundrobin", b"")]))
        assert other["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        other = await call(coord, JOIN, 3, join_body(group="p", protocol_type="connect"))
        assert other["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        sync = await call(coord, SYNC, 5, {"group_id": "p", "generation_id": 1, "member_id": first["member_id"],
                                           "protocol_type": "consumer", "protocol_name": "roundrobin",
                                           "assignments": []})
        assert sync["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        sync = await call(coord, SYNC, 5, {"group_id": "p", "generation_id": 1, "member_id": first["member_id"],
                                           "protocol_type": "consumer", "protocol_name": "range",
                                           "assignments": [{"member_id": first["member_id"], "assignment": b"x"}]})
        assert (sync["error_code"], sync["protocol_type"], sync["protocol_name"], sync["assignment"]) == \
            (0, "consumer", "range", b"x")
        # JoinGroup v7+ reports a missing protocol name as null, older versions as ""
        assert (await call(coord, JOIN, 7, join_body(group="")))["protocol_name"] is None

    run(tmp_path, scenario)


@pytest.mark.slow
def test_static_member_rejoin_keeps_assignment_without_rebalance(tmp_path):
    async def scenario(coord):
        static = SimConsumer(coord, "g", TOPICS, "s", version=7, instance_id="instance-1", session_ms=1000).start()
        dynamic = SimConsumer(coord, "g", TOPICS, "d", version=7, session_ms=1000).start()
        both = [static, dynamic]
        await eventually(lambda: stable_and_covering(coord, "g", both, TOPICS), what="Stable")
        group = coord.groups["g"]
        gen, old_id, old_assignment = group.generation_id, static.member_id, static.owned()
        assert old_id.startswith("instance-1-")
        # the static member restarts: a fresh process, no member id, same group.instance.id
        await static.kill()
        restarted = SimConsumer(coord, "g", TOPICS, "s", version=7, instance_id="instance-1", session_ms=1000)
        await restarted.join_and_sync()
        assert restarted.member_id != old_id and restarted.member_id.startswith("instance-1-")
        assert group.generation_id == gen and str(group.state) == "Stable"  # no rebalance
        assert restarted.owned() == old_assignment
        assert group.static_members == {"instance-1": restarted.member_id}
        # the old incarnation is fenced
        hb = await call(coord, HEARTBEAT, 4, {"group_id": "g", "generation_id": gen, "member_id": old_id,
                                              "group_instance_id": "instance-1"})
        assert hb["error_code"] == ErrorCode.FENCED_INSTANCE_ID
        restarted.start()
        await asyncio.sleep(0.2)
        assert group.generation_id == gen and dynamic.errors == []
        # LeaveGroup by instance id alone (as an admin would) removes it and triggers a rebalance
        resp = await call(coord, LEAVE, 4, {"group_id": "g", "members": [
            {"member_id": "", "group_instance_id": "instance-1"}]})
        assert resp["members"] == [{"member_id": "", "group_instance_id": "instance-1", "error_code": 0}]
        await restarted.kill()
        await eventually(lambda: stable_and_covering(coord, "g", [dynamic], TOPICS), what="Stable without it")
        await stop(dynamic)

    run(tmp_path, scenario)


def test_static_leader_rejoin_with_v9_skips_assignment(tmp_path):
    async def scenario(coord):
        first = await call(coord, JOIN, 9, join_body(instance="i1", session=5000))
        assert first["error_code"] == 0 and first["leader"] == first["member_id"]
        await call(coord, SYNC, 5, {"group_id": "g", "generation_id": 1, "member_id": first["member_id"],
                                    "group_instance_id": "i1", "protocol_type": "consumer",
                                    "protocol_name": "range",
                                    "assignments": [{"member_id": first["member_id"], "assignment": b"A"}]})
        again = await call(coord, JOIN, 9, join_body(instance="i1", session=5000))
        assert again["member_id"] != first["member_id"]
        assert (again["leader"], again["skip_assignment"], again["generation_id"]) == (again["member_id"], True, 1)
        assert len(again["members"]) == 1
        # an older client is told the old leader id, so it does not run the assignment again
        old = await call(coord, JOIN, 7, join_body(instance="i1", session=5000))
        assert (old["leader"], old["skip_assignment"], old["members"]) == (again["member_id"], False, [])
        sync = await call(coord, SYNC, 5, {"group_id": "g", "generation_id": 1, "member_id": old["member_id"],
                                           "group_instance_id": "i1", "assignments": []})
        assert sync["assignment"] == b"A"

    run(tmp_path, scenario)


def test_leave_group_versions(tmp_path):
    async def scenario(coord):
        a = await call(coord, JOIN, 3, join_body(session=5000))
        assert (await call(coord, LEAVE, 0, {"group_id": "g", "member_id": "unknown"}))["error_code"] == \
            ErrorCode.UNKNOWN_MEMBER_ID
        assert (await call(coord, LEAVE, 5, {"group_id": "nope", "members": [{"member_id": "x"}]}))["members"] == \
            [{"member_id": "x", "group_instance_id": None, "error_code": ErrorCode.UNKNOWN_MEMBER_ID}]
        batched = await call(coord, LEAVE, 3, {"group_id": "g", "members": [
            {"member_id": a["member_id"], "group_instance_id": None}, {"member_id": "zzz", "group_instance_id": None}]})
        assert batched["error_code"] == 0
        assert [m["error_code"] for m in batched["members"]] == [0, ErrorCode.UNKNOWN_MEMBER_ID]
        group = coord.groups["g"]
        await eventually(lambda: str(group.state) == "Empty", what="Empty after the last member left")
        assert group.generation_id == 2 and group.protocol_name is None
        assert (await call(coord, LEAVE, 1, {"group_id": "g", "member_id": a["member_id"]}))["error_code"] == \
            ErrorCode.UNKNOWN_MEMBER_ID

    run(tmp_path, scenario)


def test_requests_before_load_and_after_close(tmp_path):
    async def main():
        lm = manager(tmp_path)
        coord = coordinator(lm)
        assert (await call(coord, JOIN, 5, join_body()))["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert (await call(coord, HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "m"}))[
            "error_code"] == 0  # heartbeats are answered blindly while loading, as in Kafka
        fetch = await call(coord, 9, 8, {"groups": [{"group_id": "g", "topics": None}], "require_stable": False})
        assert fetch["groups"][0]["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await coord.load()
        parked = asyncio.ensure_future(call(coord, JOIN, 3, join_body()))
        await asyncio.sleep(0.01)
        assert not parked.done()
        coord.close()  # a parked JoinGroup is answered so the client looks for the coordinator again
        assert (await parked)["error_code"] == ErrorCode.NOT_COORDINATOR
        assert (await call(coord, JOIN, 5, join_body()))["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        lm.shutdown()

    asyncio.run(main())
