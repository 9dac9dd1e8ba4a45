"""The cleaner inside LogManager: threads, clean_now / await_cleaned, checkpoints, pause on delete and
truncate, retention of compacted logs, configuration."""

from __future__ import annotations

import logging
import threading

import pytest

from kafkalite.cleaner.config import CleanerConfig
from kafkalite.cleaner.throttler import Throttler
from kafkalite.clock import MockClock
from kafkalite.errors import InvalidConfigError
from kafkalite.manager.log_manager import LogManager, ManagerConfig
from kafkalite.scheduler import MockScheduler
from kafkalite.storage.checkpoint import OffsetCheckpointFile
from kafkalite.storage.log_config import LogConfig
from tests.support import T0
from tests.support.cleaner import keys, record, tombstone

SMALL = {"cleanup.policy": "compact", "segment.bytes": 2048, "min.cleanable.dirty.ratio": 0.01}
FAST = CleanerConfig(backoff_ms=50, dedupe_buffer_size=1 << 20)


def manager(path, cleaner_config=FAST, clock=None):
    clock = clock or MockClock(T0)
    return LogManager([path], LogConfig(), ManagerConfig(), scheduler=MockScheduler(clock), clock=clock,
                      topic_configs={"compacted": SMALL}, cleaner_config=cleaner_config)


def fill(lg, n, distinct=10, start=0):
    for i in range(start, start + n):
        lg.append_as_leader(record(i % distinct, i, ts=T0))
    lg.update_high_watermark(lg.log_end_offset)


def checkpoint(path):
    return OffsetCheckpointFile(path / "cleaner-offset-checkpoint").read_or_empty()


def test_background_thread_cleans_and_checkpoints(tmp_path, caplog):
    lm = manager(tmp_path / "d")
    lg = lm.get_or_create_log("compacted", 0)
    fill(lg, 300)
    with caplog.at_level(logging.INFO, logger="kafkalite.cleaner"):
        lm.startup()
        assert lm.cleaner is not None and lm.cleaner.running_threads == 1
        assert lm.cleaner.await_cleaned("compacted", 0, lg.active_segment.base_offset, timeout_s=20)
    assert checkpoint(tmp_path / "d")[("compacted", 0)] == lg.active_segment.base_offset
    cleaned = [r for s in lg.log_segments()[:-1] for _, b in s.log.batches() for r in b.records()]
    assert len({r.key for r in cleaned}) == len(cleaned)
    assert any("Log cleaner thread 0 cleaned log compacted-0 (dirty section = [0, " in m and "MB/sec" in m
               for m in caplog.messages)
    lm.shutdown()
    assert lm.cleaner.running_threads == 0
    lm = manager(tmp_path / "d")
    assert lm.get_log("compacted", 0).log_end_offset == 300
    lm.shutdown()


def test_clean_now_in_the_callers_thread(tmp_path):
    lm = manager(tmp_path / "d")
    lg = lm.get_or_create_log("compacted", 0)
    plain = lm.get_or_create_log("plain", 0)
    fill(lg, 200)
    fill(plain, 50)
    stats = lm.cleaner.clean_now("compacted", 0)
    assert stats is not None and stats.messages_written < stats.messages_read
    assert lm.cleaner.clean_now("compacted", 0) is None  # nothing dirty left
    assert lm.cleaner.clean_now("plain", 0) is None  # not compacted
    assert set(keys(lg)) == set(range(10))
    assert checkpoint(tmp_path / "d") == {("compacted", 0): lg.active_segment.base_offset}
    lm.shutdown()


def test_disabled_cleaner(tmp_path):
    lm = manager(tmp_path / "d", CleanerConfig(enable=False))
    lm.startup()
    assert lm.cleaner is None
    lm.shutdown()


def test_delete_during_cleaning_aborts_it(tmp_path):
    lm = manager(tmp_path / "d")
    lg = lm.get_or_create_log("compacted", 0)
    fill(lg, 400)
    entered, release = threading.Event(), threading.Event()

    def stalled_io(seconds: float) -> None:  # the I/O throttle's sleep holds the cleaning mid-way
        entered.set()
        release.wait(5)

    cleaner = lm.cleaner
    cleaner.throttler = Throttler(1.0, check_interval_ms=0, sleep=stalled_io)
    worker = threading.Thread(target=cleaner.clean_now, args=("compacted", 0))
    worker.start()
    assert entered.wait(5)
    deleter = threading.Thread(target=lm.delete_log, args=("compacted", 0))
    deleter.start()
    release.set()
    deleter.join(10)
    worker.join(10)
    assert not deleter.is_alive() and not worker.is_alive()
    assert lm.get_log("compacted", 0) is None
    assert ("compacted", 0) not in checkpoint(tmp_path / "d")
    gone = [p for p in (tmp_path / "d").iterdir() if p.name.endswith("-delete")]
    assert len(gone) == 1 and not list(gone[0].glob("*.cleaned"))
    lm.shutdown()


