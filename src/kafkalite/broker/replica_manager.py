"""Partitions as the broker serves them (Kafka's ReplicaManager + Partition, for one broker).

The request handlers speak in topic names and partition numbers; this layer turns them into Log calls and
Kafka's per-partition outcomes (offsets, watermarks, error codes). With one broker the in-sync replica set
is the broker itself, so the high watermark follows the log end offset after every append (Kafka's
maybeIncrementLeaderHW with ISR = {leader}); acks=all therefore completes with the local append. The
replication layer will replace exactly these decisions.

Everything here runs on the broker's event loop; Log calls are short (page-cache writes and index
lookups), as in Kafka's request handler threads. The exception is creating partitions (a few ms each, so
thousands would stall every client): that runs in chunks on a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.metadata import INTERNAL_TOPICS, MetadataStore, TopicInfo, write_partition_topic_id
from kafkalite.broker.purgatory import Purgatory
from kafkalite.errors import (
    FencedLeaderEpochError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaliteError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from kafkalite.manager.log_manager import (
    FDS_PER_PARTITION,
    LogManager,
    descriptor_advice,
    is_descriptor_exhaustion,
    open_descriptors,
)
from kafkalite.protocol import FileRegion
from kafkalite.records.batch import iter_batches
from kafkalite.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkalite.storage.file_records import FileSlice
from kafkalite.storage.log import FetchIsolation, Log
from kafkalite.storage.log_config import LogConfig
from kafkalite.storage.producer_state import AppendOrigin

log = logging.getLogger("kafkalite.broker")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
UNKNOWN_ERROR = -1
# Kafka refuses a CreateTopics/CreatePartitions that would create more than this many partitions
# (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH, POLICY_VIOLATION): one request must not be able to
# monopolise the broker.
MAX_PARTITIONS_PER_REQUEST = 10_000
CREATE_CHUNK = 100  # partitions per step of a creation, between which a deletion of the topic is seen
CREATE_THREADS = 4  # threads creating one chunk: a new log is mostly fsync waits, which overlap
DESCRIPTOR_HEADROOM = 128  # descriptors kept free for connections, segment rolls and checkpoint files


def error_code_of(exc: BaseException) -> int:
    return exc.error_code if isinstance(exc, KafkaliteError) else UNKNOWN_ERROR


@dataclass(slots=True)
class PartitionRead:
    """One partition's part of a fetch, before it becomes a response entry."""

    topic: str
    partition: int
    error: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: FileSlice | bytes = b""
    aborted: list[dict[str, int]] | None = None
    diverging: tuple[int, int] | None = None

    @property
    def size(self) -> int:
        return len(self.records)


def _check_one_batch(records: bytes | memoryview | None) -> bytes | memoryview:
    """ProduceRequest.validateRecords (v3+): exactly one complete batch per partition, else INVALID_RECORD.
    Checked on the frame before the log sees it, so a truncated batch is never taken for an empty append.
    Returns the batch (null records have none, so never get past here)."""
    data = b"" if records is None else records
    n = len(data)
    if n >= 12 and int.from_bytes(data[8:12], "big", signed=True) + 12 == n:
        return data
    count = sum(1 for _ in iter_batches(data)) if n else 0
    if count != 1:
        raise InvalidRecordError(f"Produce requests with version 3 or later must have exactly one record batch "
                                 f"per partition; this one has {count} complete batch(es) in {n} bytes")
    return data


