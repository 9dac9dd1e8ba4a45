"""Numpy decoding of the records inside v2 batches, for the cleaner's hot loops.

The cleaner has to open every record of the dirty section twice (once to build the key map, once
to filter), which a per-record Python loop cannot do at a million records a second. Here a whole
chunk of batches is decoded at once:

* records are located by following their length varints in all batches of the chunk in parallel
  (one numpy step per record *position*, not per record);
* every field the cleaner needs (offset delta, timestamp delta, key span, value length) is then
  decoded for all records with a handful of array operations;
* keys are hashed in bulk, 8 bytes per step, into two independent 64-bit hashes.

Buffers handed to these functions are `PaddedBuffer`s: data framed by zero bytes, so that an
8-byte word can be read at any data position (the key hash reads the word *ending* at a key's end).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafkalite.errors import InvalidRecordError
from kafkalite.records.varint import decode_varlong

FRONT_PAD = 8
BACK_PAD = 16

_U64 = np.uint64
_CONT = _U64(0x8080808080808080)
_LOW7 = _U64(0x7F7F7F7F7F7F7F7F)
_BYTE_MASK = np.array([(1 << (8 * s)) - 1 for s in range(9)], dtype=np.uint64)


def _two_byte_tables() -> tuple[np.ndarray, np.ndarray]:
    """Every little-endian 16-bit window -> (zigzag value, size) of the varint starting there; size 0
    when the varint is longer than two bytes. One table lookup decodes most varints in records."""
    w = np.arange(1 << 16, dtype=np.int64)
    b0, b1 = w & 0xFF, w >> 8
    cont = b0 >> 7
    raw = (b0 & 0x7F) | ((b1 & 0x7F) << 7) * cont
    size = np.where(cont & (b1 >> 7), 0, 1 + cont)
    return (raw >> 1) ^ -(raw & 1), size.astype(np.int64)


_ZIGZAG2, _SIZE2 = _two_byte_tables()
_ZIGZAG1 = _ZIGZAG2[:256]
_ONES = np.ones(1 << 16, dtype=np.int64)
_ONES.flags.writeable = False


class PaddedBuffer:
    """Bytes at [FRONT_PAD, FRONT_PAD + n) of a zero-framed uint8 array, with 2- and 8-byte word views."""

    __slots__ = ("array", "halves", "n", "raw", "words")

    def __init__(self, capacity: int) -> None:
        self.raw = bytearray(FRONT_PAD + capacity + BACK_PAD)
        self.array = np.frombuffer(self.raw, dtype=np.uint8)
        self.words = np.ndarray((len(self.raw) - 7,), dtype="<u8", buffer=self.raw, offset=0, strides=(1,))
        self.halves = np.ndarray((len(self.raw) - 1,), dtype="<u2", buffer=self.raw, offset=0, strides=(1,))
        self.n = 0

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview) -> PaddedBuffer:
        buf = cls(len(data))
        buf.raw[FRONT_PAD : FRONT_PAD + len(data)] = data
        buf.n = len(data)
        return buf

    @property
    def capacity(self) -> int:
        return len(self.raw) - FRONT_PAD - BACK_PAD

    @property
    def data(self) -> memoryview:
        return memoryview(self.raw)[FRONT_PAD : FRONT_PAD + self.n]


# --- varints ------------------------------------------------------------------------------------


def read_varints(buf: PaddedBuffer, pos: np.ndarray, small: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at absolute positions of `buf.raw`: (values, sizes in bytes), both int64.

    One- and two-byte varints (lengths below 8 KiB, small deltas) are one table lookup on the
    16-bit window at each position; if any is longer, the whole array takes the general path on
    8-byte words. A varint longer than 8 bytes (only huge timestamp deltas) is decoded alone.
    `small` tries one-byte varints first (timestamp and offset deltas, key lengths).
    """
    # all one byte: a byte gather is 4x cheaper than a 16-bit one
    if small and len(pos) and (b0 := buf.array[pos]).max() < 0x80:
        return _ZIGZAG1[b0], _ONES[: len(pos)] if len(pos) <= len(_ONES) else np.ones(len(pos), dtype=np.int64)
    w = buf.halves[pos]
    size = _SIZE2[w]
    if size.all():
        return _ZIGZAG2[w], size
    return _read_varints_long(buf, pos)