def test_truncate_pauses_cleaning_and_pulls_the_checkpoint_back(tmp_path):
    lm = manager(tmp_path / "d")
    lg = lm.get_or_create_log("compacted", 0)
    fill(lg, 300)
    lm.cleaner.clean_now("compacted", 0)
    before = checkpoint(tmp_path / "d")[("compacted", 0)]
    assert lm.truncate_to("compacted", 0, 50)
    assert lg.log_end_offset == 50
    assert checkpoint(tmp_path / "d")[("compacted", 0)] == lg.active_segment.base_offset < before
    assert not lm.cleaner.manager.is_cleaning_paused(("compacted", 0))
    lm.shutdown()


def test_compact_delete_retention_runs_in_the_cleaner(tmp_path):
    clock = MockClock(T0)
    lm = manager(tmp_path / "d", clock=clock)
    lm.update_topic_config("compacted", {**SMALL, "cleanup.policy": "compact,delete", "retention.ms": 1000})
    lg = lm.get_or_create_log("compacted", 0)
    fill(lg, 100, distinct=100)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    clock.sleep(5000)
    assert lm.cleanup_logs() == 0  # LogManager's retention task leaves compacted logs to the cleaner
    lm.cleaner.clean_now("compacted", 0)
    assert lg.log_start_offset == 100 and keys(lg) == []
    lm.shutdown()


def test_tombstones_go_after_the_horizon(tmp_path):
    clock = MockClock(T0)
    lm = manager(tmp_path / "d", clock=clock)
    lm.update_topic_config("compacted", {**SMALL, "delete.retention.ms": 1000})
    lg = lm.get_or_create_log("compacted", 0)
    fill(lg, 50)
    for k in range(5):
        lg.append_as_leader(tombstone(k, ts=T0))
    fill(lg, 40, distinct=10, start=100)  # keys 0..9 again, then delete 0..4 again below
    for k in range(5):
        lg.append_as_leader(tombstone(k, ts=T0))
    fill(lg, 60, distinct=10_000, start=1000)  # new keys push the tombstones out of the active segment
    lm.cleaner.clean_now("compacted", 0)
    survivors = {int(r.key): r.value for b in lg.batches() for r in b.records()}
    assert all(survivors.get(k, b"?") is None for k in range(5))  # pass 1 keeps the tombstones
    clock.sleep(1001)
    fill(lg, 60, distinct=10_000, start=2000)
    lm.cleaner.clean_now("compacted", 0)
    survivors = {int(r.key) for b in lg.log_segments()[:-1] for _, bb in b.log.batches() for r in bb.records()}
    assert not survivors & set(range(5))
    lm.shutdown()


def test_throttle_limits_the_rate():
    slept = []
    t = Throttler(1000.0, check_interval_ms=0, sleep=slept.append)
    t.maybe_throttle(0)
    t.maybe_throttle(5000)
    assert slept and slept[-1] > 1


def test_config_from_broker_props():
    cfg = CleanerConfig.from_broker_props({"log.cleaner.threads": "2", "log.cleaner.enable": "false",
                                           "log.cleaner.dedupe.buffer.size": "1048576",
                                           "log.cleaner.io.max.bytes.per.second": "1e6"})
    assert (cfg.threads, cfg.enable, cfg.dedupe_buffer_per_thread, cfg.max_io_bytes_per_second) == \
        (2, False, 524288, 1e6)
    with pytest.raises(InvalidConfigError):
        CleanerConfig.from_broker_props({"log.cleaner.threads": "0"})


def test_two_threads_clean_many_logs(tmp_path):
    lm = manager(tmp_path / "d", CleanerConfig(threads=2, backoff_ms=50, dedupe_buffer_size=1 << 20))
    logs = [lm.get_or_create_log("compacted", p) for p in range(4)]
    for lg in logs:
        fill(lg, 150)
    lm.startup()
    for p, lg in enumerate(logs):
        assert lm.cleaner.await_cleaned("compacted", p, lg.active_segment.base_offset, timeout_s=20)
    lm.shutdown()
