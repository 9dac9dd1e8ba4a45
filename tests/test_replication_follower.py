"""Followers on real brokers (broker/replica_fetcher.py): three `kafkalite serve` processes and ZooKeeper on
127.0.0.1. Followers copy their leader's log batch for batch, their HW follows, a new leader keeps what was
replicated and deduplicates an idempotent retry, and a returning old leader truncates its unreplicated tail
by the diverging-epoch path (Fetch v12) or, with inter.broker.protocol.version 2.6, by OffsetsForLeaderEpoch.
The leader's HW still equals its log end on this branch, so everything here produces with acks=1."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from kafkalite.protocol import ApiKey
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkalite.storage.log import Log
from tests.support.cluster import Cluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

TOPIC = "rep"
FAST = {"replica.fetch.backoff.ms": 200, "replica.high.watermark.checkpoint.interval.ms": 200}


def start(tmp_path, zk_connect, **overrides: object) -> Cluster:
    c = Cluster(tmp_path, zk_connect, **{**FAST, **overrides}).start()
    c.agreed_view(lambda v: len(v[1]) == 3)
    res = c.request(1, ApiKey.CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 3}],
                                              "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    c.agreed_view(lambda v: bool(v[2]) and v[2][0][2][0][1] > 0)
    return c


def leader(c: Cluster, not_: int = -1) -> tuple[int, int]:
    """(leader, epoch) of the partition as every running broker agrees, once it is not `not_`."""
    view = c.agreed_view(lambda v: bool(v[2]) and v[2][0][2][0][1] not in (-1, not_), timeout_s=25)
    p = view[2][0][2][0]
    return p[1], p[2]


def produce(c: Cluster, bid: int, values: list[bytes], acks: int = 1, **batch: int) -> dict[str, Any]:
    records = build_batch([SimpleRecord(None, v, -1) for v in values], **batch)
    res = c.request(bid, ApiKey.PRODUCE, {"transactional_id": None, "acks": acks, "timeout_ms": 10000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": bytes(records)}]}]})
    return res["responses"][0]["partition_responses"][0]


def batches(c: Cluster, bid: int) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch in broker `bid`'s replica, read with the storage reader."""
    lg = Log.open_read_only(c.brokers[bid].data_dir / f"{TOPIC}-0")
    try:
        return [(b.base_offset, bytes(b.buffer)) for b in lg.batches()]
    finally:
        lg.close()


def identical(c: Cluster, bids: list[int], n: int) -> list[tuple[int, bytes]] | None:
    logs = [batches(c, b) for b in bids]
    return logs[0] if len(logs[0]) == n and all(lg == logs[0] for lg in logs) else None


def checkpointed_hw(c: Cluster, bid: int) -> int:
    path = c.brokers[bid].data_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
    return OffsetCheckpointFile(path).read_or_empty().get((TOPIC, 0), -1) if path.exists() else -1


@pytest.fixture
def stopper():
    made: list[Cluster] = []
    yield made.append
    for c in made:
        c.stop()


def test_followers_copy_the_leaders_log_byte_for_byte_and_follow_its_hw(tmp_path, zk_connect, stopper):
    c = start(tmp_path, zk_connect)
    stopper(c)
    lead, _epoch = leader(c)
    for i in range(20):
        r = produce(c, lead, [b"v%d-" % i * (1 + i * 50)] * (1 + i % 3))
        assert r["error_code"] == 0, r
    logs = wait_until(lambda: identical(c, [1, 2, 3], 20), what="identical replicas")
    end = logs[-1][0] + 1 + (19 % 3)
    for bid in (1, 2, 3):  # followers learn the HW one fetch later and checkpoint it
        wait_until(lambda b=bid: checkpointed_hw(c, b) == end, what=f"HW {end} on broker {bid}")


