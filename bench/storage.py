"""Storage-layer benchmarks (issue 2): segment append, recovery scan, index lookup, record decode."""

from __future__ import annotations

import bisect
import os
import random
import shutil
import time
from array import array

from tqdm import tqdm

from bench.common import (
    DATA_BYTES,
    MiB,
    crc_16k,
    fmt_rate,
    median_rates,
    page_cache_read,
    prefault,
    raw_write_16k,
    scratch_dir,
)
from kafkalite.records import RecordBatch, SimpleRecord, build_batch
from kafkalite.storage import names
from kafkalite.storage.offset_index import OffsetIndex
from kafkalite.storage.segment import LogSegment


def _batch_16k() -> bytearray:
    """A batch of exactly 16 KiB holding 15 records of about 1 KiB.

    Exactly 16,384 bytes, like W16K's raw writes (common.raw_write_16k): a size that is not a multiple of the
    page size makes every write straddle pages and costs about 40 % more on its own, which would
    measure alignment rather than our code."""
    now = int(time.time() * 1000)
    sizes = [1000] * 15
    for _ in range(10):
        buf = build_batch([SimpleRecord(b"key-%04d" % i, os.urandom(n), now) for i, n in enumerate(sizes)])
        diff = 16 * 1024 - len(buf)
        if diff == 0:
            break
        base, extra = divmod(diff, 15)
        sizes = [n + base + (1 if i < extra else 0) for i, n in enumerate(sizes)]
    assert len(buf) == 16 * 1024, len(buf)
    return buf


def _fill_segment(directory, total: int) -> int:
    """Append `total` bytes of 16 KiB batches through LogSegment.append, assigning offsets in place."""
    seg = LogSegment.open(directory, 0, max_index_size=10 * MiB)
    buf = _batch_16k()
    batch = RecordBatch(buf)
    count = batch.last_offset_delta + 1
    next_offset = 0
    written = 0
    max_ts = batch.max_timestamp
    while written < total:
        batch.set_base_offset(next_offset)
        last = next_offset + count - 1
        seg.append(last, max_ts, last, buf)
        next_offset = last + 1
        written += len(buf)
    seg.close()
    return written


def bench_append(results: dict) -> None:
    d = scratch_dir()
    try:
        def sut() -> tuple[int, float]:
            seg_dir = d / "t-0"
            seg_dir.mkdir()
            t0 = time.perf_counter()
            n = _fill_segment(seg_dir, DATA_BYTES)
            elapsed = time.perf_counter() - t0
            shutil.rmtree(seg_dir)
            return n, elapsed

        with tqdm(total=10, desc="append vs W16K", leave=False) as bar:
            rates = median_rates({"W16K": raw_write_16k(d / "raw"), "segment append": sut}, progress=bar)
        ratio = rates["segment append"] / rates["W16K"]
        results["segment append (1 KiB records, 16 KiB batches, no fsync)"] = (
            fmt_rate(rates["segment append"]), f"{ratio:.0%} of W16K ({fmt_rate(rates['W16K'])})", ">= 60%")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_recovery(results: dict) -> None:
    d = scratch_dir()
    try:
        seg_dir = d / "t-0"
        seg_dir.mkdir()
        _fill_segment(seg_dir, DATA_BYTES)
        log_path = names.log_file(seg_dir, 0)

        def sut() -> int:
            seg = LogSegment.open(seg_dir, 0, max_index_size=10 * MiB)
            seg.recover()
            n = seg.size
            seg.close()
            return n

        with tqdm(total=15, desc="recovery vs min(RPC, CRC)", leave=False) as bar:
            rates = median_rates({"RPC": page_cache_read(log_path), "CRC16K": crc_16k(), "recovery": sut},
                                 progress=bar)
        limit = min(rates["RPC"], rates["CRC16K"])
        results["segment recovery scan (CRC32C + index rebuild)"] = (
            fmt_rate(rates["recovery"]),
            f"{rates['recovery'] / limit:.0%} of min(RPC {fmt_rate(rates['RPC'])}, CRC16K {fmt_rate(rates['CRC16K'])})",
            ">= 60%")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_index_lookup(results: dict) -> None:
    d = scratch_dir()
    try:
        idx = OffsetIndex(d / "00000000000000000000.index", 0, 10 * MiB)
        n = idx.max_entries
        for i in range(n):
            idx.append(i * 15 + 14, i * 1600)
        rnd = random.Random(7)
        targets = [rnd.randrange(n * 15) for _ in range(200_000)]
        prefault()
        idx.lookup(0)  # build any lazy cache outside the timing
        t0 = time.perf_counter()
        for t in targets:
            idx.lookup(t)
        per = (time.perf_counter() - t0) / len(targets)
        ref = array("q", (i * 15 + 14 for i in range(n)))
        t0 = time.perf_counter()
        for t in targets:
            bisect.bisect_right(ref, t)
        ref_per = (time.perf_counter() - t0) / len(targets)
        results[f"offset index lookup ({n:,} entries)"] = (
            f"{per * 1e6:.2f} us", f"{per / ref_per:.1f}x bisect on array ({ref_per * 1e6:.2f} us)", "<= 2 us")
        idx.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_decode(results: dict) -> None:
    now = int(time.time() * 1000)
    batches = [bytes(build_batch([SimpleRecord(b"user-%d" % (i % 1000), os.urandom(100), now + i)
                                  for i in range(j * 100, j * 100 + 100)])) for j in range(200)]
    prefault()
    t0 = time.perf_counter()
    n = 0
    for _ in range(5):
        for b in batches:
            n += len(RecordBatch(b).records())
    rate = n / (time.perf_counter() - t0)
    results["record decode, pure Python (100 B values)"] = (f"{rate / 1e6:.2f} M records/s", "-", "informational")


ALL = {"append": bench_append, "recovery": bench_recovery, "index": bench_index_lookup, "decode": bench_decode}
