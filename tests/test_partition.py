"""The broker's `Partition`: leadership and leader-epoch errors, the commit rule applied once per append
and never by a read, and ReplicaManager routing every append (the coordinator's too) through it.

Real logs on a tmp dir with a mock clock; the ReplicaManager is the broker's own, over a real LogManager.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.metadata import MetadataStore
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.coordinator.config import OFFSETS_TOPIC
from kafkalite.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    UnknownLeaderEpochError,
)
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol.error_codes import ErrorCode
from kafkalite.records import SimpleRecord, build_batch, iter_batches
from kafkalite.replication.partition import NEVER_MS, Partition
from kafkalite.storage.log import FetchIsolation, Log
from tests.support.coordinator import coordinator, manager
from tests.support.logs import Env

NODE = 1


def batch(n: int = 1, **kw: int) -> bytearray:
    return build_batch([SimpleRecord(None, b"v%d" % i, -1) for i in range(n)], **kw)


@pytest.fixture
def lg(tmp_path: Path) -> Log:
    the_log = Env().open(tmp_path / "t-0")
    yield the_log
    the_log.close()


def leader(lg: Log, epoch: int = 3) -> Partition:
    part = Partition("t", 0, lg, NODE)
    part.make_leader(epoch, isr=[NODE], replicas=[NODE])
    return part


def test_leader_stamps_its_epoch_and_commits_each_append(lg: Log) -> None:
    part = leader(lg, epoch=3)
    assert (part.leader_epoch, part.is_leader, part.isr, part.replicas) == (3, True, [NODE], [NODE])
    info, moved = part.append_records_to_leader(batch(2))
    assert (info.first_offset, moved) == (0, True)
    part.append_records_to_leader(batch(3))
    assert lg.high_watermark == lg.log_end_offset == 5
    assert [b.partition_leader_epoch for b in iter_batches(lg.read(0, 10_000).tobytes())] == [3, 3]


def test_epoch_is_the_one_set_from_outside_not_the_logs(lg: Log) -> None:
    part = leader(lg, epoch=2)
    part.append_records_to_leader(batch())
    part.make_leader(7, isr=[NODE], replicas=[NODE])
    assert part.leader_epoch == 7
    # The new epoch starts at the log end at once, so OffsetsForLeaderEpoch knows it before any append.
    assert lg.leader_epoch_cache.end_offset_for(2, lg.log_end_offset) == (2, 1)
    assert lg.latest_epoch == 7
    part.append_records_to_leader(batch())
    assert [b.partition_leader_epoch for b in iter_batches(lg.read(0, 10_000).tobytes())] == [2, 7]


def test_follower_refuses_produce_fetch_and_writes_nothing(lg: Log) -> None:
    part = leader(lg)
    part.append_records_to_leader(batch())
    assert part.make_follower(leader_id=2, leader_epoch=4, isr=[2, NODE], replicas=[2, NODE]) is True
    assert not part.is_leader and part.leader_epoch == 4
    with pytest.raises(NotLeaderOrFollowerError, match="broker 2 is"):
        part.append_records_to_leader(batch())
    assert lg.log_end_offset == 1
    r = part.read(0, 1000, isolation=FetchIsolation.HIGH_WATERMARK, min_one_message=True)
    assert (r.error, r.size, r.high_watermark) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, 0, -1)
    with pytest.raises(NotLeaderOrFollowerError):
        part.leader_log()


@pytest.mark.parametrize(("client_epoch", "error"), [
    (-1, ErrorCode.NONE), (5, ErrorCode.NONE), (4, ErrorCode.FENCED_LEADER_EPOCH),
    (6, ErrorCode.UNKNOWN_LEADER_EPOCH),
])
def test_current_leader_epoch_is_checked_against_the_partitions(lg: Log, client_epoch: int, error: int) -> None:
    part = leader(lg, epoch=5)
    part.append_records_to_leader(batch())
    r = part.read(0, 1000, isolation=FetchIsolation.HIGH_WATERMARK, min_one_message=True,
                  current_leader_epoch=client_epoch)
    assert r.error == error
    assert (r.size > 0) == (error == ErrorCode.NONE)


def test_epoch_check_comes_before_leadership(lg: Log) -> None:
    """Kafka's localLogWithEpochOrThrow: a stale client hears FENCED (refresh metadata), even from a follower."""
    part = Partition("t", 0, lg, NODE)
    part.make_follower(2, 5, [2], [2, NODE])
    with pytest.raises(FencedLeaderEpochError):
        part.leader_log(4)
    with pytest.raises(UnknownLeaderEpochError):
        part.leader_log(6)
    with pytest.raises(NotLeaderOrFollowerError):
        part.leader_log(5)


