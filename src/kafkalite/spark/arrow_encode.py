"""Arrow rows encoded into v2 record batches, column-wise, and Kafka's default partitioner.

The sink receives `pyarrow.RecordBatch`es (Spark's Arrow writer), so records are built without a
Python object per row: the small varint prefixes of all records are written with numpy into one
buffer, and Arrow's element-wise binary join glues prefix, key, value-length and value together in
C. The joined array's data buffer is then exactly the records section of a batch, cut at batch
boundaries, compressed as a whole, and framed with a 61-byte header.

Partitions are chosen as Kafka's producer does: the `partition` column when given, else
murmur2(key) for keyed records (vectorised here, bit-identical to Kafka's `Utils.murmur2`), else
the sticky partition: one partition per batch's worth of keyless records, rotating (KIP-480).
"""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from kafkalite.records.batch import MAGIC_V2, RECORD_BATCH_OVERHEAD
from kafkalite.records.compression import CompressionType, compress
from kafkalite.records.varint import encode_varint

_PREFIX = struct.Struct(">qiib")  # base offset, length, partition leader epoch, magic
_BODY = struct.Struct(">hiqqqhii")  # attributes .. records count: what the CRC covers, before the records
_CRC = struct.Struct(">I")
_M = np.uint32(0x5BD1E995)
_SEED = np.uint32(0x9747B28C)
_EMPTY = pa.scalar(b"", pa.binary())


