"""Record batches (v2) decoded straight into Arrow arrays, a chunk of batches at a time.

Spark takes `pyarrow.RecordBatch`es from a Python source several times faster than tuples, so the
reader never builds a Python object per record. The work per chunk of batches is:

1. frame the batches with one struct call each, check their CRC32C, skip control batches and those
   outside the offset range, decompress compressed payloads (whole batch at once);
2. walk the records of all kept batches in one compiled pass (`record_walk`), which finds every
   field of every record and checks that they add up;
3. copy keys, values and headers out with one `memcpy` each, into Arrow-owned buffers, and build
   the other columns from the per-batch facts with numpy.

Every inconsistency a record can have (lengths past its end, bytes left over, too-long varints,
headers with negative key length or keys that are not UTF-8) is detected, and reported with the
file, byte position and base offset of the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from kafkalite.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from kafkalite.records.batch import RECORD_BATCH_OVERHEAD
from kafkalite.records.compression import CompressionType, decompress
from kafkalite.spark import record_walk
from kafkalite.spark.errors import CorruptBatchError
from kafkalite.spark.schema import arrow_schema

_INT32_MAX = (1 << 31) - 1
_CRC_FROM = 21  # a batch's CRC32C covers it from its attributes on
_MIN_RECORD = 7  # length, attributes, timestamp delta, offset delta, key length, value length, header count


class RecordsError(InvalidRecordError):
    """Records that do not add up; `batch` or `record` (index in the chunk) says where, when known."""

    def __init__(self, message: str, *, batch: int | None = None, record: int | None = None) -> None:
        super().__init__(message)
        self.batch = batch
        self.record = record


@dataclass(frozen=True, slots=True)
class RawChunk:
    """Whole record batches back to back, as a segment file or a fetch response holds them.

    `source` and `position` (byte of `data[0]` in it) only serve error messages: a segment file's
    path for the embedded reader, "broker fetch ..." for a broker.
    """

    data: bytes | memoryview
    source: str
    position: int = 0


@dataclass(slots=True)
class _Framed:
    """Per-batch facts (int64 arrays) of the batches that hold records to decode, and their payloads' buffer."""

    buf: bytes | memoryview
    base_offsets: np.ndarray
    counts: np.ndarray
    payload_starts: np.ndarray
    payload_ends: np.ndarray
    base_timestamps: np.ndarray
    log_append_times: np.ndarray  # -1 for CreateTime batches
    file_positions: np.ndarray
    last_offsets: np.ndarray
    deferred_crcs: np.ndarray | None = None  # stored CRCs still to check, batch by batch, as records are walked


def _corrupt(chunk: RawChunk, rel: int, base_offset: int | None, reason: str) -> CorruptBatchError:
    where = f"byte {chunk.position + int(rel)} of {chunk.source}"
    if base_offset is not None:
        where = f"the record batch at offset {int(base_offset)} ({where})"
    return CorruptBatchError(f"corrupt data at {where}: {reason}")


def frame(chunk: RawChunk, start: int, end: int, *, verify_crc: bool = True) -> _Framed:
    """Frame and check the batches of a chunk; keep those with records in [start, end).

    A batch cut short at the end of the chunk is left out, as Kafka's readers do with a partial tail.
    Checks run in the order Kafka's would: length, magic, CRC, record count. The CRCs of kept
    uncompressed batches are left to `walk`, which checks each group of batches just before walking
    it, while its bytes are still in the CPU's cache.
    """
    data = chunk.data
    code, detail, facts = record_walk.frame_batches(np.frombuffer(data, dtype=np.uint8), start, end)
    if code:
        if verify_crc:
            _check_crcs(chunk, data, facts if code == record_walk.BATCH_COUNT else facts[:-1])
        bad = facts[-1]
        base = None if code == record_walk.BATCH_LENGTH else bad[record_walk.BASE_OFFSET]
        raise _corrupt(chunk, bad[record_walk.POSITION], base, record_walk.describe(code, detail))
    wanted = facts[:, record_walk.KEEP] == 1
    kept = facts[wanted]
    positions = kept[:, record_walk.POSITION]
    starts = positions + RECORD_BATCH_OVERHEAD
    ends = positions + kept[:, record_walk.SIZE]
    bases = kept[:, record_walk.BASE_OFFSET]
    codecs = kept[:, record_walk.CODEC]
    compressed = bool(codecs.any())
    deferred = None
    if verify_crc:
        _check_crcs(chunk, data, facts if compressed else facts[~wanted])
        deferred = None if compressed else kept[:, record_walk.CRC]
    if compressed:
        data = _decompress_payloads(chunk, memoryview(data), bases, starts, ends, codecs, positions)
    return _Framed(data, bases, kept[:, record_walk.COUNT], starts, ends, kept[:, record_walk.BASE_TIMESTAMP],
                   kept[:, record_walk.LOG_APPEND_TIME], positions, kept[:, record_walk.LAST_OFFSET], deferred)


