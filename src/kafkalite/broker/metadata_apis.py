"""Metadata and DescribeCluster, answered from the MetadataCache that the controller's UpdateMetadata fills, so
every broker of a cluster answers alike (Kafka's handleTopicMetadataRequest and handleDescribeCluster).

The encoded answer to a Metadata question is kept until the next UpdateMetadata: the same questions come again
and again (every client refreshes its metadata periodically), and encoding the answer for thousands of
partitions is the expensive part. Not kept: answers that depend on the principal (an authorizer is on), that
auto-created a topic, or that carry an error.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.handlers import Body, Handler
from kafkalite.broker.metadata import INTERNAL_TOPICS, validate_topic_name
from kafkalite.broker.replica_manager import error_code_of
from kafkalite.broker.topic_apis import TopicApis, wait_for
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.errors import KafkaliteError, TopicAlreadyExistsError
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol import ApiKey, ErrorCode, PreEncoded, RequestHeader, encode_response_body
from kafkalite.security.acl import AUTHORIZED_OPS_OMITTED
from kafkalite.security.session import Session

METADATA_ANSWERS_KEPT = 256  # distinct Metadata questions whose encoded answers are kept
AUTO_CREATE_WAIT_MS = 1000  # how long a single broker's Metadata that auto-creates a topic waits for its leaders


def cluster_id(config: BrokerConfig, logs: LogManager) -> str:
    """The cluster id in the data dirs' meta.properties (the cluster.id config before the first start)."""
    meta = logs.dirs[0].meta if logs.dirs else {}
    return str(meta.get("cluster.id") or config.get("cluster.id"))


class MetadataApis:
    """`personal`: answers depend on the principal (an authorizer filters them), so none is kept."""

    def __init__(self, config: BrokerConfig, cache: MetadataCache, topics: TopicApis, cluster_id: str, *,
                 single: bool, personal: bool) -> None:
        self.config = config
        self.cache = cache
        self.topics = topics
        self.cluster_id = cluster_id
        self.single = single
        self.personal = personal
        self._answers: dict[Any, PreEncoded] = {}
        self._answers_of = -1  # the cache.updates the kept answers were made at
        self._auto_created = False

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.METADATA: self.metadata, ApiKey.DESCRIBE_CLUSTER: self.describe_cluster}

    async def metadata(self, h: RequestHeader, body: Body, session: Session) -> Any:
        if self.personal:
            return await self._metadata(h, body, session.listener)
        requested = body.get("topics")
        names = None if requested is None else tuple((t.get("name"), t.get("topic_id")) for t in requested)
        key = (h.api_version, names, bool(body.get("allow_auto_topic_creation", True)), session.listener)
        if self._answers_of != self.cache.updates:
            self._answers.clear()
            self._answers_of = self.cache.updates
        hit = self._answers.get(key)
        if hit is not None:
            return hit
        out = await self._metadata(h, body, session.listener)
        if self._answers_of == self.cache.updates and not self._auto_created and \
                all(t["error_code"] == ErrorCode.NONE for t in out["topics"]):
            if len(self._answers) >= METADATA_ANSWERS_KEPT:
                self._answers.clear()
            self._answers[key] = encode_response_body(ApiKey.METADATA, h.api_version, out)
        return out

    async def _metadata(self, h: RequestHeader, body: Body, listener: str) -> Body:
        requested = body.get("topics")
        self._auto_created = False
        cache = self.cache
        if requested is None or (h.api_version == 0 and not requested):
            wanted: list[tuple[str | None, Any]] = [(n, None) for n in sorted(cache.topics)]
        else:
            wanted = [(t.get("name"), t.get("topic_id")) for t in requested]
        auto = self.config.get("auto.create.topics.enable") and body.get("allow_auto_topic_creation", True) \
            and requested is not None
        topics = []
        for name, topic_id in wanted:
            if name is None:
                name = cache.by_id(topic_id) if topic_id else None
                if name is None:
                    topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id,
                                   "partitions": []})
                    continue
            topics.append(await self._topic_metadata(name, auto))
        return {"throttle_time_ms": 0, "cluster_id": self.cluster_id, "controller_id": cache.controller_id,
                "brokers": [{"node_id": b, "host": host, "port": port, "rack": rack}
                            for b, host, port, rack in self._brokers_on(listener)],
                "topics": topics, "cluster_authorized_operations": AUTHORIZED_OPS_OMITTED, "error_code": ErrorCode.NONE}

    async def _topic_metadata(self, name: str, auto_create: bool) -> Body:
        cached = self.cache.topics.get(name)
        if cached is None:
            return await self._missing_topic(name, auto_create)
        parts = []
        for p, s in sorted(cached.partitions.items()):
            leader = self.cache.leader(name, p)
            parts.append({"error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                          "partition_index": p,
                          "leader_id": leader, "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                          "isr_nodes": list(s.isr),
                          "offline_replicas": [b for b in s.replicas if b not in self.cache.brokers]})
        return {"error_code": ErrorCode.NONE, "name": name, "topic_id": cached.topic_id,
                "is_internal": name in INTERNAL_TOPICS, "partitions": parts,
                "topic_authorized_operations": AUTHORIZED_OPS_OMITTED}

    async def _missing_topic(self, name: str, auto_create: bool) -> Body:
        """A topic the metadata does not show: UNKNOWN_TOPIC_OR_PARTITION, or auto-created (auto.create.topics
        .enable) and LEADER_NOT_AVAILABLE until its leaders are known."""
        empty = {"name": name, "topic_id": uuid.UUID(int=0), "is_internal": name in INTERNAL_TOPICS, "partitions": []}
        if not auto_create:
            return {**empty, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        self._auto_created = True
        try:
            validate_topic_name(name)
            await self.topics.create(name, self.config.get("num.partitions"),
                                     self.config.get("default.replication.factor"), None, {})
        except TopicAlreadyExistsError:
            pass
        except KafkaliteError as exc:
            return {**empty, "error_code": error_code_of(exc)}
        # Kafka answers LEADER_NOT_AVAILABLE at once (so does a cluster here); a single broker, its own
        # controller, waits a moment for the leaders so its first Metadata shows the topic, as it always did
        if not await wait_for(lambda: name in self.cache.topics, AUTO_CREATE_WAIT_MS if self.single else 0):
            return {**empty, "error_code": ErrorCode.LEADER_NOT_AVAILABLE}
        return await self._topic_metadata(name, False)

    def _brokers_on(self, listener: str) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of each live broker on `listener`; brokers without it are left out (Kafka)."""
        out = []
        for b in sorted(self.cache.brokers.values(), key=lambda b: b.broker_id):
            addr = b.address(listener)
            if addr is not None:
                out.append((b.broker_id, addr[0], addr[1], b.rack))
        return out

    async def describe_cluster(self, h: RequestHeader, body: Body, session: Session) -> Body:
        out = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "endpoint_type": 1,
               "cluster_id": self.cluster_id, "controller_id": self.cache.controller_id,
               "brokers": [{"broker_id": b, "host": host, "port": port, "rack": rack}
                           for b, host, port, rack in self._brokers_on(session.listener)],
               "cluster_authorized_operations": AUTHORIZED_OPS_OMITTED}
        if body.get("endpoint_type", 1) != 1:
            out.update(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, brokers=[],
                       error_message="kafkalite has no separate controller endpoints")
        return out
