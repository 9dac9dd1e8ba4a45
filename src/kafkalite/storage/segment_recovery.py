"""Segment recovery (Kafka's LogSegment.recover): rebuild a segment's indexes, producer state and epochs from its
`.log`, cutting what a crash left behind, column-wise over windows of CRC-valid batches.

Split from segment.py, which keeps what a segment is and does while it lives (append, read, roll): this
module holds the numpy side of recovery, `LogSegment.recover` and `rebuild_indexes` call it. The rules are
Kafka's per-batch ones, evaluated with numpy over each window instead of one Python step per batch; a
property test compares them with a plain batch-by-batch reading (tests/test_recovery_scan.py).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np

from kafkalite.errors import CorruptRecordError, InvalidRecordError
from kafkalite.records.batch import CONTROL_FLAG_MASK, RecordBatch
from kafkalite.storage import names
from kafkalite.storage.file_records import FileRecords, ValidBatches
from kafkalite.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from kafkalite.storage.segment import LogSegment

log = logging.getLogger("kafkalite.storage")

MAX_RELATIVE_OFFSET = (1 << 31) - 1  # an offset index entry holds the offset relative to the base in an int32


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


class RecoveryState:
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


def choose_batches(bases: np.ndarray, lasts: np.ndarray, n: int, previous_last: int, segment_base: int,
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


def recover(
    seg: LogSegment,
    producer_state: RecoveryProducerState[TxnT] | None = None,
    epoch_cache: RecoveryEpochCache | None = None,
) -> int:
    """Rebuild the indexes from the `.log`, stopping at the first invalid batch; returns bytes truncated.

    A batch is valid when it frames, is v2, is at least 61 bytes and its CRC32C matches.
    Everything from the first invalid batch on is cut, and the bytes cut are returned (the loader
    then drops the later segments, as Kafka does).

    A valid batch whose offsets do not fit (outside the segment's range, or overlapping the batches
    around it: a damaged base-offset field, which the CRC does not cover) is dropped alone, and the
    batches after it are kept; see `choose_batches`. The file is rewritten without it (through a
    temporary file renamed over the `.log`, so a crash leaves either file whole). Dropped batches
    are not counted as truncated, so later segments survive.
    """
    offset_index = seg.offset_index
    time_index = seg.time_index
    seg.txn_index.reset()
    state = scan_into_indexes(seg, producer_state, epoch_cache)
    if state.failure is not None:
        log.warning("Found invalid messages in log segment %s at byte offset %d: %s",
                    seg.log.path, state.valid_bytes, state.failure)
    if producer_state is not None and state.previous_last >= 0:
        # Kafka moves the map end offset past every recovered batch, not only those with a producer
        # id; without it the loader would replay the whole segment's headers a second time.
        producer_state.update_map_end_offset(state.previous_last + 1)
    valid_bytes = state.valid_bytes
    truncated = seg.log.size - state.scan_end
    if state.drops:
        _rewrite_without(seg, state.drops, state.scan_end)
    elif truncated > 0:
        seg.log.truncate_to(valid_bytes)
    if truncated > 0:
        log.warning("Truncated %d invalid bytes at the end of segment %s", truncated, seg.log.path)
    max_ts, offset_of_max = state.max_ts, state.offset_of_max
    seg._max_ts_and_offset = (max_ts, offset_of_max)
    offset_index.trim_to_valid_size()
    time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
    time_index.trim_to_valid_size()
    seg.bytes_since_last_index_entry = valid_bytes - state.last_index_entry
    return truncated


def scan_into_indexes(seg: LogSegment, producer_state: RecoveryProducerState[TxnT] | None,
                       epoch_cache: RecoveryEpochCache | None, may_drop: bool = True) -> RecoveryState:
    """Empty both indexes and refill them from the valid batches of the `.log` (the scan of `recover`)."""
    offset_index = seg.offset_index
    time_index = seg.time_index
    offset_index.reset()
    time_index.reset()
    state = RecoveryState(seg.base_offset, seg.index_interval_bytes)
    state.may_drop = may_drop
    # The last two batches of each window wait for the next window: whether a batch's offsets fit
    # is judged against the two batches after it (see choose_batches).
    pending: ValidBatches | None = None
    stopped = False
    scan_failure: CorruptRecordError | None = None
    try:
        for window in seg.log.scan_valid(0):
            if pending is not None:
                window = _concat(pending, window)
            if len(window.positions) <= _LOOKAHEAD:
                pending = window
                continue
            head, pending = _split(window, len(window.positions) - _LOOKAHEAD)
            if not _recover_window(seg, head, state, producer_state, epoch_cache, pending, None):
                stopped = True
                break
    except CorruptRecordError as exc:
        scan_failure = exc
    if not stopped and pending is not None:
        _recover_window(seg, pending, state, producer_state, epoch_cache, None, _next_segment_base(seg))
    if state.failure is None:
        state.failure = scan_failure
    offset_index.append_many(*state.columns(state.index_offsets, state.index_positions))
    time_index.append_many(*state.columns(state.time_stamps, state.time_offsets))
    return state


def _recover_window(seg: LogSegment, window: ValidBatches, state: RecoveryState,
                    producer_state: RecoveryProducerState[TxnT] | None, epoch_cache: RecoveryEpochCache | None,
                    lookahead: ValidBatches | None, upper_bound: int | None) -> bool:
    """Apply Kafka's per-batch recovery rules to a window of CRC-valid batches, column by column.

    The rules are those of LogSegment.recover (index entries every `index.interval.bytes`, the
    running max timestamp, epochs, producer state), evaluated with numpy over the window instead
    of one Python step per batch, plus the choice of the batches whose offsets fit
    (`choose_batches`, which looks at the first batches of `lookahead`, or at `upper_bound` at
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
    keep = choose_batches(np.concatenate((base_offsets, ahead_bases)), np.concatenate((last_offsets, ahead_lasts)),
                           total, state.previous_last, state.base, upper_bound)
    end_file = int(window.positions[-1] + window.sizes[-1])  # in the file as scanned
    if keep is not None and not state.may_drop:
        i = int(np.argmin(keep))
        state.failure = CorruptRecordError(
            f"batch offsets {int(base_offsets[i])}..{int(last_offsets[i])} at byte {int(window.positions[i])} "
            f"of {seg.log.path} do not fit between the batches around it")
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
                _recover_producer_state(seg, producer_state, int(file_positions[i]), int(sizes[i]),
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
                        "batches around it (the batch before it ends at offset %d)", position, seg.log.path,
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
        _recover_epochs(epoch_cache, h["partition_leader_epoch"][:n].astype(np.int64), base_offsets[:n])
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


def _next_segment_base(seg: LogSegment) -> int | None:
    """The base offset of the next segment in the directory, which no batch of this one may reach."""
    suffix = names.LOG_SUFFIX + seg._suffix
    best = None
    with os.scandir(seg.dir) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith(suffix) and name.count(".") == suffix.count("."):
                try:
                    base = names.offset_from_file_name(name)
                except ValueError:
                    continue
                if base > seg.base_offset and (best is None or base < best):
                    best = base
    return best


def _rewrite_without(seg: LogSegment, drops: list[tuple[int, int]], end: int) -> None:
    """Rewrite the `.log` up to byte `end` without the dropped batches: into a temporary file that is
    then renamed over the `.log` (the loader deletes a `.tmp` left by a crash; the `.log` is whole)."""
    path = seg.log.path
    tmp = path.with_name(path.name + ".recovered.tmp")
    source = seg.log.fd
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
    seg.log.close_handlers()
    os.replace(tmp, path)
    seg.log = FileRecords(path)
    dir_fd = os.open(seg.dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename durable (if lost, the next recovery just drops the batch again)
    finally:
        os.close(dir_fd)


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


def _recover_producer_state(seg: LogSegment, state: RecoveryProducerState[TxnT], pos: int, size: int,
                            header: bytes) -> None:
    """Producer state needs only header fields, except for control batches (their marker type)."""
    batch = RecordBatch(header, header_only=True)
    if batch.is_control:
        batch = seg.log.read_batch(pos, size)
    completed = state.update_from_recovered_batch(batch)
    if completed is not None:
        if completed.is_aborted:
            seg.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                             completed.last_offset, state.last_stable_offset(completed)))
        state.complete_txn(completed)
    state.update_map_end_offset(batch.last_offset + 1)
