"""The broker's `Partition`: leadership and leader-epoch errors, the commit rule applied once per append
and never by a read, and ReplicaManager routing every append (the coordinator's too) through it.

Real logs on a tmp dir with a mock clock; the ReplicaManager is the broker's own, over a real LogManager.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.metadata import MetadataStore
from kafkalite.broker.partition import Partition
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.broker.topic_admin import TopicAdmin
from kafkalite.coordinator.config import OFFSETS_TOPIC
from kafkalite.errors import FencedLeaderEpochError, NotLeaderOrFollowerError, UnknownLeaderEpochError
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol.error_codes import ErrorCode
from kafkalite.records import SimpleRecord, build_batch, iter_batches
from kafkalite.storage.log import FetchIsolation, Log
from kafkalite.storage.producer_state import AppendOrigin
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
    admin = TopicAdmin(rm)
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
    """The broker's OffsetsWriter is ReplicaManager.append_records: a partition it does not lead refuses
    the coordinator's append exactly as it refuses a produce."""
    rm, _admin = broker_parts
    woken = []
    rm.append_listeners.append(lambda t, p: woken.append((t, p)))

    def writer(partition: int, data: bytearray) -> int:
        return rm.append_records(OFFSETS_TOPIC, partition, data, origin=AppendOrigin.COORDINATOR).first_offset

    from kafkalite.coordinator import GroupCoordinator

    coord = GroupCoordinator(rm.logs, {"offsets.topic.num.partitions": 2}, writer=writer)
    assert coord.topic.append(1, [(b"k", b"v")]) == 0
    part = rm.partitions[(OFFSETS_TOPIC, 1)]
    assert woken == [(OFFSETS_TOPIC, 1)] and part.high_watermark == 1
    part.make_follower(2, 1, [2], [2, NODE])
    with pytest.raises(NotLeaderOrFollowerError):
        coord.topic.append(1, [(b"k", b"v2")])
