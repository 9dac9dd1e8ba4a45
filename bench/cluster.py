"""Cluster benchmarks (issue 14): a real ZooKeeper and three `kafkalite serve` processes on 127.0.0.1.

- cluster-metadata: Metadata requests (all topics, 1,000 partitions) per second that one broker answers
  from its metadata cache, pipelined over one connection, vs ApiVersions (the smallest request the broker
  answers) on the same connection: the ratio is the cost of the metadata itself;
- cluster-failover: seconds from kill -9 of the controller's broker to another broker being controller
  (polled through Metadata), vs the ZooKeeper session timeout that bounds it.
Skipped with a message when ZooKeeper is not installed (tests/support/zookeeper.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import time

from bench.common import scratch_dir
from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey, decode_response, encode_request
from tests.support.cluster import SESSION_TIMEOUT_MS, Cluster
from tests.support.zookeeper import ZooKeeperServer, missing

PARTITIONS = int(os.environ.get("BENCH_CLUSTER_PARTITIONS", "1000"))
SECONDS = float(os.environ.get("BENCH_CLUSTER_SECONDS", "2"))
FAILOVERS = int(os.environ.get("BENCH_CLUSTER_FAILOVERS", "3"))


def _pipelined_rate(port: int, api: ApiKey, version: int, body: dict, in_flight: int = 8) -> float:
    """Requests per second over one connection, `in_flight` at a time, for about SECONDS."""
    frames = [encode_request(api, version, i, "bench", body) for i in range(in_flight)]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = sock.makefile("rb")

        def read_one() -> bytes:
            size = int.from_bytes(f.read(4), "big")
            return f.read(size)  # not decoded: the client's decoding would be what is measured

        for fr in frames:
            sock.sendall(fr)
        decode_response(api, version, read_one())  # a well-formed answer
        sock.sendall(frames[0])
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < SECONDS:
            read_one()
            sock.sendall(frames[n % in_flight])
            n += 1
        for _ in frames:
            read_one()
        return n / (time.perf_counter() - t0)


def _start(root, zk) -> Cluster:
    return Cluster(root, zk.connect()).start()


def bench_cluster_metadata(results: dict) -> None:
    why = missing()
    if why:
        print(f"cluster-metadata skipped: {why}")
        return
    d = scratch_dir()
    zk = ZooKeeperServer(d / "zk").start()
    cluster = _start(d, zk)
    try:
        cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=60)
        with KafkaClient(cluster.brokers[1].bootstrap, timeout_s=120) as c:
            res = c.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "wide", "num_partitions": PARTITIONS,
                                                               "replication_factor": 1}], "timeout_ms": 120000})
            assert res["topics"][0]["error_code"] == 0, res
        cluster.agreed_view(lambda v: v[2] and len(v[2][0][2]) == PARTITIONS, timeout_s=120)
        port = cluster.brokers[2].port
        metadata = _pipelined_rate(port, ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
        versions = _pipelined_rate(port, ApiKey.API_VERSIONS, 3, {"client_software_name": "bench",
                                                                  "client_software_version": "1"})
        results[f"cluster: Metadata of {PARTITIONS} partitions from a broker's cache"] = (
            f"{metadata:,.0f} req/s", f"{metadata / versions:.0%} of ApiVersions ({versions:,.0f} req/s)",
            ">= 5,000 req/s")
    finally:
        cluster.stop()
        zk.stop()
        shutil.rmtree(d, ignore_errors=True)


def bench_cluster_failover(results: dict) -> None:
    why = missing()
    if why:
        print(f"cluster-failover skipped: {why}")
        return
    d = scratch_dir()
    zk = ZooKeeperServer(d / "zk").start()
    cluster = _start(d, zk)
    took = []
    try:
        for _ in range(FAILOVERS):
            view = cluster.agreed_view(lambda v: len(v[1]) == 3 and v[0] > 0, timeout_s=60)
            old = view[0]
            t0 = time.monotonic()
            cluster.brokers[old].kill()
            while True:
                ids = set()
                for bid in cluster.running():
                    with contextlib.suppress(OSError):
                        ids.add(cluster.metadata(bid)["controller_id"])
                if ids and not ids & {old, -1}:
                    break
                time.sleep(0.02)
            took.append(time.monotonic() - t0)
            cluster.brokers[old].start()
        med = statistics.median(took)
        limit = SESSION_TIMEOUT_MS / 1000
        results["cluster: controller failover after kill -9 (median)"] = (
            f"{med:.2f} s", f"{med / limit:.0%} of the session timeout ({limit:g} s)", "<= session timeout + 1 s")
    finally:
        cluster.stop()
        zk.stop()
        shutil.rmtree(d, ignore_errors=True)


ALL = {"cluster-metadata": bench_cluster_metadata, "cluster-failover": bench_cluster_failover}
