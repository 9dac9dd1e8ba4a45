"""Option parsing and the streaming reader's offset logic, called directly (no Spark session needed).

The streaming reader's offset methods are plain Python that Spark's runner process calls, so their
rules (admission control, new and deleted partitions, availableNow) are tested here, fast.
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from kafkalite.manager.log_manager import LogManager
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.records.compression import CompressionType
from kafkalite.spark.errors import DataLossError, OptionError, UnknownTopicError
from kafkalite.spark.offsets import from_json, rate_limit, split_ranges, to_json
from kafkalite.spark.options import parse_duration_ms, parse_read_options, parse_write_options
from kafkalite.spark.reading import OffsetRange
from kafkalite.spark.specs import BrokerSpec, EmbeddedSpec
from kafkalite.spark.stream import StreamReader
from tests.support import T0


def opts(**kw):
    return {"path": "/data", "subscribe": "t", **kw}


@pytest.mark.parametrize(("options", "message"), [
    ({"path": "/d"}, "exactly one of the options subscribe, subscribePattern and assign"),
    ({"path": "/d", "subscribe": "a", "assign": '{"a":[0]}'}, "exactly one"),
    ({"subscribe": "a"}, "option path is required"),
    (opts(**{"kafka.bootstrap.servers": "h:9092"}), "either option path"),
    (opts(subscribe=" , "), "names no topic"),
    ({"path": "/d", "subscribePattern": "(("}, "not a valid regular expression"),
    ({"path": "/d", "assign": "[0]"}, "assign: expected a JSON object"),
    ({"path": "/d", "assign": '{"a":["x"]}'}, "list of partition numbers"),
    (opts(startingOffsets="{bad"), "startingOffsets: not valid JSON"),
    (opts(startingOffsets="latest"), "startingOffsets=latest is not allowed for batch queries"),
    (opts(startingOffsets='{"t":{"0":-1}}'), r"is -1 \(latest\), which is not allowed for batch"),
    (opts(endingOffsets="earliest"), "endingOffsets=earliest is not allowed"),
    (opts(endingOffsets='{"t":{"0":-2}}'), r"is -2 \(earliest\)"),
    (opts(failOnDataLoss="yes"), "failOnDataLoss must be true or false"),
    (opts(minPartitions="0"), "minPartitions must be a positive integer"),
    (opts(maxOffsetsPerTrigger="ten"), "maxOffsetsPerTrigger must be a positive integer"),
    (opts(maxOffsetsPerTrigger="5", minOffsetsPerTrigger="9"), "must not exceed"),
    (opts(maxTriggerDelay="soon"), "maxTriggerDelay must be a duration"),
    (opts(startingTimestamp="yesterday"), "startingTimestamp must be a timestamp"),
    (opts(startingOffsetsByTimestamp='{"t":{"0":-5}}'), "must not be negative"),
    (opts(startingOffsetsByTimestampStrategy="maybe"), "must be error or latest"),
    (opts(**{"kafka.auto.offset.reset": "earliest"}), "set the source option startingOffsets instead"),
    (opts(**{"kafka.group.id": "g", "kafka.enable.auto.commit": "true"}), "never committed to Kafka"),
])
def test_bad_read_options_are_explained(options, message):
    with pytest.raises(OptionError, match=message):
        parse_read_options(options, "batch")


def test_read_option_defaults_and_precedence():
    batch = parse_read_options({"PATH": "/a, /b", "Subscribe": "x,y,x"}, "batch")  # names are case-insensitive
    assert batch.backend == EmbeddedSpec(("/a", "/b"))
    assert batch.subscription.topics == ("x", "y")
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert (batch.fail_on_data_loss, batch.include_headers) == (True, False)
    stream = parse_read_options(opts(), "stream")
    assert stream.starting.kind == "latest"
    assert stream.max_trigger_delay_ms == 15 * 60_000
    chosen = parse_read_options(opts(startingTimestamp="5", startingOffsetsByTimestamp='{"t":{"0":1}}',
                                     startingOffsets="earliest"), "batch")
    assert (chosen.starting.kind, chosen.starting.timestamp) == ("timestamp", 5)
    chosen = parse_read_options(opts(startingOffsetsByTimestamp='{"t":{"0":1}}', startingOffsets="earliest"),
                                "batch")
    assert chosen.starting.kind == "timestamps"
    with pytest.raises(OptionError, match="not valid in streaming queries"):
        parse_read_options(opts(endingOffsets="latest"), "stream")
    broker = parse_read_options({"kafka.bootstrap.servers": "h:9092", "subscribe": "t",
                                 "kafka.Isolation.Level": "read_committed"}, "batch")
    assert isinstance(broker.backend, BrokerSpec)
    assert broker.backend.settings().isolation_level == 1  # kafka.* names are case-insensitive too
    with pytest.raises(OptionError, match=r"kafka\.fetch\.max\.bytes must be an integer"):
        parse_read_options({"kafka.bootstrap.servers": "h:9092", "subscribe": "t", "kafka.fetch.max.bytes": "x"},
                           "batch")


def test_durations_and_write_options():
    assert [parse_duration_ms(v, "x") for v in ("15m", "30s", "250", "2h", "1d", "500ms")] == \
        [900_000, 30_000, 250, 7_200_000, 86_400_000, 500]
    w = parse_write_options({"path": "/d", "topic": "t", "kafka.compression.type": "zstd",
                             "topicConfig.segment.bytes": "1048576", "numPartitions": "3"})
    assert (w.topic, w.compression, w.num_partitions) == ("t", CompressionType.ZSTD, 3)
    assert w.topic_configs == {"segment.bytes": "1048576"}
    with pytest.raises(OptionError, match=r"kafka\.compression\.type"):
        parse_write_options({"path": "/d", "kafka.compression.type": "brotli"})
    with pytest.raises(OptionError, match="topicConfig"):
        parse_write_options({"path": "/d", "topicConfig.segment.bytez": "1"})
    with pytest.raises(OptionError, match=r"max\.message\.bytes"):
        parse_write_options({"path": "/d", "kafka.batch.size": str(4 << 20)})


def test_offset_json_rate_limit_and_splitting():
    offsets = {("b", 10): 1, ("b", 2): 2, ("a", 0): 3}
    assert to_json(offsets) == '{"a":{"0":3},"b":{"2":2,"10":1}}'  # sorted, partitions numerically
    assert from_json(to_json(offsets)) == offsets
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    end = {("t", 0): 1000, ("t", 1): 10, ("t", 2): 1}
    capped = rate_limit(start, end, 100)
    assert capped == {("t", 0): 98, ("t", 1): 1, ("t", 2): 1}  # by backlog; small partitions not starved
    parts = split_ranges([(("t", 0), 0, 100), (("t", 1), 0, 10)], 5)
    assert len(parts) >= 5
    assert sorted((s, e) for tp, s, e in parts if tp == ("t", 0))[0][0] == 0
    assert sum(e - s for _tp, s, e in parts) == 110


# --- streaming reader ------------------------------------------------------------------------------


def write(root: Path, topic: str, partition: int, n: int) -> None:
    lm = LogManager([root])
    try:
        lg = lm.get_or_create_log(topic, partition)
        for i in range(n):
            lg.append_as_leader(build_batch([SimpleRecord(None, b"%d" % i, T0 + i)]))
    finally:
        lm.shutdown()


def stream(root: Path, **kw) -> StreamReader:
    return StreamReader(parse_read_options({"path": str(root), "subscribePattern": "t.*", **kw}, "stream"))


def test_stream_offsets_admission_and_partition_changes(tmp_path):
    write(tmp_path, "t1", 0, 30)
    write(tmp_path, "t1", 1, 10)
    r = stream(tmp_path, startingOffsets="earliest", maxOffsetsPerTrigger="20")
    assert r.getDefaultReadLimit() == ReadMaxRows(20)
    start = r.initialOffset()
    assert start == {"t1": {"0": 0, "1": 0}}
    end = r.latestOffset(start, ReadMaxRows(20))
    assert end == {"t1": {"0": 15, "1": 5}}
    assert r.latestOffset(end, ReadAllAvailable()) == {"t1": {"0": 30, "1": 10}}
    ranges = r.partitions(start, end)
    assert [(p.topic, p.partition, p.start, p.end) for p in ranges] == [("t1", 0, 0, 15), ("t1", 1, 0, 5)]
    assert pickle.loads(pickle.dumps(r)).opts == r.opts

    write(tmp_path, "t2", 0, 4)  # a new topic matching the pattern starts at its earliest offset
    latest = r.latestOffset({"t1": {"0": 30, "1": 10}}, ReadAllAvailable())
    assert latest == {"t1": {"0": 30, "1": 10}, "t2": {"0": 4}}
    assert [(p.topic, p.start, p.end) for p in r.partitions({"t1": {"0": 30, "1": 10}}, latest)] == [("t2", 0, 4)]

    assert r.initialOffset() == {"t1": {"0": 0, "1": 0}, "t2": {"0": 0}}
    with pytest.raises(DataLossError, match="t9-0 were deleted"):
        r.latestOffset({"t1": {"0": 30, "1": 10}, "t9": {"0": 3}}, ReadAllAvailable())
    lenient = stream(tmp_path, failOnDataLoss="false")
    assert "t9" not in lenient.latestOffset({"t1": {"0": 30, "1": 10}, "t9": {"0": 3}}, ReadAllAvailable())


def test_min_offsets_per_trigger_waits_for_data_or_the_delay(tmp_path):
    write(tmp_path, "t", 0, 5)
    r = stream(tmp_path, startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="300ms")
    assert r.getDefaultReadLimit() == ReadMinRows(10)
    start = r.initialOffset()
    assert r.latestOffset(start, ReadMinRows(10)) == start  # 5 < 10: hold the trigger back
    time.sleep(0.35)
    assert r.latestOffset(start, ReadMinRows(10)) == {"t": {"0": 5}}  # the delay passed: go with what is there


def test_available_now_stops_at_what_was_there(tmp_path):
    write(tmp_path, "t", 0, 10)
    r = stream(tmp_path, startingOffsets="earliest", maxOffsetsPerTrigger="4")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    write(tmp_path, "t", 0, 5)  # arrives after the query was told to read what is available now
    seen = []
    offsets = start
    while True:
        nxt = r.latestOffset(offsets, ReadMaxRows(4))
        if nxt == offsets:
            break
        seen.append(nxt["t"]["0"])
        offsets = nxt
    assert seen == [4, 8, 10]


def test_stream_start_options(tmp_path):
    write(tmp_path, "t", 0, 10)
    assert stream(tmp_path).initialOffset() == {"t": {"0": 10}}  # streaming default: latest
    assert stream(tmp_path, startingTimestamp=str(T0 + 7)).initialOffset() == {"t": {"0": 7}}
    assert stream(tmp_path, startingOffsets='{"t":{"0":-2}}').initialOffset() == {"t": {"0": 0}}
    with pytest.raises(OptionError, match="must give every partition"):
        stream(tmp_path, startingOffsets='{"t":{"1":3}}').initialOffset()
    with pytest.raises(OptionError, match="no record of t-0 has a timestamp"):
        stream(tmp_path, startingTimestamp=str(T0 + 100)).initialOffset()
    missing = StreamReader(parse_read_options({"path": str(tmp_path), "subscribe": "nope"}, "stream"))
    with pytest.raises(UnknownTopicError, match="unknown topic"):
        missing.initialOffset()


def test_offset_range_is_small_and_picklable(tmp_path):
    r = OffsetRange(EmbeddedSpec((str(tmp_path),)), "t", 0, 1, 2, False, True)
    assert pickle.loads(pickle.dumps(r)) == r
    assert len(pickle.dumps(r)) < 600
