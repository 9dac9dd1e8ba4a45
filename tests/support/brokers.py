"""A real `kafkalite serve` process for client tests: a free loopback port, a tmp data dir, SIGTERM at the end."""

from __future__ import annotations

import collections
import os
import random
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

FREE_PORT_LOW = 27000  # free_port() picks from here up to the ephemeral range; consecutive_free_ports below it


def _ephemeral_low() -> int:
    """The first port the kernel hands to outgoing connections (Linux: ip_local_port_range, 32768 by default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(p: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False


_RECENT: collections.deque[int] = collections.deque(maxlen=512)  # handed out lately: maybe not bound yet


def free_port() -> int:
    """A port nothing listens on, for a process that binds it later. It is chosen below the ephemeral range (and
    not among the last ones handed out): a port the kernel picked for a bind to port 0 may be taken in the meantime
    as the local port of any outgoing connection (a client's, a proxy's), and the broker then fails to start with
    "address already in use" (seen once in CI). Falls back to the kernel's pick if that range is too small."""
    low = _ephemeral_low()
    if low - FREE_PORT_LOW < 2 * _RECENT.maxlen:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    while True:
        p = random.randrange(FREE_PORT_LOW, low)
        if p not in _RECENT and _bindable(p):
            _RECENT.append(p)
            return p


def consecutive_free_ports(n: int, avoid: range | tuple[int, ...] = ()) -> int:
    """The first of `n` free consecutive ports below the ephemeral range (so outgoing connections do not take
    them meanwhile), as `kafkalite cluster --port` wants; none of them in `avoid`, and apart from `free_port`'s."""
    while True:
        p = random.randrange(20000, FREE_PORT_LOW - n)
        if all(p + i not in avoid and p + i not in _RECENT and _bindable(p + i) for i in range(n)):
            _RECENT.extend(range(p, p + n))
            return p


SLOW_STOP_S = 8.0  # a clean stop slower than this gets a SIGQUIT (kafkalite serve logs its asyncio tasks)

class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, object] | None = None, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        props = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": str(data_dir),
                 "group.initial.rebalance.delay.ms": 0, **(overrides or {})}
        self.args = [sys.executable, "-m", "kafkalite.cli.main", "serve"]
        for k, v in props.items():
            self.args += ["--override", f"{k}={v}"]
        self.log_path = data_dir.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60) -> BrokerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1",
                                          # a broker killed with SIGABRT (a hung stop) logs every thread's stack
                                          "PYTHONFAULTHANDLER": "1"})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"broker did not listen within {timeout_s}s:\n{self.output()}")

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            if sig == signal.SIGTERM and timeout_s > SLOW_STOP_S:
                try:
                    self.proc.wait(SLOW_STOP_S)
                except subprocess.TimeoutExpired:  # a slow shutdown: its log gets what each task waits on
                    self.proc.send_signal(signal.SIGQUIT)
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._log.close()
        return rc

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@contextmanager
def running_broker(data_dir: Path, **overrides: object):
    b = BrokerProcess(data_dir, overrides).start()
    try:
        yield b
    finally:
        rc = b.stop()
        assert rc == 0, f"broker exit code {rc}:\n{b.output()}"
