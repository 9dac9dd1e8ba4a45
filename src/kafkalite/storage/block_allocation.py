"""Allocating a large append's disk blocks before writing it (`fallocate(2)` with FALLOC_FL_KEEP_SIZE).

Why: on ext4 an append past the end of a file takes the delayed-allocation path for every 4 KiB block it
adds (space reservation, quota, an extent-status entry per block). A produce or replication append of
~1 MiB spent about a quarter of its `pwrite` time there. Allocating the range first with one `fallocate`
turns those blocks into an allocated (unwritten) extent, and the write then only copies into the page
cache: measured on this machine's ext4, 1 MiB appends cost 0.23 -> 0.17 CPU-s per GiB (256 KiB appends
0.28 -> 0.24; below ~64 KiB the extra system call costs more than it saves, hence `MIN_BYTES`).

Nothing on disk differs: FALLOC_FL_KEEP_SIZE never changes the file's size, and only the range about to
be written is allocated, so no block is reserved past the data (a crash between the two calls leaves at
most that one range allocated past the end, until the segment is truncated or deleted). Where the call is
missing or the file system does not support it, `allocate` returns False and that file writes as before.
"""

from __future__ import annotations

import ctypes
import errno
import sys
from collections.abc import Callable

MIN_BYTES = 256 * 1024
"""Appends at least this long get their blocks allocated first (measured break-even ~64 KiB)."""

_FALLOC_FL_KEEP_SIZE = 1
_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV, errno.ESPIPE})


def _load_fallocate() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols, libc's among them
        # fallocate64 takes a 64-bit off_t everywhere; plain fallocate only where off_t is 64-bit already
        fn = getattr(libc, "fallocate64", None)
        if fn is None and ctypes.sizeof(ctypes.c_long) == 8:
            fn = libc.fallocate
    except (OSError, AttributeError):
        return None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fn.restype = ctypes.c_int
    return fn


_FALLOCATE = _load_fallocate()


def supported() -> bool:
    """Whether this platform has fallocate(2) at all."""
    return _FALLOCATE is not None


def allocate(fd: int, offset: int, length: int) -> bool:
    """Allocate `length` bytes of `fd` from `offset` without changing its size.

    Returns False when the file system cannot (the caller stops asking for this file). Any other failure
    (ENOSPC, EINTR, ...) is left to the write that follows, which reports it as it always did."""
    if _FALLOCATE is None:
        return False
    if _FALLOCATE(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    return ctypes.get_errno() not in _UNSUPPORTED
