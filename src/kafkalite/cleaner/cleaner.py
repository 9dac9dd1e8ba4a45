"""One cleaning of one log (Kafka's Cleaner): build the key map over the dirty section, then rewrite
the log up to the end of that map, group by group, each group into one `.cleaned` segment that is
swapped in for the segments it came from.

The dirty section is [first dirty offset, first uncleanable offset). The map may fill before its
end ("partially mapped"): the round then cleans only up to the last offset the map covers, and
the next round starts there. Every segment below that point is recopied, including the already
clean head of the log, so that a key's old values everywhere are dropped and small segments are
merged back into groups of at most segment.bytes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kafkalite.cleaner.chunk import Batch, decode, frame
from kafkalite.cleaner.filter import CleanerStats, FilterContext, filter_chunk
from kafkalite.cleaner.offset_map import OffsetMap
from kafkalite.cleaner.throttler import Throttler
from kafkalite.cleaner.transactions import CleanedTransactionMetadata
from kafkalite.cleaner.vector import FRONT_PAD, PaddedBuffer
from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.errors import CorruptRecordError, LogError
from kafkalite.records.batch import CONTROL_FLAG_MASK, LOG_OVERHEAD, RecordBatch
from kafkalite.storage import names
from kafkalite.storage.file_records import FileRecords
from kafkalite.storage.log import Log
from kafkalite.storage.segment import LogSegment

log = logging.getLogger("kafkalite.cleaner")

INT_MAX = (1 << 31) - 1
MIN_READ_BUFFER = 16 << 20
TopicPartition = tuple[str, int]


class LogCleaningAbortedError(Exception):
    """The cleaning of a partition was aborted (it is being deleted or truncated); not a failure."""


class ThreadShutdownError(Exception):
    """The cleaner is shutting down in the middle of a cleaning."""


@dataclass
class LogToClean:
    """A log with its cleanable range and the sizes that rank it (Kafka's LogToClean)."""

    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    uncleanable_offset: int
    need_compaction_now: bool = False

    def __post_init__(self) -> None:
        self.clean_bytes = sum(s.size for s in self.log.log_segments(-1, self.first_dirty_offset))
        self.first_uncleanable_offset, self.cleanable_bytes = calculate_cleanable_bytes(
            self.log, self.first_dirty_offset, self.uncleanable_offset)
        self.total_bytes = self.clean_bytes + self.cleanable_bytes
        self.cleanable_ratio = self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def calculate_cleanable_bytes(the_log: Log, first_dirty_offset: int, uncleanable_offset: int) -> tuple[int, int]:
    """(base of the segment holding the uncleanable offset, or the active base; bytes in between)."""
    later = the_log.non_active_log_segments_from(uncleanable_offset)
    first_uncleanable = later[0].base_offset if later else the_log.active_segment.base_offset
    segs = the_log.log_segments(min(first_dirty_offset, first_uncleanable), first_uncleanable)
    return first_uncleanable, sum(s.size for s in segs)


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[LogSegment]]:
    """Greedy runs of consecutive segments that fit one segment: log bytes, both indexes' bytes, and
    an offset range that still fits relative offsets (estimated from the next segment's base)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [first]
        log_size = first.size
        index_size = first.offset_index.size_in_bytes
        time_size = first.time_index.size_in_bytes
        i += 1
        while i < len(segments):
            seg = segments[i]
            last_offset = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable_offset - 1
            if not (log_size + seg.size <= max_size
                    and index_size + seg.offset_index.size_in_bytes <= max_index_size
                    and time_size + seg.time_index.size_in_bytes <= max_index_size
                    and (seg.size == 0 or last_offset - first.base_offset <= INT_MAX)):
                break
            group.append(seg)
            log_size += seg.size
            index_size += seg.offset_index.size_in_bytes
            time_size += seg.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups


class Cleaner:
    """Cleans one log at a time with its own offset map and I/O buffer (one per cleaner thread)."""

    def __init__(
        self,
        cleaner_id: int,
        offset_map: OffsetMap,
        *,
        io_buffer_size: int = 256 * 1024,
        max_io_buffer_size: int = 1048588,
        load_factor: float = 0.9,
        throttler: Throttler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        check_done: Callable[[TopicPartition], None] | None = None,
    ) -> None:
        if offset_map.slots * load_factor <= 1:
            raise ValueError("offset map is too small to fit in even a single message, so log cleaning will "
                             "never make progress; increase log.cleaner.dedupe.buffer.size or decrease "
                             "log.cleaner.threads")
        self.id = cleaner_id
        self.offset_map = offset_map
        # Kafka reads 256 KiB at a time; numpy decoding pays per chunk, so we read bigger chunks.
        self.read_size = max(io_buffer_size, MIN_READ_BUFFER)
        self.max_io_buffer_size = max_io_buffer_size
        self.load_factor = load_factor
        self.throttler = throttler or Throttler()
        self.clock = clock
        self.check_done = check_done or (lambda tp: None)
        self._buffer = PaddedBuffer(self.read_size)

    # --- a whole cleaning ------------------------------------------------------------------------

    def clean(self, ltc: LogToClean) -> tuple[int, CleanerStats]:
        return self.do_clean(ltc, self.clock.milliseconds())

    def do_clean(self, ltc: LogToClean, now: int) -> tuple[int, CleanerStats]:
        """Returns the next first dirty offset (the end of what the map covered) and the statistics."""
        the_log = ltc.log
        log.info("Beginning cleaning of log %s", the_log.dir.name)
        stats = CleanerStats(start_time=time.monotonic())
        upper = ltc.first_uncleanable_offset
        self.build_offset_map(the_log, ltc.first_dirty_offset, upper, self.offset_map, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.map_complete_time = time.monotonic()
        txn = CleanedTransactionMetadata()
        cfg = the_log.config
        groups = group_segments_by_size(the_log.log_segments(0, end_offset), cfg.segment_bytes,
                                        cfg.segment_index_bytes, upper)
        log.info("Cleaning log %s up to offset %d in %d group(s)", the_log.dir.name, end_offset, len(groups))
        for group in groups:
            self.clean_segments(the_log, group, self.offset_map, now, stats, txn, upper)
        stats.buffer_utilization = self.offset_map.utilization
        stats.end_time = time.monotonic()
        return end_offset, stats

    # --- the key map -------------------------------------------------------------------------------

    def build_offset_map(self, the_log: Log, start: int, end: int, offset_map: OffsetMap,
                         stats: CleanerStats) -> None:
        """Map every key of [start, end) to its latest offset, until the map reaches its load factor."""
        offset_map.clear()
        dirty = the_log.log_segments(start, end)
        next_starts = [s.base_offset for s in dirty[1:]] + [end] if dirty else []
        log.info("Building offset map for log %s for %d segments in offset range [%d, %d).",
                 the_log.dir.name, len(dirty), start, end)
        txn = CleanedTransactionMetadata()
        txn.add_aborted_transactions(the_log.collect_aborted_transactions(start, end))
        tp = (the_log.topic, the_log.partition)
        limit = int(offset_map.slots * self.load_factor)
        for seg, next_start in zip(dirty, next_starts, strict=True):
            self.check_done(tp)
            if self._map_segment(tp, seg, offset_map, start, next_start, txn, stats, limit):
                log.debug("Offset map is full; segment %d is partially mapped", seg.base_offset)
                break

    def _map_segment(self, tp: TopicPartition, seg: LogSegment, offset_map: OffsetMap, start: int,
                     next_start: int, txn: CleanedTransactionMetadata, stats: CleanerStats, limit: int) -> bool:
        position = seg.scan_position(start)
        size = seg.size
        while position < size:
            self.check_done(tp)
            buf = self._read(seg.log, position, size)
            self.throttler.maybe_throttle(buf.n)
            batches, consumed = frame(buf)
            if consumed == 0:
                raise CorruptRecordError(f"no complete batch at position {position} of {seg.log.path}")
            if self._map_chunk(buf, batches, offset_map, start, txn, stats, limit):
                return True
            position += consumed
            stats.map_bytes_read += consumed
        offset_map.update_latest_offset(next_start - 1)  # skip a gap at the end of the segment
        return False

    def _map_chunk(self, buf: PaddedBuffer, batches: list[Batch], offset_map: OffsetMap, start: int,
                   txn: CleanedTransactionMetadata, stats: CleanerStats, limit: int) -> bool:
        chosen = []
        for i, b in enumerate(batches):
            if b.attributes & CONTROL_FLAG_MASK:
                txn.on_control_batch_read(b.last_offset, b.producer_id, _first_key(buf, b))
                stats.map_messages_read += 1
            elif txn.on_batch_read(b.last_offset, b.producer_id, b.attributes & 0x10 != 0):
                stats.map_messages_read += b.count
            else:
                chosen.append(i)
        offsets, h1s, h2s = [], [], []
        for d in decode(buf, batches, chosen, values=False) if chosen else []:
            r = d.records
            sel = np.flatnonzero((r.key_len >= 0) & (d.offsets >= start))
            h1, h2 = d.key_hashes(sel)
            offsets.append(d.offsets[sel])
            h1s.append(h1)
            h2s.append(h2)
            stats.map_messages_read += len(r)
        lasts = [b.last_offset for b in batches if b.last_offset >= start]
        previous = offset_map.latest_offset
        if offsets:
            offs = np.concatenate(offsets)
            h1, h2 = np.concatenate(h1s), np.concatenate(h2s)
            if len(offsets) > 1:  # plain and compressed batches decoded apart: back to log order
                order = np.argsort(offs, kind="stable")
                offs, h1, h2 = offs[order], h1[order], h2[order]
            put = offset_map.put_many_until(h1, h2, offs, limit)
            if put < len(offs):
                stop = int(offs[put])
                candidates = [x for x in lasts if x < stop] + ([int(offs[put - 1])] if put else []) + [previous]
                offset_map.update_latest_offset(max(candidates))
                return True
        if lasts:
            offset_map.update_latest_offset(max(lasts))
        return False

    # --- cleaning a group of segments ---------------------------------------------------------------

    def clean_segments(self, the_log: Log, group: list[LogSegment], offset_map: OffsetMap, now: int,
                       stats: CleanerStats, txn: CleanedTransactionMetadata, upper_bound_offset: int) -> None:
        """Rewrite a group of segments into one `.cleaned` segment and swap it in."""
        base = group[0].base_offset
        cfg = the_log.config
        for path in (names.log_file, names.offset_index_file, names.time_index_file, names.txn_index_file):
            path(the_log.dir, base, names.CLEANED_SUFFIX).unlink(missing_ok=True)
        cleaned = LogSegment.open(the_log.dir, base, index_interval_bytes=cfg.index_interval_bytes,
                                  max_index_size=cfg.segment_index_bytes, clock=the_log.clock,
                                  file_suffix=names.CLEANED_SUFFIX)
        txn.cleaned_index = cleaned.txn_index
        sizes = [s.size for s in group]
        tp = (the_log.topic, the_log.partition)
        try:
            ctx = FilterContext(offset_map, txn, the_log.last_records_of_active_producers(), upper_bound_offset,
                                now, cfg.delete_retention_ms, stats)
            for i, seg in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else seg.read_next_offset()
                txn.add_aborted_transactions(the_log.collect_aborted_transactions(seg.base_offset, upper))
                log.debug("Cleaning segment %d of log %s into %d", seg.base_offset, the_log.dir.name, base)
                self._clean_into(tp, seg, sizes[i], cleaned, ctx)
            cleaned.on_become_inactive_segment()
            cleaned.flush()
            cleaned.set_last_modified_ms(group[-1].last_modified_ms())
            log.info("Swapping in cleaned segment %s for segment(s) %s in log %s", base,
                     [s.base_offset for s in group], the_log.dir.name)
        except BaseException:
            _discard(cleaned)
            raise
        try:
            the_log.replace_segments([cleaned], group, sizes)
        except LogError as exc:  # refused before touching any file: the log changed under us
            _discard(cleaned)
            raise LogCleaningAbortedError(str(exc)) from exc

    def _clean_into(self, tp: TopicPartition, source: LogSegment, size: int, dest: LogSegment,
                    ctx: FilterContext) -> None:
        position = 0
        while position < size:
            self.check_done(tp)
            buf = self._read(source.log, position, size)
            self.throttler.maybe_throttle(buf.n)
            result = filter_chunk(buf, ctx)
            if result.bytes_read == 0:
                raise CorruptRecordError(f"no complete batch at position {position} of {source.log.path}")
            position += result.bytes_read
            if result.output:
                dest.append(result.max_offset, result.max_timestamp, result.shallow_offset_of_max_timestamp,
                            result.output)
                self.throttler.maybe_throttle(len(result.output))

    # --- reading -------------------------------------------------------------------------------------

    def _read(self, source: FileRecords, position: int, end: int) -> PaddedBuffer:
        """Up to `read_size` bytes from `position`, grown to hold the first batch whole if it is bigger."""
        buf = self._buffer
        want = min(buf.capacity, end - position)
        buf.n = os.preadv(source.fd, [memoryview(buf.raw)[FRONT_PAD : FRONT_PAD + want]], position)
        if buf.n >= 17:
            length = int.from_bytes(buf.raw[FRONT_PAD + 8 : FRONT_PAD + 12], "big", signed=True)
            need = length + LOG_OVERHEAD
            if need > buf.n:
                if need > end - position:
                    raise CorruptRecordError(f"log segment {source.path} may be corrupt: batch size {need} > "
                                             f"{end - position} bytes left at position {position}")
                if need > buf.capacity:
                    log.info("Growing cleaner I/O buffer from %d bytes to %d bytes", buf.capacity, need)
                    buf = PaddedBuffer(need)
                buf.n = os.preadv(source.fd, [memoryview(buf.raw)[FRONT_PAD : FRONT_PAD + need]], position)
        return buf


def _first_key(buf: PaddedBuffer, b: Batch) -> bytes | None:
    if b.count <= 0:
        return None
    records = RecordBatch(bytes(buf.raw[b.pos : b.pos + b.size])).records()
    return records[0].key if records else None


def _discard(segment: LogSegment) -> None:
    segment.close_handlers()
    segment.delete_if_exists()