@pytest.mark.parametrize("ibp, path", [("3.6", "diverging"), ("2.6", "OffsetsForLeaderEpoch")])
def test_returning_leader_truncates_its_unreplicated_tail(tmp_path, zk_connect, stopper, ibp, path):
    c = start(tmp_path, zk_connect, **{"inter.broker.protocol.version": ibp})
    stopper(c)
    old, epoch = leader(c)
    followers = [b for b in (1, 2, 3) if b != old]
    for i in range(5):
        assert produce(c, old, [b"kept-%d" % i])["error_code"] == 0
    wait_until(lambda: identical(c, [1, 2, 3], 5), what="replicated")
    for b in followers:  # the followers stop fetching; the leader takes a tail nobody else gets
        c.brokers[b].proc.send_signal(signal.SIGSTOP)
    try:
        for i in range(3):
            assert produce(c, old, [b"lost-%d" % i])["error_code"] == 0
        c.brokers[old].kill()
    finally:
        for b in followers:
            c.brokers[b].proc.send_signal(signal.SIGCONT)
    new, new_epoch = leader(c, not_=old)
    assert new in followers and new_epoch > epoch
    # A fetch parked at the leader when the followers stopped is answered by the first "lost" append and
    # sits in their socket buffers: they may have taken lost-0, never lost-1 or lost-2.
    kept = len(batches(c, new))
    assert kept in (5, 6)  # everything replicated survived
    for i in range(2):
        assert produce(c, new, [b"new-%d" % i])["error_code"] == 0
    c.brokers[old].start()
    logs = wait_until(lambda: identical(c, [1, 2, 3], kept + 2), timeout_s=25,
                      what="the old leader truncated and caught up")
    values = [b for _o, b in logs]
    assert sum(b"kept-" in v for v in values) == 5 and sum(b"new-" in v for v in values) == 2
    assert not any(b"lost-1" in v or b"lost-2" in v for v in values)
    out = c.brokers[old].log_path.read_text(errors="replace")
    assert f"Truncated rep-0 to {kept}" in out
    assert ("through OffsetsForLeaderEpoch" in out) == (path == "OffsetsForLeaderEpoch")


def test_new_leader_deduplicates_an_idempotent_retry(tmp_path, zk_connect, stopper):
    c = start(tmp_path, zk_connect)
    stopper(c)
    old, _epoch = leader(c)
    pid = c.request(old, ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert pid["error_code"] == 0, pid
    ids = {"producer_id": pid["producer_id"], "producer_epoch": pid["producer_epoch"]}
    for seq in range(3):
        assert produce(c, old, [b"idem-%d" % seq], base_sequence=seq, **ids)["base_offset"] == seq
    wait_until(lambda: identical(c, [1, 2, 3], 3), what="replicated")
    c.brokers[old].kill()
    new, _ = leader(c, not_=old)
    retry = produce(c, new, [b"idem-2"], base_sequence=2, **ids)  # the answer to seq 2 was "lost"
    assert retry["error_code"] == 0 and retry["base_offset"] == 2, retry
    nxt = produce(c, new, [b"idem-3"], base_sequence=3, **ids)
    assert nxt["error_code"] == 0 and nxt["base_offset"] == 3, nxt
    assert len(batches(c, new)) == 4


def test_follower_behind_the_leaders_log_start_starts_over_there(tmp_path, zk_connect, stopper):
    c = start(tmp_path, zk_connect)
    stopper(c)
    lead, _epoch = leader(c)
    behind = next(b for b in (1, 2, 3) if b != lead)
    for i in range(5):
        assert produce(c, lead, [b"early-%d" % i])["error_code"] == 0
    wait_until(lambda: identical(c, [1, 2, 3], 5), what="replicated")
    c.brokers[behind].kill()
    c.agreed_view(lambda v: len(v[1]) == 2, timeout_s=20)  # its registration is gone: it may start again
    for i in range(5):
        assert produce(c, lead, [b"late-%d" % i], acks=-1)["error_code"] == 0  # committed: below the HW
    res = c.request(lead, ApiKey.DELETE_RECORDS, {"topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "offset": 8}]}], "timeout_ms": 10000})
    assert res["topics"][0]["partitions"][0]["error_code"] == 0, res
    c.brokers[behind].start()

    def caught_up() -> bool:
        got = batches(c, behind)
        return bool(got) and got == [b for b in batches(c, lead) if b[0] >= 8]
    wait_until(caught_up, timeout_s=25, what="the follower restarted at the leader's log start")
    assert [o for o, _ in batches(c, behind)] == [8, 9]
    assert "past this replica's end 5: starting over there" in c.brokers[behind].log_path.read_text(errors="replace")
