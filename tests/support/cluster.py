"""Several real `kafkalite serve` processes sharing one ZooKeeper chroot: a cluster on 127.0.0.1 ports."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey
from tests.support.brokers import BrokerProcess

SESSION_TIMEOUT_MS = 3000  # tickTime 500 allows 1-10 s
CONTROLLED_SHUTDOWN_BACKOFF_MS = 200


class Cluster:
    def __init__(self, root: Path, zk_connect: str, size: int = 3, **overrides: object) -> None:
        self.zk_connect = zk_connect
        self.brokers: dict[int, BrokerProcess] = {}
        self.paused: set[int] = set()  # SIGSTOPped: alive, but not answering
        for bid in range(1, size + 1):
            # a short controlled-shutdown backoff: a broker still leading partitions without another in-sync
            # replica (replication factor 1) retries its ControlledShutdown before it stops (Kafka: 5 s apart)
            props = {"broker.id": bid, "zookeeper.connect": zk_connect,
                     "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
                     "controlled.shutdown.retry.backoff.ms": CONTROLLED_SHUTDOWN_BACKOFF_MS, **overrides}
            self.brokers[bid] = BrokerProcess(root / f"b{bid}", props)

    def start(self) -> Cluster:
        for b in self.brokers.values():
            b.start()
        return self

    def stop(self) -> None:
        """SIGTERM each running broker; a broker that does not exit cleanly (in 15 s, code 0) fails the test."""
        failed = []
        for bid, b in self.brokers.items():
            if b.proc is not None and b.proc.poll() is None:
                if bid in self.paused:
                    b.proc.send_signal(signal.SIGCONT)
                b.proc.send_signal(signal.SIGTERM)
                try:
                    b.proc.wait(15)
                except subprocess.TimeoutExpired:
                    # with PYTHONFAULTHANDLER=1 (CI sets it) the broker's log then shows where it hung
                    b.proc.send_signal(signal.SIGABRT)
                    time.sleep(1)
                rc = b.stop(timeout_s=5)
                if rc != 0:
                    failed.append(f"broker {bid} exited with {rc}:\n{b.output()[-3000:]}")
        assert not failed, "\n".join(failed)

    def running(self) -> dict[int, BrokerProcess]:
        return {i: b for i, b in self.brokers.items()
                if b.proc is not None and b.proc.poll() is None and i not in self.paused}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def metadata(self, bid: int, topics: list[str] | None = None) -> dict[str, Any]:
        with KafkaClient(self.brokers[bid].bootstrap, timeout_s=10) as c:
            return c.metadata(topics)

    def request(self, bid: int, api: ApiKey, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        with KafkaClient(self.brokers[bid].bootstrap, timeout_s=30) as c:
            return c.request(api, body, version)

    def view(self, bid: int) -> tuple[Any, ...]:
        """What broker `bid` says of the cluster, comparable across brokers."""
        md = self.metadata(bid)
        brokers = tuple(sorted((b["node_id"], b["port"]) for b in md["brokers"]))
        topics = tuple(sorted((t["name"], str(t["topic_id"]), tuple(
            (p["partition_index"], p["leader_id"], p["leader_epoch"], tuple(p["replica_nodes"]), tuple(p["isr_nodes"]),
             tuple(p["offline_replicas"])) for p in sorted(t["partitions"], key=lambda p: p["partition_index"])))
            for t in md["topics"]))
        return md["controller_id"], brokers, topics

    def agreed_view(self, check: Callable[[tuple[Any, ...]], bool] = lambda v: True,
                    timeout_s: float = 20) -> tuple[Any, ...]:
        """The view every running broker gives alike and that passes `check`; waits for it."""
        deadline = time.monotonic() + timeout_s
        views: dict[int, Any] = {}
        while time.monotonic() < deadline:
            try:
                views = {bid: self.view(bid) for bid in self.running()}
            except (OSError, ConnectionError):
                time.sleep(0.1)
                continue
            first = next(iter(views.values()))
            if all(v == first for v in views.values()) and check(first):
                return first
            time.sleep(0.1)
        raise AssertionError(f"brokers did not agree within {timeout_s} s: {views}")
