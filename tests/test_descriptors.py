"""Descriptors per partition: about one (its active `.log`), as in Kafka, whose mapped indexes keep none.

Python's mmap (before 3.13) keeps a duplicate of the descriptor it maps, which made every partition
hold three and brokers with thousands of partitions hit the descriptor limit."""

from __future__ import annotations

import os
import struct

import pytest

from kafkalite.clock import MockClock
from kafkalite.manager.log_manager import LogManager
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.scheduler import MockScheduler
from kafkalite.storage.checkpoint import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT_FILE
from kafkalite.storage.index_base import FileMapping, IndexBase
from kafkalite.storage.offset_index import OffsetIndex
from tests.support import T0
from tests.support.logs import records_in

PARTITIONS = 200


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_a_log_manager_holds_about_one_descriptor_per_partition(tmp_path):
    before = open_descriptors()
    lm = LogManager([tmp_path], scheduler=MockScheduler(MockClock(T0)))
    for p in range(PARTITIONS):
        lg = lm.get_or_create_log("t", p)
        for i in range(3):
            lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % i, b"v" * 2000, T0 + i)]))
        assert lg.read(1, 10_000).size > 0
        lg.flush(include_active=True)
    created = open_descriptors() - before
    lm.shutdown()
    lm = LogManager([tmp_path], scheduler=MockScheduler(MockClock(T0)))
    for p in range(PARTITIONS):
        assert lm.get_log("t", p).read(1, 10_000).size > 0
    reopened = open_descriptors() - before
    lm.shutdown()
    assert created <= 1.5 * PARTITIONS, f"{created} descriptors for {PARTITIONS} partitions"
    assert reopened <= 1.5 * PARTITIONS, f"{reopened} descriptors for {PARTITIONS} partitions after a restart"
    assert open_descriptors() <= before + 1


def test_a_mapping_outlives_its_descriptor_and_fails_cleanly_once_closed(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, max_index_size=4096)
    index.append(5, 100)
    index.flush()
    assert struct.unpack(">ii", path.read_bytes()[:8]) == (5, 100)
    index.close()
    fd = os.open(path, os.O_RDONLY)
    mapping = FileMapping(fd, 4096, writable=False)
    os.close(fd)
    assert mapping.read(0, 8) == struct.pack(">ii", 5, 100)
    with pytest.raises(TypeError):
        mapping.write(0, b"x")  # a read-only mapping refuses writes instead of faulting
    mapping.close()
    mapping.close()
    with pytest.raises(ValueError, match="closed"):
        mapping.read(0, 8)


def index_mappings(directory) -> list[str]:
    """Lines of /proc/self/maps that map an index file under `directory`."""
    with open("/proc/self/maps") as f:
        return [line for line in f if str(directory) in line and (".index" in line or ".timeindex" in line)]


