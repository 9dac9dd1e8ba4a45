"""Leader epoch cache (reference section 2.12, cases K3 and N1-N4)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.storage.checkpoint import LEADER_EPOCH_CHECKPOINT_FILE, CheckpointError, LeaderEpochCheckpointFile
from kafkalite.storage.leader_epoch import EpochEntry, LeaderEpochCache


class CountingCheckpoint:
    """A checkpoint stand-in that records every write, to see when the cache flushes."""

    def __init__(self, initial: list[EpochEntry] | None = None) -> None:
        self.stored = list(initial or [])
        self.writes = 0

    def read(self) -> list[EpochEntry]:
        return list(self.stored)

    def write(self, entries: list[EpochEntry], durable: bool = True) -> None:
        self.stored = list(entries)
        self.writes += 1
        self.durable = durable


def cache_with(*pairs: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache()
    for epoch, offset in pairs:
        cache.assign(epoch, offset)
    return cache


def pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.epoch_entries()]


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)


# --- K3: persistence ---------------------------------------------------------------------------


def test_k3_checkpoint_text_and_reload(checkpoint: LeaderEpochCheckpointFile) -> None:
    cache = LeaderEpochCache(checkpoint)
    cache.assign(2, 6)
    cache.assign(3, 8)
    assert checkpoint.path.read_bytes() == b"0\n2\n2 6\n3 8\n"
    assert pairs(LeaderEpochCache(checkpoint)) == [(2, 6), (3, 8)]


def test_missing_checkpoint_loads_empty(checkpoint: LeaderEpochCheckpointFile) -> None:
    cache = LeaderEpochCache(checkpoint)
    assert cache.epoch_entries() == []
    assert not checkpoint.path.exists()  # constructing does not create files


def test_corrupt_checkpoint_raises_on_load(checkpoint: LeaderEpochCheckpointFile) -> None:
    checkpoint.path.write_bytes(b"0\n2\n2 6\n")
    with pytest.raises(CheckpointError, match=LEADER_EPOCH_CHECKPOINT_FILE):
        LeaderEpochCache(checkpoint)


def test_non_monotonic_file_is_repaired_on_load(checkpoint: LeaderEpochCheckpointFile) -> None:
    checkpoint.path.write_bytes(b"0\n3\n2 6\n3 5\n4 9\n")
    assert pairs(LeaderEpochCache(checkpoint)) == [(3, 5), (4, 9)]


def test_assign_flushes_synchronously_only_when_changed() -> None:
    store = CountingCheckpoint()
    cache = LeaderEpochCache(store)
    assert cache.assign(2, 6)
    assert store.writes == 1 and store.stored == [EpochEntry(2, 6)]
    assert not cache.assign(2, 7)
    assert not cache.assign(2, 6)
    assert store.writes == 1 and not store.durable  # written at once, fsynced by `sync` (the log's flush)
    cache.sync()
    assert store.writes == 2 and store.durable
    cache.sync()
    assert store.writes == 2


def test_truncations_and_clear_rewrite_the_file(checkpoint: LeaderEpochCheckpointFile) -> None:
    cache = LeaderEpochCache(checkpoint)
    for epoch, offset in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, offset)
    cache.truncate_from_end(11)
    assert checkpoint.path.read_bytes() == b"0\n2\n2 6\n3 8\n"
    cache.truncate_from_start(7)
    assert checkpoint.path.read_bytes() == b"0\n2\n2 7\n3 8\n"
    cache.clear()
    assert checkpoint.path.read_bytes() == b"0\n0\n"
    assert LeaderEpochCache(checkpoint).epoch_entries() == []


def test_noop_truncations_do_not_write() -> None:
    store = CountingCheckpoint([EpochEntry(2, 6), EpochEntry(3, 8)])
    cache = LeaderEpochCache(store)
    cache.truncate_from_end(9)
    cache.truncate_from_end(-1)
    cache.truncate_from_start(6)
    cache.truncate_from_start(-1)
    assert store.writes == 0


# --- N1-N4: the rules --------------------------------------------------------------------------


def test_n1_assign_rules_and_end_offsets() -> None:
    assert pairs(cache_with((2, 6), (2, 7))) == [(2, 6)]
    cache = cache_with((5, 11), (6, 12), (7, 13), (7, 12))
    assert pairs(cache) == [(5, 11), (7, 12)]
    assert cache.end_offset_for(5, 100) == (5, 12)
    assert cache.end_offset_for(6, 100) == (5, 12)


def test_n2_end_offset_for() -> None:
    cache = cache_with((0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 100) == (0, 13)
    assert cache.end_offset_for(2, 100) == (2, 17)
    assert cache.end_offset_for(3, 100) == (2, 17)
    assert cache.end_offset_for(4, 100) == (4, 100)
    assert cache.end_offset_for(5, 100) == (-1, -1)
    assert cache.end_offset_for(-1, 100) == (-1, -1)


def test_n3_epoch_below_first() -> None:
    assert cache_with((5, 11), (6, 12), (7, 13)).end_offset_for(4, 100) == (4, 11)


def test_n4_truncation() -> None:
    base = ((2, 6), (3, 8), (4, 11))
    cache = cache_with(*base)
    cache.truncate_from_end(8)
    assert pairs(cache) == [(2, 6)]
    cache = cache_with(*base)
    cache.truncate_from_start(8)
    assert pairs(cache) == [(3, 8), (4, 11)]
    cache = cache_with(*base)
    cache.truncate_from_start(9)
    assert pairs(cache) == [(3, 9), (4, 11)]
    cache = cache_with(*base)
    cache.truncate_from_start(5)
    assert pairs(cache) == list(base)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)
    assert pairs(cache) == list(base)


def test_truncate_from_start_past_everything_keeps_last_epoch() -> None:
    cache = cache_with((2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(100)
    assert pairs(cache) == [(4, 100)]


def test_assign_drops_newer_epochs_and_same_offset_epochs() -> None:
    assert pairs(cache_with((2, 6), (3, 6))) == [(3, 6)]  # leader changed with no appends
    assert pairs(cache_with((5, 10), (3, 20))) == [(3, 20)]  # lower epoch later: newer entries go
    assert pairs(cache_with((2, 6), (3, 9), (3, 7))) == [(2, 6), (3, 7)]


# --- accessors ---------------------------------------------------------------------------------


def test_empty_cache_accessors() -> None:
    cache = LeaderEpochCache()
    assert cache.latest_epoch is None
    assert cache.latest_entry is None and cache.earliest_entry is None
    assert cache.end_offset_for(0, 10) == (-1, -1)
    assert cache.epoch_for_offset(0) is None
    assert len(cache) == 0


def test_accessors() -> None:
    cache = cache_with((0, 10), (2, 13), (4, 17))
    assert cache.latest_epoch == 4
    assert cache.latest_entry == EpochEntry(4, 17)
    assert cache.earliest_entry == EpochEntry(0, 10)
    assert [cache.epoch_for_offset(o) for o in (9, 10, 12, 13, 16, 17, 1000)] == [None, 0, 0, 2, 2, 4, 4]
    entries = cache.epoch_entries()
    entries.clear()  # a copy: callers cannot corrupt the cache
    assert len(cache) == 3
    assert repr(cache) == "LeaderEpochCache([(0,10), (2,13), (4,17)])"


def test_epoch_entry_is_frozen() -> None:
    entry = EpochEntry(1, 2)
    with pytest.raises(AttributeError):
        entry.epoch = 3  # type: ignore[misc]


# --- invariants under arbitrary operations -----------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 20), st.integers(0, 200)),
        st.tuples(st.just("end"), st.integers(-1, 200)),
        st.tuples(st.just("start"), st.integers(-1, 200)),
        st.tuples(st.just("clear")),
    ),
    max_size=30,
)


@given(operations)
def test_entries_stay_strictly_increasing_and_persisted(ops: list[tuple]) -> None:
    store = CountingCheckpoint()
    cache = LeaderEpochCache(store)
    for op in ops:
        if op[0] == "assign":
            cache.assign(op[1], op[2])
        elif op[0] == "end":
            cache.truncate_from_end(op[1])
        elif op[0] == "start":
            cache.truncate_from_start(op[1])
        else:
            cache.clear()
        entries = cache.epoch_entries()
        assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in pairwise(entries))
        assert store.stored == entries
    assert LeaderEpochCache(store).epoch_entries() == cache.epoch_entries()


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 200)), min_size=1, max_size=10), st.integers(-1, 25))
def test_end_offset_for_matches_definition(assigns: list[tuple[int, int]], requested: int) -> None:
    cache = cache_with(*assigns)
    entries = cache.epoch_entries()
    leo = 10_000
    result = cache.end_offset_for(requested, leo)
    if requested == -1 or requested > entries[-1].epoch:
        assert result == (-1, -1)
    elif requested == entries[-1].epoch:
        assert result == (requested, leo)
    else:
        higher = next(e for e in entries if e.epoch > requested)
        floor = [e for e in entries if e.epoch <= requested]
        assert result == ((floor[-1].epoch if floor else requested), higher.start_offset)


def test_a_new_epoch_is_written_at_once_and_fsynced_before_the_recovery_point_passes_it(tmp_path, monkeypatch):
    """A leader's first append of an epoch writes the checkpoint without fsync (two fsyncs per partition on the
    event loop made a first produce to thousands of partitions take minutes); the log's flush makes it durable
    before its recovery point moves past the entry, and a reopened log reads the entry either way."""
    import os

    from kafkalite.records import SimpleRecord, build_batch
    from kafkalite.storage.log import Log
    from kafkalite.storage.log_config import LogConfig

    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    d = tmp_path / "t-0"
    lg = Log(d, LogConfig())
    monkeypatch.setattr(os, "fsync", counting_fsync)
    lg.maybe_assign_epoch_start_offset(3, 0)
    lg.append_as_leader(build_batch([SimpleRecord(b"k", b"v", 1_700_000_000_000)]), leader_epoch=3)
    assert synced == []
    assert LeaderEpochCheckpointFile(d / LEADER_EPOCH_CHECKPOINT_FILE).read() == [EpochEntry(3, 0)]
    lg.flush(include_active=True)
    assert len(synced) >= 2 and lg.recovery_point == 1
    count = len(synced)
    lg.flush(include_active=True)  # nothing new: no second rewrite of the checkpoint
    assert len(synced) - count <= 1
    lg.close()
    with Log(d, LogConfig(), clean_shutdown=True, recovery_point=1) as reopened:
        assert reopened.leader_epoch_cache.latest_entry == EpochEntry(3, 0)