def test_commit_rule_runs_once_per_append_and_not_for_a_duplicate(lg: Log, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    part = leader(lg)
    calls = []
    real = Partition.maybe_increment_high_watermark

    def counted(self: Partition) -> bool:
        calls.append(self.log.log_end_offset)
        return real(self)

    monkeypatch.setattr(Partition, "maybe_increment_high_watermark", counted)
    idempotent = {"producer_id": 7, "producer_epoch": 0}
    part.append_records_to_leader(batch(2, base_sequence=0, **idempotent))
    part.append_records_to_leader(batch(1, base_sequence=2, **idempotent))
    assert calls == [2, 3]
    info, moved = part.append_records_to_leader(batch(1, base_sequence=2, **idempotent))  # a retry
    assert info.duplicate and not moved and calls == [2, 3]


def test_reading_never_moves_the_high_watermark(lg: Log) -> None:
    part = leader(lg)
    for _ in range(3):
        part.append_records_to_leader(batch(2))
    lg.update_high_watermark(2)  # as if a follower in the ISR lagged: 2..5 is not committed
    for isolation in FetchIsolation:
        r = part.read(0, 10_000, isolation=isolation, min_one_message=True)
        assert r.error == 0 and r.high_watermark == 2
    assert lg.high_watermark == 2
    # A consumer sees only what is committed.
    r = part.read(0, 10_000, isolation=FetchIsolation.HIGH_WATERMARK, min_one_message=True)
    assert [b.last_offset for b in iter_batches(bytes(r.records.tobytes()))] == [1]


def test_loading_the_group_coordinator_never_moves_the_high_watermark(tmp_path: Path) -> None:
    """OffsetsTopic.read used to set HW := LEO after its scan; a read must not commit anything."""
    lm = manager(tmp_path)
    try:
        coord = coordinator(lm)
        coord.topic.append(0, [(b"k1", b"v1")])
        coord.topic.append(0, [(b"k2", b"v2")])
        part_log = lm.get_log(OFFSETS_TOPIC, 0)
        assert part_log is not None and part_log.high_watermark == 2
        part_log.update_high_watermark(1)
        coordinator(lm).load_offline()
        assert part_log.high_watermark == 1
    finally:
        lm.shutdown()


@pytest.fixture
def broker_parts(tmp_path: Path):
    cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path / "data"), "node.id": NODE})
    lm = LogManager(cfg.log_dirs, cfg.log_config(), cfg.manager_config())
    rm = ReplicaManager(cfg, lm, MetadataStore(lm.dirs[0].path))
    admin = rm.admin
    yield rm, admin
    lm.shutdown()


