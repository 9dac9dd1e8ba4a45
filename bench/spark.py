"""Spark benchmarks (issue 7): kafkalite's data source against Spark's own JSON reader, and the decoder.

- Spark batch read of 1 M records (key, value of 100-1000 bytes, 2 partitions, Kafka's default
  16 KiB producer batches) in local[2], every column materialised (`noop` sink), against
  `spark.read.json` of the same records as JSON lines (explicit schema, no inference), interleaved
  in the same session. Target: >= 1.5x the JSON reader's rows/s. Three kinds of values:
  * event JSON documents (the headline: what topics usually carry; JSON lines escape their quotes),
  * alphanumeric text (the JSON reader's best case: nothing to escape),
  * random bytes (JSON lines need base64; the JSON side decodes it back with unbase64).
- The Arrow decoder alone on one core over the same segment bytes, already in memory. Target:
  >= 2 M records/s. Reading them from the page cache too is reported alongside.

The session is `kafkalite.spark.local_session()`, whose Python workers talk to the JVM over Unix
domain sockets; the headline comparison is repeated at the end in a session on loopback TCP.

BENCH_SPARK_RECORDS (default 1,000,000) and BENCH_REPEATS (at most 5 here) trade time for noise.
Needs java on PATH.
"""

from __future__ import annotations

import base64
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from bench.common import REPEATS, prefault, scratch_dir
from kafkalite.records.compression import CompressionType
from kafkalite.spark.arrow_decode import RawChunk, decode_chunk
from kafkalite.spark.arrow_encode import build_batches
from kafkalite.spark.embedded import EmbeddedSource
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig

RECORDS = int(os.environ.get("BENCH_SPARK_RECORDS", "1000000"))
PARTITIONS = 2
TOPIC = "bench"
T0 = 1_700_000_000_000
_ALNUM = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789 ", dtype=np.uint8)


def _from_lengths(data: np.ndarray, lengths: np.ndarray) -> pa.Array:
    offsets = np.zeros(lengths.size + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), lengths.size, [None, pa.py_buffer(offsets),
                                                            pa.py_buffer(np.ascontiguousarray(data[: offsets[-1]]))])


def alnum_values(rng: np.random.Generator, n: int) -> pa.Array:
    """Text of 100-1000 bytes with nothing a JSON string must escape."""
    lengths = rng.integers(100, 1001, n)
    return _from_lengths(_ALNUM[rng.integers(0, len(_ALNUM), int(lengths.sum()))], lengths)


def binary_values(rng: np.random.Generator, n: int) -> pa.Array:
    lengths = rng.integers(100, 1001, n)
    return _from_lengths(rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8), lengths)


def event_values(rng: np.random.Generator, n: int) -> pa.Array:
    """Page-view events as JSON documents of 100-1000 bytes (the padding field takes up the rest)."""
    lengths = rng.integers(100, 1001, n).tolist()
    users = rng.integers(0, 100_000, n).tolist()
    pages = rng.integers(0, 5_000, n).tolist()
    pool = bytes(_ALNUM[rng.integers(0, 26, 4096)])
    out = []
    for i in range(n):
        head = (f'{{"user":"user-{users[i]}","event":"page_view","url":"/products/{pages[i]}",'
                f'"ts":{T0 + i},"agent":"Mozilla/5.0","note":"').encode()
        pad = max(0, lengths[i] - len(head) - 2)
        start = (i * 7919) % (len(pool) - 1000)
        out.append(head + pool[start : start + pad] + b'"}')
    return pa.array(out, pa.binary())


# name -> (value generator, how the JSON lines hold the value)
VARIANTS: dict[str, tuple[Callable[[np.random.Generator, int], pa.Array], str]] = {
    "event JSON values": (event_values, "text"),
    "alphanumeric values": (alnum_values, "text"),
    "binary values": (binary_values, "base64"),
}


def generate(root: Path, values_of: Callable[[np.random.Generator, int], pa.Array], encoding: str) -> int:
    """The same records twice: Kafka segments (through Log) and JSON lines. Returns bytes of segments."""
    rng = np.random.default_rng(7)
    per = RECORDS // PARTITIONS
    (root / "json").mkdir(parents=True)
    for p in range(PARTITIONS):
        keys = pa.array([b"user-%d" % k for k in rng.integers(0, 100_000, per).tolist()], pa.binary())
        values = values_of(rng, per)
        with Log(root / "kafka" / f"{TOPIC}-{p}", LogConfig()) as lg:
            for batch, _n in build_batches(keys, values, None, T0, CompressionType.NONE, 16 * 1024):
                lg.append_as_leader(bytearray(batch))
        key_list, value_list = keys.to_pylist(), values.to_pylist()
        with open(root / "json" / f"part-{p}.json", "w") as f:
            for i in range(per):
                raw = value_list[i]
                text = (base64.b64encode(raw).decode() if encoding == "base64"
                        else raw.decode().replace("\\", "\\\\").replace('"', '\\"'))
                f.write(f'{{"key":"{key_list[i].decode()}","value":"{text}","topic":"{TOPIC}",'
                        f'"partition":{p},"offset":{i},"timestamp":{T0},"timestampType":0}}\n')
    return sum(f.stat().st_size for f in (root / "kafka").rglob("*.log"))


def _session(**conf: str):
    from kafkalite.spark import local_session

    return local_session("kafkalite-bench", **{"spark.driver.memory": "4g", **conf})


