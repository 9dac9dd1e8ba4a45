"""TimeIndex: the cases of Kafka's TimeIndexTest, Kafka's TimeIndex.maybeAppend rules, and property tests."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from kafkalite.storage.time_index import TimeIndex, TimestampOffset

T0 = 1700000000000

_names = itertools.count()
fixture_ok = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def fresh(tmp_path: Path) -> Path:
    return tmp_path / f"{next(_names):020d}.timeindex"


def filled(tmp_path: Path) -> TimeIndex:
    """D1's index: base 45, 30 slots, entries (10i, 45+10i) for i in 1..29."""
    idx = TimeIndex(tmp_path / "45.timeindex", 45, 360)
    for i in range(1, 30):
        idx.maybe_append(10 * i, 45 + 10 * i)
    return idx


# --- D1-D5 ---------------------------------------------------------------------------------------


def test_d1_lookup(tmp_path):
    idx = TimeIndex(tmp_path / "45.timeindex", 45, 360)
    assert idx.path.stat().st_size == 360
    assert idx.max_entries == 30
    assert idx.lookup(100) == TimestampOffset(-1, 45)
    for i in range(1, 30):
        idx.maybe_append(10 * i, 45 + 10 * i)
    assert idx.entries == 29
    assert idx.lookup(9) == TimestampOffset(-1, 45)
    assert idx.lookup(25) == TimestampOffset(20, 65)
    assert idx.lookup(30) == TimestampOffset(30, 75)
    assert idx.lookup(10**6) == TimestampOffset(290, 335)
    assert idx.entry(0) == TimestampOffset(10, 55)
    assert idx.entry(3) == TimestampOffset(40, 85)


def test_d2_full_one_slot_early_and_skip_full_check(tmp_path):
    idx = filled(tmp_path)
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(10000, 280, skip_full_check=True)
    idx.maybe_append(10000, 1000, True)
    assert idx.entries == 30
    assert idx.last_entry == TimestampOffset(10000, 1000)
    # the reserved slot is used up: nothing is left even for roll/close
    with pytest.raises(IndexFullError):
        idx.maybe_append(10001, 1001, skip_full_check=True)
    idx.maybe_append(10000, 1001, skip_full_check=True)  # equal timestamp: a no-op, not a failure


def test_d3_truncate(tmp_path):
    idx = filled(tmp_path)
    idx.truncate()
    assert idx.entries == 0
    assert idx.last_entry == TimestampOffset(-1, 45)
    for i in range(1, 30):
        idx.maybe_append(10 * i, 45 + 10 * i)
    idx.truncate_to(55)
    assert idx.entries == 0


def test_d3_truncate_three_cases_on_the_offset_field(tmp_path):
    idx = filled(tmp_path)
    idx.truncate_to(1000)  # past the end
    assert idx.entries == 29
    idx.truncate_to(85)  # exact: entry (40, 85) goes
    assert idx.entries == 3
    assert idx.last_entry == TimestampOffset(30, 75)
    idx.truncate_to(70)  # between 65 and 75: everything after (20, 65) goes
    assert idx.last_entry == TimestampOffset(20, 65)
    assert idx.lookup(1000) == TimestampOffset(20, 65)
    idx.maybe_append(25, 66)
    assert idx.lookup(1000) == TimestampOffset(25, 66)


def test_d4_last_entry_and_ordering(tmp_path):
    idx = TimeIndex(tmp_path / "45.timeindex", 45, 360)
    assert idx.last_entry == TimestampOffset(-1, 45)
    idx.maybe_append(1, 46)
    assert idx.last_entry == TimestampOffset(1, 46)
    idx.maybe_append(1, 47)  # equal timestamp: no-op
    assert idx.entries == 1
    assert idx.last_entry == TimestampOffset(1, 46)
    with pytest.raises(InvalidOffsetError):
        idx.maybe_append(0, 48)  # smaller timestamp
    idx.maybe_append(2, 46)  # equal offset, larger timestamp: appended
    assert idx.last_entry == TimestampOffset(2, 46)
    assert idx.entries == 2


def test_d4_empty_index_ignores_missing_timestamps(tmp_path):
    idx = TimeIndex(tmp_path / "45.timeindex", 45, 360)
    idx.maybe_append(-1, 50)
    assert idx.entries == 0
    idx.maybe_append(0, 50)
    assert idx.last_entry == TimestampOffset(0, 50)


