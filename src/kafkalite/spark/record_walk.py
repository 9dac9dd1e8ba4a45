"""The per-record loops of the Arrow decoder, compiled with numba.

Inside a v2 batch, records are a chain: each one's start depends on the previous one's length
varint, and every field inside a record is a varint too. With numpy that walk costs several array
passes per field and an Arrow `take` to cut keys and values out. Those passes were most of the
decoder's time in Spark, where it runs beside the JVM on the same cores, so the walk is one
compiled pass instead, and keys and values are copied with one `memcpy` each.

Nothing here trusts the bytes: every read is checked against the end of its record (and each
record's end against its batch's payload), so corrupt input yields an error code, never a read
outside the buffer. The caller turns codes into messages naming the batch (`describe`).

Functions are compiled on first use and cached on disk next to this module (numba's `cache=True`),
so a Spark Python worker pays about 0.3 s once, when it first imports this module.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from kafkalite.records.batch import CONTROL_FLAG_MASK, LOG_OVERHEAD, MAGIC_V2, RECORD_BATCH_OVERHEAD

# Error codes returned by the kernels, with (code, detail, batch, record).
OK = 0
PAST_PAYLOAD = 1  # a record's length varint or body runs past its batch's payload
NEGATIVE_LENGTH = 2  # detail: the length
TOO_LONG = 3  # detail: index into FIELDS
LENGTHS = 4  # a key, value or header count does not fit in its record
NOT_AT_END = 5  # a record's fields end before or after its length says
BAD_HEADER = 6  # a header key length below 0, or a value length below -1
BATCH_LENGTH = 7  # detail: a batch length field below the v2 header's size
MAGIC = 8  # detail: the magic byte of a batch that is not v2
BATCH_COUNT = 9  # detail: a record count that is negative or cannot fit in an uncompressed batch

MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # a v2 batch's length field covers at least its header

FIELDS = ("record length", "timestamp delta", "offset delta", "key length", "value length", "header count",
          "header key length", "header value length")
_MAX_BYTES = (5, 10, 5, 5, 5, 5, 5, 5)  # varint for ints, varlong for the timestamp delta, as Kafka reads them

# libc's memcpy, bound by symbol name (addresses as integers), so compiled code that calls it can be cached
_memcpy = types.ExternalFunction("memcpy", types.uintp(types.uintp, types.uintp, types.uintp))


@njit(cache=True, nogil=True, inline="always")
def _varint(u8: np.ndarray, p: int, end: int, max_bytes: int) -> tuple[int | np.int64, int]:
    """(zigzag value, next position) of the varint at p; next is -1 past `end`, -2 when too long.

    A 5-byte varint is read into 32 bits, as Kafka reads an int: bits beyond them wrap.
    """
    raw = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(max_bytes):
        if p >= end:
            return 0, -1
        b = np.uint64(u8[p])
        p += 1
        raw |= (b & np.uint64(0x7F)) << shift
        if b < 0x80:
            if max_bytes == 5:
                raw &= np.uint64(0xFFFFFFFF)  # then the zigzag below lands in the int32 range
            return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), p
        shift += np.uint64(7)
    return 0, -2


@njit(cache=True, nogil=True, inline="always")
def _be32(u8: np.ndarray, p: int) -> np.int64:
    return np.int64(np.int32(np.uint32((np.uint32(u8[p]) << np.uint32(24)) | (np.uint32(u8[p + 1]) << np.uint32(16))
                                       | (np.uint32(u8[p + 2]) << np.uint32(8)) | np.uint32(u8[p + 3]))))


@njit(cache=True, nogil=True, inline="always")
def _be64(u8: np.ndarray, p: int) -> np.int64:
    v = np.uint64(0)
    for i in range(8):
        v = (v << np.uint64(8)) | np.uint64(u8[p + i])
    return np.int64(v)


# Columns of the table `frame_batches` returns, one row per complete batch.
POSITION, SIZE, BASE_OFFSET, COUNT, BASE_TIMESTAMP, LOG_APPEND_TIME, CODEC, CRC, KEEP, LAST_OFFSET = range(10)


@njit(cache=True, nogil=True)
def frame_batches(u8, start, end):
    """The complete batches at the start of a chunk, with the header facts the decoder needs.

    Returns (code, detail, facts): facts has a row per batch framed (columns above), the last one
    being the batch at fault when code is not OK. A batch cut short by the end of the chunk ends
    the table quietly. KEEP marks data batches with records in [start, end). CRCs are left to the
    caller (they need the crc32c library).
    """
    n = u8.size
    pos = 0
    rows = 0
    while n - pos >= RECORD_BATCH_OVERHEAD:  # first pass: how many rows
        length = _be32(u8, pos + 8)
        rows += 1
        if length < MIN_BATCH_LENGTH or pos + length + LOG_OVERHEAD > n:
            break
        pos += length + LOG_OVERHEAD
    facts = np.empty((rows, 10), dtype=np.int64)
    pos = 0
    for i in range(rows):
        length = _be32(u8, pos + 8)
        if length < MIN_BATCH_LENGTH:
            facts[i, POSITION] = pos
            facts[i, BASE_OFFSET] = _be64(u8, pos)
            return BATCH_LENGTH, length, facts[: i + 1]
        size = length + LOG_OVERHEAD
        if pos + size > n:
            return OK, 0, facts[:i]
        magic = np.int64(u8[pos + 16])
        base = _be64(u8, pos)
        attrs = (np.int64(u8[pos + 21]) << 8) | np.int64(u8[pos + 22])
        count = _be32(u8, pos + 57)
        lod = _be32(u8, pos + 23)
        facts[i, POSITION] = pos
        facts[i, SIZE] = size
        facts[i, BASE_OFFSET] = base
        facts[i, COUNT] = count
        facts[i, BASE_TIMESTAMP] = _be64(u8, pos + 27)
        facts[i, LOG_APPEND_TIME] = _be64(u8, pos + 35) if attrs & 0x08 else -1
        facts[i, CODEC] = attrs & 0x07
        facts[i, CRC] = np.int64(_be32(u8, pos + 17)) & 0xFFFFFFFF
        wanted = not attrs & CONTROL_FLAG_MASK and count > 0 and base + lod >= start and base < end
        facts[i, KEEP] = 1 if wanted else 0
        facts[i, LAST_OFFSET] = base + lod
        if magic != MAGIC_V2:
            return MAGIC, magic, facts[: i + 1]
        if count < 0 or (not attrs & 0x07 and count > (size - RECORD_BATCH_OVERHEAD) // 7 + 1):
            return BATCH_COUNT, count, facts[: i + 1]
        pos += size
    return OK, 0, facts


@njit(cache=True, nogil=True, inline="always")
def _sized(u8: np.ndarray, q: int, stop: int) -> tuple[int, int | np.int64, int]:
    """(error code, length, where the bytes start) of a length-prefixed field: a key or a value,
    whose length -1 means null. The bytes must end by `stop`."""
    n, q = _varint(u8, q, stop, 5)
    if q < 0:
        return (TOO_LONG if q == -2 else NOT_AT_END), 0, q
    if n < -1 or q + max(n, 0) > stop:
        return LENGTHS, 0, q
    return OK, n, q


# a hot decoder: one pass per batch or record, kept whole on purpose
@njit(cache=True, nogil=True)
def walk_records(u8, payload_starts, payload_ends, counts, rec_end, ts_delta, offset_delta, key_start, key_len,  # noqa: C901
                 value_start, value_len, header_at, header_count):
    """Every record of every batch: its fields' positions and values, into the arrays given.

    Returns (code, detail, batch, record). Records without headers are checked to end exactly at
    their length here; those with headers are checked by `walk_headers`.

    Two passes. The first follows each batch's chain of record lengths, with all batches in
    lockstep: one chain is a series of dependent loads, each likely a cache miss (records are
    hundreds of bytes apart), but the chains of different batches are independent, so the CPU
    overlaps their misses. The second pass parses each record's fields, whose positions are then
    all known in advance.
    """
    nb = counts.size
    first = np.empty(nb, dtype=np.int64)  # index of each batch's first record
    pos = payload_starts.copy()
    steps = 0
    r = 0
    for b in range(nb):
        first[b] = r
        r += counts[b]
        steps = max(steps, counts[b])
    body = key_start  # the first pass leaves each record's body start here; the second overwrites it
    for k in range(steps):
        for b in range(nb):
            if k >= counts[b]:
                continue
            p = pos[b]
            end = payload_ends[b]
            size, q = _varint(u8, p, end, 5)
            if q == -2:
                return TOO_LONG, 0, b, first[b] + k
            if q < 0:
                return PAST_PAYLOAD, 0, b, first[b] + k
            if size < 0:
                return NEGATIVE_LENGTH, size, b, first[b] + k
            if q + size > end:
                return PAST_PAYLOAD, 0, b, first[b] + k
            body[first[b] + k] = q
            rec_end[first[b] + k] = q + size
            pos[b] = q + size
    for b in range(nb):
        if pos[b] != payload_ends[b]:
            return NOT_AT_END, 0, b, first[b] + counts[b] - 1
    b = 0
    for r in range(rec_end.size):
        while b + 1 < nb and r >= first[b + 1]:
            b += 1
        stop = rec_end[r]
        q = body[r] + 1  # attributes: unused in v2
        v, q = _varint(u8, q, stop, 10)
        if q < 0:
            return (TOO_LONG, 1, b, r) if q == -2 else (NOT_AT_END, 0, b, r)
        ts_delta[r] = v
        v, q = _varint(u8, q, stop, 5)
        if q < 0:
            return (TOO_LONG, 2, b, r) if q == -2 else (NOT_AT_END, 0, b, r)
        offset_delta[r] = v
        for field in (3, 4):  # the key, then the value (FIELDS)
            code, n, q = _sized(u8, q, stop)
            if code:
                return code, field if code == TOO_LONG else 0, b, r
            (key_start if field == 3 else value_start)[r] = q
            (key_len if field == 3 else value_len)[r] = n
            q += max(n, 0)
        n, q = _varint(u8, q, stop, 5)
        if q < 0:
            return (TOO_LONG, 5, b, r) if q == -2 else (NOT_AT_END, 0, b, r)
        if n < 0 or n > stop - q:
            return LENGTHS, 0, b, r
        header_at[r] = q
        header_count[r] = n
        if n == 0 and q != stop:
            return NOT_AT_END, 0, b, r
    return OK, 0, 0, rec_end.size


@njit(cache=True, nogil=True)
def walk_headers(u8, rows, header_at, header_count, rec_end, first_slot, hk_start, hk_len, hv_start, hv_len):
    """The headers of the records in `rows` (those with any), into slots from `first_slot` on.

    Returns (code, detail, record).
    """
    for r in rows:
        q = header_at[r]
        stop = rec_end[r]
        slot = first_slot[r]
        for _ in range(header_count[r]):
            n, q = _varint(u8, q, stop, 5)
            if q < 0:
                return (TOO_LONG, 6, r) if q == -2 else (NOT_AT_END, 0, r)
            if n < 0:
                return BAD_HEADER, 0, r
            if q + n > stop:
                return LENGTHS, 0, r
            hk_start[slot] = q
            hk_len[slot] = n
            q += n
            n, q = _varint(u8, q, stop, 5)
            if q < 0:
                return (TOO_LONG, 7, r) if q == -2 else (NOT_AT_END, 0, r)
            if n < -1:
                return BAD_HEADER, 0, r
            if q + max(n, 0) > stop:
                return LENGTHS, 0, r
            hv_start[slot] = q
            hv_len[slot] = n
            q += max(n, 0)
            slot += 1
        if q != stop:
            return NOT_AT_END, 0, r
    return OK, 0, 0


@njit(cache=True, nogil=True)
def gather(u8, starts, lengths, out, out_offsets, at):
    """Copy each `u8[start:start+length]` (none for a negative length) back to back into `out`,
    from `out[at]` on; returns where the next copy would go.

    `out_offsets` gets n+1 entries: where each slice begins in `out`, and where the last ends. The
    caller sizes `out` from the lengths, which `walk_records` checked to lie inside the buffer.
    """
    src = u8.ctypes.data
    dst = out.ctypes.data
    out_offsets[0] = at
    for i in range(starts.size):
        n = lengths[i]
        if n > 0:
            _memcpy(dst + at, src + starts[i], n)
            at += n
        out_offsets[i + 1] = at
    return at


_MESSAGES = {
    PAST_PAYLOAD: "records run past the end of the payload",
    NEGATIVE_LENGTH: "negative record length {detail}",
    LENGTHS: "a record's lengths do not match its size",
    NOT_AT_END: "a record does not end where its length says",
    BAD_HEADER: "a header has a negative key length or an invalid value length",
    BATCH_LENGTH: "batch length {detail} is below the minimum " + str(MIN_BATCH_LENGTH),
    MAGIC: "magic {detail}: only the v2 record format is read",
    BATCH_COUNT: "record count {detail} cannot fit in the batch",
}


def describe(code: int, detail: int) -> str:
    """The message for a kernel's error code (`detail` as the kernel returned it)."""
    if code == TOO_LONG:
        return f"{FIELDS[detail]} varint is longer than {_MAX_BYTES[detail]} bytes"
    return _MESSAGES.get(code, "unknown decoder error {code}").format(detail=detail, code=code)


def warm_up() -> None:
    """Load (or compile) every kernel for the argument types the decoder passes, now.

    Chunks are read-only (`bytes`) or writable (a reused `bytearray`), which numba compiles
    separately. Loading creates tens of thousands of long-lived objects, which a worker wants in
    place before it freezes its heap (see `reading`).
    """
    one = np.ones(1, dtype=np.int64)
    zero = np.zeros(1, dtype=np.int64)
    for u8 in (np.frombuffer(b"\x00" * 7, dtype=np.uint8), np.zeros(7, dtype=np.uint8)):
        frame_batches(u8, 0, 1)
        walk_records(u8, zero, np.full(1, 7, dtype=np.int64), one, *(np.empty(1, dtype=np.int64) for _ in range(9)))
        walk_headers(u8, zero, zero, zero, zero, zero, *(np.empty(0, dtype=np.int64) for _ in range(4)))
        gather(u8, zero, zero, np.empty(0, dtype=np.uint8), np.empty(2, dtype=np.int32), 0)
