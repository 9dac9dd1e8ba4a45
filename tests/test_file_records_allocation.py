"""Appends leave block allocation to the file system (delayed allocation on ext4), as Kafka's do.

Allocating a large append's blocks first (`fallocate` with FALLOC_FL_KEEP_SIZE) cost less CPU per byte, but
with allocated-but-unwritten extents every fsync of a rolled segment stalled the appends to the next segment
for 20-65 ms (`python -m bench log-roll`; docs/performance.md, "Appends across rolls"). The stall is a timing,
so this checks its cause instead: what FIEMAP reports for freshly appended data, without a sync.
"""

from __future__ import annotations

import fcntl
import os
import struct

import pytest

from kafkalite.records import build_batch
from kafkalite.storage.file_records import FileRecords

_FS_IOC_FIEMAP = 0xC020660B
_FIEMAP_EXTENT_DELALLOC = 0x4
_FIEMAP_EXTENT_UNWRITTEN = 0x800
_HEADER = struct.Struct("=QQIIII")  # start, length, flags, mapped extents, extent count, reserved
_EXTENT = struct.Struct("=QQQQQI12x")  # logical, physical, length, 2 reserved, flags, 3 reserved
_MAX_EXTENTS = 64


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


@pytest.fixture
def delayed_allocation(tmp_path) -> None:
    """Skip unless this file system delays allocation of a plain write (ext4 does; tmpfs does not)."""
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, b"x" * (1 << 20), 0)
    finally:
        os.close(fd)
    if not any(flags & _FIEMAP_EXTENT_DELALLOC for flags in _extent_flags(probe)):
        pytest.skip("this file system does not delay block allocation")


@pytest.mark.parametrize("nbytes", [4000, 300_000, 1 << 20, 4 << 20])
def test_an_append_of_any_size_is_left_to_delayed_allocation(tmp_path, delayed_allocation, nbytes):
    data = bytes(build_batch([(None, os.urandom(nbytes))], base_offset=0))
    fr = FileRecords(tmp_path / "00000000000000000000.log")
    fr.append(data)
    flags = _extent_flags(fr.path)
    assert flags and all(f & _FIEMAP_EXTENT_DELALLOC for f in flags), [hex(f) for f in flags]
    assert not any(f & _FIEMAP_EXTENT_UNWRITTEN for f in flags), "blocks were allocated before the write"
    st = os.stat(fr.path)
    assert st.st_size == fr.size == len(data)
    fr.close()
    assert (tmp_path / "00000000000000000000.log").read_bytes() == data
