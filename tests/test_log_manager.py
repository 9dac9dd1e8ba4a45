"""LogManager: data dirs, locks, checkpoints, clean shutdown, crash restart, tasks, deletion, dir failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kafkalite.clock import MockClock
from kafkalite.errors import KafkaStorageError, LogError
from kafkalite.manager.log_manager import LogManager, ManagerConfig
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.scheduler import MockScheduler
from kafkalite.storage.checkpoint import OffsetCheckpointFile, has_clean_shutdown_marker, read_meta_properties
from kafkalite.storage.log_config import LogConfig
from tests.support import T0
from tests.support.logs import records_in


def batch(i: int, ts: int = T0) -> bytearray:
    return build_batch([SimpleRecord(b"k%d" % i, b"v%d" % i, ts)])


def manager(dirs, clock=None, **kw) -> tuple[LogManager, MockScheduler]:
    clock = clock or MockClock(T0)
    sched = MockScheduler(clock)
    return LogManager(dirs, kw.pop("default_config", LogConfig()), ManagerConfig(**kw), scheduler=sched,
                      clock=clock), sched


def test_dirs_balance_meta_and_lock(tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    lm, _ = manager(dirs)
    for p in range(4):
        lm.get_or_create_log("orders", p)
    assert sorted(len(list(d.glob("orders-*"))) for d in dirs) == [2, 2]
    assert read_meta_properties(dirs[0])["node.id"] == "1"
    with pytest.raises(LogError, match="lock"):
        LogManager(dirs[0], scheduler=MockScheduler(MockClock()))
    lm.shutdown()
    lm2, _ = manager(dirs)  # the lock is free again
    assert len(lm2.all_logs()) == 4
    lm2.shutdown()


def test_clean_shutdown_then_clean_start(tmp_path):
    lm, _ = manager([tmp_path / "d"])
    lg = lm.get_or_create_log("t", 0)
    for i in range(10):
        lg.append_as_leader(batch(i))
    lm.shutdown()
    assert has_clean_shutdown_marker(tmp_path / "d")
    rp = OffsetCheckpointFile(tmp_path / "d" / "recovery-point-offset-checkpoint").read()
    assert rp == {("t", 0): 10}
    lm, _ = manager([tmp_path / "d"])
    assert not has_clean_shutdown_marker(tmp_path / "d")  # removed at startup, written again at shutdown
    lg = lm.get_log("t", 0)
    assert lg.log_end_offset == 10 and lg.recovery_point == 10
    assert [r.value for r in records_in(lg)] == [b"v%d" % i for i in range(10)]
    lm.shutdown()


WRITER = r"""
import sys
from kafkalite.manager.log_manager import LogManager, ManagerConfig
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.scheduler import MockScheduler
from kafkalite.clock import MockClock
lm = LogManager([sys.argv[1]], scheduler=MockScheduler(MockClock()))
lg = lm.get_or_create_log("crash", 0)
for i in range(50):
    lg.append_as_leader(build_batch([SimpleRecord(b"k", b"v%d" % i, 1700000000000)]))
lg.flush(include_active=True)
lm.checkpoint_recovery_offsets()
for i in range(50, 80):
    lg.append_as_leader(build_batch([SimpleRecord(b"k", b"v%d" % i, 1700000000000)]))
