"""Partitions as the broker serves them (Kafka's ReplicaManager).

The request handlers speak in topic names and partition numbers; this layer finds the `Partition`
(broker/partition.py, which owns the role, the leader epoch and the commit rule) and turns its outcomes
into Kafka's per-partition response entries (offsets, watermarks, error codes). Every append, a client's
produce or the group coordinator's write to `__consumer_offsets`, goes through `append_records`, so
leadership checks, the commit rule and the wake-ups of parked fetches apply alike. Topic administration
lives in broker/topic_admin.py.

In single-broker mode (`leads_all_local_logs`) this broker is the only replica and leader of every
partition it holds, so the high watermark follows the log end after every append and acks=all completes
with the local append. The cluster's LeaderAndIsr replaces exactly that through Partition.make_leader /
make_follower.

Everything here runs on the broker's event loop; Log calls are short (page-cache writes and index
lookups), as in Kafka's request handler threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.metadata import INTERNAL_TOPICS, MetadataStore
from kafkalite.broker.partition import Partition, PartitionRead
from kafkalite.broker.purgatory import Purgatory
from kafkalite.errors import (
    InvalidRecordError,
    InvalidTopicError,
    KafkaliteError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from kafkalite.manager.log_manager import LogManager, descriptor_advice, is_descriptor_exhaustion
from kafkalite.protocol import FileRegion
from kafkalite.records.batch import iter_batches
from kafkalite.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkalite.storage.file_records import FileSlice
from kafkalite.storage.log import FetchIsolation, Log, LogAppendInfo
from kafkalite.storage.producer_state import AppendOrigin

__all__ = ["PartitionRead", "ReplicaManager", "error_code_of"]

log = logging.getLogger("kafkalite.broker")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
UNKNOWN_ERROR = -1


def error_code_of(exc: BaseException) -> int:
    return exc.error_code if isinstance(exc, KafkaliteError) else UNKNOWN_ERROR


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
    """The broker's partitions by (topic, partition), and the request paths through them."""

    def __init__(self, config: BrokerConfig, logs: LogManager, metadata: MetadataStore) -> None:
        self.config = config
        self.logs = logs
        self.metadata = metadata
        self.node_id = config.node_id
        self.purgatory = Purgatory()
        self.append_listeners: list[Callable[[str, int], None]] = []
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Single-broker mode: this broker leads every partition it holds a log for, including logs made
        # directly on the LogManager (the coordinator's `__consumer_offsets`). A cluster turns this off and
        # sets roles with make_leader / make_follower from LeaderAndIsr.
        self.leads_all_local_logs = True

    # --- partitions -------------------------------------------------------------------------------

    def startup(self) -> None:
        """Single-broker mode: lead every local partition (call after TopicAdmin.startup made them)."""
        for lg in self.logs.all_logs():
            self.lead_locally(lg)

    def lead_locally(self, lg: Log) -> Partition:
        """Make this broker the only replica and leader of `lg`'s partition, at the epoch the log last
        recorded (0 for a new one): what a single broker is for every partition it holds. Safe from the
        partition-creation worker threads (one dict store)."""
        part = Partition.led_alone(lg, self.node_id)
        self.partitions[(lg.topic, lg.partition)] = part
        return part

    def remove_partition(self, topic: str, partition: int) -> None:
        """Forget a partition and delete its log (topic deletion, a failed creation); fetches parked on it
        wake and see it gone."""
        self.partitions.pop((topic, partition), None)
        self.logs.delete_log(topic, partition)
        self.purgatory.wake((topic, partition))

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

    def get_partition(self, topic: str, partition: int) -> Partition:
        """The partition with its current log; UNKNOWN_TOPIC_OR_PARTITION or KAFKA_STORAGE_ERROR when there
        is none. A log reopened by the LogManager (descriptor pressure) is a new object: rebound here."""
        lg = self.get_log(topic, partition)
        part = self.partitions.get((topic, partition))
        if part is None:
            if not self.leads_all_local_logs:
                raise NotLeaderOrFollowerError(f"broker {self.node_id} has no state for {topic}-{partition} "
                                               "yet (no LeaderAndIsr received)")
            return self.lead_locally(lg)
        if part.log is not lg:
            part.log = lg
        return part

    def leader_epoch(self, lg: Log) -> int:
        """The partition epoch of `lg`'s partition, for Metadata (-1 when this broker has no state for it).
        In single-broker mode a log made directly on the LogManager is led from here on, so Metadata and
        the request paths agree on its epoch."""
        part = self.partitions.get((lg.topic, lg.partition))
        if part is None and self.leads_all_local_logs:
            part = self.lead_locally(lg)
        return part.leader_epoch if part is not None else -1

    def io_failed(self, topic: str, partition: int, exc: OSError) -> KafkaStorageError:
        self.logs.handle_log_dir_failure(topic, partition, exc)  # not for descriptor exhaustion: see there
        self.purgatory.wake((topic, partition))
        if is_descriptor_exhaustion(exc):
            return KafkaStorageError(f"{topic}-{partition}: {descriptor_advice(exc)}")
        return KafkaStorageError(f"I/O error on {topic}-{partition}: {exc}")

    # --- produce ----------------------------------------------------------------------------------

    def append_records(self, topic: str, partition: int, batch: bytes | bytearray | memoryview, *,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """The one append path, for produce and the group coordinator alike: leadership, the leader epoch,
        the commit rule, then wake-ups of parked fetches and append listeners. Raises KafkaliteError
        (an I/O failure as KAFKA_STORAGE_ERROR, after taking the log dir offline)."""
        return self._append_to(self.get_partition(topic, partition), batch, origin)

    def _append_to(self, part: Partition, batch: bytes | bytearray | memoryview, origin: AppendOrigin
                   ) -> LogAppendInfo:
        tp = (part.topic, part.partition)
        try:
            info, _hw_moved = part.append_records_to_leader(batch, origin)
        except OSError as exc:
            raise self.io_failed(part.topic, part.partition, exc) from exc
        if not info.duplicate:
            # Woken on every append, not only when the HW moves: a replica fetch reads to the log end.
            self.purgatory.wake(tp)
            for listener in self.append_listeners:
                listener(*tp)
        return info

    def append(self, topic: str, partition: int, records: bytes | memoryview | None, *,
               internal_allowed: bool = False, origin: AppendOrigin = AppendOrigin.CLIENT) -> dict[str, Any]:
        """Append one partition's batch as leader; the produce response entry, errors included."""
        out: dict[str, Any] = {"index": partition, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                               "log_start_offset": -1, "record_errors": [], "error_message": None}
        try:
            if topic in INTERNAL_TOPICS and not internal_allowed:
                raise InvalidTopicError(f"Cannot append to internal topic {topic}")
            part = self.get_partition(topic, partition)
            batch = _check_one_batch(records)
            info = self._append_to(part, batch, origin)
            out.update(base_offset=info.first_offset, log_append_time_ms=info.log_append_time,
                       log_start_offset=part.log.log_start_offset)
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
        try:
            part = self.get_partition(topic, partition)
            try:
                return part.read(fetch_offset, max_bytes, isolation=isolation, min_one_message=min_one_message,
                                 current_leader_epoch=current_leader_epoch, last_fetched_epoch=last_fetched_epoch)
            except OSError as exc:
                raise self.io_failed(topic, partition, exc) from exc
        except KafkaliteError as exc:
            return PartitionRead(topic, partition, error=error_code_of(exc))

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
            part = self.get_partition(topic, partition)
            lg = part.leader_log(current_leader_epoch)
            if isolation is None:  # a replica asks: up to the log end
                last_fetchable = lg.log_end_offset
            elif isolation is FetchIsolation.TXN_COMMITTED:
                last_fetchable = lg.last_stable_offset
            else:
                last_fetchable = lg.high_watermark
            found: tuple[int, int, int] | None
            if timestamp == LATEST_TIMESTAMP:
                found = (-1, last_fetchable, part.leader_epoch)
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
            lg = self.get_partition(topic, partition).leader_log()
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
            lg = self.get_partition(topic, partition).leader_log(current_leader_epoch)
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
