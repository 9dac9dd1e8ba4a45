"""Starting the disk write of a segment's new data while it is appended (`sync_file_range(2)` with
SYNC_FILE_RANGE_WRITE), on a thread of its own.

Why: a roll schedules the fsync of the segment it closes (as Kafka does). With the page cache holding the whole
segment dirty (256 MiB-1 GiB), that fsync writes it all at once, and on ext4 the journal commit that follows
holds up every other write to the file system that needs a journal handle, such as the next appends to the new
segment: a follower catching up measured three or four stalls of 50-160 ms per GiB, one after each roll (a third
of the whole catch-up), and a leader stalls its produce requests the same way. Starting the write-out of each
`KICK_BYTES` as they are appended spreads it over the segment's life, so the fsync at the roll finds little left.

Nothing about durability changes: SYNC_FILE_RANGE_WRITE only starts writes (no metadata, no wait); what is
durable is still what a flush (fsync) made so. The call may block while the device's queue is full, which is why
it runs here and not on the appending thread: a produce burst larger than the disk can take is still absorbed
by the page cache, and the kicks behind it merge into fewer, larger ranges. Where the call does not exist (not
Linux) nothing is started and the fsync does it all, as before. Kafka leaves this to the OS's flusher threads;
docs/design.md (deviations) says why kafkalite does not.
"""

from __future__ import annotations

import ctypes
import logging
import queue
import sys
import threading
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

KICK_BYTES = 16 * 1024 * 1024
"""A segment's appended bytes not yet handed to the disk that make the next append ask for their write-out."""

_SYNC_FILE_RANGE_WRITE = 2


class Kickable(Protocol):
    """What the writeback thread needs of a file (`FileRecords`): under `writeback_lock`, its descriptor (or -1
    once closed: the descriptor may then belong to another file) and the range to write out."""

    writeback_lock: threading.Lock | None

    def writeback_range(self) -> tuple[int, int, int]:
        """(fd, start, end) of the bytes appended since the last kick, marking them kicked; fd -1 when closed."""
        ...


def _load() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range  # (ctypes drops the GIL during the call)
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _load()
_queue: queue.SimpleQueue[Kickable] | None = None
_start_lock = threading.Lock()


def supported() -> bool:
    return _SYNC_FILE_RANGE is not None


def kick(f: Kickable) -> None:
    """Ask the writeback thread to start writing out what `f` appended since its last kick (returns at once)."""
    global _queue
    if _queue is None:
        with _start_lock:
            if _queue is None:
                q: queue.SimpleQueue[Kickable] = queue.SimpleQueue()
                threading.Thread(target=_run, args=(q,), name="log-writeback", daemon=True).start()
                _queue = q
    _queue.put(f)


def _run(q: queue.SimpleQueue[Kickable]) -> None:
    assert _SYNC_FILE_RANGE is not None
    while True:
        f = q.get()
        lock = f.writeback_lock
        assert lock is not None  # set before the kick
        with lock:  # the file cannot close (and its descriptor be reused) meanwhile
            fd, start, end = f.writeback_range()
            if fd < 0 or end <= start:
                continue
            if _SYNC_FILE_RANGE(fd, start, end - start, _SYNC_FILE_RANGE_WRITE) != 0:
                # only a hint: the fsync at the roll writes whatever this did not
                log.debug("sync_file_range on fd %d failed: errno %d", fd, ctypes.get_errno())
