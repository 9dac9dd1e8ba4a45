"""Producer state: snapshots (L1-L4, K6), idempotence rules, transactions and the txn index (F14)."""

from __future__ import annotations

import pytest

from kafkalite.clock import MockClock
from kafkalite.errors import InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError
from kafkalite.records import ControlRecordType, RecordBatch, SimpleRecord, build_batch, build_end_txn_marker
from kafkalite.records.record import MAX_SEQUENCE
from kafkalite.storage import names
from kafkalite.storage.producer_state import AppendOrigin, CompletedTxn, ProducerStateManager
from kafkalite.storage.segment import LogSegment
from kafkalite.storage.txn_index import AbortedTxn
from tests.conftest import T0


def pbatch(pid=1, epoch=0, seq=0, n=1, base=0, txn=False) -> RecordBatch:
    return RecordBatch(build_batch([SimpleRecord(None, b"v", T0)] * n, base_offset=base, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq, is_transactional=txn))


def append(psm: ProducerStateManager, batch: RecordBatch, origin=AppendOrigin.CLIENT):
    pending = psm.prepare_append(batch, origin)
    return psm.complete_append(pending, batch.base_offset, batch.last_offset)


def marker(kind, pid, base, epoch=0, coord=0) -> RecordBatch:
    return RecordBatch(build_end_txn_marker(kind, pid, epoch, coordinator_epoch=coord, timestamp=T0,
                                            base_offset=base))


@pytest.fixture
def psm(tmp_path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, clock=MockClock(T0))


def test_l1_snapshot_only_when_state_moved(psm, tmp_path):
    append(psm, pbatch(seq=0, base=0))
    append(psm, pbatch(seq=1, base=1))
    psm.take_snapshot()
    assert [p.name for p in tmp_path.iterdir()] == ["00000000000000000002.snapshot"]
    psm.take_snapshot()
    assert len(list(tmp_path.iterdir())) == 1


def _snapshots_at(psm, offsets):
    for o in offsets:
        psm.update_map_end_offset(o)
        psm.take_snapshot()


def test_l2_truncate_and_reload(psm):
    _snapshots_at(psm, [1, 2, 3, 4, 5])
    psm.truncate_and_reload(1, 3, T0)
    assert psm.oldest_snapshot_offset == 2 and psm.latest_snapshot_offset == 3


def test_l3_delete_snapshots_before(psm):
    _snapshots_at(psm, [2, 3])
    psm.delete_snapshots_before(3)
    assert psm.snapshot_offsets() == [3]
    psm.delete_snapshots_before(4)
    assert psm.snapshot_offsets() == []


def test_l4_remove_stray_snapshots(psm):
    _snapshots_at(psm, [2, 5, 42])
    psm.remove_stray_snapshots([5])
    assert psm.snapshot_offsets() == [5, 42]
    psm.remove_stray_snapshots([42])
    assert psm.snapshot_offsets() == [42]


@pytest.mark.parametrize("damage", ["empty", "half", "zeros"])
def test_k6_corrupt_newest_snapshot_falls_back(psm, tmp_path, damage):
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
    assert fresh.map_end_offset == 1 and fresh.last_entry(7).last_seq == 0
    assert not newest.exists()


def test_duplicates_of_last_five_batches(psm):
    batches = [pbatch(seq=2 * i, n=2, base=2 * i) for i in range(7)]
    for b in batches:
        append(psm, b)
    for b in batches[2:]:
        meta = psm.find_duplicate(b)
        assert meta is not None and meta.last_offset == b.last_offset
    for b in batches[:2]:
        assert psm.find_duplicate(b) is None
        with pytest.raises(OutOfOrderSequenceError):
            psm.prepare_append(b, AppendOrigin.CLIENT)


