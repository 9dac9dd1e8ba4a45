"""noida-db (issue 17's reference broker: a native, in-memory Kafka-protocol server) run beside kafkalite when it is
installed (`pip install noida-db==0.2.3`); the benchmarks skip its rows otherwise.

Its binary is started directly (not through its Python wrapper) so that the process whose CPU time is read is
the server itself; only its Kafka service runs, on a free port, with its data in the benchmark's scratch dir.
"""

from __future__ import annotations

import socket
import subprocess
import time
from importlib import resources
from pathlib import Path

from tests.support.brokers import free_port


def binary() -> Path | None:
    """The installed noida-db server binary, or None."""
    try:
        path = Path(str(resources.files("noida_db").joinpath("noida-db")))
    except ModuleNotFoundError:
        return None
    return path if path.is_file() else None


class NoidaKafka:
    """noida-db serving only Kafka on 127.0.0.1; `proc`, `port` and `bootstrap` as BrokerProcess has them."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30) -> NoidaKafka:
        path = binary()
        assert path is not None, "noida-db is not installed"
        path.chmod(0o755)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([str(path), "start", "--only", "kafka", "--kafka-port", str(self.port),
                                      "--data-dir", str(self.data_dir)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"noida-db did not start on port {self.port}") from None
                time.sleep(0.1)

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
