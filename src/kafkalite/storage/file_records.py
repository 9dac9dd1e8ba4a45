"""A segment's `.log` file (Kafka's FileRecords): batches back to back, no header, no footer.

The file has a logical size that can be smaller than its length (preallocation); everything
after the logical size is ignored. Scans read the file through a reusable window so that a batch
costs one header parse, not one system call, and hand out memoryviews into that window:
callers that keep a batch past the next step must copy it (`bytes(view)`).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from kafkalite.errors import CorruptRecordError, LogError
from kafkalite.records.batch import (
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_V2,
    PREFIX,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
)
from kafkalite.storage.names import as_path

MAX_FILE_SIZE = (1 << 31) - 1  # FileRecords refuses larger files: positions are int32 in the index
MIN_BATCH_LENGTH = 14  # a length field below this cannot frame any message format
_WINDOW = 256 * 1024
# A header-only scan starts with this much and reads 4x more at each refill, up to _WINDOW: a fetch's search
# for its start batch (within index.interval.bytes of the index entry, 4 KiB by default) reads a few KiB,
# a whole-segment scan soon reads _WINDOW at a time. Reading _WINDOW for every search made each fetched
# partition cost a zeroed 256 KiB buffer and a 256 KiB copy out of the page cache.
_HEADER_WINDOW = 8 * 1024
_SCAN_STRIDE = 31 * 1024 * 1024
_SCAN_OVERLAP = 1024 * 1024  # windows overlap so that a batch up to this size never straddles two mappings
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_FRAMING = struct.Struct(">iibI")  # length, partition leader epoch, magic, crc: bytes 8..20 of a batch
HEADER_DTYPE = np.dtype([
    ("base_offset", ">i8"), ("length", ">i4"), ("partition_leader_epoch", ">i4"), ("magic", "i1"),
    ("crc", ">u4"), ("attributes", ">i2"), ("last_offset_delta", ">i4"), ("base_timestamp", ">i8"),
    ("max_timestamp", ">i8"), ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"),
    ("records_count", ">i4"),
])
assert HEADER_DTYPE.itemsize == RECORD_BATCH_OVERHEAD
_crc_pool: ThreadPoolExecutor | None = None


def _crc_executor() -> ThreadPoolExecutor:
    """Threads that map the next windows of a scan (mmap with MAP_POPULATE drops the GIL) while the caller checksums."""
    global _crc_pool
    if _crc_pool is None:
        _crc_pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="kafkalite-crc")
    return _crc_pool


class BatchHeader(NamedTuple):
    """What a scan learns from a batch's header without opening its records."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    partition_leader_epoch: int
    magic: int
    attributes: int
    records_count: int
    producer_id: int


class ValidBatches(NamedTuple):
    """Batches a recovery scan found valid in one window: positions, sizes and all header fields as columns."""

    positions: np.ndarray  # int64 byte positions in the file
    sizes: np.ndarray  # int64 sizes including the 12-byte log overhead
    headers: np.ndarray  # HEADER_DTYPE rows, one per batch

    def header_bytes(self, i: int) -> bytes:
        return self.headers[i : i + 1].tobytes()


