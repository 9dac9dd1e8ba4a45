"""A segment's `.txnindex` file (Kafka's TransactionIndex): the aborted transactions whose ABORT marker
landed in the segment, so that a read_committed fetch can tell its consumer which data to drop.

Unlike the offset and time indexes the file is not preallocated and not mapped: it only exists for
segments that saw an abort (it is created on the first append), and it is small and scanned whole,
so plain positioned reads and writes suffice.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kafkalite.errors import CorruptIndexError, InvalidOffsetError
from kafkalite.storage.names import as_path

CURRENT_VERSION = 0
ENTRY_SIZE = 34
_ENCODE = struct.Struct(">hqqqq")
_DECODE = struct.Struct(">2xqqqq")  # Kafka reads the version from the first byte alone; see from_bytes
_SCAN_CHUNK = ENTRY_SIZE * 4096


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, offset span, and the LSO when the abort was written.

    `last_offset` is the offset of the ABORT marker; `first_offset` may lie in an earlier segment.
    `last_stable_offset` lets a fetch stop searching early (see `collect_aborted_txns`).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENCODE.pack(CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset,
                            self.last_stable_offset)

    @classmethod
    def from_bytes(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> AbortedTxn:
        """Decode the entry at `offset`.

        Kafka takes the version from the first byte alone, read as a signed byte, and rejects only
        a positive one; doing the same keeps us reading exactly the files Kafka reads.
        """
        if len(buf) - offset < ENTRY_SIZE:
            raise CorruptIndexError(f"aborted transaction entry needs {ENTRY_SIZE} bytes, got {len(buf) - offset}")
        version = buf[offset] - 256 if buf[offset] >= 128 else buf[offset]
        if version > CURRENT_VERSION:
            raise CorruptIndexError(
                f"unexpected aborted transaction version {version}, current version is {CURRENT_VERSION}"
            )
        return cls(*_DECODE.unpack_from(buf, offset))


class TransactionIndex:
    def __init__(self, start_offset: int, path: Path | str) -> None:
        self.start_offset = start_offset
        self._path = as_path(path)
        self._fd: int | None = None
        # the last entry's last offset, which the next append must exceed; read from the file on first append
        self._last_offset: int | None = None
        self._last_offset_known = False

    @property
    def path(self) -> Path:
        return self._path

    # --- file access -----------------------------------------------------------------------------

    def _existing_fd(self) -> int | None:
        """The open file, opening it on demand; None while it does not exist."""
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDWR)
            except FileNotFoundError:
                return None
        return self._fd

    def _writable_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def _scan(self) -> Iterator[tuple[int, AbortedTxn]]:
        """Every whole entry with its byte position; a trailing partial entry is ignored, as in Kafka."""
        fd = self._existing_fd()
        if fd is None:
            return
        end = os.fstat(fd).st_size
        position = 0
        while end - position >= ENTRY_SIZE:
            chunk = os.pread(fd, min(_SCAN_CHUNK, end - position), position)
            usable = len(chunk) - len(chunk) % ENTRY_SIZE
            if usable == 0:
                return
            for i in range(0, usable, ENTRY_SIZE):
                try:
                    txn = AbortedTxn.from_bytes(chunk, i)
                except CorruptIndexError as exc:
                    raise CorruptIndexError(f"{exc} at byte {position + i} of transaction index {self._path}") from exc
                yield position + i, txn
            position += usable

    def _last_on_disk(self) -> AbortedTxn | None:
        fd = self._existing_fd()
        if fd is None:
            return None
        size = os.fstat(fd).st_size
        end = size - size % ENTRY_SIZE
        return AbortedTxn.from_bytes(os.pread(fd, ENTRY_SIZE, end - ENTRY_SIZE)) if end else None

    # --- entries ---------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        if not self._last_offset_known:
            last = self._last_on_disk()
            self._last_offset = None if last is None else last.last_offset
            self._last_offset_known = True
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise InvalidOffsetError(
                f"the last offset of appended transactions must increase, but {txn.last_offset} is not greater "
                f"than the current last offset {self._last_offset} of index {self._path}"
            )
        fd = self._writable_fd()
        size = os.fstat(fd).st_size
        # over a torn trailing entry rather than after it, so every later entry stays readable
        os.pwrite(fd, txn.to_bytes(), size - size % ENTRY_SIZE)
        self._last_offset = txn.last_offset

    def all_aborted(self) -> list[AbortedTxn]:
        return [txn for _, txn in self._scan()]

    def is_empty(self) -> bool:
        return next(self._scan(), None) is None

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), and whether that is all.

        The search is complete, and later entries and segments need not be read, once an entry's
        LSO reaches the upper bound: when that abort was written, every transaction that started
        below the bound had already ended, so its entry, if any, came no later than this one.
        """
        found = []
        for _, txn in self._scan():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Cut the file at the first entry whose last offset is >= `offset`."""
        last = None
        for position, txn in self._scan():
            if txn.last_offset >= offset:
                os.ftruncate(self._writable_fd(), position)
                self._last_offset, self._last_offset_known = last, True
                return
            last = txn.last_offset

    def reset(self) -> None:
        """Remove every entry. A missing file stays missing: only aborts create one."""
        fd = self._existing_fd()
        if fd is not None:
            os.ftruncate(fd, 0)
        self._last_offset, self._last_offset_known = None, True

    def sanity_check(self) -> None:
        """Every entry must end inside this segment or later; the one index check Kafka runs at load."""
        for _, txn in self._scan():
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {txn} in index {self._path} is less than start offset "
                    f"{self.start_offset}"
                )

    # --- file lifecycle --------------------------------------------------------------------------

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """Release the file handle; a later call reopens it, as Kafka's channel does."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete_if_exists(self) -> bool:
        self.close()
        self._last_offset, self._last_offset_known = None, True
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: Path | str) -> None:
        """Move the file if it exists; the new path is taken either way, so a later append creates it there."""
        try:
            if self._path.exists():
                os.replace(self._path, new_path)
        finally:
            self._path = Path(new_path)

    def __repr__(self) -> str:
        return f"TransactionIndex(path={self._path}, start_offset={self.start_offset})"
