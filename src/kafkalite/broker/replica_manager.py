"""Partitions as the broker serves them (Kafka's ReplicaManager).

The request handlers speak in topic names and partition numbers; this layer finds the `Partition`
(replication/partition.py, which owns the role, the leader epoch and the commit rule) and turns its outcomes
into Kafka's per-partition response entries (offsets, watermarks, error codes). Every append, a client's
produce or the group coordinator's write to `__consumer_offsets`, goes through `append_records`, so
leadership checks, the commit rule and the wake-ups of parked fetches apply alike. Topic administration
lives in broker/topic_admin.py.

The controller's requests land here too (Kafka's becomeLeaderOrFollower, stopReplicas and
maybeUpdateMetadataCache): LeaderAndIsr makes this broker leader or follower of its partitions (creating their
logs), StopReplica stops (and perhaps deletes) them, UpdateMetadata fills the cluster's MetadataCache. A
partition this broker holds no state for is refused in one place, `get_partition` (Kafka's
getPartitionOrError). Without a cluster (`leads_all_local_logs`: tests of the request paths alone) this broker
leads every partition it holds.

As a leader with followers (Kafka's ReplicaManager.fetchMessages and Partition): replica fetches record each
follower's position and may move the HW or propose an ISR expansion; a periodic task proposes ISR shrinks; each
ISR change is written to the cluster store (`store`) with a compare-and-set before it takes effect.
acks=all produce and other internal writers wait for the HW in `wait_for_commit` (Kafka's DelayedProduce):
every wait is parked in `purgatory` on the partition's key (appends, leader changes) and on its
`committed_key` (HW and ISR moves), until one of them is woken or its own timeout passes.

Everything here runs on the broker's event loop; Log calls are short (page-cache writes and index
lookups), as in Kafka's request handler threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any, Protocol

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.metadata import INTERNAL_TOPICS, MetadataStore, ensure_log_topic_id
from kafkalite.broker.purgatory import Purgatory
from kafkalite.broker.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from kafkalite.broker.topic_admin import TopicAdmin
from kafkalite.cluster.metadata_cache import LEADER_DURING_DELETE, MetadataCache
from kafkalite.cluster.store import ClusterStore
from kafkalite.cluster.znodes import PartitionState
from kafkalite.coordinator.config import OFFSETS_TOPIC
from kafkalite.errors import (
    InvalidRecordError,
    InvalidTopicError,
    KafkaliteError,
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    StaleControllerEpochError,
    UnknownTopicOrPartitionError,
)
from kafkalite.manager.log_manager import LogManager, descriptor_advice, is_descriptor_exhaustion
from kafkalite.protocol import FileRegion
from kafkalite.protocol.error_codes import ErrorCode
from kafkalite.protocol.primitives import BIG_PART
from kafkalite.records.batch import iter_batches
from kafkalite.replication.partition import IsrChange, Partition, PartitionRead, monotonic_ms
from kafkalite.security.transport import ClientSecurity
from kafkalite.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkalite.storage.file_records import FileSlice
from kafkalite.storage.log import FetchIsolation, Log, LogAppendInfo
from kafkalite.storage.producer_state import AppendOrigin

__all__ = ["LeadershipListener", "PartitionRead", "ReplicaManager", "error_code_of"]

log = logging.getLogger("kafkalite.broker")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
UNKNOWN_ERROR = -1
SMALL_RECORDS_COPIED = BIG_PART  # fetched records below this size are sent as bytes, not with sendfile


def committed_key(topic: str, partition: int) -> tuple[str, str, int]:
    """The purgatory key of a partition's commit events: HW and ISR moves, a follower's log start moving.
    acks=all produces, DeleteRecords and consumer fetches watch it beside the partition's own key (appends,
    role changes, removal, log-dir failure: every waiter's business). Followers' fetches do not: they read
    to the log end, so a HW move gives them nothing to answer (Kafka's DelayedFetch for a follower
    completes on new bytes, not on the HW), and the follower that moved it would wake the other one's
    parked fetch for an empty read on the path of every acks=all produce."""
    return ("committed", topic, partition)


class LeadershipListener(Protocol):
    """What hears that this broker leads, or no longer leads, a `__consumer_offsets` partition: the group
    coordinator (Kafka's onLeadershipChange callback into GroupCoordinator.onElection / onResignation)."""

    def on_election(self, partition: int, epoch: int = -1) -> None: ...

    def on_resignation(self, partition: int, epoch: int = -1) -> None: ...


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

    def __init__(self, config: BrokerConfig, logs: LogManager, metadata: MetadataStore, *,
                 cache: MetadataCache | None = None, store: ClusterStore | None = None) -> None:
        """`cache` and `store` are the cluster's (a broker always has them: a single broker is a cluster of
        one); without them (tests of the request paths alone) this broker leads every partition it holds."""
        self.config = config
        self.logs = logs
        self.metadata = metadata
        self.admin = TopicAdmin(logs, metadata)
        self.node_id = config.node_id
        self.purgatory = Purgatory()
        self.append_listeners: list[Callable[[str, int], None]] = []
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Without a cluster: this broker leads every partition it holds a log for, including logs made directly
        # on the LogManager. With one, roles come from the controller's LeaderAndIsr (make_leader /
        # make_follower), and nothing is led before it, not even while the broker starts.
        self.leads_all_local_logs = cache is None
        self.cache = cache
        self.lag_time_max_ms: int = config.get("replica.lag.time.max.ms")
        self.hw_requires_min_isr: bool = config.get("replica.high.watermark.requires.min.isr")
        self.store = store  # where leaders commit ISR changes (None: no store, no followers)
        self._isr_writes: set[asyncio.Task[None]] = set()
        self._unannounced: set[tuple[str, int]] = set()  # ISR changes written but not yet announced
        self._announcer: asyncio.Task[None] | None = None
        self._isr_expiration: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        # Followers fetch from their leaders through these (Kafka's ReplicaManager owns its fetcher manager).
        self.fetchers = ReplicaFetcherManager(
            replace(FetcherSettings.from_config(config), security=ClientSecurity.for_inter_broker(config)),
            lambda t, p: self.partitions.get((t, p)), self.io_failed)
        self.local_failures: dict[tuple[str, int], tuple[int, str]] = {}  # partitions LeaderAndIsr could not host
        self.shutting_down = False  # controlled shutdown under way: no follower of ours starts fetching

    def broker_alive(self, broker: int) -> bool:
        """DeleteRecords waits for live replicas only."""
        return self.cache is None or broker in self.cache.brokers

    # --- partitions -------------------------------------------------------------------------------

    def startup(self) -> None:
        """Restore each log's HW from replication-offset-checkpoint as min(checkpoint, LEO) (Kafka's
        Partition.createLog), then, in single-broker mode, lead every local partition (call after
        TopicAdmin.startup made them). A cluster broker leads nothing until the controller's LeaderAndIsr says
        so, so its HWs stay as restored."""
        self.restore_high_watermarks()
        if not self.leads_all_local_logs:
            return
        for lg in self.logs.all_logs():
            self.lead_locally(lg)

    def restore_high_watermarks(self) -> None:
        for d in self.logs.dirs:
            if d.offline:
                continue
            path = d.path / REPLICATION_OFFSET_CHECKPOINT_FILE
            if not path.exists():
                continue
            saved = OffsetCheckpointFile(path).read_or_empty()
            for tp, hw in saved.items():
                lg = self.logs.get_log(tp[0], tp[1])
                if lg is not None and lg.dir.parent == d.path and hw > lg.high_watermark:
                    lg.update_high_watermark(min(hw, lg.log_end_offset))

    def new_partition(self, lg: Log) -> Partition:
        """A Partition of `lg` with this broker's replication settings, before any role (LeaderAndIsr then
        gives it one with make_leader / make_follower)."""
        return Partition(lg.topic, lg.partition, lg, self.node_id, lag_time_max_ms=self.lag_time_max_ms,
                         hw_requires_min_isr=self.hw_requires_min_isr)

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
        """The partition with its current log. One this broker holds no state for answers as Kafka's
        getPartitionOrError: NOT_LEADER_OR_FOLLOWER if the cluster has it (the client refreshes its metadata),
        else UNKNOWN_TOPIC_OR_PARTITION; KAFKA_STORAGE_ERROR when its log dir is offline. A log reopened by
        the LogManager (descriptor pressure) is a new object: rebound here."""
        part = self.partitions.get((topic, partition))
        if part is None:
            if self.leads_all_local_logs:
                return self.lead_locally(self.get_log(topic, partition))
            if self.cache is not None and self.cache.partition(topic, partition) is None:
                raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: "
                                                   f"{topic}-{partition}")
            raise NotLeaderOrFollowerError(f"broker {self.node_id} is neither the leader nor a follower of "
                                           f"{topic}-{partition}")
        lg = self.get_log(topic, partition)
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

    def append_for_coordinator(self, topic: str, partition: int, batch: bytes | bytearray | memoryview) -> int:
        """The group coordinator's append to its internal topic (its OffsetsWriter, with `topic` bound), as
        Kafka's coordinator appends: with acks=-1, so an ISR below min.insync.replicas refuses it before
        anything is written (NOT_ENOUGH_REPLICAS), then the one append path. Returns the batch's base offset;
        the caller waits for the HW with `wait_for_commit`."""
        part = self.get_partition(topic, partition)
        part.leader_log()
        part.check_enough_replicas_for_acks_all()
        return self._append_to(part, batch, AppendOrigin.COORDINATOR).first_offset

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
               internal_allowed: bool = False, origin: AppendOrigin = AppendOrigin.CLIENT,
               acks_all: bool = False) -> dict[str, Any]:
        """Append one partition's batch as leader; the produce response entry, errors included. With
        `acks_all`, a committed ISR below min.insync.replicas refuses first (NOT_ENOUGH_REPLICAS), and
        the entry gets a private "_required_offset" (last offset + 1) when the HW has not reached it yet:
        the caller then waits for it (`complete_produce`)."""
        out: dict[str, Any] = {"index": partition, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                               "log_start_offset": -1, "record_errors": [], "error_message": None}
        try:
            if topic in INTERNAL_TOPICS and not internal_allowed:
                raise InvalidTopicError(f"Cannot append to internal topic {topic}")
            part = self.get_partition(topic, partition)
            batch = _check_one_batch(records)
            if acks_all:
                part.leader_log()
                part.check_enough_replicas_for_acks_all()
            info = self._append_to(part, batch, origin)
            out.update(base_offset=info.first_offset, log_append_time_ms=info.log_append_time,
                       log_start_offset=part.log.log_start_offset)
            if acks_all and part.log.high_watermark <= info.last_offset:
                out["_required_offset"] = info.last_offset + 1
        except KafkaliteError as exc:
            out["error_code"] = error_code_of(exc)
            out["error_message"] = str(exc)
            errs = getattr(exc, "record_errors", None)
            if errs:
                out["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in errs]
            log.debug("Produce to %s-%d failed: %s", topic, partition, exc)
        return out

    async def complete_produce(self, topic: str, entry: dict[str, Any], timeout_ms: int) -> None:
        """Wait for an acks=all entry that `append` marked with "_required_offset" and put the outcome in it
        (Kafka's DelayedProduce for one partition)."""
        required = entry.pop("_required_offset", None)
        if required is None:
            return
        code = await self.wait_for_commit(topic, entry["index"], required, timeout_ms)
        if code != ErrorCode.NONE:
            tp = f"{topic}-{entry['index']}"
            if code == ErrorCode.REQUEST_TIMED_OUT:
                why = f"not replicated to the ISR up to offset {required} within {timeout_ms} ms"
            elif code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
                why = f"offset {required} committed with fewer in-sync replicas than min.insync.replicas"
            else:
                why = "this broker is no longer the leader"
            entry["error_code"] = code
            entry["error_message"] = f"acks=all: {tp}: {why}"

    def commit_status(self, topic: str, partition: int, required_offset: int) -> int | None:
        """Kafka's checkEnoughReplicasReachOffset: None while waiting, else the outcome's error code."""
        part = self.partitions.get((topic, partition))
        if part is None or not part.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if part.high_watermark >= required_offset:
            if len(part.maximal_isr) < part.min_insync_replicas:
                return NotEnoughReplicasAfterAppendError.error_code
            return ErrorCode.NONE
        return None

    async def wait_for_commit(self, topic: str, partition: int, required_offset: int, timeout_ms: int) -> int:
        """Wait until the partition's HW reaches `required_offset` (an append's last offset + 1), as acks=all
        does; returns an error code: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (committed with an ISR below
        min.insync.replicas), NOT_LEADER_OR_FOLLOWER (leadership lost: the records may be truncated) or
        REQUEST_TIMED_OUT (they may still commit). For every internal writer (the group coordinator too)."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        keys = [(topic, partition), committed_key(topic, partition)]
        while True:
            code = self.commit_status(topic, partition, required_offset)
            if code is not None:
                return code
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not await self.purgatory.wait(keys, remaining):
                code = self.commit_status(topic, partition, required_offset)
                return RequestTimedOutError.error_code if code is None else code

    # --- fetch ------------------------------------------------------------------------------------

    def read_partition(self, topic: str, partition: int, fetch_offset: int, max_bytes: int, *,
                       isolation: FetchIsolation, min_one_message: bool, current_leader_epoch: int = -1,
                       last_fetched_epoch: int = -1, replica_id: int = -1) -> PartitionRead:
        try:
            part = self.get_partition(topic, partition)
            try:
                return part.read(fetch_offset, max_bytes, isolation=isolation, min_one_message=min_one_message,
                                 current_leader_epoch=current_leader_epoch, last_fetched_epoch=last_fetched_epoch,
                                 replica_id=replica_id)
            except OSError as exc:
                raise self.io_failed(topic, partition, exc) from exc
        except KafkaliteError as exc:
            return PartitionRead(topic, partition, error=error_code_of(exc))

    async def fetch(self, wanted: list[tuple[str, int, int, int, int, int]], *, max_wait_ms: int, min_bytes: int,
                    max_bytes: int, isolation: FetchIsolation, replica_id: int = -1,
                    log_start_offsets: list[int] | None = None) -> list[PartitionRead]:
        """Read every (topic, partition, offset, partition_max_bytes, current_epoch, last_fetched_epoch);
        long-poll until `min_bytes` are there, an error shows up, or `max_wait_ms` passes (DelayedFetch).
        A follower's fetch (`replica_id` >= 0, with its `log_start_offsets`) records its position after
        each read round (Kafka's Partition.updateFollowerFetchState)."""
        deadline = time.monotonic() + max(0, max_wait_ms) / 1000
        keys: list[Hashable] = [(t, p) for t, p, *_ in wanted]
        if replica_id < 0:  # a consumer reads up to the HW: its moves matter (a follower reads to the log end)
            keys += [committed_key(t, p) for t, p, *_ in wanted]
        while True:
            reads = self._read_all(wanted, max_bytes, isolation, replica_id, log_start_offsets)
            total = sum(r.size for r in reads)
            remaining = deadline - time.monotonic()
            if (total >= min_bytes or remaining <= 0 or not wanted
                    or any(r.error or r.diverging for r in reads)):
                return reads
            woken = await self.purgatory.wait(keys, remaining)
            if not woken:
                return self._read_all(wanted, max_bytes, isolation, replica_id, log_start_offsets)

    def _read_all(self, wanted: list[tuple[str, int, int, int, int, int]], max_bytes: int,
                  isolation: FetchIsolation, replica_id: int = -1,
                  log_start_offsets: list[int] | None = None) -> list[PartitionRead]:
        # Kafka's readFromLog: the response limit shrinks as partitions fill it; only the first partition
        # with data may exceed its limit (min one message), so a large batch can never block a consumer.
        reads = []
        limit = max_bytes
        min_one = True
        for i, (topic, partition, offset, part_max, current_epoch, last_epoch) in enumerate(wanted):
            r = self.read_partition(topic, partition, offset, max(0, min(part_max, limit)), isolation=isolation,
                                    min_one_message=min_one, current_leader_epoch=current_epoch,
                                    last_fetched_epoch=last_epoch, replica_id=replica_id)
            if r.size:
                min_one = False
                limit = max(0, limit - r.size)
            reads.append(r)
            if replica_id >= 0 and not r.error and r.diverging is None:
                start = log_start_offsets[i] if log_start_offsets is not None else -1
                self._follower_fetched(topic, partition, replica_id, offset, start, r.leader_log_end)
        return reads

    def _follower_fetched(self, topic: str, partition: int, replica_id: int, fetch_offset: int,
                          log_start_offset: int, leader_leo: int) -> None:
        """Record a follower's position (its fetch offset is its log end), then maybe expand the ISR; a HW
        move wakes the waiters (acks=all produce, consumers' fetches) of the partition."""
        part = self.partitions.get((topic, partition))
        if part is None:
            return
        now = monotonic_ms()
        remote = part.remote.get(replica_id)
        old_start = remote.log_start_offset if remote is not None else -1
        # a HW move, or a follower's log start moving (DeleteRecords waits for it), wakes the waiters
        if part.update_follower_fetch_state(replica_id, fetch_offset, log_start_offset, now, leader_leo) or \
                (remote is not None and remote.log_start_offset != old_start):
            self.purgatory.wake(committed_key(topic, partition))
        change = part.maybe_expand_isr(replica_id, now)
        if change is not None:
            self._submit_isr_change(part, change)

    # --- the ISR ------------------------------------------------------------------------------------

    def _submit_isr_change(self, part: Partition, change: IsrChange) -> None:
        store = self.store
        if store is None:  # nowhere to commit it (no cluster): the change cannot take effect
            part.isr_change_failed(change)
            return
        task = asyncio.get_running_loop().create_task(self._write_isr(store, part, change),
                                                      name=f"isr-{part.topic}-{part.partition}")
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)

    async def _write_isr(self, store: ClusterStore, part: Partition, change: IsrChange) -> None:
        """Commit an ISR change to the store (compare-and-set on the state's zkVersion) before it takes
        effect. A conflict is re-read: if the store already holds exactly this state (a lost answer) it
        counts as written; else the old ISR stays until the controller's next LeaderAndIsr."""
        tp = f"{part.topic}-{part.partition}"
        state = PartitionState(self.node_id, change.leader_epoch, change.isr, part.controller_epoch,
                               change.partition_epoch)
        try:
            written = await store.update_isr(part.topic, part.partition, state, change.partition_epoch)
            if written is None:
                current = await store.partition_state(part.topic, part.partition)
                if current is not None and (current.leader, current.leader_epoch, current.isr) == \
                        (state.leader, state.leader_epoch, state.isr):
                    written = current
        except Exception as exc:  # the store unreachable: nothing changed; the next trigger proposes again
            log.warning("Could not write the ISR %s of %s: %s", list(change.isr), tp, exc)
            part.isr_change_failed(change)
            return
        if written is None:
            log.info("ISR change of %s to %s refused: its state changed under us (version %d); keeping ISR %s "
                     "until the controller's next LeaderAndIsr", tp, list(change.isr), change.partition_epoch,
                     part.isr)
        else:
            log.info("%s ISR of %s from %s to %s", "Expanding" if change.expand else "Shrinking", tp, part.isr,
                     list(change.isr))
        if part.complete_isr_change(change, None if written is None else written.zk_version):
            self.purgatory.wake(committed_key(part.topic, part.partition))
        elif written is not None:
            self.purgatory.wake(committed_key(part.topic, part.partition))  # acks=all: |maximal ISR| may have changed
        if written is not None:  # applied first, announced after: a produce is judged by the new ISR sooner
            self._unannounced.add((part.topic, part.partition))
            self._announce_soon(store)

    def _announce_soon(self, store: ClusterStore) -> None:
        """Start telling the controller of the changed ISRs unless that is under way. Changes that come while an
        announcement is being written go together in the next (Kafka batches its isrChangeSet the same way, every
        2.5 s): a follower lost by a leader of thousands of partitions costs a few notifications, not one each."""
        if self._announcer is None or self._announcer.done():
            self._announcer = asyncio.get_running_loop().create_task(self._announce_pending(store),
                                                                     name="isr-change-announcer")

    async def _announce_pending(self, store: ClusterStore) -> None:
        """Tell the controller (which then sends every broker the new ISRs); what could not be told is told
        again on the next ISR-expiration run, as Kafka keeps its isrChangeSet until it is written."""
        while self._unannounced:
            # taken out before the write: a partition changing again meanwhile is announced again after it (the
            # controller may have read its state before that change reached the store)
            pending, self._unannounced = self._unannounced, set()
            partitions = sorted(pending)
            try:
                await store.announce_isr_changes(partitions)
            except Exception as exc:
                self._unannounced |= pending
                log.warning("Could not announce the ISR change of %s to the controller (retried): %s",
                            ", ".join(f"{t}-{p}" for t, p in partitions[:10])
                            + (" ..." if len(partitions) > 10 else ""), exc)
                return

    def maybe_shrink_isrs(self) -> None:
        """One run of Kafka's isr-expiration task over the partitions this broker leads."""
        now = monotonic_ms()
        for part in list(self.partitions.values()):
            if part.remote and part.is_leader:
                change = part.maybe_shrink_isr(now)
                if change is not None:
                    self._submit_isr_change(part, change)

    async def run_isr_expiration(self, stop: asyncio.Event) -> None:
        """Every replica.lag.time.max.ms / 2, propose removing out-of-sync followers from each ISR."""
        interval = max(self.lag_time_max_ms / 2000, 0.01)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if not stop.is_set():
                self.maybe_shrink_isrs()
                if self._unannounced and self.store is not None:
                    self._announce_soon(self.store)

    # --- the controller's requests (Kafka's becomeLeaderOrFollower, stopReplicas, maybeUpdateMetadataCache) ---

    def _check_epochs(self, body: dict[str, Any], broker_epoch: int) -> None:
        """Kafka's isBrokerEpochStale and controller-epoch check (-1 = an old request version without one)."""
        assert self.cache is not None
        requested = body.get("broker_epoch", -1)
        if requested != -1 and requested < broker_epoch:
            raise StaleBrokerEpochError(f"request for broker epoch {requested}, this broker's is {broker_epoch}")
        if body["controller_epoch"] < self.cache.controller_epoch:
            raise StaleControllerEpochError(f"controller epoch {body['controller_epoch']} is older than "
                                            f"{self.cache.controller_epoch}")

    async def update_metadata(self, body: dict[str, Any], broker_epoch: int,
                              leadership: LeadershipListener | None) -> dict[str, Any]:
        """UpdateMetadata: the cache takes the cluster's view; local replicas the view leaves out are deleted."""
        assert self.cache is not None
        try:
            self._check_epochs(body, broker_epoch)
        except KafkaliteError as exc:
            log.warning("Refused UpdateMetadata from controller %d: %s", body["controller_id"], exc)
            return {"error_code": exc.error_code}
        self.cache.apply(body)
        for topic, p in self._strays(body):
            log.warning("Deleting the replica of %s-%d: the cluster's assignment of that partition no longer "
                        "includes broker %d (it was moved away while this broker was down, so no StopReplica "
                        "reached it)", topic, p, self.node_id)
            await self._stop(topic, p, -1, True, leadership)
        return {"error_code": ErrorCode.NONE}

    def _strays(self, body: dict[str, Any]) -> list[tuple[str, int]]:
        """Local replicas of partitions whose replicas, as this UpdateMetadata says, leave this broker out: a
        reassignment removed them while the broker was down. Kafka's ZooKeeper mode leaves such logs on disk for
        ever (its KRaft mode deletes them); here they go as the missed StopReplica(delete) would have. A topic
        being deleted (no replicas) is the deletion's business."""
        out = []
        for t in body.get("topic_states", []):
            for s in t["partition_states"]:
                if not s["replicas"] or self.node_id in s["replicas"] or s["leader"] == LEADER_DURING_DELETE:
                    continue
                tp = (t["topic_name"], s["partition_index"])
                if tp in self.partitions or self.logs.get_log(*tp) is not None:
                    out.append(tp)
        return out

    async def become_leader_or_follower(self, body: dict[str, Any], broker_epoch: int,
                                        leadership: LeadershipListener | None) -> dict[str, Any]:
        """LeaderAndIsr: each partition state this broker is named in is applied (its log made if missing),
        each with its own error code; `leadership` hears of `__consumer_offsets` partitions won and lost."""
        assert self.cache is not None
        try:
            self._check_epochs(body, broker_epoch)
        except KafkaliteError as exc:
            log.warning("Refused LeaderAndIsr from controller %d: %s", body["controller_id"], exc)
            return {"error_code": exc.error_code, "partition_errors": [], "topics": []}
        self.cache.controller_epoch = max(self.cache.controller_epoch, body["controller_epoch"])
        self.fetchers.learn_leaders(body.get("live_leaders", []))
        grouped = [(t["topic_name"], t.get("topic_id"), t["partition_states"]) for t in body.get("topic_states", [])]
        for s in body.get("ungrouped_partition_states", []):
            grouped.append((s["topic_name"], None, [s]))
        await self._create_missing_logs(grouped)
        topics_out = []
        flat_out = []
        for name, topic_id, states in grouped:
            codes = await self._become(name, topic_id, states, leadership)
            errors = [{"topic_name": name, "partition_index": s["partition_index"], "error_code": code}
                      for s, code in zip(states, codes, strict=True)]
            flat_out += errors
            topics_out.append({"topic_id": topic_id or uuid.UUID(int=0), "partition_errors": errors})
        return {"error_code": ErrorCode.NONE, "partition_errors": flat_out, "topics": topics_out}

    async def _topic_config(self, topic: str) -> dict[str, str]:
        return await self.store.topic_config(topic) if self.store is not None else {}

    async def _create_missing_logs(self, grouped: list[tuple[str, Any, list[dict[str, Any]]]]) -> None:
        """New partitions of a LeaderAndIsr (a topic creation: thousands, perhaps) get their logs in chunks on
        worker threads (TopicAdmin.create_logs), keeping the event loop serving; _become then finds them."""
        wanted: list[tuple[str, int, dict[str, str], uuid.UUID | None]] = []
        configs: dict[str, dict[str, str]] = {}
        for name, topic_id, states in grouped:
            for s in states:
                p = s["partition_index"]
                if self.node_id in s["replicas"] and self.logs.get_log(name, p) is None:
                    if name not in configs:
                        configs[name] = await self._topic_config(name)
                    wanted.append((name, p, configs[name], topic_id if topic_id is not None and topic_id.int
                                   else None))
        if wanted:
            await self.admin.create_logs(wanted)

    def _local_epoch(self, topic: str, p: int) -> int:
        part = self.partitions.get((topic, p))
        return part.leader_epoch if part is not None else -1

    async def _become(self, topic: str, topic_id: uuid.UUID | None, states: list[dict[str, Any]],
                      leadership: LeadershipListener | None) -> list[int]:
        """LeaderAndIsr for one topic's partitions: the checks on the event loop, then every accepted
        partition's _ensure_local, in order, in one worker-thread call (a thread hop per partition made a
        start-up with thousands of partitions half a second slower), then the leadership callbacks."""
        codes: list[int] = []
        accepted: list[int] = []  # indexes into states
        for i, s in enumerate(states):
            code = self._check_become(topic, topic_id, s)
            codes.append(ErrorCode.NONE if code is None else code)
            if code is None:
                accepted.append(i)
        if not accepted:
            return codes
        outcomes: list[Partition | BaseException]
        for i in accepted:  # before the role changes (Kafka's order): no follower append races them
            self.fetchers.remove_partition(topic, states[i]["partition_index"])
        try:
            configs = await self._topic_config(topic)
            outcomes = await asyncio.to_thread(self._ensure_each, topic, topic_id, configs,
                                               [states[i] for i in accepted])
        except KafkaliteError as exc:
            outcomes = [exc] * len(accepted)
        for i, got in zip(accepted, outcomes, strict=True):
            s = states[i]
            if isinstance(got, BaseException):
                codes[i] = self._became(topic, s, got, leadership)
                continue
            self._apply_role(got, s)  # on the loop (see there)
            self.purgatory.wake((topic, s["partition_index"]))  # waiting produces see the new role
            if s["leader"] != self.node_id and not self.shutting_down:
                self.fetchers.add_partition(got)
            codes[i] = self._became(topic, s, None, leadership)
        return codes

    def _check_become(self, topic: str, topic_id: uuid.UUID | None, s: dict[str, Any]) -> int | None:
        """The error of a partition state this broker must not apply, None to apply it."""
        p = s["partition_index"]
        if self.node_id not in s["replicas"]:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if s["leader_epoch"] <= self._local_epoch(topic, p):
            return ErrorCode.STALE_CONTROLLER_EPOCH
        info = self.metadata.get(topic)
        if info is not None and topic_id is not None and topic_id.int and info.topic_id != topic_id:
            if not any(t == topic for t, _p in self.partitions) and \
                    not any(lg.topic == topic for lg in self.logs.all_logs()):
                self.metadata.remove(topic)  # a stale registration without logs: a recreated topic
            else:
                return ErrorCode.INCONSISTENT_TOPIC_ID
        return None

    def _ensure_each(self, topic: str, topic_id: uuid.UUID | None, configs: dict[str, str],
                     states: list[dict[str, Any]]) -> list[Partition | BaseException]:
        """_ensure_local for each state in order (on a worker thread); each one's Partition or failure."""
        out: list[Partition | BaseException] = []
        for s in states:
            try:
                out.append(self._ensure_local(topic, topic_id, s["partition_index"], configs))
            except (KafkaliteError, OSError) as exc:
                out.append(exc)
        return out

    def _became(self, topic: str, s: dict[str, Any], failed: BaseException | None,
                leadership: LeadershipListener | None) -> int:
        p = s["partition_index"]
        if failed is not None:
            log.error("Cannot host %s-%d: %s", topic, p, failed)
            code = error_code_of(failed) if isinstance(failed, KafkaliteError) else ErrorCode.KAFKA_STORAGE_ERROR
            self.local_failures[(topic, p)] = (code, f"{topic}-{p}: {failed}")
            if topic == OFFSETS_TOPIC and leadership is not None:
                leadership.on_resignation(p, s["leader_epoch"])
            return code
        self.local_failures.pop((topic, p), None)
        if topic == OFFSETS_TOPIC and leadership is not None:
            if s["leader"] == self.node_id:
                leadership.on_election(p, s["leader_epoch"])
            else:
                leadership.on_resignation(p, s["leader_epoch"])
        return ErrorCode.NONE

    def _ensure_local(self, topic: str, topic_id: uuid.UUID | None, p: int, configs: dict[str, str]
                      ) -> Partition:
        """The local log and Partition of a partition this broker replicates (in a worker thread: creating
        a log touches the disk)."""
        md = self.metadata
        info = md.get(topic)
        if info is None:
            info = md.add(topic, p + 1, configs, topic_id if topic_id is not None and topic_id.int else None)
            if configs:
                self.logs.update_topic_config(topic, configs)
        elif info.partitions <= p:
            md.set_partitions(topic, p + 1)
        if self.logs.is_offline(topic, p):
            raise KafkaStorageError(f"the log dir of {topic}-{p} is offline")
        lg = self.logs.get_log(topic, p) or self.logs.get_or_create_log(topic, p, configs or None)
        ensure_log_topic_id(lg, info.topic_id)
        part = self.partitions.get((topic, p))
        if part is None or part.log is not lg:
            part = self.partitions[(topic, p)] = self.new_partition(lg)
        return part

    def _apply_role(self, part: Partition, s: dict[str, Any]) -> None:
        """Leader or follower as the controller says (Kafka's makeLeader / makeFollower), on the event loop:
        an append in between must not be stamped with the old epoch after the new epoch's start was recorded
        (Kafka holds its leaderIsrUpdateLock for the same reason)."""
        replicas, isr = list(s["replicas"]), list(s["isr"])
        if s["leader"] == self.node_id:
            part.make_leader(s["leader_epoch"], isr, replicas, s.get("partition_epoch", 0),
                             controller_epoch=s.get("controller_epoch", -1))
        else:
            part.make_follower(s["leader"], s["leader_epoch"], isr, replicas, s.get("partition_epoch", 0))

    async def stop_replicas(self, body: dict[str, Any], broker_epoch: int, leadership: LeadershipListener | None
                            ) -> dict[str, Any]:
        """StopReplica: stop replicating the partitions named (no more fetching, no more serving), deleting
        those marked for deletion; a state older than this broker's epoch for it is FENCED_LEADER_EPOCH."""
        assert self.cache is not None
        try:
            self._check_epochs(body, broker_epoch)
        except KafkaliteError as exc:
            log.warning("Refused StopReplica from controller %d: %s", body["controller_id"], exc)
            return {"error_code": exc.error_code, "partition_errors": []}
        self.cache.controller_epoch = max(self.cache.controller_epoch, body["controller_epoch"])
        wanted: list[tuple[str, int, int, bool]] = []
        for t in body.get("topic_states", []):
            for s in t["partition_states"]:
                wanted.append((t["topic_name"], s["partition_index"], s.get("leader_epoch", -1),
                               s["delete_partition"]))
        for t in body.get("topics", []):
            wanted += [(t["name"], p, -1, body.get("delete_partitions", False)) for p in t["partition_indexes"]]
        for s in body.get("ungrouped_partitions", []):
            wanted.append((s["topic_name"], s["partition_index"], -1, body.get("delete_partitions", False)))
        errors = []
        for topic, p, epoch, delete in wanted:
            if 0 <= epoch <= self._local_epoch(topic, p):
                errors.append({"topic_name": topic, "partition_index": p, "error_code": ErrorCode.FENCED_LEADER_EPOCH})
                continue
            await self._stop(topic, p, epoch, delete, leadership)
            errors.append({"topic_name": topic, "partition_index": p, "error_code": ErrorCode.NONE})
        return {"error_code": ErrorCode.NONE, "partition_errors": errors}

    async def _stop(self, topic: str, p: int, epoch: int, delete: bool, leadership: LeadershipListener | None
                    ) -> None:
        """Stop replicating a partition here (no more fetching, no more serving) and, with `delete`, remove it."""
        self.fetchers.remove_partition(topic, p)
        if delete:
            await asyncio.to_thread(self._delete_local, topic, p)
        else:  # no longer served here: clients are sent back to the metadata
            part = self.partitions.get((topic, p))
            if part is not None:
                part.make_follower(-1, max(self._local_epoch(topic, p), epoch), part.isr, part.replicas,
                                   part.partition_epoch)
        self.purgatory.wake((topic, p))
        if topic == OFFSETS_TOPIC and leadership is not None:
            leadership.on_resignation(p, epoch)

    def _delete_local(self, topic: str, p: int) -> None:
        self.remove_partition(topic, p)
        if not any(lg.topic == topic for lg in self.logs.all_logs()):
            self.metadata.remove(topic)

    # --- replication's background work ------------------------------------------------------------------

    def start_isr_expiration(self) -> None:
        self._isr_expiration = asyncio.get_running_loop().create_task(
            self.run_isr_expiration(self._stopping), name="isr-expiration")

    async def stop_replication(self) -> None:
        """The ISR expiration task and every replica fetcher stop (the broker's shutdown)."""
        self._stopping.set()
        if self._isr_expiration is not None:
            await self._isr_expiration
        await self.fetchers.stop()

    @staticmethod
    def records_for_wire(records: FileSlice | bytes) -> FileRegion | bytes:
        """The bytes of a read as the server sends them: a dup'd descriptor range for sendfile, or, below
        SMALL_RECORDS_COPIED bytes, the bytes themselves (one pread from the page cache).

        Small reads are copied because they are latency-bound: a follower's fetch woken by one acks=all
        record, a consumer at the log end. The response then leaves in one send with its header; sendfile
        costs a second syscall, a second wake-up of the reader and asyncio's pause/resume of the
        transport around it (~0.1-0.2 ms per response on this VM), for no copy saved worth having.
        The descriptor is duplicated so a segment closed by retention while the response is queued can't
        turn the fd number into someone else's file; the server closes it once sent."""
        if isinstance(records, FileSlice) and records.size:
            if records.size < SMALL_RECORDS_COPIED:
                return records.tobytes()
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
                if isolation is not None:
                    part.check_offset_available()
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
        """Move the leader's log start to `offset` (-1: the HW); the entry's "_target" is set when followers
        still have to follow (the caller then waits in `complete_delete_records`)."""
        out: dict[str, Any] = {"partition_index": partition, "low_watermark": -1, "error_code": 0}
        try:
            if topic in INTERNAL_TOPICS:
                raise InvalidTopicError(f"Cannot delete records of internal topic {topic}")
            part = self.get_partition(topic, partition)
            lg = part.leader_log()
            target = lg.high_watermark if offset == -1 else offset
            if target < 0 or target > lg.high_watermark:
                raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {target} of partition "
                                            f"{topic}-{partition} since it is larger than the high watermark "
                                            f"{lg.high_watermark}")
            lg.maybe_increment_log_start_offset(target, "client delete records request")
            self.purgatory.wake((topic, partition))
            out["low_watermark"] = part.low_watermark(self.broker_alive)
            if out["low_watermark"] < target:
                out["_target"] = target
        except KafkaliteError as exc:
            out["error_code"] = error_code_of(exc)
        return out

    def _low_watermark_status(self, topic: str, partition: int, target: int) -> tuple[int | None, int]:
        part = self.partitions.get((topic, partition))
        if part is None or not part.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
        low = part.low_watermark(self.broker_alive)
        return (ErrorCode.NONE if low >= target else None), low

    async def complete_delete_records(self, topic: str, entry: dict[str, Any], timeout_ms: int) -> None:
        """Kafka's DelayedDeleteRecords: wait until every replica's log start reached the target (the low
        watermark); NOT_LEADER_OR_FOLLOWER when leadership is lost, REQUEST_TIMED_OUT after `timeout_ms`."""
        target = entry.pop("_target", None)
        if target is None:
            return
        partition = entry["partition_index"]
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            code, low = self._low_watermark_status(topic, partition, target)
            remaining = deadline - time.monotonic()
            if code is None and remaining > 0 and await self.purgatory.wait(
                    [(topic, partition), committed_key(topic, partition)], remaining):
                continue
            if code is None:
                code, low = self._low_watermark_status(topic, partition, target)
            entry["error_code"] = RequestTimedOutError.error_code if code is None else code
            entry["low_watermark"] = low if code == ErrorCode.NONE else -1
            return

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
