"""The leader side of replication on real brokers (Kafka's Partition and ReplicaManager): three real `kafkalite serve`
processes and two fake followers, brokers 4 and 5, that this test plays itself.

The fake brokers register in ZooKeeper as Kafka brokers do (so the controller counts them live, puts them in
the ISR and sends them LeaderAndIsr, which a tiny server here acknowledges), and they replicate by sending the
leader real replica Fetch requests over a socket, as a follower's fetcher would: at their log end, advancing
past what they receive, reporting their log start. So the test decides when a follower catches up, stalls or
disappears, whatever the real brokers' own fetchers do. Every topic has replicas [1, 4, 5]: broker 1 leads.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from typing import Any

import pytest

from kafkalite.client import BrokerConnection
from kafkalite.cluster import znodes as z
from kafkalite.protocol import ApiKey, ErrorCode, decode_request, encode_response
from kafkalite.records import SimpleRecord, build_batch, iter_batches
from tests.support.cluster import Cluster

pytestmark = pytest.mark.cluster

LAG_MS = 2000  # replica.lag.time.max.ms: the ISR expiry check runs every second
LEADER, F4, F5 = 1, 4, 5
MIN_ISR = 2


class _ControllerRequests(socketserver.BaseRequestHandler):
    """Acknowledges the controller's LeaderAndIsr, UpdateMetadata and StopReplica, as a broker would."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        with contextlib.suppress(OSError, ConnectionError):
            while True:
                head = _read_exactly(sock, 4)
                frame = _read_exactly(sock, int.from_bytes(head, "big"))
                header, _body = decode_request(frame)
                if header.api_key == ApiKey.LEADER_AND_ISR:
                    answer: dict[str, Any] = {"error_code": 0, "partition_errors": [], "topics": []}
                elif header.api_key == ApiKey.STOP_REPLICA:
                    answer = {"error_code": 0, "partition_errors": []}
                else:
                    answer = {"error_code": 0}
                for part in encode_response(header, answer):
                    sock.sendall(part)  # type: ignore[arg-type]


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


class FakeBroker:
    """A registration in /brokers/ids (Kafka's JSON) and a server answering the controller."""

    def __init__(self, zk_connect: str, broker_id: int) -> None:
        from kazoo.client import KazooClient

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _ControllerRequests)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.zk = KazooClient(hosts=zk_connect, timeout=10)
        self.zk.start(timeout=10)
        reg = z.BrokerRegistration(broker_id, (z.Endpoint("PLAINTEXT", "127.0.0.1", self.server.server_address[1]),),
                                   None)
        self.zk.create(z.broker_path(broker_id), reg.encode(), ephemeral=True, makepath=True)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()
        self.server.shutdown()
        self.server.server_close()


class FakeFollower:
    """Broker `replica_id`'s fetcher for one partition: fetches at its log end and moves past what it got.
    `hold` keeps it fetching at the same offset (alive but stuck); `stop` ends its fetches (dead)."""

    def __init__(self, bootstrap: str, replica_id: int, topic: str, leader_epoch: int) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.conn = BrokerConnection(host, int(port), client_id=f"fake-follower-{replica_id}", timeout_s=10)
        self.replica_id, self.topic, self.leader_epoch = replica_id, topic, leader_epoch
        self.offset = 0
        self.log_start = 0
        self.hold = False
        self.last: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def fetch_once(self, max_wait_ms: int = 100) -> dict[str, Any]:
        body = {"replica_id": self.replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": self.topic, "partitions": [{
                    "partition": 0, "current_leader_epoch": self.leader_epoch, "fetch_offset": self.offset,
                    "last_fetched_epoch": -1, "log_start_offset": self.log_start, "partition_max_bytes": 1 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""}
        resp = self.conn.request(ApiKey.FETCH, body, version=12)
        p = resp["responses"][0]["partitions"][0]
        self.last = p
        if p["error_code"] == 0 and not self.hold:
            batches = list(iter_batches(bytes(p["records"] or b"")))
            if batches:
                self.offset = batches[-1].last_offset + 1
            self.log_start = max(self.log_start, p["log_start_offset"])
        return p

    def start(self) -> FakeFollower:
        def run() -> None:
            while not self._stop.is_set():
                self.fetch_once()
                if self.hold:
                    time.sleep(0.1)  # a stuck follower gets the same records back at once: don't spin
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._thread = None
        self._stop.clear()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper_server):
    connect = zookeeper_server.connect()
    c = Cluster(tmp_path_factory.mktemp("leader"), connect, **{"replica.lag.time.max.ms": LAG_MS}).start()
    fakes: list[FakeBroker] = []
    try:
        c.agreed_view(lambda v: len(v[1]) == 3)
        fakes = [FakeBroker(connect, F4), FakeBroker(connect, F5)]
        c.agreed_view(lambda v: [b for b, _ in v[1]] == [1, 2, 3, 4, 5])
        yield c
    finally:
        for f in fakes:
            f.close()
        c.stop()


