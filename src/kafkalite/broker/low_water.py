"""SO_RCVLOWAT while a frame is in progress: wake a connection only when a useful amount of the frame has come.

A frame being read straight into its buffer is of no use until it is whole, yet each arrival of bytes wakes the
event loop: one round of epoll, the transport's `recv_into` and the protocol callbacks, for whatever the kernel
held at that moment. Over TLS this was the largest cost beyond the cipher: librdkafka writes ~2 KB TLS records
as they are made, so a broker that keeps up woke for every ~28 KiB of a produce request (38,000 wake-ups per
GiB against 2,800 over plaintext, measured with `perf stat` on `recvfrom`). With the socket's receive low-water
mark set to the rest of the frame (at most `LOW_WATER_MAX`), the kernel reports the socket readable only once
that much is queued, or at the end of the stream, an error, or memory pressure (Linux: `tcp_epollin_ready`), so
it never waits for bytes that are not coming.

The bound must never exceed the bytes still to arrive on the socket, or the connection would stall:

- plaintext: the protocol reads straight into the frame, so the socket holds at least `want` more bytes;
- TLS (asyncio's transport): its memory BIO is drained into the frame buffer until either the buffer is full (the
  frame is complete) or no whole record is left, so at most one incomplete record, under `TLS_RECORD_MAX` bytes
  of ciphertext carrying fewer of plaintext, is held above the socket; ciphertext is never shorter than its
  plaintext (no TLS compression: refused when the session has any).

Below `LOW_WATER_MIN` the mark goes back to 1 byte (the kernel's default): the saving is small and the size
prefix of the next frame must wake the connection at once.
"""

from __future__ import annotations

import socket
from typing import Any

TLS_RECORD_MAX = (1 << 14) + 256 + 5  # the largest TLS ciphertext record with its header (RFC 8446 §5.2)
LOW_WATER_MIN = 32 * 1024
LOW_WATER_MAX = 256 * 1024  # asyncio's TLS transport reads at most this much per wake-up


class ReceiveLowWater:
    """A connection's receive low-water mark, set only when it changes (one `setsockopt` each time)."""

    __slots__ = ("_level", "_margin", "_transport")

    def __init__(self) -> None:
        self._transport: Any = None  # the transport whose socket carries the mark (its TLS transport if any)
        self._margin = 0  # bytes that may already sit above the socket (one TLS record), not to be waited for
        self._level = 1

    def attach(self, transport: Any) -> None:
        """Read through `transport` from now on: plaintext, or asyncio's TLS transport once the handshake is
        done. A TLS session with compression gets no mark (its ciphertext may be shorter than the plaintext)."""
        self._transport = transport
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is None:
            self._margin = 0
        elif ssl_object.compression() is None:
            self._margin = TLS_RECORD_MAX
        else:
            self._transport = None

    def frame_wants(self, want: int) -> None:
        """`want` more bytes complete the frame being read straight into its buffer; 0 once it is complete."""
        level = want - self._margin
        level = 1 if level < LOW_WATER_MIN else min(level, LOW_WATER_MAX)
        if level == self._level or self._transport is None:
            return
        sock = self._transport.get_extra_info("socket")
        if sock is None:
            return
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, level)
        except OSError:
            return  # the connection is going: nothing to tune
        self._level = level
