"""Several real `kafkalite serve` processes sharing one ZooKeeper chroot: a cluster on 127.0.0.1 ports.

`Cluster(..., proxied=True)` is the fault-test layout (docs/replication.md): each broker has two listeners, PLAINTEXT
for clients (direct) and REPLICATION for other brokers, advertised through a `ProxyHub` proxy (`cluster.link[bid]`),
with `inter.broker.listener.name=REPLICATION`; and each broker reaches ZooKeeper through a proxy of its own
(`cluster.zk_link[bid]`). A test cuts a broker off from its followers (`link[bid].blackhole()`) or from ZooKeeper
(`zk_link[bid]`) without touching its clients. Fault helpers (kill -9, SIGSTOP/SIGCONT, SIGTERM, restart) and
ZooKeeper's ground truth (partition state, controller) live here too, so scenarios wait on facts rather than sleep.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey
from kafkalite.security.transport import PLAINTEXT_CLIENT, ClientSecurity
from tests.support.brokers import BrokerProcess, free_port
from tests.support.proxy import ProxyHub
from tests.support.waiting import wait_until

SESSION_TIMEOUT_MS = 3000  # tickTime 500 allows 1-10 s
CONTROLLED_SHUTDOWN_BACKOFF_MS = 200


class Cluster:
    def __init__(self, root: Path, zk_connect: str, size: int = 3, *, proxied: bool = False,
                 control_plane: bool = False, per_broker: Callable[[int, int], dict[str, object]] | None = None,
                 security: ClientSecurity = PLAINTEXT_CLIENT, **overrides: object) -> None:
        """`proxied`: brokers reach each other (REPLICATION listener) and ZooKeeper through proxies the test can cut;
        `control_plane` (with `proxied`): a CONTROL listener, not proxied, is control.plane.listener.name;
        `per_broker(bid, port)`: props of one broker given its PLAINTEXT port (e.g. listeners of its own);
        `security`: how the helpers' own requests (metadata, request, create_topic) reach that port, when
        `per_broker` makes it a TLS or SASL listener."""
        self.security = security
        self.zk_connect = zk_connect
        self.brokers: dict[int, BrokerProcess] = {}
        self.paused: set[int] = set()  # SIGSTOPped: alive, but not answering
        self.hub: ProxyHub | None = ProxyHub() if proxied else None
        self.link: dict[int, Any] = {}  # bid -> Proxy in front of its REPLICATION listener (proxied layout)
        self.zk_link: dict[int, Any] = {}  # bid -> Proxy between it and ZooKeeper (proxied layout)
        self._zk: Any = None
        zk_hosts, _, chroot = zk_connect.partition("/")
        for bid in range(1, size + 1):
            props: dict[str, object] = {"broker.id": bid, "zookeeper.connect": zk_connect,
                                        "zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS,
                                        # a short controlled-shutdown backoff: a broker still leading partitions
                                        # without another in-sync replica (replication factor 1) retries its
                                        # ControlledShutdown before it stops (Kafka: 5 s apart)
                                        "controlled.shutdown.retry.backoff.ms": CONTROLLED_SHUTDOWN_BACKOFF_MS}
            port = None
            if self.hub is not None:
                port, repl = free_port(), free_port()
                self.link[bid] = self.hub.proxy(f"b{bid}-replication", repl)
                self.zk_link[bid] = self.hub.proxy(f"b{bid}-zookeeper", int(zk_hosts.rsplit(":", 1)[1]))
                props.update({
                    "listeners": f"PLAINTEXT://127.0.0.1:{port},REPLICATION://127.0.0.1:{repl}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},REPLICATION://{self.link[bid].address}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
                    "inter.broker.listener.name": "REPLICATION",
                    "zookeeper.connect": f"{self.zk_link[bid].address}/{chroot}",
                })
                if control_plane:  # KIP-291: the controller's requests on a listener of their own, not proxied
                    ctl = free_port()
                    props.update({
                        "listeners": f"{props['listeners']},CONTROL://127.0.0.1:{ctl}",
                        "advertised.listeners": f"{props['advertised.listeners']},CONTROL://127.0.0.1:{ctl}",
                        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROL:PLAINTEXT",
                        "control.plane.listener.name": "CONTROL",
                    })
            props.update(overrides)
            if per_broker is not None:
                port = port or free_port()
                props.update(per_broker(bid, port))
            self.brokers[bid] = BrokerProcess(root / f"b{bid}", props, port=port)

    def start(self) -> Cluster:
        for b in self.brokers.values():
            b.start()
        return self

    def stop(self) -> None:
        """SIGTERM each running broker; a broker that does not exit cleanly (in 15 s, code 0) fails the test.
        Every proxy is healed first: a test that failed mid-fault would otherwise leave a broker cut off from
        its controller, whose controlled shutdown then waits out its request timeout (30 s, as Kafka's), and
        the teardown would report that instead of the test's own failure."""
        if self.hub is not None:
            self.hub.heal_all()
        try:
            self._stop_brokers()
        finally:
            if self._zk is not None:
                self._zk.stop()
                self._zk.close()
            if self.hub is not None:
                self.hub.close()

    def _stop_brokers(self) -> None:
        failed = []
        for bid, b in self.brokers.items():
            if b.proc is not None and b.proc.poll() is None:
                if bid in self.paused:
                    b.proc.send_signal(signal.SIGCONT)
                    self.paused.discard(bid)
                b.proc.send_signal(signal.SIGTERM)
                try:
                    b.proc.wait(15)
                except subprocess.TimeoutExpired:
                    # the broker runs with PYTHONFAULTHANDLER=1: its log then shows where it hung
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
        with KafkaClient(self.brokers[bid].bootstrap, timeout_s=10, security=self.security) as c:
            return c.metadata(topics)

    def request(self, bid: int, api: ApiKey, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        with KafkaClient(self.brokers[bid].bootstrap, timeout_s=30, security=self.security) as c:
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
        views: dict[int, Any] = {}

        def agreed() -> Any:
            views.clear()
            views.update({bid: self.view(bid) for bid in self.running()})
            first = next(iter(views.values()))
            return (first,) if all(v == first for v in views.values()) and check(first) else None
        try:
            return wait_until(agreed, timeout_s, "brokers agreeing")[0]
        except AssertionError as exc:
            raise AssertionError(f"brokers did not agree within {timeout_s} s: {views} ({exc})") from None

    # --- faults ------------------------------------------------------------------------------------------

    def kill(self, bid: int) -> None:
        """kill -9: no shutdown code runs; ZooKeeper notices when the session expires."""
        self.brokers[bid].proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        self.brokers[bid].proc.wait(10)  # type: ignore[union-attr]
        self.paused.discard(bid)

    def pause(self, bid: int) -> None:
        """SIGSTOP: alive, sockets open, answering nothing (a GC stall or a zombie)."""
        self.brokers[bid].proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        self.paused.add(bid)

    def resume(self, bid: int) -> None:
        self.brokers[bid].proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        self.paused.discard(bid)

    def terminate(self, bid: int, timeout_s: float = 60) -> int:
        """SIGTERM and wait: a clean (controlled, once it exists) shutdown; returns the exit code."""
        return self.brokers[bid].stop(signal.SIGTERM, timeout_s)

    def restart(self, bid: int) -> None:
        """Start a stopped or killed broker again with the same id, ports and data dir."""
        b = self.brokers[bid]
        if b.proc is not None and b.proc.poll() is None:
            raise AssertionError(f"broker {bid} is still running")
        b.start()

    # --- ZooKeeper's ground truth ------------------------------------------------------------------------

    def zk(self) -> Any:
        """A kazoo client on the test's chroot, direct (not through a proxy)."""
        if self._zk is None:
            from kazoo.client import KazooClient

            self._zk = KazooClient(hosts=self.zk_connect, timeout=10)
            self._zk.start(timeout=10)
        return self._zk

    def zk_json(self, path: str) -> Any:
        """The JSON document at `path`, None when there is none (also when it goes between the two reads: an
        ephemeral node such as /controller vanishes when its owner's session expires)."""
        from kazoo.exceptions import NoNodeError

        try:
            return json.loads(self.zk().get(path)[0])
        except NoNodeError:
            return None

    def registered(self) -> set[int]:
        """Broker ids with a live /brokers/ids registration (an ephemeral node: gone when the session is)."""
        return {int(i) for i in self.zk().get_children("/brokers/ids")} if self.zk().exists("/brokers/ids") else set()

    def controller_id(self) -> int:
        doc = self.zk_json("/controller")
        return -1 if doc is None else int(doc["brokerid"])

    def controller_epoch(self) -> int:
        doc = self.zk_json("/controller_epoch")
        return -1 if doc is None else int(doc)

    def partition_state(self, topic: str, partition: int) -> dict[str, Any]:
        """{"leader", "leader_epoch", "isr", "controller_epoch", ...} as the controller last wrote it."""
        doc = self.zk_json(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return doc or {"leader": -1, "leader_epoch": -1, "isr": []}

    def leader(self, topic: str, partition: int) -> int:
        return int(self.partition_state(topic, partition)["leader"])

    def wait_for(self, what: str, check: Callable[[], Any], timeout_s: float = 30, every_s: float = 0.05) -> Any:
        """Poll `check` until it returns something truthy; its value, or AssertionError naming `what`
        (tests/support/waiting.py: what a moving cluster raises meanwhile counts as not yet)."""
        return wait_until(check, timeout_s, what, every_s)

    def wait_deregistered(self, bid: int, timeout_s: float = 30) -> float:
        """Wait for broker `bid`'s ZooKeeper registration to go (session expiry); returns the seconds waited."""
        t0 = time.monotonic()
        self.wait_for(f"broker {bid} deregistered", lambda: bid not in self.registered(), timeout_s)
        return time.monotonic() - t0

    def wait_isr(self, topic: str, partitions: int, size: int, timeout_s: float = 60) -> None:
        """Every partition has a leader and an ISR of `size` (e.g. full again after a restart)."""
        def ok() -> bool:
            states = [self.partition_state(topic, p) for p in range(partitions)]
            return all(s["leader"] >= 0 and len(s["isr"]) == size for s in states)
        self.wait_for(f"{topic}: ISR of {size} on {partitions} partitions", ok, timeout_s)

    def create_topic(self, name: str, partitions: int = 3, replication_factor: int = 3,
                     configs: dict[str, str] | None = None, timeout_s: float = 30) -> None:
        """CreateTopics through a running broker once every running broker is known to all; waits until every
        partition has a leader."""
        running = self.running()
        self.agreed_view(lambda v: {b for b, _ in v[1]} == set(running), timeout_s)
        bid = next(iter(running))
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                "timeout_ms": 20000}
        res = self.request(bid, ApiKey.CREATE_TOPICS, body)
        assert res["topics"][0]["error_code"] == 0, res
        self.wait_for(f"{name} has leaders", lambda: all(self.leader(name, p) >= 0 for p in range(partitions)),
                      timeout_s)


async def state_becomes(store: Any, topic: str, partition: int, expected: tuple, timeout_s: float = 10) -> Any:
    """The partition's state once `store` (a ClusterStore) shows (leader, isr, leader_epoch) == `expected`;
    AssertionError with the last state seen after `timeout_s`."""
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout_s
    state = None
    while asyncio.get_running_loop().time() < deadline:
        state = await store.partition_state(topic, partition)
        if state is not None and (state.leader, state.isr, state.leader_epoch) == expected:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"{topic}-{partition}: {state} never became (leader, isr, epoch) {expected}")
