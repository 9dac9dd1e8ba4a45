"""Options the source or sink does not use are named in one WARNING each, never silently ignored.

Spark's own Kafka connector ignores unknown options; kafkalite names each with the nearest known one
(a typo such as `startingOffset` or `subcribe`), or says where it would have an effect (`kafka.acks` on
a source, `kafka.isolation.level` in embedded mode), and goes on. Spark builds a streaming query's
reader and writer twice, in two Python workers; the warning comes from one of them only.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")

from kafkalite.spark.option_names import unused_options
from kafkalite.spark.options import parse_read_options, parse_write_options

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")


def warnings_of(caplog, parse) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kafkalite.spark"):
        parse()
    return [r.getMessage() for r in caplog.records if r.name == "kafkalite.spark"]


def test_a_misspelt_source_option_is_named_with_the_nearest_one(tmp_path, caplog):
    got = warnings_of(caplog, lambda: parse_read_options(
        {"path": str(tmp_path), "subscribe": "t", "startingOffset": "earliest", "subcribePattern": "x"}, "batch"))
    assert got == ["unknown option startingoffset is ignored by the embedded-mode source (did you mean "
                   "startingOffsets?)",
                   "unknown option subcribepattern is ignored by the embedded-mode source (did you mean "
                   "subscribePattern?)"]


def test_options_of_the_other_side_or_mode_say_where_they_count(tmp_path, caplog):
    got = warnings_of(caplog, lambda: parse_read_options(
        {"path": str(tmp_path), "subscribe": "t", "topic": "x", "kafka.acks": "1", "kafka.isolation.level":
         "read_committed", "kafka.linger.ms": "5", "groupIdPrefix": "g"}, "batch"))
    assert got == [
        "option topic is only used by the sink; it has no effect on this embedded-mode source",
        "option kafka.acks is only used by the sink in broker mode; it has no effect on this embedded-mode source",
        "option kafka.isolation.level is only used by the source in broker mode; it has no effect on this "
        "embedded-mode source",
        "option kafka.linger.ms is a Kafka client setting that kafkalite's embedded-mode source does not use; "
        "it has no effect (docs/spark.md lists the kafka.* settings that do)",
        "option groupidprefix of Spark's Kafka connector has no effect in kafkalite: no consumer group is "
        "joined: offsets live in Spark's checkpoint",
    ]
    sink = warnings_of(caplog, lambda: parse_write_options(
        {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "t", "deliveryGuarantee": "exactly_once",
         "startingOffsets": "earliest", "kafka.acks": "1"}))
    assert sink == ["unknown option deliveryguarantee is ignored by the broker-mode sink",
                    "option startingOffsets is only used by the source; it has no effect on this broker-mode sink"]


@pytest.mark.parametrize(("use", "mode", "options"), [
    ("read", "embedded", ["path", "subscribe", "subscribepattern", "assign", "startingoffsets", "startingtimestamp",
                          "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "endingoffsets",
                          "endingtimestamp", "endingoffsetsbytimestamp", "failondataloss", "maxoffsetspertrigger",
                          "minoffsetspertrigger", "maxtriggerdelay", "minpartitions", "includeheaders",
                          "kafka.check.crcs", "checkpointlocation", "queryname"]),
    ("read", "broker", ["kafka.bootstrap.servers", "kafka.isolation.level", "kafka.max.partition.fetch.bytes",
                        "kafka.fetch.max.bytes", "kafka.request.timeout.ms", "kafka.socket.connection.setup.timeout.ms",
                        "kafka.default.api.timeout.ms", "kafka.retry.backoff.ms", "kafka.client.id",
                        "kafka.security.protocol", "kafka.sasl.mechanism", "kafka.ssl.truststore.location"]),
    ("write", "embedded", ["path", "topic", "numpartitions", "locktimeoutms", "sinkid", "topicconfig.segment.bytes",
                           "kafka.compression.type", "kafka.batch.size", "checkpointlocation", "queryname"]),
    ("write", "broker", ["kafka.bootstrap.servers", "topic", "numpartitions", "topicconfig.cleanup.policy",
                         "kafka.acks", "kafka.max.request.size", "kafka.compression.type", "kafka.batch.size",
                         "kafka.request.timeout.ms", "kafka.sasl.jaas.config"]),
])
def test_every_documented_option_is_known(use, mode, options):
    assert unused_options(options, use, mode) == {}


SCRIPT = """
import sys, time
import kafkalite.spark
from kafkalite.manager.log_manager import LogManager
from kafkalite.records import SimpleRecord, build_batch

root, checkpoint = sys.argv[1], sys.argv[2]
with LogManager([root]) as manager:
    log = manager.get_or_create_log("events", 0)
    log.append_as_leader(build_batch([SimpleRecord(b"k", b"v%d" % i, int(time.time() * 1000)) for i in range(5)]))
    log.update_high_watermark(log.log_end_offset)
spark = kafkalite.spark.local_session("unknown-options", **{"spark.python.unix.domain.socket.enabled": "false"})
n = (spark.read.format("kafkalite").option("path", root).option("subscribe", "events")
     .option("startingOffset", "latest").load().count())
(spark.read.format("kafkalite").option("path", root).option("subscribe", "events").load()
 .selectExpr("key", "value").write.format("kafkalite").mode("append").option("path", root)
 .option("topic", "copy").option("deliveryGuarantee", "exactly_once").save())
query = (spark.readStream.format("kafkalite").option("path", root).option("subscribe", "events")
         .option("startingOffsets", "earliest").option("maxOffsetPerTrigger", "2").load()
         .selectExpr("key", "value").writeStream.format("kafkalite").option("path", root)
         .option("topic", "streamed").option("checkpointLocation", checkpoint).option("kafka.linger.ms", "5")
         .trigger(availableNow=True).start())
query.awaitTermination()
spark.stop()
print("ROWS", n)
"""


@pytest.mark.spark
@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java")
def test_a_spark_job_logs_one_warning_per_unknown_option(tmp_path):
    pytest.importorskip("pyspark")
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    (tmp_path / "data").mkdir()
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "data"), str(tmp_path / "checkpoint")],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ROWS 5" in out.stdout  # the misspelt startingOffset changed nothing: a batch read starts at earliest
    lines = [line for line in out.stderr.splitlines() if line.startswith("WARNING kafkalite.spark:")]
    assert sorted(lines) == sorted([
        "WARNING kafkalite.spark: unknown option startingoffset is ignored by the embedded-mode source "
        "(did you mean startingOffsets?)",
        "WARNING kafkalite.spark: unknown option deliveryguarantee is ignored by the embedded-mode sink",
        "WARNING kafkalite.spark: unknown option maxoffsetpertrigger is ignored by the embedded-mode source "
        "(did you mean maxOffsetsPerTrigger?)",
        "WARNING kafkalite.spark: option kafka.linger.ms is a Kafka client setting that kafkalite's "
        "embedded-mode sink does not use; it has no effect (docs/spark.md lists the kafka.* settings that do)",
    ]), out.stderr[-3000:]
