"""One handler per Kafka API (Kafka's KafkaApis): request body dict in, response body dict out.

Bodies use the snake_case names of Kafka's message schemas; the protocol layer fills defaults for what a
handler leaves out and drops what a version doesn't carry, so handlers describe outcomes, not encodings.
A handler returns None only for acks=0 produce requests, which Kafka never answers.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.replica_manager import ReplicaManager, error_code_of
from kafkalite.broker.topic_admin import TopicAdmin
from kafkalite.config.registry import is_sensitive
from kafkalite.coordinator.coordinator import GROUP_API_KEYS, GroupCoordinator
from kafkalite.errors import (
    InvalidConfigError,
    InvalidRequestError,
    KafkaliteError,
    UnknownTopicOrPartitionError,
)
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, ErrorCode, RequestHeader
from kafkalite.protocol.config_resources import ConfigOp, ConfigResourceType
from kafkalite.protocol.connection import CloseConnection
from kafkalite.security.session import Session
from kafkalite.storage.log import FetchIsolation
from kafkalite.storage.log_config import CONFIGS_BY_NAME, LogConfig

if TYPE_CHECKING:
    from kafkalite.broker.authz import RequestAuthorizer

log = logging.getLogger("kafkalite.broker.apis")


SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
CONFIG_TYPES = {"bool": 1, "str": 2, "int": 3, "long": 5, "double": 6, "list": 7}
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
TRANSACTIONS_UNSUPPORTED = ("transactions are not supported by kafkalite (no transaction coordinator); "
                            "use an idempotent producer without transactional.id")
KIP848_UNSUPPORTED = ("the consumer group protocol of KIP-848 (group.protocol=consumer) is not supported by "
                      "kafkalite; use group.protocol=classic")

Handler = Callable[[RequestHeader, dict[str, Any], Session], Awaitable[dict[str, Any] | None]]
# Answered while the broker is still starting: the controller's requests (in single-broker mode this broker's
# own controller sends them during start-up) and ApiVersions; every other request waits for `ready`.
STARTUP_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA})


class KafkaApis:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, coordinator: GroupCoordinator | None = None,
                 admin: TopicAdmin | None = None) -> None:
        self.config = config
        self.replicas = replicas
        self.admin = admin if admin is not None else TopicAdmin(replicas)
        self.coordinator = coordinator
        self.node_id = config.node_id
        # Set once the broker's cluster part is installed and has its first metadata (Kafka enables request
        # processing at the end of its start-up likewise): a client connecting early waits, not misled.
        self.ready = asyncio.Event()
        # Set when authorizer.class.name is (broker/acl_apis.py): every request then passes its gate first.
        self.authz: RequestAuthorizer | None = None
        self._handlers: dict[int, Handler] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.DELETE_RECORDS: self.delete_records,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.consumer_group_heartbeat,
            ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs,
            ApiKey.SASL_HANDSHAKE: self.sasl_outside_sasl_listener,
            ApiKey.SASL_AUTHENTICATE: self.sasl_outside_sasl_listener,
        }
        if coordinator is not None:
            self._handlers[ApiKey.FIND_COORDINATOR] = self.find_coordinator
            for key in GROUP_API_KEYS:
                self._handlers[key] = self.group_request

    # --- dispatch ---------------------------------------------------------------------------------

    def advertised(self) -> dict[int, tuple[int, int]]:
        """Only what has a handler: clients pick features from this table (the ApiVersions response, KIP-35)."""
        return {k: versions for k, versions in sorted(SUPPORTED_VERSIONS.items()) if k in self._handlers}

    def handles(self, api_key: int) -> bool:
        return api_key in self._handlers

    async def handle(self, header: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any] | None:
        if not self.ready.is_set() and header.api_key not in STARTUP_APIS:
            await self.ready.wait()
        handler = self._handlers[header.api_key]
        if self.authz is not None:
            return await self.authz.handle(header, body, session, handler)
        return await handler(header, body, session)

    # --- cluster ----------------------------------------------------------------------------------

    def _endpoint(self, listener: str | None = None) -> tuple[str, int]:
        """This broker's advertised address on `listener` (the first advertised listener when not given)."""
        adv = self.config.advertised()
        li = next((a for a in adv if a.name == listener), adv[0])
        return li.host, li.port

    def cluster_id(self) -> str:
        dirs = self.replicas.logs.dirs
        meta = dirs[0].meta if dirs else {}
        return str(meta.get("cluster.id") or self.config.get("cluster.id"))

    async def api_versions(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in self.advertised().items()]
        if h.api_version >= 3:
            name = body.get("client_software_name") or ""
            version = body.get("client_software_version") or ""
            if not (_SOFTWARE.match(name) and _SOFTWARE.match(version)):
                return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": keys, "throttle_time_ms": 0}
        return {"error_code": ErrorCode.NONE, "api_keys": keys, "throttle_time_ms": 0}

    async def sasl_outside_sasl_listener(self, h: RequestHeader, body: dict[str, Any], session: Session
                                         ) -> dict[str, Any]:
        """SASL requests reach a handler only on a listener without SASL (a SASL_* listener's authenticator
        in broker/server.py answers them): Kafka answers ILLEGAL_SASL_STATE."""
        if h.api_key == ApiKey.SASL_HANDSHAKE:
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
                "error_message": f"SASL is not enabled on listener {session.listener} ({session.protocol})"}

    def _rack(self) -> str | None:
        return self.config.get("broker.rack") or None

    # --- produce and fetch ------------------------------------------------------------------------

    async def produce(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any] | None:
        acks = body.get("acks", -1)
        if h.api_version < 3:
            # Kafka 4 advertises v0-2 for old librdkafka but refuses them
            refuse: int | None = ErrorCode.UNSUPPORTED_VERSION
        elif acks not in (-1, 0, 1):
            refuse = ErrorCode.INVALID_REQUIRED_ACKS
        elif body.get("transactional_id") is not None:
            # transactions are not implemented (docs/design.md)
            refuse = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            refuse = None
        responses = []
        failed = False
        waiting: list[tuple[str, dict[str, Any]]] = []
        for topic in body.get("topic_data", []):
            name = topic.get("name")
            parts = []
            for pd in topic.get("partition_data", []):
                if refuse is not None:
                    entry = {"index": pd["index"], "error_code": refuse, "base_offset": -1}
                else:
                    entry = self.replicas.append(name, pd["index"], pd.get("records"), acks_all=acks == -1)
                    if "_required_offset" in entry:
                        waiting.append((name, entry))
                failed |= entry["error_code"] != ErrorCode.NONE
                parts.append(entry)
            responses.append({"name": name, "partition_responses": parts})
        if waiting:  # acks=all and the followers have yet to replicate (DelayedProduce)
            timeout_ms = body.get("timeout_ms", 30000)
            await asyncio.gather(*(self.replicas.complete_produce(n, e, timeout_ms) for n, e in waiting))
        if acks == 0:
            if failed:
                raise CloseConnection("an acks=0 produce request failed")
            return None
        return {"responses": responses, "throttle_time_ms": 0}

    async def fetch(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        v = h.api_version
        session_id = body.get("session_id", 0)
        session_epoch = body.get("session_epoch", -1)
        if v >= 7 and session_epoch > 0:
            # Never created a session (we answer session_id 0), so an incremental fetch can't be ours.
            return {"throttle_time_ms": 0, "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                    "responses": []}
        del session_id
        isolation = FetchIsolation.TXN_COMMITTED if body.get("isolation_level", 0) == 1 else \
            FetchIsolation.HIGH_WATERMARK
        if body.get("replica_id", -1) >= 0:
            isolation = FetchIsolation.LOG_END
        wanted = []
        for t in body.get("topics", []):
            for p in t.get("partitions", []):
                wanted.append((t["topic"], p["partition"], p["fetch_offset"], p["partition_max_bytes"],
                               p.get("current_leader_epoch", -1), p.get("last_fetched_epoch", -1)))
        max_bytes = body.get("max_bytes", 0x7FFFFFFF)
        max_bytes = min(max_bytes if max_bytes > 0 else 0x7FFFFFFF, self.config.get("fetch.max.bytes"))
        replica_id = body.get("replica_id", -1)
        if replica_id < 0:
            replica_id = (body.get("replica_state") or {}).get("replica_id", -1)  # v15+ moved it there
        starts = [p.get("log_start_offset", -1) for t in body.get("topics", []) for p in t.get("partitions", [])]
        reads = await self.replicas.fetch(wanted, max_wait_ms=body.get("max_wait_ms", 0),
                                          min_bytes=body.get("min_bytes", 1), max_bytes=max_bytes,
                                          isolation=isolation, replica_id=replica_id,
                                          log_start_offsets=starts if replica_id >= 0 else None)
        responses: list[dict[str, Any]] = []
        for r in reads:
            if not responses or responses[-1]["topic"] != r.topic:
                responses.append({"topic": r.topic, "partitions": []})
            entry: dict[str, Any] = {
                "partition_index": r.partition, "error_code": r.error, "high_watermark": r.high_watermark,
                "last_stable_offset": r.last_stable_offset, "log_start_offset": r.log_start_offset,
                "aborted_transactions": r.aborted, "preferred_read_replica": -1,
                "records": self.replicas.records_for_wire(r.records),
            }
            if r.diverging is not None:
                entry["diverging_epoch"] = {"epoch": r.diverging[0], "end_offset": r.diverging[1]}
            responses[-1]["partitions"].append(entry)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}

    async def list_offsets(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        replica = body.get("replica_id", -1) >= 0
        level = body.get("isolation_level", 0)
        isolation = None if replica else (FetchIsolation.TXN_COMMITTED if level == 1 else
                                          FetchIsolation.HIGH_WATERMARK)
        topics = []
        for t in body.get("topics", []):
            parts = [self.replicas.list_offset(t["name"], p["partition_index"], p["timestamp"], isolation=isolation,
                                               current_leader_epoch=p.get("current_leader_epoch", -1))
                     for p in t.get("partitions", [])]
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    async def delete_records(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        topics = []
        waiting = []
        for t in body.get("topics", []):
            parts = [self.replicas.delete_records(t["name"], p["partition_index"], p["offset"])
                     for p in t.get("partitions", [])]
            waiting += [(t["name"], e) for e in parts if "_target" in e]
            topics.append({"name": t["name"], "partitions": parts})
        if waiting:  # followers have yet to move their log start (DelayedDeleteRecords)
            timeout_ms = body.get("timeout_ms", 30000)
            await asyncio.gather(*(self.replicas.complete_delete_records(n, e, timeout_ms) for n, e in waiting))
        return {"throttle_time_ms": 0, "topics": topics}

    async def offset_for_leader_epoch(self, h: RequestHeader, body: dict[str, Any], _session: Session
                                      ) -> dict[str, Any]:
        topics = []
        for t in body.get("topics", []):
            parts = [self.replicas.end_offset_for_epoch(t["topic"], p["partition"], p["leader_epoch"],
                                                        p.get("current_leader_epoch", -1))
                     for p in t.get("partitions", [])]
            topics.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    async def init_producer_id(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        if body.get("transactional_id") is not None:
            log.warning("Refused InitProducerId for transactional id %r: %s", body["transactional_id"],
                        TRANSACTIONS_UNSUPPORTED)
            return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        # As Kafka's coordinator does for a null transactional id: always a fresh producer id, epoch 0
        # (an idempotent producer that must reset its sequences asks again and gets a new id).
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                "producer_id": self.replicas.metadata.next_producer_id(), "producer_epoch": 0}

    # --- topics -----------------------------------------------------------------------------------

    def _topic_config_entries(self, name: str, overrides: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """DescribeConfigs entries of a topic: its overrides (the local registry's unless given: a cluster
        broker passes those from ZooKeeper) over the broker's defaults."""
        if overrides is None:
            info = self.replicas.metadata.get(name)
            overrides = info.configs if info else {}
        effective = LogConfig.from_props(overrides, self.replicas.logs.default_config).to_props()
        out = []
        for key, value in effective.items():
            d = CONFIGS_BY_NAME[key]
            if key in overrides:
                source = SOURCE_DYNAMIC_TOPIC
            elif any(b in self.config.props for b in d.broker):
                source = SOURCE_STATIC_BROKER
            else:
                source = SOURCE_DEFAULT
            out.append({"name": key, "value": value, "read_only": False, "config_source": source,
                        "is_default": source == SOURCE_DEFAULT, "is_sensitive": False, "synonyms": [],
                        "config_type": CONFIG_TYPES.get(d.kind, 0), "documentation": d.doc})
        return out

    # --- configs ----------------------------------------------------------------------------------

    async def describe_configs(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        results = []
        for r in body.get("resources", []):
            rtype, rname = r["resource_type"], r["resource_name"]
            keys = r.get("configuration_keys")
            res: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": rtype,
                                   "resource_name": rname, "configs": []}
            if rtype == ConfigResourceType.TOPIC:
                if rname not in self.replicas.metadata.topics:
                    res.update(error_code=UnknownTopicOrPartitionError.error_code,
                               error_message=f"The topic '{rname}' does not exist.")
                else:
                    res["configs"] = self._topic_config_entries(rname)
            elif rtype == ConfigResourceType.BROKER:
                if rname not in ("", str(self.node_id)):
                    res.update(error_code=ErrorCode.INVALID_REQUEST, error_message=f"Unexpected broker id {rname}")
                else:
                    res["configs"] = [{"name": k, "value": None if hidden else v, "read_only": True,
                                       "config_source": SOURCE_DEFAULT if default else SOURCE_STATIC_BROKER,
                                       "is_default": default, "is_sensitive": hidden, "synonyms": [],
                                       "config_type": 2, "documentation": None}
                                      for k, (v, default) in sorted(self.config.describe().items())
                                      for hidden in (is_sensitive(k),)]
            else:
                res.update(error_code=ErrorCode.INVALID_REQUEST, error_message=f"Unsupported resource type {rtype}")
            if keys is not None:
                res["configs"] = [c for c in res["configs"] if c["name"] in keys]
            results.append(res)
        return {"throttle_time_ms": 0, "results": results}

    async def alter_configs(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        """Legacy AlterConfigs: the configs sent become the resource's whole set of dynamic configs (what
        is left out returns to its default), as Kafka does; validated like IncrementalAlterConfigs."""
        validate_only = body.get("validate_only", False)

        def alter(rtype: int, rname: str, r: dict[str, Any]) -> None:
            names = [c["name"] for c in r.get("configs", [])]
            if len(set(names)) != len(names):
                raise InvalidRequestError(f"Duplicate config keys in the request for {rname}: {names}")
            if rtype == ConfigResourceType.BROKER:
                self._refuse_broker_configs(rname, names)
                return
            if rtype != ConfigResourceType.TOPIC:
                raise InvalidRequestError(f"Unsupported resource type {rtype}")
            if rname not in self.replicas.metadata.topics:
                raise UnknownTopicOrPartitionError(f"The topic '{rname}' does not exist.")
            configs: dict[str, str] = {}
            for c in r.get("configs", []):
                # a null value leaves the key at its default, as Kafka's legacy path does
                op = ConfigOp.SET if c.get("value") is not None else ConfigOp.DELETE
                configs = self._apply_config_op(configs, c["name"], op, c.get("value"))
            self.admin.alter_topic_configs(rname, configs, validate_only)

        return self._per_resource(body, alter)

    @staticmethod
    def _per_resource(body: dict[str, Any], alter: Callable[[int, str, dict[str, Any]], None]) -> dict[str, Any]:
        """The response of an AlterConfigs-style request: `alter(type, name, resource)` per resource, each
        failure answered with its own Kafka error code and message (the others still apply)."""
        responses = []
        for r in body.get("resources", []):
            rtype, rname = r["resource_type"], r["resource_name"]
            res: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": rtype,
                                   "resource_name": rname}
            try:
                alter(rtype, rname, r)
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            responses.append(res)
        return {"throttle_time_ms": 0, "responses": responses}

    def _refuse_broker_configs(self, rname: str, names: list[str]) -> None:
        """kafkalite has no dynamic broker configs: changing any is refused as Kafka refuses a read-only
        one (INVALID_REQUEST); an empty set changes nothing and succeeds."""
        if rname not in ("", str(self.node_id)):
            raise InvalidRequestError(f"Unexpected broker id {rname}: this broker is {self.node_id}")
        if names:
            raise InvalidRequestError(f"Cannot update these configs dynamically: {sorted(names)}; kafkalite has no "
                                      "dynamic broker configs: change server.properties and restart")

    async def incremental_alter_configs(self, h: RequestHeader, body: dict[str, Any], _session: Session
                                        ) -> dict[str, Any]:
        validate_only = body.get("validate_only", False)

        def alter(rtype: int, rname: str, r: dict[str, Any]) -> None:
            if rtype != ConfigResourceType.TOPIC:
                raise InvalidRequestError("kafkalite has no dynamic broker configs; change server.properties "
                                          "and restart")
            info = self.replicas.metadata.get(rname)
            if info is None:
                raise UnknownTopicOrPartitionError(f"The topic '{rname}' does not exist.")
            configs = dict(info.configs)
            for c in r.get("configs", []):
                configs = self._apply_config_op(configs, c["name"], c["config_operation"], c.get("value"))
            self.admin.alter_topic_configs(rname, configs, validate_only)

        return self._per_resource(body, alter)

    def _apply_config_op(self, configs: dict[str, str], name: str, op: int, value: str | None) -> dict[str, str]:
        d = CONFIGS_BY_NAME.get(name)
        if d is None:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        if op == ConfigOp.SET:
            if value is None:
                raise InvalidConfigError(f"Null value not supported for: {name}")
            configs[name] = value
        elif op == ConfigOp.DELETE:
            configs.pop(name, None)
        elif op in (ConfigOp.APPEND, ConfigOp.SUBTRACT):
            if d.kind != "list":
                raise InvalidConfigError(f"Config value append is not allowed for config key: {name}")
            current = [p for p in (configs.get(name) or ",".join(sorted(d.default))).split(",") if p]
            items = [p.strip() for p in (value or "").split(",") if p.strip()]
            if op == ConfigOp.APPEND:
                current += [i for i in items if i not in current]
            else:
                current = [c for c in current if c not in items]
            configs[name] = ",".join(current)
        else:
            raise InvalidRequestError(f"Unknown config operation {op}")
        return configs

    # --- log dirs ---------------------------------------------------------------------------------

    async def describe_log_dirs(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        """Each log dir with the partitions it holds (all, or those asked for) and their sizes in bytes.

        An offline dir answers KAFKA_STORAGE_ERROR with no partitions, as Kafka does; the volume's total and
        usable bytes (v4) come from statvfs. Every replica is current (no AlterReplicaLogDirs futures) and
        the only replica, so each offset lag is 0."""
        requested = body.get("topics")
        wanted: dict[str, set[int]] | None = None
        if requested is not None:
            wanted = {}
            for t in requested:
                wanted.setdefault(t["topic"], set()).update(t.get("partitions", []))
        by_dir: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for lg in self.replicas.logs.all_logs():
            if wanted is not None and lg.partition not in wanted.get(lg.topic, ()):
                continue
            by_dir.setdefault(str(lg.dir.parent), {}).setdefault(lg.topic, []).append(
                {"partition_index": lg.partition, "partition_size": lg.size, "offset_lag": 0, "is_future_key": False})
        results = []
        for d in self.replicas.logs.dirs:
            path = str(d.path)
            res: dict[str, Any] = {"error_code": ErrorCode.NONE, "log_dir": path, "topics": [], "total_bytes": -1,
                                   "usable_bytes": -1}
            if d.offline:
                res["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                try:
                    usage = shutil.disk_usage(path)
                    res.update(total_bytes=usage.total, usable_bytes=usage.free)
                except OSError as exc:
                    log.warning("DescribeLogDirs: cannot stat %s: %s", path, exc)
                res["topics"] = [{"name": t, "partitions": sorted(ps, key=lambda p: p["partition_index"])}
                                 for t, ps in sorted(by_dir.get(path, {}).items())]
            results.append(res)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}

    # --- groups -----------------------------------------------------------------------------------

    async def find_coordinator(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:
        host, port = self._endpoint(session.listener)

        def one(key: str, key_type: int) -> dict[str, Any]:
            if key_type == 1:
                # non-retriable: confluent-kafka, kafka-python, aiokafka and kafkajs fail at once on 53, while
                # they retry COORDINATOR_NOT_AVAILABLE until their timeouts (librdkafka also on 35 and 42)
                return {"key": key, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "node_id": -1,
                        "host": "", "port": -1, "error_message": TRANSACTIONS_UNSUPPORTED}
            if key_type != 0:
                return {"key": key, "error_code": ErrorCode.INVALID_REQUEST, "node_id": -1, "host": "", "port": -1,
                        "error_message": f"Unknown coordinator type {key_type}: kafkalite coordinates only "
                                         "consumer groups"}
            return {"key": key, "error_code": ErrorCode.NONE, "node_id": self.node_id, "host": host, "port": port,
                    "error_message": None}

        key_type = body.get("key_type", 0)
        if key_type == 1:
            keys = body.get("coordinator_keys", []) if h.api_version >= 4 else [body.get("key", "")]
            log.warning("Refused FindCoordinator for transactional ids %s from client %s: %s", keys, h.client_id,
                        TRANSACTIONS_UNSUPPORTED)
        if h.api_version >= 4:
            return {"throttle_time_ms": 0,
                    "coordinators": [one(k, key_type) for k in body.get("coordinator_keys", [])]}
        out = one(body.get("key", ""), key_type)
        out["throttle_time_ms"] = 0
        return out

    async def consumer_group_heartbeat(self, h: RequestHeader, body: dict[str, Any], session: Session
                                       ) -> dict[str, Any]:
        """KIP-848's protocol is not implemented. Not advertising it leaves a `group.protocol=consumer`
        librdkafka consumer waiting forever without a word; advertised and answered with
        UNSUPPORTED_VERSION, librdkafka raises a fatal error at once (tests/test_protocol_gaps.py)."""
        log.warning("Refused ConsumerGroupHeartbeat for group %r from %s (client %s): %s", body.get("group_id"),
                    session.host, h.client_id, KIP848_UNSUPPORTED)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_VERSION, "error_message": KIP848_UNSUPPORTED,
                "member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}

    async def group_request(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:
        assert self.coordinator is not None  # this handler is registered only with a coordinator (__init__)
        return await self.coordinator.handle(h.api_key, h.api_version, body, h.client_id, session.host)

