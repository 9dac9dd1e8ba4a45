"""One Kafka connection's protocol state, without I/O: the only home of framing and correlation ids.

Kafka frames every request and response with a 4-byte big-endian size. `FrameDecoder` turns bytes,
however the network splits them, into complete frames; `ClientConnection` numbers requests, remembers
which are awaiting an answer, and decodes each response with the API, version and header version of
the request it answers (Kafka answers a connection's requests in order, so pipelining is a queue);
`ServerConnection` turns a request frame into a header and body, deciding what the broker answers
without a handler (the ApiVersions fallback) and what closes the connection. The broker's asyncio
loop and the blocking `kafkalite.client` both drive these objects; neither frames bytes itself.

Copies matter on the broker's produce path (frames of a megabyte): `feed` hands out complete frames
as views of the chunk it was given when a chunk holds them whole, and otherwise gathers one frame in
a buffer of exactly its size, handed out without a further copy. `recv_buffer`/`received` let a
socket read straight into that buffer (`recv_into`), so the client copies nothing either.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from kafkalite.protocol.api_keys import ApiKey, api_name
from kafkalite.protocol.codec import (
    SUPPORTED_VERSIONS,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    read_request_header,
)
from kafkalite.protocol.error_codes import ErrorCode
from kafkalite.protocol.exceptions import ProtocolDecodeError, ProtocolError, UnsupportedVersionError
from kafkalite.protocol.primitives import FileRegion

_SIZE_BYTES = 4


class InvalidReceiveError(ProtocolError):
    """A frame size that cannot be right: negative, or over the receiver's limit. Kafka's
    InvalidReceiveException, with its message; the connection must be closed (the stream is lost)."""

    def __init__(self, size: int, max_size: int | None) -> None:
        if size < 0 or max_size is None:
            super().__init__(f"Invalid receive (size = {size})")
        else:
            super().__init__(f"Invalid receive (size = {size} larger than {max_size})")
        self.size = size
        self.max_size = max_size


class CorrelationError(ProtocolError):
    """A response answers no request awaiting one (Kafka's clients raise IllegalStateException)."""


class FrameDecoder:
    """Bytes in, complete frames (without their size prefix) out; `max_size` bounds a frame's size.

    Frames are memoryviews: of the caller's chunk when it held the frame whole, else of a buffer this
    object filled and will not touch again. A chunk's views keep the chunk alive; the caller must not
    change a chunk it handed over (bytes never change).
    """

    __slots__ = ("_allocate", "_filled", "_frame", "_head", "_head_len", "_size", "max_size")

    def __init__(self, max_size: int | None = None,
                 allocate: Callable[[int], bytearray | memoryview] | None = None) -> None:
        """`allocate(size)` gives the writable buffer of `size` bytes a frame is gathered in (default: a new
        bytearray); a receiver may hand out buffers it reuses once no view of an earlier frame is alive."""
        self.max_size = max_size
        self._allocate = allocate or bytearray
        self._head = bytearray(_SIZE_BYTES)
        self._head_len = 0
        self._size = -1  # the size of the frame in progress; -1 while reading a size prefix
        self._frame: bytearray | memoryview | None = None  # its bytes so far, allocated (at full size) on first data
        self._filled = 0

    @property
    def buffered(self) -> int:
        """Bytes received that belong to a frame not yet complete."""
        return self._head_len + self._filled

    def want(self) -> int:
        """How many more bytes complete the size prefix or the frame in progress (never 0)."""
        if self._size < 0:
            return _SIZE_BYTES - self._head_len
        return self._size - self._filled

    def _start(self, size: int) -> memoryview | None:
        """A size prefix was read: an empty frame at once, else None (the frame is in progress)."""
        if size < 0 or (self.max_size is not None and size > self.max_size):
            raise InvalidReceiveError(size, self.max_size)
        if size == 0:
            return memoryview(b"")
        self._size = size
        self._filled = 0
        return None

    def _finish(self) -> memoryview:
        assert self._frame is not None
        frame = memoryview(self._frame)
        self._frame = None
        self._size = -1
        self._filled = 0
        return frame

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Every frame completed by `data`, in order. Raises InvalidReceiveError on a bad size."""
        mv = data if isinstance(data, memoryview) else memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        out: list[memoryview] = []
        pos, end = 0, len(mv)
        while pos < end:
            if self._size >= 0:  # a frame in progress
                if self._filled == 0 and end - pos >= self._size:  # whole in this chunk: a view, no copy
                    out.append(mv[pos:pos + self._size])
                    pos += self._size
                    self._size = -1
                    self._frame = None
                    continue
                if self._frame is None:
                    self._frame = self._allocate(self._size)
                n = min(end - pos, self._size - self._filled)
                self._frame[self._filled:self._filled + n] = mv[pos:pos + n]
                self._filled += n
                pos += n
                if self._filled == self._size:
                    out.append(self._finish())
                continue
            if self._head_len == 0 and end - pos >= _SIZE_BYTES:
                size = int.from_bytes(mv[pos:pos + _SIZE_BYTES], "big", signed=True)
                pos += _SIZE_BYTES
            else:
                n = min(end - pos, _SIZE_BYTES - self._head_len)
                self._head[self._head_len:self._head_len + n] = mv[pos:pos + n]
                self._head_len += n
                pos += n
                if self._head_len < _SIZE_BYTES:
                    break
                self._head_len = 0
                size = int.from_bytes(self._head, "big", signed=True)
            empty = self._start(size)
            if empty is not None:
                out.append(empty)
        return out

    def recv_buffer(self) -> memoryview:
        """Where the next bytes should be read to (exactly `want()` bytes): pass it to recv_into,
        then call `received` with the count. Saves `feed`'s copy of partial frames."""
        if self._size < 0:
            return memoryview(self._head)[self._head_len:]
        if self._frame is None:
            self._frame = self._allocate(self._size)
        return memoryview(self._frame)[self._filled:]

    def received(self, n: int) -> memoryview | None:
        """`n` bytes were written into `recv_buffer()`: the frame they complete, if any."""
        if self._size < 0:
            self._head_len += n
            if self._head_len < _SIZE_BYTES:
                return None
            self._head_len = 0
            return self._start(int.from_bytes(self._head, "big", signed=True))
        self._filled += n
        return self._finish() if self._filled == self._size else None


class Pending(NamedTuple):
    """A request sent and awaiting its response."""

    correlation_id: int
    api_key: int
    api_version: int


class ClientConnection:
    """The client side: requests to bytes with fresh correlation ids, response bytes to bodies.

    `send_request` returns the bytes to write; `feed` (or `recv_buffer`/`received`) takes what was
    read and returns (pending request, body) for each complete response, oldest first. A response whose
    correlation id is not the oldest pending request's raises CorrelationError: the stream is lost.
    """

    def __init__(self, client_id: str | None, max_response_bytes: int | None = None,
                 allocate: Callable[[int], bytearray | memoryview] | None = None) -> None:
        self.client_id = client_id
        self.frames = FrameDecoder(max_response_bytes, allocate)
        self._next_correlation = 0
        self._inflight: deque[Pending] = deque()

    @property
    def pending(self) -> int:
        """Requests sent whose answers have not been decoded yet."""
        return len(self._inflight)

    def oldest_pending(self) -> Pending | None:
        return self._inflight[0] if self._inflight else None

    def send_request(self, api_key: int, api_version: int, body: dict[str, Any],
                     expect_response: bool = True) -> tuple[int, bytes]:
        """(correlation id, the whole frame to write). With `expect_response` False (Produce with
        acks=0) nothing is queued: Kafka sends no answer."""
        self._next_correlation = (self._next_correlation + 1) & 0x7FFFFFFF
        correlation = self._next_correlation
        frame = encode_request(api_key, api_version, correlation, self.client_id, body)
        if expect_response:
            self._inflight.append(Pending(correlation, api_key, api_version))
        return correlation, frame

    def _answer(self, frame: memoryview) -> tuple[Pending, dict[str, Any]]:
        if not self._inflight:
            raise CorrelationError(f"a response of {len(frame)} bytes arrived with no request awaiting one")
        pending = self._inflight.popleft()
        got, body = decode_response(pending.api_key, pending.api_version, frame)
        if got != pending.correlation_id:
            raise CorrelationError(f"Correlation id for response ({got}) does not match request "
                                   f"({pending.correlation_id}) of {api_name(pending.api_key)} "
                                   f"v{pending.api_version}")
        return pending, body

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[Pending, dict[str, Any]]]:
        """The responses `data` completes, each with the request it answers."""
        return [self._answer(f) for f in self.frames.feed(data)]

    def recv_buffer(self) -> memoryview:
        """See FrameDecoder.recv_buffer."""
        return self.frames.recv_buffer()

    def received(self, n: int) -> tuple[Pending, dict[str, Any]] | None:
        """See FrameDecoder.received: the response completed by these `n` bytes, if one was."""
        frame = self.frames.received(n)
        return None if frame is None else self._answer(frame)