def test_replica_manager_routes_produce_and_reads_through_the_partition(broker_parts) -> None:
    rm, _admin = broker_parts
    for p in range(2):  # what single-broker mode made of a new log before it ran the controller
        rm.lead_locally(rm.logs.get_or_create_log("orders", p))
    assert set(rm.partitions) == {("orders", 0), ("orders", 1)}
    part = rm.partitions[("orders", 0)]
    assert (part.leader_epoch, part.isr, part.replicas) == (0, [NODE], [NODE])
    assert rm.append("orders", 0, batch(3))["error_code"] == 0
    assert part.high_watermark == 3

    part.make_follower(2, 1, [2], [2, NODE])
    out = rm.append("orders", 0, batch())
    assert out["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and part.log.log_end_offset == 3
    assert rm.list_offset("orders", 0, -1, isolation=FetchIsolation.HIGH_WATERMARK)["error_code"] == \
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert rm.read_partition("orders", 0, 0, 1000, isolation=FetchIsolation.HIGH_WATERMARK,
                             min_one_message=True).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    part.make_leader(2, [NODE], [NODE])
    assert rm.list_offset("orders", 0, -1, isolation=FetchIsolation.HIGH_WATERMARK,
                          current_leader_epoch=1)["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    got = rm.list_offset("orders", 0, -1, isolation=FetchIsolation.HIGH_WATERMARK, current_leader_epoch=2)
    assert (got["error_code"], got["offset"], got["leader_epoch"]) == (0, 3, 2)

    for p in range(2):
        rm.remove_partition("orders", p)
    assert not rm.partitions


def test_coordinator_writes_through_the_replica_manager(broker_parts) -> None:
    """The broker's OffsetsWriter is ReplicaManager.append_for_coordinator: a partition it does not lead
    refuses the coordinator's append exactly as it refuses a produce."""
    rm, _admin = broker_parts
    woken = []
    rm.append_listeners.append(lambda t, p: woken.append((t, p)))

    from kafkalite.coordinator import GroupCoordinator

    coord = GroupCoordinator(rm.logs, {"offsets.topic.num.partitions": 2},
                             writer=functools.partial(rm.append_for_coordinator, OFFSETS_TOPIC), replicas=rm)
    assert coord.topic.append(1, [(b"k", b"v")]) == 0
    part = rm.partitions[(OFFSETS_TOPIC, 1)]
    assert woken == [(OFFSETS_TOPIC, 1)] and part.high_watermark == 1
    part.make_follower(2, 1, [2], [2, NODE])
    with pytest.raises(NotLeaderOrFollowerError):
        coord.topic.append(1, [(b"k", b"v2")])


# --- leader side of replication: follower records, the commit rule, the ISR (Kafka's Partition) ---------

F2, F3 = 2, 3
LAG = 1000


def replicated(lg: Log, isr: list[int] | None = None, epoch: int = 1, now: int = 0, **kw: object) -> Partition:
    part = Partition("t", 0, lg, NODE, lag_time_max_ms=LAG, **kw)  # type: ignore[arg-type]
    part.make_leader(epoch, isr=isr or [NODE, F2, F3], replicas=[NODE, F2, F3], partition_epoch=4,
                     controller_epoch=9, now_ms=now)
    return part


def test_hw_is_the_smallest_leo_of_the_isr_and_waits_for_followers_of_the_new_epoch(lg: Log) -> None:
    part = replicated(lg)
    part.append_records_to_leader(batch(5))
    assert lg.high_watermark == 0  # no follower has fetched in this epoch: their LEOs are unknown
    assert part.update_follower_fetch_state(F2, 5, 0, now_ms=10) is False  # F3 still unknown
    assert part.update_follower_fetch_state(F3, 3, 0, now_ms=10) is True
    assert lg.high_watermark == 3
    assert part.update_follower_fetch_state(F3, 5, 0, now_ms=20) is True and lg.high_watermark == 5
    # only forward: a follower reporting less (it truncated) does not move the HW back
    assert part.update_follower_fetch_state(F3, 2, 0, now_ms=30) is False and lg.high_watermark == 5


def test_both_catch_up_rules(lg: Log) -> None:
    part = replicated(lg, now=0)
    part.append_records_to_leader(batch(4))
    r = part.remote[F2]
    # behind the leader, but at least where the leader was at the previous fetch (make_leader: LEO 0 at t=0)
    part.update_follower_fetch_state(F2, 2, 0, now_ms=500, leader_leo=4)
    assert r.last_caught_up_time_ms == 0 and r.last_fetch_leader_leo == 4 and r.last_fetch_time_ms == 500
    part.update_follower_fetch_state(F2, 4, 0, now_ms=900, leader_leo=6)  # reached the LEO of the last fetch
    assert r.last_caught_up_time_ms == 500
    part.update_follower_fetch_state(F2, 6, 0, now_ms=1200, leader_leo=6)  # at the leader's LEO: caught up now
    assert r.last_caught_up_time_ms == 1200
    part.update_follower_fetch_state(F2, 6, 0, now_ms=1300, leader_leo=9)  # still behind 6 < 9 but >= 6
    assert r.last_caught_up_time_ms == 1200 and r.leo == 6


def test_caught_up_follower_outside_the_isr_counts_for_the_hw(lg: Log) -> None:
    part = replicated(lg, isr=[NODE, F2], now=0)
    part.append_records_to_leader(batch(6))
    # F3, outside the ISR, reached the leader's LEO of its previous fetch (make_leader's): caught up at t=0
    part.update_follower_fetch_state(F3, 2, 0, now_ms=10, leader_leo=6)
    part.update_follower_fetch_state(F2, 6, 0, now_ms=10)
    assert lg.high_watermark == 2  # so it bounds the HW
    part.update_follower_fetch_state(F3, 2, 0, now_ms=LAG + 1, leader_leo=6)  # stuck for longer than the lag
    part.update_follower_fetch_state(F2, 6, 0, now_ms=LAG + 1)
    assert lg.high_watermark == 6  # no longer caught up: it does not hold the HW back
    part.append_records_to_leader(batch(2))
    part.update_follower_fetch_state(F3, 8, 0, now_ms=LAG + 2)  # caught up again: it bounds the HW again
    part.update_follower_fetch_state(F2, 8, 0, now_ms=LAG + 2)
    assert lg.high_watermark == 8


def test_kip_966_hw_advances_only_with_min_isr(tmp_path: Path) -> None:
    for rule, expected in ((True, 0), (False, 3)):
        the_log = Env().open(tmp_path / f"r{rule}" / "t-0", {"min.insync.replicas": 2})
        try:
            part = replicated(the_log, isr=[NODE], hw_requires_min_isr=rule)
            part.append_records_to_leader(batch(3))
            assert the_log.high_watermark == expected
        finally:
            the_log.close()


def test_single_replica_needs_no_follower_and_min_isr_caps_at_the_replication_factor(tmp_path: Path) -> None:
    the_log = Env().open(tmp_path / "t-0", {"min.insync.replicas": 2})
    try:
        part = Partition("t", 0, the_log, NODE)
        part.make_leader(0, [NODE], [NODE])
        part.append_records_to_leader(batch(3))
        assert the_log.high_watermark == 3 and not part.remote
        with pytest.raises(NotEnoughReplicasError):  # acks=all is still refused (Kafka does so too)
            part.check_enough_replicas_for_acks_all()
    finally:
        the_log.close()


def test_expand_is_pending_until_committed_and_counts_for_the_hw(lg: Log) -> None:
    part = replicated(lg, isr=[NODE, F2], now=0)
    part.append_records_to_leader(batch(4))
    part.update_follower_fetch_state(F2, 4, 0, now_ms=10)
    assert lg.high_watermark == 4
    part.update_follower_fetch_state(F3, 3, 0, now_ms=10)
    assert part.maybe_expand_isr(F3, 10) is None  # below the HW
    part.update_follower_fetch_state(F3, 4, 0, now_ms=20)
    change = part.maybe_expand_isr(F3, 20)
    assert change is not None and change.expand and change.isr == (NODE, F2, F3) and change.partition_epoch == 4
    assert part.isr == [NODE, F2] and part.maximal_isr == [NODE, F2, F3]
    assert part.maybe_expand_isr(F3, 20) is None and part.maybe_shrink_isr(10_000) is None  # one at a time
    part.append_records_to_leader(batch(1))
    part.update_follower_fetch_state(F2, 5, 0, now_ms=30)
    assert lg.high_watermark == 4  # F3 (pending) holds it
    part.complete_isr_change(change, 5)
    assert part.isr == [NODE, F2, F3] and part.partition_epoch == 5 and part.pending is None


def test_expand_needs_the_epoch_start_offset(lg: Log) -> None:
    part = replicated(lg, isr=[NODE, F2], now=0)
    part.append_records_to_leader(batch(4))
    part.make_leader(2, [NODE, F2], [NODE, F2, F3], now_ms=0)  # epoch 2 starts at 4
    assert part.leader_epoch_start_offset == 4
    lg.update_high_watermark(2)
    part.update_follower_fetch_state(F3, 3, 0, now_ms=10)
    assert part.maybe_expand_isr(F3, 10) is None  # >= HW 2 but below the epoch start 4
    part.update_follower_fetch_state(F3, 4, 0, now_ms=20)
    assert part.maybe_expand_isr(F3, 20) is not None


def test_shrink_after_the_lag_time_keeps_the_old_isr_until_committed(lg: Log) -> None:
    part = replicated(lg, now=0)
    part.append_records_to_leader(batch(3))
    part.update_follower_fetch_state(F2, 3, 0, now_ms=100)
    part.update_follower_fetch_state(F3, 1, 0, now_ms=100)
    assert part.maybe_shrink_isr(LAG) is None  # F3 last caught up at make_leader (0): LAG has not passed
    change = part.maybe_shrink_isr(LAG + 1)
    assert change is not None and not change.expand and change.isr == (NODE, F2)
    assert part.isr == [NODE, F2, F3] and lg.high_watermark == 1  # the old ISR governs while pending
    assert part.complete_isr_change(change, 5) is True
    assert part.isr == [NODE, F2] and lg.high_watermark == 3


def test_a_conflicting_isr_write_keeps_the_old_isr_until_the_next_leader_and_isr(lg: Log) -> None:
    part = replicated(lg, now=0)
    part.append_records_to_leader(batch(3))
    part.update_follower_fetch_state(F2, 3, 0, now_ms=100)
    change = part.maybe_shrink_isr(LAG + 1)
    assert change is not None
    part.complete_isr_change(change, None)
    assert part.isr == [NODE, F2, F3] and part.pending is None and part.isr_frozen
    assert part.maybe_shrink_isr(LAG + 2) is None
    part.make_leader(2, [NODE, F2], [NODE, F2, F3], partition_epoch=7, now_ms=LAG + 3)
    assert not part.isr_frozen and part.isr == [NODE, F2]
    # an answer for a change from before the LeaderAndIsr is ignored
    assert part.complete_isr_change(change, 9) is False and part.isr == [NODE, F2] and part.partition_epoch == 7


def test_make_leader_resets_follower_records(lg: Log) -> None:
    part = replicated(lg, isr=[NODE, F2], now=0)
    part.append_records_to_leader(batch(2))
    part.update_follower_fetch_state(F2, 2, 0, now_ms=50)
    part.make_leader(2, [NODE, F2], [NODE, F2, F3], now_ms=70)  # already leader: positions kept
    assert part.remote[F2].leo == 2 and part.remote[F2].last_caught_up_time_ms == 70
    assert part.remote[F3].last_caught_up_time_ms == NEVER_MS and part.remote[F2].last_fetch_leader_leo == 2
    part.make_follower(F2, 3, [NODE, F2], [NODE, F2, F3])
    assert not part.remote and part.leader_epoch_start_offset is None
    part.make_leader(4, [NODE, F2], [NODE, F2, F3], now_ms=90)  # newly leader: positions unknown again
    assert part.remote[F2].leo == -1 and part.controller_epoch == -1


def test_replica_outside_the_assignment_gets_no_records(lg: Log) -> None:
    part = replicated(lg)
    part.append_records_to_leader(batch(2))
    r = part.read(0, 10_000, isolation=FetchIsolation.LOG_END, min_one_message=True, replica_id=7)
    assert (r.error, r.size, r.leader_log_end) == (0, 0, 2)
    assert part.update_follower_fetch_state(7, 2, 0, now_ms=1) is False
    r = part.read(0, 10_000, isolation=FetchIsolation.LOG_END, min_one_message=True, replica_id=F2)
    assert r.size > 0 and r.high_watermark == 0


def test_offset_not_available_until_the_hw_reaches_the_epoch_start(lg: Log) -> None:
    part = replicated(lg, isr=[NODE, F2])
    part.append_records_to_leader(batch(3))
    part.make_leader(2, [NODE, F2], [NODE, F2, F3], now_ms=0)
    with pytest.raises(OffsetNotAvailableError):
        part.check_offset_available()
    part.update_follower_fetch_state(F2, 3, 0, now_ms=1)
    part.check_offset_available()


def test_high_watermarks_are_restored_from_the_checkpoint_as_min_with_the_leo(tmp_path: Path) -> None:
    cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path / "data"), "node.id": NODE})
    lm = LogManager(cfg.log_dirs, cfg.log_config(), cfg.manager_config())
    a = lm.get_or_create_log("a", 0)
    b = lm.get_or_create_log("b", 0)
    for lg_ in (a, b):
        lg_.append_as_leader(batch(5), 0)
    a.update_high_watermark(4)
    b.update_high_watermark(5)
    rm = ReplicaManager(cfg, lm, MetadataStore(lm.dirs[0].path))
    rm.checkpoint_high_watermarks()
    lm.shutdown()
    # b loses its tail (as after a crash): its HW can't be above its LEO
    lm = LogManager(cfg.log_dirs, cfg.log_config(), cfg.manager_config())
    try:
        b = lm.get_log("b", 0)
        assert b is not None
        b.truncate_to(3)
        assert lm.get_log("a", 0).high_watermark == 0  # type: ignore[union-attr]
        rm = ReplicaManager(cfg, lm, MetadataStore(lm.dirs[0].path), cache=MetadataCache())
        rm.startup()
        assert not rm.partitions  # a broker of a cluster leads nothing before LeaderAndIsr
        assert lm.get_log("a", 0).high_watermark == 4  # type: ignore[union-attr]
        assert b.high_watermark == 3
    finally:
        lm.shutdown()


