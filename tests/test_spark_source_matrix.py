"""The source's options, each set once, in both modes; offsets by timestamp; bounds bound when a query runs.

Data: topic `blocks`, two partitions of 30 records in batches of three, over several segments with a
time-index entry every batch. The records come in three blocks of ten whose timestamps are equal
within a block (T0+1000, +2000, +3000), so batches straddle blocks. Every answer is compared with a
reference computed by reading every record with the storage API. Embedded mode reads a data dir with
no writer; broker mode reads a `kafkalite serve` whose data dir holds the same files.

Two defects are pinned here: embedded mode resolved timestamps to the wrong offsets (10..26 for the
second block instead of 10..19: its own lookup used the time-index entry's offset as the lower bound of
the record scan), and a DataFrame collected again kept the offsets of its first run (PySpark plans a
Python data source's partitions once per DataFrame; `earliest`/`latest` now bind in the read tasks).
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite.client import KafkaClient
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol import ApiKey
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.storage.log_config import LogConfig
from tests.support import T0
from tests.support.brokers import BrokerProcess
from tests.support.spark import error_of, log_records

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java"),
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

BLOCK_TS = (T0 + 1000, T0 + 2000, T0 + 3000)
TOPIC_CONFIG = {"segment.bytes": 700, "index.interval.bytes": 1, "retention.ms": -1}


def block_records(partition: int) -> list[SimpleRecord]:
    return [SimpleRecord(b"k%d" % (i % 4), b"p%d-%d" % (partition, i), BLOCK_TS[i // 10],
                         (("i", b"%d" % i),) if i % 2 else ()) for i in range(30)]


def write_log(root: Path, topic: str, batches: list[list[SimpleRecord]], partition: int = 0,
              log_start: int | None = None) -> None:
    """Append each batch as a writer (an application with a LogManager) would, then shut down cleanly."""
    lm = LogManager([root], LogConfig.from_props(TOPIC_CONFIG))
    try:
        lg = lm.get_or_create_log(topic, partition, TOPIC_CONFIG)
        for batch in batches:
            lg.append_as_leader(build_batch(batch))
        lg.update_high_watermark(lg.log_end_offset)
        if log_start is not None:
            lg.maybe_increment_log_start_offset(log_start)
    finally:
        lm.shutdown()


def write_blocks(root: Path) -> None:
    for p in (0, 1):
        recs = block_records(p)
        write_log(root, "blocks", [recs[i:i + 3] for i in range(0, 30, 3)], p)


@dataclass
class Mode:
    name: str
    root: Path  # the data dir (the broker's, in broker mode)
    broker: BrokerProcess | None = None

    def options(self) -> dict[str, str]:
        if self.broker is None:
            return {"path": str(self.root)}
        return {"kafka.bootstrap.servers": self.broker.bootstrap}

    def read(self, spark, **options: str):
        r = spark.read.format("kafkalite")
        for k, v in {**self.options(), **options}.items():
            r = r.option(k, v)
        return r.load()

    def append(self, topic: str, records: list[SimpleRecord], partition: int = 0) -> None:
        """More records into an existing partition, by the writer of this mode."""
        if self.broker is None:
            write_log(self.root, topic, [records], partition)
            return
        with KafkaClient(self.broker.bootstrap) as c:
            answer = c.request(ApiKey.PRODUCE, {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
                                                "topic_data": [{"name": topic, "partition_data": [
                                                    {"index": partition, "records": build_batch(records)}]}]})
            assert all(p["error_code"] == 0 for t in answer["responses"] for p in t["partition_responses"]), answer

    def delete_records(self, topic: str, before: int) -> None:
        """Move the log start of partition 0 (DeleteRecords in broker mode; the storage API in embedded mode)."""
        if self.broker is None:
            write_log(self.root, topic, [], 0, log_start=before)
            return
        with KafkaClient(self.broker.bootstrap) as c:
            assert c.delete_records({(topic, 0): before})[(topic, 0)]["error_code"] == 0

    def new_topic(self, partitions: int = 1) -> str:
        topic = f"late-{uuid.uuid4().hex[:8]}"
        if self.broker is None:
            for p in range(partitions):
                write_log(self.root, topic, [], p)
        else:
            with KafkaClient(self.broker.bootstrap) as c:
                c.create_topic(topic, partitions, 1, {k: str(v) for k, v in TOPIC_CONFIG.items()})
        return topic


@pytest.fixture(scope="module")
def embedded(tmp_path_factory) -> Mode:
    root = tmp_path_factory.mktemp("source-embedded")
    write_blocks(root)
    return Mode("embedded", root)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Mode]:
    root = tmp_path_factory.mktemp("source-broker") / "data"
    root.mkdir()
    write_blocks(root)
    broker = BrokerProcess(root, {"log.retention.ms": -1, "log.segment.bytes": 700,
                                  "log.index.interval.bytes": 1}).start()
    try:
        yield Mode("broker", root, broker)
    finally:
        assert broker.stop() == 0, broker.output()


@pytest.fixture(params=["embedded", "broker"])
def mode(request) -> Mode:
    return request.getfixturevalue("embedded" if request.param == "embedded" else "served")


def reference() -> dict[int, list[SimpleRecord]]:
    return {p: block_records(p) for p in (0, 1)}


def offsets_of(df) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in df.select("partition", "offset").orderBy("partition", "offset").collect():
        out.setdefault(r["partition"], []).append(r["offset"])
    return out


def by_ts(ts: int) -> str:
    return f'{{"blocks":{{"0":{ts},"1":{ts}}}}}'


# --- offsets by timestamp --------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "offsets"), [
    ({"startingOffsetsByTimestamp": by_ts(BLOCK_TS[1]), "endingOffsetsByTimestamp": by_ts(BLOCK_TS[2])},
     range(10, 20)),
    ({"startingTimestamp": str(BLOCK_TS[1]), "endingTimestamp": str(BLOCK_TS[2])}, range(10, 20)),
    ({"startingTimestamp": str(BLOCK_TS[2])}, range(20, 30)),
    ({"startingTimestamp": str(BLOCK_TS[0] + 1), "endingTimestamp": str(BLOCK_TS[1] + 1)}, range(10, 20)),
    ({"endingTimestamp": str(BLOCK_TS[0])}, range(0, 0)),
    ({"startingTimestamp": "0", "endingOffsetsByTimestamp": by_ts(BLOCK_TS[2] + 1)}, range(0, 30)),
], ids=["by-partition", "global", "third-block", "between-blocks", "before-everything", "after-everything"])
def test_timestamps_select_the_first_record_at_or_after_them(spark, mode, options, offsets):
    got = offsets_of(mode.read(spark, subscribe="blocks", **options))
    assert got == ({p: list(offsets) for p in (0, 1)} if offsets else {})


def test_streaming_starts_at_the_first_record_at_or_after_the_timestamp(spark, mode, tmp_path):
    for options in ({"startingTimestamp": str(BLOCK_TS[1])},
                    {"startingOffsetsByTimestamp": by_ts(BLOCK_TS[2])}):
        name = f"ts_{uuid.uuid4().hex[:8]}"
        r = spark.readStream.format("kafkalite")
        for k, v in {**mode.options(), "subscribe": "blocks", **options}.items():
            r = r.option(k, v)
        query = (r.load().select("partition", "offset").writeStream.format("memory").queryName(name)
                 .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        first = 10 if "startingTimestamp" in options else 20
        assert offsets_of(spark.table(name)) == {p: list(range(first, 30)) for p in (0, 1)}


@st.composite
def layouts(draw) -> list[list[int]]:
    """Batches of record timestamps (deltas from T0): runs of equal ones, increasing, and some going back."""
    out, ts = [], 0
    for _ in range(draw(st.integers(1, 25))):
        batch = []
        for _ in range(draw(st.integers(1, 6))):
            ts = draw(st.sampled_from([ts, ts, ts + draw(st.integers(1, 5)), max(0, ts - draw(st.integers(1, 5)))]))
            batch.append(ts)
        out.append(batch)
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts(), log_start=st.integers(0, 8), data=st.data())
def test_both_backends_answer_every_timestamp_as_a_scan_of_every_record(served, tmp_path_factory, layout, log_start,
                                                                         data):
    """Embedded and broker mode answer ListOffsets by time alike (one implementation: the storage layer's), and
    as reading every record would: the first offset at or after the log start whose timestamp is >= the target."""
    from kafkalite.spark.specs import BrokerSpec, EmbeddedSpec

    root = tmp_path_factory.mktemp("ts-layout")
    batches = [[SimpleRecord(None, b"x" * 40, T0 + t) for t in b] for b in layout]
    total = sum(map(len, batches))
    log_start = min(log_start, total)
    write_log(root, "ts", batches, log_start=log_start)
    topic = served.new_topic()
    for b in batches:
        served.append(topic, b)
    assert served.broker is not None
    if log_start:
        served.delete_records(topic, log_start)
    records = log_records(root, "ts")
    present = sorted({t for b in layout for t in b})
    # timestamps the records have (where equal ones inside a batch matter), between them, and past every one
    targets = data.draw(st.lists(st.one_of(st.sampled_from(present), st.integers(-1, present[-1] + 2)),
                                 min_size=1, max_size=8))
    assert len(list((root / "ts-0").glob("*.log"))) >= (2 if total > 20 else 1)
    embedded = EmbeddedSpec((str(root),)).open_source()
    broker = BrokerSpec(served.broker.bootstrap).open_source()
    try:
        for target in targets:
            want = next((r["offset"] for r in records if r["offset"] >= log_start and r["timestamp"] >= T0 + target),
                        None)
            assert embedded.offsets_for_timestamps({("ts", 0): T0 + target}) == {("ts", 0): want}, target
            assert broker.offsets_for_timestamps({(topic, 0): T0 + target}) == {(topic, 0): want}, target
    finally:
        embedded.close()
        broker.close()


# --- every option once ---------------------------------------------------------------------------------------


def rows(df) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    cols = df.columns
    for r in df.orderBy("partition", "offset").collect():
        headers = None
        if "headers" in cols and r["headers"] is not None:
            headers = [(h["key"], h["value"]) for h in r["headers"]]
        out.setdefault(r["partition"], []).append((r["offset"], r["key"], r["value"], headers))
    return out


def want(partitions=(0, 1), start=0, end=30, headers=False) -> dict[int, list[tuple]]:
    out = {}
    for p in partitions:
        recs = reference()[p][start:end]
        out[p] = [(start + i, r.key, r.value, ([(k, v) for k, v in r.headers] or None) if headers else None)
                  for i, r in enumerate(recs)]
    return {p: rs for p, rs in out.items() if rs}


BATCH_CASES = {
    "subscribe": ({"subscribe": "blocks"}, want()),
    "subscribePattern": ({"subscribePattern": "bl.*s"}, want()),
    "assign": ({"assign": '{"blocks":[1]}'}, want((1,))),
    "startingOffsets-earliest": ({"subscribe": "blocks", "startingOffsets": "earliest"}, want()),
    "startingOffsets-json": ({"assign": '{"blocks":[0]}', "startingOffsets": '{"blocks":{"0":7}}'},
                             want((0,), 7)),
    "endingOffsets-json": ({"assign": '{"blocks":[0]}', "startingOffsets": '{"blocks":{"0":-2}}',
                            "endingOffsets": '{"blocks":{"0":4}}'}, want((0,), 0, 4)),
    "endingOffsets-latest": ({"subscribe": "blocks", "endingOffsets": "latest"}, want()),
    "startingOffsetsByTimestampStrategy": ({"subscribe": "blocks", "startingTimestamp": str(BLOCK_TS[2] + 1),
                                            "startingOffsetsByTimestampStrategy": "latest"}, {}),
    "failOnDataLoss": ({"subscribe": "blocks", "failOnDataLoss": "false"}, want()),
    "minPartitions": ({"subscribe": "blocks", "minPartitions": "7"}, want()),
    "includeHeaders": ({"subscribe": "blocks", "includeHeaders": "true"}, want(headers=True)),
    "kafka.check.crcs": ({"subscribe": "blocks", "kafka.check.crcs": "false"}, want()),
}


@pytest.mark.parametrize("case", list(BATCH_CASES))
def test_each_batch_option_reads_what_it_says(spark, mode, case):
    options, expected = BATCH_CASES[case]
    df = mode.read(spark, **options)
    assert rows(df) == expected
    if case == "minPartitions":
        assert df.rdd.getNumPartitions() >= 7


STREAM_CASES = {
    # option set -> (expected offsets per partition, micro-batches at least / at most)
    "startingOffsets-earliest": ({"startingOffsets": "earliest"}, range(0, 30), (1, 1)),
    "startingOffsets-latest": ({"startingOffsets": "latest"}, range(0, 0), (0, 1)),
    "startingOffsets-json": ({"startingOffsets": '{"blocks":{"0":25,"1":-2}}'}, None, (1, 1)),
    "maxOffsetsPerTrigger": ({"startingOffsets": "earliest", "maxOffsetsPerTrigger": "20"}, range(0, 30), (3, 3)),
    "minOffsetsPerTrigger": ({"startingOffsets": "earliest", "minOffsetsPerTrigger": "10",
                              "maxTriggerDelay": "1s"}, range(0, 30), (1, 1)),
    "includeHeaders": ({"startingOffsets": "earliest", "includeHeaders": "true"}, range(0, 30), (1, 1)),
}


@pytest.mark.parametrize("case", list(STREAM_CASES))
def test_each_streaming_option_reads_what_it_says(spark, mode, tmp_path, case):
    options, offsets, (least, most) = STREAM_CASES[case]
    name = f"s_{uuid.uuid4().hex[:8]}"
    r = spark.readStream.format("kafkalite")
    for k, v in {**mode.options(), "subscribe": "blocks", **options}.items():
        r = r.option(k, v)
    query = (r.load().writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert least <= len(batches) <= most, [p["numInputRows"] for p in query.recentProgress]
    got = rows(spark.table(name))
    if offsets is None:
        assert {p: [o for o, *_ in rs] for p, rs in got.items()} == {0: list(range(25, 30)), 1: list(range(30))}
    else:
        assert got == ({p: want((p,), offsets.start, offsets.stop, headers="includeHeaders" in options)[p]
                        for p in (0, 1)} if offsets else {})


# --- bounds bound when the query runs ----------------------------------------------------------------------


def values(df) -> list[bytes]:
    return [r["value"] for r in df.orderBy("partition", "offset").collect()]


def recs(prefix: str, n: int, start: int = 0) -> list[SimpleRecord]:
    now = int(time.time() * 1000)
    return [SimpleRecord(None, f"{prefix}{i}".encode(), now) for i in range(start, start + n)]


@pytest.mark.parametrize("options", [
    {"startingOffsets": "earliest", "endingOffsets": "latest"},
    {"startingOffsets": '{"T":{"0":-2}}', "endingOffsets": '{"T":{"0":-1}}'},
    {"startingOffsets": "earliest", "endingOffsets": "latest", "minPartitions": "3"},
], ids=["words", "json", "split"])
def test_a_dataframe_collected_again_sees_new_records_and_a_moved_log_start(spark, mode, options):
    """Spark's "explicit earliest to latest offsets" and "test late binding start offsets": the bounds are
    resolved when the query executes, not when the DataFrame was planned."""
    topic = mode.new_topic()
    mode.append(topic, recs("a", 6))
    opts = {k: v.replace('"T"', f'"{topic}"') for k, v in options.items()}
    df = mode.read(spark, assign=f'{{"{topic}":[0]}}', **opts)
    assert values(df) == [b"a%d" % i for i in range(6)]
    mode.append(topic, recs("a", 4, 6))
    assert values(df) == [b"a%d" % i for i in range(10)]  # latest bound again
    assert df.count() == 10
    mode.delete_records(topic, 8)
    assert values(df) == [b"a8", b"a9"]  # earliest bound again: no data loss, the query asked for the earliest


def test_a_partition_empty_when_planned_is_read_when_it_has_records(spark, mode):
    topic = mode.new_topic(partitions=2)
    mode.append(topic, recs("p", 3), partition=1)
    df = mode.read(spark, subscribe=topic)
    assert sorted(values(df)) == [b"p0", b"p1", b"p2"]
    mode.append(topic, recs("q", 2), partition=0)
    assert sorted(values(df)) == [b"p0", b"p1", b"p2", b"q0", b"q1"]


def test_explicit_offsets_stay_as_given_and_deleted_ones_are_data_loss(spark, mode):
    topic = mode.new_topic()
    mode.append(topic, recs("e", 10))
    df = mode.read(spark, assign=f'{{"{topic}":[0]}}', startingOffsets=f'{{"{topic}":{{"0":2}}}}',
                   endingOffsets=f'{{"{topic}":{{"0":-1}}}}')
    assert values(df) == [b"e%d" % i for i in range(2, 10)]
    mode.append(topic, recs("e", 2, 10))
    assert values(df) == [b"e%d" % i for i in range(2, 12)]  # the end (-1) binds again; the start stays 2
    mode.delete_records(topic, 5)
    assert "are gone" in error_of(lambda: df.collect())  # offsets 2..4 were asked for and are not there
    lenient = mode.read(spark, assign=f'{{"{topic}":[0]}}', startingOffsets=f'{{"{topic}":{{"0":2}}}}',
                        failOnDataLoss="false")
    assert values(lenient) == [b"e%d" % i for i in range(5, 12)]
