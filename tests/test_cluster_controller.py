"""The controller's election rules (Kafka's PartitionLeaderElectionAlgorithms) over both stores (a real ZooKeeper, and
the local store of single-broker mode): brokers are store sessions holding a registration (their requests go nowhere:
nothing here needs them), the controller a real Controller, and every outcome is read back from the partition
states it wrote."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafkalite.cluster import znodes as z
from kafkalite.cluster.controller import Controller, ControllerSettings
from kafkalite.cluster.local_store import LocalStore
from kafkalite.cluster.zk_store import ZkStore
from tests.support.brokers import free_port
from tests.support.cluster import state_becomes as _state_becomes

pytestmark = pytest.mark.cluster


@pytest.fixture(params=["zookeeper", "local"])
def connect(request, tmp_path):
    return request.getfixturevalue("zk_connect") if request.param == "zookeeper" else tmp_path


async def _broker(connect, bid: int) -> ZkStore:
    s = ZkStore(connect, 2000) if isinstance(connect, str) else LocalStore(connect, 1)
    await s.start()
    await s.register_broker(z.BrokerRegistration(bid, (z.Endpoint("PLAINTEXT", "127.0.0.1", free_port()),)))
    return s


async def _controllers(a: ZkStore, b: ZkStore) -> tuple[Controller, Controller]:
    """Controllers on brokers 1 and 2, started half a second apart: broker 1's is elected, 2's stands by."""
    ca, cb = Controller(a, 1), Controller(b, 2)
    ca.start()
    await asyncio.sleep(0.5)
    cb.start()
    return ca, cb


def test_offline_election_keep_last_isr_member_and_unclean_election(connect):
    async def main():
        brokers = {bid: await _broker(connect, bid) for bid in (1, 2, 3, 4)}
        store = brokers[1]

        async def unclean(topic):
            raw = (await store.topic_config(topic)).get("unclean.leader.election.enable")
            return None if raw is None else raw == "true"
        controller = Controller(store, 1, ControllerSettings(unclean_leader_election=False), unclean)
        controller.start()
        try:
            for name, cfg in (("clean", {}), ("unclean", {"unclean.leader.election.enable": "true"})):
                await store.create_topic(z.TopicAssignment(name, uuid.uuid4(), {0: [2, 3, 4], 1: [4, 2, 3]}), cfg)
            for name in ("clean", "unclean"):
                # new partitions: leader = first live replica in assignment order, ISR = live replicas, epoch 0
                await _state_becomes(store, name, 0, (2, (2, 3, 4), 0))
                await _state_becomes(store, name, 1, (4, (4, 2, 3), 0))
            assert controller.active and controller.lease.epoch == 1
            await brokers.pop(2).close()  # its leaders move to the next live ISR member in assignment order
            for name in ("clean", "unclean"):
                await _state_becomes(store, name, 0, (3, (3, 4), 1))
                await _state_becomes(store, name, 1, (4, (4, 3), 1))  # ISR shrink of a follower: epoch + 1
            await brokers.pop(3).close()
            for name in ("clean", "unclean"):
                await _state_becomes(store, name, 0, (4, (4,), 2))
                await _state_becomes(store, name, 1, (4, (4,), 2))
            brokers[2] = await _broker(connect, 2)  # back, but not in sync: no leadership for it
            await asyncio.sleep(1)
            assert (await store.partition_state("clean", 0)).leader == 4
            await brokers.pop(4).close()
            # the last ISR member is kept; without unclean election the partition goes offline ...
            await _state_becomes(store, "clean", 0, (-1, (4,), 3))
            await _state_becomes(store, "clean", 1, (-1, (4,), 3))
            # ... with it (a topic override), the live out-of-sync replica leads, alone in the ISR
            await _state_becomes(store, "unclean", 0, (2, (2,), 3))
            await _state_becomes(store, "unclean", 1, (2, (2,), 3))
            # every state carries the epoch of the controller that wrote it
            assert (await store.partition_state("clean", 0)).controller_epoch == 1
        finally:
            await controller.stop()
            for s in brokers.values():
                await s.close()
    asyncio.run(asyncio.wait_for(main(), 90))


def test_a_second_controller_takes_over_and_the_first_resigns(connect):
    async def main():
        a, b = await _broker(connect, 1), await _broker(connect, 2)
        ca, cb = await _controllers(a, b)
        try:
            await asyncio.sleep(0.5)
            assert ca.active and not cb.active and cb.controller_id == 1
            # broker 1's session ends: 2 is elected with a higher epoch
            await ca.stop()
            await a.close()
            for _ in range(100):
                if cb.active:
                    break
                await asyncio.sleep(0.05)
            assert cb.active and cb.lease.epoch == 2 and await b.controller_id() == 2
        finally:
            await cb.stop()
            await b.close()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_new_controller_takes_dead_replicas_out_of_the_isr(connect):
    """Kafka's replica state machine at failover: replicas on brokers that are not live go offline, so they
    leave the ISR (keeping the last member). The dead broker here is the old controller itself, whose own
    failure no live controller saw: without this its partitions' high watermarks wait on it until the
    leaders' ISR shrink (replica.lag.time.max.ms)."""
    async def main():
        a, b, c = await _broker(connect, 1), await _broker(connect, 2), await _broker(connect, 3)
        ca, cb = await _controllers(a, b)
        try:
            await b.create_topic(z.TopicAssignment("t", uuid.uuid4(), {0: [2, 1, 3], 1: [1, 2, 3]}), {})
            await _state_becomes(b, "t", 0, (2, (2, 1, 3), 0))
            await _state_becomes(b, "t", 1, (1, (1, 2, 3), 0))
            await ca.stop()
            await a.close()
            await _state_becomes(b, "t", 0, (2, (2, 3), 1))  # a follower: out of the ISR
            await _state_becomes(b, "t", 1, (2, (2, 3), 1))  # its leader: elected away
        finally:
            await cb.stop()
            await b.close()
            await c.close()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_move_outlives_its_controller_and_completes_when_the_targets_are_in_sync(connect):
    """A reassignment's sets live in the topic's znode: a controller elected while a move is in flight lists it
    even when asked the moment it is elected (the request waits for its failover, which reads the assignments),
    and completes it once the leader reports every target replica in the ISR: the leader, being removed, hands
    over to the first target replica in sync, the ISR and the assignment lose it, the leader epoch goes up."""
    async def main():
        a, b, c = await _broker(connect, 1), await _broker(connect, 2), await _broker(connect, 3)
        ca, cb = await _controllers(a, b)
        try:
            await b.create_topic(z.TopicAssignment("t", uuid.uuid4(), {0: [1, 2]}), {})
            await _state_becomes(b, "t", 0, (1, (1, 2), 0))
            assert await ca.alter_reassignments({("t", 0): [1, 3], ("t", 5): [1, 2], ("nope", 0): [1]}) == {
                ("t", 0): (0, None), ("t", 5): (3, "The partition does not exist."),
                ("nope", 0): (3, "The partition does not exist.")}
            assignment = await b.topic_assignment("t")
            assert (assignment.partitions, assignment.adding, assignment.removing) == ({0: [1, 3, 2]}, {0: [3]},
                                                                                       {0: [2]})
            assert (await ca.alter_reassignments({("t", 0): [1, 9]}))[("t", 0)][0] == 39  # broker 9 is not alive
            await ca.stop()
            await a.close()
            for _ in range(400):
                if cb.active:
                    break
                await asyncio.sleep(0.005)
            listed = await cb.list_reassignments(None)  # asked at once
            assert {tp: (s.replicas, s.adding, s.removing) for tp, s in listed.items()} == {
                ("t", 0): ((1, 3, 2), (3,), (2,))}, listed
            # broker 1 is dead now: the move waits (its target [1, 3] needs 1 in sync); bring it back as leader
            # of an ISR with 3 in it, as a leader that took 3 in would write it
            a = await _broker(connect, 1)
            # the move's start bumped the epoch (1); 1 left the ISR when it died and 2 leads (2)
            state = await _state_becomes(b, "t", 0, (2, (2,), 2))
            written = await b.update_isr("t", 0, z.PartitionState(2, 2, (2, 1, 3), state.controller_epoch,
                                                                   state.zk_version), state.zk_version)
            assert written is not None
            await b.announce_isr_changes([("t", 0)])
            await _state_becomes(b, "t", 0, (1, (1, 3), 3))  # leader 2 is removed: the first target in sync leads
            assignment = await b.topic_assignment("t")
            assert (assignment.partitions, assignment.adding, assignment.removing) == ({0: [1, 3]}, {}, {})
            assert await cb.list_reassignments(None) == {}
            assert (await cb.alter_reassignments({("t", 0): None}))[("t", 0)][0] == 85  # nothing to cancel
        finally:
            await cb.stop()
            for s in (a, b, c):
                await s.close()
    asyncio.run(asyncio.wait_for(main(), 90))


