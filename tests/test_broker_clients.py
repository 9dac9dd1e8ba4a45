"""Real, independently written Kafka clients against `kafkalite serve`: confluent-kafka (librdkafka 2.16),
kafka-python, aiokafka and kcat (librdkafka 2.0.2). A Kafka user changes only bootstrap.servers."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid

import pytest

from tests.support.brokers import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("broker") / "data",
                      {"num.partitions": 1, "log.segment.bytes": 256 * 1024}).start()
    yield b
    rc = b.stop()
    assert rc == 0, b.output()
    assert (b.data_dir / ".kafka_cleanshutdown").exists()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def now_ms() -> int:
    return int(time.time() * 1000)


def create_topic(broker, name: str, partitions: int = 1, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
    fut.result(timeout=15)


def ck_consume_all(broker, topic: str, n: int, partition: int = 0, offset: int = ck.OFFSET_BEGINNING,
                   extra: dict | None = None, timeout_s: float = 20) -> list:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "enable.partition.eof": False, **(extra or {})})
    c.assign([TopicPartition(topic, partition, offset)])
    out = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m)
    finally:
        c.close()
    return out


# --- confluent-kafka ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("acks,idempotent", [("0", False), ("1", False), ("all", False), ("all", True)])
def test_confluent_produce_consume_every_codec_and_acks(broker, codec, acks, idempotent):
    topic = topic_name(f"ck-{codec}-{acks}")
    create_topic(broker, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": acks, "enable.idempotence": idempotent,
                  "compression.type": codec, "linger.ms": 5})
    ts = now_ms()
    n = 300
    errors = []
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode() * (i % 7 + 1), timestamp=ts + i,
                  headers=[("h", f"{i}".encode()), ("empty", b"")],
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(20) == 0
    assert errors == []
    got = ck_consume_all(broker, topic, n)
    assert [m.offset() for m in got] == list(range(n))
    for i, m in enumerate(got):
        assert m.key() == f"k{i}".encode()
        assert m.value() == f"value-{i}".encode() * (i % 7 + 1)
        assert m.timestamp() == (ck.TIMESTAMP_CREATE_TIME, ts + i)
        assert m.headers() == [("h", f"{i}".encode()), ("empty", b"")]


def test_confluent_assign_from_latest_offset_and_timestamp(broker):
    topic = topic_name("ck-pos")
    create_topic(broker, topic)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    base = now_ms() - 100_000
    for i in range(100):
        p.produce(topic, value=b"%d" % i, timestamp=base + i * 1000)
        if i % 10 == 9:
            p.flush(10)
    p.flush(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (lo, hi) == (0, 100)
    found = c.offsets_for_times([TopicPartition(topic, 0, base + 42_500)], timeout=10)
    assert found[0].offset == 43
    beyond = c.offsets_for_times([TopicPartition(topic, 0, base + 10_000_000)], timeout=10)
    assert beyond[0].offset == -1  # nothing at or after: Kafka answers -1 (librdkafka shows OFFSET_END)
    c.close()
    assert [int(m.value()) for m in ck_consume_all(broker, topic, 57, offset=43)] == list(range(43, 100))
    assert int(ck_consume_all(broker, topic, 1, offset=99)[0].value()) == 99
    # from latest: only what is produced after the assignment
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, ck.OFFSET_END)])
    c.consume(1, timeout=1.0)
    p.produce(topic, value=b"100", timestamp=now_ms())
    p.flush(10)
    got = []
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        got = [m for m in c.consume(10, timeout=0.5) if m.error() is None]
    c.close()
    assert [m.value() for m in got] == [b"100"]


def test_confluent_admin_create_describe_delete(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    name = topic_name("admin")
    admin.create_topics([NewTopic(name, 3, 1, config={"cleanup.policy": "compact"})])[name].result(10)
    md = admin.list_topics(timeout=10)
    assert len(md.topics[name].partitions) == 3
    assert md.topics[name].partitions[2].leader == 1
    dup = admin.create_topics([NewTopic(name, 3, 1)])[name]
    with pytest.raises(ck.KafkaException) as e:
        dup.result(10)
    assert e.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    from confluent_kafka.admin import ConfigResource
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == str(256 * 1024)  # the broker's log.segment.bytes
    bad = admin.create_topics([NewTopic(topic_name("bad"), 1, 1, config={"segment.bytes": "nope"})])
    with pytest.raises(ck.KafkaException) as e:
        next(iter(bad.values())).result(10)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    admin.delete_topics([name])[name].result(10)
    assert name not in admin.list_topics(timeout=10).topics


def test_record_larger_than_max_message_bytes_is_refused(broker):
    topic = topic_name("big")
    create_topic(broker, topic, config={"max.message.bytes": "2000"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "none", "linger.ms": 0})
    results = []
    p.produce(topic, value=b"x" * 5000, on_delivery=lambda err, msg: results.append(err))
    p.flush(10)
    p.produce(topic, value=b"small", on_delivery=lambda err, msg: results.append(err))
    p.flush(10)
    assert [e.code() if e else None for e in results] == [KafkaError.MSG_SIZE_TOO_LARGE, None]
    got = ck_consume_all(broker, topic, 1)
    assert [m.value() for m in got] == [b"small"]


# --- kafka-python ------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_default_producer_and_consumer(broker, codec):
    kafka = pytest.importorskip("kafka")
    topic = topic_name(f"kp-{codec}")
    create_topic(broker, topic)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec)  # idempotent
    ts = now_ms()
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp_ms=ts + i,
                             headers=[("n", b"%d" % i)]) for i in range(200)]
    producer.flush(20)
    assert [f.get(10).offset for f in futures] == list(range(200))
    producer.close()
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000,
                                   auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for m in consumer:
        got.append(m)
        if len(got) == 200:
            break
    consumer.close()
    assert [(m.offset, m.key, m.value, m.timestamp, m.headers) for m in got] == \
        [(i, b"k%d" % i, b"v%d" % i, ts + i, [("n", b"%d" % i)]) for i in range(200)]


def test_kafka_python_admin(broker):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KPNewTopic
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    name = topic_name("kp-admin")
    admin.create_topics([KPNewTopic(name, 2, 1, topic_configs={"retention.ms": "3600000"})])
    assert name in admin.list_topics()
    desc = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    text = repr(desc)
    assert "3600000" in text
    admin.delete_topics([name])
    assert name not in admin.list_topics()
    admin.close()
    del kafka


# --- aiokafka ----------------------------------------------------------------------------------------


def test_aiokafka_produce_consume(broker):
    aiokafka = pytest.importorskip("aiokafka")
    topic = topic_name("aio")
    create_topic(broker, topic)
    ts = now_ms()

    async def go():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i, timestamp_ms=ts + i)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                             enable_auto_commit=False)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            while len(got) < 50:
                batch = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=1000), 10)
                for msgs in batch.values():
                    got.extend(msgs)
            end = await consumer.end_offsets([tp])
            return got, end[tp]
        finally:
            await consumer.stop()

    got, end = asyncio.run(go())
    assert end == 50
    assert [(m.offset, m.key, m.value, m.timestamp) for m in got] == \
        [(i, b"k%d" % i, b"v%d" % i, ts + i) for i in range(50)]


# --- kcat (librdkafka 2.0.2, the old-client canary) ---------------------------------------------------


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/run installs it)")
def test_kcat_produce_and_consume(broker):
    topic = topic_name("kcat")
    lines = "".join(f"key{i}:value{i}\n" for i in range(100))
    r = subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-z", "snappy"],
                       input=lines.encode(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    r = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                        "-f", "%k=%s@%o\n"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == [f"key{i}=value{i}@{i}" for i in range(100)]
    r = subprocess.run(["kcat", "-b", broker.bootstrap, "-L", "-t", topic], capture_output=True, timeout=60)
    assert r.returncode == 0 and f'topic "{topic}" with 1 partitions' in r.stdout.decode(), r.stdout.decode()
