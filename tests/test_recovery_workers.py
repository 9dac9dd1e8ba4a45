"""Recovery after an unclean shutdown in worker processes (manager.recovery_workers) ends exactly where the
in-process recovery does: same files byte for byte, offsets, producer state, leader epochs, checkpoints."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from kafkalite.client import KafkaClient
from kafkalite.clock import MockClock
from kafkalite.manager import recovery_workers
from kafkalite.manager.log_manager import LogManager, ManagerConfig
from kafkalite.protocol import ApiKey
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.scheduler import MockScheduler
from kafkalite.storage.checkpoint import has_clean_shutdown_marker
from kafkalite.storage.log_config import LogConfig
from tests.support import T0
from tests.support.brokers import BrokerProcess

PARTITIONS = 12
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256)


def _manager(path: Path, processes: int | None, progress=None) -> LogManager:
    clock = MockClock(T0)
    return LogManager([path], CONFIG, ManagerConfig(), scheduler=MockScheduler(clock), clock=clock,
                      recovery_processes=processes, progress=progress)


def _crashed_data_dir(path: Path) -> None:
    """PARTITIONS partitions with several segments, idempotent producers, two leader epochs and a flushed
    prefix, left as kill -9 leaves them: no clean shutdown marker, active indexes preallocated."""
    lm = _manager(path, 0)
    for p in range(PARTITIONS):
        lg = lm.get_or_create_log("t", p)
        for i in range(20 + p):
            pid = 1000 + (i % 3)
            records = [SimpleRecord(b"k%d" % i, b"v" * (40 + p), T0 + i)]
            lg.append_as_leader(build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=i // 3),
                                leader_epoch=1 if i < 10 else 2)
            if i == 12:
                lg.flush()
    lm.checkpoint_recovery_offsets()
    lm.checkpoint_log_start_offsets()
    _as_killed(lm)
    assert not has_clean_shutdown_marker(path)


def _as_killed(lm: LogManager) -> None:
    """Leave the manager's data dirs as kill -9 leaves them: no flush, no trim, no snapshot, no clean marker."""
    for lg in lm.all_logs():
        lg.close_handlers()
    for d in lm.dirs:
        d.release()


def _files(path: Path) -> dict[str, bytes]:
    """Every file's bytes, an index's without the all-zero entries of its preallocated tail: an active segment
    recovered in-process has its indexes open and grown, one a worker recovered grows them at first use."""
    return {str(f.relative_to(path)): _without_preallocation(f.name, f.read_bytes()) for f in sorted(path.rglob("*"))
            if f.is_file() and f.name != ".lock"}