print("ready", flush=True)
import time
time.sleep(60)
"""


@pytest.mark.slow
def test_unclean_restart_recovers_from_checkpoint(tmp_path):
    d = tmp_path / "d"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(d)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not has_clean_shutdown_marker(d)
    with open(d / "crash-0" / "00000000000000000000.log", "ab") as f:
        f.write(os.urandom(100))  # a torn tail after the crash
    lm, _ = manager([d])
    lg = lm.get_log("crash", 0)
    assert lg.recovery_point == 50 and lg.log_end_offset == 80
    assert [r.value for r in records_in(lg)] == [b"v%d" % i for i in range(80)]
    lm.shutdown()


def test_k7_log_start_checkpoint(tmp_path):
    lm, _ = manager([tmp_path / "d"])
    lg = lm.get_or_create_log("test", 0)
    for i in range(31):
        lg.append_as_leader(batch(i))
    lg.roll()
    for i in range(31, 50):
        lg.append_as_leader(batch(i))
    lg.update_high_watermark(lg.log_end_offset)
    lg.maybe_increment_log_start_offset(31)
    lm.checkpoint_log_start_offsets()
    path = tmp_path / "d" / "log-start-offset-checkpoint"
    assert OffsetCheckpointFile(path).read() == {("test", 0): 31}
    assert lg.delete_old_segments() == 1 and lg.segments.peekitem(0)[0] == 31
    lm.checkpoint_log_start_offsets()
    assert OffsetCheckpointFile(path).read() == {}  # only logs whose start is above their first segment
    lm.shutdown()


def test_scheduled_retention_and_async_deletion(tmp_path):
    cfg = LogConfig.from_props({"segment.bytes": 5 * 75, "retention.ms": 1000, "file.delete.delay.ms": 500})
    lm, sched = manager([tmp_path / "d"], default_config=cfg, initial_task_delay_ms=100,
                        retention_check_interval_ms=1000, file_delete_delay_ms=500)
    lg = lm.get_or_create_log("events", 0)
    for i in range(20):
        lg.append_as_leader(batch(i, ts=T0))
    lg.update_high_watermark(lg.log_end_offset)
    lm.startup()
    sched.advance(2000)
    assert lg.log_start_offset == 20 and lg.number_of_segments == 1
    sched.advance(1000)
    assert not [f for f in os.listdir(lg.dir) if f.endswith(".deleted")]
    lm.delete_log("events", 0)
    assert lm.get_log("events", 0) is None
    gone = [p for p in (tmp_path / "d").iterdir() if p.name.endswith("-delete")]
    assert len(gone) == 1
    sched.advance(2000)
    assert not gone[0].exists()
    lm.shutdown()


def test_topic_config_overrides(tmp_path):
    lm, _ = manager([tmp_path / "d"], default_config=LogConfig.from_props({"retention.ms": 1000}))
    lg = lm.get_or_create_log("compacted", 0, {"cleanup.policy": "compact"})
    assert lg.config.compact and lg.config.retention_ms == 1000
    lm.update_topic_config("compacted", {"cleanup.policy": "compact", "max.message.bytes": 100})
    assert lg.config.max_message_bytes == 100
    lm.shutdown()


def test_io_error_takes_one_dir_offline(tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    lm, _ = manager(dirs)
    a = lm.get_or_create_log("a", 0)
    b = lm.get_or_create_log("b", 0)
    a.append_as_leader(batch(1))
    b.append_as_leader(batch(2))
    broken, healthy = a.dir.parent, b.dir.parent
    (broken / "recovery-point-offset-checkpoint.tmp").mkdir()  # writing the checkpoint now fails (EISDIR)
    lm.checkpoint_recovery_offsets()
    assert lm.get_log("a", 0) is None and lm.is_offline("a", 0)
    assert lm.get_log("b", 0) is b
    b.append_as_leader(batch(3))
    assert b.log_end_offset == 2
    assert all(lm.get_or_create_log("c", p).dir.parent == healthy for p in range(3))
    (healthy / "recovery-point-offset-checkpoint.tmp").mkdir()
    lm.checkpoint_recovery_offsets()
    with pytest.raises(KafkaStorageError, match="offline"):
        lm.get_or_create_log("c", 9)
    lm.shutdown()
    assert (broken / "a-0" / "00000000000000000000.log").stat().st_size > 0  # nothing already written is lost


@pytest.mark.slow
def test_many_partitions_parallel_load(tmp_path):
    lm, _ = manager([tmp_path / "d"])
    for p in range(60):
        lm.get_or_create_log("many", p).append_as_leader(batch(p))
    lm.shutdown()
    seen = []
    t0 = time.perf_counter()
    lm = LogManager([tmp_path / "d"], config=ManagerConfig(num_recovery_threads_per_data_dir=4),
                    scheduler=MockScheduler(MockClock()), progress=lambda done, total: seen.append((done, total)))
    assert len(lm.all_logs()) == 60 and seen[-1] == (60, 60)
    assert time.perf_counter() - t0 < 10
    lm.shutdown()


@pytest.mark.slow
def test_unclean_start_recovers_on_every_recovery_thread(tmp_path, caplog):
    """num.recovery.threads.per.data.dir threads all take part in recovering after an unclean stop (a setting
    above the manager's floor of IO_THREADS_PER_DIR raises the thread count)."""
    import logging

    from kafkalite.manager.log_manager import IO_THREADS_PER_DIR

    wanted = IO_THREADS_PER_DIR + 2

    # Many small segments: each partition's recovery takes long enough (~20 segments to scan and index) that a
    # thread started late on a busy machine still finds partitions left to recover.
    lm, _ = manager([tmp_path / "d"], default_config=LogConfig(segment_bytes=64 * 1024))
    for p in range(40):
        lg = lm.get_or_create_log("many", p)
        for _ in range(20):
            lg.append_as_leader(build_batch([SimpleRecord(b"k", b"v" * 1000, T0)] * 50))
    lm.shutdown()
    (tmp_path / "d" / ".kafka_cleanshutdown").unlink()  # as after kill -9, before any checkpoint was written
    (tmp_path / "d" / "recovery-point-offset-checkpoint").unlink()
    caplog.set_level(logging.INFO)
    lm = LogManager([tmp_path / "d"], LogConfig(segment_bytes=64 * 1024),
                    ManagerConfig(num_recovery_threads_per_data_dir=wanted), scheduler=MockScheduler(MockClock()))
    threads = {r.threadName for r in caplog.records if "recovering unflushed segment" in r.getMessage()}
    assert len(lm.all_logs()) == 40
    assert len(threads) == wanted and all(t.startswith("log-recovery") for t in threads), threads
    lm.shutdown()


WIDE_WRITER = r"""
import sys
from kafkalite.manager.log_manager import LogManager
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.scheduler import MockScheduler
from kafkalite.clock import MockClock
lm = LogManager([sys.argv[1]], scheduler=MockScheduler(MockClock()))
for p in range(24):
    lg = lm.get_or_create_log("wide", p)
    for i in range(60):  # ~60 KB: several index entries in the active segment's preallocated indexes
        lg.append_as_leader(build_batch([SimpleRecord(b"k", b"%d-%d-" % (p, i) + b"x" * 1000, 1700000000000)]))
    if p % 2:
        lg.flush(include_active=True)
lm.checkpoint_recovery_offsets()  # odd partitions flushed: recovery resumes at their recovery point
print("ready", flush=True)
import time
time.sleep(60)
"""


@pytest.mark.slow
def test_recovery_after_kill_9_cuts_every_torn_tail_on_parallel_threads(tmp_path, caplog):
    """kill -9 of a writer leaves preallocated indexes and, here, a torn batch at the end of every other
    partition: the parallel recovery (several threads, each segment recovered once although its index check
    also fails) cuts each torn tail, keeps every whole batch and leaves logs that take appends."""
    import logging

    d = tmp_path / "d"
    proc = subprocess.Popen([sys.executable, "-c", WIDE_WRITER, str(d)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not has_clean_shutdown_marker(d)
    sizes = {}
    for p in range(24):
        path = d / f"wide-{p}" / "00000000000000000000.log"
        sizes[p] = path.stat().st_size
        if p % 3 == 0:
            with open(path, "ab") as f:  # a batch cut mid-write: its header promises more bytes than follow
                f.write(bytes(build_batch([SimpleRecord(b"k", b"torn" * 300, T0)]))[:700])
    caplog.set_level(logging.INFO)
    lm, _ = manager([d])
    try:
        recovered = [r for r in caplog.records if "recovering unflushed segment" in r.getMessage()]
        assert len({r.threadName for r in recovered}) > 1
        assert len(recovered) == 24  # once each, flushed or not: the active segment holds the recovery point
        for p in range(24):
            lg = lm.get_log("wide", p)
            assert lg.log_end_offset == 60, p
            assert lg.active_segment.size == sizes[p], p  # the torn tail is cut, nothing whole is lost
            assert [r.value[: len(b"%d-59-" % p)] for r in records_in(lg)][-1] == b"%d-59-" % p
            assert lg.append_as_leader(batch(60)).first_offset == 60
            assert [r.offset for r in records_in(lg)] == list(range(61))
    finally:
        lm.shutdown()
