"""LogSegment: reference cases F1-F19, crash/corruption recovery of a segment."""

from __future__ import annotations

import os
import random

import pytest

from kafkalite.clock import MockClock
from kafkalite.errors import LogSegmentOffsetOverflowError
from kafkalite.records import RecordBatch, build_batch, iter_batches
from kafkalite.storage import names
from kafkalite.storage.segment import LONG_MAX, LogSegment, RollParams
from tests.support import T0
from tests.support.batches import append_batch, batch_at, offsets_batch


def seg(tmp_path, base=40, interval=10, clock=None, **kw) -> LogSegment:
    return LogSegment.open(tmp_path, base, index_interval_bytes=interval, max_index_size=1500,
                           clock=clock or MockClock(T0), **kw)


def read_offsets(info) -> list[int]:
    return [b.base_offset for b in iter_batches(info.tobytes())]


@pytest.mark.parametrize("base,largest", [(0, -(2**31)), (0, 2**31), (1, 0), (100, 10), (2**31, 0),
                                          (-(2**31), 0), (2**31, 2**32)])
def test_f1_append_overflow(tmp_path, base, largest):
    s = LogSegment.open(tmp_path, base) if base >= 0 else LogSegment(None, tmp_path, base)  # type: ignore[arg-type]
    with pytest.raises(LogSegmentOffsetOverflowError):
        s.append(largest, -1, largest, batch_at(0))


def test_f1_largest_relative_offset_accepted(tmp_path):
    s = LogSegment.open(tmp_path, 0)
    s.append(2**31 - 1, -1, 2**31 - 1, offsets_batch([2**31 - 1]))
    assert s.size > 0


def test_f2_reads_returning_none(tmp_path):
    s = seg(tmp_path)
    assert s.read(40, 300) is None
    append_batch(s, offsets_batch([50, 51]))
    assert s.read(52, 200) is None


def test_f3_read_positions(tmp_path):
    s = seg(tmp_path)
    append_batch(s, offsets_batch([50, 51, 52, 53]))
    info = s.read(41, 300)
    assert read_offsets(info) == [50]
    assert (info.fetch_offset_metadata.message_offset, info.fetch_offset_metadata.segment_base_offset,
            info.fetch_offset_metadata.relative_position_in_segment) == (41, 40, 0)


def test_f3_read_second_batch(tmp_path):
    s = seg(tmp_path)
    first = append_batch(s, offsets_batch([50, 51]))
    append_batch(s, offsets_batch([60, 61]))
    info = s.read(55, 200)
    assert read_offsets(info) == [60]
    assert info.fetch_offset_metadata.relative_position_in_segment == first.size_in_bytes


def test_f4_max_position_none(tmp_path):
    s = seg(tmp_path)
    append_batch(s, offsets_batch([50, 51]))
    for off in (48, 51):
        info = s.read(off, 1, None)
        assert info.size == 0 and info.fetch_offset_metadata.relative_position_in_segment == 0
        assert info.fetch_offset_metadata.message_offset == off
    assert s.read(52, 1, None) is None


def test_f5_truncate_then_read_repeatedly(tmp_path):
    s = seg(tmp_path)
    o = 40
    for _ in range(30):
        append_batch(s, offsets_batch([o]))
        append_batch(s, offsets_batch([o + 1]))
        s.truncate_to(o + 1)
        info = s.read(o, 10000)
        assert [r.offset for b in iter_batches(info.tobytes()) for r in b.records()] == [o]
        o += 1


def test_f6_reopened_segment_roll_state(tmp_path):
    clock = MockClock(T0)
    s = LogSegment.open(tmp_path, 0, clock=clock)
    assert s.read_next_offset() == 0  # opens both indexes, as Kafka's test segment has them
    s.max_timestamp_so_far  # noqa: B018
    s.close()
    s = LogSegment.open(tmp_path, 0, clock=clock)
    assert os.path.getsize(s.offset_index_path) == 0 and os.path.getsize(s.time_index_path) == 0
    assert s.offset_index.is_full()
    clock.sleep(500)
    s.truncate_to(57)
    assert s.time_waited_for_roll(clock.milliseconds(), -1) == 0
    assert not s.offset_index.is_full() and not s.time_index.is_full()
    p = RollParams(300000, 2**31 - 1, -1, 100, 1024, clock.milliseconds())
    assert not s.should_roll(p)
    clock.sleep(300001)
    assert not s.should_roll(RollParams(300000, 2**31 - 1, -1, 100, 1024, clock.milliseconds()))
    assert s.should_roll(RollParams(300000, 2**31 - 1, -1, 2**31 - 1 + 200, 1024, clock.milliseconds()))