def _create(cluster: Cluster, name: str) -> int:
    """Topic `name`, one partition on [1, 4, 5], min.insync.replicas 2; returns its leader epoch."""
    res = cluster.request(2, ApiKey.CREATE_TOPICS, {"topics": [{
        "name": name, "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": 0, "broker_ids": [LEADER, F4, F5]}],
        "configs": [{"name": "min.insync.replicas", "value": str(MIN_ISR)}]}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    view = cluster.agreed_view(lambda v: any(t[0] == name and t[2][0][1] == LEADER for t in v[2]))
    (_i, _leader, epoch, _r, isr, _o), = next(t[2] for t in view[2] if t[0] == name)
    assert sorted(isr) == [LEADER, F4, F5]
    return epoch


def _produce(cluster: Cluster, topic: str, n: int = 1, acks: int = -1, timeout_ms: int = 15000) -> dict[str, Any]:
    batch = build_batch([SimpleRecord(None, b"v%d" % i, -1) for i in range(n)])
    with contextlib.closing(BrokerConnection("127.0.0.1", cluster.brokers[LEADER].port, timeout_s=30)) as conn:
        resp = conn.request(ApiKey.PRODUCE, {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
                                             "topic_data": [{"name": topic, "partition_data": [
                                                 {"index": 0, "records": bytes(batch)}]}]})
    return resp["responses"][0]["partition_responses"][0]


class _Background:
    """A produce running in a thread while the test plays the followers."""

    def __init__(self, cluster: Cluster, topic: str, **kw: Any) -> None:
        self.result: dict[str, Any] | None = None
        self.started = time.monotonic()
        self.elapsed = 0.0
        self.thread = threading.Thread(target=self._run, args=(cluster, topic), kwargs=kw, daemon=True)
        self.thread.start()

    def _run(self, cluster: Cluster, topic: str, **kw: Any) -> None:
        self.result = _produce(cluster, topic, **kw)
        self.elapsed = time.monotonic() - self.started

    def wait(self, timeout_s: float = 20) -> dict[str, Any]:
        self.thread.join(timeout_s)
        assert self.result is not None, "the produce did not finish"
        return self.result


def _consumer_hw(cluster: Cluster, topic: str) -> int:
    with contextlib.closing(BrokerConnection("127.0.0.1", cluster.brokers[LEADER].port, timeout_s=10)) as conn:
        resp = conn.request(ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                           "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                           "topics": [{"topic": topic, "partitions": [{
                                               "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                               "last_fetched_epoch": -1, "log_start_offset": -1,
                                               "partition_max_bytes": 1 << 20}]}],
                                           "forgotten_topics_data": [], "rack_id": ""}, version=12)
    p = resp["responses"][0]["partitions"][0]
    assert p["error_code"] == 0, p
    return p["high_watermark"]


def _zk_isr(cluster: Cluster, topic: str) -> tuple[list[int], int]:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        data, stat = zk.get(z.partition_state_path(topic, 0))
        return list(z.PartitionState.decode("state", data).isr), stat.version
    finally:
        zk.stop()
        zk.close()


def _wait_isr(cluster: Cluster, topic: str, isr: list[int], timeout_s: float = 10) -> None:
    """The ISR `isr` in ZooKeeper and in every broker's Metadata."""
    deadline = time.monotonic() + timeout_s
    while _zk_isr(cluster, topic)[0] != isr:
        assert time.monotonic() < deadline, f"ISR in ZooKeeper is {_zk_isr(cluster, topic)[0]}, not {isr}"
        time.sleep(0.1)
    cluster.agreed_view(lambda v: any(t[0] == topic and list(t[2][0][4]) == isr for t in v[2]),
                        timeout_s=max(1.0, deadline - time.monotonic()))


