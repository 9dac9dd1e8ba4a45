"""Protobuf-style zigzag varints, as Kafka's ByteUtils writes them in v2 records.

Decoders take `bytes` and a position and return (value, next position). They are on the record
decoding hot path, so the one-byte case (most lengths and deltas) returns before any loop.
Every malformed input raises InvalidRecordError, never IndexError.
"""

from __future__ import annotations

from kafkalite.errors import InvalidRecordError

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _unsigned_bytes(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Small non-negative and negative values dominate record framing; precompute them once.
_SMALL = {v: _unsigned_bytes(((v << 1) ^ (v >> 63)) & _MASK64) for v in range(-256, 4096)}


def encode_varint(value: int) -> bytes:
    """Zigzag int32 varint (1..5 bytes)."""
    cached = _SMALL.get(value)
    if cached is not None:
        return cached
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError(f"varint out of int32 range: {value}")
    return _unsigned_bytes(((value << 1) ^ (value >> 31)) & _MASK32)


def encode_varlong(value: int) -> bytes:
    """Zigzag int64 varlong (1..10 bytes)."""
    cached = _SMALL.get(value)
    if cached is not None:
        return cached
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varlong out of int64 range: {value}")
    return _unsigned_bytes(((value << 1) ^ (value >> 63)) & _MASK64)


def size_of_varint(value: int) -> int:
    return len(encode_varint(value))


def _decode_unsigned(buf: bytes, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos >= end:
            raise InvalidRecordError(f"premature end of data while reading a {what}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if i == max_bytes - 1:
            break
    raise InvalidRecordError(f"{what} is longer than {max_bytes} bytes")


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag int32 varint at `pos`; more than 5 bytes is invalid (Kafka's illegalVarintException)."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, 5, "varint")
    raw &= _MASK32
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag int64 varlong at `pos`; more than 10 bytes is invalid."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _decode_unsigned(buf, pos, 10, "varlong")
    raw &= _MASK64
    return (raw >> 1) ^ -(raw & 1), pos
