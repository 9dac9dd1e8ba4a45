"""TransactionIndex and AbortedTxn: the cases of Kafka's TransactionIndexTest, its reading quirks, and properties."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite.errors import CorruptIndexError, InvalidOffsetError
from kafkalite.storage.txn_index import AbortedTxn, TransactionIndex

_names = itertools.count()
fixture_ok = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

E1_ENTRIES = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]


def fresh(tmp_path: Path) -> Path:
    return tmp_path / f"{next(_names):020d}.txnindex"


def index_with(path: Path, entries: list[AbortedTxn], start: int = 0) -> TransactionIndex:
    idx = TransactionIndex(start, path)
    for txn in entries:
        idx.append(txn)
    return idx


# --- E1-E6 ---------------------------------------------------------------------------------------


def test_e1_append_close_reopen_append(tmp_path):
    path = tmp_path / "0.txnindex"
    idx = index_with(path, E1_ENTRIES)
    idx.close()
    reopened = TransactionIndex(0, path)
    extra = AbortedTxn(3, 50, 60, 55)
    reopened.append(extra)
    assert reopened.all_aborted() == [*E1_ENTRIES, extra]
    assert path.stat().st_size == 5 * 34


def test_e2_sanity_check_against_start_offset(tmp_path):
    path = tmp_path / "0.txnindex"
    index_with(path, E1_ENTRIES).close()
    TransactionIndex(0, path).sanity_check()
    with pytest.raises(CorruptIndexError, match=str(path)):
        TransactionIndex(100, path).sanity_check()


def test_e3_last_offset_must_increase(tmp_path):
    idx = index_with(tmp_path / "0.txnindex", [AbortedTxn(1, 5, 15, 13)])
    with pytest.raises(InvalidOffsetError):
        idx.append(AbortedTxn(0, 0, 15, 11))
    with pytest.raises(InvalidOffsetError):
        idx.append(AbortedTxn(0, 0, 10, 11))
    assert idx.all_aborted() == [AbortedTxn(1, 5, 15, 13)]


def test_e3_the_check_survives_a_reopen(tmp_path):
    path = tmp_path / "0.txnindex"
    index_with(path, [AbortedTxn(1, 5, 15, 13)]).close()
    with pytest.raises(InvalidOffsetError):
        TransactionIndex(0, path).append(AbortedTxn(0, 0, 15, 11))


@pytest.mark.parametrize(
    ("fetch", "upper", "expected", "complete"),
    [
        (0, 100, E1_ENTRIES, False),
        (0, 32, E1_ENTRIES[:3], True),
        (0, 35, E1_ENTRIES, True),
        (10, 35, E1_ENTRIES, True),
        (11, 35, E1_ENTRIES[1:], True),
        (20, 41, E1_ENTRIES[2:], False),
    ],
)
def test_e4_collect_aborted_txns(tmp_path, fetch, upper, expected, complete):
    idx = index_with(tmp_path / "0.txnindex", E1_ENTRIES)
    assert idx.collect_aborted_txns(fetch, upper) == (expected, complete)


def test_e5_truncate_to_and_reset(tmp_path):
    path = tmp_path / "0.txnindex"
    entries = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    idx = index_with(path, entries)
    idx.truncate_to(51)
    assert idx.all_aborted() == entries
    idx.truncate_to(50)
    assert idx.all_aborted() == entries[:3]
    assert path.stat().st_size == 3 * 34
    idx.append(AbortedTxn(4, 36, 40, 36))  # the last offset is now 35 again
    assert idx.all_aborted() == [*entries[:3], AbortedTxn(4, 36, 40, 36)]
    idx.reset()
    assert idx.all_aborted() == []
    assert idx.is_empty()
    assert path.stat().st_size == 0
    idx.append(AbortedTxn(0, 0, 1, 0))  # reset forgets the last offset
    assert idx.all_aborted() == [AbortedTxn(0, 0, 1, 0)]


def test_e6_bytes_and_lazy_file(tmp_path):
    txn = AbortedTxn(1000, 102, 106, 100)
    expected = bytes.fromhex("0000 00000000000003e8 0000000000000066 000000000000006a 0000000000000064")
    assert txn.to_bytes() == expected
    assert len(expected) == 34
    assert AbortedTxn.from_bytes(expected) == txn

    path = tmp_path / "100.txnindex"
    idx = TransactionIndex(100, path)
    assert not path.exists()
    idx.flush()
    idx.sanity_check()
    idx.truncate_to(0)
    idx.reset()
    idx.close()
    assert idx.all_aborted() == []
    assert idx.collect_aborted_txns(0, 1000) == ([], False)
    assert idx.is_empty()
    assert not path.exists()
    idx.append(txn)
    assert path.read_bytes() == expected
    assert not idx.is_empty()


# --- reading quirks and file lifecycle -----------------------------------------------------------


def test_version_is_the_first_byte_read_signed(tmp_path):
    body = AbortedTxn(7, 1, 2, 3).to_bytes()[2:]
    assert AbortedTxn.from_bytes(b"\x00\x05" + body) == AbortedTxn(7, 1, 2, 3)  # low byte ignored
    assert AbortedTxn.from_bytes(b"\x80\x00" + body) == AbortedTxn(7, 1, 2, 3)  # negative byte accepted
    with pytest.raises(CorruptIndexError):
        AbortedTxn.from_bytes(b"\x01\x00" + body)
    path = tmp_path / "0.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 1, 0).to_bytes() + b"\x7f\x00" + body)
    with pytest.raises(CorruptIndexError, match=str(path)):
        TransactionIndex(0, path).all_aborted()


def test_from_bytes_too_short():
    with pytest.raises(CorruptIndexError):
        AbortedTxn.from_bytes(bytes(33))


def test_trailing_partial_entry_is_ignored_and_overwritten(tmp_path):
    path = tmp_path / "0.txnindex"
    first = AbortedTxn(1, 0, 10, 0)
    path.write_bytes(first.to_bytes() + b"\x00\x00\x01")
    idx = TransactionIndex(0, path)
    assert idx.all_aborted() == [first]
    second = AbortedTxn(2, 11, 20, 11)
    idx.append(second)
    assert path.read_bytes() == first.to_bytes() + second.to_bytes()
    assert idx.all_aborted() == [first, second]


def test_rename_before_the_file_exists(tmp_path):
    idx = TransactionIndex(0, tmp_path / "0.txnindex")
    target = tmp_path / "0.txnindex.deleted"
    idx.rename_to(target)
    assert idx.path == target
    assert not target.exists()
    idx.append(AbortedTxn(1, 0, 1, 0))
    assert target.exists()
    assert not (tmp_path / "0.txnindex").exists()


def test_rename_keeps_the_open_file(tmp_path):
    idx = index_with(tmp_path / "0.txnindex", E1_ENTRIES[:1])
    target = tmp_path / "0.txnindex.swap"
    idx.rename_to(target)
    idx.append(E1_ENTRIES[1])
    idx.flush()
    assert target.read_bytes() == E1_ENTRIES[0].to_bytes() + E1_ENTRIES[1].to_bytes()


def test_delete_if_exists(tmp_path):
    path = tmp_path / "0.txnindex"
    idx = TransactionIndex(0, path)
    assert not idx.delete_if_exists()
    idx.append(AbortedTxn(1, 0, 10, 0))
    assert idx.delete_if_exists()
    assert not path.exists()
    idx.append(AbortedTxn(1, 0, 5, 0))  # a fresh file: no ordering against the deleted one
    assert idx.all_aborted() == [AbortedTxn(1, 0, 5, 0)]


def test_usable_after_close(tmp_path):
    idx = index_with(tmp_path / "0.txnindex", E1_ENTRIES[:2])
    idx.close()
    idx.close()
    assert idx.all_aborted() == E1_ENTRIES[:2]
    idx.append(E1_ENTRIES[2])
    assert idx.all_aborted() == E1_ENTRIES[:3]


# --- properties ----------------------------------------------------------------------------------

i64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def txn_lists(draw) -> list[AbortedTxn]:
    last_offsets = sorted(draw(st.sets(st.integers(0, 10**6), max_size=30)))
    return [AbortedTxn(draw(i64), draw(st.integers(0, last)), last, draw(st.integers(0, 10**6)))
            for last in last_offsets]


@pytest.mark.slow
@fixture_ok
@given(entries=txn_lists())
def test_prop_round_trip(tmp_path, entries):
    path = fresh(tmp_path)
    idx = index_with(path, entries)
    idx.flush()
    idx.close()
    if entries:
        assert path.read_bytes() == b"".join(t.to_bytes() for t in entries)
    else:
        assert not path.exists()
    reopened = TransactionIndex(0, path)
    assert reopened.all_aborted() == entries
    assert all(AbortedTxn.from_bytes(t.to_bytes()) == t for t in entries)
    reopened.sanity_check()
    reopened.close()


@fixture_ok
@given(entries=txn_lists(), fetch=st.integers(0, 10**6), size=st.integers(0, 10**6))
def test_prop_collect_matches_a_model(tmp_path, entries, fetch, size):
    upper = fetch + size
    expected, complete = [], False
    for t in entries:
        if t.last_offset >= fetch and t.first_offset < upper:
            expected.append(t)
        if t.last_stable_offset >= upper:
            complete = True
            break
    idx = index_with(fresh(tmp_path), entries)
    assert idx.collect_aborted_txns(fetch, upper) == (expected, complete)
    idx.close()


@fixture_ok
@given(entries=txn_lists(), cut=st.integers(0, 10**6 + 1))
def test_prop_truncate_to(tmp_path, entries, cut):
    idx = index_with(fresh(tmp_path), entries)
    idx.truncate_to(cut)
    kept = [t for t in entries if t.last_offset < cut]
    assert idx.all_aborted() == kept
    idx.append(AbortedTxn(0, 0, max([cut, *(t.last_offset + 1 for t in kept)]), 0))
    idx.close()


@fixture_ok
@given(content=st.binary(max_size=300), start=st.integers(0, 2**40))
def test_prop_garbage_file_only_fails_with_corrupt_index(tmp_path, content, start):
    path = fresh(tmp_path)
    path.write_bytes(content)
    idx = TransactionIndex(start, path)
    try:
        idx.sanity_check()
        entries = idx.all_aborted()
    except CorruptIndexError as exc:
        assert str(path) in str(exc)
    else:
        assert len(entries) == len(content) // 34
    idx.close()
