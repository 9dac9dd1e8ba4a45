"""A segment's `.timeindex` file (Kafka's TimeIndex): a sparse map from timestamp to offset.

Each 12-byte entry is `int64 timestamp, int32 offset - base_offset`, big-endian. An entry (T, O)
promises that every record with a timestamp above T sits at an offset above O, so a search by time
can start at O. Timestamps strictly increase (an entry is written only when the segment's max
timestamp grew), and offsets never decrease.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from kafkalite.errors import CorruptIndexError, IndexFullError, InvalidOffsetError
from kafkalite.storage.index_base import IndexBase, check_length, peek_file

NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    """A NamedTuple, not a dataclass: it is built on every lookup, and tuples are three times cheaper."""

    timestamp: int
    offset: int


class TimeIndex(IndexBase):
    entry_size = 12
    _entry = struct.Struct(">qi")
    _fields = ((0, 8), (8, 4))

    def _refresh_last(self) -> None:
        n = self._entries
        self._last_entry = self.entry(n - 1) if n else TimestampOffset(NO_TIMESTAMP, self.base_offset)

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or `(-1, base_offset)` when empty, which is what appends are compared with."""
        return self._last_entry

    def is_full(self) -> bool:
        """Full one slot early: the last slot is kept for the entry written on roll or close."""
        return self._entries >= self.max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        timestamp, relative = self._read(n)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Record that the segment's max timestamp reached `timestamp` at `offset`, if it grew.

        A timestamp equal to the last one is a silent no-op, because roll and close re-offer the
        current max. As the empty index compares against timestamp -1, a segment whose records carry
        no timestamps keeps an empty time index. `skip_full_check` lets roll and close use the
        reserved last slot.
        """
        if not skip_full_check and self.is_full():
            raise IndexFullError(f"attempt to append to a full time index {self._path} ({self._entries} entries)")
        last = self._last_entry
        if self._entries:
            if offset < last.offset:
                raise InvalidOffsetError(
                    f"attempt to append offset {offset} to slot {self._entries} below the last offset "
                    f"appended ({last.offset}) to {self._path}"
                )
            if timestamp < last.timestamp:
                raise InvalidOffsetError(
                    f"attempt to append timestamp {timestamp} to slot {self._entries} below the last timestamp "
                    f"appended ({last.timestamp}) to {self._path}"
                )
        if timestamp > last.timestamp:
            if self._entries >= self.max_entries:
                raise IndexFullError(f"time index {self._path} has no slot left ({self._entries} entries)")
            self._write(timestamp, self._relative(offset))
            self._last_entry = TimestampOffset(timestamp, offset)

    def append_many(self, timestamps: Sequence[int] | np.ndarray, offsets: Sequence[int] | np.ndarray) -> int:
        """Bulk append for index rebuilds; timestamps must strictly increase past the last entry, offsets not fall."""
        timestamps = np.asarray(timestamps, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        if len(timestamps) != len(offsets):
            raise ValueError(f"{len(timestamps)} timestamps but {len(offsets)} offsets")
        last = self._last_entry
        prev_ts, prev_off = (last.timestamp, last.offset) if self._entries else (-1, -1)
        before_ts = np.concatenate(([prev_ts], timestamps[:-1]))
        before_off = np.concatenate(([prev_off], offsets[:-1]))
        wrong = (timestamps <= before_ts) | (offsets < before_off)
        if wrong.any():
            i = int(wrong.argmax())
            raise InvalidOffsetError(f"time index entries must increase: ({timestamps[i]}, {offsets[i]}) after "
                                     f"({before_ts[i]}, {before_off[i]})")
        return self._write_many(timestamps, self._relative_many(offsets))

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The last entry with timestamp <= target, or `(-1, base_offset)`: where a search by time may start."""
        timestamps, offsets = self._cols or self._columns()
        slot = bisect_right(timestamps, target_timestamp) - 1
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(timestamps[slot], self.base_offset + offsets[slot])

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset` (Kafka's three-case rule on the offset field).

        Offsets may repeat here; all entries at `offset` go, since the records they point at do.
        """
        _, offsets = self._columns()
        self._truncate_to_entries(bisect_left(offsets, offset - self.base_offset))

    @classmethod
    def check_file(cls, path: Path, base_offset: int) -> None:
        """Kafka's sanity check of a time index file on disk, without mapping it."""
        length, first, last = peek_file(path, cls.entry_size)
        check_length(path, length, cls.entry_size)
        if last:
            first_timestamp = cls._entry.unpack(first)[0]
            timestamp, relative = cls._entry.unpack(last)
            if timestamp < first_timestamp:
                raise CorruptIndexError(
                    f"corrupt time index found, time index file {path} has non-zero size but the last "
                    f"timestamp is {timestamp} which is less than the first timestamp {first_timestamp}"
                )
            if relative < 0:
                raise CorruptIndexError(
                    f"corrupt time index found, time index file {path} has non-zero size but the last "
                    f"offset is {base_offset + relative} which is less than the base offset {base_offset}"
                )

    def sanity_check(self) -> None:
        """Cheap structural checks; a failure means the segment's index must be rebuilt from the `.log`."""
        if self._entries:
            last = self._last_entry
            first_timestamp = last.timestamp if self._entries == 1 else self._read(0)[0]
            if last.timestamp < first_timestamp:
                raise CorruptIndexError(
                    f"corrupt time index found, time index file {self._path} has non-zero size but the last "
                    f"timestamp is {last.timestamp} which is less than the first timestamp {first_timestamp}"
                )
            if last.offset < self.base_offset:
                raise CorruptIndexError(
                    f"corrupt time index found, time index file {self._path} has non-zero size but the last "
                    f"offset is {last.offset} which is less than the base offset {self.base_offset}"
                )
        self._check_length()