def test_sequence_rules(psm):
    append(psm, pbatch(seq=0))
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare_append(pbatch(seq=5, base=1), AppendOrigin.CLIENT)
    psm.prepare_append(pbatch(seq=5, base=1), AppendOrigin.REPLICATION)  # followers do not check
    with pytest.raises(OutOfOrderSequenceError):
        psm.prepare_append(pbatch(epoch=1, seq=3, base=1), AppendOrigin.CLIENT)
    append(psm, pbatch(epoch=1, seq=0, base=1))
    with pytest.raises(InvalidProducerEpochError):
        psm.prepare_append(pbatch(epoch=0, seq=1, base=2), AppendOrigin.CLIENT)


def test_sequence_wraps(psm):
    append(psm, pbatch(seq=MAX_SEQUENCE - 1, n=2))
    assert psm.last_entry(1).last_seq == MAX_SEQUENCE
    append(psm, pbatch(seq=0, base=2))
    assert psm.last_entry(1).last_seq == 0


def test_transactions(psm):
    append(psm, pbatch(pid=1, seq=0, n=2, base=100, txn=True))
    append(psm, pbatch(pid=2, seq=0, n=2, base=102, txn=True))
    assert psm.first_unstable_offset() == 100
    with pytest.raises(InvalidTxnStateError):
        psm.prepare_append(pbatch(pid=2, seq=2, base=104), AppendOrigin.CLIENT)
    done = append(psm, marker(ControlRecordType.ABORT, 2, 106), AppendOrigin.COORDINATOR)
    assert done == CompletedTxn(2, 102, 106, True)
    assert psm.last_stable_offset(done) == 100
    psm.complete_txn(done)
    done = append(psm, marker(ControlRecordType.COMMIT, 1, 107), AppendOrigin.COORDINATOR)
    assert done == CompletedTxn(1, 100, 107, False) and psm.last_stable_offset(done) == 108
    psm.complete_txn(done)
    assert psm.first_unstable_offset() is None


def test_snapshot_roundtrip_keeps_dedup(tmp_path):
    psm = ProducerStateManager(tmp_path, clock=MockClock(T0))
    last = pbatch(pid=9, seq=10, n=3, base=40)
    append(psm, pbatch(pid=9, seq=7, n=3, base=37))
    append(psm, last)
    append(psm, pbatch(pid=5, seq=0, base=43, txn=True))
    psm.take_snapshot()
    again = ProducerStateManager(tmp_path, clock=MockClock(T0))
    again.truncate_and_reload(0, 44, T0)
    assert again.find_duplicate(last).last_offset == 42
    assert again.first_unstable_offset() == 43
    with pytest.raises(OutOfOrderSequenceError):
        again.prepare_append(pbatch(pid=9, seq=20, base=44), AppendOrigin.CLIENT)


def test_f14_segment_recovery_rebuilds_txn_index(tmp_path):
    seg = LogSegment.open(tmp_path, 100)

    def put(buf):
        b = RecordBatch(buf)
        seg.append(b.last_offset, b.max_timestamp, b.last_offset, buf)

    put(build_batch([SimpleRecord(None, b"a", T0)] * 2, base_offset=100, producer_id=1, producer_epoch=0,
                    base_sequence=0, is_transactional=True))
    put(build_batch([SimpleRecord(None, b"b", T0)] * 2, base_offset=102, producer_id=2, producer_epoch=0,
                    base_sequence=0, is_transactional=True))
    put(build_batch([SimpleRecord(None, b"c", T0)] * 2, base_offset=104))
    put(build_end_txn_marker(ControlRecordType.ABORT, 2, 0, timestamp=T0, base_offset=106))
    put(build_end_txn_marker(ControlRecordType.COMMIT, 1, 0, timestamp=T0, base_offset=107))
    psm = ProducerStateManager(tmp_path / "psm", clock=MockClock(T0))
    (tmp_path / "psm").mkdir()
    seg.recover(psm)
    assert psm.map_end_offset == 108
    assert seg.txn_index.all_aborted() == [AbortedTxn(2, 102, 106, 100)]
