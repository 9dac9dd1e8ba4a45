"""Running a local ZooKeeper 3.8 for development and tests (`kafkalite cluster`, tests/support/zookeeper.py).

It runs the jars of Debian's `zookeeper` package as `java ... ZooKeeperServerMain zoo.cfg` in the foreground,
bound to 127.0.0.1 only, with the AdminServer disabled (it would open port 8080 on every interface) and no JMX
port. Readiness is ZooKeeper's `ruok` four-letter command answering `imok`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafkalite.errors import KafkaliteError

DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
DEBIAN_CONF = Path("/etc/zookeeper/conf")
SLF4J_SIMPLE = Path("/usr/share/java/slf4j-simple.jar")
INSTALL_HINT = ("install it with `apt-get install zookeeper` (Debian/Ubuntu: ZooKeeper 3.8 and a Java runtime), "
                "or name its jar with --zookeeper-jar")


def missing(jar: Path = DEBIAN_JAR) -> str | None:
    """Why ZooKeeper can't be started here, or None."""
    if shutil.which("java") is None:
        return f"java is not installed; {INSTALL_HINT}"
    if not jar.exists():
        return f"ZooKeeper is not installed ({jar} is missing); {INSTALL_HINT}"
    return None


def ruok(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


@dataclass
class ZooKeeperServer:
    directory: Path
    port: int = 2181
    tick_time_ms: int = 2000
    jar: Path = DEBIAN_JAR
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    def start(self, timeout_s: float = 30) -> ZooKeeperServer:
        why = missing(self.jar)
        if why:
            raise KafkaliteError(why)
        if ruok(self.port):
            raise KafkaliteError(f"a ZooKeeper is already running on {self.address}; stop it or choose another "
                                 "port")
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        cfg.write_text(f"tickTime={self.tick_time_ms}\ndataDir={self.directory / 'data'}\n"
                       f"clientPortAddress=127.0.0.1\nclientPort={self.port}\nmaxClientCnxns=200\n"
                       "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,mntr,stat\n")
        cp = [str(DEBIAN_CONF), str(self.jar)] + ([str(SLF4J_SIMPLE)] if SLF4J_SIMPLE.exists() else [])
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["java", "-Xmx256m", "-cp", ":".join(cp), "org.apache.zookeeper.server.ZooKeeperServerMain",
                 str(cfg)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise KafkaliteError(f"ZooKeeper exited with {self.proc.returncode} (its log: {self.log_path}): "
                                     f"{self.log_path.read_text(errors='replace')[-2000:]}")
            if ruok(self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise KafkaliteError(f"ZooKeeper did not answer on {self.address} within {timeout_s:g} s (its log: "
                             f"{self.log_path})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
