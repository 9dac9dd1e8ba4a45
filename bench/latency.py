"""Latency in a 3-broker cluster (issue 17), alone: `python -m bench replication-latency`.

The measurement is bench/replication.py's (acks=all to a replication-factor-3 topic with min.insync.replicas 2
vs acks=1 to a replication-factor-1 topic on the same leader, one record in flight, a client that waits in
poll(timeout) rather than spinning); this runs only that part, BENCH_LATENCY_RUNS times (default 3) against one
cluster, each run reported, without the throughput, failover and catch-up runs around it.
"""

from __future__ import annotations

import os
import shutil

from bench import replication
from bench.common import MiB, scratch_dir
from tests.support.cluster import Cluster
from tests.support.zookeeper import ZooKeeperServer, missing

RUNS = int(os.environ.get("BENCH_LATENCY_RUNS", "3"))


def bench_replication_latency(results: dict) -> None:
    why = missing()
    if why:
        print(f"replication-latency skipped: {why}")
        return
    d = scratch_dir()
    zk = ZooKeeperServer(d / "zk").start()
    cluster = Cluster(d, zk.connect(), **{"log.segment.bytes": 256 * MiB}).start()
    try:
        cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=60)
        replication._create(cluster, "rf1", [1])
        replication._create(cluster, "rf3", [1, 2, 3], min_isr=2)
        for run in range(1, RUNS + 1):
            one: dict = {}
            replication._latency(cluster, one)
            for label, row in one.items():
                results[f"{label} (run {run})"] = row
    finally:
        cluster.stop()
        zk.stop()
        shutil.rmtree(d, ignore_errors=True)


ALL = {"replication-latency": bench_replication_latency}