def _one_record_batches(s, offsets, ts_of=lambda o: o):
    for o in offsets:
        append_batch(s, offsets_batch([o], ts=ts_of(o)))


def test_f7_truncate_reloads_max_timestamp(tmp_path):
    size = len(offsets_batch([40], ts=40))
    s = seg(tmp_path, interval=2 * size - 1)
    _one_record_batches(s, range(40, 70))
    assert s.read_next_offset() == 70
    assert s.time_index.entries == 14
    s.truncate_to(41)
    assert s.time_index.entries == 0
    assert s.largest_timestamp == 40
    assert s.read_next_offset() == 41


def test_f8_truncate_to_zero_resets_roll_timer(tmp_path):
    clock = MockClock(T0)
    s = seg(tmp_path, clock=clock)
    append_batch(s, offsets_batch([40, 41]))
    clock.sleep(500)
    assert s.time_waited_for_roll(clock.milliseconds(), -1) == 500
    s.truncate_to(0)
    assert s.time_waited_for_roll(clock.milliseconds(), -1) == 0
    assert not s.offset_index.is_full() and not s.time_index.is_full()
    assert s.read(0, 1024) is None
    append_batch(s, offsets_batch([40, 41]))
    assert read_offsets(s.read(40, 1024)) == [40]


def test_f9_find_offset_by_timestamp(tmp_path):
    size = len(offsets_batch([40], ts=400))
    s = seg(tmp_path, interval=2 * size - 1)
    _one_record_batches(s, range(40, 50), ts_of=lambda o: o * 10)
    assert s.largest_timestamp == 490
    expected = {420: 42, 421: 43, 430: 43, 431: 44, 401: 41, 399: 40, 491: None}
    for ts, off in expected.items():
        got = s.find_offset_by_timestamp(ts)
        assert (got.offset if got else None) == off, ts


def test_f10_read_next_offset(tmp_path):
    s = seg(tmp_path)
    assert s.read_next_offset() == 40
    append_batch(s, offsets_batch([50, 51, 52]))
    assert s.read_next_offset() == 53


def test_f11_change_file_suffixes(tmp_path):
    s = seg(tmp_path)
    assert not s.offset_index_path.exists() and not s.time_index_path.exists()
    s.change_file_suffixes("", ".deleted")
    assert s.log.path.name.endswith(".log.deleted") and s.log.path.exists()
    assert not names.log_file(tmp_path, 40).exists()
    assert not s.offset_index_path.exists() and not s.time_index_path.exists()
    assert s.offset_index_path.name.endswith(".index.deleted")
    s.offset_index  # noqa: B018 - first access creates the file under its new name
    s.time_index  # noqa: B018
    assert s.offset_index_path.exists() and s.time_index_path.exists()
    assert s.time_index_path.name.endswith(".timeindex.deleted")


@pytest.mark.parametrize("which", ["index", "timeindex"])
def test_f12_recover_corrupt_index(tmp_path, which):
    s = seg(tmp_path, base=0, interval=1)
    _one_record_batches(s, range(100), ts_of=lambda o: o * 10)
    path = s.offset_index_path if which == "index" else s.time_index_path
    idx = s.offset_index if which == "index" else s.time_index
    idx.flush()
    length = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(5)
        f.write(os.urandom(length - 5))
    s.close()
    s = seg(tmp_path, base=0, interval=1)
    s.recover()
    for i in range(100):
        assert read_offsets(s.read(i, 1, min_one_message=True)) == [i]
        assert s.find_offset_by_timestamp(i * 10).offset == i


@pytest.mark.parametrize("seed", range(10))
def test_f13_recover_random_tail_corruption(tmp_path, seed):
    rnd = random.Random(seed)
    s = seg(tmp_path, base=0, interval=1)
    positions = []
    for o in range(20):
        positions.append(s.size)
        append_batch(s, offsets_batch([o]))
    k = rnd.randrange(20)
    r = rnd.randrange(15)
    size_before = s.size
    with open(s.log.path, "r+b") as f:
        f.seek(positions[k] + r)
        f.write(os.urandom(size_before - positions[k] - r))
    removed = s.recover()
    assert [b.last_offset for _, b in s.log.batches()] == list(range(k))
    assert removed == size_before - positions[k]


def test_f16_truncate_into_gap(tmp_path):
    s = seg(tmp_path)
    append_batch(s, offsets_batch([40]))
    append_batch(s, offsets_batch([43]))
    s.truncate_to(41)
    assert [b.base_offset for _, b in s.log.batches()] == [40]


