"""kafkalite as a Spark data source and sink, end to end, in one shared local Spark session.

Spark costs 10+ s to start and ~5 s more for its first Python data source query, so every test
here shares one session (`kafkalite.spark.local_session`, sized for a 2-core CI machine) and small data.
Skipped when `java` is missing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")

from tests.support.spark import (
    append,
    check_range_options,
    check_sink_output,
    error_of,
    expected,
    rows_of,
    sink_rows,
)

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java"),
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]


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
    check_range_options(lambda **options: reader(spark, data, **options))


def test_errors_a_user_can_act_on(spark, data, tmp_path):
    assert "unknown topic(s) nope" in error_of(lambda: reader(spark, data, subscribe="nope").count())
    assert "failOnDataLoss must be true or false" in error_of(
        lambda: reader(spark, data, subscribe="events", failOnDataLoss="maybe").count())
    assert "startingOffsets=latest is not allowed for batch" in error_of(
        lambda: reader(spark, data, subscribe="events", startingOffsets="latest").count())
    assert "fixed schema" in error_of(lambda: spark.read.format("kafkalite").schema("value string")
                                      .option("path", str(data)).option("subscribe", "events").load().count())

    append(tmp_path, "lossy", 1, 0, 60)
    first = sorted((tmp_path / "lossy-0").glob("*.log"))[0]
    for f in first.parent.glob(first.stem + ".*"):
        f.unlink()
    lost = dict(subscribe="lossy", startingOffsets='{"lossy":{"0":0}}')
    assert "are gone" in error_of(lambda: reader(spark, tmp_path, **lost).count())
    survivors = reader(spark, tmp_path, failOnDataLoss="false", **lost).count()
    assert 0 < survivors < 60

    append(tmp_path, "broken", 1, 0, 8)
    segment = tmp_path / "broken-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    raw[80] ^= 0xFF
    segment.write_bytes(bytes(raw))
    message = error_of(lambda: reader(spark, tmp_path, subscribe="broken").collect())
    assert "CorruptBatchError" in message and str(segment) in message and "offset 0" in message


def test_sink_output_reads_back_identically(spark, tmp_path):
    rows, schema = sink_rows()
    df = spark.createDataFrame(rows, schema)
    (df.write.format("kafkalite").option("path", str(tmp_path)).option("topic", "out")
     .option("numPartitions", "3").option("kafka.compression.type", "lz4").mode("append").save())
    check_sink_output(rows, reader(spark, tmp_path, subscribe="out", includeHeaders="true").collect())
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