def _check_crcs(chunk: RawChunk, data: bytes | memoryview, facts: np.ndarray) -> None:
    """CRC32C of each framed batch, from its attributes to its end, against the stored one."""
    view = memoryview(data)
    columns = [record_walk.POSITION, record_walk.SIZE, record_walk.BASE_OFFSET, record_walk.CRC]
    for pos, size, base, crc in facts[:, columns].tolist():
        computed = crc32c(view[pos + _CRC_FROM : pos + size])
        if computed != crc:
            raise _corrupt(chunk, pos, base, f"CRC32C mismatch (stored {crc}, computed {computed})")


def _decompress_payloads(chunk: RawChunk, view: memoryview, bases: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                         codecs: np.ndarray, positions: np.ndarray) -> bytes:
    """Join every kept payload, decompressed, into one buffer; rewrite starts/ends to point into it."""
    parts: list[bytes | memoryview] = []
    at = 0
    for i, codec in enumerate(codecs.tolist()):
        raw: bytes | memoryview = view[int(starts[i]) : int(ends[i])]
        if codec:
            try:
                raw = decompress(CompressionType.from_id(codec), raw)
            except (CorruptRecordError, UnsupportedCompressionTypeError) as exc:
                raise _corrupt(chunk, positions[i], bases[i], str(exc)) from None
        parts.append(raw)
        starts[i] = at
        at += len(raw)
        ends[i] = at
    return b"".join(parts)


@dataclass(slots=True)
class _Fields:
    """Where each field of every record is, as arrays over records (positions into the buffer)."""

    offset_delta: np.ndarray
    ts_delta: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray
    value_start: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray
    hk_start: np.ndarray
    hk_len: np.ndarray
    hv_start: np.ndarray
    hv_len: np.ndarray


@dataclass(slots=True)
class _Copied:
    """Keys and values already copied out (when every record of the chunk is wanted)."""

    keys: pa.Array
    values: pa.Array


def walk(framed: _Framed, u8: np.ndarray, copy: bool) -> tuple[_Fields, _Copied | None]:
    """Every field of every record of the framed batches; raises RecordsError at the first bad one.

    Works through the batches a group of about `_GROUP_BYTES` at a time: check the group's CRCs (if
    deferred), walk its records, and, with `copy`, copy its keys and values out. A chunk is
    several MiB, more than a core's L2 cache: walking it whole after checking it whole would take
    every record's bytes from memory again (the walk's loads depend on each other, so each miss
    costs its full latency), and the copies once more.
    """
    counts, starts, ends = framed.counts, framed.payload_starts, framed.payload_ends
    sizes = ends - starts
    crowded = counts > sizes // _MIN_RECORD
    if crowded.any():  # checked before sizing arrays by it: a compressed batch's count is not bounded by its size
        i = int(np.argmax(crowded))
        raise RecordsError(f"record count {counts[i]} cannot fit in the batch's {sizes[i]} bytes of records", batch=i)
    first = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    total = int(first[-1])
    rec_end, ts_delta, offset_delta, key_start, key_len, value_start, value_len, header_at, header_count = (
        np.empty(total, dtype=np.int64) for _ in range(9))
    groups = _groups(sizes)
    capacity = int(sizes.sum())
    copy = copy and capacity <= _INT32_MAX  # int32 offsets; past that, binary_slices reports the overflow
    if copy:
        key_data, value_data = pa.allocate_buffer(capacity), pa.allocate_buffer(capacity)
        key_out, value_out = np.frombuffer(key_data, dtype=np.uint8), np.frombuffer(value_data, dtype=np.uint8)
        key_offsets, value_offsets = np.empty(total + 1, dtype=np.int32), np.empty(total + 1, dtype=np.int32)
        key_at = value_at = 0
    crc_check = _CrcCheck(framed, u8) if framed.deferred_crcs is not None else None
    for b0, b1 in pairwise(groups):
        if crc_check is not None:
            crc_check.batches(b0, b1)
        r0, r1 = int(first[b0]), int(first[b1])
        code, detail, batch, _record = record_walk.walk_records(
            u8, starts[b0:b1], ends[b0:b1], counts[b0:b1], rec_end[r0:r1], ts_delta[r0:r1], offset_delta[r0:r1],
            key_start[r0:r1], key_len[r0:r1], value_start[r0:r1], value_len[r0:r1], header_at[r0:r1],
            header_count[r0:r1])
        if code:
            raise RecordsError(record_walk.describe(code, detail), batch=b0 + batch)
        if copy:
            key_at = record_walk.gather(u8, key_start[r0:r1], key_len[r0:r1], key_out, key_offsets[r0:r1 + 1], key_at)
            value_at = record_walk.gather(u8, value_start[r0:r1], value_len[r0:r1], value_out,
                                          value_offsets[r0:r1 + 1], value_at)
    headers = int(header_count.sum())
    hk_start, hk_len, hv_start, hv_len = (np.empty(headers, dtype=np.int64) for _ in range(4))
    if headers:
        first_slot = np.cumsum(header_count) - header_count
        code, detail, record = record_walk.walk_headers(u8, np.flatnonzero(header_count), header_at, header_count,
                                                        rec_end, first_slot, hk_start, hk_len, hv_start, hv_len)
        if code:
            raise RecordsError(record_walk.describe(code, detail), record=record)
    fields = _Fields(offset_delta, ts_delta, key_start, key_len, value_start, value_len, header_count,
                     hk_start, hk_len, hv_start, hv_len)
    if not copy:
        return fields, None
    return fields, _Copied(_binary(key_data.slice(0, key_at), key_offsets, key_len),
                           _binary(value_data.slice(0, value_at), value_offsets, value_len))


