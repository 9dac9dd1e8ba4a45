"""Producer state: snapshots (L1-L5, K6), idempotence rules, transactions and the txn index (F14),
and the load flow the log uses (reload from a snapshot, then replay)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.clock import MockClock
from kafkalite.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kafkalite.records import ControlRecordType, RecordBatch, SimpleRecord, build_batch, build_end_txn_marker
from kafkalite.records.record import MAX_SEQUENCE
from kafkalite.storage import names
from kafkalite.storage.producer_snapshot import ProducerSnapshotEntry, read_snapshot
from kafkalite.storage.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    ProducerStateManager,
)
from kafkalite.storage.segment import LogSegment
from kafkalite.storage.txn_index import AbortedTxn
from tests.support import T0

CLIENT = AppendOrigin.CLIENT
REPLICATION = AppendOrigin.REPLICATION
COORDINATOR = AppendOrigin.COORDINATOR
COMMIT = ControlRecordType.COMMIT
ABORT = ControlRecordType.ABORT


def pbatch(pid=1, epoch=0, seq=0, n=1, base=0, txn=False, ts=T0) -> RecordBatch:
    return RecordBatch(build_batch([SimpleRecord(None, b"v", ts)] * n, base_offset=base, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq, is_transactional=txn))


def marker(kind, pid, base, epoch=0, coord=0, ts=T0) -> RecordBatch:
    return RecordBatch(build_end_txn_marker(kind, pid, epoch, coordinator_epoch=coord, timestamp=ts,
                                            base_offset=base))


def append(psm: ProducerStateManager, batch: RecordBatch, origin=CLIENT) -> CompletedTxn | None:
    """What the log does for one batch: validate, (write), record."""
    pending = psm.prepare_append(batch, origin)
    return psm.complete_append(pending, batch.base_offset, batch.last_offset)


def header_only(batch: RecordBatch) -> RecordBatch:
    """What recovery hands over for a data batch."""
    return RecordBatch(bytes(batch.buffer[:61]), header_only=True)


def state_of(entry: ProducerStateEntry | None) -> tuple | None:
    """The part of an entry a snapshot persists."""
    if entry is None:
        return None
    return (entry.producer_epoch, entry.last_seq, entry.last_data_offset, entry.last_offset_delta,
            entry.coordinator_epoch, entry.current_txn_first_offset, entry.last_timestamp)


@pytest.fixture
def psm(tmp_path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, clock=MockClock(T0))


def snapshots_at(psm: ProducerStateManager, offsets) -> None:
    for o in offsets:
        psm.update_map_end_offset(o)
        psm.take_snapshot()


def snapshot_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if names.SNAPSHOT_SUFFIX in p.name)


# --- L: snapshot files ------------------------------------------------------------------------------


def test_l1_snapshot_only_when_state_moved(psm, tmp_path):
    append(psm, pbatch(seq=0, base=0))
    append(psm, pbatch(seq=1, base=1))
    assert psm.map_end_offset == 2
    path = psm.take_snapshot()
    assert path == names.snapshot_file(tmp_path, 2)
    assert snapshot_files(tmp_path) == ["00000000000000000002.snapshot"]
    assert psm.take_snapshot() is None
    assert snapshot_files(tmp_path) == ["00000000000000000002.snapshot"]
    assert psm.latest_snapshot_offset == psm.oldest_snapshot_offset == 2
    assert psm.snapshot_path(2) == path and psm.snapshot_path(1) is None


def test_l2_truncate_and_reload_keeps_snapshots_in_start_end_range(psm):
    snapshots_at(psm, [1, 2, 3, 4, 5])
    psm.truncate_and_reload(1, 3, T0)
    assert psm.oldest_snapshot_offset == 2 and psm.latest_snapshot_offset == 3
    assert psm.snapshot_offsets() == [2, 3]
    assert psm.map_end_offset == 3  # loaded from the newest remaining snapshot


def test_l3_delete_snapshots_before(psm, tmp_path):
    snapshots_at(psm, [2, 3])
    psm.delete_snapshots_before(3)
    assert psm.snapshot_offsets() == [3]
    assert snapshot_files(tmp_path) == ["00000000000000000003.snapshot"]
    psm.delete_snapshots_before(4)
    assert psm.snapshot_offsets() == [] and snapshot_files(tmp_path) == []


def test_l4_remove_stray_snapshots(psm, tmp_path):
    snapshots_at(psm, [2, 5, 42])
    psm.remove_stray_snapshots([5])  # 42 is the largest stray and above every segment base
    assert psm.snapshot_offsets() == [5, 42]
    psm.remove_stray_snapshots([42])
    assert psm.snapshot_offsets() == [42]
    assert snapshot_files(tmp_path) == ["00000000000000000042.snapshot"]


def test_l4_stray_below_the_last_segment_base_is_deleted(psm):
    snapshots_at(psm, [2, 5, 7])
    psm.remove_stray_snapshots([5, 10])
    assert psm.snapshot_offsets() == [5]


def test_l5_rename_snapshot_for_deletion(psm, tmp_path):
    snapshots_at(psm, [5, 10])
    target = psm.rename_snapshot_for_deletion(5)
    assert target == tmp_path / "00000000000000000005.snapshot.deleted"
    assert target.exists() and not names.snapshot_file(tmp_path, 5).exists()
    assert psm.snapshot_offsets() == [10]
    assert psm.rename_snapshot_for_deletion(5) is None  # already gone
    assert ProducerStateManager(tmp_path).snapshot_offsets() == [10]  # `.deleted` files are not snapshots


def test_snapshot_bytes_match_kafka(psm, tmp_path):
    """Section 1.11's example: pid 1000, epoch 0, sequences 0..4 at offsets 0..4, no transaction."""
    append(psm, pbatch(pid=1000, seq=0, n=5, base=0))
    path = psm.take_snapshot()
    expected = bytes.fromhex("0001 64c47816 00000001 00000000000003e8 0000 00000004 0000000000000004 00000004"
                             " 0000018bcfe56800 ffffffff ffffffffffffffff")
    assert path.read_bytes() == expected


