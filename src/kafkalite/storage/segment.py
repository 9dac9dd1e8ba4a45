"""One log segment (Kafka's LogSegment): a `.log` file and the three indexes that serve it.

The segment decides where index entries go (the same rule on append and on recovery, so a
rebuilt index equals the one written live), when it must roll, and how a read turns an offset
into a batch-aligned byte range. Index files are opened on first use, like Kafka's LazyIndex,
so a segment that is only listed or renamed never creates them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NamedTuple

from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.errors import (
    CorruptRecordError,
    LogSegmentOffsetOverflowError,
)
from kafkalite.records.batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    PREFIX,
    RECORD_BATCH_OVERHEAD,
)
from kafkalite.storage import names, segment_recovery
from kafkalite.storage.file_records import FileRecords, LogOffsetPosition, TimestampAndOffset
from kafkalite.storage.index_base import round_down
from kafkalite.storage.metadata import FetchDataInfo, LogOffsetMetadata
from kafkalite.storage.names import as_path
from kafkalite.storage.offset_index import OffsetIndex, OffsetPosition
from kafkalite.storage.segment_recovery import (
    MAX_RELATIVE_OFFSET,
    RecoveryEpochCache,
    RecoveryProducerState,
    TxnT,
)
from kafkalite.storage.time_index import TimeIndex
from kafkalite.storage.txn_index import AbortedTxn, TransactionIndex

log = logging.getLogger("kafkalite.storage")

LONG_MAX = (1 << 63) - 1
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024


class _UseSize:
    """Default for `read(max_position=...)`: the segment's size at the time of the read."""


USE_SEGMENT_SIZE = _UseSize()


