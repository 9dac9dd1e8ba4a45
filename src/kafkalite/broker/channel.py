"""One broker connection's bytes: an `asyncio.BufferedProtocol` that reads request frames straight into the
buffers a `FrameDecoder` hands out, and writes responses with flow control.

Why not asyncio streams: `StreamReader.readexactly` copies each frame out of its buffer (then shifts the
buffer) after `sock.recv` made a new bytes of it: two copies of every produced byte, plus a coroutine per
read. Here the kernel writes a frame in progress into the decoder's buffer of exactly the frame's size
(`recv_into`), and the frame is handed to the handlers as a view of that buffer, which nothing else writes
while the view lives (writable: a produce batch can be patched in place). Size prefixes and small frames are
read into a staging buffer (one `recv` can bring several pipelined requests) and copied out one frame at a time.

While a frame comes in, the socket's receive low-water mark is its rest (`low_water.ReceiveLowWater`): the event
loop wakes once per up to 256 KiB of it, not for every arrival (over TLS, for every few ~2 KB records).

Kafka mutes a channel while its request is handled. Here, while the connection is busy (the serving coroutine
is not waiting for a frame), the channel reads ahead at most the next request (into its own buffer, as above,
so a pipelining producer keeps streaming) and then pauses reading: further pipelined requests queue in the
kernel. Until a SASL client has authenticated (`read_ahead` False) nothing is read ahead: the next frame's
size is checked against the limit that applies once the request before it has been answered.

The channel also quacks like the `StreamWriter` the handlers were written against (`write`, `drain`,
`transport`, `get_extra_info`, `start_tls`, `close`, `wait_closed`).

A response with file regions (a fetch) leaves through `send_parts` on a plaintext connection: its parts go
straight to the socket in order, bytes with `send(MSG_MORE)` and regions with `os.sendfile`, and only when the
socket is full does the channel wait for it to drain (one writer registration, removed when writable).
asyncio's `loop.sendfile` would pause and resume reading (two `epoll_ctl`), wait for an empty buffer and
register and unregister a writer around every region: per region, not per full socket, which made a fetch of
many partitions one event-loop round and four selector calls per partition (and uvloop has no sendfile at
all). Only public event-loop calls are used, so any asyncio event loop serves it. MSG_MORE lets the kernel put a
partition's header into the same segment as its records instead of a packet of its own.
"""

from __future__ import annotations

import asyncio
import collections
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any

from kafkalite.broker.low_water import ReceiveLowWater
from kafkalite.protocol.connection import FrameDecoder, InvalidReceiveError
from kafkalite.protocol.primitives import FileRegion

STAGE_BYTES = 16 * 1024  # a read when no frame is in progress: prefixes, small requests (per connection: small)
_MIN_ROOM = 4096  # less free staging room than this: compact (or grow) before the next read


