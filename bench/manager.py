"""LogManager benchmark (issue 4): recovery of 1,000 partitions after an unclean stop, with 1 and with every
recovery thread, and how busy the threads kept the machine (process CPU seconds per wall second)."""

from __future__ import annotations

import os
import shutil
import time

from tqdm import tqdm

from bench.common import KiB, fmt_rate, prefault, scratch_dir
from kafkalite.clock import MockClock
from kafkalite.manager.log_manager import LogManager, ManagerConfig
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.scheduler import MockScheduler

PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "1000"))
PER_PARTITION = int(os.environ.get("BENCH_PARTITION_KIB", "256")) * KiB


def _write(d) -> int:
    batch = bytes(build_batch([SimpleRecord(None, os.urandom(1000), 0)] * 16))
    manager = LogManager([d], scheduler=MockScheduler(MockClock()))
    total = 0
    for p in tqdm(range(PARTITIONS), desc="writing 1,000 partitions", leave=False):
        lg = manager.get_or_create_log("recovery", p)
        while lg.size < PER_PARTITION:
            lg.append_as_leader(bytearray(batch))
        total += lg.size
    manager.shutdown()
    return total


def _unclean(d) -> None:
    (d / ".kafka_cleanshutdown").unlink(missing_ok=True)
    (d / "recovery-point-offset-checkpoint").unlink(missing_ok=True)  # killed before any checkpoint


def _load(d, threads: int) -> tuple[float, float]:
    _unclean(d)
    prefault()
    cpu0, t0 = time.process_time(), time.perf_counter()
    manager = LogManager([d], config=ManagerConfig(num_recovery_threads_per_data_dir=threads),
                         scheduler=MockScheduler(MockClock()))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert len(manager.logs) == PARTITIONS
    manager.shutdown()
    return wall, cpu


def bench_manager_recovery(results: dict) -> None:
    d = scratch_dir() / "data"
    try:
        total = _write(d)
        cores = os.cpu_count() or 1
        runs = {1: [], cores: []}
        for _ in range(3):
            for threads in runs:
                runs[threads].append(_load(d, threads))
        (w1, _c1), (wn, cn) = (sorted(runs[k])[1] for k in (1, cores))
        results[f"LogManager unclean recovery, {PARTITIONS} partitions x {PER_PARTITION // KiB} KiB"] = (
            f"{wn:.2f} s with {cores} threads ({fmt_rate(total / wn)}), {w1:.2f} s with 1",
            f"{w1 / wn:.2f}x speed-up; threads kept {cn / wn:.2f} of {cores} cores busy",
            "uses every recovery thread")
    finally:
        shutil.rmtree(d.parent, ignore_errors=True)


ALL = {"manager-recovery": bench_manager_recovery}
