"""A segment's `.index` file (Kafka's OffsetIndex): a sparse map from offset to byte position in the `.log`.

Each 8-byte entry is `int32 offset - base_offset, int32 position`, big-endian, strictly increasing in
offset. The index is sparse (one entry per `index.interval.bytes` of log), so a lookup only narrows
the scan of the `.log` to start at a batch boundary at or before the wanted offset.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from kafkalite.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from kafkalite.storage.index_base import IndexBase, check_length, peek_file


class OffsetPosition(NamedTuple):
    """A NamedTuple, not a dataclass: it is built on every lookup, and tuples are three times cheaper."""

    offset: int
    position: int


MAX_POSITION = (1 << 31) - 1


class OffsetIndex(IndexBase):
    entry_size = 8
    _entry = struct.Struct(">ii")
    _fields = ((0, 4), (4, 4))

    def _refresh_last(self) -> None:
        n = self._entries
        relative, self._last_position = self._read(n - 1) if n else (0, 0)
        self._last_offset = self.base_offset + relative

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when empty."""
        return self._last_offset

    @property
    def last_entry(self) -> OffsetPosition | None:
        """The last entry, None when empty; kept in memory, so asking maps nothing."""
        return OffsetPosition(self._last_offset, self._last_position) if self._entries else None

    def entry(self, n: int) -> OffsetPosition:
        relative, position = self._read(n)
        return OffsetPosition(self.base_offset + relative, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The last entry at or below `target_offset`: where a scan for it may start.

        Below the first entry (or on an empty index) that is the segment start, `(base_offset, 0)`.
        """
        offsets, positions = self._cols or self._columns()
        slot = bisect_right(offsets, target_offset - self.base_offset) - 1
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + offsets[slot], positions[slot])

    def fetch_upper_bound_offset(self, fetch_offset: OffsetPosition, fetch_size: int) -> OffsetPosition | None:
        """The first entry at or past the end of a fetch of `fetch_size` bytes from `fetch_offset`.

        A read_committed fetch uses its offset as an exclusive bound when collecting aborted
        transactions, so it needs no scan of the `.log`. None when the fetch reaches past the last entry.
        """
        offsets, positions = self._columns()
        slot = bisect_left(positions, fetch_offset.position + fetch_size)
        if slot == len(positions):
            return None
        return OffsetPosition(self.base_offset + offsets[slot], positions[slot])

    def append(self, offset: int, position: int) -> None:
        if not 0 <= position <= MAX_POSITION:
            raise IndexOffsetOverflowError(f"position {position} does not fit an index entry of {self._path}")
        if self._entries >= self.max_entries:
            raise IndexFullError(f"attempt to append to a full index {self._path} ({self._entries} entries)")
        if self._entries > 0 and offset <= self._last_offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to slot {self._entries} no larger than the last offset "
                f"appended ({self._last_offset}) to {self._path}"
            )
        self._write(self._relative(offset), position)
        self._last_offset, self._last_position = offset, position

    def append_many(self, offsets: Sequence[int] | np.ndarray, positions: Sequence[int] | np.ndarray) -> int:
        """Bulk append for index rebuilds; offsets must increase past the last entry (InvalidOffsetError)."""
        offsets = np.asarray(offsets, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        if len(offsets) != len(positions):
            raise ValueError(f"{len(offsets)} offsets but {len(positions)} positions")
        previous = np.concatenate(([self._last_offset if self._entries else -1], offsets[:-1]))
        falls = offsets <= previous
        if falls.any():
            i = int(falls.argmax())
            raise InvalidOffsetError(f"attempt to append offset {offsets[i]} after {previous[i]} to {self._path}")
        if len(positions) and (int(positions.min()) < 0 or int(positions.max()) > MAX_POSITION):
            raise IndexOffsetOverflowError(f"a position does not fit an index entry of {self._path}")
        return self._write_many(self._relative_many(offsets), positions)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset`; truncating past the end changes nothing.

        With strictly increasing offsets this is Kafka's three-case rule: no entry <= offset keeps
        none, an entry exactly at offset is removed with everything after it, otherwise everything
        after the floor entry goes.
        """
        offsets, _ = self._columns()
        self._truncate_to_entries(bisect_left(offsets, offset - self.base_offset))

    @classmethod
    def check_file(cls, path: Path, base_offset: int) -> OffsetPosition | None:
        """Kafka's sanity check of an index file on disk, without mapping it; returns its last entry."""
        length, _first, last = peek_file(path, cls.entry_size)
        check_length(path, length, cls.entry_size)
        if not last:
            return None
        relative, position = cls._entry.unpack(last)
        if relative < 0:
            raise CorruptIndexError(
                f"corrupt index found, index file {path} has non-zero size but the last offset is "
                f"{base_offset + relative} which is less than the base offset {base_offset}"
            )
        return OffsetPosition(base_offset + relative, position)

    def sanity_check(self) -> None:
        """Cheap structural checks; a failure means the segment's index must be rebuilt from the `.log`."""
        if self._entries and self._last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt index found, index file {self._path} has non-zero size but the last offset is "
                f"{self._last_offset} which is less than the base offset {self.base_offset}"
            )
        self._check_length()
