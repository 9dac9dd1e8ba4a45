"""Helpers shared by the Spark tests of both modes: data written the way users write it, rows read back
as plain tuples, and the checks that must give the same answers whether Spark reads data dirs or a broker."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC
from pathlib import Path

import pytest

from kafkalite.manager.log_manager import LogManager
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.records.compression import CompressionType
from kafkalite.storage.log import FetchIsolation
from kafkalite.storage.log_config import LogConfig
from tests.support import T0

SMALL = LogConfig.from_props({"segment.bytes": 2048})


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
                for b in lg.batches(0, FetchIsolation.LOG_END) for r in b.records() if not b.is_control]


def rows_of(df) -> dict[int, list[tuple]]:
    """Rows by partition, as (offset, key, value, headers, timestamp ms), in offset order."""
    out: dict[int, list[tuple]] = {}
    for r in df.orderBy("partition", "offset").collect():
        headers = None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]]
        ts = int(r["timestamp"].replace(tzinfo=UTC).timestamp() * 1000)
        out.setdefault(r["partition"], []).append((r["offset"], r["key"], r["value"], headers, ts))
    return out


def error_of(action: Callable[[], object]) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def check_range_options(read: Callable[..., object]) -> None:
    """startingOffsets/endingOffsets/timestamps/minPartitions over topic `events` as `append(.., "events",
    2, 0, 60)` writes it (timestamps T0 + 10 * offset); `read(**options)` loads a DataFrame."""
    def offsets(**options):
        out: dict[int, list[int]] = {}
        for r in read(**options).select("partition", "offset").orderBy("partition", "offset").collect():
            out.setdefault(r["partition"], []).append(r["offset"])
        return out

    assert offsets(assign='{"events":[1]}', startingOffsets='{"events":{"1":5}}',
                   endingOffsets='{"events":{"1":9}}') == {1: [5, 6, 7, 8]}
    assert offsets(subscribe="events", startingOffsets='{"events":{"0":-2,"1":58}}',
                   endingOffsets='{"events":{"0":2,"1":-1}}') == {0: [0, 1], 1: [58, 59]}
    # an ending timestamp is exclusive (the first offset at or after it)
    assert offsets(subscribe="events", startingTimestamp=str(T0 + 555), endingTimestamp=str(T0 + 590)) == \
        {0: [56, 57, 58], 1: [56, 57, 58]}
    assert offsets(subscribe="events", startingOffsetsByTimestamp=f'{{"events":{{"0":{T0},"1":{T0 + 200}}}}}',
                   endingOffsetsByTimestamp=f'{{"events":{{"0":{T0 + 30},"1":{T0 + 10**9}}}}}') == \
        {0: [0, 1, 2], 1: list(range(20, 60))}
    assert offsets(subscribe="events", startingTimestamp=str(T0 + 10**9),
                   startingOffsetsByTimestampStrategy="latest") == {}
    assert "no record of events-0 has a timestamp" in error_of(
        lambda: read(subscribe="events", startingTimestamp=str(T0 + 10**9)).count())
    df = read(subscribePattern="ev.*", minPartitions="5")
    assert df.rdd.getNumPartitions() >= 5
    assert df.count() == 120


def sink_rows():
    """Rows for the sink tests, with every column Spark's Kafka sink takes, and their schema."""
    from pyspark.sql import Row

    rows = [Row(key=None if i % 5 == 0 else f"k{i}".encode(), value=None if i == 7 else f"value-{i}".encode(),
                headers=None if i % 2 else [Row(key="h", value=b"%d" % i), Row(key="n", value=None)],
                partition=i % 3 if i % 4 else None)
            for i in range(40)]
    schema = "key binary, value binary, headers array<struct<key:string,value:binary>>, partition int"
    return rows, schema


def check_sink_output(rows, back) -> dict[bytes, int]:
    """The rows read back (`back`) are those written: keys, values, headers, pinned partitions, and a
    key without a pinned partition always in one partition. Returns that partition per such key."""
    assert len(back) == len(rows)
    by_value = {r["value"]: r for r in back}
    for i, row in enumerate(rows):
        r = by_value[row["value"]]
        assert r["key"] == row["key"]
        assert (None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]]) == \
            (None if row["headers"] is None else [(h["key"], h["value"]) for h in row["headers"]])
        if row["partition"] is not None:
            assert r["partition"] == row["partition"], i
    keyed: dict[bytes, set[int]] = {}
    for r in back:
        unpinned = r["value"] is not None and rows[int(r["value"].split(b"-")[1])]["partition"] is None
        if r["key"] is not None and unpinned:
            keyed.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(ps) == 1 for ps in keyed.values())  # murmur2: a key always goes to the same partition
    return {k: next(iter(ps)) for k, ps in keyed.items()}


# --- reading a sink's output back, independently of the source under test -----------------------------------


def log_records(root: Path, topic: str) -> list[dict]:
    """Every record of `topic` in data dir `root` as a read-only Log sees it: topic, partition, offset, key,
    value, headers (a list of pairs) and timestamp."""
    from kafkalite.storage.log import Log

    out = []
    for d in sorted(root.glob(f"{topic}-*")):
        partition = int(d.name.rsplit("-", 1)[1])
        if d.name != f"{topic}-{partition}":
            continue
        with Log.open_read_only(d) as lg:
            for b in lg.batches(0, FetchIsolation.LOG_END):
                if b.is_control:
                    continue
                out += [{"topic": topic, "partition": partition, "offset": r.offset, "key": r.key, "value": r.value,
                         "headers": [(k, v) for k, v in r.headers], "timestamp": r.timestamp} for r in b.records()]
    return out


def consumed_records(bootstrap: str, topic: str, timeout_s: float = 30) -> list[dict]:
    """Every record of `topic` read by confluent-kafka (librdkafka) from the start of each partition to its high
    watermark, in the same shape as `log_records`."""
    import time

    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "readback", "enable.auto.commit": False,
                            "enable.partition.eof": True})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        pending = {p for p in partitions if ends[p] > 0}
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
        out: list[dict] = []
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() != ck.KafkaError._PARTITION_EOF:
                    raise RuntimeError(str(m.error()))
                if m.offset() >= ends[m.partition()]:
                    pending.discard(m.partition())
                continue
            out.append({"topic": topic, "partition": m.partition(), "offset": m.offset(), "key": m.key(),
                        "value": m.value(), "headers": list(m.headers() or []), "timestamp": m.timestamp()[1]})
            if m.offset() + 1 >= ends[m.partition()]:
                pending.discard(m.partition())
        assert not pending, f"partitions {sorted(pending)} of {topic} not read to their end in {timeout_s} s"
        return out
    finally:
        consumer.close()
