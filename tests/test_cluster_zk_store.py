"""Both cluster stores, the ZooKeeper backend against a real ZooKeeper and the local (single-broker, file-backed)
one: epochs, elections and fencing, conditional writes, producer-id blocks, watches. Same tests, same
outcomes: the controller's code cannot tell them apart."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

from kafkalite.cluster import znodes as z
from kafkalite.cluster.local_store import LocalStore
from kafkalite.cluster.zk_store import ZkStore, split_connect
from kafkalite.errors import KafkaliteError, NotControllerError, TopicAlreadyExistsError

pytestmark = pytest.mark.cluster


def reg(broker_id: int, port: int = 9092) -> z.BrokerRegistration:
    return z.BrokerRegistration(broker_id, (z.Endpoint("PLAINTEXT", "127.0.0.1", port),))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(params=["zookeeper", "local"])
def new_store(request, tmp_path):
    """A factory of unstarted stores sharing one cluster (each store is one session)."""
    if request.param == "zookeeper":
        connect = request.getfixturevalue("zk_connect")
        return lambda: ZkStore(connect, 3000)
    return lambda: LocalStore(tmp_path, 1)


def test_split_connect():
    assert split_connect("a:1,b:2/kl/x") == ("a:1,b:2", "/kl/x")
    assert split_connect("a:1") == ("a:1", "")


def test_broker_epochs_grow_and_ids_are_unique(new_store):
    async def main():
        a, b = new_store(), new_store()
        await a.start()
        await b.start()
        try:
            e1 = await a.register_broker(reg(1))
            with pytest.raises(KafkaliteError, match=r"broker\.id 1 is already registered"):
                await b.register_broker(reg(1, 9099))  # other endpoints: another broker, refused at once
            e2 = await b.register_broker(reg(2, 9093))
            assert e2 > e1 > 0
            live = await a.brokers()
            assert sorted(live) == [1, 2] and live[1].epoch == e1 and live[2].endpoint().port == 9093
            await b.close()  # its session ends: the registration goes with it
            assert sorted(await a.brokers()) == [1]
            c = new_store()
            await c.start()
            assert await c.register_broker(reg(2, 9093)) > e2  # a returning broker has a newer epoch
            await c.close()
            assert await a.get_or_create_cluster_id("abc") == "abc"
            assert await a.get_or_create_cluster_id("other") == "abc"
        finally:
            await a.close()
            await b.close()
    run(main())


@pytest.mark.slow
def test_a_registration_with_our_endpoints_held_by_a_live_session_is_refused_after_the_wait(zk_connect):
    """The same endpoints may be this broker's own dead session (waited out) or a live one: once the wait is over
    and the registration is still there, the broker refuses to start, naming the session."""
    async def main():
        a, b = ZkStore(zk_connect, 2000), ZkStore(zk_connect, 2000)
        await a.start()
        await b.start()
        try:
            await a.register_broker(reg(5))
            t0 = asyncio.get_running_loop().time()
            with pytest.raises(KafkaliteError, match=r"broker\.id 5 is already registered .*still held by ZooKeeper "
                                                     r"session 0x[0-9a-f]+\) by a running broker"):
                await b.register_broker(reg(5))
            assert 2 * 1.5 + 5 - 1 < asyncio.get_running_loop().time() - t0 < 2 * 1.5 + 5 + 5
        finally:
            await b.close()
            await a.close()
    run(main())


def test_election_and_fencing_of_a_replaced_controller(new_store):
    async def main():
        a, b = new_store(), new_store()
        await a.start()
        await b.start()
        try:
            lease_a = await a.elect_controller(1)
            assert lease_a is not None and lease_a.epoch == 1
            assert await b.elect_controller(2) is None and await b.controller_id() == 1
            topic = z.TopicAssignment("t", uuid.uuid4(), {0: [1, 2]})
            await b.create_topic(topic, {"cleanup.policy": "compact"})
            with pytest.raises(TopicAlreadyExistsError):
                await a.create_topic(topic, {})
            assert await a.topic_config("t") == {"cleanup.policy": "compact"}
            states = await a.create_partition_states(lease_a, {("t", 0): z.PartitionState(1, 0, (1, 2), 1)})
            s0 = states[("t", 0)]
            s1 = await a.update_partition_state(lease_a, "t", 0, z.PartitionState(2, 1, (2,), 1, s0.zk_version))
            assert s1 is not None and s1.zk_version == s0.zk_version + 1
            # compare-and-set: a write based on the old version is refused
            assert await a.update_partition_state(lease_a, "t", 0, z.PartitionState(1, 2, (1,), 1, 0)) is None
            await a.close()  # controller 1 goes away: 2 takes over with a higher epoch
            lease_b = await b.elect_controller(2)
            assert lease_b is not None and lease_b.epoch == 2 and await b.controller_id() == 2
            # a zombie holding the old lease (here: a new session with controller 1's lease) is fenced
            zombie = new_store()
            await zombie.start()
            with pytest.raises(NotControllerError):
                await zombie.update_partition_state(lease_a, "t", 0, z.PartitionState(1, 9, (1,), 1, s1.zk_version))
            with pytest.raises(NotControllerError):
                await zombie.delete_topic(lease_a, "t")
            await zombie.close()
            state = await b.partition_state("t", 0)
            assert state is not None and state.leader == 2 and state.leader_epoch == 1
            await b.request_topic_deletion("t")
            assert await b.topics_to_delete() == ["t"]
            await b.delete_topic(lease_b, "t")
            assert await b.topics() == [] and await b.topics_to_delete() == [] and await b.topic_config("t") == {}
        finally:
            await a.close()
            await b.close()
    run(main())


def test_partition_states_of_a_topic_in_one_pipelined_read(new_store):
    """A controller's failover reads every state of a topic at once (more than one window of pipelined reads);
    a partition without a state yet comes back as None, and a state written in between is read fresh. Topics
    appear and go in between, so the children of /brokers/topics are listed fresh each time too."""
    from kafkalite.cluster.zk_store import STATE_READ_WINDOW

    n = STATE_READ_WINDOW + 7

    async def main():
        a = new_store()
        await a.start()
        try:
            lease = await a.elect_controller(1)
            assert lease is not None
            assert await a.topics() == []
            await a.create_topic(z.TopicAssignment("t", uuid.uuid4(), {p: [1] for p in range(n)}), {})
            assert await a.topics() == ["t"]
            await a.create_partition_states(lease, {("t", p): z.PartitionState(1, p % 5, (1,), 1)
                                                    for p in range(n - 1)})
            states = await a.partition_states("t", range(n))
            assert list(states) == list(range(n)) and states[n - 1] is None
            assert all(states[p] is not None and states[p].leader_epoch == p % 5 for p in range(n - 1))
            assert states[3] == await a.partition_state("t", 3)
            s3 = states[3]
            assert s3 is not None
            await a.update_partition_state(lease, "t", 3, z.PartitionState(1, 9, (1,), 1, s3.zk_version))
            again = await a.partition_states("t", [3, n - 1])
            assert again[3] is not None and again[3].leader_epoch == 9 and again[n - 1] is None
            await a.create_topic(z.TopicAssignment("u", uuid.uuid4(), {0: [1]}), {})
            assert await a.topics() == ["t", "u"]
            await a.delete_topic(lease, "t")
            assert await a.topics() == ["u"]
        finally:
            await a.close()
    run(main())


def test_producer_id_blocks_are_unique_across_brokers(new_store):
    async def main():
        stores = [new_store() for _ in range(3)]
        for s in stores:
            await s.start()
        try:
            blocks = await asyncio.gather(*(s.next_producer_id_block(i) for i, s in enumerate(stores)
                                            for _ in range(4)))
            starts = sorted(b.start for b in blocks)
            assert starts == [i * z.PRODUCER_ID_BLOCK_SIZE for i in range(12)]
            assert all(b.end == b.start + 999 for b in blocks)
        finally:
            for s in stores:
                await s.close()
    run(main())


def test_watches_run_on_the_event_loop(new_store):
    async def main():
        s = new_store()
        await s.start()
        seen: list[tuple[str, object]] = []
        loop_thread = threading.get_ident()
        changed = asyncio.Event()

        def on_children(children):
            assert threading.get_ident() == loop_thread
            seen.append(("children", sorted(children)))
            changed.set()

        def on_data(data):
            assert threading.get_ident() == loop_thread
            seen.append(("data", data))
            changed.set()
        try:
            s.watch_children(z.BROKER_IDS, on_children)
            s.watch_data(z.CONTROLLER, on_data)
            await s.register_broker(reg(5))
            await s.elect_controller(5)
            for _ in range(50):
                if ("children", ["5"]) in seen and any(k == "data" and v for k, v in seen):
                    break
                changed.clear()
                await asyncio.wait_for(changed.wait(), 5)
            assert ("children", []) in seen and ("children", ["5"]) in seen
            last = next(v for k, v in reversed(seen) if k == "data")
            assert ("data", None) in seen and z.decode_controller(last) == 5
            path = await s.create_sequential(f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}", b"{}")
            assert path.startswith(f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}") and path[-10:].isdigit()
        finally:
            await s.close()
    run(main())


def test_unreachable_zookeeper_is_named():
    from tests.support.brokers import free_port

    async def main():
        s = ZkStore(f"127.0.0.1:{free_port()}/kl", 2000, 1000)
        with pytest.raises(KafkaliteError, match=r"cannot connect to ZooKeeper at 127.0.0.1:\d+ \(zookeeper.connect\)"):
            await s.start()
    run(main())


def test_a_controller_topic_write_keeps_partitions_another_broker_added_meanwhile(zk_connect):
    """The controller's change of a topic's znode (a reassignment's replica sets) is conditional on the version it
    read: a CreatePartitions landing between its read and its write (here, from inside the change) makes it read
    and change again instead of writing the old partition list back over the new partition."""
    async def main():
        a, b = ZkStore(zk_connect, 3000), ZkStore(zk_connect, 3000)
        await a.start()
        await b.start()
        loop = asyncio.get_running_loop()
        seen: list[list[int]] = []
        try:
            lease = await a.elect_controller(1)
            assert lease is not None
            await b.create_topic(z.TopicAssignment("t", uuid.uuid4(), {0: [1, 2], 1: [2, 1]}), {})

            def change(t: z.TopicAssignment) -> z.TopicAssignment:
                seen.append(sorted(t.partitions))
                if len(seen) == 1:  # another broker's CreatePartitions, between this read and its write
                    grown = z.TopicAssignment("t", t.topic_id, {**t.partitions, 2: [1, 2]})
                    asyncio.run_coroutine_threadsafe(b.add_partitions(grown, 2), loop).result(30)
                return z.TopicAssignment("t", t.topic_id, {**t.partitions, 0: [3, 1, 2]}, adding={0: [3]},
                                         removing={0: [2]})
            written = await a.update_topic_assignment(lease, "t", change)
            assert seen == [[0, 1], [0, 1, 2]]
            got = await b.topic_assignment("t")
            assert got == written and got is not None
            assert got.partitions == {0: [3, 1, 2], 1: [2, 1], 2: [1, 2]}
            assert got.adding == {0: [3]} and got.removing == {0: [2]}
            assert await a.update_topic_assignment(lease, "gone", lambda t: t) is None
        finally:
            await a.close()
            await b.close()
    run(main())
