"""Authorization of every request, per Kafka's authorization matrix (KafkaApis' authorize calls), in one place.

Each API has one small gate here: it asks the authorizer what the request needs (once per topic, group or
transactional id named, never per record), passes the authorized part of the request to the handler and
answers the refused part itself with Kafka's error (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
where Kafka puts it: per partition, per topic, per resource or for the whole request. A refused part never
reaches the handler, so nothing is written for it. Handlers stay unaware of ACLs; a new API needs a gate here
(tests/test_security_acl.py checks that every advertised API has one).

Requests from this broker's own controller (channel.SELF_CLIENT_ID, random per process) pass unchecked.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kafkalite.broker.handlers import Body, Handler
from kafkalite.cluster.channel import SELF_CLIENT_ID
from kafkalite.coordinator.coordinator import error_response
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.protocol.config_resources import ConfigResourceType
from kafkalite.protocol.connection import CloseConnection
from kafkalite.security.acl import AUTHORIZED_OPS_OMITTED, CLUSTER_NAME, AclAuthorizer, AclOperation, ResourceType
from kafkalite.security.session import Session

log = logging.getLogger("kafkalite.broker.authz")

Op = AclOperation
RT = ResourceType
# Served to anyone: before authentication (ApiVersions, SASL) or refused for everyone anyway (KIP-848).
UNCHECKED = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
                       ApiKey.CONSUMER_GROUP_HEARTBEAT})


@dataclass
class Check:
    """The decisions of one request: the session's rights, asked of the authorizer (memoized there)."""

    authorizer: AclAuthorizer
    session: Session

    def __call__(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.session, op, rtype, name)

    def topic(self, op: AclOperation, name: str) -> bool:
        return self(op, RT.TOPIC, name)

    def group(self, op: AclOperation, name: str) -> bool:
        return self(op, RT.GROUP, name)

    def cluster(self, op: AclOperation) -> bool:
        return self(op, RT.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True)
class TopicSpec:
    """Where a per-topic request keeps its topics and how a refused topic is answered."""

    request_key: str
    name_of: Callable[[Any], str | None]
    response_key: str
    refused: Callable[[Any, int], Body]  # (request topic, error code) -> response entry


def _parts(name_key: str, req_parts: str, resp_parts: str, part: Callable[[Any, int], Body]
           ) -> Callable[[Any, int], Body]:
    def refused(t: Any, code: int) -> Body:
        return {name_key: t[name_key], resp_parts: [part(p, code) for p in t.get(req_parts) or []]}
    return refused


PRODUCE = TopicSpec("topic_data", lambda t: t["name"], "responses", _parts(
    "name", "partition_data", "partition_responses",
    lambda p, code: {"index": p["index"], "error_code": code, "base_offset": -1}))
FETCH = TopicSpec("topics", lambda t: t["topic"], "responses", _parts(
    "topic", "partitions", "partitions",
    lambda p, code: {"partition_index": p["partition"], "error_code": code, "high_watermark": -1,
                     "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
                     "records": b""}))
LIST_OFFSETS = TopicSpec("topics", lambda t: t["name"], "topics", _parts(
    "name", "partitions", "partitions",
    lambda p, code: {"partition_index": p["partition_index"], "error_code": code, "timestamp": -1, "offset": -1,
                     "leader_epoch": -1}))
OFFSET_FOR_LEADER_EPOCH = TopicSpec("topics", lambda t: t["topic"], "topics", _parts(
    "topic", "partitions", "partitions",
    lambda p, code: {"partition": p["partition"], "error_code": code, "leader_epoch": -1, "end_offset": -1}))
DELETE_RECORDS = TopicSpec("topics", lambda t: t["name"], "topics", _parts(
    "name", "partitions", "partitions",
    lambda p, code: {"partition_index": p["partition_index"], "error_code": code, "low_watermark": -1}))
OFFSET_COMMIT = TopicSpec("topics", lambda t: t["name"], "topics", _parts(
    "name", "partitions", "partitions", lambda p, code: {"partition_index": p["partition_index"], "error_code": code}))
CREATE_TOPICS = TopicSpec("topics", lambda t: t["name"], "topics", lambda t, code: {
    "name": t["name"], "topic_id": uuid.UUID(int=0), "error_code": code, "error_message": _why(code),
    "num_partitions": -1, "replication_factor": -1, "configs": []})
