"""The `.snapshot` file: producer state at an offset (Kafka's ProducerSnapshot message, version 1).

Only the byte format lives here; the producer state machine that fills and consumes the entries
is elsewhere. A snapshot lets log loading skip replaying every batch to rebuild idempotence and
transaction state, so a damaged one must never be half-trusted: every decode failure is a
`CorruptSnapshotError`, upon which the loader deletes the file and falls back to an older one.

Layout, all big-endian:

    int16  version (1) | uint32 crc32c of bytes [6, end) | int32 entry count | count x 46-byte entry
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from pathlib import Path

from crc32c import crc32c

from kafkalite.errors import KafkaliteError
from kafkalite.storage.checkpoint import StrPath, atomic_write, read_small_file
from kafkalite.storage.names import SNAPSHOT_SUFFIX, as_path, offset_from_file_name

SNAPSHOT_VERSION = 1

VERSION_OFFSET = 0
CRC_OFFSET = 2
COUNT_OFFSET = 6
ENTRIES_OFFSET = 10
CRC_COVERED_FROM = COUNT_OFFSET  # the CRC covers everything after itself

_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_VERSION_AND_CRC = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")  # field order of ProducerSnapshotEntry
HEADER_SIZE = _HEADER.size  # 10
ENTRY_SIZE = _ENTRY.size  # 46

NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_OFFSET = -1
NO_TIMESTAMP = -1
NO_COORDINATOR_EPOCH = -1


class CorruptSnapshotError(KafkaliteError):
    """A snapshot that cannot be trusted (bad version, CRC, length or empty); delete it and use an
    older one, as Kafka's CorruptSnapshotException handling does."""


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer's persisted state. Only the last batch's metadata survives a snapshot.

    Defaults describe a producer with no batch metadata and no open transaction, the values
    Kafka writes in that case.
    """

    producer_id: int
    producer_epoch: int
    last_sequence: int = NO_SEQUENCE
    last_offset: int = NO_OFFSET  # last data offset of the last batch
    offset_delta: int = 0  # last_offset minus that batch's first offset
    timestamp: int = NO_TIMESTAMP
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_OFFSET  # -1 unless a transaction is open


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The complete file content for `entries`, in the given order."""
    entries = list(entries)
    body = bytearray(_COUNT.pack(len(entries)))
    for entry in entries:
        try:
            body += _ENTRY.pack(*astuple(entry))
        except struct.error:
            raise ValueError(f"snapshot entry field out of range: {entry}") from None
    return _VERSION_AND_CRC.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(
    data: bytes | bytearray | memoryview, source: object = "snapshot"
) -> list[ProducerSnapshotEntry]:
    """The entries of a snapshot; any deviation from a file Kafka would write is corruption.

    The length must be exact: Kafka never pads, and a tail beyond the declared entries (or short
    of them) means the file is not the one whose CRC we checked against a count.
    """
    view = memoryview(data).cast("B")
    _check_header(view, source)
    _, _, count = _HEADER.unpack_from(view, 0)
    expected = HEADER_SIZE + ENTRY_SIZE * count
    if len(view) != expected:
        kind = "short" if len(view) < expected else "over-long"
        raise CorruptSnapshotError(
            f"{source}: {kind} file: {len(view)} bytes for {count} entries, expected {expected}"
        )
    return [ProducerSnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(view[ENTRIES_OFFSET:])]


def _check_header(view: memoryview, source: object) -> None:
    if not view:
        raise CorruptSnapshotError(f"{source}: empty snapshot file")
    if len(view) < HEADER_SIZE:
        raise CorruptSnapshotError(f"{source}: truncated header: {len(view)} bytes, need {HEADER_SIZE}")
    version, stored_crc, count = _HEADER.unpack_from(view, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source}: unknown snapshot version {version}")
    computed = crc32c(view[CRC_COVERED_FROM:])
    if computed != stored_crc:
        raise CorruptSnapshotError(
            f"{source}: crc mismatch: stored {stored_crc:#010x}, computed {computed:#010x}"
        )
    if count < 0:
        raise CorruptSnapshotError(f"{source}: negative entry count {count}")


def write_snapshot(path: StrPath, entries: Iterable[ProducerSnapshotEntry], *, durable: bool = True) -> None:
    """Write atomically, so a crash never leaves a half-written snapshot for the loader to reject.

    The file is fsynced before its rename, but the directory is not (Kafka's writeSnapshot forces the file
    only): a rename lost to a power failure leaves an older snapshot, from which the loader replays the log.
    Every partition recovered after kill -9 writes one, so the directory fsync cost ~0.3 ms each.
    `durable=False` skips the file's fsync too: for a caller that syncs the whole file system once after
    writing many (the log manager's recovery, `checkpoint.sync_file_system`)."""
    atomic_write(path, encode_snapshot(entries), durable=durable, sync_dir=False)


def read_snapshot(path: StrPath) -> list[ProducerSnapshotEntry]:
    """Entries of the snapshot at `path`; FileNotFoundError propagates (a missing file is not corrupt)."""
    return decode_snapshot(read_small_file(path), path)


def list_snapshots(directory: StrPath, file_names: Iterable[str] | None = None) -> list[tuple[int, Path]]:
    """(offset, path) of every `<offset>.snapshot` file, lowest offset first.

    The offset is read from the name, as Kafka does; a missing directory has no snapshots, and
    names whose prefix is not an offset (or `.snapshot.deleted`, `.tmp` leftovers) are ignored.
    `file_names`: the directory's regular files as the caller just listed them (not listed again).
    """
    directory = as_path(directory)
    if file_names is None:
        try:
            # scandir's file type comes with the listing (no stat per file): a broker lists thousands of these
            with os.scandir(directory) as entries:
                file_names = [e.name for e in entries if e.name.endswith(SNAPSHOT_SUFFIX) and e.is_file()]
        except FileNotFoundError:
            return []
    found = []
    for name in file_names:
        if name.endswith(SNAPSHOT_SUFFIX):
            try:
                found.append((offset_from_file_name(name), directory / name))
            except ValueError:
                continue
    return sorted(found)