_GROUP_BYTES = 1 << 20


def _groups(sizes: np.ndarray) -> list[int]:
    """Batch indexes where groups of about `_GROUP_BYTES` of payload begin, and the batch count."""
    cumulative = np.cumsum(sizes)
    cuts = np.searchsorted(cumulative, np.arange(_GROUP_BYTES, int(cumulative[-1]), _GROUP_BYTES), side="right")
    return [0, *sorted(set(cuts.tolist()) - {0, sizes.size}), int(sizes.size)]


class _CrcCheck:
    """The deferred CRC32C checks of a chunk's kept, uncompressed batches (their bytes are the chunk's)."""

    def __init__(self, framed: _Framed, u8: np.ndarray) -> None:
        assert framed.deferred_crcs is not None, "built only for a chunk whose CRC checks were deferred"
        self.view = u8.data  # the array's own memoryview
        self.froms = (framed.payload_starts - (RECORD_BATCH_OVERHEAD - _CRC_FROM)).tolist()
        self.tos = framed.payload_ends.tolist()
        self.stored = framed.deferred_crcs.tolist()

    def batches(self, b0: int, b1: int) -> None:
        view = self.view
        for i in range(b0, b1):
            computed = crc32c(view[self.froms[i] : self.tos[i]])
            if computed != self.stored[i]:
                raise RecordsError(f"CRC32C mismatch (stored {self.stored[i]}, computed {computed})", batch=i)


def _binary(data: pa.Buffer, offsets: np.ndarray, lengths: np.ndarray, out_type: pa.DataType | None = None
            ) -> pa.Array:
    """A binary (or string) array over copied bytes; rows with a negative length are nulls."""
    nulls = lengths < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(out_type or pa.binary(), lengths.size, [validity, pa.py_buffer(offsets), data],
                                 null_count)


def binary_slices(u8: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                  out_type: pa.DataType | None = None) -> pa.Array:
    """A binary (or string) array of `u8[start:start+len]` per row; a negative length is a null.

    The bytes go into a buffer from Arrow's memory pool, which reuses its pages from one chunk to
    the next (a fresh numpy allocation of several MiB page-faults every time).
    """
    total = int(np.maximum(lengths, 0).sum())
    if total > _INT32_MAX:
        raise InvalidRecordError(f"{total} bytes of keys or values in one chunk: more than a binary column holds")
    data = pa.allocate_buffer(total)
    offsets = np.empty(starts.size + 1, dtype=np.int32)
    record_walk.gather(u8, starts, lengths, np.frombuffer(data, dtype=np.uint8), offsets, 0)
    return _binary(data, offsets, lengths, out_type)


@lru_cache(maxsize=64)
def _topic_bytes(topic: str) -> bytes:
    return topic.encode()


