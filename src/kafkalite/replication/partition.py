"""One partition as this broker serves it (Kafka's cluster/Partition): its role, leader epoch, replica set
and the commit rule.

The role and the leader epoch are decided outside the partition and handed to it: by the controller's
LeaderAndIsr in a cluster, by the broker itself in single-broker mode (it leads every local partition, at
the epoch the log last recorded, so batches keep the epoch they always had). They are never read back from
the log on the request path: the leader epoch cache says which epochs the log *holds*, not which epoch
this broker *leads* at.

The commit rule lives in one method, `maybe_increment_high_watermark`: the high watermark is the smallest
log end offset over the leader and the followers in the maximal ISR or caught up (Kafka's
Partition.maybeIncrementLeaderHW), only forward, and (KIP-966) only while the committed ISR has
min.insync.replicas members. A partition without followers (single-broker mode, replication factor 1) takes
a short path: the HW follows the log end at once. It runs after appends, follower fetches, ISR changes and
leadership changes, never inside a read: a read must not commit anything.

On the leader, each follower has a `RemoteReplica` record fed by its replica fetches (Kafka's
Partition.updateFollowerFetchState). The ISR is `isr` (committed: what the store holds) plus at most one
change in flight (`pending`): a shrink or an expansion is proposed here, written to the store by the
ReplicaManager with a compare-and-set on `partition_epoch`, and only then applied by `complete_isr_change`.
While an expansion is pending its new member already counts for the HW and acks=all (the "maximal ISR");
while a shrink is pending the old, larger ISR still governs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kafkalite.config.registry import default as config_default
from kafkalite.errors import (
    FencedLeaderEpochError,
    KafkaliteError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from kafkalite.storage.file_records import FileSlice
from kafkalite.storage.log import FetchIsolation, Log, LogAppendInfo
from kafkalite.storage.producer_state import AppendOrigin


def monotonic_ms() -> int:
    """The clock of follower fetch and catch-up times (immune to wall-clock steps)."""
    return int(time.monotonic() * 1000)

NO_LEADER = -1
NO_EPOCH = -1
UNKNOWN_OFFSET = -1
DEFAULT_LAG_TIME_MAX_MS: int = config_default("replica.lag.time.max.ms")  # the registry is its one home
NEVER_MS = -(2**62)  # "never caught up" on the monotonic clock, which may be small after boot


@dataclass(slots=True)
class RemoteReplica:
    """What the leader knows of one follower (Kafka's Replica): its log end and start as its fetches say,
    and when it was last caught up with the leader (the two rules of Kafka's Replica.updateFetchState)."""

    broker_id: int
    leo: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_leo: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = NEVER_MS

    def caught_up(self, leader_leo: int, now_ms: int, lag_time_max_ms: int) -> bool:
        return self.leo == leader_leo or now_ms - self.last_caught_up_time_ms <= lag_time_max_ms


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One ISR change in flight: the ISR proposed to the store, written against `partition_epoch` (the
    state's version) at `leader_epoch`. `expand` tells a PendingExpand from a PendingShrink."""

    isr: tuple[int, ...]
    expand: bool
    leader_epoch: int
    partition_epoch: int


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
    leader_log_end: int = -1  # the leader's LEO before the read (a follower's catch-up rule uses it)

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
    isr: list[int] = field(default_factory=list)  # committed: what the store holds
    controller_epoch: int = -1  # of the controller that made this broker leader; written back with ISR changes
    lag_time_max_ms: int = DEFAULT_LAG_TIME_MAX_MS
    hw_requires_min_isr: bool = True  # KIP-966 rule 1 (replica.high.watermark.requires.min.isr)
    leader_epoch_start_offset: int | None = None
    remote: dict[int, RemoteReplica] = field(default_factory=dict)
    pending: IsrChange | None = None
    isr_frozen: bool = False  # a conflicting ISR write: no more changes until the next LeaderAndIsr

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

    def make_leader(self, leader_epoch: int, isr: list[int], replicas: list[int], partition_epoch: int = 0,
                    controller_epoch: int = -1, now_ms: int | None = None) -> bool:
        """Lead at `leader_epoch` (Kafka's Partition.makeLeader); True when this broker was not leading
        before. A new epoch the log already moved past is recorded at the log end, so OffsetsForLeaderEpoch
        answers for it before the first append; in single-broker mode the epoch is the log's own, a no-op.
        Follower records are reset: every ISR member gets a full lag time to fetch in the new epoch, and a
        broker that just became leader knows no follower's log end, so the HW waits for their fetches."""
        was_leader = self.is_leader
        latest = self.log.latest_epoch
        if latest is not None and leader_epoch > latest:
            self.log.maybe_assign_epoch_start_offset(leader_epoch, self.log.log_end_offset)
        self.leader_id = self.local_broker_id
        self._leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.controller_epoch = controller_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.pending = None
        self.isr_frozen = False
        leo = self.log.log_end_offset
        self.leader_epoch_start_offset = leo
        followers = [b for b in replicas if b != self.local_broker_id]
        # built whole, then swapped in: LeaderAndIsr is applied on a worker thread while fetches read it
        remote: dict[int, RemoteReplica] = {}
        if followers:
            now = monotonic_ms() if now_ms is None else now_ms
            old = self.remote if was_leader else {}
            for b in followers:
                r = old.get(b) or RemoteReplica(b)
                r.last_fetch_leader_leo = leo
                r.last_fetch_time_ms = now
                r.last_caught_up_time_ms = now if b in self.isr else NEVER_MS
                remote[b] = r
        self.remote = remote
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
        self.leader_epoch_start_offset = None
        self.remote = {}
        self.pending = None
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

    @property
    def maximal_isr(self) -> list[int]:
        """The committed ISR, plus the member of an expansion in flight (it only makes HW and acks=all
        stricter); a pending shrink still counts its leaving members."""
        if self.pending is not None and self.pending.expand:
            return list(self.pending.isr)
        return self.isr

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """THE commit rule (Kafka's Partition.maybeIncrementLeaderHW): HW := min LEO over the leader and every
        follower in the maximal ISR or caught up, never backwards, and (KIP-966) only while the committed ISR
        has min.insync.replicas members (at most the replication factor); True when it moved (waiters may
        complete)."""
        if not self.is_leader:
            return False
        lg = self.log
        if not self.remote:  # no followers: the HW follows the log end
            return lg.maybe_increment_high_watermark(lg.log_end_offset_metadata) is not None
        if self.hw_requires_min_isr and len(self.isr) < min(self.min_insync_replicas, len(self.replicas)):
            return False
        leo = lg.log_end_offset
        now = monotonic_ms() if now_ms is None else now_ms
        maximal = self.maximal_isr
        new_hw = leo
        for r in self.remote.values():
            if r.broker_id in maximal or r.caught_up(leo, now, self.lag_time_max_ms):
                new_hw = min(new_hw, r.leo)
        if new_hw == leo:
            return lg.maybe_increment_high_watermark(lg.log_end_offset_metadata) is not None
        if new_hw > lg.high_watermark:
            lg.update_high_watermark(new_hw)
            return True
        return False

    # --- leader: followers and the ISR ----------------------------------------------------------------

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                                    now_ms: int, leader_leo: int | None = None) -> bool:
        """Record a follower's fetch at `fetch_offset` (its log end), as Kafka's Partition.updateFollowerFetchState:
        both catch-up rules against the leader's LEO before the read (`leader_leo`). True when the HW moved. A
        replica outside the assignment records nothing (the caller then answers without records)."""
        r = self.remote.get(replica_id)
        if r is None or not self.is_leader:
            return False
        leo = self.log.log_end_offset if leader_leo is None else leader_leo
        if fetch_offset >= leo:
            r.last_caught_up_time_ms = max(r.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= r.last_fetch_leader_leo:
            r.last_caught_up_time_ms = max(r.last_caught_up_time_ms, r.last_fetch_time_ms)
        r.leo = fetch_offset
        r.log_start_offset = log_start_offset
        r.last_fetch_leader_leo = leo
        r.last_fetch_time_ms = now_ms
        return self.maybe_increment_high_watermark(now_ms)

    def maybe_expand_isr(self, replica_id: int, now_ms: int) -> IsrChange | None:
        """A follower outside the ISR that reached the HW and this epoch's start (Kafka's Partition.maybeExpandIsr)
        is proposed for the ISR; the returned change is pending (counted for the HW) until the store has it."""
        r = self.remote.get(replica_id)
        if (r is None or not self.is_leader or self.pending is not None or self.isr_frozen
                or replica_id in self.isr):
            return None
        start = self.leader_epoch_start_offset or 0
        if r.leo < self.log.high_watermark or r.leo < start:
            return None
        self.pending = IsrChange(tuple([*self.isr, replica_id]), True, self._leader_epoch, self.partition_epoch)
        return self.pending

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        """ISR followers that are behind the leader's log end and have not been caught up for
        replica.lag.time.max.ms (Kafka's getOutOfSyncReplicas)."""
        leo = self.log.log_end_offset
        return [b for b in self.isr if b != self.local_broker_id and b in self.remote
                and not self.remote[b].caught_up(leo, now_ms, self.lag_time_max_ms)]

    def maybe_shrink_isr(self, now_ms: int) -> IsrChange | None:
        """Propose the ISR without the out-of-sync followers; the old ISR governs until the store has it."""
        if not self.is_leader or self.pending is not None or self.isr_frozen:
            return None
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return None
        self.pending = IsrChange(tuple(b for b in self.isr if b not in out), False, self._leader_epoch,
                                 self.partition_epoch)
        return self.pending

    def complete_isr_change(self, change: IsrChange, partition_epoch: int | None) -> bool:
        """The store's answer to `change`: its new version (committed: the ISR takes effect) or None (a
        conflicting write: keep the old ISR and propose nothing until the next LeaderAndIsr). Answers for a
        change that is no longer the one in flight (a LeaderAndIsr came meanwhile) are ignored. True when
        the HW moved."""
        if self.pending is not change:
            return False
        self.pending = None
        if partition_epoch is None:
            self.isr_frozen = True
            return False
        self.isr = list(change.isr)
        self.partition_epoch = partition_epoch
        return self.maybe_increment_high_watermark()

    def isr_change_failed(self, change: IsrChange) -> None:
        """The write could not be made (the store unreachable): drop it; the next fetch or expiry run
        proposes again."""
        if self.pending is change:
            self.pending = None

    def check_enough_replicas_for_acks_all(self) -> None:
        """acks=all before the append (as in Kafka's Partition.appendRecordsToLeader): NOT_ENOUGH_REPLICAS when
        the committed ISR is smaller than the topic's min.insync.replicas; nothing is written."""
        need = self.min_insync_replicas
        if len(self.isr) < need:
            raise NotEnoughReplicasError(f"The size of the current ISR {self.isr} of {self.topic}-{self.partition} "
                                         f"is insufficient to satisfy the min.isr requirement of {need}")

    def check_offset_available(self) -> None:
        """ListOffsets latest on a new leader whose HW is still below its epoch's start offset
        (OFFSET_NOT_AVAILABLE): the answer could otherwise go backwards."""
        start = self.leader_epoch_start_offset
        if start is not None and self.log.high_watermark < start:
            raise OffsetNotAvailableError(f"{self.topic}-{self.partition}: the high watermark "
                                          f"{self.log.high_watermark} is below the start offset {start} of "
                                          f"leader epoch {self._leader_epoch}")

    def low_watermark(self, alive: Callable[[int], bool] = lambda _b: True) -> int:
        """The smallest log start offset over the leader and the live followers (Kafka's
        lowWatermarkIfLeader; DeleteRecords completes when it reaches the target). A live follower that has
        not fetched in this epoch counts as -1: it may still hold the records."""
        low = self.log.log_start_offset
        for r in self.remote.values():
            if alive(r.broker_id):
                low = min(low, r.log_start_offset)
        return low

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
             current_leader_epoch: int = NO_EPOCH, last_fetched_epoch: int = NO_EPOCH,
             replica_id: int = -1) -> PartitionRead:
        """A consumer's or a follower's (`replica_id` >= 0) read from the leader; error codes in the result,
        OSError propagates. The watermarks and the leader's log end are the ones before the read; nothing
        here changes them. A replica outside the assignment gets no records."""
        r = PartitionRead(self.topic, self.partition)
        try:
            lg = self.leader_log(current_leader_epoch)
            r.high_watermark = lg.high_watermark
            r.last_stable_offset = lg.last_stable_offset
            r.log_start_offset = lg.log_start_offset
            r.leader_log_end = lg.log_end_offset
            if replica_id >= 0 and replica_id not in self.remote:
                return r
            if last_fetched_epoch >= 0:
                epoch, end = lg.leader_epoch_cache.end_offset_for(last_fetched_epoch, lg.log_end_offset)
                if end < 0:  # no history to compare with (Kafka's readRecords): the follower must reset
                    raise OffsetOutOfRangeError(f"{self.topic}-{self.partition}: the leader has no end offset for "
                                                f"epoch {last_fetched_epoch}")
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

    # --- follower side (driven by broker/replica_fetcher.py) -------------------------------
    # Everything below runs on the broker's event loop, for a partition this broker follows. The fetcher
    # checks the leader epoch around each call, so none of these is ever applied for a leadership that was
    # replaced while its request was in flight.

    def append_records_as_follower(self, records: bytes | bytearray | memoryview, chunk_bytes: int | None = None,
                                   runs: list[tuple[int, int]] | None = None) -> LogAppendInfo:
        """Append the leader's batches as they are (Kafka's Partition.appendRecordsToFollowerOrFutureReplica):
        offsets and partition leader epochs kept, the epoch cache and producer state updated from them, so
        this replica can lead later and still deduplicate idempotent retries. Only whole batches are
        appended; a truncated last batch of the fetch response is fetched again. OSError propagates.

        With `chunk_bytes` (replica.fetch.max.bytes) a large fetch is appended in runs of whole batches of
        at most that size (at least one batch each): the log, its index density (one entry per append) and
        its segment-size check then see exactly what Kafka's 1 MiB fetches give them. `runs` passes the
        walk `follower_runs` already made (the fetcher's look-ahead needs it before the append). A failure
        in a later run leaves the earlier ones appended; the caller reads the log end, not this result, to
        go on."""
        if runs is None:
            if chunk_bytes is None or len(records) <= chunk_bytes:
                return self.log.append_as_follower(records)
            runs = follower_runs(records, chunk_bytes).runs
        view = memoryview(records)
        first: LogAppendInfo | None = None
        info = LogAppendInfo(-1, -1, -1, -1, log_start_offset=self.log.log_start_offset)
        for start, end in runs:
            info = self.log.append_as_follower(view[start:end])
            first = first or info
        if first is not None and first is not info:
            info.first_offset = first.first_offset
        return info

    def truncate_to(self, offset: int) -> bool:
        """Drop everything at and above `offset` (Kafka's Partition.truncateTo): epoch cache, producer state and HW
        follow."""
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


@dataclass
class FollowerRuns:
    """A fetched partition's records cut for the follower's append (`follower_runs`)."""

    runs: list[tuple[int, int]]  # (start, end) byte positions, whole batches, in order
    next_offset: int  # one past the last offset of the last whole batch; -1 when none or a length is broken
    last_epoch: int  # the partition leader epoch of that batch (-1 when unknown)


def follower_runs(records: bytes | bytearray | memoryview, chunk_bytes: int | None) -> FollowerRuns:
    """Runs of whole batches of at most `chunk_bytes` each (at least one batch each; one run when None),
    without a partial last batch, and the offset after the last whole batch, read from batch headers only
    (one step per batch, no record opened, no CRC: the log checks those when it appends). A length below
    Kafka's minimum ends the walk with a run to the end, for the log to refuse with its position and
    reason, and `next_offset` -1: nothing can be assumed past it."""
    view = memoryview(records)
    end = len(view)
    limit = end if chunk_bytes is None else chunk_bytes
    runs: list[tuple[int, int]] = []
    start = pos = 0
    last = -1
    broken = False
    while True:
        size = _batch_size_at(view, pos, end)
        if size < 0:  # a broken length: the log refuses the rest with its position and reason
            size, broken = end - pos, True
        elif size:
            last = pos
        if size and (pos - start + size <= limit or pos == start):
            pos += size
            continue
        if pos == start:  # nothing whole left (a partial last batch is fetched again)
            break
        runs.append((start, pos))
        start = pos
    if broken or last < 0 or view[last + 16] != 2:  # only v2 headers say where a batch ends
        return FollowerRuns(runs, -1, -1)
    base = int.from_bytes(view[last:last + 8], "big", signed=True)
    epoch = int.from_bytes(view[last + 12:last + 16], "big", signed=True)
    last_delta = int.from_bytes(view[last + 23:last + 27], "big", signed=True)
    return FollowerRuns(runs, base + last_delta + 1, epoch)


def _batch_size_at(view: memoryview, pos: int, end: int) -> int:
    """The size of the whole batch at `pos` (base offset, length field and the `length` bytes it counts);
    0 when not all of it is there (a partial last batch: fetched again), -1 for a length below Kafka's
    minimum of 14 (corrupt: left for the log to refuse)."""
    if end - pos < 17:  # iter_batches' rule: fewer bytes than offset, length, epoch and magic end quietly
        return 0
    length = int.from_bytes(view[pos + 8:pos + 12], "big", signed=True)
    if length < 14:
        return -1
    return length + 12 if length + 12 <= end - pos else 0
