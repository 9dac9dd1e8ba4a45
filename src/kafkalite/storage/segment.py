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
from typing import NamedTuple, Protocol, TypeVar

import numpy as np

from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogSegmentOffsetOverflowError,
)
from kafkalite.records.batch import (
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    PREFIX,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
)
from kafkalite.storage import names
from kafkalite.storage.file_records import FileRecords, LogOffsetPosition, TimestampAndOffset, ValidBatches
from kafkalite.storage.index_base import round_down
from kafkalite.storage.metadata import FetchDataInfo, LogOffsetMetadata
from kafkalite.storage.names import as_path
from kafkalite.storage.offset_index import OffsetIndex, OffsetPosition
from kafkalite.storage.time_index import TimeIndex
from kafkalite.storage.txn_index import AbortedTxn, TransactionIndex

log = logging.getLogger("kafkalite.storage")

MAX_RELATIVE_OFFSET = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024


class _RecoveryState:
    """What a segment recovery carries from one scanned window to the next."""

    def __init__(self, base: int, interval: int) -> None:
        self.base = base
        self.interval = interval
        self.valid_bytes = 0
        self.last_index_entry = 0
        self.max_ts = -1
        self.offset_of_max = -1
        self.previous_last = -1
        self.last_time_stamp = -1
        self.index_offsets: list[np.ndarray] = []
        self.index_positions: list[np.ndarray] = []
        self.time_stamps: list[np.ndarray] = []
        self.time_offsets: list[np.ndarray] = []
        self.failure: Exception | None = None
        # batches whose offsets jump (a damaged base-offset field, which the CRC does not cover) are dropped:
        # their (position, size) in the file as scanned; positions of later batches move down by their sizes
        self.may_drop = True
        self.drops: list[tuple[int, int]] = []
        self.dropped_bytes = 0
        self.scan_end = 0  # end, in the file as scanned, of the last batch looked at (kept or dropped)

    @staticmethod
    def columns(*parts: list[np.ndarray]) -> list[np.ndarray]:
        return [np.concatenate(p) if p else np.empty(0, dtype=np.int64) for p in parts]

    def index_entries(self, positions: np.ndarray) -> np.ndarray:
        """Which batches get an offset index entry: Kafka's rule, a batch starting more than
        `index.interval.bytes` past the previous entry. When every batch is larger than the interval,
        all batches after the first entry qualify, so only that first one needs a search."""
        interval = self.interval
        if len(positions) > 1 and int(np.diff(positions).min()) > interval:
            first = int(np.searchsorted(positions, self.last_index_entry + interval, side="right"))
            chosen = np.arange(first, len(positions))
        else:
            picks = []
            last = self.last_index_entry
            for i, position in enumerate(positions.tolist()):
                if position - last > interval:
                    picks.append(i)
                    last = position
            chosen = np.array(picks, dtype=np.int64)
        if len(chosen):
            self.last_index_entry = int(positions[chosen[-1]])
        return chosen


_LOOKAHEAD = 2  # batches after a batch that say whether its offsets fit


def _concat(first: ValidBatches, second: ValidBatches) -> ValidBatches:
    return ValidBatches(np.concatenate((first.positions, second.positions)),
                        np.concatenate((first.sizes, second.sizes)), np.concatenate((first.headers, second.headers)))


def _split(window: ValidBatches, at: int) -> tuple[ValidBatches, ValidBatches]:
    return (ValidBatches(window.positions[:at], window.sizes[:at], window.headers[:at]),
            ValidBatches(window.positions[at:], window.sizes[at:], window.headers[at:]))


def _choose_batches(bases: np.ndarray, lasts: np.ndarray, n: int, previous_last: int, segment_base: int,
                    upper_bound: int | None) -> np.ndarray | None:
    """Which of the first `n` batches to keep, judged by their offsets; None when all fit (the usual case).

    `bases` and `lasts` hold the batches' first and last offsets, then up to two batches after them.
    A batch fits when its offsets lie in the segment's range (from its base, below `upper_bound`, the
    next segment's base) and above the last batch kept. When a batch also overlaps the next one, one
    of the two has a damaged base offset: the batch is dropped when the next one fits where it is
    and it does not (a jump up), or when both would fit and the next one continues the offsets
    before it or reaches the batch after it exactly while this one does not; otherwise the next
    batch will be dropped for not following this one (a jump down).
    """
    segment_floor = segment_base - 1
    prev = max(previous_last, segment_floor)
    count = len(bases)
    following = np.concatenate((bases[1:], [upper_bound if upper_bound is not None else np.iinfo(np.int64).max]))
    before = np.concatenate(([prev], lasts[:-1]))
    in_range = (bases >= segment_base) & (lasts >= bases) & (lasts - segment_base <= MAX_RELATIVE_OFFSET)
    if upper_bound is not None:
        in_range &= lasts < upper_bound
    fits = in_range & (bases > before) & (lasts < following)
    if fits[:n].all():
        return None

    keep = np.zeros(n, dtype=bool)
    for i in range(n):
        base, last = int(bases[i]), int(lasts[i])
        if not in_range[i] or base <= prev:
            continue
        if i + 1 < count and last >= int(bases[i + 1]):
            next_base, next_last = int(bases[i + 1]), int(lasts[i + 1])
            after = int(bases[i + 2]) if i + 2 < count else upper_bound
            next_fits = bool(in_range[i + 1]) and next_base > prev and (after is None or next_last < after)
            self_fits = after is None or last < after
            if next_fits and not self_fits:
                continue
            if next_fits and self_fits:
                score_self = (base == prev + 1) + (after is not None and last + 1 == after)
                score_next = (next_base == prev + 1) + (after is not None and next_last + 1 == after)
                if score_next > score_self:
                    continue
        keep[i] = True
        prev = last
    return keep


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


