"""What the offset and time indexes share (Kafka's AbstractIndex): a preallocated, memory-mapped file
of fixed-size big-endian entries.

Preallocation makes an append a plain store into the mapping, never a file growth, at the price
that the file length no longer says how many entries are real. Kafka settles that by trusting the
whole file when it opens an existing one and by trimming the file to its entries on roll and
close; this module keeps exactly that rule, because Kafka reads our files and we read Kafka's.

Lookups never search the mapping. The first search loads each field of every entry into a native
`array` (4 or 8 bytes an entry, so a full 10 MiB index costs about as much memory again), which
`bisect` then searches at C speed; appends and truncations keep the arrays in step. Opening an
index therefore costs one mmap and no scan.

Mutations are not locked: the owner (the segment, under the log's lock) serialises them, as
Kafka's callers serialise through the log lock too.

A mapping holds no file descriptor (`FileMapping`): Python's `mmap` keeps a duplicate of the
descriptor it was given for as long as the mapping lives, which made every partition hold three
(its `.log` and two indexes) where Kafka holds one, and brokers with many partitions run into the
descriptor limit. The descriptor is opened only to map, resize or truncate, and closed right after.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
import sys
import threading
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import numpy as np

from kafkalite.errors import CorruptIndexError, IndexOffsetOverflowError
from kafkalite.storage.names import as_path

MAX_RELATIVE_OFFSET = (1 << 31) - 1
_TYPECODE_BY_WIDTH = {4: "i", 8: "q"}


def round_down(number: int, factor: int) -> int:
    """The largest multiple of `factor` that is <= `number` (Kafka's roundDownToExactMultiple)."""
    return factor * (number // factor)


def _column(raw: bytes, entry_size: int, start: int, width: int) -> array:
    """One big-endian field of every entry in `raw`, as a native array.

    The field is gathered with `width` strided slice copies, so even a full index loads in tens of
    milliseconds without a per-entry Python loop.
    """
    count = len(raw) // entry_size
    packed = bytearray(count * width)
    for k in range(width):
        packed[k::width] = raw[start + k : count * entry_size : entry_size]
    column = array(_TYPECODE_BY_WIDTH[width], packed)
    if sys.byteorder == "little":
        column.byteswap()
    return column


def _load_libc() -> ctypes.CDLL | None:
    """libc's mmap, munmap and msync, for mappings that keep no descriptor; None where unavailable."""
    if sys.version_info >= (3, 13) or not sys.platform.startswith("linux"):
        return None  # 3.13's mmap(trackfd=False) does it; elsewhere plain mmap
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int64]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _load_libc()
# Mapping an index at its first use happens once per index; the locks that make it once are shared by stripes,
# not one for all: a restart after kill -9 maps thousands of indexes from eight threads, and one lock, held
# across the open and mmap system calls (and so across waits for the GIL), made them queue for each other.
_LAZY_MAP_LOCKS = tuple(threading.Lock() for _ in range(64))
_MAP_FAILED = ctypes.c_void_p(-1).value
_MS_SYNC = 4  # Linux


class FileMapping:
    """A shared mapping of a whole file that, unlike `mmap.mmap` before Python 3.13, keeps no duplicate
    of the file descriptor it was made from (the caller closes that right away).

    Below 3.13 it is made with libc's mmap through ctypes and read and written through a memoryview.
    Such memory is unmapped for good by `close`, so every access takes a lock and checks that the
    mapping is still open: a stale reader gets ValueError, as from a closed `mmap`, never a crash.

    The buffer's type tells the two kinds apart: an `mmap.mmap` (3.13's trackfd=False, or a plain
    mmap where libc is unavailable) or a memoryview over libc's mapping at `_addr`; None once closed.
    """

    __slots__ = ("_addr", "_buf", "_lock", "_size")

    def __init__(self, fd: int, size: int, writable: bool) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._addr: int | None = None
        self._buf: memoryview | mmap.mmap | None
        if _LIBC is None:
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            extra = {"trackfd": False} if sys.version_info >= (3, 13) else {}
            self._buf = mmap.mmap(fd, size, access=access, **extra)
            if hasattr(mmap, "MADV_RANDOM"):
                self._buf.madvise(mmap.MADV_RANDOM)
            return
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        addr = _LIBC.mmap(None, size, prot, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {size} bytes failed: {os.strerror(err)}")
        self._addr = addr
        # No read-around on faults: an index is read by binary search and written at its end. With the default
        # readahead the first write into a preallocated (sparse) index cost ~3 ms of kernel time filling
        # holes around it (0.02 ms without): the first append to each new partition, and the time index entry
        # recovery writes in each partition after kill -9 (3 s of 10 for 1,000 partitions).
        _LIBC.madvise(addr, size, mmap.MADV_RANDOM)
        view = memoryview((ctypes.c_char * size).from_address(addr)).cast("B")
        self._buf = view if writable else view.toreadonly()

    def _open_buffer(self) -> memoryview | mmap.mmap:
        buf = self._buf
        if buf is None:
            raise ValueError("mmap closed or invalid")
        return buf

    def __len__(self) -> int:
        return self._size

    def unpack_from(self, layout: struct.Struct, offset: int) -> tuple:
        with self._lock:
            return layout.unpack_from(self._open_buffer(), offset)

    def pack_into(self, layout: struct.Struct, offset: int, *values: int) -> None:
        with self._lock:
            layout.pack_into(self._open_buffer(), offset, *values)

    def read(self, start: int, end: int) -> bytes:
        with self._lock:
            return bytes(self._open_buffer()[start:end])

    def write(self, start: int, data: bytes) -> None:
        with self._lock:
            self._open_buffer()[start : start + len(data)] = data

    def flush(self) -> None:
        with self._lock:
            buf = self._open_buffer()
            if isinstance(buf, mmap.mmap):
                buf.flush()
            elif _LIBC is not None and _LIBC.msync(self._addr, self._size, _MS_SYNC) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"msync failed: {os.strerror(err)}")

    def close(self) -> None:
        with self._lock:
            buf, self._buf = self._buf, None
            if buf is None:
                return
            if isinstance(buf, mmap.mmap):
                buf.close()
            else:
                buf.release()
                assert _LIBC is not None  # a memoryview mapping is made only through libc (__init__)
                _LIBC.munmap(self._addr, self._size)
                self._addr = None


_PEEK_BYTES = 8192  # an index of up to ~1,000 entries (most active segments' after a clean shutdown) in one read


def peek_file(path: Path, entry_size: int) -> tuple[int, bytes, bytes]:
    """(length, first entry, last entry) of an index file, read without mapping it.

    The load-time checks use this, so that loading thousands of segments maps none of their
    indexes (they are mapped on first use, like Kafka's LazyIndex). Entries are b"" when the file
    holds no whole entry; the last entry is the last whole one.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        head = os.pread(fd, _PEEK_BYTES, 0)
        if len(head) < _PEEK_BYTES:  # a read of a regular file comes back short only at its end: the whole file
            length = len(head)
            whole = round_down(length, entry_size)
            return (length, b"", b"") if whole == 0 else (length, head[:entry_size], head[whole - entry_size:whole])
        length = os.fstat(fd).st_size
        return length, head[:entry_size], os.pread(fd, entry_size, round_down(length, entry_size) - entry_size)
    finally:
        os.close(fd)


def check_length(path: Path, length: int, entry_size: int) -> None:
    if length % entry_size != 0:
        raise CorruptIndexError(
            f"index file {path} is corrupt, found {length} bytes which is not a multiple of {entry_size}"
        )


class IndexBase:
    """A fixed-entry index file. Subclasses give the entry layout and keep their `last` state."""

    entry_size: ClassVar[int]
    # layout of one entry: a two-field big-endian struct, and the byte offset and width of each field
    _entry: ClassVar[struct.Struct]
    _fields: ClassVar[tuple[tuple[int, int], tuple[int, int]]]

    def __init__(
        self, path: Path | str, base_offset: int, max_index_size: int = 10485760, writable: bool = True,
    ) -> None:
        self._path = as_path(path)
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        self._mm: FileMapping | None = None
        self._length = 0
        self._closed = False
        self._dirty = False  # entries stored (through a mapping or a pwrite), not yet synced (see `flush`)
        self._peeking = False  # `_read` may pread instead of mapping (see `_reading_through`)
        self._peek_fd: int | None = None  # the descriptor `_read` preads from while peeking, when one is open
        self._cols: tuple[array, array] | None = None
        created = False
        if writable:
            # the file exists when a log is loaded (most opens), not when a segment is rolled
            try:
                fd = os.open(self._path, os.O_RDWR)
            except FileNotFoundError:
                try:
                    fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                    created = True
                except FileExistsError:  # created meanwhile by someone else: it exists after all
                    fd = os.open(self._path, os.O_RDWR)
        else:
            fd = os.open(self._path, os.O_RDONLY)
        try:
            if created:
                if max_index_size < self.entry_size:
                    os.unlink(self._path)
                    raise ValueError(f"invalid max index size {max_index_size} for {self._path}")
                os.ftruncate(fd, round_down(max_index_size, self.entry_size))
            self._length = os.fstat(fd).st_size
            # a new file holds no entries; an existing one is trusted whole (hence the trim on roll/close)
            self._entries = 0 if created else self.max_entries
            with self._reading_through(fd):
                self._refresh_last()
        finally:
            os.close(fd)

    # --- subclass hooks -------------------------------------------------------------------------

    def _refresh_last(self) -> None:
        """Re-read whatever the subclass caches about its last entry after the entry count changed."""
        raise NotImplementedError

    def sanity_check(self) -> None:
        """Kafka's cheap structural checks of the entries; CorruptIndexError means: rebuild from the `.log`."""
        raise NotImplementedError

    @contextmanager
    def _reading_through(self, fd: int | None = None) -> Iterator[None]:
        """Reads of entries (`_read`) inside are preads, not a mapping, so that idle partitions keep none;
        `fd`: the file, already open (else each read opens it)."""
        self._peeking = True
        self._peek_fd = fd
        try:
            yield
        finally:
            self._peeking = False
            self._peek_fd = None

    # --- properties ------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.entry_size

    @property
    def length(self) -> int:
        """The file's length in bytes, preallocated tail included."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes holding real entries."""
        return self._entries * self.entry_size

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= MAX_RELATIVE_OFFSET

    # --- entries ---------------------------------------------------------------------------------

    def _mapping(self) -> FileMapping:
        """The mapping, for code that reads or writes entries, made at the first such use: a broker with
        thousands of idle partitions then maps none of their (empty, preallocated) active indexes, which
        saves two mmaps and about 2 KiB each. After close this raises ValueError, as a closed mapping does."""
        mm = self._mm
        if mm is None:
            # a fetch's lookup and an append may both come first: map once (objects are 16-byte aligned)
            with _LAZY_MAP_LOCKS[(id(self) >> 4) % len(_LAZY_MAP_LOCKS)]:
                if self._mm is None:
                    if self._closed or self._length == 0:
                        raise ValueError(f"index {self._path} is closed")
                    fd = os.open(self._path, os.O_RDWR if self.writable else os.O_RDONLY)
                    try:
                        self._map(fd)
                    finally:
                        os.close(fd)
                mm = self._mm
                assert mm is not None
        return mm

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= MAX_RELATIVE_OFFSET:
            raise IndexOffsetOverflowError(f"integer overflow for offset {offset} ({self._path})")
        return relative

    def _read(self, n: int) -> tuple[int, int]:
        if not 0 <= n < self._entries:
            raise IndexError(f"attempt to fetch entry {n} from index {self._path}, which has {self._entries} entries")
        if self._peeking and self._mm is None and not self._closed:
            # the last entry of an index not mapped yet, read when it is opened or resized: a pread, so that
            # idle partitions keep no mapping (any other read maps the index, once)
            fd = self._peek_fd if self._peek_fd is not None else os.open(self._path, os.O_RDONLY)
            try:
                raw = os.pread(fd, self.entry_size, n * self.entry_size)
            finally:
                if fd != self._peek_fd:
                    os.close(fd)
            if len(raw) == self.entry_size:
                return self._entry.unpack(raw)
        return self._mapping().unpack_from(self._entry, n * self.entry_size)

    def _write(self, first: int, second: int) -> None:
        """Store one entry in the next free slot; the caller has checked room and order."""
        self._mapping().pack_into(self._entry, self._entries * self.entry_size, first, second)
        self._dirty = True
        cols = self._cols
        if cols is not None:
            cols[0].append(first)
            cols[1].append(second)
        self._entries += 1

    def release_cache(self) -> None:
        """Drop the in-memory columns; the next lookup reloads them. Inactive segments call this so
        that thousands of old segments do not keep their indexes in memory twice."""
        self._cols = None

    def _relative_many(self, offsets: np.ndarray) -> np.ndarray:
        relative = offsets - self.base_offset
        if len(relative) and (int(relative.min()) < 0 or int(relative.max()) > MAX_RELATIVE_OFFSET):
            bad = int(offsets[(relative < 0) | (relative > MAX_RELATIVE_OFFSET)][0])
            raise IndexOffsetOverflowError(f"integer overflow for offset {bad} ({self._path})")
        return relative

    def _write_many(self, firsts: np.ndarray, seconds: np.ndarray) -> int:
        """Store entries in bulk (recovery rebuilds whole indexes): one copy (into the mapping, or one `pwrite`).

        Entries that do not fit are dropped: an index only speeds lookups up, so a short index costs
        a longer scan, never a wrong answer. Returns how many were written.
        """
        n = min(len(firsts), self.max_entries - self._entries)
        if n <= 0:
            return 0
        (_, width0), (_, width1) = self._fields
        rows = np.empty(n, dtype=[("first", f">i{width0}"), ("second", f">i{width1}")])
        rows["first"] = firsts[:n]
        rows["second"] = seconds[:n]
        at = self._entries * self.entry_size
        data = rows.tobytes()
        fd = None
        if self._mm is None and not self._closed:
            # not mapped yet (a recovery rebuilding an idle partition's index): written, not mapped, so that a
            # restart recovering thousands of partitions maps none (an mmap, page faults and a munmap each) and
            # their pages stay out of the broker's RSS. A later mapping sees the same page cache.
            fd = os.open(self._path, os.O_RDWR)
        try:
            if fd is None:
                self._mapping().write(at, data)
            elif os.pwrite(fd, data, at) != len(data):
                raise OSError(errno.ENOSPC, f"short write to index {self._path}")
            self._dirty = True
            if self._cols is not None:
                self._cols[0].extend(firsts[:n].tolist())
                self._cols[1].extend(seconds[:n].tolist())
            self._entries += n
            with self._reading_through(fd):
                self._refresh_last()
        finally:
            if fd is not None:
                os.close(fd)
        return n

    def _columns(self) -> tuple[array, array]:
        """Both fields of every entry as native arrays, loaded on first use and kept in step afterwards."""
        if self._cols is None:
            n = self._entries
            raw = self._mapping().read(0, n * self.entry_size) if n else b""
            (start0, width0), (start1, width1) = self._fields
            self._cols = (
                _column(raw, self.entry_size, start0, width0),
                _column(raw, self.entry_size, start1, width1),
            )
        return self._cols

    def _truncate_to_entries(self, n: int) -> None:
        """Forget entries from slot `n` on. Their bytes stay until overwritten or trimmed, as in Kafka."""
        self._entries = n
        if self._cols is not None:
            del self._cols[0][n:]
            del self._cols[1][n:]
        self._refresh_last()

    def truncate(self) -> None:
        """Remove every entry."""
        self._truncate_to_entries(0)

    def _check_length(self) -> None:
        check_length(self._path, self._length, self.entry_size)

    # --- file lifecycle --------------------------------------------------------------------------

    def _map(self, fd: int) -> None:
        self._length = os.fstat(fd).st_size
        # mmap refuses an empty file; such an index simply has no slots (and is therefore full)
        if self._length == 0:
            self._mm = None
        else:
            self._mm = FileMapping(fd, self._length, self.writable)

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def resize(self, new_size: int) -> bool:
        """Set the file length to `new_size` rounded down to whole entries; returns whether it changed.

        Entries are kept. Kafka fails when the new size cannot hold them; here the entries that no
        longer fit are dropped instead, which only makes lookups coarser (an index is a hint over
        the `.log`, never the data itself).
        """
        size = round_down(new_size, self.entry_size)
        if size == self._length:
            return False
        self._unmap()  # mapped again at the next use of an entry (`_mapping`)
        fd = os.open(self._path, os.O_RDWR)
        try:
            self._set_length(fd, size)
        finally:
            os.close(fd)
        return True

    def _set_length(self, fd: int, size: int) -> None:
        if size == self._length:
            return
        os.ftruncate(fd, size)
        self._length = size  # what a successful ftruncate leaves, exactly
        if self._entries > self.max_entries:
            self._truncate_to_entries(self.max_entries)
        # otherwise every entry is still there, the last one too: nothing to read again

    def trim_to_valid_size(self) -> None:
        """Cut the preallocated tail, so that reopening the file finds exactly these entries."""
        self.resize(self._entries * self.entry_size)

    def reset(self) -> None:
        """Empty the index and give it its full preallocated size again (before a rebuild)."""
        self.truncate()
        self.resize(self.max_index_size)

    def flush(self) -> None:
        """Sync the entries to disk: through the mapping, or, when the entries were written with `pwrite` (a
        rebuild) or through an earlier mapping unmapped since (a resize), with an fsync of the file (same pages)."""
        if self._mm is not None:
            self._mm.flush()
        elif self._dirty and not self._closed:
            fd = os.open(self._path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty = False

    def close(self) -> None:
        """Release the mapping. This does not trim: call `trim_to_valid_size` first when the file is final."""
        self._closed = True
        self._unmap()

    def delete_if_exists(self) -> bool:
        self._closed = True
        self._unmap()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, new_path: Path | str) -> None:
        """Move the file; the mapping stays valid. The new path is taken even if the move fails, like Kafka."""
        try:
            os.replace(self._path, new_path)
        finally:
            self._path = Path(new_path)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={self._path}, base_offset={self.base_offset}, "
            f"entries={self._entries}, max_entries={self.max_entries})"
        )
