"""`kafkalite cluster`: settings that must differ per broker (log.dirs on a disk of each broker's own, for one
broker process per core: docs/scaling.md) through `{id}` in an --override value."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkalite.cli.cluster import broker_command
from kafkalite.client import KafkaClient
from tests.support.brokers import consecutive_free_ports

pytestmark = pytest.mark.cluster


def test_broker_command_replaces_id_in_override_values_and_lets_them_win():
    cmd = broker_command(2, 9093, "127.0.0.1:2181/kl", Path("/tmp/c"),
                         ["log.dirs=/mnt/disk{id}/kl", "num.partitions=6"])
    settings = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--override"]
    assert settings == ["broker.id=2", "zookeeper.connect=127.0.0.1:2181/kl", "listeners=PLAINTEXT://127.0.0.1:9093",
                        "log.dirs=/tmp/c/broker-2", "log.dirs=/mnt/disk2/kl", "num.partitions=6"]


def test_each_broker_gets_its_own_log_dir_from_one_override(tmp_path, zookeeper_server):
    """Two brokers told `log.dirs=<tmp>/disk{id}/kl` each write their own dir; with the value taken literally
    the second broker would find the first one's dir locked and the command would fail."""
    port = consecutive_free_ports(2)
    zk_port = consecutive_free_ports(1, avoid=range(port, port + 2))
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "cluster", "--brokers", "2", "--dir",
                             str(tmp_path / "c"), "--port", str(port), "--zookeeper-port", str(zk_port),
                             "--override", f"log.dirs={tmp_path}/disk{{id}}/kl"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "".join(lines)
            lines.append(line)
            if line.startswith("bootstrap.servers="):
                break
        deadline = time.monotonic() + 20
        while True:
            with KafkaClient(f"127.0.0.1:{port}") as c:
                if len(c.metadata()["brokers"]) == 2:
                    break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        for bid in (1, 2):
            meta = (tmp_path / f"disk{bid}" / "kl" / "meta.properties").read_text()
            assert f"node.id={bid}\n" in meta
        assert not (tmp_path / "disk{id}").exists()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
