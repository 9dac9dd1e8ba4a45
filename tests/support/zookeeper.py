"""A real ZooKeeper 3.8 for cluster tests (kafkalite.cluster.zookeeper_server): one per test session on a free
loopback port with tickTime 500 (sessions of 1-10 s); each test takes its own chroot, so tests never see each
other's znodes. Tests are skipped, saying why, only when java or the ZooKeeper jar is not installed."""

from __future__ import annotations

import uuid
from pathlib import Path

from kafkalite.cluster.zookeeper_server import ZooKeeperServer as _Server
from kafkalite.cluster.zookeeper_server import missing, ruok
from tests.support.brokers import free_port

__all__ = ["ZooKeeperServer", "missing", "ruok"]


class ZooKeeperServer(_Server):
    def __init__(self, directory: Path) -> None:
        super().__init__(directory, port=free_port(), tick_time_ms=500)

    def connect(self, chroot: str | None = None) -> str:
        """A zookeeper.connect value: this server and `chroot` (a fresh one by default)."""
        return f"{self.address}/{chroot or 'kl-' + uuid.uuid4().hex[:10]}"
