"""The broker at the byte level: framing, version fallback, error codes, long polls, idempotence, restarts.

Requests are built with kafkalite's protocol codec and sent over real sockets to a real `kafkalite serve`.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid

import pytest

from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.protocol import ApiKey, decode_response, encode_request
from kafkalite.records import SimpleRecord, build_batch
from tests.support.brokers import BrokerProcess
from tests.support.logs import write_foreign_partition


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("wire") / "data",
                      {"socket.request.max.bytes": 1 << 20, "message.max.bytes": 100_000}).start()
    yield b
    assert b.stop() == 0, b.output()


def now_ms() -> int:
    return int(time.time() * 1000)


def new_topic(client: KafkaClient, partitions: int = 1, **configs: str) -> str:
    name = f"w-{uuid.uuid4().hex[:8]}"
    client.create_topic(name, partitions, 1, {k.replace("_", "."): v for k, v in configs.items()})
    return name


def raw_call(sock: socket.socket, api: int, version: int, body: dict, correlation: int = 7) -> tuple[int, dict]:
    sock.sendall(encode_request(api, version, correlation, "raw", body))
    return read_response(sock, api, version)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def read_response(sock: socket.socket, api: int, version: int) -> tuple[int, dict]:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return decode_response(api, version, recv_exact(sock, size))


def connect(broker) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    return s


def produce_body(topic: str, batch: bytes, acks: int = -1, partition: int = 0) -> dict:
    return {"acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": bytes(batch)}]}]}


def part_of(resp: dict) -> dict:
    return resp["responses"][0]["partition_responses"][0]


# --- ApiVersions -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_api_versions_v0_v3_and_unsupported_version_fallback(broker):
    with connect(broker) as s:
        corr, body = raw_call(s, ApiKey.API_VERSIONS, 0, {})
        assert corr == 7 and body["error_code"] == 0
        ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert ranges[ApiKey.API_VERSIONS] == (0, 4)
        assert ranges[ApiKey.PRODUCE][0] == 0 and ranges[ApiKey.PRODUCE][1] >= 7  # old librdkafka needs 0, 3, 7
        assert ranges[ApiKey.FETCH][0] <= 4 <= 10 <= ranges[ApiKey.FETCH][1]
        assert 71 not in ranges and 72 not in ranges  # telemetry: not implemented, not advertised
        _, body3 = raw_call(s, ApiKey.API_VERSIONS, 3, {"client_software_name": "raw-test",
                                                        "client_software_version": "1.0"})
        assert body3["error_code"] == 0 and body3["api_keys"] == body["api_keys"]
        # v9 does not exist: Kafka answers a v0 body with UNSUPPORTED_VERSION and its own ApiVersions range
        s.sendall(struct.pack(">ihhih", 10, 18, 9, 99, -1))
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        payload = recv_exact(s, size)
        assert payload == struct.pack(">ihihhh", 99, 35, 1, 18, 0, 4)


def test_bad_client_software_name_is_invalid_request(broker):
    with connect(broker) as s:
        _, body = raw_call(s, ApiKey.API_VERSIONS, 3, {"client_software_name": "bad name!",
                                                       "client_software_version": "1"})
        assert body["error_code"] == 42


# --- framing and isolation ---------------------------------------------------------------------------


def test_malformed_frames_close_only_their_connection(broker):
    good = KafkaClient(broker.bootstrap)
    topic = new_topic(good)
    cases = [
        struct.pack(">i", -5),                                            # negative size
        struct.pack(">i", (1 << 20) + 1),                                 # beyond socket.request.max.bytes
        struct.pack(">ihhi", 8, 3, 1, 1),                                 # header cut short
        struct.pack(">ihhih", 10, 999, 0, 1, -1),                         # unknown API key
        struct.pack(">ihhih", 14, 0, 7, 1, -1) + b"\xff\xff\xff\xff",     # produce v7 body garbage
        struct.pack(">ihhih", 10, 1, 11, 1, -1),                          # fetch v11 body missing
    ]
    for frame in cases:
        with connect(broker) as s:
            s.sendall(frame)
            s.settimeout(10)
            assert s.recv(100) == b"", frame  # closed, no answer
    # the broker and other connections are unaffected
    good.produce(topic, 0, bytes(build_batch([SimpleRecord(None, b"still fine", now_ms())])))
    assert good.list_offset(topic, 0, -1) == 1
    good.close()


def test_a_slow_client_does_not_stall_others(broker):
    slow = connect(broker)
    slow.sendall(struct.pack(">i", 1000) + b"\x00\x03")  # a frame that never completes
    with KafkaClient(broker.bootstrap) as c:
        topic = new_topic(c)
        started = time.monotonic()
        c.produce(topic, 0, bytes(build_batch([SimpleRecord(None, b"x", now_ms())])))
        assert time.monotonic() - started < 2
    slow.close()


# --- produce errors ----------------------------------------------------------------------------------


def test_corrupt_batch_is_refused_and_nothing_is_appended(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = new_topic(c)
        c.produce(topic, 0, bytes(build_batch([SimpleRecord(b"k", b"good", now_ms())])))
        bad = bytearray(build_batch([SimpleRecord(b"k", b"evil", now_ms())]))
        bad[-1] ^= 0xFF  # breaks the CRC
        with pytest.raises(KafkaClientError) as e:
            c.produce(topic, 0, bytes(bad))
        assert e.value.error_code == 2  # CORRUPT_MESSAGE
        assert c.list_offset(topic, 0, -1) == 1
        short = bytes(build_batch([SimpleRecord(None, b"v", now_ms())]))[:30]
        with pytest.raises(KafkaClientError) as e:
            c.produce(topic, 0, short)
        assert e.value.error_code in (2, 87)
        assert c.list_offset(topic, 0, -1) == 1


def test_produce_errors_per_partition(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = new_topic(c)
        batch = bytes(build_batch([SimpleRecord(None, b"v", now_ms())]))
        with connect(broker) as s:
            _, body = raw_call(s, ApiKey.PRODUCE, 7, produce_body(topic, batch, acks=1, partition=5))
            assert part_of(body)["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
            _, body = raw_call(s, ApiKey.PRODUCE, 7, produce_body(topic, batch, acks=2))
            assert part_of(body)["error_code"] == 21  # INVALID_REQUIRED_ACKS
            _, body = raw_call(s, ApiKey.PRODUCE, 2, produce_body(topic, batch, acks=1))
            assert part_of(body)["error_code"] == 35  # v0-2 advertised for old clients, refused
            big = bytes(build_batch([SimpleRecord(None, b"x" * 200_000, now_ms())]))
            _, body = raw_call(s, ApiKey.PRODUCE, 7, produce_body(topic, big, acks=1))
            assert part_of(body)["error_code"] == 10  # MESSAGE_TOO_LARGE
            _, body = raw_call(s, ApiKey.PRODUCE, 9, produce_body("__consumer_offsets", batch, acks=1))
            assert part_of(body)["error_code"] in (3, 17)
        assert c.list_offset(topic, 0, -1) == 0


def test_acks_zero_gets_no_response(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = new_topic(c)
    with connect(broker) as s:
        batch = bytes(build_batch([SimpleRecord(None, b"fire and forget", now_ms())]))
        s.sendall(encode_request(ApiKey.PRODUCE, 7, 1, "raw", produce_body(topic, batch, acks=0)))
        corr, _ = raw_call(s, ApiKey.API_VERSIONS, 0, {}, correlation=2)
        assert corr == 2  # the first answer on the wire is the ApiVersions one
    with KafkaClient(broker.bootstrap) as c:
        assert c.list_offset(topic, 0, -1) == 1


def test_idempotent_producer_duplicates_and_gaps(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = new_topic(c)
        ids = [c.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
               for _ in range(2)]
        assert ids[0]["error_code"] == 0 and ids[1]["producer_id"] != ids[0]["producer_id"]
        pid = ids[0]["producer_id"]

        def batch(seq: int, n: int = 3) -> bytes:
            return bytes(build_batch([SimpleRecord(None, b"s%d" % (seq + i), now_ms()) for i in range(n)],
                                     producer_id=pid, producer_epoch=0, base_sequence=seq))

        assert c.produce(topic, 0, batch(0))["base_offset"] == 0
        assert c.produce(topic, 0, batch(3))["base_offset"] == 3
        assert c.produce(topic, 0, batch(0))["base_offset"] == 0  # a retry: the original offsets, no append
        assert c.list_offset(topic, 0, -1) == 6
        with pytest.raises(KafkaClientError) as e:
            c.produce(topic, 0, batch(100))
        assert e.value.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert c.list_offset(topic, 0, -1) == 6


# --- fetch -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_long_poll_wakes_on_append_and_times_out_without(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = new_topic(c)
        started = time.monotonic()
        part, data = c.fetch(topic, 0, 0, max_wait_ms=800)
        waited = time.monotonic() - started
        assert data == b"" and part["high_watermark"] == 0
        assert 0.7 <= waited < 3

        def later() -> None:
            time.sleep(0.3)
            with KafkaClient(broker.bootstrap) as p:
                p.produce(topic, 0, bytes(build_batch([SimpleRecord(None, b"wake", now_ms())])))

        t = threading.Thread(target=later)
        t.start()
        started = time.monotonic()
        part, data = c.fetch(topic, 0, 0, max_wait_ms=10_000)
        waited = time.monotonic() - started
        t.join()
        assert data and part["high_watermark"] == 1
        assert waited < 5


def test_fetch_returns_whole_batches_and_out_of_range(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = new_topic(c)
        for i in range(5):
            c.produce(topic, 0, bytes(build_batch([SimpleRecord(None, b"%d-%d" % (i, j), now_ms())
                                                   for j in range(10)])))
        part, data = c.fetch(topic, 0, 23)
        from kafkalite.records.batch import iter_batches
        batches = list(iter_batches(data))
        assert batches[0].base_offset == 20  # the batch holding the fetch offset, whole
        assert part["high_watermark"] == 50 and part["log_start_offset"] == 0
        with pytest.raises(KafkaClientError) as e:
            c.fetch(topic, 0, 51)
        assert e.value.error_code == 1
        # DeleteRecords moves the log start; below it is out of range
        resp = c.request(ApiKey.DELETE_RECORDS, {"topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "offset": 30}]}], "timeout_ms": 5000})
        assert resp["topics"][0]["partitions"][0] == {**resp["topics"][0]["partitions"][0], "low_watermark": 30,
                                                      "error_code": 0}
        assert c.list_offset(topic, 0, -2) == 30
        with pytest.raises(KafkaClientError) as e:
            c.fetch(topic, 0, 10)
        assert e.value.error_code == 1


def test_offset_for_leader_epoch_and_configs_and_cluster(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = new_topic(c, partitions=2)
        c.produce(topic, 1, bytes(build_batch([SimpleRecord(None, b"x", now_ms())] * 4)))
        resp = c.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [
            {"topic": topic, "partitions": [{"partition": 1, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
        p = resp["topics"][0]["partitions"][0]
        assert (p["error_code"], p["leader_epoch"], p["end_offset"]) == (0, 0, 4)
        resp = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": topic, "configs": [
                {"name": "retention.ms", "config_operation": 0, "value": "1234567"},
                {"name": "cleanup.policy", "config_operation": 2, "value": "compact"}]}], "validate_only": False})
        assert resp["responses"][0]["error_code"] == 0
        configs = {x["name"]: x for x in c.describe_topic_configs(topic)}
        assert configs["retention.ms"]["value"] == "1234567"
        assert configs["cleanup.policy"]["value"] in ("compact,delete", "delete,compact")
        resp = c.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": topic, "configs": [
                {"name": "retention.ms", "config_operation": 0, "value": "-7"}]}], "validate_only": False})
        assert resp["responses"][0]["error_code"] == 40
        resp = c.request(ApiKey.CREATE_PARTITIONS, {"topics": [{"name": topic, "count": 4, "assignments": None}],
                                                    "timeout_ms": 5000, "validate_only": False})
        assert resp["results"][0]["error_code"] == 0
        md = c.metadata([topic])
        assert len(md["topics"][0]["partitions"]) == 4
        cluster = c.request(ApiKey.DESCRIBE_CLUSTER, {})
        assert cluster["error_code"] == 0 and cluster["brokers"][0]["port"] == broker.port


def test_metadata_auto_create_and_invalid_names(broker):
    with KafkaClient(broker.bootstrap) as c:
        v = c.versions[ApiKey.METADATA]
        name = f"auto-{uuid.uuid4().hex[:6]}"
        resp = c.request(ApiKey.METADATA, {"topics": [{"name": name}, {"name": "bad name"}],
                                           "allow_auto_topic_creation": True}, version=v)
        by_name = {t["name"]: t for t in resp["topics"]}
        assert by_name[name]["error_code"] == 0 and len(by_name[name]["partitions"]) == 1
        assert by_name["bad name"]["error_code"] == 17
        resp = c.request(ApiKey.METADATA, {"topics": [{"name": "never-" + name}],
                                           "allow_auto_topic_creation": False}, version=v)
        assert resp["topics"][0]["error_code"] == 3


# --- restarts and foreign data -----------------------------------------------------------------------


@pytest.mark.slow
def test_restart_keeps_data_topics_and_configs(tmp_path):
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    with KafkaClient(b.bootstrap) as c:
        c.create_topic("keep", 3, 1, {"retention.ms": "99999999"})
        for p in range(3):
            c.produce("keep", p, bytes(build_batch([SimpleRecord(None, b"p%d" % p, now_ms())] * (p + 1))))
        first_pid = c.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 1})
    assert b.stop() == 0, b.output()
    assert (data / ".kafka_cleanshutdown").exists()
    assert (data / "replication-offset-checkpoint").read_text().splitlines()[1] == "3"
    b = BrokerProcess(data, port=b.port).start()
    with KafkaClient(b.bootstrap) as c:
        assert [c.list_offset("keep", p, -1) for p in range(3)] == [1, 2, 3]
        configs = {x["name"]: x["value"] for x in c.describe_topic_configs("keep")}
        assert configs["retention.ms"] == "99999999"
        # producer ids are never reused across restarts
        pid = c.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 1})
        assert pid["producer_id"] > first_pid["producer_id"]
    b.kill()  # an unclean stop: the next start recovers
    b = BrokerProcess(data, port=b.port).start()
    with KafkaClient(b.bootstrap) as c:
        assert [c.list_offset("keep", p, -1) for p in range(3)] == [1, 2, 3]
    assert b.stop() == 0


@pytest.mark.slow
def test_serves_a_data_dir_written_by_an_independent_writer(tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    data = tmp_path / "data"
    expected = write_foreign_partition(data / "foreign-0")
    b = BrokerProcess(data).start()
    try:
        c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "enable.auto.commit": False})
        c.assign([ck.TopicPartition("foreign", 0, ck.OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < len(expected) and time.monotonic() < deadline:
            got.extend(m for m in c.consume(500, timeout=0.5) if m.error() is None)
        c.close()
        assert [(m.offset(), m.key(), m.value(), m.timestamp()[1], tuple(m.headers())) for m in got] == \
            [(o, k, v, ts, h) for o, k, v, ts, h in expected]
    finally:
        assert b.stop() == 0, b.output()


@pytest.mark.slow
def test_idle_connections_are_closed_after_connections_max_idle_ms(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"connections.max.idle.ms": 400}).start()
    try:
        with connect(b) as idle, connect(b) as busy:
            idle.settimeout(10)
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:  # a connection in use stays open
                assert raw_call(busy, ApiKey.API_VERSIONS, 0, {})[0] == 7
                time.sleep(0.1)
            assert idle.recv(10) == b""  # closed by the broker, without a request
    finally:
        assert b.stop() == 0, b.output()


@pytest.mark.slow
def test_compacted_topic_is_cleaned_by_the_broker(tmp_path):
    """A compacted topic created over the wire is compacted by the broker's own cleaner threads."""
    b = BrokerProcess(tmp_path / "data", {"log.cleaner.backoff.ms": 100}).start()
    try:
        with KafkaClient(b.bootstrap) as c:
            c.create_topic("compacted", 1, 1, {"cleanup.policy": "compact", "segment.bytes": "2000",
                                               "min.cleanable.dirty.ratio": "0.01"})
            for rnd in range(20):
                c.produce("compacted", 0, bytes(build_batch([SimpleRecord(b"key-%d" % k, b"r%d" % rnd, now_ms())
                                                             for k in range(5)])))
            leo = c.list_offset("compacted", 0, -1)
            deadline = time.monotonic() + 30
            survivors: list = []
            while time.monotonic() < deadline:
                survivors = [r for _, batch in c.consume("compacted", 0, 0, until=leo, idle_timeout_s=1)
                             for r in batch.records()]
                if len(survivors) < 40:
                    break
                time.sleep(0.5)
            assert len(survivors) < 40, "the cleaner never compacted the topic"
            latest = {r.key: r.value for r in survivors}
            assert latest == {b"key-%d" % k: b"r19" for k in range(5)}
    finally:
        assert b.stop() == 0, b.output()


def test_describe_cluster_controller_endpoints_are_unsupported(broker):
    with KafkaClient(broker.bootstrap) as c:
        resp = c.request(ApiKey.DESCRIBE_CLUSTER, {"endpoint_type": 2}, version=1)
        assert resp["error_code"] == 115  # UNSUPPORTED_ENDPOINT_TYPE (a hand-written table once said 119)
        assert resp["brokers"] == []