def murmur2(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 of each (non-null) binary key, as uint32 (Java's int, unsigned)."""
    keys = keys.cast(pa.binary())
    n = len(keys)
    lengths = pc.binary_length(keys).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32, count=n + 1 + keys.offset)[keys.offset:]
    data = np.frombuffer(keys.buffers()[2], dtype=np.uint8) if keys.buffers()[2] is not None else \
        np.zeros(1, dtype=np.uint8)
    data = np.concatenate([data, np.zeros(4, dtype=np.uint8)])  # reads of a tail never run past the end
    starts = offsets[:-1].astype(np.int64)
    with np.errstate(over="ignore"):
        h = _SEED ^ lengths.astype(np.uint32)
        for block in range(int(lengths.max(initial=0)) // 4):
            rows = np.flatnonzero(lengths >= 4 * (block + 1))
            at = starts[rows] + 4 * block
            k = (data[at].astype(np.uint32) | (data[at + 1].astype(np.uint32) << 8)
                 | (data[at + 2].astype(np.uint32) << 16) | (data[at + 3].astype(np.uint32) << 24))
            k = k * _M
            k ^= k >> np.uint32(24)
            k = k * _M
            h[rows] = (h[rows] * _M) ^ k
        tail = lengths % 4
        base = starts + (lengths & ~3)
        for extra, shift in ((3, 16), (2, 8), (1, 0)):
            rows = np.flatnonzero(tail >= extra)
            h[rows] ^= data[base[rows] + extra - 1].astype(np.uint32) << np.uint32(shift)
        rows = np.flatnonzero(tail > 0)
        h[rows] = h[rows] * _M
        h ^= h >> np.uint32(13)
        h = h * _M
        h ^= h >> np.uint32(15)
    return h


def choose_partitions(n: int, keys: pa.Array | None, explicit: pa.Array | None, count: int,
                      sticky: StickyPartitioner, values: pa.Array | None = None) -> np.ndarray:
    """Partition of each of `n` rows: explicit when non-null, else murmur2(key) % count, else the sticky
    partition (`sticky`, which moves on once a batch's worth of those rows went to one partition).

    `n` is the row count (the value column's length): a DataFrame may have neither a key nor a partition
    column, and then every row is keyless. `values` sizes the keyless rows for the sticky partitioner.
    """
    out = np.full(n, -1, dtype=np.int64)
    free = np.ones(n, dtype=bool)
    if keys is not None and n:
        keyed = np.flatnonzero(keys.is_valid().to_numpy(zero_copy_only=False))
        if keyed.size:
            hashes = murmur2(keys.take(pa.array(keyed)))
            out[keyed] = (hashes & np.uint32(0x7FFFFFFF)).astype(np.int64) % count
            free[keyed] = False
    if explicit is not None and n:
        given = explicit.is_valid().to_numpy(zero_copy_only=False)
        if given.any():
            values_given = explicit.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            out[given] = values_given[given]
            free[given] = False
    rows = np.flatnonzero(free)
    if rows.size:
        sizes = _record_sizes(values, rows)
        out[rows] = sticky.assign(sizes, count)
    return out


def _record_sizes(values: pa.Array | None, rows: np.ndarray) -> np.ndarray:
    """Roughly the encoded size of each of `rows` (value bytes plus a record's fixed fields)."""
    if values is None:
        return np.full(rows.size, 8, dtype=np.int64)
    offsets = values.buffers()[1]
    width = 8 if pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type) else 4
    ends = np.frombuffer(offsets, dtype=np.int64 if width == 8 else np.int32, count=len(values) + 1 + values.offset)
    lengths = np.diff(ends[values.offset:]).astype(np.int64)  # a null's length is 0 in Arrow's offsets
    return (lengths if rows.size == len(values) else lengths[rows]) + 8


class StickyPartitioner:
    """Kafka's partitioning of keyless records (KIP-480, KIP-794): they all go to one partition until a
    batch's worth (`batch_bytes`, the producer's batch.size) went there, then to the next one. Per topic and
    per write task; the first partition is random so that tasks do not all start on partition 0."""

    def __init__(self, batch_bytes: int, start: int) -> None:
        self.batch_bytes = max(1, batch_bytes)
        self.current = start
        self.filled = 0  # bytes of keyless records sent to `current` so far

    def assign(self, sizes: np.ndarray, count: int) -> np.ndarray:
        """The partition of each record of `sizes` bytes, in order, and the state moved past them: a record
        joins the current partition, and once that partition has a batch's worth the next record moves on
        (a loop per batch switched, never per record)."""
        parts = np.empty(sizes.size, dtype=np.int64)
        ends = np.cumsum(sizes)  # bytes up to and including each record
        begin, base = 0, 0  # first record not yet placed; bytes before it
        while begin < sizes.size:
            # the record that brings the current partition to a batch's worth closes it
            close = int(np.searchsorted(ends, base + self.batch_bytes - self.filled, side="left"))
            stop = min(close + 1, sizes.size)
            parts[begin:stop] = self.current % count
            if close < sizes.size:
                self.current += 1
                self.filled = 0
            else:
                self.filled += int(ends[-1] - base)
            base = int(ends[stop - 1])
            begin = stop
        return parts


# --- record encoding ---------------------------------------------------------------------------


def _zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def _varint_sizes(zz: np.ndarray) -> np.ndarray:
    sizes = np.ones(zz.size, dtype=np.int64)
    for bits in (7, 14, 21, 28, 35, 42, 49, 56, 63):
        sizes += zz >= np.uint64(1 << bits)
    return sizes


def _write_varints(buf: np.ndarray, pos: np.ndarray, zz: np.ndarray, sizes: np.ndarray) -> None:
    for j in range(int(sizes.max(initial=0))):
        rows = np.flatnonzero(sizes > j)
        byte = ((zz[rows] >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        byte[sizes[rows] > j + 1] |= 0x80
        buf[pos[rows] + j] = byte


def _binary_from(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> pa.Array:
    """One binary array whose row i is the concatenation of each part's (zigzag value, size) varint."""
    total_sizes = np.zeros(n, dtype=np.int64)
    for _zz, sizes in parts:
        total_sizes += sizes
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(total_sizes, out=offsets[1:])
    buf = np.zeros(int(offsets[-1]), dtype=np.uint8)
    pos = offsets[:-1].copy()
    for zz, sizes in parts:
        _write_varints(buf, pos, zz, sizes)
        pos += sizes
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(buf)])


def _header_tails(headers: pa.Array | None, n: int) -> tuple[pa.Array, np.ndarray]:
    """Per record: the header count varint and the encoded headers; Python only for rows with headers."""
    if headers is None or headers.null_count == n:
        offsets = np.arange(n + 1, dtype=np.int32)  # one byte each: a header count of 0
        none = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(bytes(n))])
        return none, np.ones(n, dtype=np.int64)
    counts = pc.list_value_length(headers).fill_null(0).to_numpy(zero_copy_only=False)
    tails = [b"\x00"] * n
    for i in np.flatnonzero(counts).tolist():
        parts = [encode_varint(int(counts[i]))]
        for h in headers[i].as_py():
            hkey = h.get("key")
            hkey = hkey.encode() if isinstance(hkey, str) else (hkey or b"")
            hval = h.get("value")
            if isinstance(hval, str):
                hval = hval.encode()
            parts += (encode_varint(len(hkey)), hkey)
            parts += (encode_varint(-1),) if hval is None else (encode_varint(len(hval)), hval)
        tails[i] = b"".join(parts)
    arr = pa.array(tails, pa.binary())
    return arr, pc.binary_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)


