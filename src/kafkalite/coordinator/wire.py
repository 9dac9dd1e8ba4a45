"""Kafka's message-schema primitives, as the coordinator's own record and protocol bytes need them.

The `__consumer_offsets` records and the embedded consumer protocol are generated from Kafka's JSON
schemas with the same primitive types as the wire protocol (int16 length strings, int32 length bytes,
and, in flexible versions, unsigned-varint "compact" lengths plus tagged fields). `Writer` and `Reader`
are a cursor over the protocol layer's own primitives (`protocol/primitives.py`), so each format is
written once; what they add is the coordinator's error: a record that does not parse is a
CorruptRecordError (CORRUPT_MESSAGE) naming the field, not a malformed request.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from kafkalite.errors import CorruptRecordError
from kafkalite.protocol import primitives as p
from kafkalite.protocol.exceptions import ProtocolDecodeError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# what reading past the end or a bad length raises in the primitives
_UNREADABLE = (ProtocolDecodeError, IndexError, struct.error, UnicodeDecodeError, ValueError)
T = TypeVar("T")


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
        self.buf += p.uvarint(v)
        return self

    def string(self, s: str | None, *, compact: bool = False) -> Writer:
        """STRING / NULLABLE_STRING (int16 length, -1 = null) or their compact forms (uvarint len+1)."""
        (p.write_compact_nullable_string if compact else p.write_nullable_string)(self.buf, s)
        return self

    def bytes_(self, b: bytes | None, *, compact: bool = False) -> Writer:
        """BYTES / NULLABLE_BYTES (int32 length, -1 = null) or their compact forms."""
        (p.write_compact_nullable_bytes if compact else p.write_nullable_bytes)(self.buf, b)
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
    """Reads schema primitives from bytes; anything that does not parse is a CorruptRecordError naming the field."""

    __slots__ = ("buf", "pos", "view")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = bytes(buf)
        self.view = memoryview(self.buf)
        self.pos = pos

    def _read(self, read: Callable[[memoryview, int], tuple[T, int]], what: str) -> T:
        try:
            value, self.pos = read(self.view, self.pos)
        except _UNREADABLE as exc:
            raise CorruptRecordError(f"{what} at position {self.pos} of {len(self.buf)} bytes: {exc}") from None
        return value

    def _unpack(self, st: struct.Struct, what: str) -> int:
        end = self.pos + st.size
        if end > len(self.buf):
            raise CorruptRecordError(f"{what}: needs {st.size} bytes at position {self.pos}, only "
                                     f"{len(self.buf) - self.pos} left")
        value = st.unpack_from(self.buf, self.pos)[0]
        self.pos = end
        return value

    def int8(self, what: str = "int8") -> int:
        return self._unpack(_I8, what)

    def int16(self, what: str = "int16") -> int:
        return self._unpack(_I16, what)

    def int32(self, what: str = "int32") -> int:
        return self._unpack(_I32, what)

    def int64(self, what: str = "int64") -> int:
        return self._unpack(_I64, what)

    def uvarint(self, what: str = "varint") -> int:
        return self._read(p.read_uvarint, what)

    def nullable_string(self, what: str = "string", *, compact: bool = False) -> str | None:
        return self._read(p.read_compact_nullable_string if compact else p.read_nullable_string, what)

    def string(self, what: str = "string", *, compact: bool = False) -> str:
        return self._read(p.read_compact_string if compact else p.read_string, what)

    def nullable_bytes(self, what: str = "bytes", *, compact: bool = False) -> bytes | None:
        return self._read(p.read_compact_nullable_bytes if compact else p.read_nullable_bytes, what)

    def bytes_(self, what: str = "bytes", *, compact: bool = False) -> bytes:
        return self._read(p.read_compact_bytes if compact else p.read_bytes, what)

    def array_len(self, what: str = "array", *, compact: bool = False) -> int:
        """Element count; a null array reads as 0 elements (callers that care check for -1 themselves)."""
        n = self.uvarint(what) - 1 if compact else self.int32(what)
        if n > len(self.buf) - self.pos:
            raise CorruptRecordError(f"{what}: {n} elements cannot fit in {len(self.buf) - self.pos} bytes")
        return max(n, 0)

    def skip_tagged_fields(self, what: str = "tagged fields") -> None:
        """Tagged fields this reader does not know are skipped, as Kafka's generated readers do."""
        self._read(_skip_tagged_fields, what)

    def remaining(self) -> int:
        return len(self.buf) - self.pos


def _skip_tagged_fields(view: memoryview, pos: int) -> tuple[None, int]:
    return None, p.skip_tagged_fields(view, pos)