class ReplicaManager:
    def __init__(self, config: BrokerConfig, logs: LogManager, metadata: MetadataStore) -> None:
        self.config = config
        self.logs = logs
        self.metadata = metadata
        self.node_id = config.node_id
        self.purgatory = Purgatory()
        self.append_listeners: list[Callable[[str, int], None]] = []
        self._creating: set[str] = set()  # topics whose partitions a CreateTopics/CreatePartitions is making
        self._reserved_partitions = 0  # partitions those requests will still open files for
        self._creator: ThreadPoolExecutor | None = None

    # --- partitions and topics --------------------------------------------------------------------

    def startup(self) -> None:
        """Adopt partition dirs unknown to the metadata, create missing ones, and lead every partition."""
        self.adopt_logs()
        for info in list(self.metadata.topics.values()):
            self._ensure_partitions(info)
        for lg in self.logs.all_logs():
            self._become_leader(lg)

    def adopt_logs(self) -> None:
        """Register logs the metadata doesn't know: dirs from another writer at start-up, or partitions
        created directly on the LogManager (the group coordinator's `__consumer_offsets`)."""
        on_disk: dict[str, list[tuple[int, Any]]] = {}
        for lg in self.logs.all_logs():
            on_disk.setdefault(lg.topic, []).append((lg.partition, lg.dir))
        for name in self.metadata.adopt(on_disk):
            info = self.metadata.topics[name]
            log.info("Registered topic %s found in the data directory (%d partitions)", name, info.partitions)
            for _p, path in on_disk[name]:
                write_partition_topic_id(path, info.topic_id)

    def _become_leader(self, lg: Log) -> None:
        # The only replica is in sync with itself: everything written is committed (Kafka's
        # maybeIncrementLeaderHW over an ISR of one).
        lg.update_high_watermark(lg.log_end_offset)

    def _ensure_partitions(self, info: TopicInfo, partitions: range | None = None) -> None:
        """Create what is missing of `partitions` (all by default); at start-up this finishes a creation
        that a crash cut off, since the metadata is always written before the partition dirs."""
        overrides = info.configs or None
        for p in partitions if partitions is not None else range(info.partitions):
            try:
                if self.logs.get_log(info.name, p) is None and not self.logs.is_offline(info.name, p):
                    created = self.logs.get_or_create_log(info.name, p, overrides)
                    self._become_leader(created)
                lg = self.logs.get_log(info.name, p)
                if lg is not None:
                    write_partition_topic_id(lg.dir, info.topic_id)
            except OSError as exc:
                raise self._io_failed(info.name, p, exc) from exc

    def check_new_partitions(self, count: int) -> None:
        """Refuse, before anything is written, a request that would create more partitions than Kafka allows
        in one request or than the broker's open-file limit can keep open (POLICY_VIOLATION)."""
        if count > MAX_PARTITIONS_PER_REQUEST:
            raise PolicyViolationError(f"Excessively large number of partitions per request: {count} requested, "
                                       f"at most {MAX_PARTITIONS_PER_REQUEST} may be created by one request "
                                       "(Kafka's limit); split it into several requests")
        used, limit = open_descriptors()
        need = (self._reserved_partitions + count) * FDS_PER_PARTITION
        if used + need + DESCRIPTOR_HEADROOM > limit:
            pending = self._reserved_partitions
            also = f"; {pending} partitions of other requests are still being created" if pending else ""
            raise PolicyViolationError(
                f"Creating {count} partitions needs about {count * FDS_PER_PARTITION} more open files, but the "
                f"broker has {used} open of its limit of {limit} (RLIMIT_NOFILE; {DESCRIPTOR_HEADROOM} are kept "
                f"for connections{also}): "
                "raise the broker's open file limit (ulimit -n, or LimitNOFILE= for systemd) and restart it, "
                "or create fewer partitions")

    def validate_topic_configs(self, configs: dict[str, str]) -> LogConfig:
        try:
            return LogConfig.from_props(configs, self.logs.default_config)
        except InvalidConfigError:
            raise
        except (ValueError, TypeError) as exc:
            raise InvalidConfigError(str(exc)) from None

    def _check_new_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        if name in self.metadata.topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if name in self._creating:
            raise TopicAlreadyExistsError(f"Topic '{name}' is still being created or removed; retry later.")
        self.metadata.check_new_name(name)
        if partitions <= 0:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        self.validate_topic_configs(configs)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str], validate_only: bool = False
                     ) -> TopicInfo:
        """Create a topic on the calling thread: for the few partitions of auto-creation; CreateTopics uses
        `create_topic_async`, which keeps the event loop serving while thousands are made."""
        self._check_new_topic(name, partitions, configs)
        self.check_new_partitions(partitions)
        if validate_only:
            return TopicInfo(name, uuid.uuid4(), partitions, configs)
        info = self.metadata.add(name, partitions, configs)
        if configs:
            self.logs.update_topic_config(name, configs)
        try:
            self._ensure_partitions(info)
        except KafkaliteError:
            self._undo_new_partitions(info, range(partitions), drop_topic=True)
            raise
        log.info("Created topic %s with %d partition(s)%s", name, partitions,
                 f" and configs {configs}" if configs else "")
        return info

    async def create_topic_async(self, name: str, partitions: int, configs: dict[str, str],
                                 validate_only: bool = False, *, checked: bool = False) -> TopicInfo:
        """CreateTopics: metadata first (so a crash is finished at the next start), then the partition dirs
        in chunks on a worker thread; a failure removes what was made. `checked`: the caller already ran
        check_new_partitions for the whole request."""
        self._check_new_topic(name, partitions, configs)
        if not checked:
            self.check_new_partitions(partitions)
        if validate_only:
            return TopicInfo(name, uuid.uuid4(), partitions, configs)
        info = self.metadata.add(name, partitions, configs)
        if configs:
            self.logs.update_topic_config(name, configs)
        started = time.perf_counter()
        await self._create_in_chunks(info, range(partitions), drop_topic=True)
        log.info("Created topic %s with %d partition(s)%s in %.0f ms", name, partitions,
                 f" and configs {configs}" if configs else "", (time.perf_counter() - started) * 1000)
        return info

    async def _create_in_chunks(self, info: TopicInfo, partitions: range, *, drop_topic: bool) -> None:
        """Chunks of CREATE_CHUNK partitions, each split over CREATE_THREADS worker threads: a new log
        costs a few fsyncs, which overlap across threads while the event loop keeps serving."""
        loop = asyncio.get_running_loop()
        if self._creator is None:
            self._creator = ThreadPoolExecutor(CREATE_THREADS, thread_name_prefix="partition-creation")
        self._creating.add(info.name)
        self._reserved_partitions += len(partitions)
        try:
            for lo in range(partitions.start, partitions.stop, CREATE_CHUNK):
                chunk = range(lo, min(lo + CREATE_CHUNK, partitions.stop))
                if self.metadata.get(info.name) is not info:
                    raise UnknownTopicOrPartitionError(f"Topic '{info.name}' was deleted while its partitions "
                                                       "were being created")
                parts = [chunk[i::CREATE_THREADS] for i in range(CREATE_THREADS) if chunk[i::CREATE_THREADS]]
                outcomes = await asyncio.gather(
                    *(loop.run_in_executor(self._creator, self._ensure_partitions, info, part) for part in parts),
                    return_exceptions=True)
                failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
                if failed is not None:
                    self._undo_new_partitions(info, partitions, drop_topic=drop_topic)
                    raise failed
                if self.metadata.get(info.name) is not info:  # deleted meanwhile: drop what this chunk made
                    for p in chunk:
                        self.logs.delete_log(info.name, p)
                    raise UnknownTopicOrPartitionError(f"Topic '{info.name}' was deleted while its partitions "
                                                       "were being created")
        finally:
            self._creating.discard(info.name)
            self._reserved_partitions -= len(partitions)

    def _undo_new_partitions(self, info: TopicInfo, partitions: range, *, drop_topic: bool) -> None:
        """A creation failed part-way: remove its partitions (and the topic, when it was new) so the topic
        is as before the request; logged, since a second failure here leaves it for the next start-up."""
        try:
            if self.metadata.get(info.name) is info:
                if drop_topic:
                    self.metadata.remove(info.name)
                else:
                    self.metadata.set_partitions(info.name, partitions.start)
            for p in partitions:
                self.logs.delete_log(info.name, p)
                self.purgatory.wake((info.name, p))
            log.warning("Removed the partitions %d..%d of %s after its creation failed", partitions.start,
                        partitions.stop - 1, info.name)
        except (OSError, KafkaliteError) as exc:
            log.error("Could not remove the partly created partitions of %s (%s); the next start-up completes "
                      "them", info.name, exc)

    async def create_partitions_async(self, name: str, count: int, validate_only: bool = False) -> None:
        info = self.metadata.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        if name in self._creating:
            raise InvalidPartitionsError(f"Topic '{name}' is still being created; retry later.")
        if count <= info.partitions:
            raise InvalidPartitionsError(f"Topic currently has {info.partitions} partitions, which is higher than "
                                         f"or equal to the requested {count}.")
        old = info.partitions
        self.check_new_partitions(count - old)
        if validate_only:
            return
        self.metadata.set_partitions(name, count)
        await self._create_in_chunks(info, range(old, count), drop_topic=False)
        log.info("Increased the partitions of %s from %d to %d", name, old, count)

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.metadata.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        if info.internal:
            raise InvalidTopicError(f"Topic {name} is an internal topic and cannot be deleted")
        self.metadata.remove(name)
        for p in range(info.partitions):
            self.logs.delete_log(name, p)
            self.purgatory.wake((name, p))
        log.info("Deleted topic %s; its partition dirs are renamed *-delete and removed after "
                 "log.segment.delete.delay.ms", name)
        return info

    def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        if name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        self.validate_topic_configs(configs)
        if validate_only:
            return
        self.metadata.set_configs(name, configs)
        self.logs.update_topic_config(name, configs)
        log.info("Updated the configs of topic %s: %s", name, configs or "(all defaults)")

    def get_log(self, topic: str, partition: int) -> Log:
        lg = self.logs.get_log(topic, partition)
        if lg is not None:
            return lg
        info = self.metadata.get(topic)
        if info is not None and self.logs.awaiting_reopen(topic, partition):
            raise KafkaStorageError(f"{topic}-{partition} could not be reopened: the broker is out of file "
                                    "descriptors; raise its open file limit (ulimit -n)")
        if info is not None and 0 <= partition < info.partitions and self.logs.is_offline(topic, partition):
            raise KafkaStorageError(f"the log dir of {topic}-{partition} is offline")
        raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {topic}-{partition}")

    @staticmethod
    def leader_epoch(lg: Log) -> int:
        epoch = lg.latest_epoch
        return 0 if epoch is None or epoch < 0 else epoch

    def check_leader_epoch(self, lg: Log, current_leader_epoch: int) -> None:
        """Kafka's fencing of stale or future leader epochs a client saw in Metadata (-1 = don't check)."""
        if current_leader_epoch < 0:
            return
        ours = self.leader_epoch(lg)
        if current_leader_epoch < ours:
            raise FencedLeaderEpochError(f"leader epoch {current_leader_epoch} is older than {ours}")
        if current_leader_epoch > ours:
            raise UnknownLeaderEpochError(f"leader epoch {current_leader_epoch} is newer than {ours}")

    def _io_failed(self, topic: str, partition: int, exc: OSError) -> KafkaStorageError:
        self.logs.handle_log_dir_failure(topic, partition, exc)  # not for descriptor exhaustion: see there
        self.purgatory.wake((topic, partition))
        if is_descriptor_exhaustion(exc):
            return KafkaStorageError(f"{topic}-{partition}: {descriptor_advice(exc)}")
        return KafkaStorageError(f"I/O error on {topic}-{partition}: {exc}")

    # --- produce ----------------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes | memoryview | None, *,
               internal_allowed: bool = False, origin: AppendOrigin = AppendOrigin.CLIENT) -> dict[str, Any]:
        """Append one partition's batch as leader; the produce response entry, errors included."""
        out: dict[str, Any] = {"index": partition, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                               "log_start_offset": -1, "record_errors": [], "error_message": None}
        try:
            if topic in INTERNAL_TOPICS and not internal_allowed:
                raise InvalidTopicError(f"Cannot append to internal topic {topic}")
            lg = self.get_log(topic, partition)
            batch = _check_one_batch(records)
            try:
                info = lg.append_as_leader(batch, self.leader_epoch(lg), origin)
            except OSError as exc:
                raise self._io_failed(topic, partition, exc) from exc
            if not info.duplicate:
                lg.update_high_watermark(lg.log_end_offset)
                self.purgatory.wake((topic, partition))
                for listener in self.append_listeners:
                    listener(topic, partition)
            out.update(base_offset=info.first_offset, log_append_time_ms=info.log_append_time,
                       log_start_offset=lg.log_start_offset)
        except KafkaliteError as exc:
            out["error_code"] = error_code_of(exc)
            out["error_message"] = str(exc)
            errs = getattr(exc, "record_errors", None)
            if errs:
                out["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in errs]
            log.debug("Produce to %s-%d failed: %s", topic, partition, exc)
        return out

    # --- fetch ------------------------------------------------------------------------------------

    def read_partition(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, *,
                       isolation: FetchIsolation, min_one_message: bool, current_leader_epoch: int = -1,
                       last_fetched_epoch: int = -1) -> PartitionRead:
        r = PartitionRead(topic, partition)
        try:
            lg = self.get_log(topic, partition)
            self.check_leader_epoch(lg, current_leader_epoch)
            r.high_watermark = lg.high_watermark
            r.last_stable_offset = lg.last_stable_offset
            r.log_start_offset = lg.log_start_offset
            if last_fetched_epoch >= 0:
                epoch, end = lg.leader_epoch_cache.end_offset_for(last_fetched_epoch, lg.log_end_offset)
                if epoch != last_fetched_epoch or end < fetch_offset:
                    r.diverging = (epoch, end)
                    return r
            try:
                info = lg.read(fetch_offset, max_bytes, isolation, min_one_message)
            except OSError as exc:
                raise self._io_failed(topic, partition, exc) from exc
            r.records = info.records
            if isolation is FetchIsolation.TXN_COMMITTED:
                r.aborted = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                             for a in info.aborted_transactions or []]
        except KafkaliteError as exc:
            r.error = error_code_of(exc)
            if not isinstance(exc, OffsetOutOfRangeError):
                r.high_watermark = r.last_stable_offset = r.log_start_offset = -1
        return r

    async def fetch(self, wanted: list[tuple[str, int, int, int, int, int]], *, max_wait_ms: int, min_bytes: int,
                    max_bytes: int, isolation: FetchIsolation) -> list[PartitionRead]:
        """Read every (topic, partition, offset, partition_max_bytes, current_epoch, last_fetched_epoch);
        long-poll until `min_bytes` are there, an error shows up, or `max_wait_ms` passes (DelayedFetch)."""
        deadline = time.monotonic() + max(0, max_wait_ms) / 1000
        while True:
            reads = self._read_all(wanted, max_bytes, isolation)
            total = sum(r.size for r in reads)
            remaining = deadline - time.monotonic()
            if (total >= min_bytes or remaining <= 0 or not wanted
                    or any(r.error or r.diverging for r in reads)):
                return reads
            woken = await self.purgatory.wait([(t, p) for t, p, *_ in wanted], remaining)
            if not woken:
                return self._read_all(wanted, max_bytes, isolation)

    def _read_all(self, wanted: list[tuple[str, int, int, int, int, int]], max_bytes: int,
                  isolation: FetchIsolation) -> list[PartitionRead]:
        # Kafka's readFromLog: the response limit shrinks as partitions fill it; only the first partition
        # with data may exceed its limit (min one message), so a large batch can never block a consumer.
        reads = []
        limit = max_bytes
        min_one = True
        for topic, partition, offset, part_max, current_epoch, last_epoch in wanted:
            r = self.read_partition(topic, partition, offset, max(0, min(part_max, limit)), isolation=isolation,
                                    min_one_message=min_one, current_leader_epoch=current_epoch,
                                    last_fetched_epoch=last_epoch)
            if r.size:
                min_one = False
                limit = max(0, limit - r.size)
            reads.append(r)
        return reads

    @staticmethod
    def records_for_wire(records: FileSlice | bytes) -> FileRegion | bytes:
        """The bytes of a read as the server sends them: a dup'd descriptor range for sendfile.

        The descriptor is duplicated so a segment closed by retention while the response is queued can't
        turn the fd number into someone else's file; the server closes it once sent."""
        if isinstance(records, FileSlice) and records.size:
            return FileRegion(os.dup(records.records.fd), records.position, records.size)
        return b""

    # --- offsets ----------------------------------------------------------------------------------

    def list_offset(self, topic: str, partition: int, timestamp: int, *, isolation: FetchIsolation | None,
                    current_leader_epoch: int = -1) -> dict[str, Any]:
        out: dict[str, Any] = {"partition_index": partition, "error_code": 0, "timestamp": -1, "offset": -1,
                               "leader_epoch": -1, "old_style_offsets": []}
        try:
            lg = self.get_log(topic, partition)
            self.check_leader_epoch(lg, current_leader_epoch)
            if isolation is None:  # a replica asks: up to the log end
                last_fetchable = lg.log_end_offset
            elif isolation is FetchIsolation.TXN_COMMITTED:
                last_fetchable = lg.last_stable_offset
            else:
                last_fetchable = lg.high_watermark
            found: tuple[int, int, int] | None
            if timestamp == LATEST_TIMESTAMP:
                found = (-1, last_fetchable, self.leader_epoch(lg))
            elif timestamp == LATEST_TIERED_TIMESTAMP:
                found = (-1, -1, -1)
            else:
                t = EARLIEST_TIMESTAMP if timestamp == EARLIEST_LOCAL_TIMESTAMP else timestamp
                r = lg.fetch_offset_by_timestamp(t)
                found = None if r is None or (t >= 0 and r.offset >= last_fetchable) else (
                    r.timestamp, r.offset, -1 if r.leader_epoch is None else r.leader_epoch)
            if found is not None:
                out.update(timestamp=found[0], offset=found[1], leader_epoch=found[2])
        except KafkaliteError as exc:
            out["error_code"] = error_code_of(exc)
        return out

    def delete_records(self, topic: str, partition: int, offset: int) -> dict[str, Any]:
        out: dict[str, Any] = {"partition_index": partition, "low_watermark": -1, "error_code": 0}
        try:
            if topic in INTERNAL_TOPICS:
                raise InvalidTopicError(f"Cannot delete records of internal topic {topic}")
            lg = self.get_log(topic, partition)
            target = lg.high_watermark if offset == -1 else offset
            if target < 0 or target > lg.high_watermark:
                raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {target} of partition "
                                            f"{topic}-{partition} since it is larger than the high watermark "
                                            f"{lg.high_watermark}")
            lg.maybe_increment_log_start_offset(target, "client delete records request")
            self.purgatory.wake((topic, partition))
            out["low_watermark"] = lg.log_start_offset
        except KafkaliteError as exc:
            out["error_code"] = error_code_of(exc)
        return out

    def end_offset_for_epoch(self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int
                             ) -> dict[str, Any]:
        out: dict[str, Any] = {"partition": partition, "error_code": 0, "leader_epoch": -1, "end_offset": -1}
        try:
            lg = self.get_log(topic, partition)
            self.check_leader_epoch(lg, current_leader_epoch)
            epoch, end = lg.leader_epoch_cache.end_offset_for(leader_epoch, lg.log_end_offset)
            out.update(leader_epoch=epoch, end_offset=end)
        except KafkaliteError as exc:
            out["error_code"] = error_code_of(exc)
        return out

    # --- checkpoints ------------------------------------------------------------------------------

    def checkpoint_high_watermarks(self) -> None:
        """replication-offset-checkpoint per data dir (Kafka's highwatermark-checkpoint task); embedded
        readers such as the Spark source use it to know what is committed."""
        by_dir: dict[Any, dict[tuple[str, int], int]] = {}
        for lg in self.logs.all_logs():
            by_dir.setdefault(lg.dir.parent, {})[(lg.topic, lg.partition)] = lg.high_watermark
        for d in self.logs.dirs:
            if d.offline:
                continue
            try:
                OffsetCheckpointFile(d.path / REPLICATION_OFFSET_CHECKPOINT_FILE).write(by_dir.get(d.path, {}))
            except OSError as exc:
                log.error("Failed to write the high watermark checkpoint in %s: %s", d.path, exc)

    async def run_checkpoints(self, stop: asyncio.Event) -> None:
        interval = self.config.get("replica.high.watermark.checkpoint.interval.ms") / 1000
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if not stop.is_set():  # the shutdown writes the final one
                await asyncio.to_thread(self.checkpoint_high_watermarks)
