"""What a controller's failover sends the brokers, seen by a real broker (single-broker mode, in process) as it
restarts: its partitions' states in one UpdateMetadata and one LeaderAndIsr, and no second UpdateMetadata that
repeats the first (Kafka follows the LeaderAndIsr with one for the same partitions; here only partitions whose
state changed in between get it, which a 10,000-partition restart paid ~0.1 s for)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.broker.server import Broker
from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey

PARTITIONS = 6


def _partitions(body: dict, topic: str) -> int:
    return sum(len(t["partition_states"]) for t in body.get("topic_states", []) if t["topic_name"] == topic)


@pytest.mark.slow
def test_a_restart_sends_each_partition_state_once_in_update_metadata(tmp_path, monkeypatch):
    cfg = BrokerConfig.load(None, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": tmp_path / "data"})
    seen: Counter[str] = Counter()
    real_update, real_leader_and_isr = ReplicaManager.update_metadata, ReplicaManager.become_leader_or_follower

    async def update_metadata(self, body, *args):
        seen["update_metadata"] += 1
        seen["update_metadata partitions"] += _partitions(body, "wide")
        return await real_update(self, body, *args)

    async def leader_and_isr(self, body, *args):
        seen["leader_and_isr partitions"] += _partitions(body, "wide")
        return await real_leader_and_isr(self, body, *args)

    async def run_once(create: bool) -> dict:
        broker = Broker(cfg)
        await broker.start()
        try:
            def client_side() -> dict:
                with KafkaClient(f"127.0.0.1:{broker.port}") as c:
                    if create:
                        res = c.request(ApiKey.CREATE_TOPICS, {"topics": [{
                            "name": "wide", "num_partitions": PARTITIONS, "replication_factor": 1,
                            "assignments": [], "configs": []}], "timeout_ms": 30_000})
                        assert res["topics"][0]["error_code"] == 0, res
                    return c.request(ApiKey.METADATA, {"topics": [{"name": "wide"}],
                                                       "allow_auto_topic_creation": False})
            return await asyncio.to_thread(client_side)
        finally:
            await broker.stop()

    asyncio.run(run_once(create=True))
    monkeypatch.setattr(ReplicaManager, "update_metadata", update_metadata)
    monkeypatch.setattr(ReplicaManager, "become_leader_or_follower", leader_and_isr)
    meta = asyncio.run(run_once(create=False))
    assert seen["leader_and_isr partitions"] == PARTITIONS
    assert seen["update_metadata partitions"] == PARTITIONS, seen  # the restart's failover: once each, not twice
    # and what the broker serves after it is whole
    (topic,) = meta["topics"]
    assert topic["error_code"] == 0
    assert sorted(p["partition_index"] for p in topic["partitions"]) == list(range(PARTITIONS))
    assert {p["leader_id"] for p in topic["partitions"]} == {cfg.node_id}


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__, "-q"])
