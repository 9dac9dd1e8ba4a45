"""One partition as this broker serves it (Kafka's cluster/Partition): its role, leader epoch, replica set
and the commit rule.

The role and the leader epoch are decided outside the partition and handed to it: by the controller's
LeaderAndIsr in a cluster, by the broker itself in single-broker mode (it leads every local partition, at
the epoch the log last recorded, so batches keep the epoch they always had). They are never read back from
the log on the request path: the leader epoch cache says which epochs the log *holds*, not which epoch
this broker *leads* at.

The commit rule lives in one method, `maybe_increment_high_watermark`: the high watermark is the smallest
log end offset over the in-sync replicas (Kafka's maybeIncrementLeaderHW). With no followers yet the only
in-sync replica is the leader, so the HW follows the leader's log end; follower LEOs, fed by replica
fetches, drop into `_isr_log_end_offsets`. It runs after appends and leadership changes, never inside a
read: a read must not commit anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkalite.errors import (
    FencedLeaderEpochError,
    KafkaliteError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from kafkalite.storage.file_records import FileSlice
from kafkalite.storage.log import FetchIsolation, Log, LogAppendInfo
from kafkalite.storage.producer_state import AppendOrigin

NO_LEADER = -1
NO_EPOCH = -1


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


@dataclass(slots=True)
class Partition:
    """A local replica of `topic`-`partition` and what this broker knows of its leadership."""

    topic: str
    partition: int
    log: Log
    local_broker_id: int
    leader_id: int = NO_LEADER
    _leader_epoch: int = NO_EPOCH
    partition_epoch: int = 0  # the version of the partition state (Kafka's zkVersion / partitionEpoch)
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)

    @classmethod
    def led_alone(cls, lg: Log, broker_id: int = 0) -> Partition:
        """The partition of `lg` with `broker_id` as its only replica and leader, at the epoch the log last
        recorded (0 for a new log): what a single broker, or a tool without one, is for its logs."""
        latest = lg.latest_epoch
        part = cls(lg.topic, lg.partition, lg, broker_id)
        part.make_leader(0 if latest is None or latest < 0 else latest, isr=[broker_id], replicas=[broker_id])
        return part

    @property
    def leader_epoch(self) -> int:
        """The epoch this broker last learnt for the partition (-1 before any LeaderAndIsr)."""
        return self._leader_epoch

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # --- role changes ---------------------------------------------------------------------------

    def make_leader(self, leader_epoch: int, isr: list[int], replicas: list[int], partition_epoch: int = 0) -> bool:
        """Lead at `leader_epoch` (Kafka's Partition.makeLeader); True when this broker was not leading
        before. A new epoch the log already moved past is recorded at the log end, so OffsetsForLeaderEpoch
        answers for it before the first append; in single-broker mode the epoch is the log's own, a no-op."""
        was_leader = self.is_leader
        latest = self.log.latest_epoch
        if latest is not None and leader_epoch > latest:
            self.log.maybe_assign_epoch_start_offset(leader_epoch, self.log.log_end_offset)
        self.leader_id = self.local_broker_id
        self._leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.maybe_increment_high_watermark()
        return not was_leader

    def make_follower(self, leader_id: int, leader_epoch: int, isr: list[int], replicas: list[int],
                      partition_epoch: int = 0) -> bool:
        """Follow `leader_id` (-1: no leader) at `leader_epoch`; True when the leader changed. Until
        replication lands a follower only refuses: produce, fetch and list-offsets from clients get
        NOT_LEADER_OR_FOLLOWER. Nothing is truncated here; that is the replica fetcher's job."""
        changed = leader_id != self.leader_id
        self.leader_id = leader_id
        self._leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        return changed

    # --- checks ---------------------------------------------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """KIP-320 fencing of the epoch a client saw in Metadata (-1 = don't check)."""
        if current_leader_epoch < 0:
            return
        ours = self._leader_epoch
        if current_leader_epoch < ours:
            raise FencedLeaderEpochError(f"{self.topic}-{self.partition}: leader epoch {current_leader_epoch} "
                                         f"is older than the current {ours}")
        if current_leader_epoch > ours:
            raise UnknownLeaderEpochError(f"{self.topic}-{self.partition}: leader epoch {current_leader_epoch} "
                                          f"is newer than the current {ours}")

    def leader_log(self, current_leader_epoch: int = NO_EPOCH) -> Log:
        """The log, if this broker leads the partition at an epoch the caller agrees with (Kafka's
        localLogWithEpochOrThrow with requireLeader): the epoch check first, then leadership."""
        self.check_leader_epoch(current_leader_epoch)
        if not self.is_leader:
            leader = f"broker {self.leader_id}" if self.leader_id != NO_LEADER else "no broker"
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of "
                                           f"{self.topic}-{self.partition} ({leader} is, at epoch "
                                           f"{self._leader_epoch})")
        return self.log

    # --- the commit rule ------------------------------------------------------------------------

    def _isr_log_end_offsets(self) -> list[int]:
        """The log end offsets of the in-sync replicas this broker knows: its own only, until followers
        report theirs through replica fetches."""
        return [self.log.log_end_offset]

    def maybe_increment_high_watermark(self) -> bool:
        """HW := min LEO over the ISR, never backwards; True when it moved (waiters may complete)."""
        if not self.is_leader:
            return False
        new_hw = min(self._isr_log_end_offsets())
        if new_hw == self.log.log_end_offset:
            return self.log.maybe_increment_high_watermark(self.log.log_end_offset_metadata) is not None
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    # --- requests -------------------------------------------------------------------------------

    def append_records_to_leader(self, records: bytes | bytearray | memoryview,
                                 origin: AppendOrigin = AppendOrigin.CLIENT) -> tuple[LogAppendInfo, bool]:
        """Append one validated batch as leader, stamped with the leader epoch, then apply the commit rule;
        returns the append's info and whether the HW moved. A duplicate (idempotent retry) appends
        nothing, so nothing can commit. OSError propagates: the caller owns log-dir failure handling."""
        lg = self.leader_log()
        info = lg.append_as_leader(records, self._leader_epoch, origin)
        moved = False if info.duplicate else self.maybe_increment_high_watermark()
        return info, moved

    def read(self, fetch_offset: int, max_bytes: int, *, isolation: FetchIsolation, min_one_message: bool,
             current_leader_epoch: int = NO_EPOCH, last_fetched_epoch: int = NO_EPOCH) -> PartitionRead:
        """A consumer's read from the leader; error codes in the result, OSError propagates. The
        watermarks are the ones before the read; nothing here changes them."""
        r = PartitionRead(self.topic, self.partition)
        try:
            lg = self.leader_log(current_leader_epoch)
            r.high_watermark = lg.high_watermark
            r.last_stable_offset = lg.last_stable_offset
            r.log_start_offset = lg.log_start_offset
            if last_fetched_epoch >= 0:
                epoch, end = lg.leader_epoch_cache.end_offset_for(last_fetched_epoch, lg.log_end_offset)
                if epoch != last_fetched_epoch or end < fetch_offset:
                    r.diverging = (epoch, end)
                    return r
            info = lg.read(fetch_offset, max_bytes, isolation, min_one_message)
            r.records = info.records
            if isolation is FetchIsolation.TXN_COMMITTED:
                r.aborted = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                             for a in info.aborted_transactions or []]
        except KafkaliteError as exc:
            r.error = exc.error_code
            if not isinstance(exc, OffsetOutOfRangeError):
                r.high_watermark = r.last_stable_offset = r.log_start_offset = -1
        return r

    # --- follower side (helper C; driven by broker/replica_fetcher.py) -------------------------------
    # Everything below runs on the broker's event loop, for a partition this broker follows. The fetcher
    # checks the leader epoch around each call, so none of these is ever applied for a leadership that was
    # replaced while its request was in flight.

    def append_records_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append the leader's batches as they are (Kafka's Partition.appendRecordsToFollowerOrFutureReplica):
        offsets and partition leader epochs kept, the epoch cache and producer state updated from them, so
        this replica can lead later and still deduplicate idempotent retries. Only whole batches are
        appended; a truncated last batch of the fetch response is fetched again. OSError propagates."""
        return self.log.append_as_follower(records)

    def truncate_to(self, offset: int) -> bool:
        """Drop everything at and above `offset` (§4.3 step 4): epoch cache, producer state and HW follow."""
        return self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset`: the leader's log start is past everything held here."""
        self.log.truncate_fully_and_start_at(offset)

    def update_follower_high_watermark(self, leader_hw: int) -> bool:
        """Follower HW := min(leader's HW, own LEO), only forward (Kafka 3.x maybeUpdateHighWatermark: a new
        leader may answer with an older HW than the one already learnt); True when it moved. Truncation is
        what lowers it."""
        new_hw = min(leader_hw, self.log.log_end_offset)
        if new_hw <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(new_hw)
        return True

    def maybe_update_log_start_offset(self, leader_log_start: int) -> bool:
        """Log start := max(own, leader's), as far as this replica's HW allows (the rest waits for the next
        fetch, once the HW caught up); True when it moved."""
        if leader_log_start <= self.log.log_start_offset or leader_log_start > self.log.high_watermark:
            return False
        return self.log.maybe_increment_log_start_offset(leader_log_start, "leader offset increment")