def _led_with_followers(rm: ReplicaManager, topic: str) -> Partition:
    part = rm.partitions[(topic, 0)]
    part.make_leader(1, [NODE, F2], [NODE, F2], now_ms=0)
    part.lag_time_max_ms = LAG
    return part


def test_list_offsets_latest_is_not_available_below_the_epoch_start(broker_parts) -> None:
    rm, _admin = broker_parts
    rm.lead_locally(rm.logs.get_or_create_log("fresh", 0))
    rm.append("fresh", 0, batch(3))
    part = _led_with_followers(rm, "fresh")  # a new epoch starting at 3; HW 3 already (single-broker past)
    part.log.update_high_watermark(1)  # as a new leader whose HW lags its epoch start
    got = rm.list_offset("fresh", 0, -1, isolation=FetchIsolation.HIGH_WATERMARK)
    assert got["error_code"] == ErrorCode.OFFSET_NOT_AVAILABLE
    assert rm.list_offset("fresh", 0, -2, isolation=FetchIsolation.HIGH_WATERMARK)["error_code"] == 0
    assert rm.list_offset("fresh", 0, -1, isolation=None)["offset"] == 3  # a replica asks: the log end
    part.update_follower_fetch_state(F2, 3, 0, now_ms=1)
    assert rm.list_offset("fresh", 0, -1, isolation=FetchIsolation.HIGH_WATERMARK)["offset"] == 3