def test_d5_resize(tmp_path):
    idx = TimeIndex(tmp_path / "45.timeindex", 45, 360)
    assert not idx.resize(360)
    assert idx.resize(180)
    assert idx.length == 180
    assert idx.resize(720)
    assert idx.length == 720
    assert TimeIndex(tmp_path / "0.timeindex", 0, 10485760).length == 10485756
    assert TimeIndex(tmp_path / "1.timeindex", 1).max_entries == 873813


# --- layout and file rules -----------------------------------------------------------------------


def test_reference_example_bytes_and_reopen(tmp_path):
    path = tmp_path / "100.timeindex"
    idx = TimeIndex(path, 100, 360)
    idx.maybe_append(T0, 105)
    idx.trim_to_valid_size()
    idx.close()
    assert path.read_bytes() == bytes.fromhex("0000018bcfe56800 00000005")
    reopened = TimeIndex(path, 100, 360)
    assert reopened.entries == 1
    assert reopened.last_entry == TimestampOffset(T0, 105)
    assert reopened.max_entries == 1
    assert reopened.is_full()
    reopened.sanity_check()


def test_relative_offset_overflow(tmp_path):
    idx = TimeIndex(tmp_path / "45.timeindex", 45, 360)
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(5, 45 + 2**31)
    with pytest.raises(IndexOffsetOverflowError):
        idx.maybe_append(5, 44)
    assert idx.entries == 0
    assert idx.last_entry == TimestampOffset(-1, 45)


def test_zero_length_file(tmp_path):
    path = tmp_path / "45.timeindex"
    path.touch()
    idx = TimeIndex(path, 45, 360)
    assert (idx.entries, idx.max_entries) == (0, 0)
    assert idx.is_full()
    assert idx.lookup(5) == TimestampOffset(-1, 45)
    with pytest.raises(IndexFullError):
        idx.maybe_append(5, 46, skip_full_check=True)
    idx.sanity_check()
    assert idx.resize(360)
    idx.maybe_append(5, 46)
    assert idx.lookup(5) == TimestampOffset(5, 46)


def test_resize_refreshes_last_entry_when_entries_are_dropped(tmp_path):
    idx = filled(tmp_path)
    assert idx.lookup(25) == TimestampOffset(20, 65)  # columns loaded
    assert idx.resize(36)
    assert idx.entries == 3
    assert idx.last_entry == TimestampOffset(30, 75)
    assert idx.lookup(1000) == TimestampOffset(30, 75)


def test_reset(tmp_path):
    idx = filled(tmp_path)
    idx.trim_to_valid_size()
    assert idx.length == 29 * 12
    idx.reset()
    assert idx.entries == 0
    assert idx.length == 360
    assert idx.last_entry == TimestampOffset(-1, 45)


def test_truncate_to_removes_every_entry_at_a_repeated_offset(tmp_path):
    idx = TimeIndex(tmp_path / "0.timeindex", 0, 360)
    idx.maybe_append(1, 5)
    idx.maybe_append(2, 7)
    idx.maybe_append(3, 7)
    idx.maybe_append(4, 9)
    idx.truncate_to(7)
    assert idx.entries == 1
    assert idx.last_entry == TimestampOffset(1, 5)


def test_sanity_check_timestamps_going_back(tmp_path):
    path = tmp_path / "0.timeindex"
    path.write_bytes(bytes.fromhex("0000000000000010 00000001 0000000000000005 00000002"))
    with pytest.raises(CorruptIndexError, match=str(path)):
        TimeIndex(path, 0, 360).sanity_check()


def test_sanity_check_offset_below_base(tmp_path):
    path = tmp_path / "0.timeindex"
    path.write_bytes(bytes.fromhex("0000000000000010 ffffffff"))
    idx = TimeIndex(path, 10, 360)
    assert idx.last_entry == TimestampOffset(16, 9)
    with pytest.raises(CorruptIndexError, match=str(path)):
        idx.sanity_check()


def test_sanity_check_length_not_a_multiple(tmp_path):
    path = tmp_path / "0.timeindex"
    path.write_bytes(bytes(13))
    with pytest.raises(CorruptIndexError, match=str(path)):
        TimeIndex(path, 0, 360).sanity_check()