def bench_spark_read(results: dict) -> None:
    if shutil.which("java") is None:
        results["Spark read (kafkalite vs JSON)"] = ("skipped: no java", "-", ">= 1.5x")
        return
    kept: Path | None = None  # the event data, read once more over TCP at the end
    spark = _session()
    try:
        for label, (values_of, encoding) in VARIANTS.items():
            d = scratch_dir()
            try:
                size = generate(d, values_of, encoding)
                k, j = _compare(spark, d, encoding, label)
                target = ">= 1.5x" if label == "event JSON values" else "informational"
                results[f"Spark batch read, {RECORDS:,} records, {label}"] = (
                    f"{k / 1e6:.2f} M rows/s ({size / 2**20:,.0f} MiB)",
                    f"{k / j:.2f}x spark.read.json ({j / 1e6:.2f} M rows/s)", target)
                if label == "event JSON values":
                    _bench_decoder(d, results)
                    kept, d = d, None
            finally:
                if d is not None:
                    shutil.rmtree(d, ignore_errors=True)
    finally:
        spark.stop()
    if kept is not None:
        _over_tcp(kept, results)


def _over_tcp(d: Path, results: dict) -> None:
    """The headline comparison again with Python workers on loopback TCP (Spark's default transport).

    `local_session` turns on Unix domain sockets between the JVM and its Python workers; this shows
    what a session without them gets."""
    spark = _session(**{"spark.python.unix.domain.socket.enabled": "false"})
    try:
        k, j = _compare(spark, d, "text", "event JSON values, TCP")
        results[f"same, Python workers on loopback TCP ({RECORDS:,} records, event JSON values)"] = (
            f"{k / 1e6:.2f} M rows/s", f"{k / j:.2f}x spark.read.json ({j / 1e6:.2f} M rows/s)", "informational")
    finally:
        spark.stop()
        shutil.rmtree(d, ignore_errors=True)


def _compare(spark, d: Path, encoding: str, label: str) -> tuple[float, float]:
    """Median rows/s of kafkalite and of the JSON reader, interleaved, after one warm-up each."""
    json_schema = ("key string, value string, topic string, partition int, offset long, timestamp long, "
                   "timestampType int")
    kafka_df = spark.read.format("kafkalite").option("path", str(d / "kafka")).option("subscribe", TOPIC).load()
    json_df = spark.read.schema(json_schema).json(str(d / "json"))
    if encoding == "base64":
        json_df = json_df.selectExpr("key", "unbase64(value) AS value", "topic", "partition", "offset",
                                     "timestamp", "timestampType")
    runs = {"kafkalite": kafka_df, "json": json_df}
    for _ in range(2):  # warm-up: Python workers, the JVM's JIT, the page cache
        for df in runs.values():
            df.write.format("noop").mode("overwrite").save()
    times: dict[str, list[float]] = {name: [] for name in runs}
    repeats = min(REPEATS, 5)
    with tqdm(total=2 * repeats, desc=f"Spark read, {label}", leave=False) as bar:
        for _ in range(repeats):
            for name, df in runs.items():
                times[name].append(_timed(lambda df=df: df.write.format("noop").mode("overwrite").save()))
                bar.update(1)
    return RECORDS / statistics.median(times["kafkalite"]), RECORDS / statistics.median(times["json"])


def _timed(action) -> float:
    prefault()
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def _bench_decoder(d: Path, results: dict) -> None:
    """One core: decode the first partition's segment bytes, held in memory, into Arrow batches."""
    source = EmbeddedSource((str(d / "kafka"),))
    tp = (TOPIC, 0)
    end = source.offset_bounds([tp])[tp].latest
    chunks = [(bytes(c.data), c.source) for c, _ in source.read(tp, 0, end)]

    def decode_only() -> float:
        prefault()
        t0 = time.perf_counter()
        n = sum(decode_chunk(RawChunk(data, src), TOPIC, 0, 0, end, False).num_rows for data, src in chunks)
        assert n == end
        return n / (time.perf_counter() - t0)

    def read_and_decode() -> float:
        prefault()
        t0 = time.perf_counter()
        n = sum(decode_chunk(c, TOPIC, 0, 0, end, False).num_rows for c, _ in source.read(tp, 0, end))
        return n / (time.perf_counter() - t0)

    decode_only()
    rates = [decode_only() for _ in range(max(REPEATS, 3))]
    with_io = [read_and_decode() for _ in range(3)]
    results["Arrow decoder alone, one core (records in memory)"] = (
        f"{statistics.median(rates) / 1e6:.2f} M records/s",
        f"{statistics.median(with_io) / 1e6:.2f} M records/s with the page-cache reads", ">= 2 M/s")


def bench_decoder_only(results: dict) -> None:
    """The decoder on its own, without Spark or JSON (fast to run while tuning)."""
    d = scratch_dir()
    try:
        rng = np.random.default_rng(1)
        n = min(RECORDS, 400_000)
        keys = pa.array([b"user-%d" % i for i in rng.integers(0, 100_000, n)], pa.binary())
        with Log(d / "kafka" / f"{TOPIC}-0", LogConfig()) as lg:
            for batch, _n in build_batches(keys, event_values(rng, n), None, T0, CompressionType.NONE, 16 * 1024):
                lg.append_as_leader(bytearray(batch))
        _bench_decoder(d, results)
    finally:
        shutil.rmtree(d, ignore_errors=True)


ALL = {"spark": bench_spark_read, "spark-decode": bench_decoder_only}
