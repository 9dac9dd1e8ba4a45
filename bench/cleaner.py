"""Log cleaner benchmark: compaction of 100-byte records of which 10 % are live keys.

The log holds BENCH_CLEANER_RECORDS (default 1,000,000) records of ~100 bytes (12-byte key, 80-byte
value) in producer-sized batches of 150, over keys drawn at random from a tenth as many distinct
keys. One cleaning (map building + filtering + swap) of the whole log is timed, with the cleaner's
default 128 MiB map reused between repetitions as a cleaner thread reuses it. Reported: input
records per second (wall clock, and per CPU second, which the 2-core VM's neighbours disturb less),
the ratio to the 1 M records/s target, and the input bytes per second as a ratio to W16K (raw
sequential file write) measured in the same run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import struct
import time

import numpy as np
from tqdm import tqdm

from bench.common import prefault, raw_write_16k, scratch_dir, timed
from kafkalite.cleaner.cleaner import Cleaner, LogToClean
from kafkalite.cleaner.offset_map import OffsetMap
from kafkalite.clock import MockClock
from kafkalite.records import SimpleRecord, build_batch, compute_crc
from kafkalite.records.batch import CRC_OFFSET
from kafkalite.scheduler import MockScheduler
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig

RECORDS = int(os.environ.get("BENCH_CLEANER_RECORDS", "1000000"))
PER_BATCH = 150
CONFIG = LogConfig.from_props({"cleanup.policy": "compact", "segment.bytes": 128 << 20})
T = 1_700_000_000_000


def _write_log(directory, n: int) -> None:
    """Append n records through Log: one template batch, its keys patched per batch (fast to build)."""
    template = build_batch([SimpleRecord(b"key-00000000", bytes(80), T + (i & 7)) for i in range(PER_BATCH)])
    raw = bytes(template)
    key_pos = [i + 4 for i in range(len(raw)) if raw.startswith(b"key-00000000", i)]
    assert len(key_pos) == PER_BATCH
    digits = np.array(key_pos)[:, None] + np.arange(8)
    keys = np.random.default_rng(7).integers(0, n // 10, n)
    lg = Log(directory, CONFIG)
    for s in range(0, n - n % PER_BATCH, PER_BATCH):
        buf = np.frombuffer(bytearray(raw), dtype=np.uint8).copy()
        k = keys[s : s + PER_BATCH]
        buf[digits] = (k[:, None] // 10 ** np.arange(7, -1, -1) % 10 + 48).astype(np.uint8)
        batch = bytearray(buf.tobytes())
        struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch))
        lg.append_as_leader(batch)
    lg.roll()
    lg.close()


def bench_cleaner(results: dict) -> None:
    d = scratch_dir()
    try:
        _write_log(d / "pristine-0", RECORDS)
        n = RECORDS - RECORDS % PER_BATCH
        cleaner = Cleaner(0, OffsetMap(128 << 20))
        clock = MockClock(T)
        cpu: list[float] = []
        input_bytes = [0]

        def sut() -> tuple[int, float]:
            shutil.rmtree(d / "bench-0", ignore_errors=True)
            shutil.copytree(d / "pristine-0", d / "bench-0")
            lg = Log(d / "bench-0", CONFIG, clock=clock, scheduler=MockScheduler(clock), clean_shutdown=True,
                     recovery_point=n)
            lg.update_high_watermark(lg.log_end_offset)
            input_bytes[0] = lg.size
            t0, c0 = time.perf_counter(), time.process_time()
            cleaner.clean(LogToClean(("bench", 0), lg, 0, lg.active_segment.base_offset))
            elapsed = time.perf_counter() - t0
            cpu.append(time.process_time() - c0)
            lg.close()
            return n, elapsed

        prefault()
        sut()  # the cleaner thread's map is allocated and touched once, then reused
        cpu.clear()
        repeats = int(os.environ.get("BENCH_REPEATS", "5"))
        w16k = raw_write_16k(d / "raw")
        rates, raw_rates = [], []
        for _ in tqdm(range(repeats), desc="cleaner vs W16K", leave=False):
            raw_rates.append(timed(w16k))
            rates.append(timed(sut))
        rate, raw = statistics.median(rates), statistics.median(raw_rates)
        per_cpu = n / statistics.median(cpu)
        bytes_rate = rate * input_bytes[0] / n
        results["LogCleaner, 100 B records, 10 % live keys"] = (
            f"{rate / 1e6:.2f} M records/s ({per_cpu / 1e6:.2f} M per CPU second)",
            f"{rate / 1e6:.0%} of 1 M records/s; input {bytes_rate / 2**20:,.0f} MiB/s = "
            f"{bytes_rate / raw:.0%} of W16K ({raw / 2**20:,.0f} MiB/s)",
            ">= 1 M records/s")
    finally:
        shutil.rmtree(d, ignore_errors=True)


ALL = {"cleaner": bench_cleaner}
