"""The sink's columns, every combination a user can write, in both modes, batch and streaming.

Spark's Kafka sink takes `value` (required; string or binary; may be null) and, optionally, `key`,
`topic`, `partition` and `headers`. Each case writes one DataFrame of those columns through
`format("kafkalite")` and reads every record back without kafkalite's Spark source: with a read-only
`Log` on the data dir (embedded mode) or with confluent-kafka (broker mode), then compares keys,
values, headers, partitions and counts with what was written. A write with a `value` column alone
crashed in both modes before (no key and no partition column left the partitioner without a row count).
"""

from __future__ import annotations

import itertools
import shutil
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.brokers import BrokerProcess
from tests.support.spark import consumed_records, error_of, log_records

pytest.importorskip("confluent_kafka")
murmur2 = pytest.importorskip("kafka.partitioner.default").murmur2  # kafka-python's, an independent reference

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java"),
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]

PARTITIONS = 3
HEADERS = "array<struct<key:string,value:binary>>"
TYPES = {"key": "binary", "key_str": "string", "value": "binary", "value_str": "string", "topic": "string",
         "partition": "int", "headers": HEADERS}

# name -> the columns of the DataFrame (`_str`: the string form of key or value)
COLUMN_SETS = {
    "value": ("value",),
    "value-string": ("value_str",),
    "key-value": ("key", "value"),
    "string-key-and-value": ("key_str", "value_str"),
    "topic-value": ("topic", "value"),
    "value-headers": ("value", "headers"),
    "value-partition": ("value", "partition"),
    "key-value-partition": ("key", "value", "partition"),
    "every-column": ("key", "value", "headers", "topic", "partition"),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("sink-matrix-broker"), {"log.retention.ms": -1}).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.output()


class Target:
    """Where a case writes: a fresh data dir (embedded) or fresh topics on the module's broker."""

    def __init__(self, mode: str, root: Path, broker: BrokerProcess | None) -> None:
        self.mode = mode
        self.root = root
        self.bootstrap = broker.bootstrap if broker else None
        self.prefix = f"m{uuid.uuid4().hex[:8]}"

    def topic(self, name: str = "t") -> str:
        return f"{self.prefix}-{name}"

    def options(self) -> dict[str, str]:
        where = {"path": str(self.root)} if self.mode == "embedded" else {"kafka.bootstrap.servers": self.bootstrap}
        return {**where, "numPartitions": str(PARTITIONS)}

    def read_back(self, topics: list[str]) -> list[dict]:
        if self.mode == "embedded":
            return [r for t in topics for r in log_records(self.root, t)]
        assert self.bootstrap is not None
        return [r for t in topics for r in consumed_records(self.bootstrap, t)]


@pytest.fixture(params=["embedded", "broker"])
def target(request, tmp_path) -> Target:
    broker = request.getfixturevalue("broker") if request.param == "broker" else None
    return Target(request.param, tmp_path / "data", broker)


def make_rows(columns: tuple[str, ...], n: int, topics: list[str], nulls: int = 1) -> list[tuple]:
    """`n` rows of `columns`: values unique (or null every 7th row, so tombstones are written too), keys null
    every 5th row, headers on even rows (one with a null value), partitions pinned on 3 of 4 rows."""
    out = []
    for i in range(n):
        row = []
        for c in columns:
            if c in ("value", "value_str"):
                v = None if nulls and i % 7 == 3 else f"v{i}-é"
                row.append(v if v is None or c == "value_str" else v.encode())
            elif c in ("key", "key_str"):
                k = None if i % 5 == 0 else f"k{i % 4}"
                row.append(k if k is None or c == "key_str" else k.encode())
            elif c == "headers":
                row.append(None if i % 2 else [("h", b"%d" % i), ("n", None)])
            elif c == "topic":
                row.append(topics[i % len(topics)])
            elif c == "partition":
                row.append(i % PARTITIONS if i % 4 else None)
        out.append(tuple(row))
    return out


def schema_of(columns: tuple[str, ...]) -> str:
    return ", ".join(f"{c.removesuffix('_str')} {TYPES[c]}" for c in columns)


def expected_records(columns: tuple[str, ...], rows: list[tuple], default_topic: str | None) -> list[dict]:
    out = []
    for row in rows:
        d = {c.removesuffix("_str"): v for c, v in zip(columns, row, strict=True)}
        enc = {k: (v.encode() if isinstance(v, str) and k in ("key", "value") else v) for k, v in d.items()}
        out.append({"topic": default_topic or enc["topic"], "key": enc.get("key"), "value": enc.get("value"),
                    "headers": [tuple(h) for h in enc.get("headers") or []], "partition": enc.get("partition")})
    return out


