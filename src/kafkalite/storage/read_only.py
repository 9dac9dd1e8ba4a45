"""Reading a partition directory without changing it: what `Log.open_read_only` is built from.

A read-only reader may run beside a live writer (a broker, or a Log in another process), so it
takes no lock and never truncates, trims, renames, creates or deletes a file: no recovery, no
index rebuild, no checkpoint or snapshot writes. It sees the directory as of opening:

- segments are the plain `<base>.log` files (`.deleted`, `.cleaned`, `.swap` leftovers are not);
- `.log` files are opened O_RDONLY; each segment ends after its last whole batch with a valid CRC
  (a live or crashed writer may leave a half-written batch, or the zeros of a preallocated file);
- indexes are read once into memory, up to their last non-zero entry: a writer preallocates an
  active index to `segment.index.bytes` and fills it from the front, so the zero-filled tail is
  not entries. Nothing stays mapped, so a writer trimming the file cannot fault the reader.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NoReturn

import numpy as np
from crc32c import crc32c

from kafkalite.errors import KafkaliteError, LogError
from kafkalite.records.batch import ATTRIBUTES_OFFSET, HEADER, MAGIC_V2, RECORD_BATCH_OVERHEAD
from kafkalite.storage import names
from kafkalite.storage.file_records import FileRecords
from kafkalite.storage.metadata import LogOffsetMetadata
from kafkalite.storage.offset_index import OffsetPosition
from kafkalite.storage.segment import LogSegment
from kafkalite.storage.segment_map import SegmentMap
from kafkalite.storage.time_index import TimestampOffset

log = logging.getLogger("kafkalite.log")

OFFSET_ENTRY = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
TIME_ENTRY = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


def written_entry_count(raw: bytes | bytearray | memoryview, entry_size: int) -> int:
    """How many entries of an index file's bytes were written: all up to the last entry that is not
    all zeros. A preallocated index's unused slots are zeros; no real entry after the first can be
    (offsets and timestamps increase), and a lone first entry of zeros points at offset `base`,
    position 0, where a lookup starts anyway, so dropping it loses nothing."""
    data = bytes(raw[: len(raw) - len(raw) % entry_size])
    used = len(data.rstrip(b"\0"))
    return -(-used // entry_size)


def read_index_entries(path: Path, dtype: np.dtype) -> np.ndarray:
    """The written entries of an index file (empty when it does not exist), copied out of the file."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return np.empty(0, dtype=dtype)
    n = written_entry_count(raw, dtype.itemsize)
    return np.frombuffer(raw, dtype=dtype, count=n).copy()


class ReadOnlyOffsetIndex:
    """An offset index held in memory: the lookups a read needs, nothing that writes."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        entries = read_index_entries(path, OFFSET_ENTRY)
        self._offsets = entries["relative_offset"].astype(np.int64).tolist()
        self._positions = entries["position"].astype(np.int64).tolist()
        self.last_offset = base_offset + self._offsets[-1] if self._offsets else base_offset

    @property
    def entries(self) -> int:
        return len(self._offsets)

    def lookup(self, target_offset: int) -> OffsetPosition:
        slot = bisect_right(self._offsets, target_offset - self.base_offset) - 1
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + self._offsets[slot], self._positions[slot])

    def fetch_upper_bound_offset(self, fetch_offset: OffsetPosition, fetch_size: int) -> OffsetPosition | None:
        slot = bisect_left(self._positions, fetch_offset.position + fetch_size)
        if slot == len(self._positions):
            return None
        return OffsetPosition(self.base_offset + self._offsets[slot], self._positions[slot])

    def close(self) -> None:
        pass


class ReadOnlyTimeIndex:
    """A time index held in memory, for lookups by timestamp."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        entries = read_index_entries(path, TIME_ENTRY)
        self._timestamps = entries["timestamp"].astype(np.int64).tolist()
        self._offsets = entries["relative_offset"].astype(np.int64).tolist()

    @property
    def entries(self) -> int:
        return len(self._timestamps)

    @property
    def last_entry(self) -> TimestampOffset:
        if not self._timestamps:
            return TimestampOffset(-1, self.base_offset)
        return TimestampOffset(self._timestamps[-1], self.base_offset + self._offsets[-1])

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        slot = bisect_right(self._timestamps, target_timestamp) - 1
        if slot < 0:
            return TimestampOffset(-1, self.base_offset)
        return TimestampOffset(self._timestamps[slot], self.base_offset + self._offsets[slot])

    def close(self) -> None:
        pass


