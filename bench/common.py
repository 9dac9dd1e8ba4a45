"""Measurement helpers: this machine's own limits, measured in the same run as the code under test.

The VM returns free memory to the host after ~2 s idle, and touching it again costs ~10x, so every
measurement (reference and system under test alike) starts by touching 1.25 GiB of anonymous
memory; results are medians of interleaved repetitions, as single runs drift 30-50 % on a 2-core VM.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from crc32c import crc32c

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))
DATA_BYTES = int(os.environ.get("BENCH_MIB", "256")) * MiB


def prefault(nbytes: int = int(1.25 * GiB)) -> None:
    """Touch and free anonymous memory so page-cache growth runs at host-backed speed (WARM)."""
    a = np.ones(nbytes // 8, dtype=np.float64)
    del a


def timed(fn: Callable[[], int | tuple[int, float]]) -> float:
    """Run fn after a prefault; returns bytes per second.

    fn returns the bytes processed, or (bytes, seconds) when it times only its own work and keeps
    set-up and clean-up (creating or deleting files) out of the measurement.
    """
    prefault()
    t0 = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - t0
    if isinstance(result, tuple):
        return result[0] / result[1]
    return result / elapsed


def median_rates(
    fns: dict[str, Callable[[], int | tuple[int, float]]], repeats: int = REPEATS, progress=None
) -> dict[str, float]:
    """Interleave the functions `repeats` times; median rate of each."""
    rates: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            rates[name].append(timed(fn))
            if progress is not None:
                progress.update(1)
    return {k: statistics.median(v) for k, v in rates.items()}


def scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="kafkalite-bench-"))


# --- reference limits ---------------------------------------------------------------------------


def raw_write_16k(path: Path, total: int = DATA_BYTES) -> Callable[[], int]:
    """W16K: sequential 16 KiB os.write to a new file, no fsync."""
    block = os.urandom(16 * KiB)

    def run() -> tuple[int, float]:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        t0 = time.perf_counter()
        try:
            for _ in range(total // len(block)):
                os.write(fd, block)
        finally:
            os.close(fd)
            elapsed = time.perf_counter() - t0
        os.unlink(path)
        return total, elapsed

    return run


def page_cache_read(path: Path) -> Callable[[], int]:
    """RPC: read a cached file into a bytearray, 1 MiB at a time."""

    def run() -> int:
        buf = bytearray(MiB)
        mv = memoryview(buf)
        n = 0
        fd = os.open(path, os.O_RDONLY)
        try:
            while True:
                got = os.readv(fd, [mv])
                if not got:
                    break
                n += got
        finally:
            os.close(fd)
        return n

    return run


def crc_16k(total: int = DATA_BYTES) -> Callable[[], int]:
    """CRC16K: crc32c over 16 KiB slices of an in-memory buffer."""
    data = memoryview(os.urandom(64 * MiB))

    def run() -> int:
        n = 0
        while n < total:
            for off in range(0, len(data), 16 * KiB):
                crc32c(data[off : off + 16 * KiB])
            n += len(data)
        return n

    return run


def fmt_rate(bps: float) -> str:
    return f"{bps / MiB:,.0f} MiB/s"
