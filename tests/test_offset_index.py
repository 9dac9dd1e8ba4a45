"""OffsetIndex: the cases of Kafka's OffsetIndexTest, Kafka's file-length rules, and property tests."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from kafkalite.storage.index_base import peek_file
from kafkalite.storage.offset_index import OffsetIndex, OffsetPosition

_names = itertools.count()
fixture_ok = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def fresh(tmp_path: Path) -> Path:
    """A new file name per hypothesis example, all inside pytest's tmp_path."""
    return tmp_path / f"{next(_names):020d}.index"


def floor_entry(entries: list[tuple[int, int]], base: int, target: int) -> OffsetPosition:
    found = OffsetPosition(base, 0)
    for offset, position in entries:
        if offset <= target:
            found = OffsetPosition(offset, position)
    return found


# --- C1-C8 ---------------------------------------------------------------------------------------


def test_c1_new_index_is_preallocated_and_empty(tmp_path):
    idx = OffsetIndex(tmp_path / "45.index", 45, 240)
    assert idx.path.stat().st_size == 240
    assert idx.length == 240
    assert idx.max_entries == 30
    assert idx.entries == 0
    assert idx.last_offset == 45
    assert idx.lookup(92) == OffsetPosition(45, 0)


def test_c2_fill_lookup_entry_and_full(tmp_path):
    idx = OffsetIndex(tmp_path / "45.index", 45, 240)
    for i in range(30):
        idx.append(45 + i + 1, i)
    assert idx.lookup(45) == OffsetPosition(45, 0)
    assert idx.lookup(75) == OffsetPosition(75, 29)
    for i in range(30):
        assert idx.entry(i) == OffsetPosition(46 + i, i)
    assert idx.is_full()
    with pytest.raises(IndexFullError):
        idx.append(45 + 31, 31)
    assert not issubclass(IndexFullError, InvalidOffsetError)


def test_c3_random_entries_lookup_floor(tmp_path):
    rng = random.Random(3)
    base = 1000
    idx = OffsetIndex(tmp_path / "1000.index", base, 30 * 8)
    offsets = sorted(rng.sample(range(base + 1, base + 500), 30))
    positions = sorted(rng.sample(range(1, 100_000), 30))
    entries = list(zip(offsets, positions, strict=True))
    for offset, position in entries:
        idx.append(offset, position)
    for x in range(base - 10, base + 510):
        assert idx.lookup(x) == floor_entry(entries, base, x)
    assert idx.lookup(offsets[0] - 1) == OffsetPosition(base, 0)


