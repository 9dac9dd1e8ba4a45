"""Large appends allocate their blocks before writing (`storage/block_allocation.py`), on real files.

The point is a kernel-side one (ext4's delayed allocation per 4 KiB block), so the tests look at what the
file system reports: FIEMAP's extent flags say whether a written range was still awaiting allocation
(DELALLOC) or already allocated, and `st_blocks` whether anything is held past the data.
"""

from __future__ import annotations

import fcntl
import os
import struct

import pytest

from kafkalite.records import build_batch
from kafkalite.storage import block_allocation
from kafkalite.storage.file_records import FileRecords

_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_EXTENT_DELALLOC = 0x4
_HEADER = struct.Struct("=QQIIII")  # start, length, flags, mapped extents, extent count, reserved
_EXTENT = struct.Struct("=QQQQQI12x")  # logical, physical, length, 2 reserved, flags, 3 reserved
_MAX_EXTENTS = 64

pytestmark = pytest.mark.skipif(not block_allocation.supported(), reason="no fallocate(2) on this platform")


def _extent_flags(path) -> list[int]:
    """The flags of each extent of `path` (FIEMAP, without a sync, so delayed allocations show)."""
    buf = bytearray(_HEADER.size + _MAX_EXTENTS * _EXTENT.size)
    _HEADER.pack_into(buf, 0, 0, 2**64 - 1, 0, 0, _MAX_EXTENTS, 0)
    with open(path, "rb") as f:
        try:
            fcntl.ioctl(f.fileno(), _FS_IOC_FIEMAP, buf)
        except OSError as e:
            pytest.skip(f"no FIEMAP on this file system: {e}")
    mapped = _HEADER.unpack_from(buf, 0)[3]
    return [_EXTENT.unpack_from(buf, _HEADER.size + i * _EXTENT.size)[5] for i in range(mapped)]


def _delayed(path) -> bool:
    return any(flags & _FIEMAP_EXTENT_DELALLOC for flags in _extent_flags(path))


def _batch_of(nbytes: int) -> bytes:
    return bytes(build_batch([(None, os.urandom(nbytes))], base_offset=0))


@pytest.fixture
def delayed_allocation(tmp_path) -> None:
    """Skip unless this file system delays allocation of a plain write (ext4 does; tmpfs does not)."""
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, b"x" * (1 << 20), 0)
    finally:
        os.close(fd)
    if not _delayed(probe):
        pytest.skip("this file system does not delay block allocation")


def test_a_large_append_is_written_into_allocated_blocks(tmp_path, delayed_allocation):
    big = _batch_of(block_allocation.MIN_BYTES + 1000)
    fr = FileRecords(tmp_path / "00000000000000000000.log")
    fr.append(big)
    assert not _delayed(fr.path), "the append took the delayed-allocation path"
    fr.close()
    assert (tmp_path / "00000000000000000000.log").read_bytes() == big


def test_a_small_append_is_left_to_the_file_system(tmp_path, delayed_allocation):
    """The control: below MIN_BYTES nothing is allocated ahead, so the same check sees delayed blocks."""
    small = _batch_of(4000)
    fr = FileRecords(tmp_path / "00000000000000000000.log")
    fr.append(small)
    assert _delayed(fr.path)
    fr.close()


def test_nothing_is_allocated_past_the_data(tmp_path):
    """Only the range being written is allocated: sizes and blocks are those of the data, append after append."""
    path = tmp_path / "00000000000000000000.log"
    fr = FileRecords(path)
    written = bytearray()
    for n in (block_allocation.MIN_BYTES + 17, 3000, 2 * block_allocation.MIN_BYTES + 4321):
        data = _batch_of(n)
        fr.append(data)
        written += data
        st = os.stat(path)
        assert st.st_size == fr.size == len(written)
        assert st.st_blocks * 512 <= -(-len(written) // 4096) * 4096 + 64 * 1024  # data blocks + extent metadata
    fr.close()
    assert path.read_bytes() == bytes(written)


def test_allocate_keeps_the_size_and_reports_what_cannot_be_allocated(tmp_path):
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        if not block_allocation.allocate(fd, 0, 1 << 20):
            pytest.skip("this file system has no fallocate")
        assert os.fstat(fd).st_size == 0  # FALLOC_FL_KEEP_SIZE
        assert os.fstat(fd).st_blocks * 512 >= 1 << 20
    finally:
        os.close(fd)
    r, w = os.pipe()
    try:
        assert block_allocation.allocate(w, 0, 1 << 20) is False  # ESPIPE: the writer stops asking
    finally:
        os.close(r)
        os.close(w)
