"""Read-only access to one partition directory, safe while another process writes to it.

The Spark reader runs in executor processes next to a possibly live writer (a broker, or a
`LogManager` in an application), so nothing here takes the directory lock, opens a file for
writing, or runs recovery. Files are opened read-only (`FileRecords(mutable=False)`), and every
scan tolerates what a live or crashed writer leaves at the tail: a half-written batch, the zeros
of a preallocated segment, a preallocated index whose unused slots read as zeros.

Offsets are found with the segment's offset index, read from its valid prefix only. Offsets by
timestamp are not looked up here: the embedded backend asks the storage layer's read-only Log, as the
broker does, so the two modes cannot answer differently.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from crc32c import crc32c

from kafkalite.records.batch import HEADER, LOG_OVERHEAD, MAGIC_V2, PREFIX, RECORD_BATCH_OVERHEAD
from kafkalite.spark.arrow_decode import RawChunk
from kafkalite.storage import names
from kafkalite.storage.file_records import FileRecords
from kafkalite.storage.read_only import OFFSET_ENTRY, read_index_entries

CHUNK_BYTES = 8 << 20  # a chunk this size stays in the last-level cache while it is checked, walked, decoded
_SCAN_WINDOW = 256 << 10
_MIN_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
_INT32 = struct.Struct(">i")
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class Segment:
    """A `<base offset>.log` file of a partition and the paths of its indexes."""

    base_offset: int
    path: Path

    @property
    def offset_index(self) -> Path:
        return names.offset_index_file(self.path.parent, self.base_offset)


def list_segments(partition_dir: Path) -> list[Segment]:
    """The live segments of a partition, by base offset; `.deleted`, `.cleaned`, `.swap` are not."""
    found = []
    try:
        entries = os.listdir(partition_dir)
    except FileNotFoundError:
        return []
    for name in entries:
        if not name.endswith(names.LOG_SUFFIX) or name.count(".") != 1:
            continue
        try:
            found.append(Segment(names.offset_from_file_name(name), partition_dir / name))
        except ValueError:
            continue
    found.sort(key=lambda s: s.base_offset)
    return found


# --- indexes -----------------------------------------------------------------------------------


# Index files are read (copied) rather than mapped: a broker may trim a live index on a segment roll
# while a task reads it, and a truncated mapping kills the worker with SIGBUS, where a read just sees
# the shorter file.


def index_position(segment: Segment, offset: int) -> int:
    """A batch boundary at or before `offset` in the segment: where a scan for it may start."""
    entries = read_index_entries(segment.offset_index, OFFSET_ENTRY)
    relative = min(max(offset - segment.base_offset, -1), _INT32_MAX)
    slot = int(np.searchsorted(entries["relative_offset"], relative, side="right")) - 1
    return int(entries["position"][slot]) if slot >= 0 else 0


# --- scanning ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TailScan:
    """Where the readable data of a segment ends: after the last complete, valid batch."""

    next_offset: int | None  # last offset + 1 of that batch; None when no batch was seen
    position: int


def scan_tail(segment: Segment, position: int, *, trust_crc_failures: bool = False) -> TailScan:
    """Scan batch headers from a batch boundary to the end of the file, checking each batch's CRC.

    Stops quietly at the first batch that is cut short, is not v2 or has an impossible length:
    that is where a writer is writing now, or where a crashed one stopped, and what recovery would
    truncate. Batches failing their CRC at the very end are left out too (a torn write, or one in
    progress), unless `trust_crc_failures` (a dir shut down cleanly): then they count, and reading
    them reports the corruption. A bad CRC followed by good batches is corruption, never a tail.
    """
    records = FileRecords(segment.path, mutable=False)
    try:
        pos = position
        end = records.size
        good = TailScan(None, position)  # after the last batch that passed its CRC
        last = good  # after the last batch seen
        while end - pos >= RECORD_BATCH_OVERHEAD:
            window = records.read(pos, max(_SCAN_WINDOW, RECORD_BATCH_OVERHEAD))
            at = 0
            while len(window) - at >= RECORD_BATCH_OVERHEAD:
                base, length, _e, magic, crc, _a, lod = HEADER.unpack_from(window, at)[:7]
                size = length + LOG_OVERHEAD
                if length < _MIN_LENGTH or magic != MAGIC_V2 or pos + at + size > end:
                    return last if trust_crc_failures else good
                if at + size > len(window):
                    if at == 0:
                        window = records.read(pos, size)
                        if len(window) < size:
                            return last if trust_crc_failures else good
                    else:
                        break
                last = TailScan(base + lod + 1, pos + at + size)
                if crc32c(memoryview(window)[at + 21 : at + size]) == crc:
                    good = last
                at += size
            if at == 0:
                break
            pos += at
        return last if trust_crc_failures or last.position == good.position else good
    finally:
        records.close()


def complete_prefix(data: bytes | memoryview, end_offset: int) -> tuple[int, int | None, bool]:
    """(bytes of whole batches at the start of `data`, next offset after them, reached end_offset).

    Batches starting at or past `end_offset` are not included.
    """
    n = len(data)
    at = 0
    next_offset = None
    while n - at >= LOG_OVERHEAD:
        base, length = PREFIX.unpack_from(data, at)
        if base >= end_offset:
            return at, end_offset, True  # every offset below end_offset that exists was before this batch
        if length < _MIN_LENGTH or at + length + LOG_OVERHEAD > n:
            break
        next_offset = base + _INT32.unpack_from(data, at + 23)[0] + 1
        at += length + LOG_OVERHEAD
        if next_offset >= end_offset:
            return at, next_offset, True
    return at, next_offset, False


def read_range(segments: list[Segment], start: int, end: int,
               chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[RawChunk, int]]:
    """Chunks of whole batches covering offsets [start, end), each with the offset that follows it.

    The first chunk may begin with records below `start` and the last may end past `end` (batches
    are read whole); the decoder drops them. Stops early, without error, when the files end
    before `end`: the caller compares the offset reached with what it expected. A segment deleted
    since it was listed raises FileNotFoundError, for the caller to check the new log start.

    Chunks are views of one buffer reused for the whole range (a fresh multi-MiB allocation per
    chunk costs page faults comparable to decoding it): each is valid until the next is asked for.
    """
    first = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= start:
            first = i
    buffer = memoryview(bytearray(chunk_bytes))
    for i in range(first, len(segments)):
        seg = segments[i]
        if seg.base_offset >= end:
            return
        records = FileRecords(seg.path, mutable=False)
        try:
            pos = index_position(seg, start) if i == first else 0
            size = records.size
            while pos < size:
                got = os.preadv(records.fd, [buffer[: min(chunk_bytes, size - pos)]], pos)
                data = buffer[:got]
                cut, next_offset, done = complete_prefix(data, end)
                if cut == 0 and not done:
                    if got < LOG_OVERHEAD:
                        break
                    _, length = PREFIX.unpack_from(data, 0)
                    if length < _MIN_LENGTH or pos + length + LOG_OVERHEAD > size:
                        break  # a batch being written, or the zeros of a preallocated file
                    data = memoryview(records.read(pos, length + LOG_OVERHEAD))  # larger than a chunk
                    cut, next_offset, done = complete_prefix(data, end)
                    if cut == 0:
                        break
                if cut:
                    assert next_offset is not None, "complete_prefix counted a batch, so it knows what follows"
                    yield RawChunk(data[:cut], str(seg.path), pos), next_offset
                if done:
                    return
                pos += cut
        finally:
            records.close()
