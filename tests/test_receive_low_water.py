"""The receive low-water mark (`broker.low_water`): while a big frame comes in, the broker's connection wakes
only when a useful part of it has arrived, and never waits for bytes that are not coming.

Driven over real loopback sockets, plaintext and TLS, with a client thread writing the frames in the patterns that
matter: one write (16 KiB TLS records), 1,000-byte writes (small records, one segment each), random pieces, a
frame followed by nothing (the client waits for its answer: a mark above what is still coming would hang here),
the last byte held back, and pipelined frames. The channel is counted, not replaced: `buffer_updated` is the
wake-up the mark saves.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable

import pytest

from kafkalite.broker.channel import Channel
from kafkalite.broker.low_water import LOW_WATER_MAX, LOW_WATER_MIN, TLS_RECORD_MAX
from kafkalite.protocol.connection import FrameDecoder
from tests.test_broker_wire import recv_exact

MiB = 1 << 20


class CountingChannel(Channel):
    """A Channel that counts its wake-ups with bytes and records the socket's mark after each."""

    def __init__(self, tls: bool, on_made: Callable[[Channel], None]) -> None:
        super().__init__(tls=tls, on_made=on_made)
        self.updates = 0
        self.marks: list[tuple[int, int]] = []  # (bytes the frame in progress still wanted, the socket's mark)

    def buffer_updated(self, nbytes: int) -> None:
        super().buffer_updated(nbytes)
        self.updates += 1
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is not None and self.decoder is not None:
            self.marks.append((self.decoder.want(), sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)))


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _exchange(payloads: list[bytes], write: Callable[[socket.socket, bytes], None], tls: ssl.SSLContext | None,
              client_tls: ssl.SSLContext | None) -> tuple[list[bytes], CountingChannel]:
    """Serve one connection whose client thread writes `payloads` as frames through `write`, then waits for an
    answer to each: frames as received, and the channel."""
    async def main() -> tuple[list[bytes], CountingChannel]:
        loop = asyncio.get_running_loop()
        got: list[bytes] = []
        done: asyncio.Future[CountingChannel] = loop.create_future()

        async def serve(ch: Channel) -> None:
            try:
                if tls is not None:
                    await ch.start_tls(tls, ssl_handshake_timeout=5)
                ch.decoder = FrameDecoder(64 * MiB)
                for _ in payloads:
                    f = await ch.next_frame()
                    got.append(bytes(f))
                    ch.write(_frame(b"ok"))
                    await ch.drain()
                assert isinstance(ch, CountingChannel)
                done.set_result(ch)
            except BaseException as exc:
                done.set_exception(exc)

        server = await loop.create_server(
            lambda: CountingChannel(tls is not None, lambda ch: loop.create_task(serve(ch))), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        errors: list[BaseException] = []

        def client() -> None:
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=10)
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s = raw if client_tls is None else client_tls.wrap_socket(raw, server_hostname="localhost")
                with s:
                    for p in payloads:
                        write(s, _frame(p))
                    for _ in payloads:  # nothing more is sent: the server must finish from what it has
                        assert recv_exact(s, 6) == _frame(b"ok")
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=client, daemon=True)
        thread.start()
        try:
            ch = await asyncio.wait_for(done, 20)
        finally:
            await asyncio.to_thread(thread.join, 10)
            server.close()
        assert not errors, errors
        return got, ch

    return asyncio.run(main())


def _whole(s: socket.socket, data: bytes) -> None:
    s.sendall(data)


def _pieces(size: int, pause_every: int = 0) -> Callable[[socket.socket, bytes], None]:
    def write(s: socket.socket, data: bytes) -> None:
        for i in range(0, len(data), size):
            s.sendall(data[i:i + size])
            if pause_every and i // size % pause_every == 0:
                time.sleep(0.0005)
    return write


def _random_pieces(seed: int) -> Callable[[socket.socket, bytes], None]:
    rng = random.Random(seed)

    def write(s: socket.socket, data: bytes) -> None:
        i = 0
        while i < len(data):
            n = rng.choice((1, 5, 300, 4096, 16_384, 16_385, 70_000, 300_000))
            s.sendall(data[i:i + n])
            i += n
            if rng.random() < 0.05:
                time.sleep(0.002)
    return write


def _last_byte_late(s: socket.socket, data: bytes) -> None:
    s.sendall(data[:-1])
    time.sleep(0.3)  # the server holds all but one byte of the frame: it must have taken them in
    s.sendall(data[-1:])


WRITES = {"whole": _whole, "1000-byte pieces": _pieces(1000, pause_every=64), "random pieces": _random_pieces(7),
          "last byte late": _last_byte_late}


@pytest.fixture(scope="module")
def tls_pair(pki) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pki.broker.cert, pki.broker.key)
    client = ssl.create_default_context(cafile=str(pki.ca_pem))
    client.check_hostname = False
    return server, client


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["plaintext", "TLS"])
@pytest.mark.parametrize("how", list(WRITES))
def test_frames_arrive_whole_and_the_mark_never_exceeds_what_is_still_coming(transport, how, tls_pair):
    """Frames of 1 B to 3 MiB, written in each pattern, arrive whole; after every wake-up the socket's mark is
    at most what the frame in progress still wants (less one TLS record over TLS), and 1 byte between frames."""
    payloads = [os.urandom(n) for n in (3 * MiB, 1, 100_000, 40_000, MiB + 17)]
    tls, client_tls = tls_pair if transport == "TLS" else (None, None)
    got, ch = _exchange(payloads, WRITES[how], tls, client_tls)
    assert got == payloads
    margin = TLS_RECORD_MAX if transport == "TLS" else 0
    for want, mark in ch.marks:
        assert mark == 1 or LOW_WATER_MIN <= mark <= min(want - margin, LOW_WATER_MAX), (want, mark)
    assert ch.marks[-1][1] == 1  # the last frame is whole: the next size prefix wakes the connection at once


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["plaintext", "TLS"])
def test_a_big_frame_in_small_segments_wakes_the_connection_a_few_times_not_per_segment(transport, tls_pair):
    """16 MiB in 1,000-byte writes with TCP_NODELAY (16,777 segments, small TLS records): without the mark the
    channel woke for about every arrival; with it, about once per 256 KiB."""
    size = 16 * MiB
    tls, client_tls = tls_pair if transport == "TLS" else (None, None)
    got, ch = _exchange([os.urandom(size)], _pieces(1000, pause_every=16), tls, client_tls)
    assert len(got[0]) == size
    assert any(mark == LOW_WATER_MAX for _want, mark in ch.marks)
    # 64 wake-ups of 256 KiB, plus the frame's start and its last 256 KiB (below LOW_WATER_MIN the mark is 1)
    assert ch.updates < 3 * size // LOW_WATER_MAX, ch.updates
