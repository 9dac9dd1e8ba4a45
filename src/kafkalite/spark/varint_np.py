"""Zigzag varints decoded at many positions at once, with numpy.

Records inside a batch are a chain (each starts where the previous ends), but once the start of
every record is known, each field of all records can be decoded together: byte k of every varint
is one gather, so a field costs a few array operations whatever the number of records. Most
varints in real data are one or two bytes, so the loop over byte positions usually stops early.
"""

from __future__ import annotations

import numpy as np

from kafkalite.errors import InvalidRecordError

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


def width_at(u8: np.ndarray, pos: np.ndarray, max_bytes: int = VARINT_MAX_BYTES) -> np.ndarray | int:
    """Bytes taken by the varint at each position (its value is not needed), 1 when all are one byte."""
    last = len(u8) - 1
    cont = u8[np.minimum(pos, last)] >= 0x80
    if not cont.any():
        return 1
    width = 1 + cont.astype(np.int64)
    more = np.flatnonzero(cont)
    for k in range(1, max_bytes):
        more = more[u8[np.minimum(pos[more] + k, last)] >= 0x80]
        if more.size == 0:
            return width
        width[more] += 1
    raise InvalidRecordError(f"varint is longer than {max_bytes} bytes")


def decode_at(u8: np.ndarray, pos: np.ndarray, max_bytes: int, what: str) -> tuple[np.ndarray, np.ndarray | int]:
    """(value, width) of the zigzag varint starting at each position of `pos` (int64 array); the
    width is the plain int 1 when every varint is one byte.

    Positions past the buffer read its last byte instead of failing: callers check every record
    parses to exactly its own length afterwards, which a read past the end can never satisfy.
    A varint longer than `max_bytes` raises InvalidRecordError, as Kafka's ByteUtils does.
    """
    last = len(u8) - 1
    if pos.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty
    b = u8[np.minimum(pos, last)]
    wide = b >= 0x80
    if not wide.any():  # every value fits one byte: the common case for most fields
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), 1
    b1 = u8[np.minimum(pos + 1, last)]
    if not (wide & (b1 >= 0x80)).any():  # at most two bytes: lengths below 8 KiB, deltas below 8192
        v = np.where(wide, (b & 0x7F).astype(np.int64) | (b1.astype(np.int64) << 7), b.astype(np.int64))
        return (v >> 1) ^ -(v & 1), 1 + wide.astype(np.int64)
    raw = (b & 0x7F).astype(np.uint64)
    width = np.ones(pos.size, dtype=np.int64)
    more = np.flatnonzero(b & 0x80)
    shift = 7
    for _ in range(1, max_bytes):
        if more.size == 0:
            break
        bj = u8[np.minimum(pos[more] + (shift // 7), last)]
        raw[more] |= (bj & 0x7F).astype(np.uint64) << np.uint64(shift)
        width[more] += 1
        more = more[(bj & 0x80) != 0]
        shift += 7
    if more.size:
        raise InvalidRecordError(f"{what} varint is longer than {max_bytes} bytes")
    if max_bytes == VARINT_MAX_BYTES:
        raw &= np.uint64(0xFFFFFFFF)  # Kafka reads a varint into an int: a 5-byte encoding wraps to 32 bits
    value = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return value, width