def test_snapshot_keeps_only_the_last_batch(psm):
    for i in range(3):
        append(psm, pbatch(pid=3, seq=2 * i, n=2, base=2 * i))
    append(psm, marker(COMMIT, 4, 6, coord=7))  # a producer seen only through a marker
    entries = read_snapshot(psm.take_snapshot())
    assert entries == [
        ProducerSnapshotEntry(3, 0, last_sequence=5, last_offset=5, offset_delta=1, timestamp=T0,
                              coordinator_epoch=-1, current_txn_first_offset=-1),
        ProducerSnapshotEntry(4, 0, timestamp=T0, coordinator_epoch=7),
    ]


# --- K6: a damaged snapshot is deleted and the next older one used ----------------------------------------


@pytest.mark.parametrize("damage", ["empty", "half", "zeros"])
def test_k6_corrupt_newest_snapshot_falls_back(tmp_path, damage):
    psm = ProducerStateManager(tmp_path, clock=MockClock(T0))
    append(psm, pbatch(pid=7, seq=0, base=0))
    psm.take_snapshot()
    append(psm, pbatch(pid=7, seq=1, base=1))
    psm.take_snapshot()
    newest = names.snapshot_file(tmp_path, 2)
    data = newest.read_bytes()
    damaged = {"empty": b"", "half": data[: len(data) // 2], "zeros": data[:10] + b"\x00" * 37 + data[47:]}
    newest.write_bytes(damaged[damage])

    fresh = ProducerStateManager(tmp_path, clock=MockClock(T0))
    fresh.truncate_and_reload(0, 10, T0)
    assert fresh.map_end_offset == 1
    assert fresh.last_entry(7).last_seq == 0 and fresh.last_entry(7).last_data_offset == 0
    assert not newest.exists() and fresh.snapshot_offsets() == [1]


def test_k6_every_snapshot_corrupt_gives_empty_state_at_log_start(tmp_path):
    psm = ProducerStateManager(tmp_path, clock=MockClock(T0))
    append(psm, pbatch(pid=7, seq=0, base=3))
    psm.take_snapshot()
    names.snapshot_file(tmp_path, 4).write_bytes(b"\x00\x01garbage")
    fresh = ProducerStateManager(tmp_path, clock=MockClock(T0))
    fresh.truncate_and_reload(2, 10, T0)
    assert fresh.is_empty() and fresh.map_end_offset == 2 and fresh.snapshot_offsets() == []


# --- idempotence: duplicates and sequences ------------------------------------------------------------------


def test_each_of_the_last_five_batches_is_a_duplicate_not_the_sixth(psm):
    batches = [pbatch(seq=2 * i, n=2, base=10 + 2 * i, ts=T0 + i) for i in range(6)]
    for b in batches:
        assert psm.find_duplicate(b) is None
        append(psm, b)
    for b in batches[1:]:
        assert psm.find_duplicate(b) == BatchMetadata(b.last_sequence, b.last_offset, 1, b.max_timestamp)
        assert psm.find_duplicate(b).first_offset == b.base_offset
        assert psm.find_duplicate(b).first_seq == b.base_sequence
    oldest = batches[0]
    assert psm.find_duplicate(oldest) is None
    with pytest.raises(OutOfOrderSequenceError):  # Kafka: no longer cached, so just out of order
        psm.prepare_append(oldest, CLIENT)


def test_duplicate_needs_exact_epoch_and_sequence_range(psm):
    append(psm, pbatch(seq=0, n=3))
    assert psm.find_duplicate(pbatch(seq=0, n=3)) is not None
    assert psm.find_duplicate(pbatch(seq=0, n=2)) is None  # overlapping, not the same batch
    assert psm.find_duplicate(pbatch(seq=1, n=2)) is None
    assert psm.find_duplicate(pbatch(seq=0, n=3, epoch=1)) is None
    assert psm.find_duplicate(pbatch(pid=2, seq=0, n=3)) is None
    assert psm.find_duplicate(RecordBatch(build_batch([SimpleRecord(None, b"v", T0)]))) is None  # no producer


def test_sequence_gap_is_out_of_order(psm):
    append(psm, pbatch(seq=0, n=2))
    for seq in (3, 1, 0, -1 + MAX_SEQUENCE):
        with pytest.raises(OutOfOrderSequenceError):
            psm.prepare_append(pbatch(seq=seq, base=2), CLIENT)
    psm.prepare_append(pbatch(seq=7, base=2), REPLICATION)  # followers take what the leader wrote
    psm.prepare_append(pbatch(seq=7, base=2), COORDINATOR)  # only clients send sequences to check
    assert psm.last_entry(1).last_seq == 1  # prepare changes nothing
    append(psm, pbatch(seq=2, base=2))
    assert psm.last_entry(1).last_seq == 2


def test_unknown_producer_may_start_at_any_sequence(psm):
    append(psm, pbatch(pid=5, seq=1234, base=0))
    assert psm.last_entry(5).last_seq == 1234
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare_append(pbatch(pid=5, seq=1236, base=1), CLIENT)


def test_sequence_wraps_from_max_to_zero(psm):
    append(psm, pbatch(seq=MAX_SEQUENCE - 1, n=2))
    assert psm.last_entry(1).last_seq == MAX_SEQUENCE
    append(psm, pbatch(seq=0, n=3, base=2))
    assert psm.last_entry(1).last_seq == 2
    append(psm, pbatch(seq=3, base=5))
    spanning = pbatch(pid=2, seq=MAX_SEQUENCE - 1, n=4, base=6)  # sequences MAX-1, MAX, 0, 1
    append(psm, spanning)
    assert psm.last_entry(2).last_seq == 1
    meta = psm.find_duplicate(spanning)
    assert meta is not None and meta.first_seq == MAX_SEQUENCE - 1 and meta.first_offset == 6
    append(psm, pbatch(pid=2, seq=2, base=10))


def test_new_epoch_must_start_at_sequence_zero(psm):
    append(psm, pbatch(seq=0, n=2))
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare_append(pbatch(epoch=1, seq=2, base=2), CLIENT)
    append(psm, pbatch(epoch=1, seq=0, base=2))
    entry = psm.last_entry(1)
    assert entry.producer_epoch == 1 and len(entry.batches) == 1  # the old epoch's batches are gone
    assert psm.find_duplicate(pbatch(seq=0, n=2)) is None


def test_older_epoch_is_fenced(psm):
    append(psm, pbatch(epoch=3, seq=0))
    with pytest.raises(InvalidProducerEpochError):
        psm.prepare_append(pbatch(epoch=2, seq=1, base=1), CLIENT)
    with pytest.raises(InvalidProducerEpochError):
        psm.prepare_append(marker(ABORT, 1, 1, epoch=2), COORDINATOR)
    # a follower copies its leader: it only warns, and takes the epoch as written
    append(psm, pbatch(epoch=2, seq=9, base=1), REPLICATION)
    assert psm.last_entry(1).producer_epoch == 2 and psm.last_entry(1).last_seq == 9


def test_same_epoch_without_batches_needs_sequence_zero(psm):
    """A producer known only through a marker has an epoch but no sequence yet (Kafka's rule)."""
    append(psm, marker(ABORT, 1, 0, epoch=2), COORDINATOR)
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare_append(pbatch(epoch=2, seq=4, base=1), CLIENT)
    append(psm, pbatch(epoch=2, seq=0, base=1))


def test_batches_without_producer_id_need_no_state(psm):
    plain = RecordBatch(build_batch([SimpleRecord(None, b"v", T0)] * 3, base_offset=4))
    pending = psm.prepare_append(plain, CLIENT)
    assert pending.is_noop
    assert psm.complete_append(pending, 4, 6) is None
    assert psm.is_empty() and psm.map_end_offset == 7
    assert psm.complete_append(None, 7, 7) is None and psm.map_end_offset == 8


# --- transactions -----------------------------------------------------------------------------------------


def test_transactions_f14_values(psm):
    append(psm, pbatch(pid=1, seq=0, n=2, base=100, txn=True))
    append(psm, pbatch(pid=2, seq=0, n=2, base=102, txn=True))
    assert psm.last_entry(1).current_txn_first_offset == 100
    assert psm.first_unstable_offset() == 100
    append(psm, RecordBatch(build_batch([SimpleRecord(None, b"c", T0)] * 2, base_offset=104)))
    with pytest.raises(InvalidTxnStateError):
        psm.prepare_append(pbatch(pid=2, seq=2, base=106), CLIENT)
    with pytest.raises(InvalidTxnStateError):  # a follower refuses too, as Kafka's does
        psm.prepare_append(pbatch(pid=2, seq=2, base=106), REPLICATION)

    done = append(psm, marker(ABORT, 2, 106), COORDINATOR)
    assert done == CompletedTxn(2, 102, 106, True)
    assert psm.last_stable_offset(done) == 100  # pid 1's transaction is still open
    psm.complete_txn(done)
    assert psm.first_unstable_offset() == 100 and psm.last_entry(2).current_txn_first_offset is None

    done = append(psm, marker(COMMIT, 1, 107), COORDINATOR)
    assert done == CompletedTxn(1, 100, 107, False)
    assert psm.last_stable_offset(done) == 108
    psm.complete_txn(done)
    psm.complete_txn(done)  # idempotent
    assert psm.first_unstable_offset() is None and psm.map_end_offset == 108


def test_marker_of_an_empty_transaction_completes_nothing(psm):
    assert append(psm, marker(COMMIT, 9, 0, coord=3), COORDINATOR) is None
    entry = psm.last_entry(9)
    assert entry.coordinator_epoch == 3 and entry.current_txn_first_offset is None and entry.is_empty


def test_sequences_continue_across_transactions(psm):
    """The end marker leaves the batch metadata: a transactional producer keeps counting."""
    append(psm, pbatch(seq=0, n=3, base=0, txn=True))
    append(psm, marker(COMMIT, 1, 3), COORDINATOR)
    assert psm.last_entry(1).last_seq == 2
    assert psm.find_duplicate(pbatch(seq=0, n=3, txn=True)) is not None
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare_append(pbatch(seq=0, base=4, txn=True), CLIENT)
    append(psm, pbatch(seq=3, base=4, txn=True))
    assert psm.first_unstable_offset() == 4


def test_coordinator_epoch_fencing(psm):
    append(psm, pbatch(seq=0, base=0, txn=True))
    append(psm, marker(COMMIT, 1, 1, coord=5), COORDINATOR)
    append(psm, pbatch(seq=1, base=2, txn=True))
    with pytest.raises(TransactionCoordinatorFencedError):
        psm.prepare_append(marker(ABORT, 1, 3, coord=4), COORDINATOR)
    assert psm.first_unstable_offset() == 2
    done = append(psm, marker(ABORT, 1, 3, coord=4), REPLICATION)  # a follower only logs it
    assert done == CompletedTxn(1, 2, 3, True) and psm.last_entry(1).coordinator_epoch == 4


def test_last_stable_offset_is_the_oldest_other_open_transaction(psm):
    append(psm, pbatch(pid=3, seq=0, base=10, txn=True))
    append(psm, pbatch(pid=1, seq=0, base=11, txn=True))
    append(psm, pbatch(pid=2, seq=0, base=12, txn=True))
    done = append(psm, marker(ABORT, 3, 13), COORDINATOR)
    assert psm.last_stable_offset(done) == 11
    assert psm.first_unstable_offset() == 11


def test_f14_segment_recovery_rebuilds_txn_index(tmp_path):
    txn_index = _f14_recover(tmp_path, preload=False)
    assert txn_index == [AbortedTxn(2, 102, 106, 100)]


def test_f14_preloaded_transaction_start(tmp_path):
    assert _f14_recover(tmp_path, preload=True) == [AbortedTxn(2, 75, 106, 100)]


def _f14_recover(tmp_path: Path, preload: bool) -> list[AbortedTxn]:
    seg = LogSegment.open(tmp_path, 100)

    def put(buf):
        b = RecordBatch(buf)
        seg.append(b.last_offset, b.max_timestamp, b.last_offset, buf)

    put(build_batch([SimpleRecord(None, b"a", T0)] * 2, base_offset=100, producer_id=1, producer_epoch=0,
                    base_sequence=0, is_transactional=True))
    put(build_batch([SimpleRecord(None, b"b", T0)] * 2, base_offset=102, producer_id=2, producer_epoch=0,
                    base_sequence=2, is_transactional=True))
    put(build_batch([SimpleRecord(None, b"c", T0)] * 2, base_offset=104))
    put(build_end_txn_marker(ABORT, 2, 0, timestamp=T0, base_offset=106))
    put(build_end_txn_marker(COMMIT, 1, 0, timestamp=T0, base_offset=107))
    (tmp_path / "psm").mkdir()
    psm = ProducerStateManager(tmp_path / "psm", clock=MockClock(T0))
    if preload:
        append(psm, pbatch(pid=2, seq=0, n=2, base=75, txn=True))
    seg.recover(psm)
    assert psm.map_end_offset == 108 and psm.first_unstable_offset() is None
    return seg.txn_index.all_aborted()


# --- restart: snapshots, reload, replay ------------------------------------------------------------------


def test_snapshot_round_trip_keeps_dedup_after_restart(tmp_path):
    psm = ProducerStateManager(tmp_path, clock=MockClock(T0))
    older = pbatch(pid=9, seq=7, n=3, base=37)
    last = pbatch(pid=9, seq=10, n=3, base=40)
    append(psm, older)
    append(psm, last)
    append(psm, pbatch(pid=5, seq=0, base=43, txn=True))
    psm.take_snapshot()

    again = ProducerStateManager(tmp_path, clock=MockClock(T0))
    again.truncate_and_reload(0, 44, T0)
    assert again.map_end_offset == 44
    assert state_of(again.last_entry(9)) == state_of(psm.last_entry(9))
    meta = again.find_duplicate(last)
    assert (meta.first_offset, meta.last_offset) == (40, 42)
    assert again.find_duplicate(older) is None  # only the last batch is persisted, as in Kafka
    with pytest.raises(OutOfOrderSequenceError):
        again.prepare_append(older, CLIENT)
    with pytest.raises(OutOfOrderSequenceError):
        again.prepare_append(pbatch(pid=9, seq=20, base=44), CLIENT)
    append(again, pbatch(pid=9, seq=13, base=44))
    assert again.first_unstable_offset() == 43
    with pytest.raises(InvalidTxnStateError):
        again.prepare_append(pbatch(pid=5, seq=1, base=45), CLIENT)


def test_reload_then_replay_matches_the_live_state(tmp_path):
    """The log's load flow: truncate_and_reload to the newest snapshot, then replay the log after it."""
    batches = [
        pbatch(pid=1, seq=0, n=2, base=0),
        pbatch(pid=2, seq=0, n=1, base=2, txn=True),
        pbatch(pid=1, seq=2, n=3, base=3),
        marker(ABORT, 2, 6, coord=1),
        pbatch(pid=3, seq=0, n=2, base=7, txn=True),
        pbatch(pid=1, seq=5, n=1, base=9),
        pbatch(pid=2, seq=1, n=2, base=10, txn=True),
    ]
    live = ProducerStateManager(tmp_path, clock=MockClock(T0))
    for b in batches:
        if b.base_offset == 6:
            live.take_snapshot()  # a roll at 6
        done = append(live, b, COORDINATOR if b.is_control else CLIENT)
        if done is not None:
            live.complete_txn(done)
    leo = live.map_end_offset
    assert leo == 12

    loaded = ProducerStateManager(tmp_path, clock=MockClock(T0))
    loaded.truncate_and_reload(0, leo, T0)
    assert loaded.map_end_offset == 6
    for b in batches:
        if b.last_offset >= loaded.map_end_offset:
            done = loaded.update_from_recovered_batch(b if b.is_control else header_only(b))
            if done is not None:
                loaded.complete_txn(done)
    assert loaded.map_end_offset == leo
    for pid in (1, 2, 3):
        assert state_of(loaded.last_entry(pid)) == state_of(live.last_entry(pid))
    assert loaded.first_unstable_offset() == live.first_unstable_offset() == 7


def test_truncate_and_reload_at_the_map_end_keeps_the_live_state(psm):
    for i in range(4):
        append(psm, pbatch(seq=i, base=i))
    psm.take_snapshot()
    psm.truncate_and_reload(0, 4, T0)
    assert len(psm.last_entry(1).batches) == 4  # not reloaded from the one-batch snapshot
    psm.truncate_and_reload(0, 2, T0)  # a real truncation reloads
    assert psm.map_end_offset == 0 and psm.is_empty() and psm.snapshot_offsets() == []


def test_reload_drops_expired_producers_but_not_open_transactions(tmp_path):
    clock = MockClock(T0)
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000, clock=clock)
    append(psm, pbatch(pid=1, seq=0, base=0, ts=T0))
    append(psm, pbatch(pid=2, seq=0, base=1, ts=T0, txn=True))
    append(psm, pbatch(pid=3, seq=0, base=2, ts=T0 + 500))
    psm.take_snapshot()
    fresh = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000, clock=clock)
    fresh.truncate_and_reload(0, 3, T0 + 1000)
    assert sorted(fresh.active_producers) == [2, 3]
    assert fresh.first_unstable_offset() == 1


