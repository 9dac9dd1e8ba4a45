"""Producer snapshots across crashes: which ones a recovery keeps, and that the state they give is the log's.

Recovery after kill -9 keeps a snapshot it does not cut below and writes none at the end of the last segment it
recovers (`LogLoader._recover_segment`); these tests hold it to giving the same producer state as a replay of the
whole log with no snapshot at all, after any mix of appends, rolls, clean restarts, crashes and torn tails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite.records import SimpleRecord, build_batch
from kafkalite.storage import names
from kafkalite.storage.log import Log
from tests.support import T0
from tests.support.logs import Env

PROPS = {"segment.bytes": 1500, "index.interval.bytes": 200}


def _batch(pid: int, seq: int, n: int) -> bytearray:
    return build_batch([SimpleRecord(None, b"p%d-%d" % (pid, seq + i), T0) for i in range(n)], producer_id=pid,
                       producer_epoch=0, base_sequence=seq)


def _append(lg: Log, pid: int, n: int) -> bytearray:
    entry = lg.producer_state.last_entry(pid)
    seq = entry.last_seq + 1 if entry is not None and not entry.is_empty else 0
    batch = _batch(pid, seq, n)
    info = lg.append_as_leader(bytearray(batch))
    assert not info.duplicate
    return batch


def _snapshot_files(d: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_ino) for p in d.glob("*.snapshot"))


def _producers(lg: Log) -> dict[int, tuple[int, int, int]]:
    return {pid: (e.producer_epoch, e.last_seq, e.last_data_offset)
            for pid, e in lg.producer_state.active_producers.items()}


def _replayed_producers(d: Path, env: Env) -> dict[int, tuple[int, int, int]]:
    """The state a replay of the whole log gives: a copy of the directory without its snapshots, recovered."""
    with tempfile.TemporaryDirectory() as t:
        copy = Path(t) / d.name
        shutil.copytree(d, copy, ignore=shutil.ignore_patterns("*.snapshot"))
        lg = env.open(copy, PROPS)
        try:
            return _producers(lg)
        finally:
            lg.close_handlers()


def _crash(lg: Log, cut: int = 0) -> None:
    """What kill -9 leaves (no flush, no snapshot, untrimmed indexes), and optionally a torn active `.log`."""
    active = lg.active_segment.log.path
    lg.close_handlers()
    if cut:
        os.truncate(active, max(0, os.path.getsize(active) - cut))


def test_recovery_after_kill_keeps_the_snapshots_it_does_not_cut_below_and_writes_none(tmp_path):
    """Kafka's recovery deletes every snapshot above the recovered segment's base and writes one at its end: a
    file deleted and one created per partition and crash, which with thousands of partitions recovering at once
    waited on the file system's journal. Here a crash whose recovery cuts nothing leaves the files as they were,
    and the state still knows the last batch of each producer."""
    env = Env()
    d = tmp_path / "t-0"
    lg = env.open(d, PROPS)
    for i in range(12):
        _append(lg, 1 + i % 3, 1 + i % 4)
    lg.close()  # a snapshot at the log end
    lg = env.open(d, PROPS, clean_shutdown=True, recovery_point=lg.log_end_offset)
    last = {pid: _append(lg, pid, 2) for pid in (1, 2, 3, 4)}
    before = _snapshot_files(d)
    assert any(int(name.split(".")[0]) > lg.active_segment.base_offset for name, _ in before)  # the shutdown's
    for _ in range(3):
        _crash(lg)
        lg = env.open(d, PROPS, recovery_point=lg.recovery_point)
        assert _snapshot_files(d) == before
        for batch in last.values():  # a retry of each producer's last batch is still found
            assert lg.append_as_leader(bytearray(batch)).duplicate
        assert _producers(lg) == _replayed_producers(d, env)
    lg.close()


def test_a_recovery_that_cuts_below_a_snapshot_deletes_it_and_replays_from_the_segment_base(tmp_path):
    env = Env()
    d = tmp_path / "t-0"
    lg = env.open(d, PROPS)
    first = _append(lg, 7, 3)
    cut_off = _append(lg, 7, 2)
    end = lg.log_end_offset
    lg.close()
    assert names.snapshot_file(d, end).exists()
    lg = env.open(d, PROPS, clean_shutdown=True, recovery_point=end)
    _crash(lg, cut=10)  # tears the last batch, which the snapshot at the end has seen
    lg = env.open(d, PROPS)
    assert lg.log_end_offset == 3
    assert not names.snapshot_file(d, end).exists()
    assert lg.append_as_leader(bytearray(first)).duplicate
    info = lg.append_as_leader(bytearray(cut_off))  # gone from the log: in sequence again, not a duplicate
    assert not info.duplicate and info.first_offset == 3
    lg.close()


_OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3), st.integers(1, 5)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean")),
    st.tuples(st.just("crash"), st.sampled_from([0, 0, 1, 30, 200, 700])),
), min_size=1, max_size=25)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_producer_state_after_any_restarts_is_what_a_replay_of_the_log_gives(ops):
    env = Env()
    with tempfile.TemporaryDirectory() as t:
        d = Path(t) / "t-0"
        lg = env.open(d, PROPS)
        try:
            for op in ops:
                if op[0] == "append":
                    _append(lg, op[1], op[2])
                    continue
                if op[0] == "roll":
                    lg.roll()
                    continue
                if op[0] == "clean":
                    lg.close()
                    lg = env.open(d, PROPS, clean_shutdown=True, recovery_point=lg.log_end_offset)
                else:
                    point = lg.recovery_point
                    _crash(lg, op[1])
                    lg = env.open(d, PROPS, recovery_point=point)
                end = lg.log_end_offset
                assert all(int(name.split(".")[0]) <= end for name, _ in _snapshot_files(d))
                assert _producers(lg) == _replayed_producers(d, env)
        finally:
            lg.close_handlers()