class Channel(asyncio.BufferedProtocol):
    """A connection's transport and its receive state; `next_frame` is what the serving coroutine awaits."""

    def __init__(self, tls: bool = False, on_made: Callable[[Channel], None] | None = None) -> None:
        self.transport: Any = None
        self._on_made = on_made
        self.decoder: FrameDecoder | None = None  # set by the server before the first next_frame
        self._tls = tls
        self._stage = bytearray(STAGE_BYTES)
        self._start = 0  # staged bytes not yet handed to the decoder: _stage[_start:_end]
        self._end = 0
        self._direct = False  # the last get_buffer handed out the decoder's frame buffer
        self._ready: collections.deque[memoryview] = collections.deque()  # frames complete, not yet taken
        self._error: Exception | None = None  # a bad size prefix met reading ahead: raised after _ready's frames
        self.read_ahead = True  # may the next request be taken in while one is handled (see the module doc)
        self._waiter: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._eof = False
        self._lost: BaseException | None = None
        self._closed = False
        self._paused_writing = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed_waiter: asyncio.Future[None] | None = None
        self._sending: asyncio.Future[None] | None = None  # send_parts waits for the socket to take more
        self._sending_fd = -1
        self._low_water = ReceiveLowWater()  # no wake-up per arrival while a big frame comes in
        self._raw: socket.socket | None = None  # send_parts' view of the transport's socket (detached, never closed)

    # --- protocol callbacks ----------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        if not self._tls:
            self._low_water.attach(transport)
        else:
            # Nothing may be read before the TLS protocol takes the transport (the ClientHello is its).
            transport.pause_reading()
            self._paused_reading = True
        if self._on_made is not None:
            self._on_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        dec = self.decoder
        if dec is not None and self._start == self._end and not self._ready and dec.want() > 4:
            self._direct = True  # a frame in progress: the kernel writes straight into it
            return dec.recv_buffer()
        self._direct = False
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._stage) - self._end < _MIN_ROOM:  # (only when bytes arrive while paused)
            pending = self._stage[self._start:self._end]
            if len(pending) + _MIN_ROOM > len(self._stage):
                self._stage = bytearray(len(pending) + STAGE_BYTES)
            self._stage[:len(pending)] = pending
            self._start, self._end = 0, len(pending)
        return memoryview(self._stage)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct:
            assert self.decoder is not None
            frame = self.decoder.received(nbytes)
            if frame is None:
                self._low_water.frame_wants(self.decoder.want())
                return  # the frame is still in progress; the coroutine waits
            self._low_water.frame_wants(0)
            self._ready.append(frame)
        else:
            self._end += nbytes
        if self._waiter is None and self.read_ahead and not self._ready and self.decoder is not None:
            self._parse()  # busy: take the next request in (the kernel then reads its rest straight into it)
            if not self._ready and self._error is None:
                return
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self._tls  # keep a plaintext half-closed connection open: queued requests are still answered

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._lost = exc
        self._wake()
        self._stop_waiting_writable(ConnectionResetError("Connection lost") if exc is None else exc)
        if self._raw is not None:
            self._raw.detach()  # the transport closes the descriptor, right after this callback
            self._raw = None
        while self._drain_waiters:
            w = self._drain_waiters.popleft()
            if not w.done():
                w.set_exception(ConnectionResetError("Connection lost") if exc is None else exc)
        if self._closed_waiter is not None and not self._closed_waiter.done():
            self._closed_waiter.set_result(None)

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        while self._drain_waiters:
            w = self._drain_waiters.popleft()
            if not w.done():
                w.set_result(None)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is None:
            # Bytes arrived while the request before them is handled: mute the channel until it asks again.
            if not self._paused_reading and not self._closed and self.transport is not None:
                self.transport.pause_reading()
                self._paused_reading = True
            return
        self._waiter = None
        if not waiter.done():
            waiter.set_result(None)

    # --- the serving coroutine's side -------------------------------------------------------------

    def _parse(self) -> None:
        """Staged bytes into the decoder until a frame is complete (queued in _ready) or they run out; a bad
        size prefix is kept in _error (the frames before it are still answered)."""
        dec = self.decoder
        assert dec is not None
        stage = memoryview(self._stage)
        while self._start < self._end and not self._ready and self._error is None:
            buf = dec.recv_buffer()
            n = min(len(buf), self._end - self._start)
            buf[:n] = stage[self._start:self._start + n]
            self._start += n
            try:
                frame = dec.received(n)
            except InvalidReceiveError as exc:
                self._error = exc
                return
            if frame is not None:
                self._ready.append(frame)

    async def next_frame(self) -> memoryview:
        """The next request frame, whole, in a buffer it owns. Raises InvalidReceiveError for a bad size
        prefix, asyncio.IncompleteReadError when the peer closed (mid-frame or between frames)."""
        dec = self.decoder
        assert dec is not None
        while True:
            if self._ready:
                frame = self._ready.popleft()
                if self._paused_reading and self.read_ahead and not self._ready:
                    self._parse()  # the next request, if already staged, is the one read ahead
                    if not self._ready and self._error is None and not self._closed:
                        self._paused_reading = False  # it may come in while this one is handled
                        self.transport.resume_reading()
                return frame
            if self._error is not None:
                raise self._error
            if self._start < self._end:
                self._parse()
                continue
            if self._closed or self._eof:
                raise asyncio.IncompleteReadError(b"", dec.want())
            if self._paused_reading:
                self._paused_reading = False
                self.transport.resume_reading()
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    # --- the StreamWriter side ------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.transport.write(data)

    def writelines(self, parts: list[bytes | bytearray | memoryview]) -> None:
        self.transport.writelines(parts)

    @property
    def buffered_out(self) -> int:
        """Bytes the transport holds, not yet taken by the kernel."""
        return int(self.transport.get_write_buffer_size())

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark (StreamWriter.drain)."""
        if self._closed or self.transport.is_closing():
            # Let connection_lost run first, as StreamWriter.drain does, then say the connection is gone.
            await asyncio.sleep(0)
            raise ConnectionResetError("Connection lost") if self._lost is None else self._lost
        if not self._paused_writing:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    @property
    def sends_directly(self) -> bool:
        """May `send_parts` write to the socket itself: a plaintext connection whose transport has a socket
        (TLS encrypts in the transport instead)."""
        return (not self._tls and self.transport is not None and not self._closed
                and self.transport.get_extra_info("socket") is not None)

    async def send_parts(self, parts: list[bytes | bytearray | memoryview | FileRegion]) -> int:
        """A response's parts straight to the socket, in order (see the module doc); returns the bytes of file
        regions sent, which is less than their sizes only when a file shrank under us. Bytes the transport
        still holds go first. Raises ConnectionError when the peer goes away."""
        await self._flushed()
        sock = self._raw
        if sock is None:
            # asyncio hands out a TransportSocket without send(): a socket object over the same descriptor gives
            # send with MSG_MORE; it is detached (never closes the descriptor) when the connection is lost
            ts = self.transport.get_extra_info("socket")
            sock = self._raw = socket.socket(ts.family, ts.type, ts.proto, ts.fileno())
        fd = sock.fileno()
        region_bytes = 0
        last = len(parts) - 1
        for i, part in enumerate(parts):
            if part.__class__ is FileRegion:
                assert isinstance(part, FileRegion)
                sent = await self._sendfile(fd, part)
                region_bytes += sent
                if sent < part.size:
                    return region_bytes
            else:
                await self._send_bytes(sock, part, socket.MSG_MORE if i < last else 0)  # type: ignore[arg-type]
        return region_bytes

    async def _flushed(self) -> None:
        """Wait until the transport has handed every byte written through it to the kernel: with a high-water
        mark of 0 the transport pauses this protocol while it holds anything and resumes it once empty."""
        if self._closed or self.transport.is_closing():
            raise ConnectionResetError("Connection lost") if self._lost is None else self._lost
        if self.transport.get_write_buffer_size():
            self.transport.set_write_buffer_limits(high=0, low=0)
            try:
                await self.drain()
            finally:
                if not self.transport.is_closing():
                    self.transport.set_write_buffer_limits()

    async def _send_bytes(self, sock: socket.socket, data: bytes | bytearray | memoryview, flags: int) -> None:
        view = memoryview(data).cast("B")
        while view:
            try:
                n = sock.send(view, flags)
            except (BlockingIOError, InterruptedError):
                await self._writable(sock.fileno())
                continue
            except OSError as exc:
                raise ConnectionResetError(f"sending a response failed: {exc}") from exc
            view = view[n:]

    async def _sendfile(self, fd: int, region: FileRegion) -> int:
        sent = 0
        while sent < region.size:
            try:
                n = os.sendfile(fd, region.fd, region.position + sent, region.size - sent)
            except (BlockingIOError, InterruptedError):
                await self._writable(fd)
                continue
            except OSError as exc:
                raise ConnectionResetError(f"sendfile of a response failed: {exc}") from exc
            if n == 0:
                break  # the file ends before the region does
            sent += n
        return sent

    async def _writable(self, fd: int) -> None:
        """Until the socket can take more bytes; raises when the connection is lost meanwhile. The wait is
        registered on a duplicate of the descriptor: the event loop refuses a writer on a transport's own, and
        the duplicate keeps the registration apart from whatever the transport does with its descriptor."""
        if self._closed:
            raise ConnectionResetError("Connection lost") if self._lost is None else self._lost
        loop = asyncio.get_running_loop()
        waiter = self._sending = loop.create_future()
        self._sending_fd = os.dup(fd)
        loop.add_writer(self._sending_fd, _set_done, waiter)
        try:
            await waiter
        finally:
            self._stop_waiting_writable(None)

    def _stop_waiting_writable(self, exc: BaseException | None) -> None:
        if self._sending_fd >= 0:
            asyncio.get_running_loop().remove_writer(self._sending_fd)
            os.close(self._sending_fd)
            self._sending_fd = -1
        waiter, self._sending = self._sending, None
        if waiter is not None and not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default if self.transport is None else self.transport.get_extra_info(name, default)

    async def start_tls(self, sslcontext: ssl.SSLContext, *, ssl_handshake_timeout: float | None = None) -> None:
        """The server side of the TLS handshake on this connection; afterwards the channel reads and writes
        through the TLS transport (its bytes still arrive through get_buffer/buffer_updated)."""
        loop = asyncio.get_running_loop()
        raw, self.transport = self.transport, None  # (bytes arriving with the handshake's end must not pause raw)
        try:
            self.transport = await loop.start_tls(raw, self, sslcontext, server_side=True,
                                                  ssl_handshake_timeout=ssl_handshake_timeout)
        except BaseException:
            self.transport = raw  # closed by start_tls; the TLS protocol, not this one, saw it go
            self._closed = True
            raise
        self._paused_reading = False  # the TLS transport reads from the start
        self._low_water.attach(self.transport)
        if self._start < self._end or self._ready:
            self._wake()  # application bytes came with the handshake: mute until they are taken

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def wait_closed(self) -> None:
        if self._closed or self.transport is None:
            return
        if self._closed_waiter is None:
            self._closed_waiter = asyncio.get_running_loop().create_future()
        await self._closed_waiter


def _set_done(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