def test_remove_expired_producers(tmp_path):
    psm = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000, clock=MockClock(T0))
    append(psm, pbatch(pid=1, seq=0, base=0, ts=T0))
    append(psm, pbatch(pid=2, seq=0, base=1, ts=T0, txn=True))
    append(psm, pbatch(pid=3, seq=0, base=2, ts=T0 + 1))
    assert psm.remove_expired_producers(T0 + 999) == []
    assert psm.remove_expired_producers(T0 + 1000) == [1]
    assert sorted(psm.active_producers) == [2, 3]
    done = append(psm, marker(COMMIT, 2, 3, ts=T0 + 1), COORDINATOR)
    psm.complete_txn(done)
    assert sorted(psm.remove_expired_producers(T0 + 1001)) == [2, 3]
    assert psm.is_empty()


def test_truncate_fully_and_start_at(psm, tmp_path):
    append(psm, pbatch(seq=0, base=0, txn=True))
    snapshots_at(psm, [1, 2])
    psm.truncate_fully_and_start_at(50)
    assert psm.is_empty() and psm.map_end_offset == 50 and psm.first_unstable_offset() is None
    assert psm.snapshot_offsets() == [] and snapshot_files(tmp_path) == []
    # a snapshot at the log start would be deleted unread by the next load: none is written there (as Kafka)
    assert psm.take_snapshot() is None and snapshot_files(tmp_path) == []
    psm.update_map_end_offset(51)
    assert psm.take_snapshot() == names.snapshot_file(tmp_path, 51)