@pytest.mark.skipif(not os.path.isfile("/proc/self/maps"), reason="reads mappings through /proc")
def test_idle_partitions_map_no_index_until_one_is_used(tmp_path):
    """Loaded logs keep their active indexes unopened and unmapped until an entry is read or written, and only
    then grow them to their preallocated size: a broker with thousands of idle partitions holds no mapping
    for them and its restart resizes no file of theirs (Kafka resizes the active indexes at load)."""
    lm = LogManager([tmp_path], scheduler=MockScheduler(MockClock(T0)))
    for p in range(20):
        lg = lm.get_or_create_log("t", p)
        for i in range(3):  # 6 KB: one offset index entry and, at close, a time index entry
            lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % i, b"v" * 2000, T0 + i)]))
    lm.shutdown()
    lm = LogManager([tmp_path], scheduler=MockScheduler(MockClock(T0)))
    try:
        assert index_mappings(tmp_path) == []
        lg = lm.get_log("t", 3)
        index_path = lg.active_segment.offset_index_path
        time_index_path = lg.active_segment.time_index_path
        assert os.path.getsize(index_path) == 8 and os.path.getsize(time_index_path) == 12  # as the shutdown left them
        assert lg.read(1, 10_000).size > 0  # a fetch looks its offset up
        assert os.path.getsize(index_path) == lg.config.segment_index_bytes  # preallocated at its first use
        for i in range(2):  # the second gets an index entry
            lg.append_as_leader(build_batch([SimpleRecord(b"k", b"v" * 5000, T0 + 9 + i)]))
        mapped = index_mappings(tmp_path)
        assert mapped and all("t-3/" in line for line in mapped), mapped
        assert [r.offset for r in records_in(lg)] == [0, 1, 2, 3, 4]
    finally:
        lm.shutdown()
    lm = LogManager([tmp_path], scheduler=MockScheduler(MockClock(T0)))
    try:
        lg = lm.get_log("t", 3)
        assert lg.log_end_offset == 5  # found from the entry the load's check read, with no index opened
        assert index_mappings(tmp_path) == [] and lg.active_segment._offset_index is None
        assert lg.active_segment.offset_index.entries == 2  # both entries survived unmapping and the restart
        assert [r.offset for r in records_in(lg)] == [0, 1, 2, 3, 4]
        assert lg.read(4, 10_000).size > 0
    finally:
        lm.shutdown()


@pytest.mark.skipif(not os.path.isfile("/proc/self/maps"), reason="reads mappings through /proc")
def test_recovery_rebuilds_indexes_without_mapping_them(tmp_path, monkeypatch):
    """After an unclean shutdown every partition's active segment is recovered and its indexes rebuilt: written
    with `pwrite`, not through a mapping, so a restart after kill -9 makes no mmap/munmap pair (and page faults)
    per index of thousands of idle partitions (the mappings were dropped again by the end of the load, so only
    counting the mappings made shows it). The entries are there for the reads that follow."""
    made = []
    real_map = IndexBase._map

    def counted(index: IndexBase, fd: int) -> None:
        made.append(index.path)
        real_map(index, fd)
    monkeypatch.setattr(IndexBase, "_map", counted)
    lm = LogManager([tmp_path], scheduler=MockScheduler(MockClock(T0)))
    for p in range(20):
        lg = lm.get_or_create_log("t", p)
        for i in range(3):  # 6 KB: one offset index entry, and time index entries
            lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % i, b"v" * 2000, T0 + i)]))
    lm.shutdown()
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    (tmp_path / RECOVERY_POINT_CHECKPOINT_FILE).unlink()  # nothing known flushed: every segment is recovered
    made.clear()
    lm = LogManager([tmp_path], scheduler=MockScheduler(MockClock(T0)), recovery_processes=0)
    try:
        assert made == [] and index_mappings(tmp_path) == []
        lg = lm.get_log("t", 3)
        index = lg.active_segment.offset_index
        assert index.entries == 1 and index.last_offset == 2 and lg.active_segment.time_index.entries >= 1
        assert lg.active_segment.time_index.last_entry.timestamp == T0 + 2
        assert [r.offset for r in records_in(lg)] == [0, 1, 2]
        assert index.lookup(2).offset == 2 and lg.read(2, 10_000).size > 0  # mapped now, entries as written
        assert index_mappings(tmp_path)
    finally:
        lm.shutdown()


def test_a_resized_index_keeps_its_entries_unmapped_and_maps_again_on_use(tmp_path):
    idx = OffsetIndex(tmp_path / "00000000000000000000.index", 0, max_index_size=4096)
    idx.append(5, 100)
    idx.append(9, 300)
    idx.trim_to_valid_size()  # unmaps
    idx.flush()  # entries written through the dropped mapping reach the disk with an fsync of the file
    assert idx.entries == 2 and idx.last_offset == 9
    assert index_mappings(tmp_path) == []
    assert idx.lookup(7).offset == 5  # mapped again on use
    assert len(index_mappings(tmp_path)) == 1
    idx.close()
    assert index_mappings(tmp_path) == []
    with pytest.raises(ValueError):
        idx.entry(0)  # a closed index is not mapped again
