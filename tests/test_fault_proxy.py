"""The fault tests' TCP proxy (tests/support/proxy.py) on real loopback sockets: each mode does what a
scenario relies on, and closing the hub leaves no listener behind."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from tests.support.proxy import ProxyHub


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:
            pass  # the proxy reset us: what the reset tests do


@pytest.fixture
def echo():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def hub():
    with ProxyHub() as h:
        yield h


def _roundtrip(port: int, payload: bytes = b"hello", timeout: float = 2) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got


@pytest.mark.slow
def test_pass_forwards_both_ways_and_counts(hub, echo):
    p = hub.proxy("x", echo)
    assert _roundtrip(p.port, b"a" * 100000) == b"a" * 100000
    assert p.stats.accepted == 1 and p.stats.forwarded == 200000 and p.stats.dropped == 0


@pytest.mark.slow
def test_blackhole_holds_and_drops_then_heal_resets_the_poisoned_connection(hub, echo):
    p = hub.proxy("x", echo)
    old = socket.create_connection(("127.0.0.1", p.port), timeout=0.5)
    old.sendall(b"before")
    assert old.recv(100) == b"before"
    p.blackhole()
    old.sendall(b"lost")
    with pytest.raises(TimeoutError):
        old.recv(100)  # no answer, but no reset either: a partition, not a crash
    with socket.create_connection(("127.0.0.1", p.port), timeout=0.5) as new:  # accepted, then silent
        new.sendall(b"x")
        with pytest.raises(TimeoutError):
            new.recv(100)
    assert p.stats.dropped >= 5
    p.heal()
    old.settimeout(2)
    with pytest.raises(ConnectionResetError):  # it lost bytes: it cannot carry the protocol any more
        assert old.recv(100) == b""
        old.sendall(b"y")
        old.recv(100)
    old.close()
    assert _roundtrip(p.port) == b"hello"  # new connections pass again


@pytest.mark.slow
def test_reset_closes_open_and_new_connections(hub, echo):
    p = hub.proxy("x", echo)
    s = socket.create_connection(("127.0.0.1", p.port), timeout=2)
    s.sendall(b"a")
    assert s.recv(10) == b"a"
    p.reset()
    with pytest.raises(ConnectionResetError):
        s.recv(10)
    s.close()
    with pytest.raises((ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        _roundtrip(p.port)
    assert p.stats.resets >= 2


@pytest.mark.slow
def test_delay_adds_latency_in_order(hub, echo):
    p = hub.proxy("x", echo)
    p.delay(0.2)
    t0 = time.monotonic()
    assert _roundtrip(p.port, b"0123456789") == b"0123456789"
    assert time.monotonic() - t0 >= 0.4  # 0.2 s each way
    p.heal()
    t0 = time.monotonic()
    assert _roundtrip(p.port) == b"hello"
    assert time.monotonic() - t0 < 0.3


@pytest.mark.slow
def test_upstream_down_is_a_reset_and_closing_the_hub_frees_the_port(echo):
    hub = ProxyHub()
    try:
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        dead_port = dead.getsockname()[1]
        dead.close()
        p = hub.proxy("to-nowhere", dead_port)
        with pytest.raises((ConnectionResetError, ConnectionAbortedError)):
            assert _roundtrip(p.port) == b""
            raise ConnectionResetError
        with pytest.raises(ValueError, match="not one of"):
            p.set_mode("flaky")
    finally:
        hub.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", p.port), timeout=1)