def test_no_snapshot_at_or_below_the_log_start(psm, tmp_path):
    """An empty partition has no .snapshot file, so reloading it writes and deletes nothing (this churn was half
    the cost of a clean load of 10,000 empty partitions)."""
    assert psm.take_snapshot() is None and snapshot_files(tmp_path) == []
    psm.truncate_and_reload(10, 10, T0)
    assert psm.map_end_offset == 10 and psm.take_snapshot() is None
    psm.on_log_start_offset_incremented(12)
    psm.update_map_end_offset(12)
    assert psm.take_snapshot() is None and snapshot_files(tmp_path) == []
    psm.update_map_end_offset(13)
    assert psm.take_snapshot() == names.snapshot_file(tmp_path, 13)


def test_recovery_replays_without_client_checks(psm):
    append(psm, pbatch(epoch=2, seq=0, base=0, txn=True))
    # a lower epoch, a sequence gap and a plain batch inside the open transaction: all on disk already
    assert psm.update_from_recovered_batch(header_only(pbatch(epoch=1, seq=40, base=1))) is None
    entry = psm.last_entry(1)
    assert (entry.producer_epoch, entry.last_seq, entry.current_txn_first_offset) == (1, 40, 0)
    assert psm.map_end_offset == 2


# --- property: a snapshot preserves every producer's persisted state -------------------------------------