def _lengths(arr: pa.Array) -> np.ndarray:
    """Byte length per row, -1 for null (Kafka's null key/value)."""
    return pc.binary_length(arr).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def build_batches(keys: pa.Array | None, values: pa.Array, headers: pa.Array | None, timestamp_ms: int,
                  codec: CompressionType, batch_bytes: int) -> list[tuple[bytes, int]]:
    """Encode rows (all for one partition) into (batch bytes, record count) of at most ~batch_bytes each.

    Every record gets `timestamp_ms` (CreateTime, as a producer stamps at send time), so the
    timestamp delta is always 0. Offsets start at 0 in each batch; the log assigns real ones.
    """
    n = len(values)
    if n == 0:
        return []
    values = values.cast(pa.binary())
    keys = pa.nulls(n, pa.binary()) if keys is None else keys.cast(pa.binary())
    klen, vlen = _lengths(keys), _lengths(values)
    tails, tail_len = _header_tails(headers, n)
    zk, zv = _zigzag(klen), _zigzag(vlen)
    sk, sv = _varint_sizes(zk), _varint_sizes(zv)
    fixed = 2 + sk + np.maximum(klen, 0) + sv + np.maximum(vlen, 0) + tail_len  # all but the offset delta
    # batch boundaries, sizing each record as if its offset delta and length took 5 bytes each
    upper = np.cumsum(fixed + 10)
    budget = max(1, batch_bytes - RECORD_BATCH_OVERHEAD)
    bounds = [0]
    while bounds[-1] < n:
        begin = bounds[-1]
        base = upper[begin - 1] if begin else 0
        stop = int(np.searchsorted(upper, base + budget, side="right"))
        bounds.append(max(stop, begin + 1))
    starts = np.repeat(np.asarray(bounds[:-1]), np.diff(bounds))
    deltas = np.arange(n, dtype=np.int64) - starts
    zd = _zigzag(deltas)
    sd = _varint_sizes(zd)
    body = fixed + sd
    zb = _zigzag(body)
    sb = _varint_sizes(zb)
    zero = np.zeros(n, dtype=np.uint64)
    one = np.ones(n, dtype=np.int64)
    prefix = _binary_from([(zb, sb), (zero, one), (zero, one), (zd, sd), (zk, sk)], n)
    middle = _binary_from([(zv, sv)], n)
    records = pc.binary_join_element_wise(prefix, keys, middle, values, tails, _EMPTY,
                                          null_handling="replace", null_replacement=b"")
    rec_offsets = np.frombuffer(records.buffers()[1], dtype=np.int32, count=n + 1 + records.offset)[records.offset:]
    data = records.buffers()[2]
    out = []
    for begin, end in itertools.pairwise(bounds):
        lo, hi = int(rec_offsets[begin]), int(rec_offsets[end])
        out.append((frame_batch(memoryview(data)[lo:hi], end - begin, timestamp_ms, codec), end - begin))
    return out


def frame_batch(records: bytes | memoryview, count: int, timestamp_ms: int, codec: CompressionType) -> bytes:
    """A v2 batch around an encoded records section: CreateTime, no producer id, base offset 0."""
    payload = compress(codec, bytes(records)) if codec != CompressionType.NONE else records
    body = _BODY.pack(int(codec), count - 1, timestamp_ms, timestamp_ms, -1, -1, -1, count)
    crc = crc32c(payload, crc32c(body))
    length = RECORD_BATCH_OVERHEAD - 12 + len(payload)
    return b"".join((_PREFIX.pack(0, length, -1, MAGIC_V2), _CRC.pack(crc), body, payload))
