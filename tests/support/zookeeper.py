"""A real ZooKeeper 3.8 server for cluster tests (Debian's `zookeeper` package), as the replication reference's
§7.1 runs it: `java ... ZooKeeperServerMain zoo.cfg`, loopback only, a free port, no AdminServer, tickTime 500
(sessions of 1-10 s). One server per test session; each test gets its own chroot, so tests never see each
other's znodes. Tests are skipped, saying why, only when java or the ZooKeeper jar is not installed."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.support.brokers import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
ZOOKEEPER_CONF = Path("/etc/zookeeper/conf")
SLF4J_SIMPLE = Path("/usr/share/java/slf4j-simple.jar")


def missing() -> str | None:
    """Why ZooKeeper can't be started here, or None."""
    if shutil.which("java") is None:
        return "java is not installed (apt-get install zookeeper installs a JRE and ZooKeeper)"
    if not ZOOKEEPER_JAR.exists():
        return f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing; apt-get install zookeeper)"
    return None


def ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


@dataclass
class ZooKeeperServer:
    directory: Path
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connect(self, chroot: str | None = None) -> str:
        """A zookeeper.connect value: this server and `chroot` (a fresh one by default)."""
        return f"{self.address}/{chroot or 'kl-' + uuid.uuid4().hex[:10]}"

    def start(self, timeout_s: float = 30) -> ZooKeeperServer:
        self.port = self.port or free_port()
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={self.directory / 'data'}\nclientPortAddress=127.0.0.1\n"
                       f"clientPort={self.port}\nmaxClientCnxns=200\nadmin.enableServer=false\n"
                       "4lw.commands.whitelist=ruok,srvr,mntr,stat\n")
        cp = [str(ZOOKEEPER_CONF), str(ZOOKEEPER_JAR)] + ([str(SLF4J_SIMPLE)] if SLF4J_SIMPLE.exists() else [])
        log = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true", "-cp", ":".join(cp),
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: "
                                   f"{(self.directory / 'zookeeper.log').read_text(errors='replace')[-3000:]}")
            if ruok(self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"ZooKeeper did not answer ruok on {self.address} within {timeout_s} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
