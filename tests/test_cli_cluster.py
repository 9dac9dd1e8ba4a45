"""`kafkalite cluster`: settings that must differ per broker (log.dirs on a disk of each broker's own, for one
broker process per core: docs/scaling.md) through `{id}` in an --override value."""

from __future__ import annotations

import os
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


def start_cluster_command(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """`kafkalite cluster --brokers 2` on free ports (its output piped) and its first broker's port."""
    port = consecutive_free_ports(2)
    zk_port = consecutive_free_ports(1, avoid=range(port, port + 2))
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "cluster", "--brokers", "2", "--dir",
                             str(tmp_path / "c"), "--port", str(port), "--zookeeper-port", str(zk_port), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, port


def line_with(proc: subprocess.Popen, text: str, timeout_s: float = 60) -> str:
    """The command's next output line containing `text` (AssertionError with what it printed otherwise)."""
    lines = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line, "".join(lines)
        lines.append(line)
        if text in line:
            return line
    raise AssertionError("".join(lines))


def wait_for_brokers(port: int, count: int, timeout_s: float = 30) -> None:
    """Until the broker on `port` names `count` brokers in Metadata."""
    deadline = time.monotonic() + timeout_s
    while True:
        with KafkaClient(f"127.0.0.1:{port}") as c:
            if len(c.metadata()["brokers"]) == count:
                return
        assert time.monotonic() < deadline, f"the broker on {port} never saw {count} brokers"
        time.sleep(0.2)


def test_each_broker_gets_its_own_log_dir_from_one_override(tmp_path, zookeeper_server):
    """Two brokers told `log.dirs=<tmp>/disk{id}/kl` each write their own dir; with the value taken literally
    the second broker would find the first one's dir locked and the command would fail."""
    proc, port = start_cluster_command(tmp_path, "--override", f"log.dirs={tmp_path}/disk{{id}}/kl")
    try:
        line_with(proc, "bootstrap.servers=")
        wait_for_brokers(port, 2, timeout_s=20)
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


def test_console_consumer_joins_its_group_at_the_coordinator_not_at_the_bootstrap_broker(cluster):
    """A console consumer bootstrapped to a broker that does not coordinate its group joins, syncs, heartbeats
    and leaves through the coordinator (the client's group_request: found by FindCoordinator, looked up again
    and retried on NOT_COORDINATOR and kin, as Kafka's consumer does)."""
    cluster.create_topic("gm", partitions=1, replication_factor=3)
    cluster.wait_isr("gm", 1, 3)
    first_id, first = next(iter(cluster.brokers.items()))
    cli = [sys.executable, "-m", "kafkalite.cli.main"]
    r = subprocess.run([*cli, "produce", "--bootstrap-server", cluster.bootstrap, "--topic", "gm"],
                       input="v0\nv1\nv2\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    with KafkaClient(cluster.bootstrap) as c:
        group = next(g for g in (f"grp-{i}" for i in range(200)) if c.coordinator(g).node_id != first_id)
    r = subprocess.run([*cli, "consume", "--bootstrap-server", first.bootstrap, "--topic", "gm", "--group", group,
                        "--from-beginning", "--max-messages", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["v0", "v1", "v2"], r.stdout + r.stderr


def test_a_broker_that_dies_leaves_the_others_running_and_sighup_restarts_it(tmp_path, zookeeper_server):
    """kill -9 of one broker of `kafkalite cluster` (to watch a failover) is reported and the others keep serving;
    SIGHUP starts it again under the command, and Ctrl-C still stops everything."""
    proc, port = start_cluster_command(tmp_path)

    try:
        line_with(proc, "bootstrap.servers=")
        [pid] = [int(p) for p in subprocess.run(["pgrep", "-f", f"listeners=PLAINTEXT://127.0.0.1:{port} "],
                                                capture_output=True, text=True).stdout.split()]
        os.kill(pid, signal.SIGKILL)
        assert "broker 1 exited with -9" in line_with(proc, "broker 1 exited")
        wait_for_brokers(port + 1, 1)  # broker 2 serves on; its session ended, so the cluster lost broker 1
        assert proc.poll() is None
        proc.send_signal(signal.SIGHUP)
        line_with(proc, "restarting broker 1")
        wait_for_brokers(port + 1, 2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
