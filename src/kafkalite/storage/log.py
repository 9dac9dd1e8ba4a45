"""The partition log (Kafka's UnifiedLog with LocalLog): one directory of segments for one topic-partition.

This is the object everything above the storage layer talks to. It owns the ordered segment map
and the offsets that give the log meaning (log start, high watermark, recovery point, log end),
validates and appends whole batches (assigning offsets in place, never re-encoding records),
rolls segments, serves batch-aligned reads bounded by an isolation level, applies retention and
truncation, and keeps the leader epoch cache and producer state in step with the data.

Thread safety: every public method takes the log's lock, as Kafka's UnifiedLog does for writes;
reads take it too (they are short: a read returns a file slice, not the bytes).
"""

from __future__ import annotations

import enum
import logging
import os
import random
import shutil
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from crc32c import crc32c

from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    LogError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    RecordValidationError,
    UnexpectedAppendOffsetError,
)
from kafkalite.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    HEADER,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatch,
    TimestampType,
    compute_crc,
    iter_batches,
)
from kafkalite.scheduler import Scheduler
from kafkalite.storage import names
from kafkalite.storage.checkpoint import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    PARTITION_METADATA_FILE,
    CheckpointError,
    LeaderEpochCheckpointFile,
    decode_partition_metadata,
    fsync_dir,
    fsync_file_if_exists,
    read_small_file,
)
from kafkalite.storage.dir_lock import DirLock
from kafkalite.storage.file_records import TimestampAndOffset
from kafkalite.storage.leader_epoch import LeaderEpochCache
from kafkalite.storage.log_config import LogConfig
from kafkalite.storage.log_loader import LogLoader, list_file_names, rebuild_producer_state
from kafkalite.storage.metadata import FetchDataInfo, LogOffsetMetadata
from kafkalite.storage.names import as_path
from kafkalite.storage.producer_state import AppendOrigin, ProducerStateManager
from kafkalite.storage.read_only import load_read_only
from kafkalite.storage.segment import LogSegment
from kafkalite.storage.segment_map import SegmentMap

log = logging.getLogger("kafkalite.log")
# one generator for every log's roll jitter (as Kafka's ThreadLocalRandom): a Random per log cost 0.1 ms to seed
# and 2.5 KiB of state, which 10,000 partitions pay in start-up time and memory
_JITTER_RNG = random.Random()

# attribute bits that take a batch off the plain append path
_NOT_PLAIN = (COMPRESSION_CODEC_MASK | TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
              | DELETE_HORIZON_FLAG_MASK)
_OFFSET_AND_LENGTH = struct.Struct(">qii")  # base offset, length, partition leader epoch

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

# what a read-only Log refuses (LogError), by name
_WRITE_METHODS = (
    "append_as_leader", "append_as_follower", "roll", "flush", "truncate_to", "truncate_fully_and_start_at",
    "delete_old_segments", "maybe_increment_log_start_offset", "maybe_assign_epoch_start_offset",
    "replace_segments", "delete",
)


class FetchIsolation(enum.Enum):
    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"