def test_acks_all_completes_only_when_the_isr_has_fetched_past_the_batch(cluster: Cluster) -> None:
    epoch = _create(cluster, "waits")
    f4 = FakeFollower(cluster.brokers[LEADER].bootstrap, F4, "waits", epoch)
    f5 = FakeFollower(cluster.brokers[LEADER].bootstrap, F5, "waits", epoch)
    f4.fetch_once(0)
    f5.fetch_once(0)  # both at the log end (0): in sync
    produce = _Background(cluster, "waits", n=3)
    time.sleep(0.5)
    assert produce.result is None and _consumer_hw(cluster, "waits") == 0  # appended, not committed
    assert f4.fetch_once()["high_watermark"] == 0 and f4.offset == 3  # gets the records, HW before the read
    f4.fetch_once(0)  # now reports LEO 3
    time.sleep(0.3)
    assert produce.result is None  # f5 is in the ISR and has not got them
    # a replica outside the assignment gets nothing and counts for nothing
    stranger = FakeFollower(cluster.brokers[LEADER].bootstrap, 7, "waits", epoch)
    p = stranger.fetch_once(0)
    assert p["error_code"] == 0 and not p["records"] and stranger.offset == 0
    f5.fetch_once()
    f5.fetch_once(0)
    out = produce.wait(5)
    assert (out["error_code"], out["base_offset"]) == (0, 0), out
    assert _consumer_hw(cluster, "waits") == 3
    assert f4.fetch_once(0)["high_watermark"] == 3


