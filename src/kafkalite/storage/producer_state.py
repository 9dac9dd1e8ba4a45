"""Producer state (Kafka's ProducerStateManager): idempotence, transactions, and `.snapshot` files.

Per producer id the log remembers the epoch, the metadata of the last five batches (so a client's
retry of any of them is answered with the original offsets instead of being written twice), the
coordinator epoch and the first offset of an open transaction. Snapshots of that state are taken
at every roll and at shutdown, so a restart replays only the log after the newest snapshot.

Appends are two-phase so that a rejected batch is never written: `prepare_append` checks the batch
against the state without changing it, `complete_append` records it once it is in the log.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafkalite.records.batch import RecordBatch
from kafkalite.records.control import ControlRecordType, end_txn_marker_of
from kafkalite.records.record import MAX_SEQUENCE, increment_sequence
from kafkalite.storage import names
from kafkalite.storage.producer_snapshot import (
    CorruptSnapshotError,
    ProducerSnapshotEntry,
    list_snapshots,
    read_snapshot,
    write_snapshot,
)

log = logging.getLogger("kafkalite.producer")

NUM_BATCHES_TO_RETAIN = 5


class AppendOrigin(enum.Enum):
    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return increment_sequence(self.last_seq, -self.offset_delta) if self.last_seq >= 0 else -1


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = -1
    batches: deque = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class PendingAppend:
    """A validated batch waiting to be recorded; `marker` is set for COMMIT/ABORT control batches."""

    batch: RecordBatch
    origin: AppendOrigin
    marker: ControlRecordType | None = None
    coordinator_epoch: int = -1


class ProducerStateManager:
    def __init__(self, log_dir: Path | str, *, producer_id_expiration_ms: int = 86_400_000,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.log_dir = Path(log_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.clock = clock
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: dict[int, int] = {}  # first offset -> producer id
        self.map_end_offset = 0
        self._snapshots = {o: p for o, p in list_snapshots(self.log_dir)}

    # --- queries ------------------------------------------------------------------------------------

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return self.producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def is_empty(self) -> bool:
        return not self.producers

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (Kafka also holds completed transactions
        until their marker is below the high watermark; we release them at the marker)."""
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def find_duplicate(self, batch: RecordBatch) -> BatchMetadata | None:
        """A client retry of one of the producer's last five batches, with the offsets it got."""
        entry = self.producers.get(batch.producer_id)
        if entry is None or entry.producer_epoch != batch.producer_epoch:
            return None
        for meta in entry.batches:
            if meta.first_seq == batch.base_sequence and meta.last_seq == batch.last_sequence:
                return meta
        return None

    # --- append ---------------------------------------------------------------------------------------

    def prepare_append(self, batch: RecordBatch, origin: AppendOrigin) -> PendingAppend:
        """Check a batch against the producer's state without changing it."""
        pid = batch.producer_id
        entry = self.producers.get(pid)
        pending = PendingAppend(batch, origin)
        if batch.is_control:
            marker = end_txn_marker_of(batch)
            if marker is None:
                return pending
            if entry is not None and origin != AppendOrigin.REPLICATION:
                if batch.producer_epoch < entry.producer_epoch:
                    raise InvalidProducerEpochError(
                        f"epoch of producer {pid} is {batch.producer_epoch}, smaller than the last seen "
                        f"epoch {entry.producer_epoch}")
                if marker.coordinator_epoch < entry.coordinator_epoch:
                    raise TransactionCoordinatorFencedError(
                        f"invalid coordinator epoch for producer {pid}: {marker.coordinator_epoch} "
                        f"(zombie coordinator), current {entry.coordinator_epoch}")
            pending.marker = marker.kind
            pending.coordinator_epoch = marker.coordinator_epoch
            return pending
        if origin == AppendOrigin.REPLICATION or entry is None:
            return pending
        if batch.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch of producer {pid} is {batch.producer_epoch}, smaller than the last seen epoch "
                f"{entry.producer_epoch}")
        if batch.producer_epoch > entry.producer_epoch:
            if batch.base_sequence != 0 and entry.producer_epoch >= 0:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for new epoch of producer {pid}: {batch.producer_epoch} "
                    f"(request epoch), {batch.base_sequence} (seq. number), {entry.producer_epoch} (current epoch)")
        elif entry.batches:
            expected = 0 if entry.last_seq == MAX_SEQUENCE else entry.last_seq + 1
            if batch.base_sequence != expected:
                raise OutOfOrderSequenceError(
                    f"out of order sequence number for producer {pid} at offset {batch.base_offset}: "
                    f"{batch.base_sequence} (incoming seq. number), {entry.last_seq} (current end sequence number)")
        if not batch.is_transactional and entry.current_txn_first_offset is not None:
            raise InvalidTxnStateError(f"expected a transactional write from producer {pid}, which has a transaction "
                                       f"open since offset {entry.current_txn_first_offset}")
        return pending

    def complete_append(self, pending: PendingAppend, first_offset: int, last_offset: int) -> CompletedTxn | None:
        """Record a batch that is now in the log; an end marker completes the producer's transaction."""
        batch = pending.batch
        pid = batch.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if batch.producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = batch.producer_epoch
        entry.last_timestamp = batch.max_timestamp
        completed = None
        if pending.marker is not None:
            if entry.current_txn_first_offset is not None:
                completed = CompletedTxn(pid, entry.current_txn_first_offset, last_offset,
                                         pending.marker == ControlRecordType.ABORT)
            entry.current_txn_first_offset = None
            entry.coordinator_epoch = pending.coordinator_epoch
            entry.batches.clear()
        elif not batch.is_control:
            entry.batches.append(BatchMetadata(batch.last_sequence, last_offset, last_offset - first_offset,
                                               batch.max_timestamp))
            if batch.is_transactional and entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = first_offset
                self.ongoing_txns[first_offset] = pid
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)
        return completed

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO when this transaction completed: the oldest other open transaction, else past the marker."""
        others = [o for o, pid in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        self.ongoing_txns.pop(completed.first_offset, None)

    # --- recovery ---------------------------------------------------------------------------------------

    def update_from_recovered_batch(self, batch: RecordBatch) -> CompletedTxn | None:
        pending = self.prepare_append(batch, AppendOrigin.REPLICATION)
        return self.complete_append(pending, batch.base_offset, batch.last_offset)

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def remove_expired_producers(self, now_ms: int) -> None:
        limit = self.producer_id_expiration_ms
        for pid in [p for p, e in self.producers.items()
                    if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= limit]:
            del self.producers[pid]

    # --- snapshots ------------------------------------------------------------------------------------

    @property
    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots, default=None)

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots, default=None)

    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    def snapshot_path(self, offset: int) -> Path | None:
        return self._snapshots.get(offset)

    def take_snapshot(self) -> None:
        """Write `<map end offset>.snapshot` if the state moved past the newest snapshot."""
        latest = self.latest_snapshot_offset
        if latest is not None and self.map_end_offset <= latest:
            return
        entries = []
        for e in self.producers.values():
            last = e.batches[-1] if e.batches else None
            entries.append(ProducerSnapshotEntry(
                e.producer_id, e.producer_epoch,
                last.last_seq if last else -1, last.last_offset if last else -1, last.offset_delta if last else 0,
                e.last_timestamp, e.coordinator_epoch,
                -1 if e.current_txn_first_offset is None else e.current_txn_first_offset))
        path = names.snapshot_file(self.log_dir, self.map_end_offset)
        write_snapshot(path, entries)
        self._snapshots[self.map_end_offset] = path

    def _delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        for o in [o for o in self._snapshots if o < offset]:
            self._delete_snapshot(o)

    def remove_stray_snapshots(self, segment_base_offsets: list[int]) -> None:
        """Keep snapshots at segment bases, plus the largest one if it is above every base (the LEO snapshot)."""
        bases = set(segment_base_offsets)
        strays = sorted(o for o in self._snapshots if o not in bases)
        keep = strays[-1] if strays and (not bases or strays[-1] > max(bases)) else None
        for o in strays:
            if o != keep:
                self._delete_snapshot(o)

    def rename_snapshot_for_deletion(self, offset: int) -> Path | None:
        path = self._snapshots.pop(offset, None)
        if path is None or not path.exists():
            return None
        target = path.with_name(path.name + names.DELETED_SUFFIX)
        path.rename(target)
        return target

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for o in list(self._snapshots):
            self._delete_snapshot(o)
        self.producers.clear()
        self.ongoing_txns.clear()
        self.map_end_offset = offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots outside (log start, log end], then load the newest readable one."""
        for o in [o for o in self._snapshots if o > log_end_offset or o <= log_start_offset]:
            self._delete_snapshot(o)
        self.producers.clear()
        self.ongoing_txns.clear()
        self.map_end_offset = log_start_offset
        for offset in sorted(self._snapshots, reverse=True):
            try:
                entries = read_snapshot(self._snapshots[offset])
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: deleting corrupt producer snapshot %s: %s", self.log_dir.name,
                            self._snapshots[offset].name, exc)
                self._delete_snapshot(offset)
                continue
            for s in entries:
                if s.current_txn_first_offset < 0 and now_ms - s.timestamp >= self.producer_id_expiration_ms:
                    continue
                entry = ProducerStateEntry(s.producer_id, s.producer_epoch, coordinator_epoch=s.coordinator_epoch,
                                           last_timestamp=s.timestamp)
                if s.last_sequence >= 0 or s.last_offset >= 0:
                    entry.batches.append(BatchMetadata(s.last_sequence, s.last_offset, s.offset_delta, s.timestamp))
                if s.current_txn_first_offset >= 0:
                    entry.current_txn_first_offset = s.current_txn_first_offset
                    self.ongoing_txns[s.current_txn_first_offset] = s.producer_id
                self.producers[s.producer_id] = entry
            self.map_end_offset = offset
            return