class CompletedTxn(Protocol):
    """A transaction closed by an end marker, as recovery reads it. Read-only, so that the producer
    state's frozen dataclass of the same name matches."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def is_aborted(self) -> bool: ...


TxnT = TypeVar("TxnT", bound=CompletedTxn)


class RecoveryProducerState(Protocol[TxnT]):
    """What segment recovery asks of producer state (implemented by the partition log's manager).

    Generic in the manager's own transaction type: recovery hands each completed transaction back to
    the manager that made it, so the manager may ask for its own class rather than any `CompletedTxn`.
    """

    def update_from_recovered_batch(self, batch: RecordBatch) -> TxnT | None: ...

    def last_stable_offset(self, completed: TxnT) -> int: ...

    def complete_txn(self, completed: TxnT) -> None: ...

    def update_map_end_offset(self, offset: int) -> None: ...


class RecoveryEpochCache(Protocol):
    @property
    def latest_epoch(self) -> int | None: ...

    def assign(self, epoch: int, start_offset: int) -> object: ...  # recovery ignores whether it changed anything


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
        state = self._scan_into_indexes(None, None, may_drop=False)
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

    def recover(
        self,
        producer_state: RecoveryProducerState[TxnT] | None = None,
        epoch_cache: RecoveryEpochCache | None = None,
    ) -> int:
        """Rebuild the indexes from the `.log`, stopping at the first invalid batch; returns bytes truncated.

        A batch is valid when it frames, is v2, is at least 61 bytes and its CRC32C matches.
        Everything from the first invalid batch on is cut, and the bytes cut are returned (the loader
        then drops the later segments, as Kafka does).

        A valid batch whose offsets do not fit (outside the segment's range, or overlapping the batches
        around it: a damaged base-offset field, which the CRC does not cover) is dropped alone, and the
        batches after it are kept; see `_choose_batches`. The file is rewritten without it (through a
        temporary file renamed over the `.log`, so a crash leaves either file whole). Dropped batches
        are not counted as truncated, so later segments survive.
        """
        offset_index = self.offset_index
        time_index = self.time_index
        self.txn_index.reset()
        state = self._scan_into_indexes(producer_state, epoch_cache)
        if state.failure is not None:
            log.warning("Found invalid messages in log segment %s at byte offset %d: %s",
                        self.log.path, state.valid_bytes, state.failure)
        if producer_state is not None and state.previous_last >= 0:
            # Kafka moves the map end offset past every recovered batch, not only those with a producer
            # id; without it the loader would replay the whole segment's headers a second time.
            producer_state.update_map_end_offset(state.previous_last + 1)
        valid_bytes = state.valid_bytes
        truncated = self.log.size - state.scan_end
        if state.drops:
            self._rewrite_without(state.drops, state.scan_end)
        elif truncated > 0:
            self.log.truncate_to(valid_bytes)
        if truncated > 0:
            log.warning("Truncated %d invalid bytes at the end of segment %s", truncated, self.log.path)
        max_ts, offset_of_max = state.max_ts, state.offset_of_max
        self._max_ts_and_offset = (max_ts, offset_of_max)
        offset_index.trim_to_valid_size()
        time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
        time_index.trim_to_valid_size()
        self.bytes_since_last_index_entry = valid_bytes - state.last_index_entry
        return truncated

    def _scan_into_indexes(self, producer_state: RecoveryProducerState[TxnT] | None,
                           epoch_cache: RecoveryEpochCache | None, may_drop: bool = True) -> _RecoveryState:
        """Empty both indexes and refill them from the valid batches of the `.log` (the scan of `recover`)."""
        offset_index = self.offset_index
        time_index = self.time_index
        offset_index.reset()
        time_index.reset()
        state = _RecoveryState(self.base_offset, self.index_interval_bytes)
        state.may_drop = may_drop
        # The last two batches of each window wait for the next window: whether a batch's offsets fit
        # is judged against the two batches after it (see _choose_batches).
        pending: ValidBatches | None = None
        stopped = False
        scan_failure: CorruptRecordError | None = None
        try:
            for window in self.log.scan_valid(0):
                if pending is not None:
                    window = _concat(pending, window)
                if len(window.positions) <= _LOOKAHEAD:
                    pending = window
                    continue
                head, pending = _split(window, len(window.positions) - _LOOKAHEAD)
                if not self._recover_window(head, state, producer_state, epoch_cache, pending, None):
                    stopped = True
                    break
        except CorruptRecordError as exc:
            scan_failure = exc
        if not stopped and pending is not None:
            self._recover_window(pending, state, producer_state, epoch_cache, None, self._next_segment_base())
        if state.failure is None:
            state.failure = scan_failure
        offset_index.append_many(*state.columns(state.index_offsets, state.index_positions))
        time_index.append_many(*state.columns(state.time_stamps, state.time_offsets))
        return state

    def _recover_window(self, window: ValidBatches, state: _RecoveryState,
                        producer_state: RecoveryProducerState[TxnT] | None, epoch_cache: RecoveryEpochCache | None,
                        lookahead: ValidBatches | None, upper_bound: int | None) -> bool:
        """Apply Kafka's per-batch recovery rules to a window of CRC-valid batches, column by column.

        The rules are those of LogSegment.recover (index entries every `index.interval.bytes`, the
        running max timestamp, epochs, producer state), evaluated with numpy over the window instead
        of one Python step per batch, plus the choice of the batches whose offsets fit
        (`_choose_batches`, which looks at the first batches of `lookahead`, or at `upper_bound` at
        the segment's end). Returns False once a batch breaks a rule: the batches before it are kept
        and `state.failure` says why.
        """
        h = window.headers
        base_offsets = h["base_offset"].astype(np.int64)
        last_offsets = base_offsets + h["last_offset_delta"].astype(np.int64)
        ahead = lookahead.headers[:_LOOKAHEAD] if lookahead is not None else h[:0]
        ahead_bases = ahead["base_offset"].astype(np.int64)
        ahead_lasts = ahead_bases + ahead["last_offset_delta"].astype(np.int64)
        total = len(base_offsets)
        keep = _choose_batches(np.concatenate((base_offsets, ahead_bases)), np.concatenate((last_offsets, ahead_lasts)),
                               total, state.previous_last, state.base, upper_bound)
        end_file = int(window.positions[-1] + window.sizes[-1])  # in the file as scanned
        if keep is not None and not state.may_drop:
            i = int(np.argmin(keep))
            state.failure = CorruptRecordError(
                f"batch offsets {int(base_offsets[i])}..{int(last_offsets[i])} at byte {int(window.positions[i])} "
                f"of {self.log.path} do not fit between the batches around it")
            end_file = int(window.positions[i])
            keep = np.arange(total) < i
        file_positions = window.positions if keep is None else window.positions[keep]
        sizes = window.sizes if keep is None else window.sizes[keep]
        if keep is not None:
            h, base_offsets, last_offsets = h[keep], base_offsets[keep], last_offsets[keep]
        n = len(last_offsets)
        if producer_state is not None:
            wanted = np.flatnonzero((h["producer_id"] >= 0) | (h["attributes"] & CONTROL_FLAG_MASK != 0))
            for i in wanted.tolist():
                try:
                    self._recover_producer_state(producer_state, int(file_positions[i]), int(sizes[i]),
                                                 h[i : i + 1].tobytes())
                except (CorruptRecordError, InvalidRecordError) as exc:
                    state.failure = exc  # Kafka keeps the batch that broke the producer state, drops the rest
                    n = i + 1
                    end_file = int(file_positions[i] + sizes[i])
                    break
        if keep is not None and state.may_drop:
            for i in np.flatnonzero(~keep).tolist():
                position, size = int(window.positions[i]), int(window.sizes[i])
                if position >= end_file:
                    break
                earlier = last_offsets[file_positions < position]
                before = int(earlier[-1]) if len(earlier) else state.previous_last
                log.warning("Dropping the record batch at byte %d of %s: its offsets %d..%d do not fit between the "
                            "batches around it (the batch before it ends at offset %d)", position, self.log.path,
                            int(window.headers["base_offset"][i]),
                            int(window.headers["base_offset"][i]) + int(window.headers["last_offset_delta"][i]),
                            before)
                state.drops.append((position, size))
        dropped_before = np.zeros(n, dtype=np.int64)
        if state.drops:
            starts = np.array([d[0] for d in state.drops], dtype=np.int64)
            ends = np.cumsum([d[1] for d in state.drops], dtype=np.int64)
            k = np.searchsorted(starts, file_positions[:n])
            dropped_before = np.where(k > 0, ends[np.maximum(k - 1, 0)], 0)
            state.dropped_bytes = int(ends[-1])
        state.scan_end = end_file
        state.valid_bytes = end_file - state.dropped_bytes
        if n == 0:
            return state.failure is None
        if epoch_cache is not None:
            self._recover_epochs(epoch_cache, h["partition_leader_epoch"][:n].astype(np.int64), base_offsets[:n])
        positions = file_positions[:n] - dropped_before  # where the batches are once the dropped ones are gone
        last_offsets = last_offsets[:n]
        # running max timestamp (strictly greater replaces) and the last offset of the batch that set it
        stamps = h["max_timestamp"][:n].astype(np.int64)
        running = np.maximum.accumulate(np.maximum(stamps, state.max_ts))
        max_before = np.concatenate(([state.max_ts], running[:-1]))
        setter = np.maximum.accumulate(np.where(stamps > max_before, np.arange(n), -1))
        offset_of_max = np.where(setter >= 0, last_offsets[np.maximum(setter, 0)], state.offset_of_max)
        # offset index entries: a batch whose position is more than the interval past the last entry
        entries = state.index_entries(positions)
        if len(entries):
            state.index_offsets.append(last_offsets[entries])
            state.index_positions.append(positions[entries])
            stamps_at, offsets_at = running[entries], offset_of_max[entries]
            grows = stamps_at > np.concatenate(([state.last_time_stamp], stamps_at[:-1]))
            if grows.any():
                state.time_stamps.append(stamps_at[grows])
                state.time_offsets.append(offsets_at[grows])
                state.last_time_stamp = int(state.time_stamps[-1][-1])
        state.max_ts, state.offset_of_max = int(running[-1]), int(offset_of_max[-1])
        state.previous_last = int(last_offsets[-1])
        return state.failure is None

    def _next_segment_base(self) -> int | None:
        """The base offset of the next segment in the directory, which no batch of this one may reach."""
        suffix = names.LOG_SUFFIX + self._suffix
        best = None
        with os.scandir(self.dir) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(suffix) and name.count(".") == suffix.count("."):
                    try:
                        base = names.offset_from_file_name(name)
                    except ValueError:
                        continue
                    if base > self.base_offset and (best is None or base < best):
                        best = base
        return best

    def _rewrite_without(self, drops: list[tuple[int, int]], end: int) -> None:
        """Rewrite the `.log` up to byte `end` without the dropped batches: into a temporary file that is
        then renamed over the `.log` (the loader deletes a `.tmp` left by a crash; the `.log` is whole)."""
        path = self.log.path
        tmp = path.with_name(path.name + ".recovered.tmp")
        source = self.log.fd
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            position = 0
            for start, size in [*drops, (end, 0)]:
                while position < start:
                    chunk = os.pread(source, min(start - position, 1 << 22), position)
                    if not chunk:
                        raise CorruptRecordError(f"{path} ended at byte {position} while it was being rewritten")
                    os.write(out, chunk)
                    position += len(chunk)
                position = start + size
            os.fsync(out)
        finally:
            os.close(out)
        self.log.close_handlers()
        os.replace(tmp, path)
        self.log = FileRecords(path)
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename durable (if lost, the next recovery just drops the batch again)
        finally:
            os.close(dir_fd)

    @staticmethod
    def _recover_epochs(epoch_cache: RecoveryEpochCache, epochs: np.ndarray, base_offsets: np.ndarray) -> None:
        """Assign each new epoch at the first batch carrying it. Only the first batch of a run of equal
        epochs can change the cache unless the cache refused it, so the rest of a run is looked at only then."""
        latest = epoch_cache.latest_epoch
        starts = np.flatnonzero(np.concatenate(([True], epochs[1:] != epochs[:-1])))
        ends = np.append(starts[1:], len(epochs))
        for run_start, run_end in zip(starts.tolist(), ends.tolist(), strict=True):
            epoch = int(epochs[run_start])
            if epoch < 0:
                continue
            for i in range(run_start, run_end):
                if latest is not None and epoch <= latest:
                    break
                epoch_cache.assign(epoch, int(base_offsets[i]))
                latest = epoch_cache.latest_epoch

    def _recover_producer_state(self, state: RecoveryProducerState[TxnT], pos: int, size: int, header: bytes) -> None:
        """Producer state needs only header fields, except for control batches (their marker type)."""
        batch = RecordBatch(header, header_only=True)
        if batch.is_control:
            batch = self.log.read_batch(pos, size)
        completed = state.update_from_recovered_batch(batch)
        if completed is not None:
            if completed.is_aborted:
                self.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                 completed.last_offset, state.last_stable_offset(completed)))
            state.complete_txn(completed)
        state.update_map_end_offset(batch.last_offset + 1)

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
