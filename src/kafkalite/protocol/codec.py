"""Frames to dicts and back: request/response headers around the compiled body codecs.

Sans-IO: nothing here touches a socket. The broker reads a size-prefixed frame, hands the frame
(without its 4-byte size) to `decode_request`, and sends the parts `encode_response` returns
(bytes-like parts with sendmsg, FileRegion parts with os.sendfile). Our own client and CLI use
`encode_request` / `decode_response`.

Headers (Kafka's RequestHeader/ResponseHeader): requests use header v2 (v1 + tagged fields) in
flexible versions, v1 otherwise, and client_id is always an int16-length nullable string. Responses
use header v1 (correlation id + tagged fields) in flexible versions, v0 otherwise, except that
ApiVersions responses always use v0, so a client that does not yet know our versions can read them.

Compiled codecs are cached per (api key, version); the first use of a version compiles it
(about a millisecond), `warm_up()` compiles everything ahead of time.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from kafkalite.error_codes import ErrorCode
from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.compiler import compile_decoder, compile_encoder
from kafkalite.protocol.exceptions import ProtocolDecodeError, ProtocolError, UnsupportedVersionError
from kafkalite.protocol.messages import MESSAGES
from kafkalite.protocol.primitives import FileRegion, skip_tagged_fields
from kafkalite.protocol.schema import Message

_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_I32 = struct.Struct(">i")
_DECODE_ERRORS = (struct.error, IndexError, ValueError, OverflowError, TypeError)


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    key: (msg.versions.lo, msg.versions.hi) for key, msg in sorted(MESSAGES.items())
}

# (api_key, version) -> compiled body codec, one table per direction and operation
_request_decoders: dict[tuple[int, int], Callable] = {}
_request_encoders: dict[tuple[int, int], Callable] = {}
_response_decoders: dict[tuple[int, int], Callable] = {}
_response_encoders: dict[tuple[int, int], Callable] = {}


def _message(api_key: int, version: int, header: RequestHeader | None = None) -> Message:
    msg = MESSAGES.get(api_key)  # type: ignore[call-overload]
    if msg is None:
        raise UnsupportedVersionError(f"unsupported API key {api_key}", header)
    if version not in msg.versions:
        raise UnsupportedVersionError(
            f"unsupported version {version} of {msg.api_key.name} (we support {msg.versions})", header)
    return msg


def _codec(table: dict, api_key: int, version: int, response: bool, encode: bool,
           header: RequestHeader | None = None) -> Callable:
    fn = table.get((api_key, version))
    if fn is None:
        msg = _message(api_key, version, header)
        fields = msg.response if response else msg.request
        label = f"{msg.api_key.name} v{version} {'response' if response else 'request'}"
        compile_ = compile_encoder if encode else compile_decoder
        fn = compile_(fields, version, msg.is_flexible(version), label)
        table[(api_key, version)] = fn
    return fn


def _is_flexible(api_key: int, version: int) -> bool:
    return MESSAGES[api_key].is_flexible(version)  # type: ignore[index]


def warm_up() -> None:
    """Compile every supported (api, version, direction) now instead of on first use."""
    for key, msg in MESSAGES.items():
        for v in range(msg.versions.lo, msg.versions.hi + 1):
            for table, response, encode in ((_request_decoders, False, False), (_request_encoders, False, True),
                                            (_response_decoders, True, False), (_response_encoders, True, True)):
                _codec(table, key, v, response, encode)


def _as_view(frame: bytes | bytearray | memoryview) -> memoryview:
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


# --- requests ------------------------------------------------------------------------------------


def _parse_header(mv: memoryview) -> tuple[RequestHeader, int]:
    if len(mv) < _HEADER.size:
        raise ProtocolDecodeError(f"request header needs {_HEADER.size} bytes, frame has {len(mv)}")
    api_key, api_version, correlation_id, n = _HEADER.unpack_from(mv, 0)
    pos = _HEADER.size
    client_id = None
    if n >= 0:
        end = pos + n
        if end > len(mv):
            raise ProtocolDecodeError(f"client_id of {n} bytes, but only {len(mv) - pos} bytes remain")
        try:
            client_id = str(mv[pos:end], "utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolDecodeError(f"client_id is not UTF-8: {e}") from None
        pos = end
    elif n != -1:
        raise ProtocolDecodeError(f"client_id has length {n}")
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def read_request_header(frame: bytes | bytearray | memoryview) -> RequestHeader:
    """Only the header, so the broker can answer a request whose version it does not support."""
    return _parse_header(_as_view(frame))[0]


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, dict[str, Any]]:
    """A request frame (without its size prefix) to (header, body). Records stay views of `frame`."""
    mv = _as_view(frame)
    header, pos = _parse_header(mv)
    decode = _codec(_request_decoders, header.api_key, header.api_version, False, False, header)
    try:
        if _is_flexible(header.api_key, header.api_version):
            pos = skip_tagged_fields(mv, pos)
        body, _ = decode(mv, pos)
    except ProtocolError as e:
        e.header = header
        raise
    except _DECODE_ERRORS as e:
        raise ProtocolDecodeError(f"malformed {ApiKey(header.api_key).name} v{header.api_version} request: {e}",
                                  header) from None
    return header, body


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: dict[str, Any]) -> bytes:
    """A whole request frame, size prefix included (FileRegion records are read from their file)."""
    encode = _codec(_request_encoders, api_key, api_version, False, True)
    out = bytearray(4)
    out += _HEADER.pack(api_key, api_version, correlation_id, -1 if client_id is None else 0)
    if client_id is not None:
        cid = client_id.encode()
        struct.pack_into(">h", out, len(out) - 2, len(cid))
        out += cid
    if _is_flexible(api_key, api_version):
        out += b"\x00"
    parts: list = []
    encode(body, out, parts)
    if parts:
        parts.append(bytes(out))
        data = bytearray(b"".join(
            os.pread(x.fd, x.size, x.position) if isinstance(x, FileRegion) else x for x in parts))
    else:
        data = out
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


# --- responses -----------------------------------------------------------------------------------


def _response_header_is_flexible(api_key: int, version: int) -> bool:
    return api_key != ApiKey.API_VERSIONS and _is_flexible(api_key, version)


class PreEncoded(NamedTuple):
    """A response body encoded once for its API and version (`encode_response_body`) and sent to many
    requests: a broker's Metadata answer changes only when its metadata does, not per request."""

    api_key: int
    api_version: int
    data: bytes


