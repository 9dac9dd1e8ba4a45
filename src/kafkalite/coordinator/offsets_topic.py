"""`__consumer_offsets` on disk: the coordinator's writes and the scan that rebuilds its state at start-up.

Each group lives in one partition (`coordinator_key_partition`). A write is one record batch holding all
the records of one operation (a commit of many partitions, a group deletion with all its offset
tombstones), so it lands atomically, as Kafka's coordinator runtime writes it: magic 2, CreateTime =
now, no producer id, compressed per `offsets.topic.compression.codec`.

The coordinator builds batches; it does not append them itself. A broker passes an `OffsetsWriter` that
appends through its ReplicaManager like an acks=all produce (leadership check, leader epoch,
min.insync.replicas, commit rule, wake-ups of parked fetches), so the high watermark of
`__consumer_offsets` moves by the same rule as every other topic's, and that ReplicaManager as `replicas`.
Without both (coordinator tests, offline tools) the partitions are led by this process alone.
Reading back (the load at start-up) never moves a watermark.

Kafka's coordinator appends with acks=-1 and answers only once the partition's high watermark covers
the write (offsets.commit.timeout.ms at most). `append` returns a `PendingWrite`; `committed` says at
once whether the HW already covers it (always so with a single replica), else `wait_committed` awaits
`replicas.wait_for_commit` (the broker's acks=all purgatory).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from kafkalite.clock import Clock
from kafkalite.coordinator.config import OFFSETS_TOPIC, CoordinatorConfig, coordinator_key_partition
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol.error_codes import ErrorCode
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.records.compression import CompressionType
from kafkalite.records.control import ControlRecordType, parse_control_type
from kafkalite.replication.partition import Partition
from kafkalite.storage.log import FetchIsolation, Log
from kafkalite.storage.producer_state import AppendOrigin

log = logging.getLogger("kafkalite.coordinator")

RecordKV = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class LoadedRecord:
    """One data record read back, with what transactional replay needs (producer id, -1 = none)."""

    offset: int
    producer_id: int
    transactional: bool
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A transaction end marker: the producer's pending transactional records apply (commit) or vanish."""

    offset: int
    producer_id: int
    commit: bool


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """One batch appended to `__consumer_offsets` partition `partition`: committed once the partition's
    high watermark reaches `required_offset` (its last offset + 1)."""

    partition: int
    required_offset: int


class OffsetsWriter(Protocol):
    """Appends one batch to a `__consumer_offsets` partition as its leader and returns the batch's base
    offset; raises KafkaliteError (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR, ...) or OSError."""

    def __call__(self, partition: int, batch: bytearray) -> int: ...


class CommitWaiter(Protocol):
    """What the coordinator waits on after an append: the broker's ReplicaManager.wait_for_commit (its
    acks=all purgatory), returning an error code (NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT)."""

    async def wait_for_commit(self, topic: str, partition: int, required_offset: int, timeout_ms: int) -> int: ...


