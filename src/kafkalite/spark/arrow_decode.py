"""Record batches (v2) decoded straight into Arrow arrays, vectorised with numpy.

Spark takes `pyarrow.RecordBatch`es from a Python source several times faster than tuples, so the
reader never builds a Python object per record. The work per chunk of batches is:

1. frame the batches with one struct call each, check their CRC32C, skip control batches and those
   outside the offset range, decompress compressed payloads (whole batch at once);
2. walk the record chain: each record's start depends on the previous one's length, so this is the
   one per-record Python loop, reduced to reading a one- or two-byte varint and an addition;
3. decode every other field of all records together (`varint_np`), with one gather per varint byte;
4. cut keys, values and headers out of the buffer with a single Arrow `take` over a binary array
   whose pieces alternate between the gaps and the fields, so each copy is a C memcpy.

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
from kafkalite.records.batch import CONTROL_FLAG_MASK, HEADER, LOG_OVERHEAD, MAGIC_V2, RECORD_BATCH_OVERHEAD
from kafkalite.records.compression import CompressionType, decompress
from kafkalite.records.varint import decode_varint
from kafkalite.spark.errors import CorruptBatchError
from kafkalite.spark.schema import arrow_schema
from kafkalite.spark.varint_np import VARINT_MAX_BYTES, VARLONG_MAX_BYTES, decode_at, width_at

_MIN_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # a v2 batch's length field covers at least its header
_INT32_MAX = (1 << 31) - 1


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
    """Per-batch facts of the batches that hold records to decode, and their payload buffer."""

    buf: bytes
    base_offsets: list[int]
    counts: list[int]
    payload_starts: list[int]
    payload_ends: list[int]
    base_timestamps: list[int]
    log_append_times: list[int]  # -1 for CreateTime batches
    file_positions: list[int]


def _corrupt(chunk: RawChunk, rel: int, base_offset: int | None, reason: str) -> CorruptBatchError:
    where = f"byte {chunk.position + rel} of {chunk.source}"
    if base_offset is not None:
        where = f"the record batch at offset {base_offset} ({where})"
    return CorruptBatchError(f"corrupt data at {where}: {reason}")


def frame(chunk: RawChunk, start: int, end: int, *, verify_crc: bool = True) -> _Framed:
    """Frame and check the batches of a chunk; keep those with records in [start, end).

    A batch cut short at the end of the chunk is left out, as Kafka's readers do with a partial tail.
    """
    data = chunk.data
    view = memoryview(data)
    n = len(data)
    kept: list[tuple[int, int, int, int, int, int, int]] = []
    keep = kept.append
    unpack = HEADER.unpack_from
    pos = 0
    while n - pos >= RECORD_BATCH_OVERHEAD:
        (base, length, _epoch, magic, crc, attrs, lod, bts, max_ts, _pid, _pe, _bs, count) = unpack(data, pos)
        if length < _MIN_LENGTH:
            raise _corrupt(chunk, pos, None, f"batch length {length} is below the minimum {_MIN_LENGTH}")
        size = length + LOG_OVERHEAD
        if pos + size > n:
            break
        if magic != MAGIC_V2:
            raise _corrupt(chunk, pos, base, f"magic {magic}: only the v2 record format is read")
        if verify_crc:
            computed = crc32c(view[pos + 21 : pos + size])
            if computed != crc:
                raise _corrupt(chunk, pos, base, f"CRC32C mismatch (stored {crc}, computed {computed})")
        if count < 0 or (not attrs & 0x07 and count > (size - RECORD_BATCH_OVERHEAD) // 7 + 1):
            raise _corrupt(chunk, pos, base, f"record count {count} cannot fit in the batch")
        if not attrs & CONTROL_FLAG_MASK and count > 0 and base + lod >= start and base < end:
            keep((base, count, pos, size, bts, max_ts if attrs & 0x08 else -1, attrs & 0x07))
        pos += size
    if not kept:
        return _Framed(data, [], [], [], [], [], [], [])
    bases, counts, positions, sizes, base_ts, lat, codecs = (list(column) for column in zip(*kept, strict=True))
    starts = [p + RECORD_BATCH_OVERHEAD for p in positions]
    ends = [p + z for p, z in zip(positions, sizes, strict=True)]
    if any(codecs):
        data = _decompress_payloads(chunk, view, bases, starts, ends, codecs, positions)
    return _Framed(data, bases, counts, starts, ends, base_ts, lat, positions)


def _decompress_payloads(chunk: RawChunk, view: memoryview, bases: list[int], starts: list[int], ends: list[int],
                         codecs: list[int], positions: list[int]) -> bytes:
    """Join every kept payload, decompressed, into one buffer; rewrite starts/ends to point into it."""
    parts: list[bytes | memoryview] = []
    at = 0
    for i, codec in enumerate(codecs):
        raw = view[starts[i] : ends[i]]
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


def _advance_table() -> list[list[int]]:
    """Bytes a record takes (length varint + body), indexed by the first two bytes of the record.

    Covers the one- and two-byte length varints (records up to 8 KiB); 0 means "look closer"
    (a longer varint, or a negative length, which is corrupt).
    """
    table = []
    for b0 in range(256):
        row = []
        for b1 in range(256):
            if b0 < 0x80:
                raw, width = b0, 1
            elif b1 < 0x80:
                raw, width = (b0 & 0x7F) | (b1 << 7), 2
            else:
                raw, width = 1, 0
            row.append(0 if raw & 1 else width + (raw >> 1))
        table.append(row)
    return table


_ADVANCE = _advance_table()
_ADVANCE16 = np.array([step for row in _ADVANCE for step in row], dtype=np.int64)  # indexed by b0 << 8 | b1


def _record_size_slow(buf: bytes, pos: int) -> int:
    size, body = decode_varint(buf, pos)
    if size < 0:
        raise InvalidRecordError(f"negative record length {size}")
    return body - pos + size


def record_starts(framed: _Framed) -> np.ndarray:
    """Position of every record (its length varint), walking each batch's chain of records.

    Each record's start depends on the previous record's length, so this walk is sequential. With
    many small batches (what Kafka's producers write) it runs across all batches at once in numpy,
    one step per record index; otherwise it is the one Python loop per record of the decoder,
    reduced to a table lookup on the record's first two bytes and an addition. Lengths are checked
    to add up exactly to each payload; the fields inside records are checked later, all at once.
    """
    counts = framed.counts
    total = sum(counts)
    steps = max(counts)
    if len(counts) > 1 and steps * 32 < total and steps * len(counts) <= 4 * total:
        found = _starts_across_batches(framed)
        if found is not None:
            return found
    buf = framed.buf
    out: list[int] = []
    app = out.append
    table = _ADVANCE
    for i, count in enumerate(counts):
        pos = framed.payload_starts[i]
        try:
            for _ in range(count):
                app(pos)
                pos += table[buf[pos]][buf[pos + 1]] or _record_size_slow(buf, pos)
        except IndexError:
            raise RecordsError("records run past the end of the payload", batch=i) from None
        except InvalidRecordError as exc:
            raise RecordsError(str(exc), batch=i) from None
        if pos != framed.payload_ends[i]:
            raise RecordsError(f"records end at byte {pos}, not at the payload end {framed.payload_ends[i]}",
                               batch=i)
    return np.array(out, dtype=np.int64)


def _starts_across_batches(framed: _Framed) -> np.ndarray | None:
    """The chain walk vectorised across batches: step k finds record k of every batch at once.

    Batches are ordered by record count, largest first, so the batches still walking at step k are
    a prefix (slices, no fancy indexing); step k's positions fill row k of a grid that is read back
    in (batch, record) order at the end. Returns None (the caller falls back to the scalar walk,
    which reports errors precisely) when a record is 8 KiB or more or anything does not add up.
    """
    u8 = np.frombuffer(framed.buf, dtype=np.uint8)
    counts = np.asarray(framed.counts, dtype=np.int64)
    order = np.argsort(-counts, kind="stable")
    descending = counts[order]
    pos = np.asarray(framed.payload_starts, dtype=np.int64)[order]
    steps = int(descending[0])
    walking = np.searchsorted(-descending, -np.arange(steps), side="left").tolist()
    grid = np.empty((steps, counts.size), dtype=np.int64)
    table = _ADVANCE16
    try:
        for k in range(steps):
            p = pos[: walking[k]]
            grid[k, : p.size] = p
            step = table[(u8[p].astype(np.int64) << 8) | u8[p + 1]]
            if not step.all():
                return None
            p += step  # a view: advances pos in place
    except IndexError:
        return None
    if not np.array_equal(pos, np.asarray(framed.payload_ends, dtype=np.int64)[order]):
        return None
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    by_batch = grid[:, inverse].T
    return by_batch[np.arange(steps)[None, :] < counts[:, None]]


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


def parse_fields(u8: np.ndarray, starts: np.ndarray, rec_ends: np.ndarray) -> _Fields:
    """Decode every field of every record; raises InvalidRecordError naming the first bad record.

    The record lengths themselves were checked by the chain walk (each record ends where the next
    begins, the last at the payload end), so only their width is needed here.
    """
    p = starts + width_at(u8, starts)
    p += 1  # attributes: unused in v2
    ts_delta, w = decode_at(u8, p, VARLONG_MAX_BYTES, "timestamp delta")
    p += w
    offset_delta, w = decode_at(u8, p, VARINT_MAX_BYTES, "offset delta")
    p += w
    key_len, w = decode_at(u8, p, VARINT_MAX_BYTES, "key length")
    p += w
    key_start = p.copy()
    p += np.maximum(key_len, 0)
    value_len, w = decode_at(u8, p, VARINT_MAX_BYTES, "value length")
    p += w
    value_start = p.copy()
    p += np.maximum(value_len, 0)
    header_count, w = decode_at(u8, p, VARINT_MAX_BYTES, "header count")
    p += w
    bad = (key_len < -1) | (value_len < -1) | (header_count < 0) | (header_count > rec_ends - p)
    if bad.any():
        raise RecordsError("a record's lengths do not match its size", record=int(np.argmax(bad)))
    total = int(header_count.sum())
    hk_start = np.empty(total, dtype=np.int64)
    hk_len = np.empty(total, dtype=np.int64)
    hv_start = np.empty(total, dtype=np.int64)
    hv_len = np.empty(total, dtype=np.int64)
    if total:
        first_slot = np.cumsum(header_count) - header_count
        rows = np.flatnonzero(header_count)
        level = 0
        while rows.size:
            q = p[rows]
            kl, w = decode_at(u8, q, VARINT_MAX_BYTES, "header key length")
            q += w
            slot = first_slot[rows] + level
            hk_start[slot] = q
            hk_len[slot] = kl
            q += np.maximum(kl, 0)
            vl, w = decode_at(u8, q, VARINT_MAX_BYTES, "header value length")
            q += w
            hv_start[slot] = q
            hv_len[slot] = vl
            q += np.maximum(vl, 0)
            p[rows] = q
            if ((kl < 0) | (vl < -1)).any():
                raise InvalidRecordError("a header has a negative key length or an invalid value length")
            level += 1
            rows = rows[header_count[rows] > level]
    bad = p != rec_ends
    if bad.any():
        raise RecordsError("a record does not end where its length says", record=int(np.argmax(bad)))
    return _Fields(offset_delta, ts_delta, key_start, key_len, value_start, value_len, header_count,
                   hk_start, hk_len, hv_start, hv_len)


def binary_slices(buf: pa.Buffer, size: int, starts: np.ndarray, lengths: np.ndarray,
                  out_type: pa.DataType | None = None) -> pa.Array:
    """A binary (or string) array of `buf[start:start+len]` per row; a negative length is a null.

    The slices must be in buffer order and not overlap: they become every other element of one
    binary array laid over the whole buffer, and `take` copies those elements out in C.
    """
    n = starts.size
    ends = starts + np.maximum(lengths, 0)
    wide = size > _INT32_MAX
    offsets = np.empty(2 * n + 2, dtype=np.int64 if wide else np.int32)
    offsets[0] = 0
    offsets[1:-1:2] = starts
    offsets[2:-1:2] = ends
    offsets[-1] = size
    pieces_type = pa.large_binary() if wide else pa.binary()
    pieces = pa.Array.from_buffers(pieces_type, 2 * n + 1, [None, pa.py_buffer(offsets), buf])
    taken = pieces.take(pa.array(np.arange(1, 2 * n, 2, dtype=np.int32)))
    if wide:
        taken = taken.cast(pa.binary())
    nulls = lengths < 0
    null_count = int(nulls.sum())
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    offsets_buf, data_buf = taken.buffers()[1:3]
    return pa.Array.from_buffers(out_type or pa.binary(), n, [validity, offsets_buf, data_buf], null_count)


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
    if not framed.counts:
        return None
    try:
        starts = record_starts(framed)
        rec_ends = np.empty_like(starts)
        rec_ends[:-1] = starts[1:]
        batch_of = np.repeat(np.arange(len(framed.counts)), framed.counts)
        last_of_batch = np.cumsum(framed.counts) - 1
        rec_ends[last_of_batch] = framed.payload_ends
        u8 = np.frombuffer(framed.buf, dtype=np.uint8)
        fields = parse_fields(u8, starts, rec_ends)
    except InvalidRecordError as exc:
        raise _locate(chunk, framed, exc) from None
    offsets = np.asarray(framed.base_offsets, dtype=np.int64)[batch_of] + fields.offset_delta
    lat = np.asarray(framed.log_append_times, dtype=np.int64)[batch_of]
    create = np.asarray(framed.base_timestamps, dtype=np.int64)[batch_of] + fields.ts_delta
    ts_ms = np.where(lat >= 0, lat, create)
    ts_type = (lat >= 0).astype(np.int32)
    keep = None
    if offsets[0] < start or offsets[-1] >= end:
        keep = (offsets >= start) & (offsets < end)
    return _assemble(chunk, framed, fields, offsets, ts_ms, ts_type, keep, topic, partition, include_headers)


def _locate(chunk: RawChunk, framed: _Framed, exc: InvalidRecordError) -> CorruptBatchError:
    """Turn a record-level failure into an error naming its batch (the chunk's first when unknown)."""
    index = 0
    if isinstance(exc, RecordsError):
        if exc.batch is not None:
            index = exc.batch
        elif exc.record is not None:
            index = int(np.searchsorted(np.cumsum(framed.counts), exc.record, side="right"))
    return _corrupt(chunk, framed.file_positions[index], framed.base_offsets[index], str(exc))


def _assemble(chunk: RawChunk, framed: _Framed, f: _Fields, offsets: np.ndarray, ts_ms: np.ndarray,
              ts_type: np.ndarray, keep: np.ndarray | None, topic: str, partition: int,
              include_headers: bool) -> pa.RecordBatch | None:
    buf = pa.py_buffer(framed.buf)
    size = len(framed.buf)
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
        binary_slices(buf, size, key_start, key_len),
        binary_slices(buf, size, value_start, value_len),
        constant_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(ts_ms * 1000, type=pa.timestamp("us", tz="UTC")),
        pa.array(ts_type),
    ]
    if include_headers:
        columns.append(_headers(chunk, framed, buf, size, hcount, hk_start, hk_len, hv_start, hv_len))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))


def _headers(chunk: RawChunk, framed: _Framed, buf: pa.Buffer, size: int, hcount: np.ndarray, hk_start: np.ndarray,
             hk_len: np.ndarray, hv_start: np.ndarray, hv_len: np.ndarray) -> pa.Array:
    """array<struct<key string, value binary>>, null for records without headers (as Spark's Kafka source)."""
    keys = binary_slices(buf, size, hk_start, hk_len)
    try:
        keys = keys.cast(pa.string())  # validates UTF-8, which Kafka requires of header keys
    except pa.ArrowInvalid:
        raise _corrupt(chunk, framed.file_positions[0], framed.base_offsets[0],
                       "a header key is not valid UTF-8") from None
    values = binary_slices(buf, size, hv_start, hv_len)
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