def constant_string(value: str, n: int) -> pa.Array:
    """A string column holding the same value n times, built from buffers (no per-row objects)."""
    raw = _topic_bytes(value)
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def decode_chunk(chunk: RawChunk, topic: str, partition: int, start: int, end: int,
                 include_headers: bool, *, verify_crc: bool = True) -> pa.RecordBatch | None:
    """The records of `chunk` with offsets in [start, end) as one RecordBatch of the source schema.

    Returns None when no record of the chunk falls in the range (control batches only, say).
    """
    framed = frame(chunk, start, end, verify_crc=verify_crc)
    if framed.counts.size == 0:
        return None
    u8 = np.frombuffer(framed.buf, dtype=np.uint8)
    whole = int(framed.base_offsets[0]) >= start and int(framed.last_offsets[-1]) < end
    try:
        fields, copied = walk(framed, u8, copy=whole)  # copy as it walks only when no record is dropped after
    except InvalidRecordError as exc:
        raise _locate(chunk, framed, exc) from None
    batch_of = np.repeat(np.arange(len(framed.counts)), framed.counts)
    offsets = framed.base_offsets[batch_of] + fields.offset_delta
    lat = framed.log_append_times[batch_of]
    create = framed.base_timestamps[batch_of] + fields.ts_delta
    ts_ms = np.where(lat >= 0, lat, create)
    ts_type = (lat >= 0).astype(np.int32)
    keep = None
    if offsets[0] < start or offsets[-1] >= end:
        keep = (offsets >= start) & (offsets < end)
    return _assemble(chunk, framed, u8, fields, copied, offsets, ts_ms, ts_type, keep, topic, partition,
                     include_headers)


def _locate(chunk: RawChunk, framed: _Framed, exc: InvalidRecordError) -> CorruptBatchError:
    """Turn a record-level failure into an error naming its batch (the chunk's first when unknown)."""
    index = 0
    if isinstance(exc, RecordsError):
        if exc.batch is not None:
            index = exc.batch
        elif exc.record is not None:
            index = int(np.searchsorted(np.cumsum(framed.counts), exc.record, side="right"))
    return _corrupt(chunk, framed.file_positions[index], framed.base_offsets[index], str(exc))


def _assemble(chunk: RawChunk, framed: _Framed, u8: np.ndarray, f: _Fields, copied: _Copied | None,
              offsets: np.ndarray, ts_ms: np.ndarray, ts_type: np.ndarray, keep: np.ndarray | None, topic: str,
              partition: int, include_headers: bool) -> pa.RecordBatch | None:
    key_start, key_len, value_start, value_len = f.key_start, f.key_len, f.value_start, f.value_len
    hcount = f.header_count
    hk_start, hk_len, hv_start, hv_len = f.hk_start, f.hk_len, f.hv_start, f.hv_len
    if keep is not None:
        if include_headers and hk_start.size:
            hkeep = np.repeat(keep, hcount)
            hk_start, hk_len, hv_start, hv_len = hk_start[hkeep], hk_len[hkeep], hv_start[hkeep], hv_len[hkeep]
        offsets, ts_ms, ts_type = offsets[keep], ts_ms[keep], ts_type[keep]
        key_start, key_len, value_start, value_len = key_start[keep], key_len[keep], value_start[keep], value_len[keep]
        hcount = hcount[keep]
    n = offsets.size
    if n == 0:
        return None
    columns = [
        copied.keys if copied is not None and keep is None else binary_slices(u8, key_start, key_len),
        copied.values if copied is not None and keep is None else binary_slices(u8, value_start, value_len),
        constant_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(ts_ms * 1000, type=pa.timestamp("us", tz="UTC")),
        pa.array(ts_type),
    ]
    if include_headers:
        columns.append(_headers(chunk, framed, u8, hcount, hk_start, hk_len, hv_start, hv_len))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _headers(chunk: RawChunk, framed: _Framed, u8: np.ndarray, hcount: np.ndarray, hk_start: np.ndarray,
             hk_len: np.ndarray, hv_start: np.ndarray, hv_len: np.ndarray) -> pa.Array:
    """array<struct<key string, value binary>>, null for records without headers (as Spark's Kafka source)."""
    keys = binary_slices(u8, hk_start, hk_len)
    try:
        keys = keys.cast(pa.string())  # validates UTF-8, which Kafka requires of header keys
    except pa.ArrowInvalid:
        raise _corrupt(chunk, framed.file_positions[0], framed.base_offsets[0],
                       "a header key is not valid UTF-8") from None
    values = binary_slices(u8, hv_start, hv_len)
    header_type = arrow_schema(True).field("headers").type
    struct = pa.StructArray.from_arrays([keys, values], fields=list(header_type.value_type))
    list_offsets = np.zeros(hcount.size + 1, dtype=np.int32)
    np.cumsum(hcount, out=list_offsets[1:])
    nulls = hcount == 0
    mask = pa.array(nulls) if nulls.any() else None
    return pa.ListArray.from_arrays(pa.array(list_offsets), struct, type=header_type, mask=mask)


def decode_chunks(chunks: Sequence[RawChunk], topic: str, partition: int, start: int, end: int,
                  include_headers: bool) -> list[pa.RecordBatch]:
    """Convenience for tests and tools: every non-empty decoded batch of several chunks."""
    out = []
    for chunk in chunks:
        rb = decode_chunk(chunk, topic, partition, start, end, include_headers)
        if rb is not None:
            out.append(rb)
    return out