_op = st.one_of(
    st.tuples(st.just("data"), st.integers(1, 3), st.integers(1, 4), st.booleans()),  # records, transactional
    st.tuples(st.just("marker"), st.integers(1, 3), st.sampled_from([COMMIT, ABORT]), st.integers(0, 2)),
    st.tuples(st.just("bump"), st.integers(1, 3), st.just(0), st.just(0)),
)


@pytest.mark.slow
@given(ops=st.lists(_op, max_size=40),
       start_seqs=st.lists(st.sampled_from([0, 17, MAX_SEQUENCE - 2]), min_size=3, max_size=3))
def test_snapshot_reload_preserves_last_entries(ops, start_seqs):
    """Random valid histories of three producers (idempotent and transactional, epoch bumps, sequence
    wrap-around, markers of empty transactions): a snapshot and a reload give the same persisted state,
    and both managers then accept the same next batch and refuse the same gap."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        psm = ProducerStateManager(directory, clock=MockClock(T0))
        model: dict[int, dict] = {}
        offset = 0
        for kind, pid, arg, extra in ops:
            p = model.setdefault(pid, {"epoch": 0, "seq": start_seqs[pid - 1], "open": False, "coord": 0,
                                       "has_batch": False})
            ts = T0 + offset
            if kind == "data":
                txn = bool(extra) or p["open"]
                b = pbatch(pid=pid, epoch=p["epoch"], seq=p["seq"], n=arg, base=offset, txn=txn, ts=ts)
                assert psm.find_duplicate(b) is None
                append(psm, b)
                assert psm.find_duplicate(b) is not None
                p["seq"] = b.last_sequence + 1 if b.last_sequence < MAX_SEQUENCE else 0
                p["open"] = p["open"] or txn
                p["has_batch"] = True
            elif kind == "marker":
                p["coord"] += extra
                done = append(psm, marker(arg, pid, offset, epoch=p["epoch"], coord=p["coord"], ts=ts), COORDINATOR)
                assert (done is not None) == p["open"]
                if done is not None:
                    psm.complete_txn(done)
                p["open"] = False
                if not p["has_batch"]:  # known now, with an epoch but no sequence: it must start at 0
                    p["seq"] = 0
            elif p["open"]:
                continue
            else:  # a new epoch: the producer restarts its sequences
                p["epoch"] += 1
                append(psm, pbatch(pid=pid, epoch=p["epoch"], seq=0, base=offset, ts=ts))
                p["seq"] = 1
                p["has_batch"] = True
            offset = psm.map_end_offset
        psm.take_snapshot()

        reloaded = ProducerStateManager(directory, clock=MockClock(T0))
        reloaded.truncate_and_reload(0, offset, T0)
        assert reloaded.map_end_offset == offset
        assert sorted(reloaded.active_producers) == sorted(psm.active_producers)
        for pid in psm.active_producers:
            assert state_of(reloaded.last_entry(pid)) == state_of(psm.last_entry(pid))
        assert reloaded.first_unstable_offset() == psm.first_unstable_offset()
        for pid, p in model.items():
            nxt = pbatch(pid=pid, epoch=p["epoch"], seq=p["seq"], base=offset, txn=p["open"])
            gap = pbatch(pid=pid, epoch=p["epoch"], seq=(p["seq"] + 1) % (MAX_SEQUENCE + 1), base=offset,
                         txn=p["open"])
            for m in (psm, reloaded):
                m.prepare_append(nxt, CLIENT)
                with pytest.raises(OutOfOrderSequenceError):
                    m.prepare_append(gap, CLIENT)
