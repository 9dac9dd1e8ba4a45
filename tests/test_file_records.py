"""FileRecords: the `.log` file (reference cases B1-B5) and its scan under damage."""

from __future__ import annotations

import contextlib
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.errors import CorruptRecordError, LogError
from kafkalite.records import build_batch
from kafkalite.storage.file_records import FileRecords, LogOffsetPosition, TimestampAndOffset
from tests.support.batches import batch_at


def _filled(path, batches) -> FileRecords:
    fr = FileRecords(path)
    for b in batches:
        fr.append(b)
    return fr


@pytest.mark.parametrize("tail", [0, 2, 4, 5, 6])
def test_b1_partial_tail_ignored(tmp_path, tail):
    batches = [batch_at(i, value=b"v%d" % i) for i in range(5)]
    fr = _filled(tmp_path / "a.log", batches)
    fr.append(b"\x00" * tail)
    got = [(pos, bytes(b.buffer)) for pos, b in fr.batches()]
    assert [b for _, b in got] == [bytes(b) for b in batches]


def test_b1_partial_batch_tail_ignored(tmp_path):
    batches = [batch_at(i) for i in range(3)]
    fr = _filled(tmp_path / "a.log", batches)
    fr.append(bytes(batch_at(3))[:40])
    assert [b.base_offset for _, b in fr.batches()] == [0, 1, 2]


def test_b2_search_for_offset_with_size(tmp_path):
    batches = [batch_at(0), batch_at(1), batch_at(2), batch_at(50)]
    fr = _filled(tmp_path / "a.log", batches)
    sizes = [len(b) for b in batches]
    pos3 = sum(sizes[:3])
    assert fr.search_for_offset_with_size(3, pos3) == LogOffsetPosition(50, pos3, sizes[3])
    assert fr.search_for_offset_with_size(50, pos3) == LogOffsetPosition(50, pos3, sizes[3])
    assert fr.search_for_offset_with_size(1, 0) == LogOffsetPosition(1, sizes[0], sizes[1])
    assert fr.search_for_offset_with_size(51, 0) is None


def test_b3_slice(tmp_path):
    batches = [batch_at(0), batch_at(1, value=b"longer value"), batch_at(2)]
    fr = _filled(tmp_path / "a.log", batches)
    s = fr.slice(len(batches[0]), len(batches[1]))
    assert s.tobytes() == bytes(batches[1])
    assert [bytes(b.buffer) for _, b in fr.batches(s.position, s.position + s.size)] == [bytes(batches[1])]
    assert list(fr.batches(s.position, s.position + s.size - 1)) == []


def test_b4_search_for_timestamp(tmp_path):
    fr = _filled(tmp_path / "a.log", [batch_at(5, ts=10, epoch=0), batch_at(6, ts=11, epoch=1)])
    assert fr.search_for_timestamp(9, 0, 0) == TimestampAndOffset(10, 5, 0)
    assert fr.search_for_timestamp(10, 0, 0) == TimestampAndOffset(10, 5, 0)
    assert fr.search_for_timestamp(11, 0, 0) == TimestampAndOffset(11, 6, 1)
    assert fr.search_for_timestamp(12, 0, 0) is None


def test_b5_preallocate(tmp_path):
    path = tmp_path / "p.log"
    fr = FileRecords(path, preallocate=True, init_file_size=512 * 1024 * 1024)
    assert os.path.getsize(path) == 512 * 1024 * 1024 and fr.size == 0
    for i in range(3):
        fr.append(batch_at(i))
    size = fr.size
    fr.close()
    assert os.path.getsize(path) == size
    again = FileRecords(path)
    assert again.size == size
    assert [b.base_offset for _, b in again.batches()] == [0, 1, 2]


def test_truncate_to_and_bounds(tmp_path):
    fr = _filled(tmp_path / "a.log", [batch_at(0), batch_at(1)])
    assert fr.truncate_to(72) == 72 and fr.size == 72
    with pytest.raises(LogError):
        fr.truncate_to(1000)
    assert [b.base_offset for _, b in fr.batches()] == [0]


def test_scan_spans_windows_and_big_batches(tmp_path):
    big = build_batch([(b"k", os.urandom(300_000), 5)], base_offset=1)
    batches = [batch_at(0), big, batch_at(2), big, batch_at(4)]
    fr = _filled(tmp_path / "a.log", batches)
    got = [(pos, size) for pos, size, _ in fr.iter_views(0, window=4096)]
    assert [s for _, s in got] == [len(b) for b in batches]
    hdrs = list(fr.batch_headers(0))
    assert [h.base_offset for h in hdrs] == [0, 1, 2, 1, 4]


@given(st.lists(st.integers(min_value=0, max_value=40_000), min_size=1, max_size=40))
def test_a_header_scan_that_grows_its_window_sees_every_batch(tmp_path_factory, value_sizes):
    """The header-only scan reads 8 KiB first and more at each refill: whatever the batch sizes, it yields
    the same (position, size) as a scan with bodies, and every header."""
    path = tmp_path_factory.mktemp("grow") / "a.log"
    batches = [build_batch([(None, b"x" * n, 5)], base_offset=i) for i, n in enumerate(value_sizes)]
    fr = _filled(path, batches)
    with_bodies = [(pos, size) for pos, size, _ in fr.iter_views(0)]
    headers = list(fr.batch_headers(0))
    assert [(h.position, h.size) for h in headers] == with_bodies
    assert [h.base_offset for h in headers] == list(range(len(batches)))
    fr.close()


def test_a_search_near_the_index_entry_reads_a_few_kib(tmp_path, monkeypatch):
    """A fetch finds its first batch from the index entry within index.interval.bytes (4 KiB): the search
    reads one small window, not 256 KiB of the file (it did, for every partition of every fetch)."""
    batches = [batch_at(i, value=os.urandom(1000)) for i in range(1000)]  # ~1 MiB of 1 KiB batches
    fr = _filled(tmp_path / "a.log", batches)
    start = sum(len(b) for b in batches[:500])
    read: list[int] = []
    real = os.preadv

    def counting(fd, buffers, offset, *args):
        n = real(fd, buffers, offset, *args)
        read.append(n)
        return n

    monkeypatch.setattr(os, "preadv", counting)
    found = fr.search_for_offset_with_size(503, start)
    assert found is not None and found.offset == 503
    assert sum(read) <= 8 * 1024, read
    fr.close()


def test_tiny_length_field_is_corrupt(tmp_path):
    fr = _filled(tmp_path / "a.log", [batch_at(0)])
    fr.append(b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 10)
    with pytest.raises(CorruptRecordError, match="at byte 72"):
        list(fr.batches())


@given(st.binary(max_size=300))
def test_fuzz_scan_garbage(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fz") / "g.log"
    path.write_bytes(bytes(batch_at(0)) + data)
    fr = FileRecords(path, mutable=False)
    try:
        with contextlib.suppress(CorruptRecordError):
            for _pos, b in fr.batches():
                b.is_valid()
            list(fr.batch_headers(0))
    finally:
        fr.close()
