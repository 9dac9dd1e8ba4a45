"""Kafka's ZooKeeper paths and JSON (ZkData.scala, ZooKeeper mode), encoded and decoded in one place.

Every document is UTF-8 JSON (except `/controller_epoch`, plain decimal text); readers ignore keys they do
not know, as Kafka's do, and a malformed document raises ZnodeFormatError naming the path.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafkalite.errors import KafkaliteError
from kafkalite.security.acl import AclEntry, AclOperation, AclPermission, PatternType, ResourcePattern, ResourceType
from kafkalite.storage.checkpoint import uuid_from_base64, uuid_to_base64

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_USERS = "/config/users"  # SCRAM credentials (and Kafka's user quotas), one znode per user
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
LOG_DIR_EVENTS = "/log_dir_event_notification"
CLUSTER_ID = "/cluster/id"
ACLS = "/kafka-acl"  # literal patterns: /kafka-acl/<ResourceType>/<name>
ACLS_EXTENDED = "/kafka-acl-extended"  # others: /kafka-acl-extended/prefixed/<ResourceType>/<name>
ACL_CHANGES = "/kafka-acl-changes"  # acl_changes_<seq>: "<RESOURCE_TYPE>:<name>" of a changed literal pattern
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"  # acl_changes_<seq>: JSON naming a changed pattern
ACL_CHANGE_PREFIX = "acl_changes_"
PRODUCER_ID_BLOCK_SIZE = 1000

# Kafka creates these at start-up (ZkData.PersistentZkPaths) so watches and children reads always work.
PERSISTENT_PATHS = (
    "/consumers", BROKER_IDS, BROKER_TOPICS, BROKER_SEQID, CONFIG_CHANGES, DELETE_TOPICS, ISR_CHANGE,
    LATEST_PRODUCER_ID_BLOCK, LOG_DIR_EVENTS, CONFIG_TOPICS, "/config/clients", "/config/users",
    "/config/brokers", "/config/ips", ACLS, ACLS_EXTENDED, ACL_CHANGES, ACL_EXTENDED_CHANGES,
)


class ZnodeFormatError(KafkaliteError):
    """A znode's content is not what Kafka writes there."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{user}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _load(path: str, data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZnodeFormatError(f"{path} does not hold JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ZnodeFormatError(f"{path} holds {type(doc).__name__}, not a JSON object")
    return doc