def encode_response_body(api_key: int, api_version: int, body: dict[str, Any]) -> PreEncoded:
    """`body` encoded without a header, for encode_response to frame; bodies without records only."""
    encode = _codec(_response_encoders, api_key, api_version, True, True)
    out = bytearray()
    parts: list = []
    encode(body, out, parts)
    if parts:
        raise ValueError("a body with record buffers or file regions cannot be pre-encoded")
    return PreEncoded(api_key, api_version, bytes(out))


def encode_response(header: RequestHeader, body: dict[str, Any] | PreEncoded
                    ) -> list[bytes | memoryview | FileRegion]:
    """The response to `header`'s request, size prefix included, as parts to send in order.

    Adjacent small parts are joined into one bytes object; FileRegions and record buffers of
    32 KiB or more are their own items (sendfile / sendmsg without a copy).
    """
    out = bytearray(4)
    out += _I32.pack(header.correlation_id)
    if _response_header_is_flexible(header.api_key, header.api_version):
        out += b"\x00"
    if body.__class__ is PreEncoded:
        assert isinstance(body, PreEncoded)
        if (body.api_key, body.api_version) != (header.api_key, header.api_version):
            raise ValueError(f"a body encoded for API {body.api_key} v{body.api_version} cannot answer "
                             f"API {header.api_key} v{header.api_version}")
        out += body.data
        struct.pack_into(">i", out, 0, len(out) - 4)
        return [bytes(out)]
    assert isinstance(body, dict)
    encode = _codec(_response_encoders, header.api_key, header.api_version, True, True, header)
    parts: list = []
    encode(body, out, parts)
    if not parts:
        struct.pack_into(">i", out, 0, len(out) - 4)
        return [bytes(out)]
    if out:
        parts.append(bytes(out))
    total = sum(x.size if x.__class__ is FileRegion else len(x) for x in parts) - 4
    first = parts[0]
    parts[0] = _I32.pack(total) + first[4:]
    return parts


def decode_response(api_key: int, api_version: int,
                    frame: bytes | bytearray | memoryview) -> tuple[int, dict[str, Any]]:
    """A response frame (without its size prefix) to (correlation id, body).

    An ApiVersions answer with UNSUPPORTED_VERSION is read as v0, as Kafka's clients do: that is
    how a broker that does not know our ApiVersions version answers.
    """
    mv = _as_view(frame)
    decode = _codec(_response_decoders, api_key, api_version, True, False)
    try:
        correlation_id = _I32.unpack_from(mv, 0)[0]
        pos = 4
        if api_key == ApiKey.API_VERSIONS and api_version > 0 and \
                struct.unpack_from(">h", mv, pos)[0] == ErrorCode.UNSUPPORTED_VERSION:
            decode = _codec(_response_decoders, api_key, 0, True, False)
        elif _response_header_is_flexible(api_key, api_version):
            pos = skip_tagged_fields(mv, pos)
        body, _ = decode(mv, pos)
    except ProtocolError:
        raise
    except _DECODE_ERRORS as e:
        raise ProtocolDecodeError(f"malformed {ApiKey(api_key).name} v{api_version} response: {e}") from None
    return correlation_id, body