def test_c4_append_out_of_order_or_equal_offset(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    idx.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        idx.append(50, 1)
    with pytest.raises(InvalidOffsetError):
        idx.append(51, 5)
    assert idx.entries == 1


def test_c5_truncate_to_three_cases(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    for i in range(1, 10):
        idx.append(i, i)

    idx.truncate_to(12)  # past the end: no effect
    assert idx.entries == 9
    assert idx.lookup(10) == OffsetPosition(9, 9)
    assert idx.last_offset == 9

    idx.append(10, 10)
    idx.truncate_to(10)  # exact entry: removed
    assert idx.lookup(10) == OffsetPosition(9, 9)
    assert idx.last_offset == 9

    idx.append(10, 10)
    idx.truncate_to(9)
    assert idx.lookup(10) == OffsetPosition(8, 8)
    assert idx.last_offset == 8

    idx.append(9, 9)
    idx.truncate_to(5)
    assert idx.lookup(10) == OffsetPosition(4, 4)
    assert idx.last_offset == 4

    idx.truncate()
    assert idx.entries == 0
    assert idx.last_offset == 0
    assert idx.lookup(10) == OffsetPosition(0, 0)


def test_c5_truncate_between_entries_keeps_the_floor(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    for offset in (10, 20, 30):
        idx.append(offset, offset * 100)
    idx.truncate_to(25)  # no entry at 25: everything after the floor (20) goes
    assert idx.entries == 2
    assert idx.last_offset == 20
    idx.truncate_to(5)  # nothing <= 5: empty
    assert idx.entries == 0


@pytest.mark.parametrize(
    ("start", "size", "expected"),
    [
        (OffsetPosition(45, 0), 5, OffsetPosition(46, 10)),
        (OffsetPosition(45, 0), 10, OffsetPosition(46, 10)),
        (OffsetPosition(45, 0), 22, OffsetPosition(47, 23)),
        (OffsetPosition(45, 0), 23, OffsetPosition(47, 23)),
        (OffsetPosition(46, 10), 24, OffsetPosition(48, 37)),
        (OffsetPosition(48, 37), 1, None),
        (OffsetPosition(45, 0), 200, None),
    ],
)
def test_c6_fetch_upper_bound_offset(tmp_path, start, size, expected):
    idx = OffsetIndex(tmp_path / "45.index", 45, 240)
    for offset, position in ((45, 0), (46, 10), (47, 23), (48, 37)):
        idx.append(offset, position)
    assert idx.fetch_upper_bound_offset(start, size) == expected


def test_c6_fetch_upper_bound_offset_empty_index(tmp_path):
    idx = OffsetIndex(tmp_path / "45.index", 45, 240)
    assert idx.fetch_upper_bound_offset(OffsetPosition(45, 0), 5) is None


def test_c7_trim_close_reopen(tmp_path):
    path = tmp_path / "45.index"
    idx = OffsetIndex(path, 45, 240)
    idx.append(51, 0)
    idx.append(52, 1)
    idx.trim_to_valid_size()
    idx.close()
    assert path.read_bytes() == bytes.fromhex("00000006 00000000 00000007 00000001")

    reopened = OffsetIndex(path, 45, 240)
    assert reopened.entries == 2
    assert reopened.last_offset == 52
    assert reopened.lookup(50) == OffsetPosition(45, 0)
    assert reopened.lookup(51) == OffsetPosition(51, 0)
    assert reopened.lookup(100) == OffsetPosition(52, 1)
    assert reopened.max_entries == 2
    assert reopened.is_full()
    with pytest.raises(IndexFullError):
        reopened.append(53, 2)
    assert reopened.resize(240)
    reopened.append(53, 2)
    assert reopened.lookup(53) == OffsetPosition(53, 2)


def test_c8_relative_offset_overflow(tmp_path):
    base = 45
    idx = OffsetIndex(tmp_path / "45.index", base, 240)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(base + 2**31, 0)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(base - 1, 0)
    assert idx.entries == 0
    assert idx.can_append_offset(base + 2**31 - 1)
    assert not idx.can_append_offset(base + 2**31)
    assert not idx.can_append_offset(base - 1)
    idx.append(base, 0)
    idx.sanity_check()
    assert idx.lookup(base) == OffsetPosition(base, 0)


# --- layout and file rules -----------------------------------------------------------------------


def test_reference_example_bytes(tmp_path):
    path = tmp_path / "100.index"
    idx = OffsetIndex(path, 100, 80)
    idx.append(105, 0)
    idx.append(110, 4096)
    idx.flush()
    assert path.read_bytes()[:16] == bytes.fromhex("00000005 00000000 0000000a 00001000")
    assert path.read_bytes()[16:] == bytes(64)
    assert idx.size_in_bytes == 16


def test_untrimmed_reopen_trusts_the_whole_file(tmp_path):
    """Why segments trim on roll and close: the zero tail of a preallocated file reads as entries."""
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 80)
    idx.append(5, 100)
    idx.close()
    reopened = OffsetIndex(path, 0, 80)
    assert reopened.entries == 10
    assert reopened.entry(1) == OffsetPosition(0, 0)
    assert reopened.last_offset == 0


def test_default_size(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0)
    assert idx.length == 10485760
    assert idx.max_entries == 1310720


def test_entry_out_of_range(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    idx.append(1, 1)
    with pytest.raises(IndexError):
        idx.entry(1)
    with pytest.raises(IndexError):
        idx.entry(-1)


def test_zero_length_file_has_no_slots(tmp_path):
    path = tmp_path / "7.index"
    path.touch()
    idx = OffsetIndex(path, 7, 80)
    assert (idx.entries, idx.max_entries, idx.length) == (0, 0, 0)
    assert idx.is_full()
    assert idx.lookup(100) == OffsetPosition(7, 0)
    assert idx.fetch_upper_bound_offset(OffsetPosition(7, 0), 10) is None
    idx.sanity_check()
    idx.flush()
    with pytest.raises(IndexFullError):
        idx.append(8, 0)
    assert idx.resize(80)
    idx.append(8, 0)
    assert idx.lookup(100) == OffsetPosition(8, 0)


def test_resize_to_zero_and_back(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 80)
    assert idx.resize(0)
    assert path.stat().st_size == 0
    assert idx.is_full()
    assert not idx.resize(7)  # rounds down to 0: unchanged
    assert idx.resize(17)
    assert idx.length == 16


def test_max_index_size_below_one_entry(tmp_path):
    path = tmp_path / "0.index"
    with pytest.raises(ValueError):
        OffsetIndex(path, 0, 7)
    assert not path.exists()


def test_resize_keeps_entries_and_shrinking_drops_what_no_longer_fits(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    for i in range(1, 6):
        idx.append(i, i * 10)
    assert idx.lookup(3) == OffsetPosition(3, 30)  # columns loaded
    assert idx.resize(163)
    assert idx.length == 160
    assert idx.entries == 5
    assert [idx.entry(i) for i in range(5)] == [OffsetPosition(i, i * 10) for i in range(1, 6)]
    assert idx.resize(24)
    assert idx.entries == 3
    assert idx.last_offset == 3
    assert idx.lookup(100) == OffsetPosition(3, 30)


def test_reset(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    idx.append(1, 1)
    idx.trim_to_valid_size()
    assert idx.length == 8
    idx.reset()
    assert idx.entries == 0
    assert idx.length == 80
    assert idx.last_offset == 0


def test_sanity_check_length_not_a_multiple(tmp_path):
    path = tmp_path / "0.index"
    path.write_bytes(bytes.fromhex("00000001 00000000 00"))
    idx = OffsetIndex(path, 0, 80)
    assert idx.entries == 1
    with pytest.raises(CorruptIndexError, match=str(path)):
        idx.sanity_check()


def test_sanity_check_last_offset_below_base(tmp_path):
    path = tmp_path / "0.index"
    path.write_bytes(bytes.fromhex("00000001 00000000 ffffffff 00000010"))
    idx = OffsetIndex(path, 10, 80)
    assert idx.last_offset == 9
    with pytest.raises(CorruptIndexError, match=str(path)):
        idx.sanity_check()


def test_read_only(tmp_path):
    path = tmp_path / "0.index"
    with pytest.raises(FileNotFoundError):
        OffsetIndex(path, 0, 80, writable=False)
    idx = OffsetIndex(path, 0, 80)
    idx.append(3, 30)
    idx.trim_to_valid_size()
    idx.close()
    ro = OffsetIndex(path, 0, 80, writable=False)
    assert ro.lookup(4) == OffsetPosition(3, 30)
    ro.close()


def test_rename_delete_close(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 80)
    idx.append(1, 1)
    target = tmp_path / "0.index.deleted"
    idx.rename_to(target)
    assert idx.path == target
    assert target.exists()
    assert not (tmp_path / "0.index").exists()
    idx.append(2, 2)  # the mapping survives the rename
    idx.flush()
    assert target.read_bytes()[8:16] == bytes.fromhex("00000002 00000002")
    assert idx.delete_if_exists()
    assert not target.exists()
    assert not idx.delete_if_exists()
    idx.close()  # idempotent


def test_lookup_after_append_and_truncate_keeps_columns_in_step(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 800)
    idx.append(10, 1)
    assert idx.lookup(10) == OffsetPosition(10, 1)
    idx.append(20, 2)
    assert idx.lookup(25) == OffsetPosition(20, 2)
    idx.truncate_to(20)
    assert idx.lookup(25) == OffsetPosition(10, 1)
    idx.append(30, 3)
    assert idx.lookup(25) == OffsetPosition(10, 1)
    assert idx.fetch_upper_bound_offset(OffsetPosition(10, 1), 1) == OffsetPosition(30, 3)


# --- properties ----------------------------------------------------------------------------------

entries_strategy = st.lists(
    st.tuples(st.integers(1, 1000), st.integers(0, 5000)), min_size=0, max_size=60
).map(
    lambda deltas: list(
        zip(
            itertools.accumulate(d for d, _ in deltas),
            itertools.accumulate(p for _, p in deltas),
            strict=True,
        )
    )
)


def build(path: Path, base: int, rel_entries: list[tuple[int, int]]) -> tuple[OffsetIndex, list[tuple[int, int]]]:
    idx = OffsetIndex(path, base, 8 * 64)
    entries = [(base + rel - 1, position) for rel, position in rel_entries]
    for offset, position in entries:
        idx.append(offset, position)
    return idx, entries


@pytest.mark.slow
@fixture_ok
@given(base=st.integers(0, 2**40), rel_entries=entries_strategy, data=st.data())
def test_prop_lookup_is_floor_search(tmp_path, base, rel_entries, data):
    idx, entries = build(fresh(tmp_path), base, rel_entries)
    hi = entries[-1][0] if entries else base
    for target in data.draw(st.lists(st.integers(base - 10, hi + 10), max_size=30)):
        assert idx.lookup(target) == floor_entry(entries, base, target)
    for target in data.draw(st.lists(st.integers(-(2**63), 2**63), max_size=5)):
        assert idx.lookup(target) == floor_entry(entries, base, target)
    idx.close()


@fixture_ok
@given(base=st.integers(0, 2**40), rel_entries=entries_strategy, data=st.data())
def test_prop_fetch_upper_bound_is_first_entry_at_or_past_the_end(tmp_path, base, rel_entries, data):
    idx, entries = build(fresh(tmp_path), base, rel_entries)
    start = OffsetPosition(base, data.draw(st.integers(0, 300_000)))
    size = data.draw(st.integers(0, 20_000))
    expected = next((OffsetPosition(o, p) for o, p in entries if p >= start.position + size), None)
    assert idx.fetch_upper_bound_offset(start, size) == expected
    idx.close()


@fixture_ok
@given(base=st.integers(0, 2**40), rel_entries=entries_strategy, data=st.data())
def test_prop_truncate_to_then_lookup(tmp_path, base, rel_entries, data):
    idx, entries = build(fresh(tmp_path), base, rel_entries)
    if data.draw(st.booleans()):
        idx.lookup(base)  # truncate with the columns already loaded, or not
    hi = entries[-1][0] if entries else base
    cut = data.draw(st.integers(base - 5, hi + 5))
    idx.truncate_to(cut)
    kept = [e for e in entries if e[0] < cut]
    assert idx.entries == len(kept)
    assert idx.last_offset == (kept[-1][0] if kept else base)
    for target in data.draw(st.lists(st.integers(base - 5, hi + 5), max_size=20)):
        assert idx.lookup(target) == floor_entry(kept, base, target)
    idx.append(max(hi, cut) + 1, 10**9)
    assert idx.lookup(max(hi, cut) + 1) == OffsetPosition(max(hi, cut) + 1, 10**9)
    idx.close()


@fixture_ok
@given(base=st.integers(0, 2**40), rel_entries=entries_strategy)
def test_prop_reopen_after_trim_gives_identical_entries(tmp_path, base, rel_entries):
    path = fresh(tmp_path)
    idx, entries = build(path, base, rel_entries)
    idx.trim_to_valid_size()
    idx.close()
    expected = b"".join((o - base).to_bytes(4, "big") + p.to_bytes(4, "big") for o, p in entries)
    assert path.read_bytes() == expected
    reopened = OffsetIndex(path, base, 8 * 64)
    assert reopened.entries == len(entries)
    assert [(e.offset, e.position) for e in map(reopened.entry, range(reopened.entries))] == entries
    assert reopened.last_offset == (entries[-1][0] if entries else base)
    reopened.sanity_check()
    reopened.close()


@fixture_ok
@given(content=st.binary(max_size=200), base=st.integers(0, 2**40), target=st.integers(-(2**40), 2**42))
def test_prop_garbage_file_only_fails_sanity_check_with_corrupt_index(tmp_path, content, base, target):
    path = fresh(tmp_path)
    path.write_bytes(content)
    idx = OffsetIndex(path, base, 80)
    assert idx.entries == len(content) // 8
    try:
        idx.sanity_check()
    except CorruptIndexError as exc:
        assert str(path) in str(exc)
    result = idx.lookup(target)
    assert isinstance(result, OffsetPosition)
    idx.fetch_upper_bound_offset(OffsetPosition(base, 0), 10)
    idx.truncate_to(target)
    idx.close()


def test_position_past_2gib_is_a_clear_error(tmp_path):
    from kafkalite.errors import IndexOffsetOverflowError
    from kafkalite.storage.offset_index import OffsetIndex

    idx = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 80)
    with pytest.raises(IndexOffsetOverflowError, match="position"):
        idx.append(1, 2**31)
    idx.append(1, 2**31 - 1)
    assert idx.lookup(5).position == 2**31 - 1
    idx.release_cache()
    assert idx.lookup(5).position == 2**31 - 1


@fixture_ok
@given(length=st.one_of(st.integers(0, 200), st.integers(8150, 8250), st.integers(8250, 40_000)),
       entry_size=st.sampled_from([8, 12]), seed=st.integers(0, 2**32 - 1))
def test_peek_file_reads_length_first_and_last_whole_entry_of_any_file(tmp_path, length, entry_size, seed):
    """`peek_file` (the load's index check) reads a small file with one read and a larger one in pieces; both
    give the file's length, its first entry and its last whole one, around the one-read limit too."""
    data = random.Random(seed).randbytes(length)
    path = fresh(tmp_path)
    path.write_bytes(data)
    whole = length - length % entry_size
    expected = (length, b"", b"") if whole == 0 else (length, data[:entry_size], data[whole - entry_size:whole])
    assert peek_file(path, entry_size) == expected


def test_threads_racing_to_the_first_use_of_an_index_map_it_once(tmp_path):
    """Indexes are mapped at their first use, which a fetch's lookup and an append (or, after kill -9, eight
    loading threads) may reach together: each index gets one mapping whatever the race, while the locks that
    ensure it are shared by stripes of indexes, not one for all."""
    import threading

    path = tmp_path / "7.index"
    idx = OffsetIndex(path, 7, 4096)
    for i in range(10):
        idx.append(8 + i, 100 * i)
    idx.trim_to_valid_size()
    idx.close()
    threads_n = 8
    for _round in range(40):
        indexes = [OffsetIndex(path, 7, 4096) for _ in range(3)]  # not mapped until used
        barrier = threading.Barrier(threads_n)
        seen: list[list[tuple[object, OffsetPosition | None]]] = [[] for _ in indexes]

        def first_use(k: int, barrier=barrier, indexes=indexes, seen=seen) -> None:
            barrier.wait()
            for j, ix in enumerate(indexes[k % 3:] + indexes[:k % 3]):
                seen[(j + k % 3) % 3].append((ix._mapping(), ix.lookup(12)))

        workers = [threading.Thread(target=first_use, args=(k,)) for k in range(threads_n)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        for got in seen:
            assert len(got) == threads_n and all(m is got[0][0] for m, _ in got)
            assert {found for _, found in got} == {OffsetPosition(12, 400)}
        for ix in indexes:
            ix.close()