CREATE_PARTITIONS = TopicSpec("topics", lambda t: t["name"], "results", lambda t, code: {
    "name": t["name"], "error_code": code, "error_message": _why(code)})


# What each resource type's authorized_operations bit field covers (Kafka's supported operations per type).
TOPIC_OPERATIONS = (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
                    Op.ALTER_CONFIGS)
GROUP_OPERATIONS = (Op.READ, Op.DESCRIBE, Op.DELETE)
CLUSTER_OPERATIONS = (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                      Op.ALTER, Op.DESCRIBE)


def authorized_operations(c: Check, rtype: ResourceType, name: str, ops: tuple[AclOperation, ...]) -> int:
    """Kafka's authorized-operations bit field: bit `code` set for each operation the session may perform."""
    bits = 0
    for op in ops:
        if c(op, rtype, name):
            bits |= 1 << int(op)
    return bits


def _why(code: int) -> str:
    return {int(ErrorCode.TOPIC_AUTHORIZATION_FAILED): "Authorization failed.",
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
            ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed."}.get(code, "")


async def _per_topic(h: RequestHeader, body: Body, session: Session, handler: Handler, spec: TopicSpec,
                     allowed: Callable[[str], bool], empty: Body, code: int = ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     acks_zero: bool = False) -> Any:
    """The handler's answer for the authorized topics, with the refused ones answered `code`."""
    kept: list[Any] = []
    refused: list[Any] = []
    for t in body.get(spec.request_key) or []:
        name = spec.name_of(t)
        (kept if name is not None and allowed(name) else refused).append(t)
    if not refused:
        return await handler(h, body, session)
    if acks_zero:
        raise CloseConnection("an acks=0 produce request was refused by the authorizer")
    out: Body = await handler(h, {**body, spec.request_key: kept}, session) if kept else dict(empty)
    out[spec.response_key] = list(out.get(spec.response_key) or []) + [spec.refused(t, code) for t in refused]
    return out


# --- the gates, one per API --------------------------------------------------------------------------------

Gate = Callable[["RequestAuthorizer", Check, RequestHeader, Body, Handler], Awaitable[Any]]


async def _produce(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    tid = body.get("transactional_id")
    acks_zero = body.get("acks", -1) == 0
    empty = {"responses": [], "throttle_time_ms": 0}
    if tid is not None and not c(Op.WRITE, RT.TRANSACTIONAL_ID, tid):
        return await _per_topic(h, body, c.session, handler, PRODUCE, lambda _n: False, empty,
                                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, acks_zero)
    return await _per_topic(h, body, c.session, handler, PRODUCE, lambda n: c.topic(Op.WRITE, n), empty,
                            acks_zero=acks_zero)


def _replica_id(body: Body) -> int:
    rid = body.get("replica_id", -1)
    return rid if rid >= 0 else (body.get("replica_state") or {}).get("replica_id", -1)


async def _fetch(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    empty = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": []}
    if _replica_id(body) >= 0:  # a follower: CLUSTER_ACTION, else every partition TOPIC_AUTHORIZATION_FAILED
        ok = c.cluster(Op.CLUSTER_ACTION)
        return await _per_topic(h, body, c.session, handler, FETCH, lambda _n: ok, empty)
    return await _per_topic(h, body, c.session, handler, FETCH, lambda n: c.topic(Op.READ, n), empty)


async def _list_offsets(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    return await _per_topic(h, body, c.session, handler, LIST_OFFSETS, lambda n: c.topic(Op.DESCRIBE, n),
                            {"throttle_time_ms": 0, "topics": []})


async def _offset_for_leader_epoch(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body,
                                   handler: Handler) -> Any:
    empty = {"throttle_time_ms": 0, "topics": []}
    if body.get("replica_id", -2) >= 0:
        ok = c.cluster(Op.CLUSTER_ACTION)
        return await _per_topic(h, body, c.session, handler, OFFSET_FOR_LEADER_EPOCH, lambda _n: ok, empty)
    return await _per_topic(h, body, c.session, handler, OFFSET_FOR_LEADER_EPOCH,
                            lambda n: c.topic(Op.DESCRIBE, n), empty)


async def _delete_records(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    return await _per_topic(h, body, c.session, handler, DELETE_RECORDS, lambda n: c.topic(Op.DELETE, n),
                            {"throttle_time_ms": 0, "topics": []})


async def _create_topics(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    on_cluster = c.cluster(Op.CREATE)
    return await _per_topic(h, body, c.session, handler, CREATE_TOPICS,
                            lambda n: on_cluster or c.topic(Op.CREATE, n), {"throttle_time_ms": 0, "topics": []})


async def _delete_topics(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    empty = {"throttle_time_ms": 0, "responses": []}
    if h.api_version < 6:
        spec = TopicSpec("topic_names", lambda n: n, "responses", lambda n, code: {
            "name": n, "topic_id": uuid.UUID(int=0), "error_code": code, "error_message": _why(code)})

        return await _per_topic(h, body, c.session, handler, spec, lambda n: c.topic(Op.DELETE, n), empty)

    def name_of(t: Body) -> str | None:
        name = t.get("name")
        if name is None and t.get("topic_id") is not None:
            # an id this broker cannot name is the handler's to answer (UNKNOWN_TOPIC_ID)
            return ra.topic_name_of(t["topic_id"]) or ""
        return name

    spec = TopicSpec("topics", name_of, "responses", lambda t, code: {
        "name": t.get("name"), "topic_id": t.get("topic_id") or uuid.UUID(int=0), "error_code": code,
        "error_message": _why(code)})
    return await _per_topic(h, body, c.session, handler, spec, lambda n: n == "" or c.topic(Op.DELETE, n), empty)


async def _create_partitions(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body,
                             handler: Handler) -> Any:
    return await _per_topic(h, body, c.session, handler, CREATE_PARTITIONS, lambda n: c.topic(Op.ALTER, n),
                            {"throttle_time_ms": 0, "results": []})


def _config_resources(op: AclOperation, response_key: str, with_configs: bool) -> Gate:
    """DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: a topic needs `op` on the topic
    (TOPIC_AUTHORIZATION_FAILED), a broker or broker logger `op` on the cluster (CLUSTER_AUTHORIZATION_FAILED)."""

    def code_of(c: Check, r: Body) -> int:
        rtype = r["resource_type"]
        if rtype == ConfigResourceType.TOPIC:
            return ErrorCode.NONE if c.topic(op, r["resource_name"]) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if rtype in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER):
            return ErrorCode.NONE if c.cluster(op) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return ErrorCode.NONE  # other types: the handler refuses them

    async def gate(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
        resources = body.get("resources") or []
        codes = [code_of(c, r) for r in resources]
        if not any(codes):
            return await handler(h, body, c.session)
        kept = [r for r, code in zip(resources, codes, strict=True) if not code]
        out: Body = await handler(h, {**body, "resources": kept}, c.session) if kept else \
            {"throttle_time_ms": 0, response_key: []}
        for r, code in zip(resources, codes, strict=True):
            if code:
                entry = {"error_code": code, "error_message": _why(code), "resource_type": r["resource_type"],
                         "resource_name": r["resource_name"]}
                if with_configs:
                    entry["configs"] = []
                out[response_key] = [*(out.get(response_key) or []), entry]
        return out
    return gate


def _on_cluster(op: AclOperation, refused: Callable[[RequestHeader, Body], Body]) -> Gate:
    """An API that needs `op` on the cluster, refused whole with CLUSTER_AUTHORIZATION_FAILED."""
    async def gate(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
        if c.cluster(op):
            return await handler(h, body, c.session)
        return refused(h, body)
    return gate


CODE = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _elect_refused(h: RequestHeader, body: Body) -> Body:
    return {"throttle_time_ms": 0, "error_code": CODE, "replica_election_results": [
        {"topic": t["topic"], "partition_result": [{"partition_id": p, "error_code": CODE, "error_message": _why(CODE)}
                                                   for p in t.get("partitions") or []]}
        for t in body.get("topic_partitions") or []]}


async def _init_producer_id(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    tid = body.get("transactional_id")
    if tid is not None:
        ok, code = c(Op.WRITE, RT.TRANSACTIONAL_ID, tid), ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:  # Kafka 3+: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic
        ok = c.cluster(Op.IDEMPOTENT_WRITE) or c.authorizer.authorize_any(c.session, Op.WRITE, RT.TOPIC)
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if ok:
        return await handler(h, body, c.session)
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


async def _find_coordinator(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    key_type = body.get("key_type", 0)
    rtype, code = (RT.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) if key_type == 1 else \
        (RT.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED)

    def refused(key: str) -> Body:
        return {"key": key, "error_code": code, "error_message": _why(code), "node_id": -1, "host": "", "port": -1}

    if key_type not in (0, 1):
        return await handler(h, body, c.session)
    if h.api_version < 4:
        key = body.get("key", "")
        return await handler(h, body, c.session) if c(Op.DESCRIBE, rtype, key) else \
            {"throttle_time_ms": 0, **refused(key)}
    keys = body.get("coordinator_keys") or []
    kept = [k for k in keys if c(Op.DESCRIBE, rtype, k)]
    if len(kept) == len(keys):
        return await handler(h, body, c.session)
    out: Body = await handler(h, {**body, "coordinator_keys": kept}, c.session) if kept else \
        {"throttle_time_ms": 0, "coordinators": []}
    out["coordinators"] = list(out["coordinators"]) + [refused(k) for k in keys if k not in kept]
    return out


def _group_read(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Awaitable[Any]:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group, else GROUP_AUTHORIZATION_FAILED."""
    return _one_group(c, h, body, handler, Op.READ)


async def _one_group(c: Check, h: RequestHeader, body: Body, handler: Handler, op: AclOperation) -> Any:
    if c.group(op, body.get("group_id") or ""):
        return await handler(h, body, c.session)
    return error_response(h.api_key, h.api_version, body, ErrorCode.GROUP_AUTHORIZATION_FAILED)


async def _offset_commit(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    if not c.group(Op.READ, body.get("group_id") or ""):
        return error_response(h.api_key, h.api_version, body, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return await _per_topic(h, body, c.session, handler, OFFSET_COMMIT, lambda n: c.topic(Op.READ, n),
                            {"throttle_time_ms": 0, "topics": []})


def _filter_fetched(c: Check, topics: list[Body], requested: bool) -> list[Body]:
    """OffsetFetch's topics without those the principal may not DESCRIBE: dropped when all topics were asked
    for, else answered TOPIC_AUTHORIZATION_FAILED per partition (Kafka's handleOffsetFetchRequest)."""
    out = []
    for t in topics:
        if c.topic(Op.DESCRIBE, t["name"]):
            out.append(t)
        elif requested:
            out.append({**t, "partitions": [{**p, "committed_offset": -1, "committed_leader_epoch": -1,
                                             "metadata": None, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
                                            for p in t.get("partitions") or []]})
    return out


async def _offset_fetch(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    if h.api_version < 8:
        if not c.group(Op.DESCRIBE, body.get("group_id") or ""):
            return error_response(h.api_key, h.api_version, body, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        single: Body = await handler(h, body, c.session)
        single["topics"] = _filter_fetched(c, single.get("topics") or [], body.get("topics") is not None)
        return single
    groups = body.get("groups") or []
    kept = [g for g in groups if c.group(Op.DESCRIBE, g["group_id"])]
    out: Body = await handler(h, {**body, "groups": kept}, c.session) if kept else \
        {"throttle_time_ms": 0, "groups": []}
    asked = {g["group_id"]: g.get("topics") is not None for g in kept}
    for g in out.get("groups") or []:
        g["topics"] = _filter_fetched(c, g.get("topics") or [], asked.get(g["group_id"], False))
    out["groups"] = list(out.get("groups") or []) + [
        {"group_id": g["group_id"], "topics": [], "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
        for g in groups if g not in kept]
    return out


async def _describe_groups(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    groups = body.get("groups") or []
    kept = [g for g in groups if c.group(Op.DESCRIBE, g)]
    asked = body if len(kept) == len(groups) else {**body, "groups": kept}
    out: Body = dict(await handler(h, asked, c.session)) if kept else {"throttle_time_ms": 0, "groups": []}
    described = [dict(g) for g in out.get("groups") or []]
    if body.get("include_authorized_operations"):
        for g in described:
            if g.get("error_code", 0) == ErrorCode.NONE:
                g["authorized_operations"] = authorized_operations(c, RT.GROUP, g["group_id"], GROUP_OPERATIONS)
    out["groups"] = described + [_group_refused(g) for g in groups if g not in kept]
    return out


def _group_refused(group: str) -> Body:
    return {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": group, "group_state": "",
            "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": AUTHORIZED_OPS_OMITTED}


async def _list_groups(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    out = await handler(h, body, c.session)
    if not c.cluster(Op.DESCRIBE):  # Kafka: DESCRIBE on the cluster lists all, else the describable groups
        out["groups"] = [g for g in out.get("groups") or [] if c.group(Op.DESCRIBE, g["group_id"])]
    return out


async def _delete_groups(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    spec = TopicSpec("groups_names", lambda g: g, "results", lambda g, code: {"group_id": g, "error_code": code})
    return await _per_topic(h, body, c.session, handler, spec, lambda g: c.group(Op.DELETE, g),
                            {"throttle_time_ms": 0, "results": []}, ErrorCode.GROUP_AUTHORIZATION_FAILED)


async def _offset_delete(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    """DELETE on the group, then READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka's
    handleDeleteOffsetsRequest."""
    if not c.group(Op.DELETE, body.get("group_id") or ""):
        return error_response(h.api_key, h.api_version, body, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return await _per_topic(h, body, c.session, handler, OFFSET_COMMIT, lambda n: c.topic(Op.READ, n),  # same shape
                            {"error_code": 0, "throttle_time_ms": 0, "topics": []})


async def _metadata(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    """Topics the principal may not DESCRIBE are left out of an all-topics answer and answered
    TOPIC_AUTHORIZATION_FAILED when named; a named topic that would be auto-created needs CREATE on the
    cluster or the topic, else TOPIC_AUTHORIZATION_FAILED too."""
    requested = body.get("topics")
    auto = ra.auto_create() and body.get("allow_auto_topic_creation", True)
    refused: list[str] = []
    if requested is not None and (h.api_version > 0 or requested):
        kept = []
        for t in requested:
            name = t.get("name")
            if name is None:  # by topic id (v10+): resolved, then checked on the answer below
                kept.append(t)
            elif not c.topic(Op.DESCRIBE, name) or (auto and not ra.topic_exists(name) and not (
                    c.cluster(Op.CREATE) or c.topic(Op.CREATE, name))):
                refused.append(name)
            else:
                kept.append(t)
        body = {**body, "topics": kept}
        if not kept:  # asking for none still gets the brokers and cluster id
            body["topics"] = [] if h.api_version > 0 else [{"name": ""}]
    out = dict(await handler(h, body, c.session))

    def visible(t: Body) -> bool:
        name = t.get("name")
        if name is None:  # an unknown topic id's error entry
            return True
        return name != "" and c.topic(Op.DESCRIBE, name)

    shown = [dict(t) for t in out.get("topics") or [] if visible(t)]
    if body.get("include_topic_authorized_operations"):
        for t in shown:
            if t.get("name") and t.get("error_code", 0) == ErrorCode.NONE:
                t["topic_authorized_operations"] = authorized_operations(c, RT.TOPIC, t["name"], TOPIC_OPERATIONS)
    if body.get("include_cluster_authorized_operations"):
        out["cluster_authorized_operations"] = authorized_operations(c, RT.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
    out["topics"] = shown + [
        {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": n, "topic_id": uuid.UUID(int=0),
         "is_internal": False, "partitions": [], "topic_authorized_operations": AUTHORIZED_OPS_OMITTED}
        for n in refused]
    return out


async def _describe_cluster(ra: RequestAuthorizer, c: Check, h: RequestHeader, body: Body, handler: Handler) -> Any:
    if not c.cluster(Op.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": CODE, "error_message": _why(CODE), "endpoint_type": 1,
                "cluster_id": "", "controller_id": -1, "brokers": [],
                "cluster_authorized_operations": AUTHORIZED_OPS_OMITTED}
    out = dict(await handler(h, body, c.session))
    if body.get("include_cluster_authorized_operations"):
        out["cluster_authorized_operations"] = authorized_operations(c, RT.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
    return out


def _describe_acls_refused(h: RequestHeader, body: Body) -> Body:
    return {"throttle_time_ms": 0, "error_code": CODE, "error_message": _why(CODE), "resources": []}


def _create_acls_refused(h: RequestHeader, body: Body) -> Body:
    return {"throttle_time_ms": 0, "results": [{"error_code": CODE, "error_message": _why(CODE)}
                                               for _ in body.get("creations") or []]}


def _delete_acls_refused(h: RequestHeader, body: Body) -> Body:
    return {"throttle_time_ms": 0, "filter_results": [{"error_code": CODE, "error_message": _why(CODE),
                                                       "matching_acls": []} for _ in body.get("filters") or []]}


def _alter_scram_refused(h: RequestHeader, body: Body) -> Body:
    users = [u.get("name") for key in ("deletions", "upsertions") for u in body.get(key) or []]
    return {"throttle_time_ms": 0, "results": [{"user": u, "error_code": CODE, "error_message": _why(CODE)}
                                               for u in dict.fromkeys(users)]}


def _cluster_error(**extra: Any) -> Callable[[RequestHeader, Body], Body]:
    return lambda h, body: {"error_code": CODE, **extra}


GATES: dict[int, Gate] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DESCRIBE_CONFIGS: _config_resources(Op.DESCRIBE_CONFIGS, "results", True),
    ApiKey.ALTER_CONFIGS: _config_resources(Op.ALTER_CONFIGS, "responses", False),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _config_resources(Op.ALTER_CONFIGS, "responses", False),
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group_read,
    ApiKey.SYNC_GROUP: _group_read,
    ApiKey.HEARTBEAT: _group_read,
    ApiKey.LEAVE_GROUP: _group_read,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.LEADER_AND_ISR: _on_cluster(Op.CLUSTER_ACTION, _cluster_error(partition_errors=[], topics=[])),
    ApiKey.UPDATE_METADATA: _on_cluster(Op.CLUSTER_ACTION, _cluster_error()),
    ApiKey.STOP_REPLICA: _on_cluster(Op.CLUSTER_ACTION, _cluster_error(partition_errors=[])),
    ApiKey.CONTROLLED_SHUTDOWN: _on_cluster(Op.CLUSTER_ACTION, _cluster_error(remaining_partitions=[])),
    ApiKey.ELECT_LEADERS: _on_cluster(Op.ALTER, _elect_refused),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _on_cluster(Op.ALTER, _cluster_error(
        throttle_time_ms=0, error_message=_why(CODE), responses=[])),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _on_cluster(Op.DESCRIBE, _cluster_error(
        throttle_time_ms=0, error_message=_why(CODE), topics=[])),
    ApiKey.DESCRIBE_LOG_DIRS: _on_cluster(Op.DESCRIBE, _cluster_error(throttle_time_ms=0, results=[])),
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
    ApiKey.DESCRIBE_ACLS: _on_cluster(Op.DESCRIBE, _describe_acls_refused),
    ApiKey.CREATE_ACLS: _on_cluster(Op.ALTER, _create_acls_refused),
    ApiKey.DELETE_ACLS: _on_cluster(Op.ALTER, _delete_acls_refused),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _on_cluster(Op.DESCRIBE, _cluster_error(
        throttle_time_ms=0, error_message=_why(CODE), results=[])),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _on_cluster(Op.ALTER, _alter_scram_refused),
}


class RequestAuthorizer:
    """The gates bound to an authorizer, plus what some gates need to know of the cluster (set by the
    broker's cluster part): whether a topic exists, a topic's name from its id, whether Metadata may
    auto-create topics."""

    def __init__(self, authorizer: AclAuthorizer, auto_create: Callable[[], bool] = lambda: False,
                 topic_exists: Callable[[str], bool] = lambda _name: True,
                 topic_name_of: Callable[[uuid.UUID], str | None] = lambda _id: None) -> None:
        """`topic_exists` and `topic_name_of` answer from the cluster's metadata: whether a Metadata request
        would auto-create a topic, and the name behind a topic id (requests that name topics by id)."""
        self.authorizer = authorizer
        self.topic_exists = topic_exists
        self.topic_name_of = topic_name_of
        self.auto_create = auto_create

    @staticmethod
    def ungated(api_keys: Iterable[int]) -> list[int]:
        """API keys served without a gate (should be none beyond UNCHECKED)."""
        return [k for k in api_keys if k not in GATES and k not in UNCHECKED]

    async def handle(self, h: RequestHeader, body: Body, session: Session, handler: Handler) -> Any:
        gate = GATES.get(h.api_key)
        if gate is None or h.client_id == SELF_CLIENT_ID:
            return await handler(h, body, session)
        return await gate(self, Check(self.authorizer, session), h, body, handler)