def _read_varints_long(buf: PaddedBuffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w = buf.words[pos]
    term = ~w & _CONT
    low = term & (~term + _U64(1))
    size = (np.bitwise_count(low - _U64(1)).astype(np.int64) + 1) >> 3
    x = w & _BYTE_MASK[size] & _LOW7
    x = (x & _U64(0x007F007F007F007F)) | ((x >> _U64(1)) & _U64(0x3F803F803F803F80))
    x = (x & _U64(0x00003FFF00003FFF)) | ((x >> _U64(2)) & _U64(0x0FFFC0000FFFC000))
    x = (x & _U64(0x000000000FFFFFFF)) | ((x >> _U64(4)) & _U64(0x00FFFFFFF0000000))
    values = (x >> _U64(1)).view(np.int64) ^ -(x & _U64(1)).view(np.int64)
    overlong = np.flatnonzero(term == 0)
    if len(overlong):
        raw = bytes(buf.raw)
        for i in overlong:
            values[i], end = decode_varlong(raw, int(pos[i]))
            size[i] = end - int(pos[i])
    return values, size


# --- records ------------------------------------------------------------------------------------


@dataclass(slots=True)
class RecordArrays:
    """Per-record fields of a set of batches, records of batch b at [first[b], first[b + 1])."""

    first: np.ndarray  # int64, len = batches + 1
    batch: np.ndarray  # batch index of each record
    start: np.ndarray  # absolute position of the record's length varint
    end: np.ndarray  # absolute position after the record
    ts_pos: np.ndarray  # position of the timestamp delta (after the attributes byte)
    ts_end: np.ndarray  # position after the timestamp delta
    ts_delta: np.ndarray
    offset_delta: np.ndarray
    key_start: np.ndarray
    key_len: np.ndarray  # -1: no key
    value_len: np.ndarray  # -1: no value (a tombstone); not decoded (a copy of key_len) for the key map

    def __len__(self) -> int:
        return len(self.batch)


def decode_records(buf: PaddedBuffer, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray,
                   values: bool = True) -> RecordArrays:
    """Decode the records sections [starts[b], ends[b]) (absolute positions) holding counts[b] records.

    Raises InvalidRecordError where Kafka's record iterator would: a section that does not hold
    exactly its count of records, or a record whose fields run past its length.
    """
    nb = len(starts)
    counts = counts.astype(np.int64)
    first = np.zeros(nb + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    total = int(first[-1])
    ends = ends.astype(np.int64)
    rec_start, body, rec_end = _locate_records(buf, starts.astype(np.int64), ends, counts, first)
    if total and (rec_end <= body).any():  # a wild (negative) length sent the walk backwards
        raise InvalidRecordError("invalid record size")
    if ((counts == 0) & (starts != ends)).any():
        raise InvalidRecordError("incorrect declared batch size, records still remaining")
    batch = np.repeat(np.arange(nb, dtype=np.int64), counts)
    ts_pos = body + 1
    ts_delta, ts_size = read_varints(buf, ts_pos)
    off_pos = ts_pos + ts_size
    offset_delta, off_size = read_varints(buf, off_pos)
    kl_pos = off_pos + off_size
    _check_within(kl_pos, rec_end)
    key_len, kl_size = read_varints(buf, kl_pos)
    key_start = kl_pos + kl_size
    vl_pos = key_start + np.maximum(key_len, 0)
    _check_within(vl_pos, rec_end)
    if values:  # building the key map needs no value lengths
        value_len, vl_size = read_varints(buf, vl_pos)
        _check_within(vl_pos + vl_size + np.maximum(value_len, 0), rec_end + 1)
    else:
        value_len = key_len
    return RecordArrays(first, batch, rec_start, rec_end, ts_pos, off_pos, ts_delta, offset_delta, key_start,
                        key_len, value_len)


def _locate_records(buf: PaddedBuffer, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray,
                    first: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, body start, end) of every record, batch-major, found by following the length varints
    of all batches at once.

    Batches are ordered by record count (most first) so that step i works on a prefix of them. A
    record ends where the next one starts, and the walk of each batch must end exactly at the
    batch's end, else the batch is invalid.
    """
    total = int(first[-1])
    if total == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.argsort(-counts, kind="stable")
    desc = counts[order]
    max_count = int(desc[0])
    remaining = np.searchsorted(-desc, -np.arange(max_count), side="left")  # batches with > i records
    row_off = np.zeros(max_count + 1, dtype=np.int64)
    np.cumsum(remaining, out=row_off[1:])
    flat_start = np.empty(total, dtype=np.int64)
    flat_body = np.empty(total, dtype=np.int64)
    flat_end = np.empty(total, dtype=np.int64)
    pos = starts[order]
    try:
        for i in range(max_count):
            k = int(remaining[i])
            p = pos[:k]
            lo, hi = row_off[i], row_off[i] + k
            flat_start[lo:hi] = p
            length, size = read_varints(buf, p, small=False)
            p += size
            flat_body[lo:hi] = p
            p += length
            flat_end[lo:hi] = p
    except IndexError:  # a wild length walked off the buffer (a negative one is caught below)
        raise InvalidRecordError("a record length runs past the batch") from None
    if (pos != ends[order]).any():
        raise InvalidRecordError("record sizes do not add up to the batch size")
    row = np.repeat(np.arange(max_count, dtype=np.int64), remaining)
    col = np.arange(total, dtype=np.int64) - row_off[row]
    dest = first[order[col]] + row
    out = np.empty((3, total), dtype=np.int64)
    out[0, dest] = flat_start
    out[1, dest] = flat_body
    out[2, dest] = flat_end
    return out[0], out[1], out[2]


def _check_within(pos: np.ndarray, end: np.ndarray) -> None:
    if len(pos) and (pos >= end).any():
        raise InvalidRecordError("a record's fields run past its length")


# --- key hashing --------------------------------------------------------------------------------

_M1 = _U64(0x9E3779B97F4A7C15)
_M2 = _U64(0xC2B2AE3D27D4EB4F)
_M3 = _U64(0x165667B19E3779F9)
_F1 = _U64(0xFF51AFD7ED558CCD)
_F2 = _U64(0xC4CEB9FE1A85EC53)
_SEED1 = _U64(0x243F6A8885A308D3)
_SEED2 = _U64(0x13198A2E03707344)


def _fmix(h: np.ndarray) -> np.ndarray:
    h ^= h >> _U64(33)
    h *= _F1
    h ^= h >> _U64(33)
    h *= _F2
    h ^= h >> _U64(33)
    return h


def hash_keys(buf: PaddedBuffer, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes of each key buf[starts[i] : starts[i] + lengths[i]].

    Together they play the part of Kafka's 16-byte MD5 digest: a 128-bit fingerprint stored in
    place of the key. Eight key bytes are folded in per step; a key's last partial word is read
    as the word ending at the key's end (the buffer's front padding makes that always possible).
    """
    lengths = lengths.astype(np.int64)
    ln = lengths.astype(np.uint64)
    h1 = _SEED1 ^ (ln * _M3)
    h2 = _SEED2 + ln * _M1
    words = buf.words
    n_full = lengths >> 3
    for k in range(int(n_full.max()) if len(lengths) else 0):
        sel = np.flatnonzero(n_full > k)
        whole = len(sel) == len(lengths)
        w = words[starts + 8 * k] if whole else words[starts[sel] + 8 * k]
        if whole:
            h1 = (h1 ^ w) * _M1
            h1 ^= h1 >> _U64(31)
            h2 = (h2 + w) * _M2
            h2 ^= h2 >> _U64(29)
        else:
            a = (h1[sel] ^ w) * _M1
            h1[sel] = a ^ (a >> _U64(31))
            b = (h2[sel] + w) * _M2
            h2[sel] = b ^ (b >> _U64(29))
    rem = lengths & 7
    sel = np.flatnonzero(rem)
    if len(sel):
        w = words[starts[sel] + lengths[sel] - 8] >> (_U64(64) - _U64(8) * rem[sel].astype(np.uint64))
        a = (h1[sel] ^ w) * _M1
        h1[sel] = a ^ (a >> _U64(31))
        b = (h2[sel] + w) * _M2
        h2[sel] = b ^ (b >> _U64(29))
    return _fmix(h1), _fmix(h2)


def hash_key(key: bytes) -> tuple[int, int]:
    """The hash pair of one key, exactly as `hash_keys` computes it inside a larger buffer."""
    buf = PaddedBuffer.of(key)
    h1, h2 = hash_keys(buf, np.array([FRONT_PAD], dtype=np.int64), np.array([len(key)], dtype=np.int64))
    return int(h1[0]), int(h2[0])


# --- re-encoding survivors ----------------------------------------------------------------------

_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def _varint_sizes(zz: np.ndarray) -> np.ndarray:
    return np.searchsorted(_VARINT_LIMITS, zz, side="right").astype(np.int64) + 1


def _put_varints(out: np.ndarray, at: np.ndarray, zz: np.ndarray, sizes: np.ndarray) -> None:
    for j in range(int(sizes.max()) if len(sizes) else 0):
        rows = np.flatnonzero(sizes > j)
        byte = ((zz[rows] >> _U64(7 * j)) & _U64(0x7F)).astype(np.uint8)
        byte |= (sizes[rows] > j + 1).astype(np.uint8) << 7
        out[at[rows] + j] = byte


def encode_survivors(buf: PaddedBuffer, r: RecordArrays, sel: np.ndarray,
                     new_delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The records `sel` laid end to end, each with timestamp delta `new_delta`; and record boundaries.

    A record whose delta does not change is copied byte for byte; one whose delta changes gets a new
    length, its attributes byte, the new delta, then its bytes from the offset delta on. All records
    of a chunk are assembled in a few array operations (one gather of every output byte).
    """
    n = len(sel)
    start, end, ts_end = r.start[sel], r.end[sel], r.ts_end[sel]
    change = new_delta != r.ts_delta[sel]
    zz_ts = ((new_delta << 1) ^ (new_delta >> 63)).view(np.uint64)
    ts_size = _varint_sizes(zz_ts)
    body_len = 1 + ts_size + (end - ts_end)
    zz_len = (body_len << 1).view(np.uint64)
    len_size = _varint_sizes(zz_len)
    hdr = np.where(change, len_size + 1 + ts_size, 0)
    src0 = np.where(change, ts_end, start)
    rec_len = hdr + end - src0
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(rec_len, out=bounds[1:])
    total = int(bounds[-1])
    shift = np.repeat(src0 - hdr - bounds[:-1], rec_len)
    shift += np.arange(total, dtype=np.int64)
    out = buf.array[shift]
    ch = np.flatnonzero(change)
    if len(ch):
        at = bounds[ch]
        _put_varints(out, at, zz_len[ch], len_size[ch])
        out[at + len_size[ch]] = buf.array[r.ts_pos[sel[ch]] - 1]
        _put_varints(out, at + len_size[ch] + 1, zz_ts[ch], ts_size[ch])
    return out, bounds