class LogOffsetPosition(NamedTuple):
    offset: int
    position: int
    size: int


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a `.log` file: what a read returns, ready for sendfile or a copy."""

    records: FileRecords
    position: int
    size: int

    def tobytes(self) -> bytes:
        return self.records.read(self.position, self.size)

    def __len__(self) -> int:
        return self.size


class FileRecords:
    """The `.log` file of one segment."""

    def __init__(
        self,
        path: Path | str,
        *,
        mutable: bool = True,
        preallocate: bool = False,
        init_file_size: int = 0,
    ) -> None:
        self._path = as_path(path)
        # only preallocation needs to know (a stat for each segment of every log loaded otherwise)
        existed = self._path.exists() if mutable and preallocate and init_file_size > 0 else True
        flags = (os.O_RDWR | os.O_CREAT) if mutable else os.O_RDONLY
        self._fd = os.open(self._path, flags, 0o644)
        length = os.fstat(self._fd).st_size
        if mutable and preallocate and not existed and init_file_size > 0:
            os.ftruncate(self._fd, init_file_size)
            length = 0  # a preallocated new file is logically empty
        if length > MAX_FILE_SIZE:
            os.close(self._fd)
            raise LogError(f"{self._path} is {length} bytes, larger than the maximum {MAX_FILE_SIZE}")
        self._size = length
        self.mutable = mutable

    # --- basic properties -------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def size(self) -> int:
        """Logical size in bytes: where the next append goes."""
        return self._size

    def file_length(self) -> int:
        return os.fstat(self._fd).st_size

    # --- writing ------------------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write whole batches at the logical end; returns the bytes written.

        A plain `pwrite`, as Kafka's FileChannel.write: the file system allocates the blocks at writeback.
        Allocating a large append's blocks first (`fallocate` KEEP_SIZE) saved ~0.04 CPU-s per GiB on ext4,
        but every fsync of a rolled segment then stalled the next segment's appends for 20-65 ms (`bench
        log-roll`; docs/performance.md), so it is not done (tests/test_file_records_allocation.py)."""
        n = len(data)
        size = self._size
        if size + n > MAX_FILE_SIZE:
            raise LogError(f"appending {n} bytes to {self._path} would pass the {MAX_FILE_SIZE}-byte file limit")
        written = os.pwrite(self._fd, data, size)
        if written != n:  # a short write (signal, full disk): finish it or raise
            view = memoryview(data)
            while written < n:
                written += os.pwrite(self._fd, view[written:], size + written)
        self._size = size + n
        return n

    def flush(self) -> None:
        os.fsync(self._fd)

    def truncate_to(self, target_size: int) -> int:
        """Cut the file to `target_size`; returns the bytes removed."""
        original = self._size
        if target_size > original or target_size < 0:
            raise LogError(
                f"attempt to truncate {self._path} to {target_size} bytes failed: size of the file is {original}"
            )
        if target_size < self.file_length():
            os.ftruncate(self._fd, target_size)
        self._size = target_size
        return original - target_size

    def trim(self) -> None:
        """Drop preallocated space past the logical size (on roll and close)."""
        if self.file_length() != self._size:
            os.ftruncate(self._fd, self._size)

    def close(self) -> None:
        if self._fd >= 0:
            if self.mutable:
                self.trim()
            os.close(self._fd)
            self._fd = -1

    def close_handlers(self) -> None:
        """Release the descriptor without trimming (after a rename to `.deleted`)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename_to(self, new_path: Path | str) -> None:
        new_path = Path(new_path)
        os.replace(self._path, new_path)
        self._path = new_path

    def delete_if_exists(self) -> bool:
        self.close_handlers()
        try:
            self._path.unlink()
            return True
        except FileNotFoundError:
            return False

    def last_modified_ms(self) -> int:
        return os.stat(self._path).st_mtime_ns // 1_000_000

    def set_last_modified_ms(self, ms: int) -> None:
        os.utime(self._path, ns=(ms * 1_000_000, ms * 1_000_000))

    # --- reading ------------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        out = os.pread(self._fd, size, position)
        return out

    def slice(self, position: int, size: int) -> FileSlice:
        if position < 0 or position > self._size:
            raise LogError(f"slice position {position} is outside {self._path} of size {self._size}")
        return FileSlice(self, position, max(0, min(size, self._size - position)))

    def read_batch(self, position: int, size: int) -> RecordBatch:
        return RecordBatch(self.read(position, size))

    def iter_views(
        self, start: int = 0, end: int | None = None, *, with_body: bool = True, window: int | None = None
    ) -> Iterator[tuple[int, int, memoryview]]:
        """Yield (position, size, view) per batch between start and end (default: logical size).

        `view` covers the whole batch when `with_body`, else at least its header (up to 61 bytes).
        Like Kafka's FileLogInputStream: fewer than 17 bytes left, or a batch running past `end`,
        ends the scan quietly; a length field below 14 raises CorruptRecordError. Without `window`, a
        header-only scan reads _HEADER_WINDOW first and 4x more at each refill (up to _WINDOW), a scan
        with bodies _WINDOW at a time.
        """
        if end is None:
            end = self._size
        grow = window is None and not with_body
        buf = bytearray(min(window or (_HEADER_WINDOW if grow else _WINDOW), max(end - start, 0)) or 1)
        mv = memoryview(buf)
        win_start = start
        win_len = 0
        pos = start
        fd = self._fd
        while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
            off = pos - win_start
            if off < 0 or (off + RECORD_BATCH_OVERHEAD > win_len and win_start + win_len < end):
                if grow and win_len and len(buf) < _WINDOW:  # a longer scan than one search: read further ahead
                    buf = bytearray(min(len(buf) * 4, _WINDOW))
                    mv = memoryview(buf)
                want = min(len(buf), end - pos)
                win_start, win_len, off = pos, os.preadv(fd, [mv[:want]], pos), 0
                if win_len < HEADER_SIZE_UP_TO_MAGIC:
                    return  # the file is shorter than its logical size (concurrent truncation)
            _, length = PREFIX.unpack_from(mv, off)
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"found record size {length} smaller than minimum record overhead ({MIN_BATCH_LENGTH}) "
                    f"in file {self._path} at byte {pos}"
                )
            size = length + LOG_OVERHEAD
            if pos + size > end:
                return
            need = size if with_body else min(size, RECORD_BATCH_OVERHEAD)
            if off + need > win_len:
                if need > len(buf):
                    buf = bytearray(need)
                    mv = memoryview(buf)
                want = min(max(need, len(buf)), end - pos)
                win_start, win_len, off = pos, os.preadv(fd, [mv[:want]], pos), 0
                if win_len < need:
                    return
            yield pos, size, mv[off : off + need]
            pos += size

    # a hot decoder: one pass per batch or record, kept whole on purpose
    def scan_valid(self, start: int = 0, *, stride: int | None = None) -> Iterator[ValidBatches]:  # noqa: C901
        """The recovery scan: the valid batches from `start`, one `ValidBatches` per mapped window.

        A batch is valid when it frames (length >= 49), fits before the logical end, is v2 and passes
        its CRC32C. The file is mapped (read-only, page tables populated by the kernel) in windows
        that a helper thread maps ahead, so the data is read once, by the checksum, instead of being
        copied out of the page cache first. The per-batch Python work is one 13-byte unpack and one
        CRC call; every other header field is gathered afterwards for the whole window with numpy.
        At the first bad batch the good ones before it are yielded, then CorruptRecordError is raised.
        """
        end = min(self._size, self.file_length())  # never map past the file: a stray access would SIGBUS
        if end - start < HEADER_SIZE_UP_TO_MAGIC:
            if self._size - start > 0:
                raise CorruptRecordError(f"{self._size - start} trailing bytes at byte {start} of {self._path}")
            return
        granule = mmap.ALLOCATIONGRANULARITY
        stride = stride or _SCAN_STRIDE
        stride = max(stride - stride % granule, granule)
        window = stride + max(_SCAN_OVERLAP, RECORD_BATCH_OVERHEAD)  # a header never crosses a mapping's end
        first = start - start % granule
        bounds = [*range(first, end, stride), end]  # window k maps [bounds[k], bounds[k] + window)
        fd = self._fd

        def map_window(k: int) -> mmap.mmap:
            at = bounds[k]
            return mmap.mmap(fd, min(window, end - at), flags=mmap.MAP_SHARED | _MAP_POPULATE,
                             prot=mmap.PROT_READ, offset=at)

        ahead = len(bounds) > 2
        executor = _crc_executor() if ahead else None
        futures = {1: executor.submit(map_window, 1)} if executor is not None else {}
        pos = start
        failure: CorruptRecordError | None = None
        unpack = _FRAMING.unpack_from
        try:
            for k in range(len(bounds) - 1):
                mapping = futures.pop(k).result() if k in futures else None
                if executor is not None and k + 2 < len(bounds) - 1:
                    futures[k + 2] = executor.submit(map_window, k + 2)
                limit = bounds[k + 1]
                if pos >= limit:
                    if mapping is not None:
                        mapping.close()
                    continue  # a batch larger than the overlap carried the scan past this window
                if mapping is None:
                    mapping = map_window(k)
                base = bounds[k]
                view = memoryview(mapping)
                found: list[int] = []
                append = found.append
                # relative to the mapping: where a whole header still fits, and where batches may end
                rel, stop = pos - base, min(limit, end - RECORD_BATCH_OVERHEAD + 1) - base
                fits = min(end, base + len(mapping)) - base
                try:
                    while rel < stop:
                        length, _epoch, magic, stored = unpack(view, rel + 8)
                        after = rel + length + LOG_OVERHEAD
                        if after > fits or length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or magic != MAGIC_V2:
                            failure = self._check_unusual_batch(base + rel, length + LOG_OVERHEAD, magic, stored, end)
                            if failure is not None:
                                break
                        elif crc32c(view[rel + 21 : after], 0, 0) != stored:
                            failure = self._crc_failure(base + rel, stored, crc32c(view[rel + 21 : after]))
                            break
                        append(rel)
                        rel = after
                    pos = base + rel
                    if failure is None and pos < limit and pos < end:
                        failure = CorruptRecordError(f"{self._size - pos} trailing bytes at byte {pos} of {self._path}")
                    if found:
                        yield self._gather_headers(view, base, found, rel)
                finally:
                    view.release()
                    mapping.close()
                if failure is not None:
                    break
            if failure is None and pos < self._size:
                failure = CorruptRecordError(f"{self._size - pos} trailing bytes at byte {pos} of {self._path}")
            if failure is not None:
                raise failure
        finally:
            for fut in futures.values():
                fut.result().close()

    def _check_unusual_batch(self, pos: int, size: int, magic: int, stored: int, end: int) -> CorruptRecordError | None:
        """The scan's slow path: say what is wrong with a batch, or check one too large for the mapping."""
        if size < RECORD_BATCH_OVERHEAD:
            return CorruptRecordError(f"record batch size {size} at byte {pos} of {self._path} "
                                      f"is below the minimum {RECORD_BATCH_OVERHEAD}")
        if pos + size > end:
            return CorruptRecordError(f"{end - pos} bytes at byte {pos} of {self._path} "
                                      "do not form a complete record batch")
        if magic != MAGIC_V2:
            return CorruptRecordError(f"unsupported magic {magic} at byte {pos} of {self._path}")
        crc = crc32c(self._pread_exact(pos + 21, size - 21), 0, 1)  # larger than the windows' overlap
        return None if crc == stored else self._crc_failure(pos, stored, crc)

    def _crc_failure(self, pos: int, stored: int, computed: int) -> CorruptRecordError:
        return CorruptRecordError(f"record batch at byte {pos} of {self._path} fails its CRC32C check "
                                  f"(stored {stored}, computed {computed})")

    @staticmethod
    def _gather_headers(view: memoryview, base: int, found: list[int], next_rel: int) -> ValidBatches:
        """Every header field of the batches found in a window, in one numpy gather (batches may run
        past the window's mapping, but their 61-byte headers never do)."""
        relative = np.array(found, dtype=np.int64)
        sizes = np.empty_like(relative)
        sizes[:-1] = relative[1:] - relative[:-1]
        sizes[-1] = next_rel - relative[-1]
        # a header starts at every byte: overlapping 61-byte rows, so the gather copies one row per batch
        headers_at = np.ndarray((len(view) - RECORD_BATCH_OVERHEAD + 1,), HEADER_DTYPE, view, 0, (1,))
        rows = headers_at[relative]
        del headers_at  # the mapping is closed right after: no buffer export may outlive it
        return ValidBatches(relative + base, sizes, rows)

    def _pread_exact(self, position: int, size: int) -> bytes:
        data = os.pread(self._fd, size, position)
        if len(data) != size:
            raise CorruptRecordError(f"{self._path} ends at byte {position + len(data)}, inside a batch "
                                     f"expected to span {position}..{position + size}")
        return data

    def batch_headers(self, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches from `start`; non-v2 batches are refused with CorruptRecordError."""
        for pos, size, view in self.iter_views(start, end, with_body=False):
            if size < RECORD_BATCH_OVERHEAD or view[16] != MAGIC_V2:
                raise CorruptRecordError(
                    f"unsupported batch at byte {pos} of {self._path}: magic {view[16]}, size {size} "
                    "(only the v2 record format is read)"
                )
            (base, _l, epoch, magic, _crc, attrs, lod, _bts, max_ts, pid, _pe, _bs, count) = HEADER.unpack_from(view)
            yield BatchHeader(pos, size, base, base + lod, max_ts, epoch, magic, attrs, count, pid)

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, RecordBatch]]:
        """(position, batch) pairs; each batch owns a copy of its bytes, so it may be kept."""
        for pos, _size, view in self.iter_views(start, end):
            yield pos, RecordBatch(bytes(view))

    def search_for_offset_with_size(self, target_offset: int, starting_position: int) -> LogOffsetPosition | None:
        """First batch from `starting_position` whose last offset is >= target: (its last offset, position, size)."""
        for h in self.batch_headers(starting_position):
            if h.last_offset >= target_offset:
                return LogOffsetPosition(h.last_offset, h.position, h.size)
        return None

    def search_for_timestamp(
        self, target_timestamp: int, starting_position: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """First record at or after `starting_offset` with timestamp >= target, scanning from a position."""
        for h in self.batch_headers(starting_position):
            if h.max_timestamp >= target_timestamp:
                batch = self.read_batch(h.position, h.size)
                for r in batch.records():
                    if r.timestamp >= target_timestamp and r.offset >= starting_offset:
                        epoch = batch.partition_leader_epoch
                        return TimestampAndOffset(r.timestamp, r.offset, epoch if epoch >= 0 else None)
        return None

    def largest_timestamp_after(self, starting_position: int) -> tuple[int, int]:
        """(max timestamp, last offset of the batch carrying it) over the batches from a position."""
        max_ts, offset_of_max = -1, -1
        for h in self.batch_headers(starting_position):
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.last_offset
        return max_ts, offset_of_max

    def __repr__(self) -> str:
        return f"FileRecords({self._path}, size={self._size})"
