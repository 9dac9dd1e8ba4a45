"""Broker mode end to end: Spark reads and writes through a real `kafkalite serve` over the Kafka protocol.

The same checks as test_spark.py (embedded mode), against a broker process: the data is written
with the storage API into the broker's data dir before it starts (so what Spark reads is known
byte for byte) and by confluent-kafka (librdkafka) with every codec. Shares the session's Spark.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")

from kafkalite.client import KafkaClient
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol import ApiKey
from kafkalite.records import ControlRecordType, SimpleRecord, build_batch, build_end_txn_marker
from kafkalite.storage.producer_state import AppendOrigin
from tests.support import T0
from tests.support.brokers import BrokerProcess, free_port
from tests.support.spark import (
    SMALL,
    append,
    check_range_options,
    check_sink_output,
    error_of,
    expected,
    records,
    rows_of,
    sink_rows,
)

ck = pytest.importorskip("confluent_kafka")

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java"),
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass
class Served:
    broker: BrokerProcess
    events: dict[int, list[tuple]]  # what the storage API wrote, per partition
    produced: dict[int, list[tuple]]  # what confluent-kafka produced to topic `ck`, partition i with CODECS[i]

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


def write_transactions(root: Path) -> None:
    """Topic `txn`: plain records, a committed and an aborted transaction interleaved, as Kafka lays them out."""
    lm = LogManager([root], SMALL)
    try:
        lg = lm.get_or_create_log("txn", 0)

        def batch(values: list[bytes], pid: int = -1, seq: int = -1) -> None:
            lg.append_as_leader(build_batch([SimpleRecord(None, v, T0) for v in values], producer_id=pid,
                                            producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                                            is_transactional=pid >= 0))

        def end(kind: ControlRecordType, pid: int) -> None:
            lg.append_as_leader(build_end_txn_marker(kind, pid, 0, timestamp=T0), origin=AppendOrigin.COORDINATOR)

        batch([b"plain-0", b"plain-1"])
        batch([b"commit-0", b"commit-1"], 1000, 0)
        batch([b"abort-0"], 2000, 0)
        batch([b"commit-2"], 1000, 2)
        batch([b"abort-1", b"abort-2"], 2000, 1)
        end(ControlRecordType.COMMIT, 1000)
        batch([b"plain-2"])
        end(ControlRecordType.ABORT, 2000)
        batch([b"plain-3"])
    finally:
        lm.shutdown()


def produce_every_codec(bootstrap: str) -> dict[int, list[tuple]]:
    """20 records into each partition of `ck`, partition i compressed with CODECS[i], by librdkafka."""
    with KafkaClient(bootstrap) as c:
        c.create_topic("ck", len(CODECS))
    out: dict[int, list[tuple]] = {}
    for p, codec in enumerate(CODECS):
        producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                                "batch.num.messages": 7})
        out[p] = []
        for i in range(20):
            key = None if i % 6 == 1 else b"key-%d" % i
            value = None if i % 7 == 3 else (b"%s-%d-" % (codec.encode(), i)) * (i + 1)
            headers = [("h", b"%d" % i), ("null", None)] if i % 2 else None
            producer.produce("ck", value=value, key=key, partition=p, timestamp=T0 + i, headers=headers)
            out[p].append((i, key, value, headers and [(k, v) for k, v in headers], T0 + i))
        assert producer.flush(30) == 0
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("broker-data")
    append(root, "events", 2, 0, 60)
    write_transactions(root)
    events = {p: expected(root, "events", p) for p in (0, 1)}
    # the records carry fixed 2023 timestamps: without this, time retention (first run 30 s after start, as
    # Kafka's) deletes their segments while the module's later tests still read them
    broker = BrokerProcess(root, {"log.segment.bytes": 2048, "log.retention.ms": -1}).start()
    try:
        yield Served(broker, events, produce_every_codec(broker.bootstrap))
    finally:
        assert broker.stop() == 0, broker.output()


def reader(spark, bootstrap: str, **options):
    r = spark.read.format("kafkalite").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_broker_batch_read_gives_exactly_the_records_across_segments_and_codecs(spark, served):
    assert len(list((served.broker.data_dir / "events-0").glob("*.log"))) >= 3
    df = reader(spark, served.bootstrap, subscribe="events", includeHeaders="true")
    assert rows_of(df) == served.events
    # small fetches: many round trips, pipelined, and batches larger than the fetch size
    small = reader(spark, served.bootstrap, subscribe="events", includeHeaders="true",
                   **{"kafka.max.partition.fetch.bytes": "300"})
    assert rows_of(small) == served.events
    assert rows_of(reader(spark, served.bootstrap, subscribe="ck", includeHeaders="true")) == served.produced
    plain = reader(spark, served.bootstrap, subscribe="events")
    assert plain.selectExpr("min(timestampType)", "max(timestampType)", "min(topic)").first() == (0, 0, "events")


def test_broker_offsets_timestamps_and_min_partitions_select_ranges(spark, served):
    check_range_options(lambda **options: reader(spark, served.bootstrap, **options))


def test_broker_isolation_levels(spark, served):
    def values(**options) -> list[bytes]:
        df = reader(spark, served.bootstrap, subscribe="txn", **options)
        return [r["value"] for r in df.orderBy("offset").collect()]

    everything = [b"plain-0", b"plain-1", b"commit-0", b"commit-1", b"abort-0", b"commit-2", b"abort-1", b"abort-2",
                  b"plain-2", b"plain-3"]
    assert values() == everything  # read_uncommitted, Spark's default: markers skipped, aborted records kept
    assert values(**{"kafka.isolation.level": "read_committed"}) == [v for v in everything
                                                                      if not v.startswith(b"abort")]


def test_broker_sink_output_reads_back_identically(spark, served, tmp_path):
    rows, schema = sink_rows()
    df = spark.createDataFrame(rows, schema)

    def write(**options) -> None:
        w = df.write.format("kafkalite").option("kafka.bootstrap.servers", served.bootstrap).option("topic", "out")
        for k, v in options.items():
            w = w.option(k, v)
        w.mode("append").save()

    write(numPartitions="3", **{"kafka.compression.type": "lz4", "topicConfig.retention.ms": "3600000"})
    back = reader(spark, served.bootstrap, subscribe="out", includeHeaders="true").collect()
    placed = check_sink_output(rows, back)
    with KafkaClient(served.bootstrap) as c:
        assert len(c.metadata(["out"])["topics"][0]["partitions"]) == 3
        configs = {e["name"]: e["value"] for e in c.describe_topic_configs("out")}
        assert configs["retention.ms"] == "3600000"
    # a key lands where the embedded sink (and Kafka's producer) puts it
    (df.write.format("kafkalite").option("path", str(tmp_path)).option("topic", "out").option("numPartitions", "3")
     .mode("append").save())
    embedded = spark.read.format("kafkalite").option("path", str(tmp_path)).option("subscribe", "out").load()
    assert {r["key"]: r["partition"] for r in embedded.collect() if r["key"] in placed} == placed
    write(**{"kafka.acks": "1"})  # appends to the existing topic
    assert reader(spark, served.bootstrap, subscribe="out").count() == 2 * len(rows)
    bad = spark.createDataFrame([(b"v", 5)], "value binary, partition int")
    assert "partition 5 does not exist: topic out has 3 partition(s)" in error_of(
        lambda: bad.write.format("kafkalite").option("kafka.bootstrap.servers", served.bootstrap)
        .option("topic", "out").mode("append").save())


def test_broker_errors_a_user_can_act_on(spark, served):
    assert "unknown topic(s) nope" in error_of(lambda: reader(spark, served.bootstrap, subscribe="nope").count())
    nowhere = f"127.0.0.1:{free_port()}"
    message = error_of(lambda: reader(spark, nowhere, subscribe="events").count())
    assert f"cannot reach any Kafka broker of kafka.bootstrap.servers={nowhere}" in message
    df = spark.createDataFrame([(b"v",)], "value binary")
    assert f"kafka.bootstrap.servers={nowhere}" in error_of(
        lambda: df.write.format("kafkalite").option("kafka.bootstrap.servers", nowhere).option("topic", "t")
        .mode("append").save())
    assert "kafka.isolation.level must be read_uncommitted or read_committed" in error_of(
        lambda: reader(spark, served.bootstrap, subscribe="events", **{"kafka.isolation.level": "dirty"}).count())

    with KafkaClient(served.bootstrap) as c:
        c.create_topic("lossy", 1)
        for i in range(0, 60, 4):
            c.produce("lossy", 0, bytes(build_batch(records(0, i, 4))))
        resp = c.request(ApiKey.DELETE_RECORDS, {"topics": [{"name": "lossy", "partitions": [
            {"partition_index": 0, "offset": 30}]}], "timeout_ms": 5000})
        assert resp["topics"][0]["partitions"][0]["error_code"] == 0
    lost = dict(subscribe="lossy", startingOffsets='{"lossy":{"0":0}}')
    message = error_of(lambda: reader(spark, served.bootstrap, **lost).count())
    assert "offsets 0 to 29 of lossy-0 are gone" in message and "failOnDataLoss=false" in message
    survivors = reader(spark, served.bootstrap, failOnDataLoss="false", **lost).select("offset").collect()
    assert sorted(r["offset"] for r in survivors) == list(range(30, 60))


def test_broker_streaming_resumes_from_its_checkpoint(spark, tmp_path):
    """readStream -> writeStream through a broker that restarts between runs: nothing lost, nothing twice;
    a micro-batch Spark replays is produced again (the sink is at-least-once, as Spark's Kafka sink)."""
    broker = BrokerProcess(tmp_path / "data").start()
    checkpoint = tmp_path / "checkpoint"

    def produce(start: int, n: int) -> None:
        with KafkaClient(broker.bootstrap) as c:
            if start == 0:
                c.create_topic("src", 2)
            for p in (0, 1):
                for i in range(start, start + n, 5):
                    c.produce("src", p, bytes(build_batch(records(p, i, min(5, start + n - i)))))

    def run() -> list[int]:
        q = (spark.readStream.format("kafkalite").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", "src").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "20")
             .option("includeHeaders", "true").load()
             .selectExpr("key", "value", "headers", "partition")
             .writeStream.format("kafkalite").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", "copy").option("numPartitions", "2")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        q.awaitTermination()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    def contents(topic: str) -> dict[int, list[tuple]]:
        rows = rows_of(reader(spark, broker.bootstrap, subscribe=topic, includeHeaders="true"))
        return {p: [(k, v, h) for _o, k, v, h, _t in rs] for p, rs in rows.items()}

    try:
        produce(0, 25)
        assert run() == [20, 20, 10]  # admission control: maxOffsetsPerTrigger split over both partitions
        broker.stop()
        broker = BrokerProcess(broker.data_dir, port=broker.port).start()
        produce(25, 10)
        assert run() == [20]  # only what arrived since: resumed from the checkpoint
        src = contents("src")
        assert contents("copy") == src
        last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        for name in (str(last), f".{last}.crc"):  # as if the driver died right after the sink's commit
            (checkpoint / "commits" / name).unlink(missing_ok=True)
        assert run() == [20]
        again = contents("copy")
        assert {p: rs[:35] for p, rs in again.items()} == src
        assert {p: rs[35:] for p, rs in again.items()} == {p: rs[25:] for p, rs in src.items()}
    finally:
        assert broker.stop() == 0, broker.output()