@dataclass(slots=True)
class LogAppendInfo:
    """What an append did: the offsets it got (or, for a duplicate, the offsets it got the first time)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int = -1
    log_start_offset: int = 0
    records_count: int = 0
    valid_bytes: int = 0
    batch_count: int = 0
    duplicate: bool = False
    last_leader_epoch: int = -1


@dataclass(slots=True)
class _Analysis:
    """Shallow facts about the batches of an append, gathered before taking any decision."""

    batches: list[RecordBatch]
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    valid_bytes: int
    monotonic: bool
    records_count: int


class Log:
    """One partition's log directory."""

    def __init__(
        self,
        directory: Path | str,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        clean_shutdown: bool = False,
        scheduler: Scheduler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        producer_id_expiration_ms: int = 86_400_000,
        high_watermark: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        read_only: bool = False,
        dir_lock: DirLock | None = None,
        durable_recovery_snapshots: bool = True,
        closed_without_snapshot: bool = False,
    ) -> None:
        """Open (creating if needed) and recover a partition directory for writing, under its lock.

        A standalone Log locks the directory it lives in (shared with other standalone Logs, not with
        a LogManager) and its own partition directory (exclusively); a LogManager passes its held
        data dir lock as `dir_lock` instead. `read_only=True` (see `open_read_only`) takes no lock and
        changes nothing on disk. `durable_recovery_snapshots=False` writes the producer snapshots of loading
        without fsync: for a caller that syncs the file system once after loading many logs.
        `closed_without_snapshot=True` (with `clean_shutdown=True`): the directory was closed cleanly but
        without a producer snapshot at its end (a recovery worker's close), so the producer state is replayed
        from the newest snapshot left, or from the log start if there is none, never taken to be empty.
        """
        self.dir = as_path(directory)
        self.topic, self.partition = names.parse_topic_partition_name(self.dir.name)
        self.update_config(config)
        self.scheduler = scheduler
        self.clock = clock
        self._lock = threading.RLock()
        self.segments: SegmentMap  # the loader's (or the read-only opener's): no empty map built to be replaced
        self.read_only = read_only
        self._closed = False
        self._truncations = 0  # counts truncations, so a flush running outside the lock can tell one happened
        self.last_flush_time = clock.milliseconds()
        # the topic id in partition.metadata, read at load as Kafka's UnifiedLog does (initializeTopicId), and
        # set by whoever writes that file (the broker); None when there is none (or it could not be read)
        self.topic_id: uuid.UUID | None = None
        self._dir_locks: list[DirLock] = []
        if read_only:
            if dir_lock is not None:
                raise ValueError("a read-only Log takes no lock: do not pass dir_lock")
            self._open_read_only(log_start_offset, high_watermark)
            return
        self._dir_locks = self._take_dir_locks(dir_lock)
        try:
            self._open_for_writing(log_start_offset, recovery_point, clean_shutdown, producer_id_expiration_ms,
                                   high_watermark, progress, durable_recovery_snapshots, closed_without_snapshot)
        except BaseException:
            self._release_dir_locks()
            raise

    @classmethod
    def open_read_only(cls, directory: Path | str, config: LogConfig | None = None, *, log_start_offset: int = 0,
                       clock: Clock = SYSTEM_CLOCK) -> Log:
        """A Log that only reads: safe on a directory a broker or another Log is writing.

        It sees the log as it was when opened (segments, and batches up to the last whole valid one),
        takes no lock, and never truncates, trims, renames, creates or deletes a file. Its high
        watermark is its log end (a reader cannot know the writer's); read_committed reads are refused
        (the last stable offset needs the writer's producer state); every write raises LogError.
        """
        return cls(directory, config or LogConfig(), log_start_offset=log_start_offset, clock=clock, read_only=True)

    def _take_dir_locks(self, dir_lock: DirLock | None) -> list[DirLock]:
        if dir_lock is not None and dir_lock.held and dir_lock.exclusive and dir_lock.directory == self.dir.parent:
            return []  # the manager's (resolved) data dir holds this one: no realpath for each of its partitions
        parent = self.dir.resolve().parent
        if dir_lock is not None:
            if not (dir_lock.held and dir_lock.exclusive and dir_lock.directory == parent):
                raise ValueError(f"{dir_lock} does not hold {parent}, the log dir of {self.dir}")
            return []  # the manager holds the whole data dir exclusively
        parent.mkdir(parents=True, exist_ok=True)
        shared = DirLock.acquire(parent, exclusive=False, what="log dir")
        try:
            self.dir.mkdir(exist_ok=True)
            return [shared, DirLock.acquire(self.dir, exclusive=True, what="partition directory")]
        except BaseException:
            shared.release()
            raise

    def _release_dir_locks(self) -> None:
        for held in reversed(self._dir_locks):
            held.release()
        self._dir_locks = []

    def _open_for_writing(self, log_start_offset: int, recovery_point: int, clean_shutdown: bool,
                          producer_id_expiration_ms: int, high_watermark: int | None,
                          progress: Callable[[int, int], None] | None, durable_snapshots: bool = True,
                          closed_without_snapshot: bool = False) -> None:
        clock = self.clock
        # listed once here for the loader and the producer state: each listed it for itself (four times a load)
        try:
            file_names = list_file_names(self.dir)
        except FileNotFoundError:
            self.dir.mkdir(parents=True, exist_ok=True)
            file_names = []
        epoch_file = self.dir / LEADER_EPOCH_CHECKPOINT_FILE
        self.rebuild_epoch_cache = False
        try:
            self.leader_epoch_cache = LeaderEpochCache(LeaderEpochCheckpointFile(epoch_file))
        except CheckpointError as exc:
            log.warning("%s: %s; rebuilding the leader epoch cache from the batches in the log", self.dir.name, exc)
            epoch_file.unlink(missing_ok=True)
            self.leader_epoch_cache = LeaderEpochCache(LeaderEpochCheckpointFile(epoch_file))
            self.rebuild_epoch_cache = True
        self.producer_state = ProducerStateManager(self.dir, producer_id_expiration_ms=producer_id_expiration_ms,
                                                   clock=clock, file_names=file_names)
        self.producer_state.durable_snapshots = durable_snapshots
        loaded = LogLoader(
            self.dir, self.config, new_segment=self._new_segment, leader_epoch_cache=self.leader_epoch_cache,
            producer_state=self.producer_state, clock=clock, log_start_offset_checkpoint=log_start_offset,
            recovery_point_checkpoint=recovery_point, clean_shutdown=clean_shutdown,
            closed_without_snapshot=closed_without_snapshot, rebuild_epoch_cache=self.rebuild_epoch_cache,
            progress=progress, file_names=file_names).load()
        self.producer_state.durable_snapshots = True
        self.segments = loaded.segments
        self.log_start_offset = loaded.log_start_offset
        self.recovery_point = loaded.recovery_point
        self._leo = loaded.next_offset_metadata
        self._hw = LogOffsetMetadata(self.log_start_offset)
        self.topic_id = _read_topic_id(self.dir)
        if high_watermark is not None:
            self.update_high_watermark(high_watermark)

    def _open_read_only(self, log_start_offset: int, high_watermark: int | None) -> None:
        self.segments, self._leo = load_read_only(self.dir, self.config.segment_index_bytes)
        self.rebuild_epoch_cache = False
        try:
            self.leader_epoch_cache = LeaderEpochCache(LeaderEpochCheckpointFile(self.dir /
                                                                                 LEADER_EPOCH_CHECKPOINT_FILE))
        except CheckpointError as exc:
            log.warning("%s: %s; reading without leader epochs", self.dir.name, exc)
            self.leader_epoch_cache = LeaderEpochCache(None)
        self.producer_state = None  # type: ignore[assignment]  # the writer's; not loaded (it writes snapshots)
        self.log_start_offset = max(log_start_offset, self.segments.peekitem(0)[0])
        self.recovery_point = self._leo.message_offset
        self._hw = self._leo if high_watermark is None else LogOffsetMetadata(
            max(self.log_start_offset, min(high_watermark, self._leo.message_offset)))
        for name in _WRITE_METHODS:  # instance attributes: the write paths of writable logs pay nothing
            setattr(self, name, self._refuse_write)

    def _refuse_write(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise LogError(f"log {self.dir} is open read-only")

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic configs (IncrementalAlterConfigs); new segments and appends use them."""
        self.config = config
        self._max_segment_ms = config.max_segment_ms
        # whether any rule needs the records of an uncompressed batch opened (keys, timestamp bounds)
        self._record_rules = config.compact or (config.message_timestamp_type == "CreateTime" and (
            config.message_timestamp_before_max_ms < (1 << 63) - 1
            or config.message_timestamp_after_max_ms < (1 << 63) - 1))

    # --- segment construction -----------------------------------------------------------------------

    def _new_segment(self, base_offset: int, *, file_suffix: str = "", new_file: bool = True) -> LogSegment:
        cfg = self.config
        return LogSegment.open(
            self.dir,
            base_offset,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes,
            roll_jitter_ms=cfg.random_segment_jitter(_JITTER_RNG),
            clock=self.clock,
            preallocate=cfg.preallocate and new_file,
            init_file_size=cfg.segment_bytes if new_file else 0,
            file_suffix=file_suffix,
        )

    # --- offsets ------------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._leo.message_offset

    leo = log_end_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw.message_offset

    hw = high_watermark

    @property
    def active_segment(self) -> LogSegment:
        return self.segments.last_segment

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments.values())

    @property
    def number_of_segments(self) -> int:
        return len(self.segments)

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    @property
    def last_stable_offset(self) -> int:
        if self.read_only:
            raise LogError(f"log {self.dir} is open read-only: its last stable offset is the writer's to know")
        with self._lock:  # the cleaner asks from its own thread while appends change producer state
            first_unstable = self.producer_state.first_unstable_offset()
            if first_unstable is not None and first_unstable < self.high_watermark:
                return max(first_unstable, self.log_start_offset)
            return self.high_watermark

    lso = last_stable_offset

    def _update_log_end_offset(self, offset: int, active: LogSegment | None = None) -> None:
        if active is None:
            active = self.active_segment
        self._leo = LogOffsetMetadata(offset, active.base_offset, active.size)
        if self.recovery_point > offset:
            self.recovery_point = offset
        if self._hw.message_offset >= offset:
            self._hw = self._leo

    # --- high watermark -----------------------------------------------------------------------------

    def update_high_watermark(self, hw: int) -> int:
        """Set the HW, clamped to [log start, LEO]; moving it back is allowed (with a warning)."""
        with self._lock:
            if hw < self.log_start_offset:
                meta = LogOffsetMetadata(self.log_start_offset)
            elif hw >= self.log_end_offset:
                meta = self._leo
            else:
                meta = LogOffsetMetadata(hw)
            if meta.message_offset < self._hw.message_offset:
                log.warning("%s: high watermark moves back from %d to %d", self.dir.name,
                            self._hw.message_offset, meta.message_offset)
            self._hw = meta
            return meta.message_offset

    def maybe_increment_high_watermark(self, new: LogOffsetMetadata) -> LogOffsetMetadata | None:
        """Leader path: raise the HW if `new` is ahead; returns the old HW when it moved."""
        with self._lock:
            if new.message_offset > self.log_end_offset:
                raise ValueError(f"high watermark {new} must not exceed the log end offset {self._leo}")
            old = self._hw
            if old.message_offset < new.message_offset or (
                old.message_offset == new.message_offset
                and not old.message_offset_only()
                and not new.message_offset_only()
                and old.on_older_segment(new)
            ):
                self._hw = new
                return old
            return None

    def maybe_update_high_watermark(self, hw: int) -> int | None:
        """Follower path: clamp and set; the new HW when it changed, else None."""
        with self._lock:
            old = self.high_watermark
            new = self.update_high_watermark(hw)
            return new if new != old else None

    def _fetch_high_watermark_metadata(self) -> LogOffsetMetadata:
        hw = self._hw
        if hw.message_offset_only():
            if hw.message_offset >= self.log_end_offset:
                hw = self._leo
            else:
                hw = self._convert_to_offset_metadata(hw.message_offset)
            self._hw = hw
        return hw

    def _convert_to_offset_metadata(self, offset: int) -> LogOffsetMetadata:
        return self._read_local(offset, 1, self._leo, min_one_message=False).fetch_offset_metadata

    # --- append -------------------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int = 0,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO in place, stamp the leader epoch, and append."""
        if origin is AppendOrigin.CLIENT and not self._record_rules:
            info = self._append_plain_batch(records, leader_epoch)
            if info is not None:
                return info
        return self._append(records, origin, leader_epoch, as_leader=True)

    def _append_plain_batch(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> LogAppendInfo | None:
        """The produce hot path: one uncompressed CreateTime batch without producer id or flags.

        It does exactly what the general path does for such a batch, with the header unpacked once
        and no intermediate objects. Anything else, including every batch the general path would
        refuse, returns None and goes the general way (which raises the right error).
        """
        n = len(records)
        if n < RECORD_BATCH_OVERHEAD:
            return None
        (base, length, _epoch, magic, crc, attrs, lod, _bts, max_ts, pid, _pe, _bs, count) = HEADER.unpack_from(records)
        cfg = self.config
        if (length + LOG_OVERHEAD != n or magic != 2 or base != 0 or pid >= 0 or attrs & _NOT_PLAIN
                or count <= 0 or count != lod + 1 or n > cfg.max_message_bytes or n > cfg.segment_bytes
                or cfg.message_timestamp_type != "CreateTime"):
            return None
        # Patched in place when the caller's buffer is writable (the broker's request frames own their memory):
        # the batch is then written from the very buffer the socket read it into, without a copy.
        buf: bytearray | memoryview
        if isinstance(records, bytearray):
            buf = records
        elif isinstance(records, memoryview) and not records.readonly and records.c_contiguous \
                and records.format in ("B", "b", "c"):
            buf = records.cast("B") if records.format != "B" else records
        else:
            buf = bytearray(records)
        if crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]) != crc:
            return None
        with self._lock:
            if self._closed:
                self._check_open()
            first = self._leo.message_offset
            last = first + lod
            _OFFSET_AND_LENGTH.pack_into(buf, 0, first, length, leader_epoch)
            segment = self._maybe_roll(n, first, last, max_ts)
            segment.append(last, max_ts, last, buf)
            cache = self.leader_epoch_cache
            if leader_epoch >= 0 and leader_epoch != cache.latest_epoch:
                cache.assign(leader_epoch, first)
            self._update_log_end_offset(last + 1, segment)
            self.producer_state.update_map_end_offset(last + 1)
            if last + 1 - self.recovery_point >= cfg.flush_messages:
                self._flush_up_to(last + 1)
            return LogAppendInfo(first, last, max_ts, last, -1, self.log_start_offset, count, n, 1,
                                 last_leader_epoch=leader_epoch)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches with the offsets and epochs the leader gave them."""
        return self._append(records, AppendOrigin.REPLICATION, -1, as_leader=False)

    def _analyze(self, buf: bytes | bytearray | memoryview, origin: AppendOrigin, as_leader: bool) -> _Analysis:
        batches: list[RecordBatch] = []
        first_offset = -1
        last_offset = -1
        max_ts = -1
        shallow = -1
        valid_bytes = 0
        monotonic = True
        count = 0
        max_bytes = self.config.max_message_bytes
        from_client = as_leader and origin == AppendOrigin.CLIENT
        for batch in iter_batches(memoryview(buf)):
            base = batch.base_offset
            if from_client and base != 0:
                raise InvalidRecordError(f"the base offset of a record batch from a client must be 0, was {base}")
            if not batches:
                first_offset = base
            batch_last = base + batch.last_offset_delta
            if batch_last <= last_offset:
                monotonic = False
            last_offset = batch_last
            size = batch.length + LOG_OVERHEAD
            if as_leader and size > max_bytes:
                raise RecordTooLargeError(
                    f"the record batch of {size} bytes exceeds the maximum allowed size "
                    f"max.message.bytes={max_bytes} of {self.dir.name}")
            if compute_crc(batch.buffer) != batch.crc:
                batch.ensure_valid()  # raises CorruptRecordError with the details
            if batch.max_timestamp > max_ts:
                max_ts, shallow = batch.max_timestamp, batch_last
            valid_bytes += size
            count += batch.records_count
            batches.append(batch)
        return _Analysis(batches, first_offset, last_offset, max_ts, shallow, valid_bytes, monotonic, count)

    def _validate_as_leader(self, a: _Analysis, origin: AppendOrigin, leader_epoch: int, now: int) -> int:
        """LogValidator's checks and in-place assignment; returns the log-append time (or -1)."""
        cfg = self.config
        if origin == AppendOrigin.CLIENT and len(a.batches) != 1:
            raise InvalidRecordError(
                f"a produce request must carry exactly one record batch per partition, got {len(a.batches)}")
        log_append = cfg.message_timestamp_type == "LogAppendTime"
        offset = self.log_end_offset
        for batch in a.batches:
            if origin == AppendOrigin.CLIENT:
                if batch.records_count <= 0 or batch.last_offset_delta + 1 != batch.records_count:
                    raise InvalidRecordError(
                        f"batch has {batch.records_count} records but last offset delta {batch.last_offset_delta}")
                if batch.is_control:
                    raise InvalidRecordError("clients are not allowed to write control records")
                if batch.has_producer_id and batch.base_sequence < 0:
                    raise InvalidRecordError(
                        f"invalid sequence number {batch.base_sequence} in batch of producer {batch.producer_id}")
                if batch.attributes & TIMESTAMP_TYPE_MASK:
                    raise InvalidTimestampError("a producer may not set the LogAppendTime timestamp type")
            self._validate_records(batch, now, log_append)
            batch.set_last_offset(offset + batch.last_offset_delta)
            batch.set_partition_leader_epoch(leader_epoch)
            if log_append:
                batch.set_max_timestamp(TimestampType.LOG_APPEND_TIME, now)
            offset = batch.last_offset + 1
        a.first_offset = a.batches[0].base_offset
        a.last_offset = offset - 1
        if log_append:
            a.max_timestamp, a.shallow_offset_of_max_timestamp = now, a.batches[0].last_offset
            return now
        a.shallow_offset_of_max_timestamp = next(b.last_offset for b in a.batches if b.max_timestamp == a.max_timestamp)
        return -1

    def _validate_records(self, batch: RecordBatch, now: int, log_append: bool) -> None:
        """Open records only where a rule needs them: keys on compacted topics, timestamp bounds,
        and compressed payloads (their inner structure is not covered by anything else we check)."""
        compressed = batch.attributes & COMPRESSION_CODEC_MASK
        if not (compressed or self._record_rules):
            return
        cfg = self.config
        check_ts = not log_append and (
            cfg.message_timestamp_before_max_ms < (1 << 63) - 1 or cfg.message_timestamp_after_max_ms < (1 << 63) - 1
        )
        records = batch.records()
        if len(records) != batch.records_count:
            raise InvalidRecordError("record count does not match the batch header")
        errors: list[tuple[int, str]] = []
        for i, r in enumerate(records):
            if compressed and r.offset - batch.base_offset != i:
                raise InvalidRecordError(f"compressed batch has non-consecutive inner offset delta at record {i}")
            if cfg.compact and r.key is None:
                errors.append((i, "compacted topic cannot accept a record without a key"))
            if check_ts and r.timestamp != -1:
                if now - r.timestamp > cfg.message_timestamp_before_max_ms:
                    raise InvalidTimestampError(f"timestamp {r.timestamp} of record {i} is too far in the past "
                                                f"(message.timestamp.before.max.ms={cfg.message_timestamp_before_max_ms})")
                if r.timestamp - now > cfg.message_timestamp_after_max_ms:
                    raise InvalidTimestampError(f"timestamp {r.timestamp} of record {i} is too far in the future "
                                                f"(message.timestamp.after.max.ms={cfg.message_timestamp_after_max_ms})")
        if errors:
            raise RecordValidationError(
                f"{len(errors)} record(s) rejected in a batch to compacted topic {self.topic}", errors)

    def _append(self, records: bytes | bytearray | memoryview, origin: AppendOrigin, leader_epoch: int,
                as_leader: bool) -> LogAppendInfo:
        # A leader assigns offsets in place, so it needs its own mutable copy; a follower only reads
        # (a fetched frame's records go to the segment as they are, without a copy).
        buf = records if isinstance(records, bytearray) or not as_leader else bytearray(records)
        with self._lock:
            self._check_open()
            a = self._analyze(buf, origin, as_leader)
            if a.valid_bytes <= 0:
                return LogAppendInfo(-1, -1, -1, -1, log_start_offset=self.log_start_offset)
            now = self.clock.milliseconds()
            log_append_time = -1
            if as_leader:
                if origin == AppendOrigin.CLIENT and len(a.batches) == 1:
                    dup = self._find_duplicate(a.batches[0])
                    if dup is not None:
                        return dup
                log_append_time = self._validate_as_leader(a, origin, leader_epoch, now)
            else:
                if not a.monotonic:
                    raise OffsetsOutOfOrderError(
                        f"out of order offsets found in append to {self.dir.name}: "
                        f"{[b.last_offset for b in a.batches]}")
                if a.first_offset < self.log_end_offset:
                    raise UnexpectedAppendOffsetError(
                        f"unexpected offset in append to {self.dir.name}: first offset {a.first_offset} is less "
                        f"than the next offset {self.log_end_offset}; first 10 offsets in append: "
                        f"{[b.base_offset for b in a.batches[:10]]}, last offset in append: {a.last_offset}",
                        a.first_offset, a.last_offset)
            if a.valid_bytes > self.config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"message batch size is {a.valid_bytes} bytes in append to partition {self.dir.name} which "
                    f"exceeds the maximum configured segment size of {self.config.segment_bytes}")
            pending = [self.producer_state.prepare_append(b, origin) for b in a.batches
                       if b.has_producer_id]
            segment = self._maybe_roll(a.valid_bytes, a.first_offset, a.last_offset, a.max_timestamp)
            data = memoryview(buf)[: a.valid_bytes]
            segment.append(a.last_offset, a.max_timestamp, a.shallow_offset_of_max_timestamp, data)
            cache = self.leader_epoch_cache
            for b in a.batches:
                epoch = b.partition_leader_epoch
                if epoch >= 0 and epoch != cache.latest_epoch:  # same epoch at a higher offset: a no-op assign
                    cache.assign(epoch, b.base_offset)
            self._update_log_end_offset(a.last_offset + 1, segment)
            for batch, p in zip((b for b in a.batches if b.has_producer_id), pending, strict=True):
                completed = self.producer_state.complete_append(p, batch.base_offset, batch.last_offset)
                if completed is not None:
                    if completed.is_aborted:
                        from kafkalite.storage.txn_index import AbortedTxn

                        segment.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                            completed.last_offset,
                                                            self.producer_state.last_stable_offset(completed)))
                    self.producer_state.complete_txn(completed)
            self.producer_state.update_map_end_offset(a.last_offset + 1)
            if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
                self._flush_up_to(self.log_end_offset)
            return LogAppendInfo(
                a.first_offset, a.last_offset, a.max_timestamp, a.shallow_offset_of_max_timestamp,
                log_append_time, self.log_start_offset, a.records_count, a.valid_bytes, len(a.batches),
                last_leader_epoch=a.batches[-1].partition_leader_epoch,
            )

    def _find_duplicate(self, batch: RecordBatch) -> LogAppendInfo | None:
        if not batch.has_producer_id:
            return None
        meta = self.producer_state.find_duplicate(batch)
        if meta is None:
            return None
        first = meta.last_offset - meta.offset_delta
        log.debug("%s: duplicate batch of producer %d (sequences %d..%d) answered with offsets %d..%d",
                  self.dir.name, batch.producer_id, batch.base_sequence, batch.last_sequence, first, meta.last_offset)
        return LogAppendInfo(first, meta.last_offset, meta.timestamp, meta.last_offset,
                             log_start_offset=self.log_start_offset, records_count=batch.records_count,
                             duplicate=True)

    # --- roll ---------------------------------------------------------------------------------------

    def _maybe_roll(self, messages_size: int, first_offset: int, last_offset: int, max_timestamp: int) -> LogSegment:
        segment = self.active_segment
        if segment.roll_needed(self._max_segment_ms, self.config.segment_bytes, max_timestamp, last_offset,
                               messages_size, self.clock.milliseconds()):
            log.debug("%s: rolling new segment at offset %d (segment size %d, append %d bytes)", self.dir.name,
                      first_offset, segment.size, messages_size)
            return self.roll(first_offset)
        return segment

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected, LEO) and flush the old ones in the background."""
        with self._lock:
            self._check_open()
            new_offset = max(expected_next_offset or 0, self.log_end_offset)
            active = self.active_segment
            existing = self.segments.get(new_offset)
            if existing is not None:
                if existing is active and active.size == 0:
                    log.warning("%s: trying to roll a new segment at %d over an empty active segment; replacing it",
                                self.dir.name, new_offset)
                    del self.segments[new_offset]
                    self._async_delete([active])
                else:
                    raise LogError(f"trying to roll a new log segment for {self.dir.name} with start offset "
                                   f"{new_offset}, which already exists")
            elif new_offset < active.base_offset:
                raise LogError(f"trying to roll a new log segment for {self.dir.name} with start offset "
                               f"{new_offset} lower than the active segment's base offset {active.base_offset}")
            else:
                for path in (names.log_file(self.dir, new_offset), names.offset_index_file(self.dir, new_offset),
                             names.time_index_file(self.dir, new_offset), names.txn_index_file(self.dir, new_offset)):
                    if path.exists():
                        log.warning("%s: deleting leftover file %s before roll", self.dir.name, path.name)
                        path.unlink()
                if existing is None:
                    active.on_become_inactive_segment()
            segment = self._new_segment(new_offset)
            self.segments[new_offset] = segment
            self._update_log_end_offset(self.log_end_offset)
            self.producer_state.update_map_end_offset(new_offset)
            # No fsync under the lock (it held up the appends behind it for as long as the disk took to make room
            # in the journal beside the rolled segment's writeback): the snapshot is made durable by the flush
            # below, before the recovery point passes it, as Kafka's UnifiedLog.roll does (takeSnapshot(false)).
            # A crash before then can leave it torn; the loader deletes a corrupt snapshot, replays from an older.
            snapshot = self.producer_state.take_snapshot(sync=False)
            self._schedule("flush-log", lambda: self._flush_up_to(new_offset, snapshot=snapshot), 0)
            log.info("%s: rolled new log segment at offset %d", self.dir.name, new_offset)
            return segment

    # --- flush --------------------------------------------------------------------------------------

    def flush(self, include_active: bool = False) -> None:
        """Fsync everything below the active segment (or up to the LEO) and advance the recovery point."""
        with self._lock:
            offset = self.log_end_offset if include_active else self.active_segment.base_offset
        self._flush_up_to(offset, inclusive=include_active)

    def _flush_up_to(self, offset: int, inclusive: bool = False, snapshot: Path | None = None) -> None:
        """Fsync the segments holding [recovery point, offset) (or through `offset` when inclusive, which
        reaches the empty active segment too), then move the recovery point to `offset`.

        The fsyncs run outside the log's lock, as in Kafka's UnifiedLog.flush (only marking the flush takes
        the lock): the flush a roll schedules writes out a whole segment (~0.5 s for 256 MiB here), and the
        event loop's appends and reads take the same lock, so a broker stalled that long on every roll.
        A truncation or close meanwhile makes the flush moot: the recovery point is then left alone. `snapshot`:
        a producer snapshot the roll wrote without fsync, synced first (gone meanwhile: nothing to sync)."""
        if snapshot is not None:
            fsync_file_if_exists(snapshot)
        with self._lock:
            flush_offset = offset + 1 if inclusive else offset
            if self._closed or flush_offset <= self.recovery_point:
                return
            segments = self._segments_overlapping(self.recovery_point, flush_offset)
            new_dir_entries = any(seg.base_offset >= self.recovery_point for seg in segments)
            generation = self._truncations
        try:
            self.leader_epoch_cache.sync()  # durable before the recovery point passes its newest entries
            for seg in segments:
                seg.flush()
            if new_dir_entries:
                fsync_dir(self.dir)
        except (OSError, ValueError):
            with self._lock:
                if self._closed or self._truncations != generation or \
                        any(self.segments.get(seg.base_offset) is not seg for seg in segments):
                    return  # closed, truncated or deleted while being flushed: nothing to mark
            raise
        with self._lock:
            if self._closed or self._truncations != generation:
                return
            self.recovery_point = max(self.recovery_point, offset)
            self.last_flush_time = self.clock.milliseconds()

    def _segments_overlapping(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Segments holding offsets in [from, to): the floor segment of `from` and every later one below `to`."""
        keys = self.segments.keys()
        i = max(0, self.segments.bisect_right(from_offset) - 1)
        return [self.segments[k] for k in keys[i:] if k < to_offset]

    # --- read ---------------------------------------------------------------------------------------

    def read(self, start_offset: int, max_length: int, isolation: FetchIsolation = FetchIsolation.LOG_END,
             min_one_message: bool = True) -> FetchDataInfo:
        """Batch-aligned bytes from the batch holding `start_offset`, up to the isolation's bound."""
        with self._lock:
            self._check_open()
            if start_offset < self.log_start_offset:
                raise OffsetOutOfRangeError(
                    f"received request for offset {start_offset} for partition {self.dir.name}, "
                    f"but we only have log segments starting from offset {self.log_start_offset}")
            if isolation == FetchIsolation.LOG_END:
                bound = self._leo
            elif isolation == FetchIsolation.HIGH_WATERMARK:
                bound = self._fetch_high_watermark_metadata()
            else:
                if self.read_only:
                    raise LogError(f"log {self.dir} is open read-only: read_committed needs the writer's last "
                                   "stable offset; read with FetchIsolation.LOG_END or HIGH_WATERMARK")
                lso = self.last_stable_offset
                bound = self._fetch_high_watermark_metadata() if lso == self.high_watermark else \
                    self._convert_to_offset_metadata(lso)
            info = self._read_local(start_offset, max_length, bound, min_one_message)
            if isolation == FetchIsolation.TXN_COMMITTED and info.size > 0:
                info.aborted_transactions = self._collect_aborted(start_offset, info)
            return info

    def _read_local(self, start_offset: int, max_length: int, bound: LogOffsetMetadata,
                    min_one_message: bool) -> FetchDataInfo:
        leo = self._leo
        floor_index = self.segments.bisect_right(start_offset) - 1
        if start_offset > leo.message_offset or floor_index < 0:
            raise OffsetOutOfRangeError(
                f"received request for offset {start_offset} for partition {self.dir.name}, but we only have "
                f"log segments upto {leo.message_offset}")
        if start_offset == bound.message_offset:
            return FetchDataInfo(bound)
        if start_offset > bound.message_offset:
            return FetchDataInfo(self._convert_to_offset_metadata(start_offset))
        keys = self.segments.keys()
        for base in keys[floor_index:]:
            segment = self.segments[base]
            if base < bound.segment_base_offset:
                max_position: int | None = segment.size
            elif base == bound.segment_base_offset and not bound.message_offset_only():
                max_position = bound.relative_position_in_segment
            else:
                max_position = None
            info = segment.read(start_offset, max_length, max_position, min_one_message)
            if info is not None:
                return info
        return FetchDataInfo(leo)

    def _collect_aborted(self, start_offset: int, info: FetchDataInfo) -> list:
        meta = info.fetch_offset_metadata
        segment = self.segments[meta.segment_base_offset]
        upper = segment.fetch_upper_bound_offset(meta, info.size)
        if upper is None:
            nxt = self.segments.bisect_right(segment.base_offset)
            upper = self.segments.keys()[nxt] if nxt < len(self.segments) else self.log_end_offset
        out = []
        for seg in self.segments.values()[self.segments.index(segment.base_offset):]:
            txns, complete = seg.collect_aborted_txns(start_offset, upper)
            out.extend(txns)
            if complete:
                break
        return out

    def batches(self, start_offset: int | None = None, isolation: FetchIsolation = FetchIsolation.LOG_END,
                max_bytes: int = 1 << 20) -> Iterator[RecordBatch]:
        """Every batch from `start_offset` (default: log start) up to the isolation bound, in order."""
        offset = self.log_start_offset if start_offset is None else start_offset
        while True:
            info = self.read(offset, max_bytes, isolation, min_one_message=True)
            data = info.tobytes()
            last = None
            for batch in iter_batches(data):
                if batch.last_offset >= offset:
                    yield batch
                last = batch
            if last is None:
                return
            offset = last.last_offset + 1

    # --- offsets by timestamp -----------------------------------------------------------------------

    def fetch_offset_by_timestamp(self, target: int) -> TimestampAndOffset | None:
        """ListOffsets semantics: -2 earliest, -1 latest, -3 max timestamp, else first offset with ts >= target."""
        with self._lock:
            cache = self.leader_epoch_cache
            if target in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                earliest = cache.earliest_entry
                epoch = earliest.epoch if earliest is not None and earliest.start_offset <= self.log_start_offset \
                    else None
                return TimestampAndOffset(-1, self.log_start_offset, epoch)
            if target == LATEST_TIMESTAMP:
                return TimestampAndOffset(-1, self.log_end_offset, cache.latest_epoch)
            if target == MAX_TIMESTAMP:
                return self._max_timestamp_offset()
            for segment in self.segments.values():
                if segment.largest_timestamp >= target:
                    # a segment wholly below the log start (retention has not deleted it yet) finds nothing: go on
                    found = segment.find_offset_by_timestamp(target, self.log_start_offset)
                    if found is not None:
                        return found
            return None

    def _max_timestamp_offset(self) -> TimestampAndOffset | None:
        best = None
        for segment in self.segments.values():
            if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        max_ts = best.max_timestamp_so_far
        position = best.scan_position(best.shallow_offset_of_max_timestamp_so_far)
        for pos, batch in best.log.batches(position):
            if batch.max_timestamp == max_ts:
                epoch = batch.partition_leader_epoch
                for r in batch.records():
                    if r.timestamp == max_ts:
                        return TimestampAndOffset(max_ts, r.offset, epoch if epoch >= 0 else None)
            del pos
        return None

    def maybe_assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        with self._lock:
            self.leader_epoch_cache.assign(epoch, start_offset)

    # --- log start offset and retention ------------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_log_start_offset: int, reason: str = "delete records") -> bool:
        """Move the log start forward (DeleteRecords, retention); segments go at the next retention pass."""
        with self._lock:
            self._check_open()
            if new_log_start_offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot increment the log start offset to {new_log_start_offset} of partition {self.dir.name} "
                    f"since it is larger than the high watermark {self.high_watermark}")
            if new_log_start_offset <= self.log_start_offset:
                return False
            log.info("%s: incrementing log start offset to %d (%s)", self.dir.name, new_log_start_offset, reason)
            self.log_start_offset = new_log_start_offset
            self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
            if self.recovery_point < new_log_start_offset:
                self.recovery_point = new_log_start_offset
            return True

    def delete_old_segments(self) -> int:
        """Apply retention: log-start breach, then size, then time (time and size only with cleanup.policy=delete)."""
        with self._lock:
            self._check_open()
            n = self._delete_matching(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                                      "log start offset breach")
            if self.config.delete:
                n += self._delete_retention_size_breached()
                n += self._delete_retention_ms_breached()
            return n

    def _delete_retention_ms_breached(self) -> int:
        retention = self.config.retention_ms
        if retention < 0:
            return 0
        now = self.clock.milliseconds()
        return self._delete_matching(lambda seg, nxt: now - seg.largest_timestamp > retention,
                                     f"retention time {retention}ms breach")

    def _delete_retention_size_breached(self) -> int:
        retention = self.config.retention_bytes
        size = self.size
        if retention < 0 or size < retention:
            return 0
        diff = size - retention

        def should_delete(seg: LogSegment, nxt: LogSegment | None) -> bool:
            nonlocal diff
            if diff - seg.size >= 0:
                diff -= seg.size
                return True
            return False

        return self._delete_matching(should_delete, f"retention size {retention} bytes breach")

    def _delete_matching(self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str) -> int:
        deletable: list[LogSegment] = []
        segs = list(self.segments.values())
        hw = self.high_watermark
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            is_last_and_empty = nxt is None and seg.size == 0
            if hw >= upper and not is_last_and_empty and predicate(seg, nxt):
                deletable.append(seg)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(self.segments):
            self.roll()
        for seg in deletable:
            del self.segments[seg.base_offset]
        log.info("%s: deleting %d segment(s) (%s): base offsets %s", self.dir.name, len(deletable), reason,
                 [s.base_offset for s in deletable])
        self._async_delete(deletable)
        for seg in deletable:
            self._async_delete_snapshot(seg.base_offset)
        self.maybe_increment_log_start_offset(self.segments.peekitem(0)[0], "segment deletion")
        return len(deletable)

    def _async_delete(self, segments: list[LogSegment]) -> None:
        """Rename to `.deleted` now, remove after file.delete.delay.ms (readers may still hold the files)."""
        for seg in segments:
            seg.change_file_suffixes("", names.DELETED_SUFFIX)

        def delete() -> None:
            for seg in segments:
                seg.close_handlers()
                seg.delete_if_exists()

        self._schedule("delete-file", delete, self.config.file_delete_delay_ms)

    def _async_delete_snapshot(self, offset: int) -> None:
        path = self.producer_state.rename_snapshot_for_deletion(offset)
        if path is not None:
            self._schedule("delete-producer-snapshot", lambda: path.unlink(missing_ok=True),
                           self.config.file_delete_delay_ms)

    def _schedule(self, name: str, fn: Callable[[], None], delay_ms: int) -> None:
        if self.scheduler is None:
            fn()
        else:
            self.scheduler.schedule(name, fn, delay_ms)

    # --- compaction support (used by the log cleaner) -------------------------------------------------

    def log_segments(self, from_offset: int = 0, to_offset: int | None = None) -> list[LogSegment]:
        """Kafka's logSegments(from, to): the segments holding offsets in [from, to), oldest first, as a
        list taken under the lock (the cleaner walks it while appends roll new segments)."""
        with self._lock:
            if to_offset is None:
                return list(self.segments.values())
            if to_offset <= from_offset:
                return []
            return self._segments_overlapping(from_offset, to_offset)

    def non_active_log_segments_from(self, from_offset: int) -> list[LogSegment]:
        with self._lock:
            active = self.active_segment.base_offset
            return [] if from_offset > active else self._segments_overlapping(from_offset, active)

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """producer id -> (offset of its last data batch, or None; its epoch): batches the cleaner keeps."""
        with self._lock:
            return {pid: (e.last_data_offset if e.last_data_offset >= 0 else None, e.producer_epoch)
                    for pid, e in self.producer_state.active_producers.items()}

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list:
        """Aborted transactions overlapping [log start, upper bound), searched from the segment holding
        `start_offset` on until an index entry proves the search complete (Kafka's UnifiedLog method)."""
        with self._lock:
            i = max(0, self.segments.bisect_right(start_offset) - 1)
            out = []
            for seg in self.segments.values()[i:]:
                txns, complete = seg.collect_aborted_txns(self.log_start_offset, upper_bound_offset)
                out.extend(txns)
                if complete:
                    break
            return out

    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment],
                         old_sizes: list[int] | None = None) -> None:
        """Swap cleaned segments in for the segments they were made from, safe against a crash at any step.

        The order is Kafka's, and the loader finishes it after a crash: rename the new segments'
        files `.cleaned` -> `.swap` (highest base first); put them in the segment map; rename the old
        segments `.deleted` (removed after file.delete.delay.ms); rename `.swap` -> final names; fsync
        the directory. A crash before every file is `.swap` leaves the old segments intact (the
        loader deletes `.cleaned` files and the swaps beside them); after that, the loader deletes
        whatever old files the swaps cover and completes the renames.

        Unlike Kafka, an old segment that is no longer in the map, or whose size is not `old_sizes`
        (what the cleaner read), means the log was truncated or trimmed while it was being cleaned:
        the swap is refused (LogError) and the caller drops its cleaned segments.
        """
        with self._lock:
            self._check_open()
            for i, seg in enumerate(old_segments):
                if (self.segments.get(seg.base_offset) is not seg or seg.has_suffix(names.DELETED_SUFFIX)
                        or (old_sizes is not None and seg.size != old_sizes[i])):
                    raise LogError(f"{self.dir.name}: segment {seg.base_offset} changed while being cleaned")
            new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
            old_sorted = sorted(old_segments, key=lambda s: s.base_offset)
            for seg in reversed(new_sorted):
                seg.change_file_suffixes(names.CLEANED_SUFFIX, names.SWAP_SUFFIX)
            for seg in reversed(new_sorted):
                self.segments[seg.base_offset] = seg
            new_bases = {s.base_offset for s in new_sorted}
            for seg in old_sorted:
                if seg.base_offset not in new_bases:
                    del self.segments[seg.base_offset]
                self._async_delete([seg])
            for seg in new_sorted:
                seg.change_file_suffixes(names.SWAP_SUFFIX, "")
            fsync_dir(self.dir)
            for seg in old_sorted:
                if seg.base_offset not in new_bases:
                    self._async_delete_snapshot(seg.base_offset)

    # --- truncation ---------------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at or above `target_offset` (a follower diverging from its leader)."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate partition {self.dir.name} to a negative offset ({target_offset})")
        with self._lock:
            self._check_open()
            if target_offset >= self.log_end_offset:
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return False
            log.info("%s: truncating to offset %d", self.dir.name, target_offset)
            self._truncations += 1
            if self.segments.peekitem(0)[0] > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            doomed = [s for b, s in self.segments.items() if b > target_offset]
            for seg in doomed:
                del self.segments[seg.base_offset]
            if doomed:
                self._async_delete(doomed)
            self.active_segment.truncate_to(target_offset)
            self._update_log_end_offset(target_offset)
            self.recovery_point = min(self.recovery_point, target_offset)
            self.leader_epoch_cache.truncate_from_end(target_offset)
            self.log_start_offset = min(self.log_start_offset, target_offset)
            self._rebuild_producer_state(target_offset)
            if self.high_watermark >= self.log_end_offset:
                self._hw = self._leo
            return True

    def truncate_fully_and_start_at(self, new_offset: int, log_start_offset: int | None = None) -> None:
        """Drop every segment and start empty at `new_offset` (a follower far behind its leader's log start)."""
        with self._lock:
            self._check_open()
            log.info("%s: truncating fully and starting at offset %d", self.dir.name, new_offset)
            self._truncations += 1
            doomed = list(self.segments.values())
            self.segments.clear()
            self._async_delete(doomed)
            self.segments[new_offset] = self._new_segment(new_offset)
            self._leo = LogOffsetMetadata(new_offset, new_offset, 0)
            self.recovery_point = new_offset
            self.leader_epoch_cache.clear()
            self.producer_state.truncate_fully_and_start_at(new_offset)
            self.log_start_offset = new_offset if log_start_offset is None else log_start_offset
            self._hw = self._leo

    def _rebuild_producer_state(self, last_offset: int) -> None:
        rebuild_producer_state(self.producer_state, self.segments, self.log_start_offset, self.clock, last_offset,
                               reload_from_clean_shutdown=False)

    # --- lifecycle ----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogError(f"log {self.dir} is closed")

    def close(self, flush: bool = True, *, snapshot: bool = True) -> None:
        """Flush (unless told not to), snapshot producer state and close every segment (trimming indexes).

        `snapshot=False` is for a recovery worker: the broker opens the log next with `closed_without_snapshot`
        and replays the batches after the newest snapshot left (see `recovery_workers._recover_one`).
        """
        with self._lock:
            if self._closed:
                return
            if self.read_only:
                self.close_handlers()
                return
            try:
                if flush:
                    self.flush(include_active=True)
                if snapshot:
                    self.producer_state.take_snapshot()
                for seg in self.segments.values():
                    seg.close()
                self._closed = True
            finally:
                self._release_dir_locks()

    def close_handlers(self) -> None:
        """Release file handles without flushing or trimming (the directory is about to be renamed or is gone)."""
        with self._lock:
            for seg in self.segments.values():
                seg.close_handlers()
            self._closed = True
            self._release_dir_locks()

    def delete(self) -> None:
        """Remove the whole partition directory."""
        with self._lock:
            self.close_handlers()
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log({self.dir}, log_start_offset={self.log_start_offset}, log_end_offset={self.log_end_offset}, "
                f"high_watermark={self.high_watermark}, segments={len(self.segments)})")


def _read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id of partition.metadata, None when there is none; a damaged file is named and ignored (the
    broker writes a new one), as before this was read at load."""
    path = os.path.join(directory, PARTITION_METADATA_FILE)
    try:
        data = read_small_file(path)
    except FileNotFoundError:
        return None
    try:
        return decode_partition_metadata(data, path)
    except CheckpointError as exc:
        log.warning("%s; a new partition.metadata is written", exc)
        return None


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "CorruptRecordError",
    "FetchIsolation",
    "Log",
    "LogAppendInfo",
    "SegmentMap",
]
