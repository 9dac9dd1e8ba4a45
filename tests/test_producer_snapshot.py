"""The `.snapshot` file format (reference section 1.11, case K6)."""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.errors import KafkaliteError
from kafkalite.storage.names import snapshot_file
from kafkalite.storage.producer_snapshot import (
    CorruptSnapshotError,
    ProducerSnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    read_snapshot,
    write_snapshot,
)

T0 = 1700000000000
ENTRY = ProducerSnapshotEntry(1000, 0, 4, 4, 4, T0, -1, -1)
VECTOR = bytes.fromhex(
    "0001 64c47816 00000001 00000000000003e8 0000 00000004 0000000000000004 00000004 0000018bcfe56800"
    " ffffffff ffffffffffffffff"
)
EMPTY = bytes.fromhex("0001 48674bc7 00000000")


def test_reference_vector() -> None:
    assert len(VECTOR) == 56
    assert encode_snapshot([ENTRY]) == VECTOR
    assert decode_snapshot(VECTOR) == [ENTRY]


def test_empty_snapshot_vector() -> None:
    assert encode_snapshot([]) == EMPTY
    assert decode_snapshot(EMPTY) == []


def test_defaults_mean_no_batch_metadata() -> None:
    entry = ProducerSnapshotEntry(7, 2)
    assert (entry.last_sequence, entry.last_offset, entry.offset_delta, entry.timestamp) == (-1, -1, 0, -1)
    assert (entry.coordinator_epoch, entry.current_txn_first_offset) == (-1, -1)


def test_write_read_round_trip(tmp_path: Path) -> None:
    path = snapshot_file(tmp_path, 5)
    entries = [ENTRY, ProducerSnapshotEntry(2**62, 32767, 2**31 - 1, 99, 3, T0 + 1, 7, 90)]
    write_snapshot(path, entries)
    assert path.name == "00000000000000000005.snapshot"
    assert read_snapshot(path) == entries
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no .tmp left behind


def test_missing_file_is_not_corruption(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_snapshot(snapshot_file(tmp_path, 1))


def test_encode_rejects_out_of_range_fields() -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_snapshot([ProducerSnapshotEntry(1, 2**15)])


# --- corruption --------------------------------------------------------------------------------


def test_error_names_the_file(tmp_path: Path) -> None:
    path = snapshot_file(tmp_path, 3)
    path.write_bytes(b"")
    with pytest.raises(CorruptSnapshotError, match=r"00000000000000000003\.snapshot: empty") as info:
        read_snapshot(path)
    assert isinstance(info.value, KafkaliteError)


def test_truncation_at_every_length() -> None:
    for cut in range(len(VECTOR)):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(VECTOR[:cut])


def test_every_single_bit_flip_is_detected() -> None:
    for bit in range(len(VECTOR) * 8):
        damaged = bytearray(VECTOR)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(damaged)


def test_zero_fill_anywhere_is_detected() -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(len(VECTOR)))
    for start in range(len(VECTOR) - 37 + 1):  # K6 overwrites 37 bytes with zeros
        damaged = VECTOR[:start] + bytes(37) + VECTOR[start + 37:]
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(damaged)


def _with_crc(version: int, body: bytes) -> bytes:
    return struct.pack(">hI", version, crc32c(body)) + body


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "empty"),
        (VECTOR[:9], "truncated header"),
        (VECTOR + b"\x00", "crc mismatch"),
        (_with_crc(0, VECTOR[6:]), "version 0"),
        (_with_crc(2, VECTOR[6:]), "version 2"),
        (_with_crc(1, VECTOR[6:] + b"\x00"), "over-long"),
        (_with_crc(1, struct.pack(">i", 2) + VECTOR[10:]), "short"),
        (_with_crc(1, struct.pack(">i", 2**31 - 1)), "short"),
        (_with_crc(1, struct.pack(">i", -1)), "negative entry count"),
    ],
)
def test_specific_corruptions(data: bytes, fragment: str) -> None:
    with pytest.raises(CorruptSnapshotError, match=fragment):
        decode_snapshot(data)


@given(st.binary(max_size=120))
def test_arbitrary_bytes_give_entries_or_our_error(data: bytes) -> None:
    with contextlib.suppress(CorruptSnapshotError):
        decode_snapshot(data)


@given(st.binary(max_size=120))
def test_crc_valid_garbage_gives_entries_or_our_error(body: bytes) -> None:
    """A valid CRC over random bytes reaches the count and length checks."""
    with contextlib.suppress(CorruptSnapshotError):
        entries = decode_snapshot(_with_crc(1, body))
        assert len(body) == 4 + 46 * len(entries)


int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
entries_strategy = st.lists(st.builds(ProducerSnapshotEntry, int64, int16, int32, int64, int32, int64, int32, int64),
                            max_size=8)


@pytest.mark.slow
@given(entries_strategy)
def test_round_trip(entries: list[ProducerSnapshotEntry]) -> None:
    data = encode_snapshot(entries)
    assert len(data) == 10 + 46 * len(entries)
    assert decode_snapshot(data) == entries


# --- listing and the K6 fallback ---------------------------------------------------------------


def test_list_snapshots_sorted_and_filtered(tmp_path: Path) -> None:
    for offset in (42, 2, 5):
        write_snapshot(snapshot_file(tmp_path, offset), [])
    (tmp_path / "00000000000000000007.snapshot.deleted").write_bytes(b"")
    (tmp_path / "00000000000000000008.snapshot.tmp").write_bytes(b"")
    (tmp_path / "00000000000000000009.log").write_bytes(b"")
    (tmp_path / "junk.snapshot").write_bytes(b"")
    (tmp_path / "00000000000000000011.snapshot").mkdir()
    assert list_snapshots(tmp_path) == [(o, snapshot_file(tmp_path, o)) for o in (2, 5, 42)]
    assert list_snapshots(tmp_path / "missing") == []


def _load_latest(directory: Path) -> tuple[int, list[ProducerSnapshotEntry]] | None:
    """How a loader uses this module: newest first, delete what is corrupt, fall back."""
    for offset, path in reversed(list_snapshots(directory)):
        try:
            return offset, read_snapshot(path)
        except CorruptSnapshotError:
            path.unlink()
    return None


def test_k6_corrupt_snapshots_fall_back_to_older_then_empty(tmp_path: Path) -> None:
    for offset in (2, 5, 9):
        write_snapshot(snapshot_file(tmp_path, offset), [ProducerSnapshotEntry(offset, 0, 0, offset - 1, 0, T0)])
    newest = snapshot_file(tmp_path, 9)
    newest.write_bytes(newest.read_bytes()[: len(VECTOR) // 2])
    middle = snapshot_file(tmp_path, 5)
    data = middle.read_bytes()
    middle.write_bytes(data[:10] + bytes(37) + data[47:])
    loaded = _load_latest(tmp_path)
    assert loaded is not None and loaded[0] == 2 and loaded[1][0].producer_id == 2
    snapshot_file(tmp_path, 2).write_bytes(b"")
    assert _load_latest(tmp_path) is None
    assert list_snapshots(tmp_path) == []
