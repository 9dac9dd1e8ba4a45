"""Partition-log benchmarks (issue 3): append through Log, unclean recovery, clean open of 1,000 segments, and the
appends' stalls while rolled segments are flushed (log-roll)."""

from __future__ import annotations

import mmap
import os
import shutil
import statistics
import struct
import threading
import time

from crc32c import crc32c
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
from bench.storage import _batch_16k
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.records.batch import HEADER
from kafkalite.scheduler import ThreadScheduler
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig


def _batches(total: int) -> list[bytearray]:
    """One fresh 16 KiB batch per append, made before the timing: a produce request arrives in a buffer
    of its own, and copying a template inside the loop would time the copy, not the log."""
    template = bytes(_batch_16k())
    return [bytearray(template) for _ in range(total // len(template))]


def _append_log(directory, total: int) -> tuple[int, float]:
    lg = Log(directory, LogConfig())  # 1 GiB segments: no roll (and no roll-time fsync) inside the timing
    batches = _batches(total)
    prefault()
    t0 = time.perf_counter()
    for buf in batches:
        lg.append_as_leader(buf)
    elapsed = time.perf_counter() - t0
    lg.close(flush=False)
    return sum(map(len, batches)), elapsed


_PATCH = struct.Struct(">qii")  # base offset, length, partition leader epoch
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def _mandatory_work_only(directory, total: int) -> tuple[int, float]:
    """The ceiling for any Python Log: only what Kafka's append must do for such a batch (unpack and check
    the header, CRC32C, assign the offset and epoch in place, write, one offset and one time index entry),
    with no segment, roll, epoch, producer or high-watermark bookkeeping at all."""
    batches = _batches(total)
    directory.mkdir()
    fd = os.open(directory / "00000000000000000000.log", os.O_RDWR | os.O_CREAT, 0o644)
    ifd = os.open(directory / "00000000000000000000.index", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(ifd, 10 * MiB)
    offset_index = mmap.mmap(ifd, 10 * MiB)
    time_index = mmap.mmap(ifd, 10 * MiB)
    unpack = HEADER.unpack_from
    prefault()
    t0 = time.perf_counter()
    next_offset = size = 0
    for entries, buf in enumerate(batches):
        (_base, length, _epoch, magic, crc, attrs, lod, _bts, max_ts, pid, _pe, _bs, count) = unpack(buf)
        if magic != 2 or pid >= 0 or attrs & 0x70 or count != lod + 1 or crc32c(memoryview(buf)[21:]) != crc:
            raise AssertionError("the benchmark batch is plain and valid")
        _PATCH.pack_into(buf, 0, next_offset, length, 0)
        os.pwrite(fd, buf, size)
        _OFFSET_ENTRY.pack_into(offset_index, entries * 8, next_offset + lod, size)
        _TIME_ENTRY.pack_into(time_index, entries * 12, max_ts, next_offset + lod)
        size += len(buf)
        next_offset += lod + 1
    elapsed = time.perf_counter() - t0
    offset_index.close()
    time_index.close()
    os.close(ifd)
    os.close(fd)
    return size, elapsed


def bench_log_append(results: dict) -> None:
    d = scratch_dir()
    try:
        def sut() -> tuple[int, float]:
            n, elapsed = _append_log(d / "bench-0", DATA_BYTES)
            shutil.rmtree(d / "bench-0")
            return n, elapsed

        def ceiling() -> tuple[int, float]:
            n, elapsed = _mandatory_work_only(d / "ceiling-0", DATA_BYTES)
            shutil.rmtree(d / "ceiling-0")
            return n, elapsed

        with tqdm(total=15, desc="Log append vs W16K", leave=False) as bar:
            rates = median_rates({"W16K": raw_write_16k(d / "raw"), "log append": sut, "ceiling": ceiling},
                                 progress=bar)
        results["Log.append_as_leader (1 KiB records, 16 KiB batches)"] = (
            fmt_rate(rates["log append"]), f"{rates['log append'] / rates['W16K']:.0%} of W16K "
            f"({fmt_rate(rates['W16K'])})", ">= 60%")
        results["ceiling: the mandatory append work alone, in Python"] = (
            fmt_rate(rates["ceiling"]), f"{rates['ceiling'] / rates['W16K']:.0%} of W16K", "informational")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_log_recovery(results: dict) -> None:
    """Unclean open of a 1 GiB log: every batch's CRC checked, indexes rebuilt, with a progress bar."""
    d = scratch_dir()
    total = int(os.environ.get("BENCH_RECOVERY_MIB", "1024")) * MiB
    try:
        _append_log(d / "rec-0", total)
        seg = next(iter(sorted((d / "rec-0").glob("*.log"))))

        def sut() -> int:
            lg = Log(d / "rec-0", LogConfig.from_props({"segment.bytes": 256 * MiB}), recovery_point=0)
            n = lg.size
            lg.close(flush=False)
            return n

        with tqdm(total=9, desc="Log recovery vs min(RPC, CRC)", leave=False) as bar:
            rates = median_rates({"RPC": page_cache_read(seg), "CRC16K": crc_16k(), "recovery": sut},
                                 repeats=3, progress=bar)
        limit = min(rates["RPC"], rates["CRC16K"])
        results[f"Log unclean recovery ({total // MiB} MiB)"] = (
            fmt_rate(rates["recovery"]), f"{rates['recovery'] / limit:.0%} of min(RPC {fmt_rate(rates['RPC'])}, "
            f"CRC16K {fmt_rate(rates['CRC16K'])})", ">= 50%")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_clean_open(results: dict) -> None:
    """Open a cleanly shut down log of 1,000 segments: nothing may be scanned."""
    d = scratch_dir()
    try:
        lg = Log(d / "many-0", LogConfig.from_props({"segment.bytes": 1024}))
        from kafkalite.records import SimpleRecord, build_batch

        batch = bytes(build_batch([SimpleRecord(b"k", b"v" * 900, int(time.time() * 1000))]))
        for _ in range(1000):
            lg.append_as_leader(bytearray(batch))
        assert lg.number_of_segments == 1000
        lg.close()
        times = []
        for _ in range(5):
            prefault()
            t0 = time.perf_counter()
            lg = Log(d / "many-0", LogConfig.from_props({"segment.bytes": 1024}), clean_shutdown=True,
                     recovery_point=1000)
            times.append(time.perf_counter() - t0)
            lg.close(flush=False)
        times.sort()
        results["open a cleanly shut down log of 1,000 segments"] = (f"{times[2] * 1000:.0f} ms", "-", "<= 1 s")
    finally:
        shutil.rmtree(d, ignore_errors=True)


ROLL_SEGMENT = 128 * MiB
ROLL_TOTAL = 8 * ROLL_SEGMENT


def _mib_batches(total: int) -> list[bytearray]:
    """~1 MiB batches of 1 KiB records, one buffer each: what a produce request or a follower's fetch carries."""
    template = bytes(build_batch([SimpleRecord(None, os.urandom(1000), int(time.time() * 1000))] * 1000))
    return [bytearray(template) for _ in range(total // len(template))]


def _stalls(latencies: list[float]) -> tuple[float, float, int, float]:
    """Median and max (ms), and the count and sum (ms) of the calls over 20 ms."""
    ms = sorted(x * 1000 for x in latencies)
    slow = [x for x in ms if x > 20]
    return statistics.median(ms), ms[-1], len(slow), sum(slow)


def _roll_log(directory) -> list[float]:
    """Each append's time through a Log whose rolled segments are flushed by the scheduler, as the broker's."""
    scheduler = ThreadScheduler(1)
    scheduler.startup()
    lg = Log(directory, LogConfig(segment_bytes=ROLL_SEGMENT), scheduler=scheduler)
    batches = _mib_batches(ROLL_TOTAL)
    prefault(ROLL_TOTAL + 512 * MiB)
    out = []
    try:
        for buf in batches:
            t0 = time.perf_counter()
            lg.append_as_leader(buf)
            out.append(time.perf_counter() - t0)
    finally:
        scheduler.shutdown()
        lg.close(flush=False)
    return out


def _roll_raw(directory) -> list[float]:
    """The machine's own: the same bytes by `pwrite` into files of the same size, each full file fsynced on a
    thread while the next one is written."""
    directory.mkdir()
    batches = _mib_batches(ROLL_TOTAL)
    prefault(ROLL_TOTAL + 512 * MiB)
    out, syncs = [], []
    fd, pos, n = -1, 0, 0
    try:
        for buf in batches:
            if fd < 0 or pos + len(buf) > ROLL_SEGMENT:
                if fd >= 0:
                    syncs.append(threading.Thread(target=lambda f=fd: (os.fsync(f), os.close(f))))
                    syncs[-1].start()
                fd, pos, n = os.open(directory / f"{n:020d}.log", os.O_RDWR | os.O_CREAT, 0o644), 0, n + 1
            t0 = time.perf_counter()
            os.pwrite(fd, buf, pos)
            out.append(time.perf_counter() - t0)
            pos += len(buf)
    finally:
        for t in syncs:
            t.join()
        os.close(fd)
    return out


def bench_log_roll(results: dict) -> None:
    """1 GiB appended in ~1 MiB batches with 128 MiB segments: what an append waits while the segment before it
    is flushed (Kafka flushes a rolled segment on its scheduler, as ours does), against the same writes and
    fsyncs done bare. Three runs of each, interleaved; the worst of each is shown."""
    d = scratch_dir()
    try:
        got: dict[str, list[tuple[float, float, int, float]]] = {"log": [], "raw": []}
        with tqdm(total=6, desc="appends across rolls", leave=False) as bar:
            for i in range(3):
                for name, fn in (("raw", _roll_raw), ("log", _roll_log)):
                    got[name].append(_stalls(fn(d / f"{name}-{i}")))
                    shutil.rmtree(d / f"{name}-{i}")
                    bar.update()
        for name, label in (("raw", "pwrite + fsync of the previous file on a thread (this machine)"),
                            ("log", "Log.append_as_leader, rolled segments flushed by the scheduler")):
            worst = max(got[name], key=lambda r: r[1])
            results[f"1 MiB appends across 7 rolls: {label}"] = (
                f"median {statistics.median(r[0] for r in got[name]):.2f} ms, max {worst[1]:.0f} ms; over 20 ms: "
                + ", ".join(f"{r[2]} ({r[3]:.0f} ms)" for r in got[name]),
                "" if name == "raw" else f"max {worst[1] / max(got['raw'], key=lambda r: r[1])[1]:.1f}x raw's",
                "informational")
    finally:
        shutil.rmtree(d, ignore_errors=True)


ALL = {"log-append": bench_log_append, "log-recovery": bench_log_recovery, "log-open": bench_clean_open,
       "log-roll": bench_log_roll}