class ReadOnlyFileRecords(FileRecords):
    """A `.log` opened O_RDONLY whose logical size is where its valid batches end (set by the
    segment's tail scan), so no scan runs into a preallocated or half-written tail."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, mutable=False)

    def end_at(self, size: int) -> None:
        self._size = size

    def _refuse(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise LogError(f"{self.path} is open read-only")

    append = truncate_to = trim = rename_to = delete_if_exists = set_last_modified_ms = _refuse

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.close_handlers()


class ReadOnlySegment(LogSegment):
    """A segment whose files are only read: its size is where its valid batches end, its indexes are
    in memory, and every method that would write raises LogError."""

    def __init__(self, directory: Path, base_offset: int, max_index_size: int) -> None:
        records = ReadOnlyFileRecords(names.log_file(directory, base_offset))
        super().__init__(records, directory, base_offset, max_index_size=max_index_size)
        self._ro_offset_index = ReadOnlyOffsetIndex(names.offset_index_file(directory, base_offset), base_offset)
        self._ro_time_index = ReadOnlyTimeIndex(names.time_index_file(directory, base_offset), base_offset)
        self._valid_size, self.next_offset = self._scan_tail()
        records.end_at(self._valid_size)

    def _scan_tail(self) -> tuple[int, int]:
        """(end of the last valid batch, offset after it), scanning from the last index entry (the
        index only points at batches already written, and at most index.interval.bytes follow it);
        from the start of the file if nothing valid is found there."""
        start = self._ro_offset_index.lookup(self._ro_offset_index.last_offset).position
        end, next_offset = self._scan_from(start)
        if end == start and start > 0:
            end, next_offset = self._scan_from(0)
        if end < self.log.size:
            log.debug("%s: read-only view ends at byte %d of %d (unwritten or partial tail)", self.log.path,
                      end, self.log.size)
        return end, next_offset

    def _scan_from(self, position: int) -> tuple[int, int]:
        end, next_offset = position, self.base_offset
        records = self.log
        try:
            for pos, size, view in records.iter_views(position, records.size):
                if size < RECORD_BATCH_OVERHEAD or view[16] != MAGIC_V2:
                    break
                header = HEADER.unpack_from(view)
                if crc32c(view[ATTRIBUTES_OFFSET:size]) != header[4]:
                    break  # a batch still being written, or damage: the segment ends before it
                end, next_offset = pos + size, header[0] + header[6] + 1
        except KafkaliteError:
            pass  # a zero or broken frame: the valid data ends before it
        return end, next_offset

    # The in-memory indexes answer the lookups a read makes, not the writes, so they are not subclasses of
    # OffsetIndex/TimeIndex: these overrides narrow what LogSegment promises, on purpose.
    @property
    def offset_index(self) -> ReadOnlyOffsetIndex:  # type: ignore[override]
        return self._ro_offset_index

    @property
    def time_index(self) -> ReadOnlyTimeIndex:  # type: ignore[override]
        return self._ro_time_index

    @property
    def size(self) -> int:
        return self._valid_size

    @property
    def max_timestamp_and_offset_so_far(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            self._max_ts_and_offset = self._load_max_timestamp()
        return self._max_ts_and_offset

    def read_next_offset(self) -> int:
        return self.next_offset

    def _refuse(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise LogError(f"segment {self.log.path} is open read-only")

    append = append_from_file = truncate_to = recover = change_file_suffixes = _refuse
    on_become_inactive_segment = delete_if_exists = set_last_modified_ms = _refuse

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.close_handlers()

    def close_handlers(self) -> None:
        self.log.close_handlers()
        self.txn_index.close()


def load_read_only(directory: Path, max_index_size: int) -> tuple[SegmentMap, LogOffsetMetadata]:
    """The segments of a partition directory as they are now, and the offset after the last batch."""
    if not directory.is_dir():
        raise LogError(f"cannot open {directory} read-only: no such directory")
    bases = []
    for name in os.listdir(directory):
        if name.endswith(names.LOG_SUFFIX) and name.count(".") == 1:
            try:
                bases.append(names.offset_from_file_name(name))
            except ValueError:
                continue
    segments = SegmentMap()
    for base in sorted(bases):
        try:
            segments[base] = ReadOnlySegment(directory, base, max_index_size)
        except FileNotFoundError:  # deleted by the writer (retention) since the listing
            continue
    if not segments:
        raise LogError(f"cannot open {directory} read-only: it holds no segment (no <offset>.log file)")
    active = segments.last_segment
    assert isinstance(active, ReadOnlySegment)
    return segments, LogOffsetMetadata(active.next_offset, active.base_offset, active.size)
