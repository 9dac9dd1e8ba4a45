"""Partition-log benchmarks (issue 3): append through Log, unclean recovery, clean open of 1,000 segments."""

from __future__ import annotations

import os
import shutil
import time

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
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig


def _append_log(directory, total: int) -> int:
    lg = Log(directory, LogConfig())  # 1 GiB segments: no roll (and no roll-time fsync) inside the timing
    template = bytes(_batch_16k())
    written = 0
    while written < total:
        lg.append_as_leader(bytearray(template))
        written += len(template)
    lg.close(flush=False)
    return written


def bench_log_append(results: dict) -> None:
    d = scratch_dir()
    try:
        def sut() -> tuple[int, float]:
            t0 = time.perf_counter()
            n = _append_log(d / "bench-0", DATA_BYTES)
            elapsed = time.perf_counter() - t0
            shutil.rmtree(d / "bench-0")
            return n, elapsed

        with tqdm(total=10, desc="Log append vs W16K", leave=False) as bar:
            rates = median_rates({"W16K": raw_write_16k(d / "raw"), "log append": sut}, progress=bar)
        results["Log.append_as_leader (1 KiB records, 16 KiB batches)"] = (
            fmt_rate(rates["log append"]), f"{rates['log append'] / rates['W16K']:.0%} of W16K "
            f"({fmt_rate(rates['W16K'])})", ">= 60%")
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


ALL = {"log-append": bench_log_append, "log-recovery": bench_log_recovery, "log-open": bench_clean_open}
