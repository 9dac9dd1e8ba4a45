"""What a broker knows of the cluster (Kafka's ZK-mode MetadataCache), filled only by the controller's
UpdateMetadata requests: live brokers, the controller, and each partition's leader, leader epoch, replicas,
ISR and offline replicas. Every broker answers Metadata and DescribeCluster from it, so all brokers agree
(possibly a moment late), and produce/fetch routing decisions ("am I the leader?") are read here.

UpdateMetadata replaces the live-broker list and updates the partitions it names; a partition whose leader
is -2 (Kafka's LeaderDuringDelete) is removed, and a topic with no partitions left goes with it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

LEADER_DURING_DELETE = -2


@dataclass(frozen=True, slots=True)
class CachedBroker:
    """A live broker: `host`/`port` on the inter-broker listener (what this broker connects to), and every
    advertised endpoint by listener name (what a client is told: the one of the listener it arrived on)."""

    broker_id: int
    host: str
    port: int
    rack: str | None
    endpoints: tuple[tuple[str, str, int], ...] = ()  # (listener, host, port)

    def address(self, listener: str) -> tuple[str, int] | None:
        """The endpoint for `listener`, None when the broker has no such listener (Kafka then leaves it out)."""
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class CachedPartition:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    zk_version: int


@dataclass
class CachedTopic:
    topic_id: uuid.UUID
    partitions: dict[int, CachedPartition] = field(default_factory=dict)


class MetadataCache:
    def __init__(self, listener: str = "PLAINTEXT") -> None:
        self.listener = listener
        self.controller_id = -1
        self.controller_epoch = -1
        self.brokers: dict[int, CachedBroker] = {}
        self.topics: dict[str, CachedTopic] = {}
        self.updates = 0  # UpdateMetadata requests applied (tests wait on it)

    def apply(self, body: dict[str, Any]) -> None:
        """Apply an UpdateMetadata request body (any version: v0-4 bodies list their partitions ungrouped)."""
        self.controller_id = body["controller_id"]
        self.controller_epoch = body["controller_epoch"]
        brokers = {}
        for b in body.get("live_brokers", []):
            eps = b.get("endpoints") or [{"host": b.get("v0_host", ""), "port": b.get("v0_port", -1),
                                          "listener": "PLAINTEXT"}]
            ep = next((e for e in eps if e.get("listener", "PLAINTEXT") == self.listener), eps[0])
            brokers[b["id"]] = CachedBroker(b["id"], ep["host"], ep["port"], b.get("rack"), tuple(
                (e.get("listener", "PLAINTEXT"), e["host"], e["port"]) for e in eps))
        self.brokers = brokers
        grouped = [(t["topic_name"], t.get("topic_id"), t["partition_states"]) for t in body.get("topic_states", [])]
        for s in body.get("ungrouped_partition_states", []):
            grouped.append((s["topic_name"], None, [s]))
        for name, topic_id, states in grouped:
            for s in states:
                if s["leader"] == LEADER_DURING_DELETE:
                    topic = self.topics.get(name)
                    if topic is not None:
                        topic.partitions.pop(s["partition_index"], None)
                        if not topic.partitions:
                            del self.topics[name]
                    continue
                topic = self.topics.get(name)
                if topic is None:
                    topic = self.topics[name] = CachedTopic(topic_id or uuid.UUID(int=0))
                elif topic_id is not None and topic_id.int:
                    topic.topic_id = topic_id
                topic.partitions[s["partition_index"]] = CachedPartition(
                    s["leader"], s["leader_epoch"], tuple(s["replicas"]), tuple(s["isr"]),
                    tuple(s.get("offline_replicas", [])), s.get("zk_version", -1))
        self.updates += 1

    def partition(self, topic: str, partition: int) -> CachedPartition | None:
        t = self.topics.get(topic)
        return t.partitions.get(partition) if t is not None else None

    def leader(self, topic: str, partition: int) -> int:
        """The live leader's id, or -1 (no leader, unknown partition, or a leader not among the live brokers)."""
        p = self.partition(topic, partition)
        if p is None or p.leader not in self.brokers:
            return -1
        return p.leader

    def by_id(self, topic_id: uuid.UUID) -> str | None:
        return next((n for n, t in self.topics.items() if t.topic_id == topic_id), None)