def _without_preallocation(name: str, data: bytes) -> bytes:
    width = 8 if name.endswith(".index") else 12 if name.endswith(".timeindex") else 0
    if not width:
        return data
    used = len(data.rstrip(b"\0"))
    return data[:-(-used // width) * width]  # whole entries up to the last non-zero byte


def _state(lm: LogManager) -> dict:
    out = {}
    for (topic, p), lg in sorted(lm.logs.items()):
        out[(topic, p)] = (
            lg.log_start_offset, lg.recovery_point, lg.log_end_offset, list(lg.segments.keys()),
            [(e.epoch, e.start_offset) for e in lg.leader_epoch_cache.epoch_entries()],
            sorted((pid, e.producer_epoch, e.last_seq, e.last_data_offset)
                   for pid, e in lg.producer_state.active_producers.items()),
        )
    return out


def _copy(src: Path, dst: Path) -> Path:
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)
    return dst


@pytest.fixture()
def crashed(tmp_path) -> Path:
    src = tmp_path / "src"
    _crashed_data_dir(src)
    # a torn tail in one partition: half a batch after the last whole one
    seg = max((src / "t-3").glob("*.log"))
    with open(seg, "ab") as f:
        f.write(bytes(build_batch([SimpleRecord(b"x", b"y" * 50, T0)]))[:40])
    return src


@pytest.mark.slow
def test_workers_recover_exactly_as_in_process(crashed, tmp_path):
    a, b = _copy(crashed, tmp_path / "a"), _copy(crashed, tmp_path / "b")
    seen = []
    in_process = _manager(a, 0)
    in_workers = _manager(b, 2, progress=lambda done, total: seen.append((done, total)))
    try:
        assert len(in_workers.logs) == PARTITIONS
        assert seen[-1] == (PARTITIONS, PARTITIONS)
        assert _state(in_workers) == _state(in_process)
        # recovery points stay the checkpointed ones (recovered data is not flushed), as in Kafka
        assert all(lg.recovery_point < lg.log_end_offset for lg in in_workers.all_logs())
        assert _files(b) == _files(a)  # the torn tail cut alike, same indexes, snapshots, epoch checkpoints
        lg = in_workers.get_log("t", 3)
        lg.append_as_leader(build_batch([SimpleRecord(b"n", b"new", T0)]), leader_epoch=2)
        in_process.get_log("t", 3).append_as_leader(build_batch([SimpleRecord(b"n", b"new", T0)]), leader_epoch=2)
    finally:
        in_process.shutdown()
        in_workers.shutdown()
    assert _files(b) == _files(a)  # checkpoints and clean shutdown markers too


@pytest.mark.slow
def test_workers_leave_the_snapshot_of_the_last_clean_shutdown_and_the_broker_replays_after_it(tmp_path):
    """After kill -9 of a broker that had shut down cleanly before, each partition's newest snapshot is the one that
    shutdown wrote, inside the active segment. A worker keeps it and writes none at the log end (the broker's open
    replays the batches after it), so no `.snapshot` file is created or deleted, and the producer state, the files
    and a retried batch's duplicate detection are what the in-process recovery gives."""
    src = tmp_path / "src"
    lm = _manager(src, 0)
    last = {}
    for p in range(PARTITIONS):
        lm.get_or_create_log("t", p)

    def produce(rounds: int, first_seq: int) -> None:
        for p in range(PARTITIONS):
            lg = lm.get_log("t", p)
            for i in range(rounds):
                batch = build_batch([SimpleRecord(b"k", b"v" * 30, T0)], producer_id=7, producer_epoch=0,
                                    base_sequence=first_seq + i)
                lg.append_as_leader(bytearray(batch), leader_epoch=1)
                last[p] = batch

    produce(5, 0)
    lm.shutdown()  # a snapshot at each log end
    lm = _manager(src, 0)
    produce(3, 5)
    _as_killed(lm)
    assert len(_snapshots(src)) == PARTITIONS
    _recover_both_alike(src, tmp_path, last, 7)


def _snapshots(path: Path) -> list[Path]:
    return sorted(f.relative_to(path) for f in path.rglob("*.snapshot"))


def _recover_both_alike(src: Path, tmp_path: Path, last: dict[int, bytearray], last_offset: int) -> None:
    """Recover a copy of `src` in-process and one in two workers: the same state and files, no `.snapshot` file
    written or deleted, and a retry of each partition's `last` batch (ending at `last_offset`) found a duplicate."""
    snapshots = _snapshots(src)
    a, b = _copy(src, tmp_path / "a"), _copy(src, tmp_path / "b")
    in_process = _manager(a, 0)
    in_workers = _manager(b, 2)
    try:
        assert _state(in_workers) == _state(in_process)
        assert _files(b) == _files(a)
        assert _snapshots(b) == snapshots
        for p in range(PARTITIONS):
            for lm in (in_process, in_workers):
                info = lm.get_log("t", p).append_as_leader(bytearray(last[p]), leader_epoch=1)
                assert info.duplicate and info.last_offset == last_offset
    finally:
        in_process.shutdown()
        in_workers.shutdown()
    assert _files(b) == _files(a)


@pytest.mark.slow
def test_a_partition_without_any_snapshot_recovered_in_a_worker_gets_its_producer_state_from_the_log(tmp_path):
    """A partition that never rolled and never shut down cleanly with data has no producer snapshot at all. The
    worker writes none, and the broker's open replays the log rather than taking the state to be empty (which is
    what a clean open without any snapshot does, for a log from before snapshots): duplicates are still found."""
    src = tmp_path / "src"
    lm = _manager(src, 0)
    last = {}
    for p in range(PARTITIONS):
        lg = lm.get_or_create_log("t", p)
        for i in range(4):
            last[p] = build_batch([SimpleRecord(b"k", b"v", T0)], producer_id=9, producer_epoch=0, base_sequence=i)
            lg.append_as_leader(bytearray(last[p]), leader_epoch=1)
    _as_killed(lm)
    assert not _snapshots(src)
    _recover_both_alike(src, tmp_path, last, 3)


@pytest.mark.slow
def test_a_failing_partition_takes_its_dir_offline_as_in_process(crashed, tmp_path, caplog):
    """An OSError while recovering a partition takes the whole data dir offline (Kafka's log dir failure), in
    a worker as in the broker's own threads; the error names the partition."""
    for name in ("a", "b"):
        path = _copy(crashed, tmp_path / name)
        epoch_file = path / "t-5" / "leader-epoch-checkpoint"
        epoch_file.unlink()
        epoch_file.mkdir()  # reading it raises IsADirectoryError
    caplog.set_level("ERROR", logger="kafkalite.manager")
    in_process = _manager(tmp_path / "a", 0)
    in_workers = _manager(tmp_path / "b", 2)
    try:
        for lm in (in_process, in_workers):
            assert lm.dirs[0].offline
            assert lm.logs == {}
            assert lm.is_offline("t", 0)
        assert "t-5" in caplog.text
    finally:
        in_process.shutdown()
        in_workers.shutdown()


@pytest.mark.slow
def test_the_partitions_of_a_worker_that_dies_are_recovered_by_the_broker(crashed, tmp_path, monkeypatch, caplog):
    """A worker process that exits without answering (here: it cannot start) costs only time: the broker
    recovers its partitions in its own threads, ending exactly where recovery without workers does, and
    says so in its log."""
    a, b = _copy(crashed, tmp_path / "a"), _copy(crashed, tmp_path / "b")
    in_process = _manager(a, 0)
    monkeypatch.setattr(recovery_workers.sys, "executable", "/bin/false")
    caplog.set_level("WARNING", logger="kafkalite.manager")
    fallen_back = _manager(b, 2)
    try:
        assert len(fallen_back.logs) == PARTITIONS
        assert _state(fallen_back) == _state(in_process)
        assert _files(b) == _files(a)
        assert "recovery worker process failed" in caplog.text
    finally:
        in_process.shutdown()
        fallen_back.shutdown()


def test_small_unclean_dirs_stay_in_process(crashed, tmp_path, monkeypatch):
    """Below MIN_PARTITIONS_FOR_PROCESSES no process is started (their start costs more than they save)."""
    path = _copy(crashed, tmp_path / "a")
    assert PARTITIONS < recovery_workers.MIN_PARTITIONS_FOR_PROCESSES
    monkeypatch.setattr(recovery_workers.sys, "executable", "/bin/false")  # a started worker would fail
    lm = _manager(path, None)
    try:
        assert len(lm.logs) == PARTITIONS
    finally:
        lm.shutdown()


@pytest.mark.slow
def test_a_broker_killed_with_many_partitions_recovers_them_in_workers(tmp_path):
    """A real `kafkalite serve` with MIN_PARTITIONS_FOR_PROCESSES partitions, each with an unflushed batch,
    killed with SIGKILL: the next start recovers them in a worker process and serves every record."""
    n = recovery_workers.MIN_PARTITIONS_FOR_PROCESSES
    b = BrokerProcess(tmp_path / "data")
    b.start(timeout_s=60)
    try:
        with KafkaClient(b.bootstrap, timeout_s=60) as c:
            topic = {"name": "w", "num_partitions": n, "replication_factor": 1, "assignments": [], "configs": []}
            res = c.request(ApiKey.CREATE_TOPICS, {"topics": [topic], "timeout_ms": 60_000})
            assert res["topics"][0]["error_code"] == 0, res
            batch = bytes(build_batch([SimpleRecord(b"k", b"v", int(time.time() * 1000))] * 3))
            deadline = time.monotonic() + 60
            while True:  # until every partition has its leader
                answers = c.produce_many({("w", p): batch for p in range(n)}, acks=1)
                if all(a["error_code"] == 0 for a in answers.values()):
                    break
                assert time.monotonic() < deadline, answers
                time.sleep(0.2)
        b.stop(signal.SIGKILL)
        b.start(timeout_s=60)
        with KafkaClient(b.bootstrap, timeout_s=60) as c:
            deadline = time.monotonic() + 60
            while True:
                ends = c.list_offsets({("w", p): -1 for p in range(n)})
                if all(e["error_code"] == 0 for e in ends.values()):
                    break
                assert time.monotonic() < deadline, ends
                time.sleep(0.2)
            assert all(e["offset"] >= 3 for e in ends.values()), ends  # every acknowledged batch survived
        assert "worker process" in b.log_path.read_text(errors="replace")
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.stop()
