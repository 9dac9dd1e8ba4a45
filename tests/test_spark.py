"""kafkalite as a Spark data source and sink, end to end, in one shared local Spark session.

Spark costs 10+ s to start and ~5 s more for its first Python data source query, so every test
here shares one session (CI settings from shared/reference/pyspark-datasource.md) and small data.
Skipped when `java` is missing.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from datetime import UTC
from pathlib import Path

import pytest

from kafkalite.manager.log_manager import LogManager
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.records.compression import CompressionType
from kafkalite.storage.log import FetchIsolation
from kafkalite.storage.log_config import LogConfig
from tests.conftest import T0

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java"),
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

SMALL = LogConfig.from_props({"segment.bytes": 2048})


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("kafkalite-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    import kafkalite.spark

    kafkalite.spark.register(session)
    yield session
    session.stop()


def records(topic_seed: int, start: int, n: int) -> list[SimpleRecord]:
    rng = random.Random(topic_seed * 1000 + start)
    out = []
    for i in range(start, start + n):
        key = None if i % 9 == 4 else b"user-%d" % (i % 7)
        value = None if i % 13 == 6 else rng.randbytes(rng.randrange(0, 200))
        headers = (("trace", b"%d" % i), ("empty", None)) if i % 3 == 0 else ()
        out.append(SimpleRecord(key, value, T0 + 10 * i, headers))
    return out


def append(root: Path, topic: str, partitions: int, start: int, n: int, per_batch: int = 4) -> None:
    """Append with a LogManager (what an application embedding kafkalite does), codecs rotating."""
    lm = LogManager([root], SMALL)
    try:
        for p in range(partitions):
            lg = lm.get_or_create_log(topic, p, {"segment.bytes": 2048})
            for i in range(start, start + n, per_batch):
                codec = list(CompressionType)[(i // per_batch) % 5]
                lg.append_as_leader(build_batch(records(p, i, min(per_batch, start + n - i)), compression=codec))
    finally:
        lm.shutdown()


def expected(root: Path, topic: str, partition: int) -> list[tuple]:
    """(offset, key, value, headers, timestamp ms) of every record, straight from the log."""
    from kafkalite.storage.log import Log

    with Log(root / f"{topic}-{partition}", SMALL) as lg:
        return [(r.offset, r.key, r.value, [(k, v) for k, v in r.headers] or None, r.timestamp)
                for b in lg.batches(0, FetchIsolation.LOG_END) for r in b.records()]


def rows_of(df) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for r in df.orderBy("partition", "offset").collect():
        headers = None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]]
        ts = int(r["timestamp"].replace(tzinfo=UTC).timestamp() * 1000)
        out.setdefault(r["partition"], []).append((r["offset"], r["key"], r["value"], headers, ts))
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("spark-data")
    append(root, "events", 2, 0, 60)
    return root


def reader(spark, root: Path, **options):
    r = spark.read.format("kafkalite").option("path", str(root))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_gives_exactly_the_records_across_segments_and_codecs(spark, data):
    assert len(list((data / "events-0").glob("*.log"))) >= 3
    df = reader(spark, data, subscribe="events", includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    got = rows_of(df)
    assert got == {p: expected(data, "events", p) for p in (0, 1)}
    plain = reader(spark, data, subscribe="events")
    assert "headers" not in plain.columns
    assert plain.selectExpr("min(timestampType)", "max(timestampType)", "min(topic)").first() == (0, 0, "events")


def test_offsets_timestamps_and_min_partitions_select_ranges(spark, data):
    def offsets(**options):
        df = reader(spark, data, **options)
        return {p: [r["offset"] for r in rs] for p, rs in
                _group(df.select("partition", "offset").orderBy("partition", "offset").collect()).items()}

    assert offsets(assign='{"events":[1]}', startingOffsets='{"events":{"1":5}}',
                   endingOffsets='{"events":{"1":9}}') == {1: [5, 6, 7, 8]}
    assert offsets(subscribe="events", startingOffsets='{"events":{"0":-2,"1":58}}',
                   endingOffsets='{"events":{"0":2,"1":-1}}') == {0: [0, 1], 1: [58, 59]}
    # timestamps are T0 + 10 * offset; an ending timestamp is exclusive (the first offset at or after it)
    assert offsets(subscribe="events", startingTimestamp=str(T0 + 555), endingTimestamp=str(T0 + 590)) == \
        {0: [56, 57, 58], 1: [56, 57, 58]}
    assert offsets(subscribe="events", startingOffsetsByTimestamp=f'{{"events":{{"0":{T0},"1":{T0 + 200}}}}}',
                   endingOffsetsByTimestamp=f'{{"events":{{"0":{T0 + 30},"1":{T0 + 10**9}}}}}') == \
        {0: [0, 1, 2], 1: list(range(20, 60))}
    assert offsets(subscribe="events", startingTimestamp=str(T0 + 10**9),
                   startingOffsetsByTimestampStrategy="latest") == {}
    df = reader(spark, data, subscribePattern="ev.*", minPartitions="5")
    assert df.rdd.getNumPartitions() >= 5
    assert df.count() == 120


def _group(rows):
    out: dict[int, list] = {}
    for r in rows:
        out.setdefault(r["partition"], []).append(r)
    return out


def _error(action) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def test_errors_a_user_can_act_on(spark, data, tmp_path):
    assert "unknown topic(s) nope" in _error(lambda: reader(spark, data, subscribe="nope").count())
    assert "failOnDataLoss must be true or false" in _error(
        lambda: reader(spark, data, subscribe="events", failOnDataLoss="maybe").count())
    assert "startingOffsets=latest is not allowed for batch" in _error(
        lambda: reader(spark, data, subscribe="events", startingOffsets="latest").count())
    assert "fixed schema" in _error(lambda: spark.read.format("kafkalite").schema("value string")
                                    .option("path", str(data)).option("subscribe", "events").load().count())

    append(tmp_path, "lossy", 1, 0, 60)
    first = sorted((tmp_path / "lossy-0").glob("*.log"))[0]
    for f in first.parent.glob(first.stem + ".*"):
        f.unlink()
    lost = dict(subscribe="lossy", startingOffsets='{"lossy":{"0":0}}')
    assert "are gone" in _error(lambda: reader(spark, tmp_path, **lost).count())
    survivors = reader(spark, tmp_path, failOnDataLoss="false", **lost).count()
    assert 0 < survivors < 60

    append(tmp_path, "broken", 1, 0, 8)
    segment = tmp_path / "broken-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    raw[80] ^= 0xFF
    segment.write_bytes(bytes(raw))
    message = _error(lambda: reader(spark, tmp_path, subscribe="broken").collect())
    assert "CorruptBatchError" in message and str(segment) in message and "offset 0" in message


def test_sink_output_reads_back_identically(spark, tmp_path):
    from pyspark.sql import Row

    rows = [Row(key=None if i % 5 == 0 else f"k{i}".encode(), value=None if i == 7 else f"value-{i}".encode(),
                headers=None if i % 2 else [Row(key="h", value=b"%d" % i), Row(key="n", value=None)],
                partition=i % 3 if i % 4 else None)
            for i in range(40)]
    schema = "key binary, value binary, headers array<struct<key:string,value:binary>>, partition int"
    df = spark.createDataFrame(rows, schema)
    (df.write.format("kafkalite").option("path", str(tmp_path)).option("topic", "out")
     .option("numPartitions", "3").option("kafka.compression.type", "lz4").mode("append").save())
    back = reader(spark, tmp_path, subscribe="out", includeHeaders="true").collect()
    assert len(back) == 40
    by_value = {r["value"]: r for r in back}
    for i, row in enumerate(rows):
        r = by_value[row["value"]]
        assert r["key"] == row["key"]
        assert (None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]]) == \
            (None if row["headers"] is None else [(h["key"], h["value"]) for h in row["headers"]])
        if row["partition"] is not None:
            assert r["partition"] == row["partition"], i
    keyed = {}
    for r in back:
        unpinned = r["value"] is not None and rows[int(r["value"].split(b"-")[1])]["partition"] is None
        if r["key"] is not None and unpinned:
            keyed.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(ps) == 1 for ps in keyed.values())  # murmur2: a key always goes to the same partition
    assert sorted(p.name for p in tmp_path.glob("out-*")) == ["out-0", "out-1", "out-2"]
    with pytest.raises(Exception, match="overwrite is not supported"):
        df.write.format("kafkalite").option("path", str(tmp_path)).option("topic", "out").mode("overwrite").save()


def test_streaming_read_and_write_resume_exactly_once(spark, tmp_path):
    append(tmp_path, "src", 2, 0, 25)
    checkpoint = tmp_path / "checkpoint"

    def run() -> list[int]:
        q = (spark.readStream.format("kafkalite").option("path", str(tmp_path)).option("subscribe", "src")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "20")
             .option("includeHeaders", "true").load()
             .selectExpr("key", "value", "headers", "partition")
             .writeStream.format("kafkalite").option("path", str(tmp_path)).option("topic", "copy")
             .option("numPartitions", "2")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        q.awaitTermination()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    assert run() == [20, 20, 10]  # admission control: maxOffsetsPerTrigger split over both partitions
    memory = (spark.readStream.format("kafkalite").option("path", str(tmp_path)).option("subscribe", "src")
              .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
              .writeStream.format("memory").queryName("src_stream").trigger(availableNow=True).start())
    memory.awaitTermination()
    assert rows_of(spark.table("src_stream")) == {p: expected(tmp_path, "src", p) for p in (0, 1)}
    append(tmp_path, "src", 2, 25, 10)
    assert run() == [20]  # only what arrived since: resumed from the checkpoint
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # as if the driver died right after the sink's commit
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    assert run() == [20]  # Spark replays that micro-batch with the same id; the sink must not write it twice

    def strip(rs):
        return [(k, v, h) for _o, k, v, h, _t in rs]

    for p in (0, 1):
        assert strip(expected(tmp_path, "copy", p)) == strip(expected(tmp_path, "src", p))


def test_discovery_module_is_what_spark_imports():
    import pkgutil

    from pyspark.sql.datasource import DataSource

    import pyspark_kafkalite

    assert issubclass(pyspark_kafkalite.DefaultSource, DataSource)
    assert pyspark_kafkalite.DefaultSource.name() == "kafkalite"
    assert "pyspark_kafkalite" in {m.name for m in pkgutil.iter_modules()}
