"""kafkalite.client against real broker processes: bootstrap lists, the metadata view, retries on the errors and
disconnects Kafka's clients retry, and Produce outcomes that cannot be known.

Routing to a leader other than the bootstrap broker, and the NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
refreshes, need brokers that share metadata (the cluster of issue 14); these tests cover what one broker
per process can show for real."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest

from kafkalite.client import BrokerInfo, KafkaClient, KafkaClientError, ProduceOutcomeUnknown
from kafkalite.protocol import ErrorCode
from kafkalite.records import SimpleRecord, build_batch
from tests.support.brokers import BrokerProcess, free_port


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"num.partitions": 1}).start()
    yield b
    if b.proc is not None and b.proc.poll() is None:
        assert b.stop() == 0, b.output()


def batch(value: bytes) -> bytes:
    return bytes(build_batch([SimpleRecord(None, value, int(time.time() * 1000))]))


def name() -> str:
    return f"r-{uuid.uuid4().hex[:8]}"


@pytest.mark.slow
def test_bootstrap_list_skips_a_dead_first_entry(broker):
    dead = free_port()
    with KafkaClient(f"127.0.0.1:{dead},{broker.bootstrap}", connect_timeout_s=2) as c:
        assert c.address == broker.bootstrap
        topic = name()
        c.create_topic(topic, 1)
        assert c.produce(topic, 0, batch(b"x"))["base_offset"] == 0


def test_no_reachable_bootstrap_names_every_address():
    a, b = free_port(), free_port()
    with pytest.raises(ConnectionError, match=rf"127.0.0.1:{a}: .*; 127.0.0.1:{b}: "):
        KafkaClient(f"127.0.0.1:{a},127.0.0.1:{b}", connect_timeout_s=1)


@pytest.mark.slow
def test_metadata_view_has_brokers_leaders_and_epochs(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = name()
        c.create_topic(topic, 2)
        c.produce(topic, 1, batch(b"y"))
        view = c.refresh_metadata([topic])
        [node] = view.brokers
        assert view.brokers[node] == BrokerInfo(node, "127.0.0.1", broker.port, None)
        assert view.controller_id == node
        parts = view.partitions_of(topic)
        assert [(p.partition, p.leader, p.replicas, p.error_code) for p in parts] == \
            [(0, node, (node,), 0), (1, node, (node,), 0)]
        assert all(p.leader_epoch >= 0 for p in parts)  # Metadata v7+: sent back as current_leader_epoch
        assert c.fetch(topic, 1, 0)[0]["high_watermark"] == 1


@pytest.mark.slow
def test_produce_waits_for_a_topic_being_created(broker):
    """UNKNOWN_TOPIC_OR_PARTITION is retried with a metadata refresh until the topic appears."""
    topic = name()
    with KafkaClient(broker.bootstrap, retry_timeout_s=20) as c, KafkaClient(broker.bootstrap) as admin:
        timer = threading.Timer(0.5, admin.create_topic, (topic, 1))
        timer.start()
        started = time.monotonic()
        try:
            assert c.produce(topic, 0, batch(b"late"))["error_code"] == 0
        finally:
            timer.join()
        assert time.monotonic() - started >= 0.4


@pytest.mark.slow
def test_retries_end_at_the_deadline(broker):
    with KafkaClient(broker.bootstrap, retry_timeout_s=0.6) as c:
        started = time.monotonic()
        with pytest.raises(KafkaClientError) as err:
            c.produce(name(), 0, batch(b"x"))
        assert err.value.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert 0.3 < time.monotonic() - started < 5


@pytest.mark.slow
def test_a_partition_the_topic_does_not_have_fails_at_once(broker):
    with KafkaClient(broker.bootstrap, retry_timeout_s=30) as c:
        topic = name()
        c.create_topic(topic, 2)
        started = time.monotonic()
        answers = c.list_offsets({(topic, 0): -1, (topic, 7): -1})
        assert answers[(topic, 0)]["error_code"] == 0
        assert answers[(topic, 7)]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert time.monotonic() - started < 5


@pytest.mark.slow
def test_a_broker_bounce_is_retried_for_reads_and_unknown_for_a_produce_in_flight(broker):
    with KafkaClient(broker.bootstrap, retry_timeout_s=60) as c:
        topic = name()
        c.create_topic(topic, 1)
        c.produce(topic, 0, batch(b"before"))
        assert broker.stop() == 0
        # The connection to the leader was closed by the broker before anything was sent on it: the client
        # sees that before sending, so nothing can have been written and the produce is retried (with
        # backoff, reconnecting) until the broker is back. Reads and metadata alike.
        restart = threading.Timer(1.0, broker.start)
        restart.start()
        try:
            assert c.produce(topic, 0, batch(b"during"))["base_offset"] == 1
        finally:
            restart.join()
        assert c.list_offset(topic, 0, -1) == 2
    # A produce whose answer does not come (the broker stalls after it was sent) may or may not have been
    # written: the client says so instead of sending it again.
    with KafkaClient(broker.bootstrap, timeout_s=2, retry_timeout_s=2) as c:
        c.produce(topic, 0, batch(b"after"))
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(ProduceOutcomeUnknown, match="may or may not have been written"):
                c.produce(topic, 0, batch(b"lost?"))
        finally:
            broker.proc.send_signal(signal.SIGCONT)
    with KafkaClient(broker.bootstrap) as c:
        part, data = c.fetch(topic, 0, 0)
        assert part["high_watermark"] == 4 and data  # the stalled produce was written after all


@pytest.mark.slow
def test_group_calls_go_to_the_coordinator(broker):
    dead = free_port()
    with KafkaClient(f"127.0.0.1:{dead},{broker.bootstrap}", connect_timeout_s=2) as c:
        topic = name()
        c.create_topic(topic, 1)
        assert c.find_coordinator("g1") == ("127.0.0.1", broker.port)
        assert c.offset_commit("g1", {(topic, 0): 5}) == {(topic, 0): 0}
        assert c.offset_fetch("g1") == {(topic, 0): 5}
        assert c.delete_groups(["g1"]) == {"g1": 0}


@pytest.mark.slow
def test_partition_requests_go_to_the_leader_metadata_names(tmp_path):
    """The broker advertises "localhost" while the bootstrap list says 127.0.0.1: data requests must use
    the leader's advertised address (a connection per broker, opened on first use), not the bootstrap one."""
    port = free_port()
    b = BrokerProcess(tmp_path / "data", {"advertised.listeners": f"PLAINTEXT://localhost:{port}"}, port=port).start()
    try:
        with KafkaClient(f"127.0.0.1:{free_port()},{b.bootstrap}", connect_timeout_s=2) as c:
            topic = name()
            c.create_topic(topic, 2)
            assert c.connections() == {}
            c.produce_many({(topic, 0): batch(b"a"), (topic, 1): batch(b"b")})
            [(node, conn)] = c.connections().items()
            assert (conn.host, conn.port, node) == ("localhost", port, c.cluster.leader((topic, 0)))
            assert c.address == b.bootstrap  # cluster-wide requests stay on the bootstrap connection
            fetched = c.fetch_many({(topic, 0): 0, (topic, 1): 0})
            assert {tp: p["high_watermark"] for tp, (p, _) in fetched.items()} == {(topic, 0): 1, (topic, 1): 1}
            c.drop(node)  # a lost leader connection is opened again on the next request
            assert c.list_offset(topic, 1, -1) == 1
            assert c.delete_records({(topic, 1): 1})[(topic, 1)]["low_watermark"] == 1
    finally:
        assert b.stop() == 0, b.output()
