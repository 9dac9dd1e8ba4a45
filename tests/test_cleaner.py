"""The log cleaner: reference cases M1-M21 and M23 (M22, the offset map, is in test_offset_map.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from kafkalite.cleaner.cleaner import LogToClean, group_segments_by_size
from kafkalite.cleaner.filter import CleanerStats
from kafkalite.cleaner.manager import LogCleanerManager, cleanable_offsets
from kafkalite.cleaner.vector import hash_key
from kafkalite.records import RecordBatch, SimpleRecord, build_batch
from kafkalite.records.batch import DELETE_HORIZON_FLAG_MASK
from kafkalite.storage import names
from kafkalite.storage.checkpoint import OffsetCheckpointFile
from tests.support import T0
from tests.support.cleaner import (
    COMPACT,
    abort,
    batch_last_offsets,
    clean,
    commit,
    keys,
    make_cleaner,
    offsets,
    record,
    tombstone,
    transactional_appender,
)
from tests.support.logs import Env, records_in

LONG_MAX = (1 << 63) - 1
DAY = 86_400_000
L = LONG_MAX - DAY - 1


@pytest.fixture
def env() -> Env:
    return Env()


def compacted(env, tmp_path, **props):
    return env.open(tmp_path / "test-0", {**COMPACT, **{k.replace("_", "."): v for k, v in props.items()}})


def fill_to_segments(lg, n_segments):
    while lg.number_of_segments < n_segments:
        lg.append_as_leader(record(lg.log_end_offset, lg.log_end_offset))


def test_m1_clean_segments_with_pretend_keys(tmp_path, env):
    lg = compacted(env, tmp_path)
    fill_to_segments(lg, 4)
    assert keys(lg) == list(range(lg.log_end_offset))
    cleaner = make_cleaner(env, slots=1 << 16)
    gone = [1, 3, 5, 7, 9]
    for k in gone:
        cleaner.offset_map.put(str(k).encode(), 1 << 62)
    segments = lg.log_segments()[:3]
    stats = CleanerStats()
    expected_read = sum(s.size for s in segments)
    should_remain = [k for k in keys(lg) if k not in gone]
    from kafkalite.cleaner.transactions import CleanedTransactionMetadata

    cleaner.clean_segments(lg, segments, cleaner.offset_map, T0, stats, CleanedTransactionMetadata(),
                           segments[-1].read_next_offset())
    assert keys(lg) == should_remain
    assert stats.bytes_read == expected_read


def test_m2_cleaning_with_deletes(tmp_path, env):
    lg = compacted(env, tmp_path)
    fill_to_segments(lg, 2)
    leo = lg.log_end_offset
    for k in range(0, leo, 2):
        lg.append_as_leader(tombstone(k))
    fill_to_segments(lg, 4)
    clean(make_cleaner(env), lg)
    remaining = set(keys(lg))
    assert not any(k in remaining for k in range(0, leo, 2))
    assert all(k in remaining for k in range(1, leo, 2))


def _five_records(lg):
    for k in (0, 1, 0, 1, 0):
        lg.append_as_leader(record(k, k))
    lg.roll()


def test_m3_cleaner_stats(tmp_path, env):
    lg = compacted(env, tmp_path)
    _five_records(lg)
    initial = lg.size
    end, stats = clean(make_cleaner(env, slots=4), lg, 2)
    assert end == 5
    assert stats.messages_read == 5 and stats.bytes_read == initial
    assert stats.messages_written == 2 and stats.bytes_written == lg.size
    assert stats.invalid_messages_read == 0 and stats.buffer_utilization > 0


def test_m4_partial_segment_clean(tmp_path, env):
    lg = compacted(env, tmp_path)
    _five_records(lg)
    cleaner = make_cleaner(env, slots=2)
    clean(cleaner, lg, 2)
    assert (keys(lg), offsets(lg)) == ([1, 0, 1, 0], [1, 2, 3, 4])
    clean(cleaner, lg, 3)
    assert (keys(lg), offsets(lg)) == ([0, 1, 0], [2, 3, 4])
    clean(cleaner, lg, 4)
    assert (keys(lg), offsets(lg)) == ([1, 0], [3, 4])


def test_m5_log_to_clean_sizes(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=100)
    while lg.number_of_segments < 7:
        lg.append_as_leader(record(lg.log_end_offset, 0))
    segs = lg.log_segments()
    ltc = LogToClean(("test", 0), lg, segs[2].base_offset, segs[4].base_offset)
    assert ltc.clean_bytes == segs[0].size + segs[1].size
    assert ltc.cleanable_bytes == segs[2].size + segs[3].size
    assert ltc.cleanable_ratio == pytest.approx(0.5)
    active = lg.active_segment.base_offset
    ltc = LogToClean(("test", 0), lg, active, active)
    assert ltc.total_bytes == lg.size - lg.active_segment.size


def test_m6_segments_past_the_bound_are_untouched(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=300)
    i = 0
    while lg.number_of_segments < 8:
        lg.append_as_leader(record(i % 10, i))
        i += 1
    segs = lg.log_segments()
    bound = segs[3].base_offset + 1  # inside segment 3
    later = {s.base_offset: s.log.read(0, s.size) for s in segs[3:]}
    clean(make_cleaner(env), lg, 0, bound)
    after = {s.base_offset: s for s in lg.log_segments()}
    for base, data in later.items():
        assert after[base].log.read(0, after[base].size) == data
    cleaned = [r for s in lg.log_segments() if s.base_offset < segs[3].base_offset
               for _, b in s.log.batches() for r in b.records()]
    assert len({r.key for r in cleaned}) == len(cleaned)  # one value per key left below the bound


def test_m7_grouping_by_size(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=300, index_interval_bytes=1)
    while lg.number_of_segments < 10:
        lg.append_as_leader(record(0, 0))  # equal batches, so equal segments
    segs = lg.log_segments()
    end = lg.log_end_offset

    def check(groups):
        flat = [s.base_offset for g in groups for s in g]
        assert flat == [s.base_offset for s in segs]

    groups = group_segments_by_size(segs, LONG_MAX, LONG_MAX, end)
    assert len(groups) == 1
    check(groups)
    for max_size, max_index in ((1, LONG_MAX), (LONG_MAX, 1)):
        groups = group_segments_by_size(segs, max_size, max_index, end)
        assert len(groups) == len(segs)
        check(groups)
    size3 = sum(s.size for s in segs[:3]) + 1
    groups = group_segments_by_size(segs, size3, LONG_MAX, end)
    assert all(len(g) == 3 for g in groups[:-1]) and len(groups[-1]) <= 3
    check(groups)
    index3 = sum(s.offset_index.size_in_bytes for s in segs[:3]) + 1
    groups = group_segments_by_size(segs, LONG_MAX, index3, end)
    assert all(len(g) == 3 for g in groups[:-1])
    check(groups)


def test_m8_grouping_with_sparse_offsets(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=400, index_interval_bytes=1)
    while lg.number_of_segments < 2:
        lg.append_as_leader(record(lg.log_end_offset, 0))
    lg.append_as_follower(record(1, 1, base_offset=(1 << 31) - 2, partition_leader_epoch=0))
    lg.append_as_leader(record(2, 2))
    assert lg.active_segment.offset_index.last_offset == (1 << 31) - 1
    segs = lg.log_segments()
    groups = group_segments_by_size(segs, LONG_MAX, LONG_MAX, lg.log_end_offset)
    assert len(groups) == 1
    lg.append_as_leader(record(3, 3))
    segs = lg.log_segments()
    groups = group_segments_by_size(segs, LONG_MAX, LONG_MAX, lg.log_end_offset)
    assert len(groups) == 2
    for i, g in enumerate(groups):
        nxt = groups[i + 1][0].base_offset if i + 1 < len(groups) else lg.log_end_offset
        assert nxt - 1 - g[0].base_offset <= (1 << 31) - 1


def test_m9_build_offset_map(tmp_path, env):
    lg = compacted(env, tmp_path)
    for i in range(500):
        lg.append_as_leader(record(i, i))
    segs = lg.log_segments()
    cleaner = make_cleaner(env, slots=1000)
    for start, end in ((0, segs[1].base_offset), (segs[1].base_offset, segs[3].base_offset),
                       (segs[3].base_offset, lg.log_end_offset)):
        m = cleaner.offset_map
        cleaner.build_offset_map(lg, start, end, m, CleanerStats())
        assert m.latest_offset + 1 == end
        assert m.size == end - start
        assert all(m.get(str(i).encode()) == i for i in range(start, end))
        assert m.get(str(start - 1).encode()) == -1 and m.get(str(end).encode()) == -1


def test_m10_m11_tombstone_kept_in_first_pass_with_horizon(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=1 << 20)
    cleaner = make_cleaner(env, slots=10)
    now = env.clock.milliseconds()
    lg.append_as_leader(record(0, 0, ts=now + DAY + 10_000))
    lg.roll()
    clean(cleaner, lg, 0)
    lg.append_as_leader(tombstone(0, ts=now - DAY - 10_000))
    lg.roll()
    clean(cleaner, lg, 1)
    first = next(lg.batches())
    assert first.last_offset == 1  # the value is gone, the tombstone stays (pass 1)
    assert first.attributes & DELETE_HORIZON_FLAG_MASK and first.delete_horizon_ms == now + DAY
    first.ensure_valid()
    assert [r.value for r in first.records()] == [None]
    lg.append_as_leader(record(1, 1, ts=now))
    lg.roll()
    clean(cleaner, lg, 2)
    assert next((r.offset, r.value) for r in records_in(lg)) == (1, None)  # horizon not reached yet
    env.sleep(DAY)
    clean(cleaner, lg, 3)
    assert [r.offset for r in records_in(lg)] == [2]  # pass at the horizon drops it


def test_m12_aborted_data_goes_markers_stay(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=2048)
    p1, p2 = transactional_appender(lg, 1), transactional_appender(lg, 2)
    p1([1, 2])
    p2([2, 3])
    p1([3, 4])
    abort(lg, 1)
    commit(lg, 2)
    p1([2])
    commit(lg, 1)
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    aborted_before = lg.collect_aborted_transactions(0, lg.log_end_offset)
    clean(make_cleaner(env), lg, 0)
    assert keys(lg) == [3, 2]
    assert offsets(lg) == [3, 6, 7, 8, 9]
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == aborted_before


def test_m13_transactions_spanning_segments(tmp_path, env):
    lg = compacted(env, tmp_path)
    p1, p2, p3 = (transactional_appender(lg, pid) for pid in (1, 2, 3))
    p1([1, 2])
    p3([2, 3])
    p2([3, 4])
    lg.roll()
    p2([5, 6])
    p3([6, 7])
    p1([7, 8])
    abort(lg, 2)
    p3([8, 9])
    commit(lg, 3)
    p1([9, 10])
    abort(lg, 1)
    cleaner = make_cleaner(env)
    dirty, _ = clean(cleaner, lg, 0)
    assert keys(lg) == [2, 3, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
    lg.roll()
    p2([11])
    p1([12])
    clean(cleaner, lg, dirty)
    assert keys(lg) == [2, 3, 6, 7, 8, 9, 11, 12]


def test_m14_commit_marker_removal(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=256)
    cleaner = make_cleaner(env)
    p = transactional_appender(lg, 1)
    p([1])
    p([2, 3])
    commit(lg, 1)
    p([2])
    commit(lg, 1)
    lg.roll()
    dirty, _ = clean(cleaner, lg, 0, now=L)
    assert (keys(lg), offsets(lg)) == ([1, 3, 2], [0, 2, 3, 4, 5])
    p([1, 3])
    commit(lg, 1)
    lg.roll()
    dirty, _ = clean(cleaner, lg, dirty, now=L)
    assert (keys(lg), offsets(lg)) == ([2, 1, 3], [3, 4, 5, 6, 7, 8])
    dirty, _ = clean(cleaner, lg, dirty, now=L)
    assert offsets(lg) == [3, 4, 5, 6, 7, 8]  # the marker's horizon was only just set
    clean(cleaner, lg, dirty, now=LONG_MAX)
    assert offsets(lg) == [4, 5, 6, 7, 8]


def test_m15_empty_batches_keep_producer_state(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=256)
    cleaner = make_cleaner(env)
    p1, p2 = transactional_appender(lg, 1), transactional_appender(lg, 2)
    p1([2, 3])
    lg.roll()
    p2([2, 3])
    commit(lg, 2)
    lg.roll()
    lg.append_as_leader(record(2, 2))
    lg.append_as_leader(record(3, 3))
    commit(lg, 1)
    lg.roll()
    dirty, _ = clean(cleaner, lg, 0, now=L)
    assert (keys(lg), offsets(lg)) == ([2, 3], [4, 5, 6, 7])
    assert batch_last_offsets(lg) == [1, 3, 4, 5, 6, 7]
    empty = next(lg.batches())
    assert empty.records_count == 0 and empty.size_in_bytes == 61 and empty.base_timestamp == -1
    dirty, _ = clean(cleaner, lg, dirty, now=L)
    assert batch_last_offsets(lg) == [1, 3, 4, 5, 6, 7]
    p2([1])
    commit(lg, 2)
    lg.roll()
    dirty, _ = clean(cleaner, lg, dirty, now=L)
    assert batch_last_offsets(lg) == [1, 4, 5, 6, 7, 8, 9]
    dirty, _ = clean(cleaner, lg, dirty, now=L)
    clean(cleaner, lg, dirty, now=L + DAY + 1)
    assert batch_last_offsets(lg) == [1, 5, 6, 7, 8, 9]
    assert offsets(lg) == [5, 6, 7, 8, 9]


def test_m16_abort_marker_stays_while_its_data_does(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=256)
    cleaner = make_cleaner(env)
    p = transactional_appender(lg, 1)
    p([1])
    abort(lg, 1)
    p([2])
    p([2])
    commit(lg, 1)
    lg.roll()
    dirty, _ = clean(cleaner, lg, 0, now=L)
    assert (keys(lg), offsets(lg)) == ([2], [1, 3, 4])
    dirty, _ = clean(cleaner, lg, dirty, now=L)
    clean(cleaner, lg, dirty, now=LONG_MAX)
    assert offsets(lg) == [3, 4]


def test_m17_offset_gaps_at_segment_ends(tmp_path, env):
    lg = compacted(env, tmp_path, segment_bytes=1 << 20)
    for i in range(10):
        lg.append_as_leader(record(i, i))
    lg.roll(11)
    lg.append_as_follower(record(11, 11, base_offset=11, partition_leader_epoch=0))
    end, _ = clean(make_cleaner(env), lg, 0)
    assert end == 11 == lg.active_segment.base_offset
    lg2 = env.open(tmp_path / "gaps-0", {**COMPACT, "segment.bytes": 1 << 20})
    for start, stop in ((0, 10), (15, 25), (30, 31)):
        if start:
            lg2.roll(start)
        for o in range(start, stop):
            lg2.append_as_follower(record(o, o, base_offset=o, partition_leader_epoch=0))
    end, _ = clean(make_cleaner(env), lg2, 0)
    assert end == 30 == lg2.active_segment.base_offset


def test_m18_cleanable_offsets(tmp_path, env):
    lg = compacted(env, tmp_path)
    while lg.number_of_segments < 8:
        lg.append_as_leader(record(lg.log_end_offset, 0))
    lg.update_high_watermark(50)
    o = cleanable_offsets(lg, 0, env.clock.milliseconds())
    assert (o.first_dirty_offset, o.first_uncleanable_dirty_offset) == (0, 50)
    lg.update_high_watermark(lg.log_end_offset)
    assert cleanable_offsets(lg, 0, env.clock.milliseconds()).first_uncleanable_dirty_offset == \
        lg.active_segment.base_offset

    lag = 3_600_000
    lg2 = env.open(tmp_path / "lag-0", {**COMPACT, "min.compaction.lag.ms": lag})
    t0 = env.clock.milliseconds()
    while lg2.number_of_segments < 4:
        lg2.append_as_leader(record(lg2.log_end_offset, 0, ts=t0))
    active_at_t0 = lg2.active_segment.base_offset
    env.sleep(lag + 1)
    while lg2.number_of_segments < 8:
        lg2.append_as_leader(record(lg2.log_end_offset, 0, ts=env.clock.milliseconds()))
    lg2.update_high_watermark(lg2.log_end_offset)
    assert cleanable_offsets(lg2, 0, env.clock.milliseconds()).first_uncleanable_dirty_offset == active_at_t0

    lg3 = env.open(tmp_path / "old-0", {**COMPACT, "min.compaction.lag.ms": lag})
    while lg3.number_of_segments < 4:
        lg3.append_as_leader(record(lg3.log_end_offset, 0, ts=t0))
    lg3.update_high_watermark(lg3.log_end_offset)
    assert cleanable_offsets(lg3, 0, env.clock.milliseconds()).first_uncleanable_dirty_offset == \
        lg3.active_segment.base_offset


def test_m19_uncommitted_transactions_are_not_cleaned(tmp_path, env):
    lag = 3_600_000
    lg = compacted(env, tmp_path, min_compaction_lag_ms=lag)
    p = transactional_appender(lg, 1, ts=env.clock.milliseconds())
    p([1, 2, 3])
    lg.roll()
    lg.update_high_watermark(3)
    env.sleep(lag + 1)
    assert cleanable_offsets(lg, 0, env.clock.milliseconds()).first_uncleanable_dirty_offset == 0
    abort(lg, 1, ts=env.clock.milliseconds())
    lg.roll()
    lg.update_high_watermark(4)
    assert cleanable_offsets(lg, 0, env.clock.milliseconds()).first_uncleanable_dirty_offset == 3
    env.sleep(lag + 1)
    assert cleanable_offsets(lg, 0, env.clock.milliseconds()).first_uncleanable_dirty_offset == 4


def test_m20_checkpoint_validity(tmp_path, env):
    lg = compacted(env, tmp_path)
    while lg.log_end_offset < 30:
        lg.append_as_leader(record(lg.log_end_offset, 0))
    lg.update_high_watermark(lg.log_end_offset)
    now = env.clock.milliseconds()
    lg.maybe_increment_log_start_offset(10)
    o = cleanable_offsets(lg, 15, now)
    assert (o.first_dirty_offset, o.force_update_checkpoint) == (15, False)
    lg.maybe_increment_log_start_offset(20)
    o = cleanable_offsets(lg, 15, now)
    assert (o.first_dirty_offset, o.force_update_checkpoint) == (20, True)
    o = cleanable_offsets(lg, 25 + lg.log_end_offset, now)
    assert (o.first_dirty_offset, o.force_update_checkpoint) == (20, True)


def _dirty_log(env, path, props, n_dirty, n_clean=0):
    lg = env.open(path, {**COMPACT, **props})
    for i in range(n_clean + n_dirty):
        lg.append_as_leader(record(i, i, ts=env.clock.milliseconds()))
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    return lg


def test_m21_filthiest_log_is_chosen(tmp_path, env):
    a = _dirty_log(env, tmp_path / "a-0", {}, n_dirty=40)
    b = _dirty_log(env, tmp_path / "b-0", {}, n_dirty=40)
    manager = LogCleanerManager([tmp_path], {("a", 0): a, ("b", 0): b})
    OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").write({("a", 0): 10, ("b", 0): 30})
    now = env.clock.milliseconds()
    chosen = manager.grab_filthiest_compacted_log(now)
    assert chosen is not None and chosen.topic_partition == ("a", 0)  # 75 % dirty against 25 %
    manager.done_cleaning(("a", 0), tmp_path, chosen.first_dirty_offset)
    half = next(s.base_offset for s in a.log_segments() if s.base_offset * 2 >= a.active_segment.base_offset)
    OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").write({("a", 0): half, ("b", 0): 40})
    ltc = LogToClean(("a", 0), a, half, a.active_segment.base_offset)
    if ltc.cleanable_ratio == pytest.approx(0.5):
        assert manager.grab_filthiest_compacted_log(now) is None  # exactly 0.5 is not above the ratio
    overdue = _dirty_log(env, tmp_path / "c-0", {"max.compaction.lag.ms": 1000}, n_dirty=2, n_clean=40)
    manager = LogCleanerManager([tmp_path], {("c", 0): overdue})
    OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").write({("c", 0): 40})
    assert manager.grab_filthiest_compacted_log(env.clock.milliseconds()) is None
    env.sleep(2000)
    chosen = manager.grab_filthiest_compacted_log(env.clock.milliseconds())
    assert chosen is not None and chosen.need_compaction_now


def test_m23_swap_files_deletion_mtime_and_checkpoint(tmp_path, env):
    lg = compacted(env, tmp_path / "d", file_delete_delay_ms=1000, segment_bytes=1 << 20)
    for i in range(100):
        lg.append_as_leader(record(i % 7, i))
        if i % 10 == 9:
            lg.roll()  # ten small segments: cleaned as one group
    lg.update_high_watermark(lg.log_end_offset)
    for s in lg.log_segments():
        s.set_last_modified_ms(T0 - 5000 + s.base_offset)
    last_source_mtime = lg.log_segments()[-2].last_modified_ms()
    manager = LogCleanerManager([tmp_path / "d"], {("test", 0): lg})
    ltc = manager.grab_filthiest_compacted_log(env.clock.milliseconds())
    end, _ = make_cleaner(env).clean(ltc)
    manager.done_cleaning(("test", 0), tmp_path / "d", end)
    files = os.listdir(lg.dir)
    assert not [f for f in files if f.endswith((names.CLEANED_SUFFIX, names.SWAP_SUFFIX))]
    assert [f for f in files if f.endswith(names.DELETED_SUFFIX)]
    cleaned = lg.log_segments()[0]
    assert cleaned.last_modified_ms() == last_source_mtime
    assert OffsetCheckpointFile(tmp_path / "d" / "cleaner-offset-checkpoint").read() == {("test", 0): end}
    env.sleep(1000)
    assert not [f for f in os.listdir(lg.dir) if f.endswith(names.DELETED_SUFFIX)]
    assert sorted(keys(lg)) == list(range(7)) and len(lg.log_segments()) == 2


def test_keyless_records_are_dropped_and_counted(tmp_path, env):
    lg = env.open(tmp_path / "test-0", {"segment.bytes": 1024})  # not compacted: keyless records allowed in
    for i in range(5):
        lg.append_as_leader(build_batch([SimpleRecord(None if i % 2 else b"k", b"v%d" % i, -1)]))
    lg.roll()
    _, stats = clean(make_cleaner(env), lg, 0)
    assert stats.invalid_messages_read == 2
    assert [r.value for r in records_in(lg)] == [b"v4"]


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_compressed_batches_are_rewritten_in_their_codec(tmp_path, env, codec):
    from kafkalite.records import CompressionType

    lg = compacted(env, tmp_path)
    ct = CompressionType[codec.upper()]
    for base in range(0, 40, 10):
        lg.append_as_leader(build_batch([SimpleRecord(b"%d" % (i % 6), b"v%d" % (base + i), T0 + base + i)
                                         for i in range(10)], compression=ct))
    lg.roll()
    clean(make_cleaner(env), lg, 0)
    got = {int(r.key): r.value for r in records_in(lg)}
    assert got == {k: b"v%d" % max(o for o in range(40) if o % 6 == k) for k in range(6)}
    for b in lg.batches():
        assert b.compression == ct and b.is_valid()


def test_rewritten_batch_matches_kafka_builder(tmp_path, env):
    """A batch losing its first records is re-encoded exactly as Kafka's builder would write its survivors."""
    lg = compacted(env, tmp_path)
    recs = [SimpleRecord(b"%d" % k, b"v%d" % i, T0 + 7 * i, (("h", b"x"),)) for i, k in enumerate([0, 1, 2, 0, 3])]
    lg.append_as_leader(build_batch(recs))
    lg.append_as_leader(record(1, 9, ts=T0 + 100))
    lg.roll()
    clean(make_cleaner(env), lg, 0)
    got = next(lg.batches())
    survivors = [recs[i] for i in (2, 3, 4)]
    want = build_batch(survivors, offset_deltas=[2, 3, 4], last_offset_delta=4, partition_leader_epoch=0)
    assert bytes(got.buffer) == bytes(want)


@pytest.mark.slow
def test_vector_hash_matches_scalar_and_spreads():
    rng = np.random.default_rng(1)
    ks = [bytes(rng.integers(0, 256, int(n), dtype=np.uint8)) for n in rng.integers(0, 40, 3000)]
    assert len({hash_key(k) for k in ks}) == len(set(ks))
    assert hash_key(b"abc") != hash_key(b"abc\x00")


def test_batch_views_survive_cleaning(tmp_path, env):
    lg = compacted(env, tmp_path)
    for i in range(60):
        lg.append_as_leader(record(i % 5, i))
    lg.roll()
    clean(make_cleaner(env), lg, 0)
    for b in lg.batches():
        RecordBatch(bytes(b.buffer)).ensure_valid()