class OffsetsTopic:
    def __init__(self, log_manager: LogManager, config: CoordinatorConfig, clock: Clock,
                 writer: OffsetsWriter | None = None, replicas: CommitWaiter | None = None) -> None:
        """`writer` and `replicas` come together (a broker: appends through its ReplicaManager, waits on
        it) or not at all (`leads_alone`: this process is the only replica of every partition, whose HW
        follows its log end on append). A writer without a waiter would answer writes its followers may
        never get, so it is refused."""
        if (writer is None) != (replicas is None):
            raise ValueError("OffsetsTopic needs both an OffsetsWriter and the ReplicaManager it appends through "
                             "(replicas), or neither (this process leads __consumer_offsets alone)")
        self.log_manager = log_manager
        self.replicas = replicas
        self.leads_alone = replicas is None
        self.config = config
        self.clock = clock
        self.writer: OffsetsWriter = writer if writer is not None else self._append_alone
        self._alone: dict[int, Partition] = {}
        self.num_partitions = self._existing_partition_count() or config.offsets_topic_num_partitions
        if self.num_partitions != config.offsets_topic_num_partitions:
            # As Kafka: once the topic exists its partition count decides, or groups would move.
            log.warning("%s has %d partitions on disk; offsets.topic.num.partitions=%d is ignored", OFFSETS_TOPIC,
                        self.num_partitions, config.offsets_topic_num_partitions)
        self._apply_topic_configs()

    def _apply_topic_configs(self) -> None:
        """Make the topic compacted with Kafka's segment size, also for partitions loaded from disk before
        the coordinator existed (they open with the broker defaults). Overrides already set win."""
        current = dict(self.log_manager.topic_configs.get(OFFSETS_TOPIC, {}))
        wanted = {**self.config.offsets_topic_configs(), **current}
        if wanted != current:
            self.log_manager.update_topic_config(OFFSETS_TOPIC, wanted)

    def _existing_partition_count(self) -> int:
        found = [p for (t, p) in self.log_manager.logs if t == OFFSETS_TOPIC]
        return max(found) + 1 if found else 0

    def partition_for(self, group_id: str) -> int:
        return coordinator_key_partition(group_id, self.num_partitions)

    def log(self, partition: int) -> Log:
        return self.log_manager.get_or_create_log(OFFSETS_TOPIC, partition)  # topic configs set in __init__

    def ensure_created(self) -> None:
        """Create every partition (what Kafka does on the first FindCoordinator for a group)."""
        for p in range(self.num_partitions):
            self.log(p)

    def append(self, partition: int, records: list[RecordKV]) -> int:
        """Append one batch; returns its base offset. Storage errors propagate."""
        return self.write(partition, records).required_offset - len(records)

    def write(self, partition: int, records: list[RecordKV]) -> PendingWrite:
        """Append one batch (as leader, through the writer); what must commit before it counts."""
        if not records:
            return PendingWrite(partition, 0)
        now = self.clock.milliseconds()
        batch = build_batch([SimpleRecord(k, v, now) for k, v in records],
                            compression=CompressionType(self.config.offsets_topic_compression_codec))
        if self.log_manager.get_log(OFFSETS_TOPIC, partition) is None:
            # The topic comes into being whole, as in Kafka: the partition count on disk is what decides
            # where each group lives after a restart, so it must never be partial.
            self.ensure_created()
        base = self.writer(partition, batch)
        return PendingWrite(partition, base + len(records))  # one record per offset, no gaps

    def committed(self, write: PendingWrite) -> bool:
        """True when the partition's high watermark covers the write (no need to wait)."""
        lg = self.log_manager.get_log(OFFSETS_TOPIC, write.partition)
        return lg is not None and lg.high_watermark >= write.required_offset

    async def wait_committed(self, write: PendingWrite) -> ErrorCode:
        """Wait until the write is committed (acks=all): NONE, or the error Kafka's delayed produce gives
        (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT after
        offsets.commit.timeout.ms)."""
        if self.committed(write):
            return ErrorCode.NONE
        if self.replicas is None:
            # led alone: the HW followed the append, so only a log lost since (storage) can leave it behind
            log.error("%s-%d is led by this process alone, yet its high watermark is below %d", OFFSETS_TOPIC,
                      write.partition, write.required_offset)
            return ErrorCode.KAFKA_STORAGE_ERROR
        code = await self.replicas.wait_for_commit(OFFSETS_TOPIC, write.partition, write.required_offset,
                                                   self.config.offsets_commit_timeout_ms)
        return ErrorCode(code)

    def _append_alone(self, partition: int, batch: bytearray) -> int:
        """The writer without a broker: this process is the only replica, so it leads the partition."""
        lg = self.log(partition)
        part = self._alone.get(partition)
        if part is None or part.log is not lg:
            part = self._alone[partition] = Partition.led_alone(lg)
        info, _ = part.append_records_to_leader(batch, AppendOrigin.COORDINATOR)
        return info.first_offset

    def read(self, partition: int) -> Iterator[LoadedRecord | TxnMarker]:
        """Every record of a partition from its log start to its log end (what the loader replays)."""
        lg = self.log_manager.get_log(OFFSETS_TOPIC, partition)
        if lg is None:
            return
        start = lg.log_start_offset
        for batch in lg.batches(start, FetchIsolation.LOG_END):
            if batch.is_control:
                for r in batch.records():
                    kind = parse_control_type(r.key)
                    if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                        yield TxnMarker(r.offset, batch.producer_id, kind is ControlRecordType.COMMIT)
                continue
            for r in batch.records():
                if r.offset < start:
                    continue
                yield LoadedRecord(r.offset, batch.producer_id, batch.is_transactional, r.key, r.value)

    def existing_partitions(self) -> list[int]:
        return sorted(p for (t, p) in list(self.log_manager.logs) if t == OFFSETS_TOPIC)