def check_written(back: list[dict], want: list[dict]) -> None:
    """The same records (topic, key, value, headers) as written, each in the partition Kafka's rules give:
    the partition column when set, else murmur2(key) for a keyed record, else any (the sticky partition)."""
    def ident(r: dict) -> tuple:
        return r["topic"], r["key"], r["value"], tuple(r["headers"])

    assert Counter(map(ident, back)) == Counter(map(ident, want))
    assert all(0 <= r["partition"] < PARTITIONS for r in back)
    landed = Counter((ident(r), r["partition"]) for r in back)
    for w in want:  # records written twice with the same content may be pinned to different partitions
        if w["partition"] is not None:
            must = w["partition"]
        elif w["key"] is not None:
            must = (murmur2(w["key"]) & 0x7FFFFFFF) % PARTITIONS
        else:
            continue
        assert landed[(ident(w), must)] > 0, (w, must)
        landed[(ident(w), must)] -= 1


def write_batch(spark, target: Target, df, topic_option: str | None, **extra: str) -> None:
    w = df.write.format("kafkalite").mode("append")
    for k, v in {**target.options(), **extra}.items():
        w = w.option(k, v)
    if topic_option:
        w = w.option("topic", topic_option)
    w.save()


def write_stream(spark, target: Target, tmp: Path, columns: tuple[str, ...], parts: list[list[tuple]],
                 topic_option: str | None) -> None:
    """The rows as a stream: one Parquet file per part (an empty part makes an empty micro-batch), read by
    Spark's file source one file per micro-batch and written with writeStream.format("kafkalite")."""
    source = tmp / "in"
    for part in parts:
        spark.createDataFrame(part, schema_of(columns)).coalesce(1).write.mode("append").parquet(str(source))
    stream = spark.readStream.schema(schema_of(columns)).option("maxFilesPerTrigger", 1).parquet(str(source))
    w = stream.writeStream.format("kafkalite").option("checkpointLocation", str(tmp / "checkpoint"))
    for k, v in target.options().items():
        w = w.option(k, v)
    if topic_option:
        w = w.option("topic", topic_option)
    query = w.trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(180), "the streaming write did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    batches = [p for p in query.recentProgress if p["batchId"] is not None]
    assert len(batches) == len(parts)  # one micro-batch per file, the empty one included


@pytest.mark.parametrize("query", ["batch", "stream"])
@pytest.mark.parametrize("case", list(COLUMN_SETS))
def test_every_column_set_is_written_and_reads_back(spark, target, tmp_path, case, query):
    columns = COLUMN_SETS[case]
    topics = [target.topic("a"), target.topic("b")] if "topic" in columns else [target.topic()]
    topic_option = None if "topic" in columns else topics[0]
    rows = make_rows(columns, 23, topics)
    if query == "batch":
        write_batch(spark, target, spark.createDataFrame(rows, schema_of(columns)), topic_option)
    else:
        write_stream(spark, target, tmp_path, columns, [rows[:10], [], rows[10:]], topic_option)
    check_written(target.read_back(topics), expected_records(columns, rows, topic_option))


@pytest.mark.parametrize("query", ["batch", "stream"])
def test_an_empty_dataframe_writes_nothing_and_fails_nothing(spark, target, tmp_path, query):
    columns = ("key", "value")
    topic = target.topic()
    if query == "batch":
        write_batch(spark, target, spark.createDataFrame([], schema_of(columns)), topic)
    else:
        write_stream(spark, target, tmp_path, columns, [[], []], topic)
    assert target.read_back([topic]) == []


def test_topic_column_rows_go_to_each_topic_and_the_option_wins(spark, target):
    """Many topics in one DataFrame; with the topic option set, the column is ignored (Spark's rule)."""
    columns = ("topic", "key", "value")
    topics = [target.topic(x) for x in "xyz"]
    rows = make_rows(columns, 30, topics)
    write_batch(spark, target, spark.createDataFrame(rows, schema_of(columns)), None)
    check_written(target.read_back(topics), expected_records(columns, rows, None))
    override = target.topic("all")
    write_batch(spark, target, spark.createDataFrame(rows, schema_of(columns)), override)
    assert len(target.read_back([override])) == len(rows)


