"""The fault tests' checker (tests/support/checker.py) judged on real logs written by kafkalite's storage: it
must report each kind of broken promise, so a clean scenario report means something."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalite.records import RecordBatch, SimpleRecord, build_batch
from kafkalite.storage.log import Log
from tests.support.checker import check, snapshot_replicas
from tests.support.logs import Env
from tests.support.workload import Send


def _leader_log(env: Env, root: Path, values: list[list[str]], epochs: list[int], bid: int = 1) -> Log:
    """Broker `bid`'s replica of t-0: one batch per list of values, each appended by the leader of its epoch."""
    log = env.open(root / f"b{bid}" / "t-0")
    for vals, epoch in zip(values, epochs, strict=True):
        log.append_as_leader(build_batch([SimpleRecord(None, v.encode(), 1000) for v in vals]), leader_epoch=epoch)
    return log


def _follow(env: Env, root: Path, bid: int, leader: Log, upto: int | None = None) -> Log:
    """A follower replica with the leader's bytes (offsets and epochs kept), as a fetcher appends them."""
    log = env.open(root / f"b{bid}" / "t-0")
    for b in leader.batches():
        if upto is not None and b.base_offset >= upto:
            break
        log.append_as_follower(bytes(b.buffer))
    return log


VALUES = [["p0-0", "p0-1"], ["p0-2"], ["p0-3", "p0-4", "p0-5"], ["p0-6"]]
EPOCHS = [0, 0, 1, 2]


def _sends() -> list[Send]:
    return [Send(f"p0-{i}", 0, 0.0, "ok", i, 0.1) for i in range(7)]


def _reads() -> dict[int, list[tuple[int, bytes]]]:
    return {0: [(i, f"p0-{i}".encode()) for i in range(7)]}


@pytest.fixture
def three_replicas(tmp_path):
    env = Env()
    leader = _leader_log(env, tmp_path, VALUES, EPOCHS)
    logs = [leader, _follow(env, tmp_path, 2, leader), _follow(env, tmp_path, 3, leader)]
    for log in logs:
        log.flush(include_active=True)
    yield tmp_path, env, logs
    for log in logs:
        log.close()


def _replicas(root: Path):
    return snapshot_replicas({b: root / f"b{b}" for b in (1, 2, 3)}, "t", 1)


@pytest.mark.slow
def test_identical_replicas_and_complete_reads_are_clean(three_replicas):
    root, _env, _logs = three_replicas
    rep = check(_sends(), _reads(), _replicas(root), {0: 7}, expect_replicas=3)
    rep.assert_clean()
    assert rep.replicas_compared == 3 and rep.batches_compared == 12  # 4 batches on each: not vacuous
    assert rep.acked == 7 and rep.read == 7 and rep.counts() == dict.fromkeys(rep.COUNTED, 0)


@pytest.mark.slow
def test_replicas_differing_at_one_offset_below_the_hw_are_reported(tmp_path):
    env = Env()
    leader = _leader_log(env, tmp_path, VALUES, EPOCHS)
    other = _leader_log(env, tmp_path, [["p0-0", "p0-1"], ["p0-2"], ["p0-3", "OTHER", "p0-5"], ["p0-6"]], EPOCHS,
                        bid=2)
    follower = _follow(env, tmp_path, 3, leader)
    for log in (leader, other, follower):
        log.flush(include_active=True)
    try:
        rep = check(_sends(), _reads(), _replicas(tmp_path), {0: 7}, expect_replicas=3)
        assert len(rep.replica_divergence) == 1 and "broker 2" in rep.replica_divergence[0]
        assert "base_offset=3" in rep.replica_divergence[0]
        assert any("p0:4" in x and "OTHER" in x for x in rep.inconsistent)  # two values at offset 4
        with pytest.raises(AssertionError, match="replica_divergence: 1"):
            rep.assert_clean()
        # the same difference above the HW is an uncommitted tail, not a broken promise
        above = check(_sends()[:3], {0: _reads()[0][:3]}, _replicas(tmp_path), {0: 3}, expect_replicas=3)
        above.assert_clean()
    finally:
        for log in (leader, other, follower):
            log.close()


def test_a_replica_short_of_the_hw_or_missing_is_reported(tmp_path):
    env = Env()
    leader = _leader_log(env, tmp_path, VALUES, EPOCHS)
    short = _follow(env, tmp_path, 2, leader, upto=3)
    for log in (leader, short):
        log.flush(include_active=True)
    try:
        rep = check(_sends(), _reads(), _replicas(tmp_path), {0: 7}, expect_replicas=3)
        assert any("broker 2's replica ends at 3, below the HW 7" in x for x in rep.replica_divergence)
        assert any("2 replicas on disk" in x for x in rep.replica_divergence)
    finally:
        for log in (leader, short):
            log.close()