class RollParams(NamedTuple):
    """What `should_roll` needs to know about the append that is about to happen."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


class LogSegment:
    def __init__(
        self,
        log_file: FileRecords,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        roll_jitter_ms: int = 0,
        clock: Clock = SYSTEM_CLOCK,
        file_suffix: str = "",
    ) -> None:
        self.log = log_file
        self.dir = as_path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.clock = clock
        self._suffix = file_suffix
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        # Kafka's LazyIndex: the indexes open on first use; the active segment's then grow to max_index_size
        # (`preallocate_indexes`), and until then the load's check of the offset index keeps its last entry
        self._preallocate_on_open = False
        self._checked = False
        self._checked_last: OffsetPosition | None = None
        self.txn_index = TransactionIndex(base_offset, names.txn_index_file(self.dir, base_offset, file_suffix))
        self.created_ms = clock.milliseconds()
        self.rolling_based_timestamp: int | None = None
        self.bytes_since_last_index_entry = 0
        self._max_ts_and_offset: tuple[int, int] | None = None  # None = not loaded yet

    @classmethod
    def open(
        cls,
        directory: Path | str,
        base_offset: int,
        *,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        roll_jitter_ms: int = 0,
        clock: Clock = SYSTEM_CLOCK,
        preallocate: bool = False,
        init_file_size: int = 0,
        file_suffix: str = "",
    ) -> LogSegment:
        directory = names.as_path(directory)
        log_file = FileRecords(
            names.log_file(directory, base_offset, file_suffix), preallocate=preallocate, init_file_size=init_file_size
        )
        return cls(
            log_file,
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size,
            roll_jitter_ms=roll_jitter_ms,
            clock=clock,
            file_suffix=file_suffix,
        )

    # --- files ----------------------------------------------------------------------------------

    @property
    def offset_index_path(self) -> Path:
        return self._offset_index.path if self._offset_index else names.offset_index_file(
            self.dir, self.base_offset, self._suffix)

    @property
    def time_index_path(self) -> Path:
        return self._time_index.path if self._time_index else names.time_index_file(
            self.dir, self.base_offset, self._suffix)

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = OffsetIndex(self.offset_index_path, self.base_offset, self.max_index_size)
            if self._preallocate_on_open:
                self._offset_index.resize(self.max_index_size)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
            if self._preallocate_on_open:
                self._time_index.resize(self.max_index_size)
        return self._time_index

    def preallocate_indexes(self) -> None:
        """The active segment's indexes get their full size (appends store into the preallocated tail): now
        for an index already open, at its first use for one not opened yet. A broker with thousands of
        partitions then opens, grows and trims only the indexes of the partitions that are written or read;
        Kafka's load opens and grows every active index, two file-size changes per partition and restart."""
        self._preallocate_on_open = True
        if not self._checked:  # files the load did not check on disk (a new segment): made now, as Kafka's load
            _ = self.offset_index, self.time_index
        for idx in (self._offset_index, self._time_index):
            if idx is not None:
                idx.resize(self.max_index_size)

    @property
    def size(self) -> int:
        return self.log.size

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every file of the segment (e.g. "" -> ".deleted"); untouched indexes are not created."""

        def renamed(p: Path) -> Path:
            name = p.name
            if old_suffix and name.endswith(old_suffix):
                name = name[: -len(old_suffix)]
            return p.with_name(name + new_suffix)

        self.log.rename_to(renamed(self.log.path))
        if self._offset_index is not None:
            self._offset_index.rename_to(renamed(self._offset_index.path))
        if self._time_index is not None:
            self._time_index.rename_to(renamed(self._time_index.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))
        self._suffix = new_suffix
        for p, idx in ((names.offset_index_file, self._offset_index), (names.time_index_file, self._time_index)):
            if idx is None:
                stale = p(self.dir, self.base_offset, old_suffix)
                if stale.exists():
                    os.replace(stale, p(self.dir, self.base_offset, new_suffix))

    def has_suffix(self, suffix: str) -> bool:
        return self.log.path.name.endswith(suffix)

    # --- max timestamp bookkeeping --------------------------------------------------------------

    def _load_max_timestamp(self) -> tuple[int, int]:
        """Max timestamp after a truncation: the last time-index entry, then a scan of the batches after it."""
        last = self.time_index.last_entry
        best = (last.timestamp, last.offset)
        position = self.scan_position(last.offset)
        ts, offset = self.log.largest_timestamp_after(position)
        if ts > best[0]:
            best = (ts, offset)
        return best

    @property
    def max_timestamp_and_offset_so_far(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            # As Kafka: the time index's last entry is exact for any segment that was closed, rolled or
            # recovered, and segments above the recovery point are recovered after a crash.
            last = self.time_index.last_entry
            self._max_ts_and_offset = (last.timestamp, last.offset)
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset_so_far[0]

    @property
    def shallow_offset_of_max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset_so_far[1]

    @property
    def largest_timestamp(self) -> int:
        """The max record timestamp, or the file's mtime when no record carries one."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms()

    def last_modified_ms(self) -> int:
        return self.log.last_modified_ms()

    def set_last_modified_ms(self, ms: int) -> None:
        self.log.set_last_modified_ms(ms)
        for p in (self.offset_index_path, self.time_index_path):
            if p.exists():
                os.utime(p, ns=(ms * 1_000_000, ms * 1_000_000))

    def first_batch_timestamp(self) -> int:
        for h in self.log.batch_headers(0):
            return h.max_timestamp
        return LONG_MAX

    # --- append -----------------------------------------------------------------------------------

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise LogSegmentOffsetOverflowError(
                f"detected offset overflow at offset {offset} in segment with base offset {self.base_offset}"
            )

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
    ) -> None:
        """Append whole batches whose offsets are already assigned; index them by Kafka's interval rule."""
        n = len(records)
        if n == 0:
            return
        if not 0 <= largest_offset - self.base_offset <= MAX_RELATIVE_OFFSET:
            self._ensure_offset_in_range(largest_offset)
        log_file = self.log
        physical_position = log_file.size
        if physical_position == 0:
            self.rolling_based_timestamp = largest_timestamp
        log_file.append(records)
        current = self._max_ts_and_offset
        if current is None:
            current = self.max_timestamp_and_offset_so_far
        if largest_timestamp > current[0]:
            current = self._max_ts_and_offset = (largest_timestamp, shallow_offset_of_max_timestamp)
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(largest_offset, physical_position)
            self.time_index.maybe_append(current[0], current[1])
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += n

    def append_from_file(self, source: FileRecords, start: int) -> int:
        """Copy the batches of `source` from byte `start` that fit this segment's offset range.

        This is how a segment whose offsets overflow its base is split (Kafka's appendFromFile):
        batches are appended one at a time, so the copy is indexed exactly as live appends are.
        Returns the bytes copied; 0 when the first batch does not fit.
        """
        copied = 0
        for h in source.batch_headers(start):
            if not self.can_convert_to_relative_offset(h.last_offset):
                break
            self.append(h.last_offset, h.max_timestamp, h.last_offset, source.read(h.position, h.size))
            copied += h.size
        return copied

    # --- read --------------------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_file_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset is >= `offset`: (its last offset, position, size).

        The index entry the search starts from is checked (see `scan_position`) against the first header the
        search reads anyway, instead of by a read of its own: one read of the `.log` per fetched partition."""
        mapping = self.offset_index.lookup(offset)
        position = mapping.position
        if starting_file_position > position or (position == 0 and mapping.offset == self.base_offset):
            return self.log.search_for_offset_with_size(offset, max(self.scan_position(offset),
                                                                    starting_file_position))
        problem = self._bounds_problem(mapping.offset, position)
        if problem is None:
            headers = self.log.batch_headers(position)
            try:
                first = next(headers, None)
            except CorruptRecordError:
                first = None
            if first is None:
                problem = f"does not point at a whole record batch of {self.log.path.name}"
            elif not self.base_offset <= first.base_offset <= mapping.offset:
                problem = f"points at a batch starting at offset {first.base_offset}"
            elif first.last_offset >= offset:
                return LogOffsetPosition(first.last_offset, first.position, first.size)
            else:
                for h in headers:
                    if h.last_offset >= offset:
                        return LogOffsetPosition(h.last_offset, h.position, h.size)
                return None
        self.rebuild_indexes(f"entry ({mapping.offset} -> byte {position}) {problem}")
        return self.log.search_for_offset_with_size(offset, starting_file_position)

    def scan_position(self, offset: int) -> int:
        """Where a scan of the `.log` for `offset` may start: the index's answer, checked against the `.log`.

        An index entry is only a hint, and a damaged one (a position past the `.log` or negative, or
        not at a batch that starts inside the segment at or before the entry's offset) would make a
        read skip data or fail with a bare EINVAL. Such an entry is corruption of the index alone:
        it is rebuilt from the `.log` and this scan starts at the segment start. The check costs one
        61-byte read, and only when the index points past the first batch.
        """
        return self._checked_position(self.offset_index.lookup(offset))

    def _checked_position(self, mapping: OffsetPosition | None) -> int:
        """`scan_position` for an index entry already found (None: the segment start)."""
        if mapping is None:
            return 0
        position = mapping.position
        if position == 0 and mapping.offset == self.base_offset:
            return 0
        problem = self._entry_problem(mapping.offset, position)
        if problem is None:
            return position
        self.rebuild_indexes(f"entry ({mapping.offset} -> byte {position}) {problem}")
        return 0

    def _bounds_problem(self, offset: int, position: int) -> str | None:
        """What is wrong with an offset-index entry without reading the `.log`: its position outside the file, or
        its offset below the segment base; None when neither."""
        if not 0 <= position < self.log.size:
            return f"points outside the {self.log.size}-byte log file {self.log.path.name}"
        if offset < self.base_offset:
            return f"has an offset below the segment base {self.base_offset}"
        return None

    def _entry_problem(self, offset: int, position: int) -> str | None:
        """What is wrong with an offset-index entry, judged against the `.log`; None when it is usable."""
        problem = self._bounds_problem(offset, position)
        if problem is not None:
            return problem
        size = self.log.size
        header = self.log.read(position, RECORD_BATCH_OVERHEAD)
        if len(header) < RECORD_BATCH_OVERHEAD:
            return f"points at byte {position} of {self.log.path.name}, too close to its end for a batch"
        first, length = PREFIX.unpack_from(header)
        magic = header[16]
        end = position + length + LOG_OVERHEAD
        if length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or magic != MAGIC_V2 or end > size:
            return f"does not point at a record batch of {self.log.path.name}"
        if not self.base_offset <= first <= offset:
            return f"points at a batch starting at offset {first}"
        return None

    def rebuild_indexes(self, why: str) -> None:
        """Rebuild the offset and time indexes from the `.log` after finding the offset index corrupt.

        Unlike `recover` this never truncates the `.log` and leaves producer state and the
        transaction index alone: the data is not in question, only the hints over it. The indexes
        cover the valid batches from the start; a read past an invalid batch scans the `.log`.
        """
        offset_index = self.offset_index
        log.warning("Corrupt offset index %s: %s; rebuilding it (and %s) from %s", offset_index.path, why,
                    self.time_index_path.name, self.log.path.name)
        time_index = self.time_index
        # the active segment keeps its preallocated indexes; a rolled one has them trimmed
        preallocated = offset_index.length >= round_down(self.max_index_size, offset_index.entry_size)
        state = segment_recovery.scan_into_indexes(self, None, None, may_drop=False)
        if state.failure is not None:
            log.warning("Rebuilt index %s covers %s only up to byte %d: %s", offset_index.path, self.log.path.name,
                        state.valid_bytes, state.failure)
        else:
            self._max_ts_and_offset = (state.max_ts, state.offset_of_max)
        self.bytes_since_last_index_entry = self.log.size - state.last_index_entry
        if not preallocated:
            time_index.maybe_append(state.max_ts, state.offset_of_max, skip_full_check=True)
            offset_index.trim_to_valid_size()
            time_index.trim_to_valid_size()

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | _UseSize | None = USE_SEGMENT_SIZE,
        min_one_message: bool = False,
    ) -> FetchDataInfo | None:
        """Batch-aligned bytes from the batch holding `start_offset`; None when the offset is past this segment."""
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment {self.log.path}")
        if isinstance(max_position, _UseSize):
            max_position = self.size
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        meta = LogOffsetMetadata(start_offset, self.base_offset, start.position)
        adjusted = max(max_size, start.size) if min_one_message else max_size
        if adjusted == 0 or max_position is None:
            return FetchDataInfo(meta, b"")
        fetch_size = min(max_position - start.position, adjusted)
        return FetchDataInfo(meta, self.log.slice(start.position, fetch_size), adjusted < start.size)

    def read_next_offset(self) -> int:
        """The offset after the last batch in the segment (the base offset when empty)."""
        # the index's last entry is kept in memory: finding it maps nothing (a load reads this for every log); before
        # the index is opened, the load's check has read that entry and judged it against the `.log` already
        if self._offset_index is None and self._checked:
            position = 0 if self._checked_last is None else self._checked_last.position
        else:
            position = self._checked_position(self.offset_index.last_entry)
        next_offset = self.base_offset
        for h in self.log.batch_headers(position):
            next_offset = h.last_offset + 1
        return next_offset

    def fetch_upper_bound_offset(self, start: LogOffsetMetadata, fetch_size: int) -> int | None:
        pos = self.offset_index.fetch_upper_bound_offset(
            OffsetPosition(start.message_offset, start.relative_position_in_segment), fetch_size
        )
        return None if pos is None else pos.offset

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> TimestampAndOffset | None:
        """First record with timestamp >= target at or after `starting_offset`, using both indexes."""
        ts_offset = self.time_index.lookup(timestamp)
        position = self.scan_position(max(ts_offset.offset, starting_offset))
        return self.log.search_for_timestamp(timestamp, position, starting_offset)

    # --- roll ----------------------------------------------------------------------------------------

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        """Event time since the first batch when it had a timestamp, else wall time since creation."""
        if self.rolling_based_timestamp is None and self.size > 0:
            self.rolling_based_timestamp = self.first_batch_timestamp()
        ts = self.rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now - self.created_ms

    def should_roll(self, p: RollParams) -> bool:
        return self.roll_needed(*p)

    def roll_needed(self, max_segment_ms: int, max_segment_bytes: int, max_timestamp_in_messages: int,
                    max_offset_in_messages: int, messages_size: int, now: int) -> bool:
        """Kafka's shouldRoll: size, time since the first batch (minus jitter), a full index, or an
        offset that no longer fits relative to the base. Called on every append, so plain arguments."""
        size = self.log.size
        if size > max_segment_bytes - messages_size:
            return True
        if size > 0 and self.time_waited_for_roll(now, max_timestamp_in_messages) > (
                max_segment_ms - self.roll_jitter_ms):
            return True
        return (
            self.offset_index.is_full()
            or self.time_index.is_full()
            or not 0 <= max_offset_in_messages - self.base_offset <= MAX_RELATIVE_OFFSET
        )

    def on_become_inactive_segment(self) -> None:
        """A rolled segment gets its final time-index entry and loses its preallocated tails."""
        self._preallocate_on_open = False
        ts, offset = self.max_timestamp_and_offset_so_far
        self.time_index.maybe_append(ts, offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.offset_index.release_cache()
        self.time_index.release_cache()
        self.log.trim()

    # --- recovery and truncation ------------------------------------------------------------------

    # --- recovery and truncation ------------------------------------------------------------------

    def recover(
        self,
        producer_state: RecoveryProducerState[TxnT] | None = None,
        epoch_cache: RecoveryEpochCache | None = None,
    ) -> int:
        """Rebuild the indexes from the `.log`, stopping at the first invalid batch; returns bytes truncated
        (segment_recovery.recover says how)."""
        return segment_recovery.recover(self, producer_state, epoch_cache)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= `offset`; returns the bytes removed."""
        mapping = self.translate_offset(offset)
        offset_index = self.offset_index
        time_index = self.time_index
        offset_index.truncate_to(offset)
        time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        offset_index.resize(self.max_index_size)
        time_index.resize(self.max_index_size)
        removed = 0 if mapping is None else self.log.truncate_to(mapping.position)
        if self.log.size == 0:
            self.created_ms = self.clock.milliseconds()
            self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        if self._max_ts_and_offset is None or self._max_ts_and_offset[0] >= 0:
            self._max_ts_and_offset = self._load_max_timestamp()
        return removed

    def sanity_check(self, time_index_file_exists: bool, txn_index_file_exists: bool = True,
                     check_time_index: bool = True) -> int | None:
        """Load-time check: the offset index must exist and be sane; the txn index must be sane.

        Kafka 2.3+ checks only that the offset index exists and trusts its content. Here Kafka's
        older `sanityCheck` of both indexes runs too (whole entries, last offset not below the base,
        time stamps not falling), plus a check that the offset index's last entry points at a batch
        of the `.log` that starts at or before its offset: that costs one 61-byte read, and catches
        garbage appended to an index or a stray swap file renamed over it, which Kafka would trust
        and then skip data with; such an index is rebuilt on the spot. A CorruptIndexError (Kafka's
        checks) makes the loader recover the segment, as in Kafka. The files are read, not opened as
        indexes (that waits for their first use, `offset_index`).

        Returns the offset of the last entry of an offset index rebuilt here (None otherwise): the index
        saw that offset in the `.log`, so if the `.log` now ends before it and before the next segment, it
        lost its tail (LogLoader cuts the log there).

        `check_time_index=False`: the segment is about to be recovered, which rebuilds the time index whatever it
        holds (Kafka's reason for checking neither index at load): after a crash the active segment's time index
        still has its preallocated zeros, which the check takes for corruption in every partition.
        """
        last: OffsetPosition | None = None
        if self._offset_index is None:
            try:  # its open tells whether it exists: no stat before it (one per segment of every log loaded)
                last = OffsetIndex.check_file(self.offset_index_path, self.base_offset)
                missing = False
            except FileNotFoundError:
                missing = True
        else:
            missing = not self.offset_index_path.exists()
        if missing:
            raise FileNotFoundError(f"offset index file {self.offset_index_path} does not exist")
        if not time_index_file_exists:
            self.time_index.resize(0)
        if self._offset_index is not None:
            self._offset_index.sanity_check()
            last = self._offset_index.last_entry
        else:
            self._checked, self._checked_last = True, last
        claimed: int | None = None
        if last is not None:
            problem = self._entry_problem(last.offset, last.position)
            if problem is not None:
                # rebuilt here, without truncating: the damage may be in the `.log` at that byte, which is
                # recovery's business (it cuts there and drops later segments), not the index check's
                self.rebuild_indexes(f"its last entry ({last.offset} -> byte {last.position}) {problem}")
                claimed = last.offset
        if check_time_index:
            if self._time_index is not None:
                self._time_index.sanity_check()
            else:
                TimeIndex.check_file(self.time_index_path, self.base_offset)
        if txn_index_file_exists:
            self.txn_index.sanity_check()
        return claimed

    def reset_roll_state(self) -> None:
        self.created_ms = self.clock.milliseconds()
        self.rolling_based_timestamp = None

    # --- lifecycle ---------------------------------------------------------------------------------

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        if self._max_ts_and_offset is not None:
            ts, offset = self._max_ts_and_offset
            self.time_index.maybe_append(ts, offset, skip_full_check=True)
        for idx in (self._offset_index, self._time_index):
            if idx is not None:
                idx.trim_to_valid_size()
                idx.close()
        self.log.close()
        self.txn_index.close()

    def close_handlers(self) -> None:
        for idx in (self._offset_index, self._time_index):
            if idx is not None:
                idx.close()
        self.log.close_handlers()
        self.txn_index.close()

    def delete_if_exists(self) -> None:
        """Remove every file of the segment (after the `.deleted` rename and the delay)."""
        self.log.delete_if_exists()
        for idx in (self._offset_index, self._time_index):
            if idx is not None:
                idx.delete_if_exists()
        for p in (self.offset_index_path, self.time_index_path):
            p.unlink(missing_ok=True)
        self.txn_index.delete_if_exists()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log.path})"