def test_isr_shrinks_refuses_acks_all_below_min_isr_and_expands_again(cluster: Cluster) -> None:
    epoch = _create(cluster, "shrink")
    f4 = FakeFollower(cluster.brokers[LEADER].bootstrap, F4, "shrink", epoch).start()
    try:
        _wait_isr(cluster, "shrink", [LEADER, F4], timeout_s=LAG_MS / 1000 + 8)  # f5 never fetched
        assert _produce(cluster, "shrink", n=2)["error_code"] == 0  # ISR 2 >= min.insync 2
        f4.stop()
        _produce(cluster, "shrink", acks=1)  # f4 now lags behind the leader's log end
        _wait_isr(cluster, "shrink", [LEADER], timeout_s=LAG_MS / 1000 + 8)
        out = _produce(cluster, "shrink")
        assert out["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS, out
        out = _produce(cluster, "shrink", acks=1)  # acks=1 is still taken: nothing was written by the refusal
        assert (out["error_code"], out["base_offset"]) == (0, 3), out
        assert _consumer_hw(cluster, "shrink") == 2  # KIP-966: no commit while the ISR is below min.insync
        f4.start()  # it catches up (LEO 4 >= HW 2, >= the epoch start 0) and rejoins
        _wait_isr(cluster, "shrink", [LEADER, F4])
        deadline = time.monotonic() + 5
        while _consumer_hw(cluster, "shrink") != 4:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert _produce(cluster, "shrink")["error_code"] == 0
    finally:
        f4.stop()


def test_timeout_then_a_shrink_completes_the_waiting_produce(cluster: Cluster) -> None:
    epoch = _create(cluster, "slow")
    f4 = FakeFollower(cluster.brokers[LEADER].bootstrap, F4, "slow", epoch).start()
    f5 = FakeFollower(cluster.brokers[LEADER].bootstrap, F5, "slow", epoch)
    f5.hold = True  # alive, fetching, never past offset 0
    f5.start()
    try:
        start = time.monotonic()
        out = _produce(cluster, "slow", timeout_ms=600)
        assert out["error_code"] == ErrorCode.REQUEST_TIMED_OUT, out
        assert 0.5 < time.monotonic() - start < 5
        # f5 stays behind for longer than the lag: the shrink to [1, 4] (still >= min.insync) commits the wait
        waiting = _Background(cluster, "slow", timeout_ms=15000)
        _wait_isr(cluster, "slow", [LEADER, F4], timeout_s=LAG_MS / 1000 + 8)
        out = waiting.wait(5)
        assert (out["error_code"], out["base_offset"]) == (0, 1), out
        assert _consumer_hw(cluster, "slow") == 2
    finally:
        f4.stop()
        f5.stop()


def test_a_conflicting_isr_write_keeps_the_old_isr(cluster: Cluster) -> None:
    from kazoo.client import KazooClient

    epoch = _create(cluster, "conflict")
    f4 = FakeFollower(cluster.brokers[LEADER].bootstrap, F4, "conflict", epoch).start()
    try:
        # someone else (as the controller would) rewrites the state: the leader's version is now stale
        zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
        zk.start(timeout=10)
        try:
            path = z.partition_state_path("conflict", 0)
            data, stat = zk.get(path)
            zk.set(path, data, version=stat.version)
            notes_before = set(zk.get_children(z.ISR_CHANGE))
        finally:
            zk.stop()
            zk.close()
        # f5 never fetches: the leader proposes [1, 4], its write is refused, the ISR stays [1, 4, 5]
        out = _produce(cluster, "conflict", timeout_ms=LAG_MS * 2 + 1500)
        assert out["error_code"] == ErrorCode.REQUEST_TIMED_OUT, out  # f5 still counts: nothing commits
        isr, version = _zk_isr(cluster, "conflict")
        assert (isr, version) == ([LEADER, F4, F5], stat.version + 1)
        assert _consumer_hw(cluster, "conflict") == 0
        cluster.agreed_view(lambda v: any(t[0] == "conflict" and sorted(t[2][0][4]) == [1, 4, 5] for t in v[2]))
        zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
        zk.start(timeout=10)
        try:
            assert not set(zk.get_children(z.ISR_CHANGE)) - notes_before
        finally:
            zk.stop()
            zk.close()
    finally:
        f4.stop()


def test_delete_records_waits_for_every_live_replicas_log_start(cluster: Cluster) -> None:
    epoch = _create(cluster, "trim")
    f4 = FakeFollower(cluster.brokers[LEADER].bootstrap, F4, "trim", epoch).start()
    f5 = FakeFollower(cluster.brokers[LEADER].bootstrap, F5, "trim", epoch).start()
    try:
        assert _produce(cluster, "trim", n=5)["error_code"] == 0

        def delete(offset: int, timeout_ms: int) -> dict[str, Any]:
            res = cluster.request(LEADER, ApiKey.DELETE_RECORDS, {"topics": [{"name": "trim", "partitions": [
                {"partition_index": 0, "offset": offset}]}], "timeout_ms": timeout_ms})
            return res["topics"][0]["partitions"][0]

        out = delete(2, 10000)  # completes when both followers' fetches report log start 2
        assert (out["error_code"], out["low_watermark"]) == (0, 2), out
        assert f4.log_start == 2 or f4.fetch_once(0)["log_start_offset"] == 2
        f5.stop()  # f5 is still alive (registered): its log start can't move any more
        start = time.monotonic()
        out = delete(4, 800)
        assert out["error_code"] == ErrorCode.REQUEST_TIMED_OUT, out
        assert time.monotonic() - start < 5
    finally:
        f4.stop()
        f5.stop()


def test_an_isr_change_the_controller_was_not_told_of_is_announced_again(cluster: Cluster) -> None:
    """The leader applies its new ISR once ZooKeeper has it, then announces it (/isr_change_notification) so
    the controller sends every broker the new ISR. An announcement that fails (here ZooKeeper refuses the
    create: the node's ACL lacks CREATE) is made again by the next ISR-expiration run, as Kafka keeps its
    isrChangeSet until it is written; without that the brokers' metadata would show the old ISR for good."""
    from kazoo.client import KazooClient
    from kazoo.security import OPEN_ACL_UNSAFE, make_acl

    epoch = _create(cluster, "announce")
    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start(timeout=10)
    f4 = FakeFollower(cluster.brokers[LEADER].bootstrap, F4, "announce", epoch).start()
    try:
        zk.ensure_path(z.ISR_CHANGE)
        zk.set_acls(z.ISR_CHANGE, [make_acl("world", "anyone", read=True, write=True, delete=True, admin=True)])
        deadline = time.monotonic() + LAG_MS / 1000 + 8
        while _zk_isr(cluster, "announce")[0] != [LEADER, F4]:  # f5 never fetched: the leader drops it
            assert time.monotonic() < deadline, _zk_isr(cluster, "announce")
            time.sleep(0.1)
        assert _produce(cluster, "announce")["error_code"] == 0  # the leader applied [1, 4] (>= min.insync)
        time.sleep(LAG_MS / 1000)  # an expiration run or two: announcing fails again meanwhile
        assert any("Could not announce the ISR change of" in line and "announce-0" in line
                   for line in cluster.brokers[LEADER].output().splitlines())
        view = cluster.view(2)  # the controller was not told: the brokers still show the old ISR
        assert sorted(next(t[2][0][4] for t in view[2] if t[0] == "announce")) == [LEADER, F4, F5]
        zk.set_acls(z.ISR_CHANGE, OPEN_ACL_UNSAFE)
        cluster.agreed_view(lambda v: any(t[0] == "announce" and list(t[2][0][4]) == [LEADER, F4] for t in v[2]),
                            timeout_s=LAG_MS / 1000 + 8)
    finally:
        with contextlib.suppress(Exception):
            zk.set_acls(z.ISR_CHANGE, OPEN_ACL_UNSAFE)
        zk.stop()
        zk.close()
        f4.stop()