def _dump(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _bad(path: str, exc: BaseException) -> ZnodeFormatError:
    return ZnodeFormatError(f"{path} is malformed: {type(exc).__name__}: {exc}")


# Topic ids are written as Kafka's Uuid.toString() (storage.checkpoint holds the codec).
topic_id_to_str = uuid_to_base64
topic_id_from_str = uuid_from_base64


# --- /brokers/ids/<id> (v5) -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    epoch: int = -1  # the znode's czxid: not in the JSON, filled in by the store when read

    def endpoint(self) -> Endpoint:
        return self.endpoints[0]

    def encode(self) -> bytes:
        # the legacy host/port name a PLAINTEXT endpoint only (null, -1 without one, as Kafka writes them): old
        # readers of these two fields connect in plaintext
        plain = next((e for e in self.endpoints if e.security_protocol == "PLAINTEXT"), None)
        doc: dict[str, Any] = {
            "version": 5, "host": plain.host if plain else None, "port": plain.port if plain else -1, "jmx_port": -1,
            "timestamp": _now_ms(),
            "endpoints": [f"{e.listener}://{e.host}:{e.port}" for e in self.endpoints],
            "listener_security_protocol_map": {e.listener: e.security_protocol for e in self.endpoints},
            "features": {},
        }
        if self.rack is not None:
            doc["rack"] = self.rack
        return _dump(doc)

    @classmethod
    def decode(cls, broker_id: int, data: bytes, epoch: int = -1) -> BrokerRegistration:
        path = broker_path(broker_id)
        doc = _load(path, data)
        try:
            protocols = doc.get("listener_security_protocol_map") or {}
            endpoints = []
            for text in doc["endpoints"]:
                name, rest = str(text).split("://", 1)
                host, port = rest.rsplit(":", 1)
                if host.startswith("[") and host.endswith("]"):
                    host = host[1:-1]
                endpoints.append(Endpoint(name, host, int(port), str(protocols.get(name, name))))
            if not endpoints:
                raise ValueError("no endpoints")
            rack = doc.get("rack")
            return cls(broker_id, tuple(endpoints), None if rack is None else str(rack), epoch)
        except (KeyError, ValueError, TypeError) as exc:
            raise _bad(path, exc) from None


# --- /controller and /controller_epoch ---------------------------------------------------------------------

def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    doc = _load(CONTROLLER, data)
    try:
        return int(doc["brokerid"])
    except (KeyError, ValueError, TypeError) as exc:
        raise _bad(CONTROLLER, exc) from None


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(CONTROLLER_EPOCH, exc) from None


# --- /brokers/topics/<topic> (v3) ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TopicAssignment:
    topic: str
    topic_id: uuid.UUID
    partitions: dict[int, list[int]]  # partition -> replicas in AR order
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        def m(d: Mapping[int, Sequence[int]]) -> dict[str, list[int]]:
            return {str(p): list(r) for p, r in sorted(d.items())}
        return _dump({"version": 3, "partitions": m(self.partitions), "adding_replicas": m(self.adding),
                      "removing_replicas": m(self.removing), "topic_id": topic_id_to_str(self.topic_id)})

    @classmethod
    def decode(cls, topic: str, data: bytes) -> TopicAssignment:
        path = topic_path(topic)
        doc = _load(path, data)
        try:
            def m(d: Mapping[str, Any] | None) -> dict[int, list[int]]:
                return {int(p): [int(b) for b in r] for p, r in (d or {}).items()}
            raw_id = doc.get("topic_id")
            # A version 1/2 document (written before topic ids) gets its id assigned by the controller.
            topic_id = topic_id_from_str(str(raw_id)) if raw_id else uuid.UUID(int=0)
            return cls(topic, topic_id, m(doc["partitions"]), m(doc.get("adding_replicas")),
                       m(doc.get("removing_replicas")))
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise _bad(path, exc) from None


# --- /brokers/topics/<t>/partitions/<p>/state --------------------------------------------------------------

@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1  # the znode version, filled in by the store when read or written

    def encode(self) -> bytes:
        return _dump({"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                      "leader_epoch": self.leader_epoch, "isr": list(self.isr)})

    @classmethod
    def decode(cls, path: str, data: bytes, zk_version: int = -1) -> PartitionState:
        doc = _load(path, data)
        try:
            return cls(int(doc["leader"]), int(doc["leader_epoch"]), tuple(int(b) for b in doc["isr"]),
                       int(doc["controller_epoch"]), zk_version)
        except (KeyError, ValueError, TypeError) as exc:
            raise _bad(path, exc) from None


# --- /config/topics/<topic> and /config/changes --------------------------------------------------------------

def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": {str(k): str(v) for k, v in configs.items()}})


def decode_topic_config(topic: str, data: bytes) -> dict[str, str]:
    path = topic_config_path(topic)
    doc = _load(path, data)
    cfg = doc.get("config", {})
    if not isinstance(cfg, dict):
        raise ZnodeFormatError(f"{path} is malformed: 'config' is not an object")
    return {str(k): str(v) for k, v in cfg.items()}


def encode_config_change(name: str, entity_type: str = "topics") -> bytes:
    """Kafka's /config/changes/config_change_<seq> notification (version 2): `<entity type>/<name>`."""
    return _dump({"version": 2, "entity_path": f"{entity_type}/{name}"})


def decode_user_config(user: str, data: bytes) -> dict[str, str]:
    """/config/users/<user>: `{"version":1,"config":{"SCRAM-SHA-256":"salt=...,...,iterations=4096"}}`."""
    path = user_config_path(user)
    cfg = _load(path, data).get("config", {})
    if not isinstance(cfg, dict):
        raise ZnodeFormatError(f"{path} is malformed: 'config' is not an object")
    return {str(k): str(v) for k, v in cfg.items()}


def decode_config_change(path: str, data: bytes) -> tuple[str, str]:
    """(entity type, entity name), e.g. ("topics", "orders")."""
    doc = _load(path, data)
    try:
        kind, name = str(doc["entity_path"]).split("/", 1)
        return kind, name
    except (KeyError, ValueError) as exc:
        raise _bad(path, exc) from None


# --- /isr_change_notification/isr_change_<seq> ------------------------------------------------------------------

def encode_isr_change(partitions: Sequence[tuple[str, int]]) -> bytes:
    """Kafka's IsrChangeNotificationSequenceZNode: the partitions whose ISR a leader changed."""
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def decode_isr_change(path: str, data: bytes) -> list[tuple[str, int]]:
    doc = _load(path, data)
    try:
        return [(str(e["topic"]), int(e["partition"])) for e in doc["partitions"]]
    except (KeyError, ValueError, TypeError) as exc:
        raise _bad(path, exc) from None


# --- /latest_producer_id_block -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProducerIdBlock:
    broker_id: int
    start: int
    end: int  # inclusive

    def encode(self) -> bytes:
        return _dump({"version": 1, "broker": self.broker_id, "block_start": str(self.start),
                      "block_end": str(self.end)})

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        doc = _load(LATEST_PRODUCER_ID_BLOCK, data)
        try:
            return cls(int(doc["broker"]), int(doc["block_start"]), int(doc["block_end"]))
        except (KeyError, ValueError, TypeError) as exc:
            raise _bad(LATEST_PRODUCER_ID_BLOCK, exc) from None

    def next(self, broker_id: int) -> ProducerIdBlock:
        return ProducerIdBlock(broker_id, self.end + 1, self.end + PRODUCER_ID_BLOCK_SIZE)


def first_producer_id_block(broker_id: int) -> ProducerIdBlock:
    return ProducerIdBlock(broker_id, 0, PRODUCER_ID_BLOCK_SIZE - 1)


# --- /cluster/id ---------------------------------------------------------------------------------------------

def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    doc = _load(CLUSTER_ID, data)
    try:
        return str(doc["id"])
    except KeyError as exc:
        raise _bad(CLUSTER_ID, exc) from None


def new_cluster_id() -> str:
    return topic_id_to_str(uuid.uuid4())


# --- ACLs (Kafka's ZkAclStore, ResourceZNode, AclEntry JSON, LiteralAclChangeStore / ExtendedAclChangeStore) ---

def acl_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    root = ACLS if pattern_type == PatternType.LITERAL else f"{ACLS_EXTENDED}/{pattern_type.name.lower()}"
    return f"{root}/{resource_type.title}"


def acl_path(pattern: ResourcePattern) -> str:
    return f"{acl_type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def acl_change_dir(pattern_type: PatternType) -> str:
    return ACL_CHANGES if pattern_type == PatternType.LITERAL else ACL_EXTENDED_CHANGES


def encode_acls(entries: Sequence[AclEntry]) -> bytes:
    return _dump({"version": 1, "acls": [{"principal": e.principal, "permissionType": e.permission.title,
                                          "operation": e.operation.title, "host": e.host} for e in entries]})


def _enum_by_title(enum_cls: Any, text: Any) -> Any:
    key = str(text).replace("_", "").upper()
    for m in enum_cls:
        if m.name.replace("_", "") == key:
            return m
    raise ValueError(f"unknown {enum_cls.__name__} {text!r}")


def decode_acls(path: str, data: bytes) -> frozenset[AclEntry]:
    doc = _load(path, data)
    try:
        return frozenset(AclEntry(str(a["principal"]), str(a["host"]), _enum_by_title(AclOperation, a["operation"]),
                                  _enum_by_title(AclPermission, a["permissionType"])) for a in doc.get("acls", []))
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, exc) from None


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return _dump({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                  "patternType": pattern.pattern_type.name})


def decode_acl_change(path: str, data: bytes) -> ResourcePattern:
    """The resource pattern a change notification names (either change directory's format)."""
    try:
        if path.startswith(ACL_EXTENDED_CHANGES + "/"):
            doc = _load(path, data)
            return ResourcePattern(_enum_by_title(ResourceType, doc["resourceType"]), str(doc["name"]),
                                   _enum_by_title(PatternType, doc["patternType"]))
        kind, sep, name = data.decode("utf-8").partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:name, got {data!r}")
        return ResourcePattern(_enum_by_title(ResourceType, kind), name, PatternType.LITERAL)
    except (KeyError, UnicodeDecodeError, ValueError) as exc:
        raise _bad(path, exc) from None
