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
from kafkalite.storage.index_base import FileMapping
from kafkalite.storage.offset_index import OffsetIndex
from tests.support import T0

PARTITIONS = 200


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


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