def test_epoch_histories_that_disagree_below_the_hw_are_reported(tmp_path):
    env = Env()
    leader = _leader_log(env, tmp_path, VALUES, EPOCHS)
    # same records, but on broker 2 the last batch was written in epoch 1: its batches and cache say so
    other = env.open(tmp_path / "b2" / "t-0")
    for b in leader.batches():
        raw = bytearray(b.buffer)
        if b.base_offset == 6:
            RecordBatch(raw).set_partition_leader_epoch(1)
        other.append_as_follower(raw)
    for log in (leader, other):
        log.flush(include_active=True)
    try:
        rep = check(_sends(), _reads(), _replicas(tmp_path), {0: 7})
        assert rep.epoch_problems == ["p0: epoch history below HW 7 differs: broker 1 [(0, 0), (1, 3), (2, 6)], "
                                      "broker 2 [(0, 0), (1, 3)]"]
        assert rep.replica_divergence  # the stamped epoch is part of the batch
    finally:
        for log in (leader, other):
            log.close()


@pytest.mark.slow
def test_client_side_anomalies_are_counted(three_replicas):
    root, _env, _logs = three_replicas
    sends = [*_sends(), Send("p0-7", 0, 0.0, "ok", 7, 0.1),  # acknowledged, never read: lost
             Send("p0-8", 0, 0.0, "fail", None, 0.1, "NOT_ENOUGH_REPLICAS"),
             Send("p0-9", 0, 0.0, "timeout", None, 0.1, "_MSG_TIMED_OUT")]
    sends[2].offset = 1  # acknowledged at 1 but read at 2: inconsistent
    reads = {0: [*_reads()[0], (7, b"p0-8"), (8, b"p0-9"), (9, b"p0-9"), (10, b"nobody-1")]}
    rep = check(sends, reads, _replicas(root), {0: 7})
    c = rep.counts()
    assert rep.acked_lost == ["p0-7@p0:7"] and rep.lost_below_max_read == ["p0-7@p0:7"]
    assert c["aborted_reads"] == 1 and "p0-8" in rep.aborted_reads[0]
    assert c["duplicates"] == 1 and "p0-9" in rep.duplicates[0]
    assert c["unexpected"] == 1 and "nobody-1" in rep.unexpected[0]
    assert any("p0-2 acknowledged at p0:1" in x for x in rep.inconsistent)
    assert any(x.startswith("p0:1 holds") for x in rep.inconsistent)
    assert rep.unknown == 1 and rep.unknown_read == 1 and rep.failed == 1


@pytest.mark.slow
def test_a_definitively_refused_send_found_only_in_a_replica_is_an_aborted_read(three_replicas):
    root, _env, _logs = three_replicas
    sends = _sends()
    sends[6] = Send("p0-6", 0, 0.0, "fail", None, 0.1, "NOT_ENOUGH_REPLICAS")
    rep = check(sends, {0: _reads()[0][:6]}, _replicas(root), {0: 6})
    assert len(rep.aborted_reads) == 3 and all("replica at p0:6" in x for x in rep.aborted_reads)


@pytest.mark.slow
def test_a_run_with_nothing_acknowledged_is_not_clean(three_replicas):
    root, _env, _logs = three_replicas
    with pytest.raises(AssertionError, match="only 0 sends acknowledged"):
        check([], _reads(), _replicas(root), {0: 7}).assert_clean()


def test_a_copy_resent_under_a_newer_producer_epoch_is_told_apart_from_a_duplicate(tmp_path):
    """librdkafka#4953: a client that bumps its epoch re-sends records under new sequences, which no broker can
    recognise; the same value twice under one epoch is still a duplicate (the broker failed to deduplicate)."""
    env = Env()
    log = env.open(tmp_path / "b1" / "t-0")
    for value, epoch, seq in [("p0-0", 0, 0), ("p0-1", 0, 1), ("p0-1", 1, 0), ("p0-2", 1, 1), ("p0-2", 1, 2)]:
        log.append_as_leader(build_batch([SimpleRecord(None, value.encode(), 1000)], producer_id=7,
                                         producer_epoch=epoch, base_sequence=seq), leader_epoch=0)
    log.flush(include_active=True)
    try:
        sends = [Send("p0-0", 0, 0.0, "ok", 0, 0.1), Send("p0-1", 0, 0.0, "ok", 2, 0.1),
                 Send("p0-2", 0, 0.0, "ok", 3, 0.1)]
        reads = {0: [(0, b"p0-0"), (1, b"p0-1"), (2, b"p0-1"), (3, b"p0-2"), (4, b"p0-2")]}
        rep = check(sends, reads, snapshot_replicas({1: tmp_path / "b1"}, "t", 1), {0: 5})
        assert rep.resent_after_epoch_bump == ["p0-1 at [(0, 1), (0, 2)] by (producer id, epoch) [(7, 0), (7, 1)]"]
        assert rep.duplicates == ["p0-2 at [(0, 3), (0, 4)] by (producer id, epoch) [(7, 1), (7, 1)]"]
        # without the replicas nothing tells them apart: both are duplicates
        assert len(check(sends, reads, None, {0: 5}).duplicates) == 2
        # acknowledged at the first copy: the client knew it was written and sent it again, whatever the epochs
        sends[1].offset = 1
        rep = check(sends, reads, snapshot_replicas({1: tmp_path / "b1"}, "t", 1), {0: 5})
        assert not rep.resent_after_epoch_bump and len(rep.duplicates) == 2
    finally:
        log.close()