def test_wait_for_commit_outcomes(broker_parts) -> None:
    rm, _admin = broker_parts
    rm.lead_locally(rm.logs.get_or_create_log("w", 0, {"min.insync.replicas": "2"}))

    async def scenario() -> None:
        part = _led_with_followers(rm, "w")
        out = rm.append("w", 0, batch(2), acks_all=True)
        assert out["error_code"] == 0 and out["_required_offset"] == 2
        # an offset already committed answers at once
        assert await rm.wait_for_commit("w", 0, 0, 1000) == ErrorCode.NONE
        assert await rm.wait_for_commit("w", 0, 2, 50) == ErrorCode.REQUEST_TIMED_OUT
        waiter = asyncio.ensure_future(rm.wait_for_commit("w", 0, 2, 5000))
        await asyncio.sleep(0.01)
        rm._follower_fetched("w", 0, F2, 2, 0, part.log.log_end_offset)  # the follower reached offset 2
        assert await waiter == ErrorCode.NONE
        rm.append("w", 0, batch(1), acks_all=True)
        waiter = asyncio.ensure_future(rm.wait_for_commit("w", 0, 3, 5000))
        await asyncio.sleep(0.01)
        part.make_follower(F2, 2, [F2, NODE], [NODE, F2])
        rm.purgatory.wake(("w", 0))
        assert await waiter == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # the committed ISR is below min.insync.replicas: refused before the append
        part.make_leader(3, [NODE], [NODE, F2], now_ms=0)
        end = part.log.log_end_offset
        out = rm.append("w", 0, batch(1), acks_all=True)
        assert out["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS and part.log.log_end_offset == end
        # committed while the maximal ISR is below min.insync (the KIP-966 rule off): AFTER_APPEND
        part.hw_requires_min_isr = False
        out = rm.append("w", 0, batch(1))
        part.update_follower_fetch_state(F2, end + 1, 0, now_ms=1)
        assert await rm.wait_for_commit("w", 0, end + 1, 100) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    asyncio.run(scenario())


def test_replica_fetch_diverging_epoch_and_unknown_history(lg: Log) -> None:
    """Kafka's readRecords for a follower's last fetched epoch: a history that parts from the leader's gets
    `diverging_epoch` and no records; an epoch the leader has no end offset for (newer than any it knows)
    gets OFFSET_OUT_OF_RANGE, since an all-default diverging_epoch is not sent on the wire at all."""
    part = replicated(lg, epoch=1)
    part.append_records_to_leader(batch(3))
    part.make_leader(4, isr=[NODE, F2, F3], replicas=[NODE, F2, F3], partition_epoch=5, now_ms=1)
    part.append_records_to_leader(batch(2))

    def read(offset: int, last_epoch: int):
        return part.read(offset, 10_000, isolation=FetchIsolation.LOG_END, min_one_message=True, replica_id=F2,
                         last_fetched_epoch=last_epoch)
    r = read(5, 1)  # a follower with 5 records of epoch 1: the leader's epoch 1 ended at 3
    assert (r.error, r.diverging, r.size) == (0, (1, 3), 0)
    r = read(3, 1)
    assert (r.error, r.diverging) == (0, None) and r.size > 0
    r = read(5, 7)
    assert (r.error, r.diverging, r.size) == (ErrorCode.OFFSET_OUT_OF_RANGE, None, 0)


# --- the one gate of a broker in a cluster (ReplicaManager.get_partition, Kafka's getPartitionOrError) ---

def _cluster_replicas(tmp_path: Path) -> ReplicaManager:
    cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path / "data"), "node.id": NODE})
    lm = LogManager(cfg.log_dirs, cfg.log_config(), cfg.manager_config())
    cache = MetadataCache()
    cache.apply({"controller_id": F2, "controller_epoch": 1, "live_brokers": [
        {"id": b, "endpoints": [{"host": "127.0.0.1", "port": 9000 + b, "listener": "PLAINTEXT"}]}
        for b in (NODE, F2)],
        "topic_states": [{"topic_name": "elsewhere", "partition_states": [
            {"partition_index": 0, "controller_epoch": 1, "leader": F2, "leader_epoch": 3, "isr": [F2],
             "zk_version": 0, "replicas": [F2], "offline_replicas": []}]}]})
    return ReplicaManager(cfg, lm, MetadataStore(lm.dirs[0].path), cache=cache)