def test_keyless_rows_stick_to_a_partition_for_a_batch_then_move_on(spark, target):
    """Kafka's default partitioner for records without key or partition (KIP-480): one partition until a
    batch (kafka.batch.size) is full, then the next."""
    topic = target.topic()
    n, batch_size = 240, 1024
    df = spark.range(n).selectExpr("CAST(id AS INT) AS i", "repeat('x', 92) || lpad(CAST(id AS STRING), 8, '0') "
                                   "AS value").coalesce(1).select("value")
    write_batch(spark, target, df, topic, **{"kafka.batch.size": str(batch_size)})
    back = sorted(target.read_back([topic]), key=lambda r: r["value"])
    assert len(back) == n
    runs: list[list[dict]] = [[back[0]]]
    for r in back[1:]:
        if r["partition"] == runs[-1][-1]["partition"]:
            runs[-1].append(r)
        else:
            runs.append([r])
    assert len({r["partition"] for r in back}) == PARTITIONS  # spread over every partition
    for run, following in itertools.pairwise(runs):
        assert sum(len(r["value"]) + 8 for r in run) >= batch_size  # moved on only with a batch's worth
        assert following[0]["partition"] == (run[0]["partition"] + 1) % PARTITIONS
    assert max(len(run) for run in runs) <= batch_size // 100 + 1  # ... and then did move on


def test_the_default_save_mode_is_refused_by_pyspark_with_the_fix_in_the_docs(spark, target):
    """PySpark refuses ErrorIfExists for every Python data source before asking it (Spark's Kafka sink takes
    it); docs/spark.md and the README say to add .mode("append")."""
    df = spark.createDataFrame([(b"v",)], "value binary")
    w = df.write.format("kafkalite").option("topic", target.topic())
    for k, v in target.options().items():
        w = w.option(k, v)
    assert "ErrorIfExists" in error_of(w.save)
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    docs = (Path(__file__).parent.parent / "docs" / "spark.md").read_text()
    for text in (readme, docs):
        assert 'mode("append")' in text and "ErrorIfExists" in text


# --- random column subsets and null patterns -----------------------------------------------------------------

OPTIONAL = ("key", "key_str", "topic", "partition", "headers")


@st.composite
def frames(draw) -> tuple[tuple[str, ...], list[tuple]]:
    """A DataFrame of the sink's columns: the value as string or binary, any subset of the optional columns
    (key as either type), rows whose every optional field may be null."""
    value = draw(st.sampled_from(["value", "value_str"]))
    optional = draw(st.lists(st.sampled_from(OPTIONAL), unique=True, max_size=4))
    if "key" in optional and "key_str" in optional:
        optional.remove("key_str")
    columns = (value, *optional)
    n = draw(st.integers(0, 25))
    rows = []
    for i in range(n):
        row = []
        for c in columns:
            null = draw(st.booleans()) if c != "topic" else False
            if c in ("value", "value_str", "key", "key_str"):
                v = None if null else f"{c[0]}{i}"
                row.append(v.encode() if v is not None and not c.endswith("_str") else v)
            elif c == "topic":
                row.append(draw(st.sampled_from(["p", "q"])))
            elif c == "partition":
                row.append(None if null else draw(st.integers(0, PARTITIONS - 1)))
            else:
                row.append(None if null else [("h", None if draw(st.booleans()) else b"x")])
        rows.append(tuple(row))
    return columns, rows


@pytest.mark.parametrize("mode", ["embedded", "broker"])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=frames())
def test_random_column_subsets_and_nulls_read_back(spark, request, tmp_path_factory, mode, frame):
    columns, rows = frame
    broker = request.getfixturevalue("broker") if mode == "broker" else None
    target = Target(mode, tmp_path_factory.mktemp("random-sink") / "data", broker)
    topics = [target.topic("p"), target.topic("q")]
    rows = [tuple(target.topic(v) if c == "topic" else v for c, v in zip(columns, r, strict=True)) for r in rows]
    topic_option = None if "topic" in columns else topics[0]
    write_batch(spark, target, spark.createDataFrame(rows, schema_of(columns)), topic_option)
    written = sorted({r[columns.index("topic")] for r in rows}) if "topic" in columns else topics[:1]
    back = [] if not rows else (target.read_back(written) if mode == "broker" else
                                [r for t in written for r in log_records(target.root, t)])
    check_written(back, expected_records(columns, rows, topic_option))
