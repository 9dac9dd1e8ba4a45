"""A TCP proxy on 127.0.0.1 that a fault test switches between pass, blackhole, reset and delay.

Fault tests cannot use iptables or namespaces without root, and a rule by port would also cut the test's own
clients. So the links to isolate (follower -> leader through the REPLICATION listener, broker -> ZooKeeper)
go through one of these proxies, and the test changes its mode:

- pass: bytes flow both ways unchanged;
- blackhole: a network partition. Connections stay open and every byte is read and dropped (both ways);
  new connections are accepted and held without reaching the upstream. A connection that lost bytes can
  never carry a valid protocol stream again (TCP would have retransmitted them), so it is reset when the
  mode goes back to pass; peers reconnect as they would after a real partition;
- reset: every open connection is closed with an RST, and so is each new one;
- delay: each chunk is forwarded `delay_s` after it arrived, in order (latency, not a bandwidth limit).

All proxies of a test share one asyncio loop on a background thread (`ProxyHub`); closing the hub closes
every listener and connection it made, so a failed test leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from tests.support.brokers import free_port

MODES = ("pass", "blackhole", "reset", "delay")


@dataclass
class ProxyStats:
    """What went through: the tests assert on these, so a proxy nobody uses cannot fake an isolation."""

    accepted: int = 0
    forwarded: int = 0  # bytes delivered, both directions
    dropped: int = 0  # bytes read and thrown away in blackhole mode
    resets: int = 0  # connections closed by the proxy (reset mode, or healed after a blackhole)


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    poisoned: bool = False  # lost bytes: must be reset before traffic passes again
    tasks: list[asyncio.Task] = field(default_factory=list)


def _abort(writer: asyncio.StreamWriter | None) -> None:
    """Close with an RST (SO_LINGER 0), as a peer whose connection was cut sees it."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxy:
    """One listening port forwarding to `target` (host, port); create through `ProxyHub.proxy`."""

    def __init__(self, hub: ProxyHub, name: str, target: tuple[str, int], port: int) -> None:
        self.hub = hub
        self.name = name
        self.target = target
        self.port = port
        self.mode = "pass"
        self.delay_s = 0.0
        self.stats = ProxyStats()
        self._conns: set[_Conn] = set()
        self._server: asyncio.base_events.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        return f"Proxy({self.name} {self.address} -> {self.target[0]}:{self.target[1]}, {self.mode})"

    # --- control, from the test's thread -------------------------------------------------------------

    def set_mode(self, mode: str, delay_s: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"proxy mode {mode!r} is not one of {', '.join(MODES)}")
        self.hub.run(self._set_mode(mode, delay_s))

    def heal(self) -> None:
        self.set_mode("pass")

    def blackhole(self) -> None:
        self.set_mode("blackhole")

    def reset(self) -> None:
        self.set_mode("reset")

    def delay(self, seconds: float) -> None:
        self.set_mode("delay", seconds)

    def open_connections(self) -> int:
        return len(self._conns)

    # --- inside the hub's loop -----------------------------------------------------------------------

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            self._drop(conn)
        if self._server is not None:
            await self._server.wait_closed()

    async def _set_mode(self, mode: str, delay_s: float) -> None:
        self.mode, self.delay_s = mode, delay_s
        for conn in list(self._conns):
            if mode == "reset" or (mode in ("pass", "delay") and (conn.poisoned or conn.upstream is None)):
                self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        self.stats.resets += 1
        _abort(conn.client)
        _abort(conn.upstream)
        for t in conn.tasks:
            t.cancel()
        self._conns.discard(conn)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        conn = _Conn(writer)
        self._conns.add(conn)
        if self.mode == "reset":
            self._drop(conn)
            return
        if self.mode == "blackhole":
            conn.poisoned = True
            conn.tasks.append(asyncio.current_task())  # type: ignore[arg-type]
            await self._pump(reader, None, conn)
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), 5)
        except (TimeoutError, OSError):
            self._drop(conn)  # upstream down: the client sees the refusal as a reset
            return
        conn.upstream = up_writer
        conn.tasks = [asyncio.create_task(self._pump(reader, up_writer, conn)),
                      asyncio.create_task(self._pump(up_reader, writer, conn))]

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None, conn: _Conn) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer)) if writer is not None else None
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if self.mode == "blackhole" or writer is None:
                    conn.poisoned = True
                    self.stats.dropped += len(data)
                    continue
                due = time.monotonic() + (self.delay_s if self.mode == "delay" else 0.0)
                queue.put_nowait((due, data))
            await queue.join()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            if sender is not None:
                sender.cancel()
            if conn in self._conns:  # one side closed: close the other, as a socket pair does
                self._conns.discard(conn)
                for w in (conn.client, conn.upstream):
                    if w is not None:
                        w.close()
                for t in conn.tasks:
                    if t is not asyncio.current_task():
                        t.cancel()

    async def _send(self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                self.stats.forwarded += len(data)
                writer.write(data)
                await writer.drain()
            except OSError:
                pass
            finally:
                queue.task_done()


class ProxyHub:
    """The loop thread all proxies of one test run on; a context manager that closes them all."""

    def __init__(self) -> None:
        self.proxies: list[Proxy] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxies", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def proxy(self, name: str, target: tuple[str, int] | int, port: int | None = None) -> Proxy:
        """A proxy listening on `port` (a free one by default) in front of `target` (a port on 127.0.0.1)."""
        if isinstance(target, int):
            target = ("127.0.0.1", target)
        p = Proxy(self, name, target, port or free_port())
        self.run(p._start())
        self.proxies.append(p)
        return p

    def by_name(self, name: str) -> Proxy:
        return next(p for p in self.proxies if p.name == name)

    def heal_all(self) -> None:
        for p in self.proxies:
            if p.mode != "pass":
                p.heal()

    def close(self) -> None:
        if not self._loop.is_running():
            return
        for p in self.proxies:
            with contextlib.suppress(Exception):
                self.run(p._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> ProxyHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
