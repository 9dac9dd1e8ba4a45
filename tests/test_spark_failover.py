"""Spark's broker mode through a leader change in a real 3-broker cluster: a batch write and a batch read
keep working when a partition's leader is killed (kill -9) between them, the new leaders found through
Metadata, and writes and reads during the election retried (`kafka.default.api.timeout.ms`).

Topic `sp` has replication factor 3 and min.insync.replicas 2, the data produced with acks=all (the
sink's default), so every acknowledged row survives the kill: the followers had it before the write was
acknowledged, and one of them is the new leader.
"""

from __future__ import annotations

import shutil
import time

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")

from kafkalite.protocol import ApiKey
from tests.support.cluster import SESSION_TIMEOUT_MS, Cluster

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java"),
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]


def _leaders(cluster: Cluster, bid: int) -> dict[int, tuple[int, int]]:
    md = cluster.metadata(bid, ["sp"])
    return {p["partition_index"]: (p["leader_id"], p["leader_epoch"]) for p in md["topics"][0]["partitions"]}


def test_spark_batch_write_and_read_across_a_leader_kill(cluster, spark):
    cluster.agreed_view(lambda v: len(v[1]) == 3)
    res = cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{"name": "sp", "assignments": [
        {"partition_index": 0, "broker_ids": [1, 2, 3]}, {"partition_index": 1, "broker_ids": [2, 3, 1]},
        {"partition_index": 2, "broker_ids": [3, 1, 2]}], "num_partitions": -1, "replication_factor": -1,
        "configs": [{"name": "min.insync.replicas", "value": "2"}]}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    cluster.agreed_view(lambda v: any(t[0] == "sp" and all(p[1] >= 0 for p in t[2]) for t in v[2]))
    assert _leaders(cluster, 2) == {0: (1, 0), 1: (2, 0), 2: (3, 0)}
    bootstrap = ",".join(cluster.brokers[b].bootstrap for b in (2, 3, 1))  # broker 1 last: it will die

    def write(prefix: str) -> None:
        rows = [(f"{prefix}-{i}".encode(), i % 3) for i in range(60)]
        df = spark.createDataFrame(rows, "value binary, partition int")
        (df.write.format("kafkalite").option("kafka.bootstrap.servers", bootstrap).option("topic", "sp")
         .option("kafka.default.api.timeout.ms", "60000").mode("append").save())

    def read() -> dict[int, list[bytes]]:
        df = (spark.read.format("kafkalite").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "sp").option("kafka.default.api.timeout.ms", "60000").load())
        out: dict[int, list[bytes]] = {}
        for r in df.orderBy("partition", "offset").collect():
            out.setdefault(r["partition"], []).append(r["value"])
        return out

    write("before")
    before = read()
    assert {p: len(v) for p, v in before.items()} == {0: 20, 1: 20, 2: 20}

    cluster.brokers[1].kill()  # leads partition 0, follows 1 and 2
    killed_at = time.monotonic()
    # The write starts at once: partition 0's produce fails (connection gone, then NOT_LEADER_OR_FOLLOWER or
    # no leader while broker 1's session lasts) and is retried until the controller has moved leadership.
    write("after")
    took = time.monotonic() - killed_at
    assert took < SESSION_TIMEOUT_MS / 1000 + 30
    leaders = _leaders(cluster, 2)
    assert leaders[0][0] in (2, 3) and leaders[0][1] >= 1 and leaders[1][0] == 2 and leaders[2][0] == 3

    after = read()
    # (a write's tasks run side by side, so rows of one write are in no particular order within a partition)
    for p in (1, 2):  # their leaders never changed
        assert after[p][:20] == before[p]
        assert sorted(after[p][20:]) == sorted(f"after-{i}".encode() for i in range(p, 60, 3))
    tail = {f"after-{i}".encode() for i in range(0, 60, 3)}
    assert after[0][:20] == before[0]  # acks=all: nothing acknowledged was lost with its leader
    assert set(after[0][20:]) == tail  # at least once: a produce retried after its leader died may repeat
