"""FindCoordinator and the consumer-group APIs at the broker's door (Kafka's handleFindCoordinatorRequest and
the group handlers of KafkaApis): the coordinator of a group is the leader of its `__consumer_offsets`
partition, so FindCoordinator names that partition's leader (creating the topic on first use, as Kafka does) and
a group request reaching any other broker is answered NOT_COORDINATOR, which sends the client back to
FindCoordinator. The group protocol itself is coordinator/coordinator.py's.

Refused by name: transactional coordinators (no transactions yet) and KIP-848's ConsumerGroupHeartbeat.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.handlers import Body, Handler
from kafkalite.broker.topic_apis import TopicApis, wait_for
from kafkalite.broker.unsupported import KIP848_UNSUPPORTED, TRANSACTIONS_UNSUPPORTED
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.coordinator.config import OFFSETS_TOPIC, coordinator_key_partition
from kafkalite.coordinator.coordinator import GROUP_API_KEYS, GroupCoordinator, error_response, request_groups
from kafkalite.errors import KafkaliteError, TopicAlreadyExistsError
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.session import Session

log = logging.getLogger("kafkalite.broker.apis")

OFFSETS_TOPIC_WAIT_MS = 5000  # how long the FindCoordinator that creates __consumer_offsets waits for it


class GroupApis:
    def __init__(self, config: BrokerConfig, coordinator: GroupCoordinator, cache: MetadataCache,
                 topics: TopicApis, *, single: bool) -> None:
        self.config = config
        self.coordinator = coordinator
        self.cache = cache
        self.topics = topics
        self.single = single
        self.node_id = config.node_id

    def handlers(self) -> Mapping[int, Handler]:
        out: dict[int, Handler] = {ApiKey.FIND_COORDINATOR: self.find_coordinator,
                                   ApiKey.CONSUMER_GROUP_HEARTBEAT: self.consumer_group_heartbeat}
        out.update(dict.fromkeys(GROUP_API_KEYS, self.group_request))
        return out

    # --- FindCoordinator ----------------------------------------------------------------------------

    async def _offsets_partitions(self) -> int | None:
        """The partition count of __consumer_offsets, creating the topic (as Kafka does on the first
        FindCoordinator) with offsets.topic.replication.factor; None while it has no leaders yet."""
        cached = self.cache.topics.get(OFFSETS_TOPIC)
        if cached is None:
            configs = {k: str(v) for k, v in self.coordinator.offsets_topic_configs().items()}
            rf = self.config.get("offsets.topic.replication.factor")
            if self.single:  # a cluster of one holds one replica; Kafka's default of 3 would never be met
                rf = min(rf, 1)
            with contextlib.suppress(TopicAlreadyExistsError):
                await self.topics.create(OFFSETS_TOPIC, self.config.get("offsets.topic.num.partitions"), rf, None,
                                         configs)
            # Kafka answers COORDINATOR_NOT_AVAILABLE at once; some clients (kafka-python's admin) fail on it
            # rather than retry, and a single broker always answered its first FindCoordinator with itself
            if not await wait_for(lambda: OFFSETS_TOPIC in self.cache.topics, OFFSETS_TOPIC_WAIT_MS):
                return None
            cached = self.cache.topics[OFFSETS_TOPIC]
        n = len(cached.partitions)
        self.coordinator.topic.num_partitions = n  # the cluster's count decides where each group lives
        return n

    async def find_coordinator(self, h: RequestHeader, body: Body, session: Session) -> Body:
        key_type = body.get("key_type", 0)
        keys = body.get("coordinator_keys", []) if h.api_version >= 4 else [body.get("key", "")]
        if key_type == 0:
            out = await self._group_coordinators(keys, session.listener)
        else:
            out = [self._refused_coordinator(k, key_type) for k in keys]
            if key_type == 1:
                log.warning("Refused FindCoordinator for transactional ids %s from client %s: %s", keys,
                            h.client_id, TRANSACTIONS_UNSUPPORTED)
        if h.api_version >= 4:
            return {"throttle_time_ms": 0, "coordinators": out}
        return {"throttle_time_ms": 0, **out[0]}

    async def _group_coordinators(self, keys: list[str], listener: str) -> list[Body]:
        try:
            n = await self._offsets_partitions()
            why = None if n is not None else f"{OFFSETS_TOPIC} is being created"
        except KafkaliteError as exc:
            n, why = None, f"{OFFSETS_TOPIC} cannot be created: {exc}"
            log.warning("FindCoordinator: %s", why)
        out = []
        for key in keys:
            leader = self.cache.leader(OFFSETS_TOPIC, coordinator_key_partition(key, n)) if n else -1
            b = self.cache.brokers.get(leader)
            addr = b.address(listener) if b is not None else None
            if b is None or addr is None:
                out.append({"key": key, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "",
                            "port": -1, "error_message": why or "the group's coordinator partition has no leader"})
            else:
                out.append({"key": key, "error_code": ErrorCode.NONE, "node_id": b.broker_id, "host": addr[0],
                            "port": addr[1], "error_message": None})
        return out

    @staticmethod
    def _refused_coordinator(key: str, key_type: int) -> Body:
        if key_type == 1:
            # non-retriable: confluent-kafka, kafka-python, aiokafka and kafkajs fail at once on 53, while
            # they retry COORDINATOR_NOT_AVAILABLE until their timeouts (librdkafka also on 35 and 42)
            return {"key": key, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "node_id": -1,
                    "host": "", "port": -1, "error_message": TRANSACTIONS_UNSUPPORTED}
        return {"key": key, "error_code": ErrorCode.INVALID_REQUEST, "node_id": -1, "host": "", "port": -1,
                "error_message": f"Unknown coordinator type {key_type}: kafkalite coordinates only consumer groups"}

    # --- the group APIs ---------------------------------------------------------------------------------

    async def group_request(self, h: RequestHeader, body: Body, session: Session) -> Body:
        """Group requests are served by the leader of the group's __consumer_offsets partition; elsewhere
        NOT_COORDINATOR sends the client back to FindCoordinator, as Kafka's brokers do."""
        if h.api_key != ApiKey.LIST_GROUPS:
            cached = self.cache.topics.get(OFFSETS_TOPIC)
            n = len(cached.partitions) if cached is not None else 0
            for gid in request_groups(h.api_key, body):
                if not n or self.cache.leader(OFFSETS_TOPIC, coordinator_key_partition(gid, n)) != self.node_id:
                    return error_response(h.api_key, h.api_version, body, ErrorCode.NOT_COORDINATOR)
            if n:
                self.coordinator.topic.num_partitions = n
        return await self.coordinator.handle(h.api_key, h.api_version, body, h.client_id, session.host)

    async def consumer_group_heartbeat(self, h: RequestHeader, body: Body, session: Session) -> Body:
        """KIP-848's protocol is not implemented. Not advertising it leaves a `group.protocol=consumer`
        librdkafka consumer waiting forever without a word; advertised and answered with
        UNSUPPORTED_VERSION, librdkafka raises a fatal error at once (tests/test_protocol_gaps.py)."""
        log.warning("Refused ConsumerGroupHeartbeat for group %r from %s (client %s): %s", body.get("group_id"),
                    session.host, h.client_id, KIP848_UNSUPPORTED)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_VERSION, "error_message": KIP848_UNSUPPORTED,
                "member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}
