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


def _corrupt(chunk: RawChunk, rel: int, base_offset: int | None, reason: str) -> CorruptBatchError:
    where = f"byte {chunk.position + int(rel)} of {chunk.source}"
    if base_offset is not None:
        where = f"the record batch at offset {int(base_offset)} ({where})"
    return CorruptBatchError(f"corrupt data at {where}: {reason}")


def frame(chunk: RawChunk, start: int, end: int, *, verify_crc: bool = True) -> _Framed:
    """Frame and check the batches of a chunk; keep those with records in [start, end).

    A batch cut short at the end of the chunk is left out, as Kafka's readers do with a partial tail.
    Checks run in the order Kafka's would: length, magic, CRC, record count.
    """
    data = chunk.data
    code, detail, facts = record_walk.frame_batches(np.frombuffer(data, dtype=np.uint8), start, end)
    if verify_crc:
        _check_crcs(chunk, data, facts if code in (record_walk.OK, record_walk.BATCH_COUNT) else facts[:-1])
    if code:
        bad = facts[-1]
        base = None if code == record_walk.BATCH_LENGTH else bad[record_walk.BASE_OFFSET]
        raise _corrupt(chunk, bad[record_walk.POSITION], base, record_walk.describe(code, detail))
    kept = facts[facts[:, record_walk.KEEP] == 1]
    positions = kept[:, record_walk.POSITION]
    starts = positions + RECORD_BATCH_OVERHEAD
    ends = positions + kept[:, record_walk.SIZE]
    bases = kept[:, record_walk.BASE_OFFSET]
    codecs = kept[:, record_walk.CODEC]
    if codecs.any():
        data = _decompress_payloads(chunk, memoryview(data), bases, starts, ends, codecs, positions)
    return _Framed(data, bases, kept[:, record_walk.COUNT], starts, ends, kept[:, record_walk.BASE_TIMESTAMP],
                   kept[:, record_walk.LOG_APPEND_TIME], positions)


def _check_crcs(chunk: RawChunk, data: bytes | memoryview, facts: np.ndarray) -> None:
    """CRC32C of each framed batch, from its attributes to its end, against the stored one."""
    view = memoryview(data)
    columns = [record_walk.POSITION, record_walk.SIZE, record_walk.BASE_OFFSET, record_walk.CRC]
    for pos, size, base, crc in facts[:, columns].tolist():
        computed = crc32c(view[pos + 21 : pos + size])
        if computed != crc:
            raise _corrupt(chunk, pos, base, f"CRC32C mismatch (stored {crc}, computed {computed})")


def _decompress_payloads(chunk: RawChunk, view: memoryview, bases: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                         codecs: np.ndarray, positions: np.ndarray) -> bytes:
    """Join every kept payload, decompressed, into one buffer; rewrite starts/ends to point into it."""
    parts: list[bytes | memoryview] = []
    at = 0
    for i, codec in enumerate(codecs.tolist()):
        raw = view[int(starts[i]) : int(ends[i])]
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


def walk(framed: _Framed, u8: np.ndarray) -> _Fields:
    """Every field of every record of the framed batches; raises RecordsError at the first bad one."""
    counts = np.asarray(framed.counts, dtype=np.int64)
    starts = np.asarray(framed.payload_starts, dtype=np.int64)
    ends = np.asarray(framed.payload_ends, dtype=np.int64)
    crowded = counts > (ends - starts) // _MIN_RECORD
    if crowded.any():  # checked before sizing arrays by it: a compressed batch's count is not bounded by its size
        i = int(np.argmax(crowded))
        raise RecordsError(f"record count {framed.counts[i]} cannot fit in the batch's {ends[i] - starts[i]} "
                           f"bytes of records", batch=i)
    total = int(counts.sum())
    rec_end, ts_delta, offset_delta, key_start, key_len, value_start, value_len, header_at, header_count = (
        np.empty(total, dtype=np.int64) for _ in range(9))
    code, detail, batch, _record = record_walk.walk_records(
        u8, starts, ends, counts, rec_end, ts_delta, offset_delta, key_start, key_len, value_start, value_len,
        header_at, header_count)
    if code:
        raise RecordsError(record_walk.describe(code, detail), batch=batch)
    headers = int(header_count.sum())
    hk_start, hk_len, hv_start, hv_len = (np.empty(headers, dtype=np.int64) for _ in range(4))
    if headers:
        first_slot = np.cumsum(header_count) - header_count
        code, detail, record = record_walk.walk_headers(u8, np.flatnonzero(header_count), header_at, header_count,
                                                        rec_end, first_slot, hk_start, hk_len, hv_start, hv_len)
        if code:
            raise RecordsError(record_walk.describe(code, detail), record=record)
    return _Fields(offset_delta, ts_delta, key_start, key_len, value_start, value_len, header_count,
                   hk_start, hk_len, hv_start, hv_len)


def binary_slices(u8: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                  out_type: pa.DataType | None = None) -> pa.Array:
    """A binary (or string) array of `u8[start:start+len]` per row; a negative length is a null.

    The bytes go into a buffer from Arrow's memory pool, which reuses its pages from one chunk to
    the next (a fresh numpy allocation of several MiB page-faults every time).
    """
    n = starts.size
    positive = np.maximum(lengths, 0)
    total = int(positive.sum())
    if total > _INT32_MAX:
        raise InvalidRecordError(f"{total} bytes of keys or values in one chunk: more than a binary column holds")
    data = pa.allocate_buffer(total)
    offsets = np.empty(n + 1, dtype=np.int32)
    record_walk.gather(u8, starts, lengths, np.frombuffer(data, dtype=np.uint8), offsets)
    nulls = lengths < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(out_type or pa.binary(), n, [validity, pa.py_buffer(offsets), data], null_count)


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
    try:
        fields = walk(framed, u8)
    except InvalidRecordError as exc:
        raise _locate(chunk, framed, exc) from None
    batch_of = np.repeat(np.arange(len(framed.counts)), framed.counts)
    offsets = np.asarray(framed.base_offsets, dtype=np.int64)[batch_of] + fields.offset_delta
    lat = np.asarray(framed.log_append_times, dtype=np.int64)[batch_of]
    create = np.asarray(framed.base_timestamps, dtype=np.int64)[batch_of] + fields.ts_delta
    ts_ms = np.where(lat >= 0, lat, create)
    ts_type = (lat >= 0).astype(np.int32)
    keep = None
    if offsets[0] < start or offsets[-1] >= end:
        keep = (offsets >= start) & (offsets < end)
    return _assemble(chunk, framed, u8, fields, offsets, ts_ms, ts_type, keep, topic, partition, include_headers)


def _locate(chunk: RawChunk, framed: _Framed, exc: InvalidRecordError) -> CorruptBatchError:
    """Turn a record-level failure into an error naming its batch (the chunk's first when unknown)."""
    index = 0
    if isinstance(exc, RecordsError):
        if exc.batch is not None:
            index = exc.batch
        elif exc.record is not None:
            index = int(np.searchsorted(np.cumsum(framed.counts), exc.record, side="right"))
    return _corrupt(chunk, framed.file_positions[index], framed.base_offsets[index], str(exc))


def _assemble(chunk: RawChunk, framed: _Framed, u8: np.ndarray, f: _Fields, offsets: np.ndarray, ts_ms: np.ndarray,
              ts_type: np.ndarray, keep: np.ndarray | None, topic: str, partition: int,
              include_headers: bool) -> pa.RecordBatch | None:
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
        binary_slices(u8, key_start, key_len),
        binary_slices(u8, value_start, value_len),
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