class Request(NamedTuple):
    """A decoded request for the broker's handlers."""

    header: RequestHeader
    body: dict[str, Any]


class Reply(NamedTuple):
    """An answer the connection gives itself, without a handler (ApiVersions at an unknown version)."""

    parts: list[bytes | memoryview | FileRegion]


class RefusedRequest(ProtocolError):
    """A request the broker does not answer: Kafka closes the connection. The message says why."""


class CloseConnection(Exception):
    """A handler's word that the connection must be dropped, with no answer: Kafka's answer to an acks=0
    produce that failed (the client learns of it only by the closed connection). The message says why."""


class ServerConnection:
    """The broker side: bytes to request frames (bounded by socket.request.max.bytes), a frame to a
    Request, a Reply, or RefusedRequest; responses to the parts to send."""

    def __init__(self, max_request_bytes: int, handles: Callable[[int], bool] | None = None,
                 allocate: Callable[[int], bytearray | memoryview] | None = None) -> None:
        self.frames = FrameDecoder(max_request_bytes, allocate)
        self._handles = handles or (lambda key: key in SUPPORTED_VERSIONS)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Complete request frames in `data` (InvalidReceiveError on a bad size)."""
        return self.frames.feed(data)

    def want(self) -> int:
        return self.frames.want()

    def decode(self, frame: bytes | bytearray | memoryview) -> Request | Reply:
        """What a request frame asks. Records in the body stay views of `frame` (no copy)."""
        try:
            header = read_request_header(frame)
        except (ProtocolDecodeError, UnsupportedVersionError) as exc:
            raise RefusedRequest(f"unreadable request header ({exc})") from None
        if not self._handles(header.api_key):
            raise RefusedRequest(f"API key {header.api_key} is not supported (client {header.client_id})", header)
        lo, hi = SUPPORTED_VERSIONS[ApiKey(header.api_key)]
        if header.api_key == ApiKey.API_VERSIONS and not lo <= header.api_version <= hi:
            # Kafka answers with a v0 body listing only its ApiVersions range, so the client retries lower.
            fallback = RequestHeader(header.api_key, 0, header.correlation_id, header.client_id)
            return Reply(encode_response(fallback, {
                "error_code": ErrorCode.UNSUPPORTED_VERSION,
                "api_keys": [{"api_key": ApiKey.API_VERSIONS, "min_version": lo, "max_version": hi}]}))
        try:
            return Request(*decode_request(frame))
        except UnsupportedVersionError as exc:
            raise RefusedRequest(str(exc), header) from None
        except ProtocolDecodeError as exc:
            raise RefusedRequest(f"malformed {api_name(header.api_key)} v{header.api_version} request ({exc})",
                                 header) from None

    @staticmethod
    def encode(header: RequestHeader, body: dict[str, Any]) -> list[bytes | memoryview | FileRegion]:
        """The response to `header`'s request, size prefix included, as parts to send in order."""
        return encode_response(header, body)


