"""Readers and writers of the protocol's variable-length types, called by the generated codecs.

Fixed-width fields never come here: the compiler packs runs of them with one `struct` call. What is
left (strings, bytes, records, UUIDs, arrays, unsigned varints) lives here, in one place, so that
every length is checked against the bytes that remain *before* anything is sliced or allocated:
a 20-byte frame claiming 2**31-1 array elements fails at once instead of looping or allocating.

Readers take a memoryview of the whole frame and a position, and return (value, next position).
Writers append to a bytearray; records may instead go to `parts` (see `write_records`).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, NamedTuple

from kafkalite.protocol.exceptions import ProtocolDecodeError

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
_i16_from = I16.unpack_from
_i32_from = I32.unpack_from
_pack_i16 = I16.pack
_pack_i32 = I32.pack

NULL_I16 = b"\xff\xff"
NULL_I32 = b"\xff\xff\xff\xff"
ZERO_UUID = uuid.UUID(int=0)

# Records parts at least this big stay separate items in encode_response's result instead of being
# copied into the surrounding bytes: sendmsg() takes a list of buffers, so the copy would be waste.
BIG_PART = 32 * 1024


class FileRegion(NamedTuple):
    """Record bytes still on disk: `size` bytes of `fd` from `position`, for os.sendfile."""

    fd: int
    position: int
    size: int


def _short(what: str, need: int, have: int) -> ProtocolDecodeError:
    return ProtocolDecodeError(f"{what} of {need} bytes, but only {have} bytes remain")


# --- unsigned varints ----------------------------------------------------------------------------


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Kafka's unsigned varint: at most 5 bytes (a 32-bit value). Unrolled: record lengths take 2-3."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    b = buf[pos + 1]
    if b < 0x80:
        return result | b << 7, pos + 2
    result |= (b & 0x7F) << 7
    b = buf[pos + 2]
    if b < 0x80:
        return result | b << 14, pos + 3
    result |= (b & 0x7F) << 14
    b = buf[pos + 3]
    if b < 0x80:
        return result | b << 21, pos + 4
    result |= (b & 0x7F) << 21
    b = buf[pos + 4]
    if b < 0x80:
        return result | b << 28, pos + 5
    raise ProtocolDecodeError("unsigned varint longer than 5 bytes")


def uvarint(n: int) -> bytes:
    if n < 0x80:
        return _SMALL_UVARINTS[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0x200000:
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
    if n >> 32 or n < 0:
        raise ValueError(f"unsigned varint out of range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_UVARINTS = [bytes((n,)) for n in range(0x80)]


# --- strings -------------------------------------------------------------------------------------


def read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n = _i16_from(buf, pos)[0]
    pos += 2
    if n < 0:
        raise ProtocolDecodeError(f"non-nullable string has length {n}")
    end = pos + n
    if end > len(buf):
        raise _short("string", n, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def read_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n = _i16_from(buf, pos)[0]
    pos += 2
    if n < 0:
        if n == -1:
            return None, pos
        raise ProtocolDecodeError(f"string has length {n}")
    end = pos + n
    if end > len(buf):
        raise _short("string", n, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def read_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise ProtocolDecodeError("non-nullable compact string is null")
    end = pos + n - 1
    if end > len(buf):
        raise _short("string", n - 1, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise _short("string", n - 1, len(buf) - pos)
    return str(buf[pos:end], "utf-8"), end


def _encode_str(value: Any) -> bytes:
    if value.__class__ is str:
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"expected a str, got {type(value).__name__}")


def write_string(out: bytearray, value: str | None) -> None:
    """int16-length string; None (not allowed by the schema here) is written as ""."""
    if not value:
        out += b"\x00\x00"
        return
    b = _encode_str(value)
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes is longer than 32767")
    out += _pack_i16(len(b))
    out += b


def write_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += NULL_I16
    else:
        write_string(out, value)


def write_compact_string(out: bytearray, value: str | None) -> None:
    if not value:
        out += b"\x01"
        return
    b = _encode_str(value)
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes is longer than 32767")
    out += uvarint(len(b) + 1)
    out += b


def write_compact_nullable_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += b"\x00"
    else:
        write_compact_string(out, value)


# --- bytes and records ---------------------------------------------------------------------------


def _read_blob(buf: memoryview, pos: int, n: int, nullable: bool, what: str) -> tuple[memoryview | None, int]:
    if n < 0:
        if n == -1 and nullable:
            return None, pos
        raise ProtocolDecodeError(f"{what} has length {n}")
    end = pos + n
    if end > len(buf):
        raise _short(what, n, len(buf) - pos)
    return buf[pos:end], end


def read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    v, pos = _read_blob(buf, pos + 4, _i32_from(buf, pos)[0], False, "bytes")
    return bytes(v), pos  # type: ignore[arg-type]


def read_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    v, pos = _read_blob(buf, pos + 4, _i32_from(buf, pos)[0], True, "bytes")
    return (None if v is None else bytes(v)), pos


def read_compact_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos)
    v, pos = _read_blob(buf, pos, n - 1, False, "bytes")
    return bytes(v), pos  # type: ignore[arg-type]


def read_compact_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    v, pos = _read_blob(buf, pos, n - 1, True, "bytes")
    return (None if v is None else bytes(v)), pos


def read_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    """Records stay a slice of the frame: no copy on the produce path."""
    n = _i32_from(buf, pos)[0]
    pos += 4
    end = pos + n
    if n < 0 or end > len(buf):
        return _read_blob(buf, pos, n, True, "records")  # null, or the error
    return buf[pos:end], end


def read_compact_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    end = pos + n - 1
    if n == 0 or end > len(buf):
        return _read_blob(buf, pos, n - 1, True, "records")  # null, or the error
    return buf[pos:end], end


def write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        value = b""
    out += _pack_i32(len(value))
    out += value


def write_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += NULL_I32
    else:
        out += _pack_i32(len(value))
        out += value


def write_compact_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        value = b""
    out += uvarint(len(value) + 1)
    out += value


def write_compact_nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += b"\x00"
    else:
        out += uvarint(len(value) + 1)
        out += value


def _part_size(part: Any) -> int:
    if part.__class__ is FileRegion:
        return part.size
    if part.__class__ is memoryview:
        return part.nbytes
    return len(part)


def _flush(out: bytearray, parts: list) -> None:
    if out:
        parts.append(bytes(out))
        del out[:]


def _put_part(out: bytearray, parts: list | None, part: Any) -> None:
    """Append one records part: small buffers are copied into `out`, the rest become their own items."""
    if part.__class__ is FileRegion:
        if parts is None:
            raise ValueError("a FileRegion cannot be encoded here (tagged field or encode_request)")
        if part.size:
            _flush(out, parts)
            parts.append(part)
        return
    if part.__class__ is memoryview:
        if part.format != "B" or part.ndim != 1:
            part = part.cast("B")
        n = part.nbytes
    else:
        n = len(part)
    if n >= BIG_PART and parts is not None:
        _flush(out, parts)
        parts.append(part)
    else:
        out += part


def write_records(out: bytearray, parts: list | None, value: Any, compact: bool) -> None:
    """Records: None, a bytes-like object, a FileRegion, or a list of these (concatenated).

    The length prefix covers the total. FileRegions and big buffers end the current bytes part:
    encode_response hands them to the server as separate items (sendfile / sendmsg), never copied.
    """
    cls = value.__class__
    if cls is FileRegion:  # the broker's fetch path: no copy, no length walk
        n = value.size
        out += uvarint(n + 1) if compact else _pack_i32(n)
        if n:
            if parts is None:
                raise ValueError("a FileRegion cannot be encoded here (tagged field)")
            _flush(out, parts)
            parts.append(value)
        return
    if cls is bytes:
        n = len(value)
        out += uvarint(n + 1) if compact else _pack_i32(n)
        if n < BIG_PART or parts is None:
            out += value
        else:
            _flush(out, parts)
            parts.append(value)
        return
    if value is None:
        out += b"\x00" if compact else NULL_I32
        return
    if isinstance(value, list | tuple) and value.__class__ is not FileRegion:  # a FileRegion is a tuple too
        total = sum(map(_part_size, value))
        out += uvarint(total + 1) if compact else _pack_i32(total)
        for part in value:
            _put_part(out, parts, part)
        return
    n = _part_size(value)
    out += uvarint(n + 1) if compact else _pack_i32(n)
    _put_part(out, parts, value)


# --- UUIDs ---------------------------------------------------------------------------------------


def read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise _short("uuid", 16, len(buf) - pos)
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def write_uuid(out: bytearray, value: Any) -> None:
    """A uuid.UUID, 16 raw bytes, a UUID string, or None (the zero UUID)."""
    if value is None:
        out += bytes(16)
    elif isinstance(value, uuid.UUID):
        out += value.bytes
    elif isinstance(value, bytes | bytearray) and len(value) == 16:
        out += value
    else:
        out += uuid.UUID(str(value)).bytes


# --- arrays --------------------------------------------------------------------------------------


def read_array_len(buf: memoryview, pos: int, min_item: int, nullable: bool) -> tuple[int, int]:
    """An int32 element count, checked against the bytes left; -1 for a null array."""
    n = _i32_from(buf, pos)[0]
    pos += 4
    return _check_count(buf, pos, n, min_item, nullable), pos


def read_compact_array_len(buf: memoryview, pos: int, min_item: int, nullable: bool) -> tuple[int, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(buf, pos)
    return _check_count(buf, pos, n - 1, min_item, nullable), pos


def _check_count(buf: memoryview, pos: int, n: int, min_item: int, nullable: bool) -> int:
    if n < 0:
        if n == -1 and nullable:
            return -1
        raise ProtocolDecodeError(f"array has length {n}")
    if n * min_item > len(buf) - pos:
        raise ProtocolDecodeError(f"array of {n} elements (at least {n * min_item} bytes), "
                                  f"but only {len(buf) - pos} bytes remain")
    return n


_FIXED_ARRAY_STRUCTS: dict[tuple[str, int], struct.Struct] = {}


def read_fixed_array(buf: memoryview, pos: int, n: int, code: str, size: int) -> tuple[list, int]:
    """n fixed-width elements in one struct call (count already checked)."""
    key = (code, n)
    st = _FIXED_ARRAY_STRUCTS.get(key)
    if st is None:
        st = struct.Struct(f">{n}{code}")
        if n <= 64:
            _FIXED_ARRAY_STRUCTS[key] = st
    return list(st.unpack_from(buf, pos)), pos + n * size


def write_fixed_array(out: bytearray, values: Any, code: str) -> None:
    out += struct.pack(f">{len(values)}{code}", *values)


# --- tagged fields -------------------------------------------------------------------------------


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skip a whole tagged-field section (unknown tags only: headers, structs without known tags)."""
    n, pos = read_uvarint(buf, pos)
    if n and 2 * n > len(buf) - pos:
        raise ProtocolDecodeError(f"{n} tagged fields, but only {len(buf) - pos} bytes remain")
    for _ in range(n):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolDecodeError("tagged field runs past the end of the frame")
    return pos


def write_tagged_fields(out: bytearray, tags: list[tuple[int, bytes | bytearray]]) -> None:
    """Tags in ascending order (the compiler emits them sorted), each as tag, size, bytes."""
    out += uvarint(len(tags))
    for tag, data in tags:
        out += uvarint(tag)
        out += uvarint(len(data))
        out += data