def test_a_partition_the_cluster_has_but_this_broker_does_not_hold_is_not_leader_or_follower(tmp_path: Path) -> None:
    rm = _cluster_replicas(tmp_path)
    try:
        out = rm.append("elsewhere", 0, batch(1))
        assert out["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER  # the client refreshes its metadata
        assert rm.read_partition("elsewhere", 0, 0, 1000, isolation=FetchIsolation.HIGH_WATERMARK,
                                 min_one_message=True).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert rm.list_offset("elsewhere", 0, -1, isolation=FetchIsolation.HIGH_WATERMARK)["error_code"] == \
            ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        rm.logs.shutdown()


def test_a_partition_the_cluster_does_not_have_is_unknown(tmp_path: Path) -> None:
    rm = _cluster_replicas(tmp_path)
    try:
        assert rm.append("nowhere", 0, batch(1))["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert rm.append("elsewhere", 1, batch(1))["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        rm.logs.shutdown()


def test_a_local_log_without_leader_and_isr_is_not_served(tmp_path: Path) -> None:
    """Holding a log is not leading it: a broker of a cluster takes its role from the controller only."""
    rm = _cluster_replicas(tmp_path)
    try:
        rm.logs.get_or_create_log("elsewhere", 0)
        assert rm.append("elsewhere", 0, batch(1))["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert not rm.partitions
    finally:
        rm.logs.shutdown()


def test_leader_and_isr_makes_the_log_and_the_leader_and_tells_the_coordinator(tmp_path: Path) -> None:
    rm = _cluster_replicas(tmp_path)
    heard: list[tuple[str, int, int]] = []

    class Listener:
        def on_election(self, partition: int, epoch: int = -1) -> None:
            heard.append(("elected", partition, epoch))

        def on_resignation(self, partition: int, epoch: int = -1) -> None:
            heard.append(("resigned", partition, epoch))

    def state(p: int, leader: int, epoch: int) -> dict:
        return {"partition_index": p, "controller_epoch": 1, "leader": leader, "leader_epoch": epoch,
                "isr": [NODE], "partition_epoch": 0, "replicas": [NODE], "adding_replicas": [],
                "removing_replicas": [], "is_new": True}

    async def run() -> None:
        body = {"controller_id": F2, "controller_epoch": 1, "broker_epoch": 7, "live_leaders": [],
                "topic_states": [{"topic_name": OFFSETS_TOPIC, "partition_states": [state(0, NODE, 1)]}]}
        out = await rm.become_leader_or_follower(body, 7, Listener())
        assert out["partition_errors"] == [{"topic_name": OFFSETS_TOPIC, "partition_index": 0, "error_code": 0}]
        assert rm.partitions[(OFFSETS_TOPIC, 0)].is_leader and rm.logs.get_log(OFFSETS_TOPIC, 0) is not None
        again = await rm.become_leader_or_follower(body, 7, Listener())  # the same epoch again: stale
        assert again["partition_errors"][0]["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
        stale = await rm.become_leader_or_follower({**body, "broker_epoch": 6}, 7, Listener())
        assert stale["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        stop = {"controller_id": F2, "controller_epoch": 1, "broker_epoch": 7, "topic_states": [
            {"topic_name": OFFSETS_TOPIC, "partition_states": [
                {"partition_index": 0, "leader_epoch": 2, "delete_partition": False}]}]}
        assert (await rm.stop_replicas(stop, 7, Listener()))["partition_errors"][0]["error_code"] == 0
        assert not rm.partitions[(OFFSETS_TOPIC, 0)].is_leader
        await rm.stop_replication()

    try:
        asyncio.run(run())
        assert heard == [("elected", 0, 1), ("resigned", 0, 2)]
    finally:
        rm.logs.shutdown()
