"""kafkalite.client across a leader change in a real 3-broker cluster: reads and writes go on at the new
leader, and a reader whose records the new leader does not have detects the truncation (KIP-320).

The truncation is made the way it happens in Kafka (reference R10): with min.insync.replicas 1 the leader
drops its paused follower (SIGSTOP) from the ISR after replica.lag.time.max.ms and commits acks=1 records
alone; a consumer reads them; then the leader dies (kill -9) and the topic's unclean.leader.election.enable
lets the follower, out of the ISR and without those records, lead at a new epoch.
"""

from __future__ import annotations

import signal
import time

import pytest

from kafkalite.client import KafkaClient, LogTruncationError
from kafkalite.protocol import ApiKey
from kafkalite.records import SimpleRecord, build_batch
from tests.support.cluster import SESSION_TIMEOUT_MS, Cluster

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path, zk_connect):
    c = Cluster(tmp_path, zk_connect, **{"replica.lag.time.max.ms": 1000}).start()
    try:
        yield c
    finally:
        c.stop()


def _create(cluster: Cluster, topic: str, assignment: list[list[int]], **configs: str) -> None:
    res = cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{"name": topic, "assignments": [
        {"partition_index": i, "broker_ids": ids} for i, ids in enumerate(assignment)], "num_partitions": -1,
        "replication_factor": -1, "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    cluster.agreed_view(lambda v: any(t[0] == topic and all(p[1] >= 0 for p in t[2]) for t in v[2]))


def _batch(*values: bytes) -> bytes:
    return bytes(build_batch([SimpleRecord(None, v) for v in values]))


def _leader(cluster: Cluster, topic: str, bid: int) -> tuple[int, int]:
    md = cluster.metadata(bid, [topic])
    p = md["topics"][0]["partitions"][0]
    return p["leader_id"], p["leader_epoch"]


def _isr(cluster: Cluster, topic: str, bid: int) -> list[int]:
    return cluster.metadata(bid, [topic])["topics"][0]["partitions"][0]["isr_nodes"]


def test_metadata_goes_to_another_broker_when_the_one_it_asked_dies(cluster):
    """The client's cluster-wide connection is to the first bootstrap broker; once that broker is killed, the
    next Metadata reconnects to a live one instead of failing (producer-perf-test stopped on exactly this)."""
    cluster.agreed_view(lambda v: len(v[1]) == 3)
    bootstrap = ",".join(cluster.brokers[b].bootstrap for b in (1, 2, 3))
    with KafkaClient(bootstrap) as c:
        assert sorted(c.refresh_metadata([]).brokers) == [1, 2, 3]
        assert c.any_broker().port == cluster.brokers[1].port
        cluster.kill(1)
        assert c.refresh_metadata([]).brokers  # answered by broker 2 or 3
        assert c.any_broker().port in (cluster.brokers[2].port, cluster.brokers[3].port)


def test_reader_detects_truncation_after_the_leader_dies(cluster):
    cluster.agreed_view(lambda v: len(v[1]) == 3)
    _create(cluster, "t", [[1, 2]], **{"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    assert _leader(cluster, "t", 1) == (1, 0)
    with KafkaClient(cluster.bootstrap, timeout_s=30) as c:
        c.produce("t", 0, _batch(b"a0", b"a1"), acks=-1)  # on both replicas: kept
        follower = cluster.brokers[2].proc
        assert follower is not None
        follower.send_signal(signal.SIGSTOP)
        try:
            for i in range(3):
                c.produce("t", 0, _batch(b"lost-%d" % i), acks=1)
            deadline = time.monotonic() + 10
            while _isr(cluster, "t", 1) != [1]:  # the paused follower leaves the ISR: the leader commits alone
                assert time.monotonic() < deadline, "the ISR did not shrink"
                time.sleep(0.1)
            read = [(o, b.partition_leader_epoch, [r.value for r in b.records()])
                    for o, b in c.consume("t", 0, 0, until=5)]
            assert [v for _o, _e, vs in read for v in vs] == [b"a0", b"a1", b"lost-0", b"lost-1", b"lost-2"]
            assert {e for _o, e, _v in read} == {0}
            cluster.brokers[1].kill()
        finally:
            follower.send_signal(signal.SIGCONT)
        # broker 2 becomes leader at epoch 1 once broker 1's session expires
        deadline = time.monotonic() + SESSION_TIMEOUT_MS / 1000 + 20
        while _leader(cluster, "t", 2) != (2, 1):
            assert time.monotonic() < deadline, "broker 2 did not take over"
            time.sleep(0.2)

        # writes go on at the new leader (the client finds it through Metadata)
        c.produce("t", 0, _batch(b"new-0"), acks=1)
        with pytest.raises(LogTruncationError) as info:
            list(c.consume("t", 0, 5, until=6, leader_epoch=0))
        # a0, a1 were replicated before the pause; a fetch answered just before SIGSTOP may bring lost-0
        # along when the follower resumes, before it hears that it leads
        survived, epoch = info.value.divergent[("t", 0)]
        assert epoch == 0 and survived in (2, 3), info.value.divergent
        assert "log truncation detected" in str(info.value)

        # with a reset policy the reader goes on from where the histories part
        got = [r.value for _o, b in c.consume("t", 0, 5, until=6, idle_timeout_s=0.5, leader_epoch=0,
                                              reset_on_truncation=True) for r in b.records()]
        assert got == [b"new-0"]

        # a position the new leader does have is valid, and reads on
        got = [r.value for _o, b in c.consume("t", 0, survived, until=survived + 1, leader_epoch=0)
               for r in b.records()]
        assert got[-1] == b"new-0"

