"""Kafka's message-schema primitives, just enough for the coordinator's own record and protocol bytes.

The `__consumer_offsets` records and the embedded consumer protocol are generated from Kafka's JSON
schemas with the same primitive types as the wire protocol (int16 length strings, int32 length bytes,
and, in flexible versions, unsigned-varint "compact" lengths plus tagged fields). The coordinator owns
these few formats, so it carries this small reader/writer instead of depending on the request codec.
"""

from __future__ import annotations

import struct

from kafkalite.errors import CorruptRecordError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Writer:
    """Appends big-endian schema primitives to a bytearray."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, v: int) -> Writer:
        self.buf += _I8.pack(v)
        return self

    def int16(self, v: int) -> Writer:
        self.buf += _I16.pack(v)
        return self

    def int32(self, v: int) -> Writer:
        self.buf += _I32.pack(v)
        return self

    def int64(self, v: int) -> Writer:
        self.buf += _I64.pack(v)
        return self

    def uvarint(self, v: int) -> Writer:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)
        return self

    def string(self, s: str | None, *, compact: bool = False) -> Writer:
        """STRING / NULLABLE_STRING (int16 length, -1 = null) or their compact forms (uvarint len+1)."""
        if s is None:
            return self.uvarint(0) if compact else self.int16(-1)
        data = s.encode()
        if compact:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise ValueError(f"string of {len(data)} bytes is longer than a schema string allows (32767)")
            self.int16(len(data))
        self.buf += data
        return self

    def bytes_(self, b: bytes | None, *, compact: bool = False) -> Writer:
        """BYTES / NULLABLE_BYTES (int32 length, -1 = null) or their compact forms."""
        if b is None:
            return self.uvarint(0) if compact else self.int32(-1)
        if compact:
            self.uvarint(len(b) + 1)
        else:
            self.int32(len(b))
        self.buf += b
        return self

    def array_len(self, n: int | None, *, compact: bool = False) -> Writer:
        if n is None:
            return self.uvarint(0) if compact else self.int32(-1)
        return self.uvarint(n + 1) if compact else self.int32(n)

    def no_tagged_fields(self) -> Writer:
        """An empty TAGGED_FIELDS section: Kafka writes a tagged field only when it differs from its default."""
        return self.uvarint(0)

    def getvalue(self) -> bytes:
        return bytes(self.buf)


class Reader:
    """Reads schema primitives from bytes; any overrun is a CorruptRecordError naming the field."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = bytes(buf)
        self.pos = pos

    def _take(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise CorruptRecordError(f"{what}: needs {n} bytes at position {self.pos}, only "
                                     f"{len(self.buf) - self.pos} left")
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def _unpack(self, st: struct.Struct, what: str) -> int:
        return st.unpack(self._take(st.size, what))[0]

    def int8(self, what: str = "int8") -> int:
        return self._unpack(_I8, what)

    def int16(self, what: str = "int16") -> int:
        return self._unpack(_I16, what)

    def int32(self, what: str = "int32") -> int:
        return self._unpack(_I32, what)

    def int64(self, what: str = "int64") -> int:
        return self._unpack(_I64, what)

    def uvarint(self, what: str = "varint") -> int:
        shift = value = 0
        while True:
            b = self._take(1, what)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise CorruptRecordError(f"{what}: unsigned varint longer than 5 bytes")

    def _length(self, compact: bool, wide: bool, what: str) -> int:
        if compact:
            return self.uvarint(what) - 1
        return self.int32(what) if wide else self.int16(what)

    def nullable_string(self, what: str = "string", *, compact: bool = False) -> str | None:
        n = self._length(compact, False, what)
        if n < 0:
            return None
        try:
            return self._take(n, what).decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{what}: not UTF-8 ({exc})") from None

    def string(self, what: str = "string", *, compact: bool = False) -> str:
        s = self.nullable_string(what, compact=compact)
        if s is None:
            raise CorruptRecordError(f"{what}: null where the schema allows no null")
        return s

    def nullable_bytes(self, what: str = "bytes", *, compact: bool = False) -> bytes | None:
        n = self._length(compact, True, what)
        return None if n < 0 else self._take(n, what)

    def bytes_(self, what: str = "bytes", *, compact: bool = False) -> bytes:
        b = self.nullable_bytes(what, compact=compact)
        if b is None:
            raise CorruptRecordError(f"{what}: null where the schema allows no null")
        return b

    def array_len(self, what: str = "array", *, compact: bool = False) -> int:
        """Element count; a null array reads as 0 elements (callers that care check for -1 themselves)."""
        n = self._length(compact, True, what)
        if n > len(self.buf) - self.pos:
            raise CorruptRecordError(f"{what}: {n} elements cannot fit in {len(self.buf) - self.pos} bytes")
        return max(n, 0)

    def skip_tagged_fields(self, what: str = "tagged fields") -> None:
        """Tagged fields this reader does not know are skipped, as Kafka's generated readers do."""
        for _ in range(self.uvarint(what)):
            self.uvarint(what)
            self._take(self.uvarint(what), what)

    def remaining(self) -> int:
        return len(self.buf) - self.pos