def test_f18_first_batch_timestamp(tmp_path):
    s = seg(tmp_path)
    assert s.first_batch_timestamp() == LONG_MAX
    append_batch(s, offsets_batch([40], ts=1000))
    assert s.first_batch_timestamp() == 1000


def test_f19_index_cadence_interval_one(tmp_path):
    s = seg(tmp_path, base=0, interval=1)
    n = 10
    for o in range(n):
        append_batch(s, batch_at(o))  # 72 bytes each
    idx = s.offset_index
    assert idx.entries == n - 1
    assert [(idx.entry(i).offset, idx.entry(i).position) for i in range(n - 1)] == [(k, 72 * k) for k in range(1, n)]


def test_f19_index_cadence_default(tmp_path):
    s = LogSegment.open(tmp_path, 0)
    for o in range(200):
        append_batch(s, batch_at(o))  # 72 bytes each
    entries = [s.offset_index.entry(i) for i in range(s.offset_index.entries)]
    assert [(e.offset, e.position) for e in entries] == [(57, 4104), (114, 8208), (171, 12312)]


def test_recovery_rebuilds_identical_indexes(tmp_path):
    """The recovery index rule equals the append rule: same entries, byte for byte."""
    s = LogSegment.open(tmp_path, 0, index_interval_bytes=100)
    for o in range(300):
        append_batch(s, batch_at(o, n=1, ts=T0 + o, value=b"x" * (o % 50)))
    s.close()
    before_idx = s.offset_index_path.read_bytes()
    before_time = s.time_index_path.read_bytes()
    s = LogSegment.open(tmp_path, 0, index_interval_bytes=100)
    assert s.recover() == 0
    s.close()
    assert s.offset_index_path.read_bytes() == before_idx
    assert s.time_index_path.read_bytes() == before_time


def test_zero_filled_tail_after_power_loss(tmp_path):
    s = seg(tmp_path, base=0, interval=1)
    _one_record_batches(s, range(10))
    good = s.size
    s.close()
    with open(names.log_file(tmp_path, 0), "ab") as f:
        f.write(b"\x00" * 4096)
    s = seg(tmp_path, base=0, interval=1)
    assert s.recover() == 4096 and s.size == good and s.read_next_offset() == 10


def test_close_trims_and_reopen_reads(tmp_path):
    s = seg(tmp_path, base=0, interval=1)
    _one_record_batches(s, range(5), ts_of=lambda o: T0 + o)
    s.close()
    assert os.path.getsize(names.offset_index_file(tmp_path, 0)) == 4 * 8
    s = seg(tmp_path, base=0, interval=1)
    assert s.offset_index.entries == 4 and s.time_index.last_entry.timestamp == T0 + 4
    assert read_offsets(s.read(3, 1000)) == [3, 4]
    assert RecordBatch(s.read(4, 1000).tobytes()).records()[0].offset == 4


def test_f15_recover_assigns_leader_epochs(tmp_path):
    from kafkalite.storage.leader_epoch import EpochEntry, LeaderEpochCache

    s = LogSegment.open(tmp_path, 100)
    for offsets, epoch in (([104, 105], 0), ([106, 107], 1), ([108, 109], 1), ([110, 111], 2)):
        append_batch(s, offsets_batch(offsets, epoch=epoch))
    cache = LeaderEpochCache()
    s.recover(epoch_cache=cache)
    assert cache.epoch_entries() == [EpochEntry(0, 104), EpochEntry(1, 106), EpochEntry(2, 110)]


def test_f17_append_from_file_splits_by_offset_range(tmp_path):
    from kafkalite.storage.file_records import FileRecords

    src = FileRecords(tmp_path / "source.log")
    big = build_batch([(None, b"x" * (1024 * 1024 + 1), -1)], base_offset=500)
    for buf in (build_batch([(None, b"k" * 1024, -1)], base_offset=0), big,
                build_batch([(None, b"z", -1)], base_offset=2**31 - 1 + 5)):
        src.append(buf)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    seg0 = LogSegment.open(tmp_path / "a", 0)
    copied = seg0.append_from_file(src, 0)
    assert copied == seg0.size and [b.base_offset for _, b in seg0.log.batches()] == [0, 500]
    seg1 = LogSegment.open(tmp_path / "b", 2**31 - 1)
    assert seg1.append_from_file(src, copied) == seg1.size
    assert [b.base_offset for _, b in seg1.log.batches()] == [2**31 - 1 + 5]
    assert seg0.append_from_file(src, copied) == 0
