"""The local store (single-broker mode's ClusterStore) keeps its znodes in kafkalite-metadata.json: it reads the
file single-broker kafkalite writes (broker/metadata.py), writes one that version still reads, and its
persistent znodes, versions and creation ids survive a restart while its ephemeral ones do not."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from kafkalite.broker.metadata import MetadataStore, write_partition_topic_id
from kafkalite.client import KafkaClient
from kafkalite.cluster import znodes as z
from kafkalite.cluster.local_store import METADATA_FILE, LocalStore
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol import ApiKey
from kafkalite.records import SimpleRecord, build_batch
from tests.support.brokers import BrokerProcess


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_reads_the_single_broker_file_and_stays_readable_by_it(tmp_path):
    old = MetadataStore(tmp_path)
    a = old.add("orders", 3, {"cleanup.policy": "compact"})
    old.add("logs", 1, {})
    doc = json.loads(old.path.read_text())
    doc["next_producer_id_block"] = 1000  # an older kafkalite handed out ids 0..999
    last_pid = 999
    old.path.write_text(json.dumps(doc))

    async def main():
        s = LocalStore(tmp_path, broker_id=7)
        await s.start()
        try:
            assert sorted(await s.topics()) == ["logs", "orders"]
            orders = await s.topic_assignment("orders")
            assert orders.topic_id == a.topic_id and orders.partitions == {0: [7], 1: [7], 2: [7]}
            assert await s.topic_config("orders") == {"cleanup.policy": "compact"}
            block = await s.next_producer_id_block(7)
            assert block.start > last_pid  # never an id the single broker handed out
            await s.create_topic(z.TopicAssignment("new", uuid.uuid4(), {0: [7], 1: [7]}), {"retention.ms": "5"})
            await s.set_topic_config("logs", {"retention.ms": "9"})
            return block
        finally:
            await s.close()
    block = run(main())
    again = MetadataStore(tmp_path)  # what an older kafkalite reads
    assert {n: (t.partitions, t.configs) for n, t in again.topics.items()} == {
        "orders": (3, {"cleanup.policy": "compact"}), "logs": (1, {"retention.ms": "9"}),
        "new": (2, {"retention.ms": "5"})}
    assert again.topics["orders"].topic_id == a.topic_id
    assert again.producer_id_limit == block.end + 1  # an older kafkalite goes on after the store's ids


def test_the_file_is_json_with_one_znode_a_line(tmp_path):
    """Operators read this file: every znode on a line of its own (it is written with json's C encoder, which
    `indent` turns off), and a path or value with quotes or braces in it still reads back as written."""
    odd = '/config/users/we}, "ird'

    async def main():
        s = LocalStore(tmp_path, 1)
        await s.start()
        try:
            await s.create_topic(z.TopicAssignment("t", uuid.uuid4(), {0: [1], 1: [1]}), {"retention.ms": "5"})
            s.zk.ensure_path(odd)
            s.zk.set(odd, b'{"a": "}, \\"b"}')
        finally:
            await s.close()
    run(main())
    text = (tmp_path / METADATA_FILE).read_text()
    doc = json.loads(text)
    lines = text.splitlines()
    for path in doc["znodes"]:
        assert sum(line.lstrip().startswith(json.dumps(path) + ":") for line in lines) == 1, path
    assert odd in doc["znodes"] and doc["topics"][0]["name"] == "t"

    async def reopened():
        s = LocalStore(tmp_path, 1)
        await s.start()
        try:
            return s.zk.get(odd)[0], await s.topic_config("t")
        finally:
            await s.close()
    assert run(reopened()) == (b'{"a": "}, \\"b"}', {"retention.ms": "5"})


def test_restart_keeps_persistent_znodes_and_drops_ephemeral_ones(tmp_path):
    async def first():
        s = LocalStore(tmp_path, 1)
        await s.start()
        epoch = await s.register_broker(z.BrokerRegistration(1, (z.Endpoint("PLAINTEXT", "h", 1),)))
        lease = await s.elect_controller(1)
        await s.create_topic(z.TopicAssignment("t", uuid.uuid4(), {0: [1]}), {})
        states = await s.create_partition_states(lease, {("t", 0): z.PartitionState(1, 0, (1,), lease.epoch)})
        await s.update_partition_state(lease, "t", 0, z.PartitionState(1, 1, (1,), lease.epoch,
                                                                      states[("t", 0)].zk_version))
        await s.close()
        return epoch, lease

    async def second(epoch, lease):
        s = LocalStore(tmp_path, 1)
        await s.start()
        try:
            assert await s.brokers() == {} and await s.controller_id() is None  # the old session's are gone
            assert await s.register_broker(z.BrokerRegistration(1, (z.Endpoint("PLAINTEXT", "h", 1),))) > epoch
            new_lease = await s.elect_controller(1)
            assert new_lease.epoch == lease.epoch + 1
            state = await s.partition_state("t", 0)
            assert (state.leader_epoch, state.zk_version) == (1, 1)
        finally:
            await s.close()
    run(second(*run(first())))
    doc = json.loads((tmp_path / METADATA_FILE).read_text())
    assert doc["version"] == 1 and "/brokers/topics/t/partitions/0/state" in doc["znodes"]
    assert "/controller" not in doc["znodes"] and not any(p.startswith("/brokers/ids/") for p in doc["znodes"])


def test_isr_changes_of_many_partitions_are_announced_in_nodes_of_a_thousand(tmp_path):
    """A leader that could not announce its ISR changes announces them together later: one node per 1,000
    partitions (a node names ~40 bytes a partition; ZooKeeper refuses nodes over 1 MB)."""
    from kafkalite.cluster.zk_store import ISR_CHANGES_PER_NODE

    async def main():
        s = LocalStore(tmp_path, 1)
        await s.start()
        try:
            wanted = [("t", p) for p in range(2 * ISR_CHANGES_PER_NODE + 500)]
            await s.announce_isr_changes(wanted)
            notes = sorted(s.zk.get_children(z.ISR_CHANGE))
            assert len(notes) == 3
            named = [tp for n in notes for tp in z.decode_isr_change(n, await s.read(f"{z.ISR_CHANGE}/{n}"))]
            assert named == wanted
        finally:
            await s.close()
    run(main())


def test_update_isr_is_a_compare_and_set_then_a_notification(tmp_path):
    """A leader's ISR write (Kafka's zkVersion-conditional ISR update): conditional on the state's version, not
    on a controller lease;
    the leader then announces it with Kafka's /isr_change_notification/isr_change_<seq> node for the
    controller (a separate step: the leader applies its new ISR before that second round trip)."""
    async def main():
        s = LocalStore(tmp_path, 1)
        await s.start()
        try:
            lease = await s.elect_controller(1)
            await s.create_topic(z.TopicAssignment("t", uuid.uuid4(), {0: [1, 2, 3]}), {})
            created = await s.create_partition_states(lease, {("t", 0): z.PartitionState(1, 4, (1, 2, 3), 7)})
            v0 = created[("t", 0)].zk_version
            shrunk = z.PartitionState(1, 4, (1, 2), 7)
            written = await s.update_isr("t", 0, shrunk, v0)
            assert written is not None and written.zk_version == v0 + 1 and written.isr == (1, 2)
            assert await s.partition_state("t", 0) == written
            assert await s.update_isr("t", 0, z.PartitionState(1, 4, (1,), 7), v0) is None  # stale version
            assert (await s.partition_state("t", 0)).isr == (1, 2)
            assert s.zk.get_children(z.ISR_CHANGE) == []
            await s.announce_isr_changes([("t", 0)])
            notes = s.zk.get_children(z.ISR_CHANGE)
            assert len(notes) == 1 and notes[0].startswith("isr_change_")
            data = await s.read(f"{z.ISR_CHANGE}/{notes[0]}")
            assert json.loads(data) == {"version": 1, "partitions": [{"topic": "t", "partition": 0}]}
            assert z.decode_isr_change("n", data) == [("t", 0)]
            await s.delete_isr_change_notifications(lease, [*notes, "isr_change_0000000099"])
            assert s.zk.get_children(z.ISR_CHANGE) == []
        finally:
            await s.close()
    run(main())


@pytest.mark.slow
def test_a_broker_opens_a_data_dir_of_the_single_broker_file_unchanged(tmp_path):
    """`kafkalite serve` without zookeeper.connect runs the controller over this store: a data dir written by
    the single-broker code (MetadataStore's file, logs led at epoch 4) serves the same topic, id, configs and
    leader epochs (not restarted at 0, which would rewrite the logs' epoch history), and stays readable."""
    data = tmp_path / "data"
    data.mkdir()
    info = MetadataStore(data).add("old", 2, {"retention.ms": "3600000"})
    with LogManager(data) as m:
        for p in range(2):
            lg = m.get_or_create_log("old", p)
            lg.append_as_leader(build_batch([SimpleRecord(None, b"old", timestamp=int(time.time() * 1000))]),
                                leader_epoch=4)
            write_partition_topic_id(lg.dir, info.topic_id)
    b = BrokerProcess(data).start()
    try:
        with KafkaClient(b.bootstrap, timeout_s=30) as c:
            (t,) = c.metadata(["old"])["topics"]
            assert t["error_code"] == 0 and t["topic_id"] == info.topic_id, t
            assert [(p["leader_id"], p["leader_epoch"]) for p in t["partitions"]] == [(1, 4), (1, 4)], t
            batch = build_batch([SimpleRecord(None, b"v", timestamp=int(time.time() * 1000))])
            assert c.produce("old", 1, batch)["error_code"] == 0
            res = c.request(ApiKey.DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": 2, "resource_name": "old", "configuration_keys": ["retention.ms"]}]})["results"]
            assert [(e["name"], e["value"]) for e in res[0]["configs"]] == [("retention.ms", "3600000")], res
            assert c.request(ApiKey.DESCRIBE_CLUSTER, {})["controller_id"] == 1  # its own controller
    finally:
        assert b.stop() == 0, b.output()
    again = MetadataStore(data)  # an older kafkalite reads the file the broker rewrote
    assert (again.topics["old"].topic_id, again.topics["old"].partitions, again.topics["old"].configs) == \
        (info.topic_id, 2, {"retention.ms": "3600000"})
    assert "znodes" in json.loads((data / METADATA_FILE).read_bytes())
