"""Producer state (Kafka's ProducerStateManager): idempotence, transactions and `.snapshot` files.

For every producer id the log remembers the epoch, the metadata of the last five batches, the
coordinator epoch and the first offset of an open transaction. The five batches let the log answer
a client's retry of any of them with the original offsets instead of writing the records twice
(a producer has at most five requests in flight). The open transactions give the first unstable
offset, which caps what `read_committed` consumers may see.

Appends are two-phase so that a rejected batch is never written:

* `find_duplicate` (client retries only) is asked first; a hit is answered without appending;
* `prepare_append` checks the batch against the state and changes nothing, raising Kafka's error;
* `complete_append` records the batch with the offsets it was really written at, once it is in
  the log. An end marker returns the `CompletedTxn` the log needs for its transaction index.

Snapshots of the state (`<map end offset>.snapshot`) are taken at every roll, after recovering a
segment and at shutdown, so a restart replays only the log after the newest snapshot. Only the
last batch of each producer is persisted, exactly as Kafka does, so after a restart only a retry
of that last batch is recognised as a duplicate.

Deliberate simplifications (see also docs/design.md):

* A transaction stops counting as unstable at its end marker. Kafka also keeps completed
  transactions whose marker is not yet below the high watermark, which needs the log to report
  every high-watermark move; with a single replica the high watermark reaches the marker with the
  append, so the two agree there.
* Each batch of a multi-batch append is validated against the state before the append, not the
  state the earlier batches of the same append will leave. Only client appends are checked for
  sequences, and those carry exactly one batch, so this only matters for a follower batch that is
  non-transactional right after a transactional one of the same producer, which no producer sends.
* A non-transactional batch inside an open transaction is tolerated with a warning during
  recovery (Kafka would fail the log load): the data is already on disk and was accepted once.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafkalite.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, RecordBatch
from kafkalite.records.control import ControlRecordType, EndTransactionMarker, end_txn_marker_of
from kafkalite.records.record import MAX_SEQUENCE, decrement_sequence
from kafkalite.storage import names
from kafkalite.storage.names import as_path
from kafkalite.storage.producer_snapshot import (
    NO_COORDINATOR_EPOCH,
    NO_OFFSET,
    NO_TIMESTAMP,
    CorruptSnapshotError,
    ProducerSnapshotEntry,
    list_snapshots,
    read_snapshot,
    write_snapshot,
)

log = logging.getLogger("kafkalite.producer")

NUM_BATCHES_TO_RETAIN = 5
"""Kafka's max.in.flight.requests.per.connection limit for idempotence: a retry can only be one of these."""

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms


class AppendOrigin(enum.Enum):
    """Who wrote a batch; it decides which checks apply.

    Clients get every check. The transaction coordinator writes end markers and is fenced by epochs
    but sends no sequences. Replication copies what a leader already validated, so a follower only
    warns where a leader would refuse (it must not diverge from its leader).
    """

    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What a batch leaves behind for duplicate detection: its sequence range and where it was written."""

    last_seq: int
    last_offset: int
    offset_delta: int  # last_offset - first offset, which is also last_seq - first_seq (modulo wrap)
    timestamp: int

    @property
    def first_seq(self) -> int:
        if self.last_seq == NO_SEQUENCE:
            return NO_SEQUENCE
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """Everything the log knows about one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int | None = None
    last_timestamp: int = NO_TIMESTAMP

    @property
    def is_empty(self) -> bool:
        """No batch metadata: the producer was only seen through a marker, or its epoch just changed."""
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        """The last offset of the producer's last data batch (the cleaner keeps that batch)."""
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def batch_with_sequence_range(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def update_epoch(self, epoch: int) -> None:
        """Sequences are per epoch: the batches of an older epoch can no longer be retried."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by an end marker: the log indexes it if it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class AppendKind(enum.Enum):
    """What `complete_append` has to do with a prepared batch."""

    NOOP = 0  # no producer id, or a control batch that is not an end marker (e.g. emptied by the cleaner)
    DATA = 1
    MARKER = 2


@dataclass(slots=True)
class PendingAppend:
    """A validated batch, waiting for `complete_append` once it is in the log."""

    batch: RecordBatch
    origin: AppendOrigin
    kind: AppendKind
    marker: EndTransactionMarker | None = None

    @property
    def is_noop(self) -> bool:
        return self.kind is AppendKind.NOOP


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    """Sequences wrap from 2^31-1 to 0; with no previous sequence (-1) only 0 follows."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == MAX_SEQUENCE)


class ProducerStateManager:
    """Producer state of one partition log, and the `.snapshot` files in its directory."""

    def __init__(
        self,
        log_dir: Path | str,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        clock: Clock = SYSTEM_CLOCK,
        file_names: Iterable[str] | None = None,
    ) -> None:
        """`file_names`: the directory's files as the caller (a loading Log) just listed them."""
        self.log_dir = as_path(log_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.clock = clock
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing_txns: dict[int, int] = {}  # first offset -> producer id
        self._snapshots: dict[int, Path] = dict(list_snapshots(self.log_dir, file_names))
        self._map_end_offset = 0
        # The log start offset as last told (loading, truncation): it only moves forward in between, and a snapshot
        # at or below the log start is never loaded (truncate_and_reload deletes it), so none is written there.
        self._log_start_floor = 0
        # False while a log manager recovers many logs: it syncs the file system once afterwards instead
        self.durable_snapshots = True

    # --- state -----------------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """The offset up to which (exclusive) the state reflects the log."""
        return self._map_end_offset

    def update_map_end_offset(self, offset: int) -> None:
        """Set, not raise: loading moves it back to a snapshot's offset before replaying forward."""
        self._map_end_offset = offset

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """A copy of the producer map (the entries themselves are live)."""
        return dict(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def is_empty(self) -> bool:
        return not self._producers and not self._ongoing_txns

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None.

        Kafka also counts completed transactions whose marker is not yet below the high watermark;
        here a transaction is stable from its marker on (module docstring).
        """
        return min(self._ongoing_txns, default=None)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO right after `completed`: the oldest transaction still open by another producer, else
        past the marker. Stored with an aborted transaction, it tells a consumer how far that abort
        can matter."""
        others = [first for first, pid in self._ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Kafka's completeTxn. `complete_append` already closed the transaction, so this is idempotent
        and kept for the callers' sake (segment recovery, log append)."""
        if self._ongoing_txns.get(completed.first_offset) == completed.producer_id:
            del self._ongoing_txns[completed.first_offset]

    # --- append ----------------------------------------------------------------------------------

    def find_duplicate(self, batch: RecordBatch) -> BatchMetadata | None:
        """A client's retry of one of the producer's last five batches, with the offsets it got.

        Only an exact match of epoch and sequence range counts; anything else is left to the sequence
        checks, so an older retry fails with OutOfOrderSequence as in Kafka.
        """
        if not batch.has_producer_id:
            return None
        entry = self._producers.get(batch.producer_id)
        if entry is None or entry.producer_epoch != batch.producer_epoch:
            return None
        return entry.batch_with_sequence_range(batch.base_sequence, batch.last_sequence)

    def prepare_append(self, batch: RecordBatch, origin: AppendOrigin) -> PendingAppend:
        """Check a batch against the producer's state without changing anything.

        Raises InvalidProducerEpochError, OutOfOrderSequenceError, InvalidTxnStateError or
        TransactionCoordinatorFencedError, the way Kafka's ProducerAppendInfo does.
        """
        if not batch.has_producer_id:
            return PendingAppend(batch, origin, AppendKind.NOOP)
        entry = self._producers.get(batch.producer_id)
        if batch.is_control:
            marker = end_txn_marker_of(batch)
            if marker is None:
                return PendingAppend(batch, origin, AppendKind.NOOP)
            if entry is not None:
                self._check_epoch(entry, batch, origin)
                self._check_coordinator_epoch(entry, batch, marker, origin)
            return PendingAppend(batch, origin, AppendKind.MARKER, marker)
        if entry is not None:
            self._check_epoch(entry, batch, origin)
            if origin is AppendOrigin.CLIENT:
                self._check_sequence(entry, batch)
            if entry.current_txn_first_offset is not None and not batch.is_transactional:
                raise InvalidTxnStateError(
                    f"expected a transactional write from producer {batch.producer_id} at offset "
                    f"{batch.base_offset} in {self.log_dir.name}: its transaction is open since offset "
                    f"{entry.current_txn_first_offset}")
        return PendingAppend(batch, origin, AppendKind.DATA)

    def _check_epoch(self, entry: ProducerStateEntry, batch: RecordBatch, origin: AppendOrigin) -> None:
        if batch.producer_epoch >= entry.producer_epoch:
            return
        message = (f"epoch of producer {batch.producer_id} at offset {batch.base_offset} in {self.log_dir.name} "
                   f"is {batch.producer_epoch}, smaller than the last seen epoch {entry.producer_epoch}")
        if origin is AppendOrigin.REPLICATION:
            log.warning("%s", message)
            return
        raise InvalidProducerEpochError(message)

    def _check_sequence(self, entry: ProducerStateEntry, batch: RecordBatch) -> None:
        first_seq = batch.base_sequence
        if batch.producer_epoch != entry.producer_epoch:
            # A new epoch restarts the sequences, unless the producer had none (its state came from a
            # marker of an unknown producer, or was lost), in which case any start is accepted.
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for new epoch of producer {batch.producer_id} at offset "
                    f"{batch.base_offset} in {self.log_dir.name}: {batch.producer_epoch} (request epoch), "
                    f"{first_seq} (seq. number), {entry.producer_epoch} (current producer epoch)")
            return
        if entry.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {batch.producer_id} at offset {batch.base_offset} "
                f"in {self.log_dir.name}: {first_seq} (incoming seq. number), {entry.last_seq} "
                f"(current end sequence number)")

    def _check_coordinator_epoch(self, entry: ProducerStateEntry, batch: RecordBatch, marker: EndTransactionMarker,
                                 origin: AppendOrigin) -> None:
        if marker.coordinator_epoch >= entry.coordinator_epoch:
            return
        message = (f"invalid coordinator epoch for producer {batch.producer_id} at offset {batch.base_offset} in "
                   f"{self.log_dir.name}: {marker.coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)")
        if origin is AppendOrigin.REPLICATION:
            log.info("%s", message)
            return
        raise TransactionCoordinatorFencedError(message)

    def complete_append(
        self, pending: PendingAppend | None, first_offset: int, last_offset: int
    ) -> CompletedTxn | None:
        """Record a batch now in the log at `first_offset..last_offset`; an end marker closes the
        producer's transaction and returns it (None for a marker of an empty transaction)."""
        completed = None
        if pending is not None and not pending.is_noop:
            batch = pending.batch
            pid = batch.producer_id
            entry = self._producers.get(pid)
            if entry is None:
                entry = self._producers[pid] = ProducerStateEntry(pid)
            if pending.kind is AppendKind.MARKER:
                assert pending.marker is not None, "a MARKER append is always built with its marker"
                completed = self._apply_marker(entry, batch, pending.marker, last_offset)
            else:
                self._apply_data(entry, batch, first_offset, last_offset)
        if last_offset + 1 > self._map_end_offset:
            self._map_end_offset = last_offset + 1
        return completed

    def _apply_data(self, entry: ProducerStateEntry, batch: RecordBatch, first_offset: int, last_offset: int) -> None:
        entry.update_epoch(batch.producer_epoch)
        entry.batches.append(BatchMetadata(batch.last_sequence, last_offset, last_offset - first_offset,
                                           batch.max_timestamp))
        entry.last_timestamp = batch.max_timestamp
        if batch.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self._ongoing_txns[first_offset] = entry.producer_id

    def _apply_marker(self, entry: ProducerStateEntry, batch: RecordBatch, marker: EndTransactionMarker,
                      offset: int) -> CompletedTxn | None:
        """Close the transaction. The batch metadata stays: a transactional producer keeps counting its
        sequences across transactions, so its next batch must still follow the last one."""
        completed = None
        first = entry.current_txn_first_offset
        if first is not None:
            completed = CompletedTxn(entry.producer_id, first, offset, marker.kind == ControlRecordType.ABORT)
            if self._ongoing_txns.get(first) == entry.producer_id:
                del self._ongoing_txns[first]
        entry.update_epoch(batch.producer_epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = batch.max_timestamp
        entry.current_txn_first_offset = None
        return completed

    # --- recovery ---------------------------------------------------------------------------------

    def update_from_recovered_batch(self, batch: RecordBatch) -> CompletedTxn | None:
        """Replay a batch read back from the log (a header-only batch is enough for data batches).

        Follower rules apply: no sequence checks, and lower epochs are taken as written; the data was
        validated when it was appended.
        """
        try:
            pending = self.prepare_append(batch, AppendOrigin.REPLICATION)
        except InvalidTxnStateError as exc:
            log.warning("%s; keeping the recovered batch", exc)
            pending = PendingAppend(batch, AppendOrigin.REPLICATION, AppendKind.DATA)
        return self.complete_append(pending, batch.base_offset, batch.last_offset)

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms, except those with an open transaction
        (their transaction must still be closed by a marker). Returns the ids removed."""
        if now_ms is None:
            now_ms = self.clock.milliseconds()
        expired = [pid for pid, entry in self._producers.items() if self._is_expired(entry, now_ms)]
        for pid in expired:
            del self._producers[pid]
        return expired

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        idle_ms = now_ms - entry.last_timestamp
        return entry.current_txn_first_offset is None and idle_ms >= self.producer_id_expiration_ms

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Kafka's hook for a log start move: the state cannot end before the log starts."""
        if self._map_end_offset < log_start_offset:
            self._map_end_offset = log_start_offset
        self.note_log_start_offset(log_start_offset)

    def note_log_start_offset(self, log_start_offset: int) -> None:
        """The log starts at `log_start_offset`: no snapshot is written at or below it (see take_snapshot)."""
        self._log_start_floor = max(self._log_start_floor, log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The log was emptied and restarts at `offset`: nothing before it matters any more."""
        for o in list(self._snapshots):
            self._delete_snapshot(o)
        self._producers.clear()
        self._ongoing_txns.clear()
        self._map_end_offset = offset
        self._log_start_floor = offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int, *,
                            keep_later_snapshots: bool = False) -> None:
        """Make the state describe the log up to at most `log_end_offset`, from the snapshots.

        Snapshots outside (log start, log end] are deleted: above the end they describe truncated data,
        at or below the start they can never be needed. If the state already ends exactly at the log
        end it is kept as is (it holds more batches than any snapshot). Otherwise the newest readable
        snapshot is loaded (a corrupt one is deleted and the next older tried), without the producers
        that expired meanwhile, and the map end offset is the snapshot's offset (or the log start if
        none is left); the caller replays the log from there.

        `keep_later_snapshots`: for recovery, which reloads the state as of a segment's base before it
        knows where that segment ends. Snapshots above `log_end_offset` are then ignored, not deleted:
        one the recovery does not cut below still describes the log exactly, and the load's final call
        (without this flag) deletes those above the recovered end. After kill -9 this spares every
        recovered partition the deletion of its newest snapshot and the writing of a new one.
        """
        doomed = [o for o in self._snapshots if o <= log_start_offset or (o > log_end_offset and
                                                                          not keep_later_snapshots)]
        for o in doomed:
            self._delete_snapshot(o)
        self._log_start_floor = log_start_offset
        if log_end_offset != self._map_end_offset:
            self._producers.clear()
            self._ongoing_txns.clear()
            self._load_from_snapshot(log_start_offset, log_end_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_from_snapshot(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        while candidates := [o for o in self._snapshots if o <= log_end_offset]:
            offset = max(candidates)
            path = self._snapshots[offset]
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as exc:
                log.warning("%s: deleting corrupt producer snapshot %s: %s", self.log_dir.name, path.name, exc)
                self._delete_snapshot(offset)
                continue
            except FileNotFoundError:
                log.warning("%s: producer snapshot %s disappeared", self.log_dir.name, path.name)
                del self._snapshots[offset]
                continue
            for snap in entries:
                entry = _entry_from_snapshot(snap)
                if not self._is_expired(entry, now_ms):
                    self._producers[entry.producer_id] = entry
                    if entry.current_txn_first_offset is not None:
                        self._ongoing_txns[entry.current_txn_first_offset] = entry.producer_id
            log.debug("%s: loaded producer state from %s (%d producers)", self.log_dir.name, path.name,
                      len(self._producers))
            self._map_end_offset = offset
            return
        self._map_end_offset = log_start_offset

    # --- snapshots --------------------------------------------------------------------------------

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

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write `<map end offset>.snapshot` if the state moved past the newest snapshot and past the log
        start; returns its path. `sync=False` leaves the file's fsync to the caller (a roll: Kafka's
        takeSnapshot(false), flushed with the rolled segment, not under the log's lock).

        Re-writing an unchanged state would only churn the disk, a snapshot below the newest one would
        never be loaded, and one at or below the log start offset is deleted unread by the next load.
        Kafka's rule is the same (it compares with the offset it last wrote or loaded, which is the log
        start when there is no snapshot): an empty partition has no `.snapshot` file. Writing one at
        offset 0 made every clean load of an empty partition delete it and write it again, with an fsync
        (half the cost of loading 10,000 empty partitions).
        """
        offset = self._map_end_offset
        latest = self.latest_snapshot_offset
        if (latest is not None and offset <= latest) or offset <= self._log_start_floor:
            return None
        path = names.snapshot_file(self.log_dir, offset)
        write_snapshot(path, [_snapshot_entry(e) for e in self._producers.values()],
                       durable=self.durable_snapshots and sync)
        self._snapshots[offset] = path
        return path

    def delete_snapshot(self, offset: int) -> bool:
        """Delete the snapshot at `offset` now; False if there was none."""
        return self._delete_snapshot(offset)

    def _delete_snapshot(self, offset: int) -> bool:
        path = self._snapshots.pop(offset, None)
        if path is None:
            return False
        path.unlink(missing_ok=True)
        return True

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete every snapshot strictly below `offset`."""
        for o in [o for o in self._snapshots if o < offset]:
            self._delete_snapshot(o)

    def delete_snapshots_after(self, offset: int) -> None:
        """Delete every snapshot strictly above `offset`."""
        for o in [o for o in self._snapshots if o > offset]:
            self._delete_snapshot(o)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int], relist: bool = True) -> None:
        """Delete snapshots that are not at a segment base, except the largest such one when it is above
        every base: that is the snapshot taken at the log end offset on shutdown, the one worth loading.

        The directory is listed again, as Kafka does, so files removed or added behind our back (an
        interrupted deletion, a copied directory) are taken into account. `relist=False` is for the
        loader: it listed the (locked) directory for this manager moments before, and every snapshot
        written or deleted since went through this manager.
        """
        bases = set(segment_base_offsets)
        if relist:
            self._snapshots = dict(list_snapshots(self.log_dir))
        strays = sorted(o for o in self._snapshots if o not in bases)
        keep = strays[-1] if strays and (not bases or strays[-1] > max(bases)) else None
        for o in strays:
            if o != keep:
                self._delete_snapshot(o)

    def rename_snapshot_for_deletion(self, offset: int) -> Path | None:
        """Rename `X.snapshot` to `X.snapshot.deleted` and forget it; the caller deletes the file after
        file.delete.delay.ms, like the segment it belonged to. None if there was no such file."""
        path = self._snapshots.pop(offset, None)
        if path is None:
            return None
        target = names.snapshot_file(self.log_dir, offset, names.DELETED_SUFFIX)
        try:
            path.rename(target)
        except FileNotFoundError:  # already gone: the intended outcome
            return None
        return target


def _snapshot_entry(entry: ProducerStateEntry) -> ProducerSnapshotEntry:
    """Only the last batch survives: after a restart only a retry of it is recognised (as in Kafka)."""
    return ProducerSnapshotEntry(
        producer_id=entry.producer_id,
        producer_epoch=entry.producer_epoch,
        last_sequence=entry.last_seq,
        last_offset=entry.last_data_offset,
        offset_delta=entry.last_offset_delta,
        timestamp=entry.last_timestamp,
        coordinator_epoch=entry.coordinator_epoch,
        current_txn_first_offset=NO_OFFSET if entry.current_txn_first_offset is None
        else entry.current_txn_first_offset,
    )


def _entry_from_snapshot(snap: ProducerSnapshotEntry) -> ProducerStateEntry:
    entry = ProducerStateEntry(
        snap.producer_id,
        snap.producer_epoch,
        coordinator_epoch=snap.coordinator_epoch,
        current_txn_first_offset=snap.current_txn_first_offset if snap.current_txn_first_offset >= 0 else None,
        last_timestamp=snap.timestamp,
    )
    if snap.last_offset >= 0:  # Kafka's rule: no data offset means no batch metadata
        entry.batches.append(BatchMetadata(snap.last_sequence, snap.last_offset, snap.offset_delta, snap.timestamp))
    return entry
