"""A cleaner process killed with SIGKILL at random moments: the log always loads, and no record that
should survive (the latest value of every key, anything not yet cleaned) is lost.

The child appends a deterministic stream (offset o holds key o*7919 % 40, a tombstone every 13th
offset) in rounds, rolling and cleaning after each, with the clock jumping past the delete horizon
so tombstones go too. Kill moments therefore land in map building, in writing `.cleaned` files, in
the swap renames and in appends. The parent reopens the log without a clean-shutdown marker and
checks it against the stream cut at the recovered log end.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kafkalite.clock import MockClock
from kafkalite.scheduler import MockScheduler
from kafkalite.storage import names
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig

KILLS = 14
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 3000, "delete.retention.ms": 1000,
          "min.cleanable.dirty.ratio": 0.01}

CHILD = r"""
import sys
from kafkalite.cleaner.config import CleanerConfig
from kafkalite.cleaner.log_cleaner import LogCleaner
from kafkalite.clock import MockClock
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.scheduler import MockScheduler
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig

CONFIG = %r  # noqa: UP031
clock = MockClock(1700000000000)
lg = Log(sys.argv[1], LogConfig.from_props(CONFIG), scheduler=MockScheduler(clock), clock=clock)
cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=24 * 64), [lg.dir.parent], {(lg.topic, lg.partition): lg},
                     clock=clock)
print("ready", flush=True)
while True:
    for _ in range(20):
        o = lg.log_end_offset
        recs = [SimpleRecord(b"k%%d" %% ((p * 7919) %% 40), None if p %% 13 == 0 else b"v%%d" %% p, 1700000000000)
                for p in range(o, o + 5)]
        lg.append_as_leader(build_batch(recs))
    lg.update_high_watermark(lg.log_end_offset)
    lg.roll()
    cleaner.clean_now(lg.topic, lg.partition)
    clock.sleep(2000)
""" % (CONFIG,)  # noqa: UP031


def expected(leo: int) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for p in range(leo):
        latest[b"k%d" % ((p * 7919) % 40)] = (p, None if p % 13 == 0 else b"v%d" % p)
    return latest


def run_and_kill(directory: Path, delay: float) -> str:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(directory / "crash-0")], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return check(directory / "crash-0")


def check(path: Path) -> str:
    leftovers = sorted(p.name for p in path.iterdir() if p.name.endswith((".cleaned", ".swap")))
    clock = MockClock(1700000000000)
    lg = Log(path, LogConfig.from_props(CONFIG), scheduler=MockScheduler(clock), clock=clock)
    try:
        assert not [p for p in path.iterdir() if p.name.endswith((names.CLEANED_SUFFIX, names.SWAP_SUFFIX))]
        got = [r for b in lg.batches() for r in b.records()]
        offsets = [r.offset for r in got]
        assert offsets == sorted(set(offsets)), "offsets out of order or duplicated"
        for r in got:
            p = r.offset
            assert (r.key, r.value) == (b"k%d" % ((p * 7919) % 40), None if p % 13 == 0 else b"v%d" % p)
        last = {r.key: (r.offset, r.value) for r in got}
        for key, (o, value) in expected(lg.log_end_offset).items():
            if value is not None:
                assert last.get(key) == (o, value), f"latest value of {key!r} at {o} lost"
            else:
                assert key not in last or last[key] == (o, None)
        return f"leo {lg.log_end_offset}, {len(got)} records, leftovers {leftovers}"
    finally:
        lg.close()


@pytest.mark.slow
def test_sigkill_during_cleaning_loses_nothing(tmp_path):
    rng = random.Random(20261122)
    delays = [rng.uniform(0.05, 1.2) for _ in range(KILLS)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda a: run_and_kill(tmp_path / f"run{a[0]}", a[1]), enumerate(delays)))
    assert len(results) == KILLS


SWAP_CHILD = CHILD.split("print(")[0] + r"""
for _ in range(60):
    o = lg.log_end_offset
    lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % ((p * 7919) % 40),
                                                  None if p % 13 == 0 else b"v%d" % p, 1700000000000)
                                     for p in range(o, o + 5)]))
lg.update_high_watermark(lg.log_end_offset)
lg.roll()
import os, signal
renames = 0
real_replace = os.replace
def dying_replace(a, b):
    global renames
    renames += 1
    if renames == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(a, b)
os.replace = dying_replace
cleaner.clean_now(lg.topic, lg.partition)
print("survived", renames, flush=True)
"""


@pytest.mark.slow
def test_sigkill_at_every_rename_of_the_swap(tmp_path):
    """Die right before the n-th rename of a cleaning: every step of .cleaned -> .swap -> .deleted -> final."""

    def run(n: int) -> tuple[str, str]:
        d = tmp_path / f"swap{n}"
        out = subprocess.run([sys.executable, "-c", SWAP_CHILD, str(d / "crash-0"), str(n)], capture_output=True,
                             text=True, timeout=60)
        return out.stdout, check(d / "crash-0")

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run, [*range(1, 15), 10**6]))
    assert "survived" in results[-1][0]  # a run that is never killed cleans through
    assert not any("survived" in out for out, _ in results[:-1])  # the first swaps die at every rename