def test_new_partitions_and_a_move_of_the_same_topic_keep_each_other(connect):
    """CreatePartitions (a broker's conditional write of the topic znode) keeps the replica sets of a move in
    flight, and a move written right after new partitions, before the controller has read them, keeps them."""
    async def main():
        a, b = await _broker(connect, 1), await _broker(connect, 2)
        ca = Controller(a, 1)
        ca.start()
        try:
            await a.create_topic(z.TopicAssignment("t", uuid.uuid4(), {0: [1, 2]}), {})
            await _state_becomes(a, "t", 0, (1, (1, 2), 0))
            # a move that cannot finish (nothing fetches here): its sets stay in the znode
            assert await ca.alter_reassignments({("t", 0): [2, 1]}) == {("t", 0): (0, None)}
            assert await ca.alter_reassignments({("t", 0): [1, 2, 3]}) == {("t", 0): (39, (
                "Replica assignment has brokers that are not alive. Replica list: [1, 2, 3], live broker list: "
                "[1, 2]"))}
            await a.create_topic(z.TopicAssignment("u", uuid.uuid4(), {0: [1]}), {})
            await _state_becomes(a, "u", 0, (1, (1,), 0))
            assert await ca.alter_reassignments({("u", 0): [2, 1]}) == {("u", 0): (0, None)}
            moving = await a.topic_assignment("u")
            await b.add_partitions(z.TopicAssignment("u", moving.topic_id, {0: [1], 1: [2]}), 1)
            got = await a.topic_assignment("u")
            assert (got.partitions, got.adding) == ({0: [2, 1], 1: [2]}, {0: [2]}), got
            # a move of "t" written at once, before the controller has seen t's new partition
            t = await a.topic_assignment("t")
            await b.add_partitions(z.TopicAssignment("t", t.topic_id, {**t.partitions, 1: [2, 1]}), 1)
            assert await ca.alter_reassignments({("t", 0): [1, 2]}) == {("t", 0): (0, None)}  # back: a cancel
            got = await a.topic_assignment("t")
            assert got.partitions == {0: [1, 2], 1: [2, 1]} and not got.adding, got
            await _state_becomes(a, "t", 1, (2, (2, 1), 0))  # the new partition got its leader
        finally:
            await ca.stop()
            await a.close()
            await b.close()
    asyncio.run(asyncio.wait_for(main(), 60))