def test_rename_and_delete(tmp_path):
    idx = filled(tmp_path)
    target = tmp_path / "45.timeindex.swap"
    idx.rename_to(target)
    assert idx.path == target
    assert target.exists()
    assert idx.delete_if_exists()
    assert not target.exists()
    assert not idx.delete_if_exists()


# --- properties ----------------------------------------------------------------------------------

# (timestamp step >= 1, offset step >= 0): timestamps strictly increase, offsets never decrease
steps = st.lists(st.tuples(st.integers(1, 10**6), st.integers(0, 50)), max_size=40)


def build(path: Path, base: int, first_ts: int, step_list: list[tuple[int, int]]):
    idx = TimeIndex(path, base, 12 * 48)
    entries = []
    ts, offset = first_ts, base
    for dt, do in step_list:
        ts, offset = ts + dt, offset + do
        entries.append(TimestampOffset(ts, offset))
        idx.maybe_append(ts, offset)
    return idx, entries


def floor_entry(entries: list[TimestampOffset], base: int, target: int) -> TimestampOffset:
    found = TimestampOffset(-1, base)
    for e in entries:
        if e.timestamp <= target:
            found = e
    return found


@pytest.mark.slow
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.integers(0, 2**40), first_ts=st.integers(-1, T0), step_list=steps, data=st.data())
def test_prop_lookup_is_floor_search(tmp_path, base, first_ts, step_list, data):
    idx, entries = build(fresh(tmp_path), base, first_ts, step_list)
    assert idx.entries == len(entries)
    hi = entries[-1].timestamp if entries else first_ts
    for target in data.draw(st.lists(st.integers(first_ts - 5, hi + 5), max_size=30)):
        assert idx.lookup(target) == floor_entry(entries, base, target)
    idx.close()


@pytest.mark.slow
@fixture_ok
@given(base=st.integers(0, 2**40), step_list=steps, data=st.data())
def test_prop_truncate_to(tmp_path, base, step_list, data):
    idx, entries = build(fresh(tmp_path), base, 0, step_list)
    if data.draw(st.booleans()):
        idx.lookup(0)
    hi = entries[-1].offset if entries else base
    cut = data.draw(st.integers(base - 3, hi + 3))
    idx.truncate_to(cut)
    kept = [e for e in entries if e.offset < cut]
    assert [idx.entry(i) for i in range(idx.entries)] == kept
    assert idx.last_entry == (kept[-1] if kept else TimestampOffset(-1, base))
    for target in data.draw(st.lists(st.integers(-1, 10**8), max_size=10)):
        assert idx.lookup(target) == floor_entry(kept, base, target)
    idx.close()


@pytest.mark.slow
@fixture_ok
@given(base=st.integers(0, 2**40), first_ts=st.integers(-1, T0), step_list=steps)
def test_prop_reopen_after_trim(tmp_path, base, first_ts, step_list):
    path = fresh(tmp_path)
    idx, entries = build(path, base, first_ts, step_list)
    idx.trim_to_valid_size()
    idx.close()
    expected = b"".join(e.timestamp.to_bytes(8, "big", signed=True) + (e.offset - base).to_bytes(4, "big")
                        for e in entries)
    assert path.read_bytes() == expected
    reopened = TimeIndex(path, base, 12 * 48)
    assert [reopened.entry(i) for i in range(reopened.entries)] == entries
    assert reopened.last_entry == (entries[-1] if entries else TimestampOffset(-1, base))
    reopened.sanity_check()
    reopened.close()


@fixture_ok
@given(content=st.binary(max_size=200), base=st.integers(0, 2**40), target=st.integers(-(2**63), 2**63 - 1))
def test_prop_garbage_file_only_fails_sanity_check_with_corrupt_index(tmp_path, content, base, target):
    path = fresh(tmp_path)
    path.write_bytes(content)
    idx = TimeIndex(path, base, 360)
    assert idx.entries == len(content) // 12
    try:
        idx.sanity_check()
    except CorruptIndexError as exc:
        assert str(path) in str(exc)
    assert isinstance(idx.lookup(target), TimestampOffset)
    idx.truncate_to(base + (target % 1000))
    idx.close()
