"""ACLs: the authorizer's rules (unit and Hypothesis), their ZooKeeper layout, and real brokers refusing real
clients (confluent-kafka, kafka-python) with Kafka's errors, writing nothing, until ACLs grant the rights.

Over PLAINTEXT every client is User:ANONYMOUS, as in Kafka. The broker starts with one ACL seeded in its store
(ALTER and DESCRIBE on the cluster for ANONYMOUS: it may manage ACLs, nothing else), as an operator seeds
ZooKeeper before enabling an authorizer. `client_config(bootstrap, principal)` is where other principals
(SASL users) plug in: every end-to-end check takes the principal it acts as.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.broker.authz import UNCHECKED, RequestAuthorizer
from kafkalite.client import KafkaClient
from kafkalite.cluster import znodes as z
from kafkalite.cluster.local_store import LocalStore
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, ErrorCode
from kafkalite.security.acl import (
    CLUSTER_NAME,
    AclAuthorizer,
    AclBindingFilter,
    AclEntry,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkalite.security.session import ANONYMOUS, Session
from tests.support.brokers import BrokerProcess

Op, Perm, RT, PT = AclOperation, AclPermission, ResourceType, PatternType
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
CLUSTER = ResourcePattern(RT.CLUSTER, CLUSTER_NAME, PT.LITERAL)
E = ErrorCode


def allow(principal: str, op: AclOperation, host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, Perm.ALLOW)


def deny(principal: str, op: AclOperation, host: str = "*") -> AclEntry:
    return AclEntry(principal, host, op, Perm.DENY)


def topic(name: str, pattern: PatternType = PT.LITERAL) -> ResourcePattern:
    return ResourcePattern(RT.TOPIC, name, pattern)


ALICE = Session(host="10.0.0.1", principal="User:alice")


# --- the rules --------------------------------------------------------------------------------------------

def test_no_acls_denies_unless_allow_everyone_and_super_users_may_do_anything():
    a = AclAuthorizer()
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "t")
    assert AclAuthorizer(allow_if_no_acls=True).authorize(ALICE, Op.READ, RT.TOPIC, "t")
    su = AclAuthorizer(super_users={"User:alice"})
    su.load({topic("t"): {deny("User:alice", Op.ALL)}})
    assert su.authorize(ALICE, Op.DELETE, RT.TOPIC, "t")
    # allow.everyone.if.no.acl.found concerns resources without ACLs only
    some = AclAuthorizer(allow_if_no_acls=True)
    some.load({topic("t"): {allow("User:bob", Op.READ)}})
    assert not some.authorize(ALICE, Op.READ, RT.TOPIC, "t") and some.authorize(ALICE, Op.READ, RT.TOPIC, "u")


def test_implied_operations_wildcards_prefixes_and_hosts():
    a = AclAuthorizer()
    a.load({topic("orders"): {allow("User:alice", Op.READ)},
            topic("pay", PT.PREFIXED): {allow("User:*", Op.WRITE, host="10.0.0.1")},
            topic("*"): {allow("User:alice", Op.ALTER_CONFIGS)},
            ResourcePattern(RT.GROUP, "g", PT.LITERAL): {allow("User:alice", Op.ALL)}})
    assert a.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "orders")  # READ implies DESCRIBE
    assert not a.authorize(ALICE, Op.WRITE, RT.TOPIC, "orders")
    assert a.authorize(ALICE, Op.DESCRIBE_CONFIGS, RT.TOPIC, "anything")  # ALTER_CONFIGS on "*"
    assert not a.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "anything")  # ... implies DESCRIBE_CONFIGS only
    assert a.authorize(ALICE, Op.WRITE, RT.TOPIC, "payments") and not a.authorize(ALICE, Op.WRITE, RT.TOPIC, "pa")
    assert not a.authorize(Session(host="10.0.0.2", principal="User:alice"), Op.WRITE, RT.TOPIC, "payments")
    assert a.authorize(Session(host="10.0.0.1", principal="User:bob"), Op.WRITE, RT.TOPIC, "payments")
    assert a.authorize(ALICE, Op.DELETE, RT.GROUP, "g") and not a.authorize(ALICE, Op.READ, RT.GROUP, "h")
    assert a.authorize_any(ALICE, Op.WRITE, RT.TOPIC)  # InitProducerId: WRITE on some topic
    a.set_resource(topic("pay", PT.PREFIXED), ())
    assert not a.authorize(ALICE, Op.WRITE, RT.TOPIC, "payments") and not a.authorize_any(ALICE, Op.WRITE, RT.TOPIC)


_principals = st.sampled_from(["User:alice", "User:bob", "User:*"])
_hosts = st.sampled_from(["10.0.0.1", "10.0.0.2", "*"])
_ops = st.sampled_from([o for o in AclOperation if o not in (Op.UNKNOWN, Op.ANY)])
_entries = st.builds(AclEntry, _principals, _hosts, _ops, st.sampled_from([Perm.ALLOW, Perm.DENY]))
_patterns = st.sampled_from([topic("payments"), topic("*"), topic("pay", PT.PREFIXED), topic("p", PT.PREFIXED),
                             topic("orders")])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_patterns, st.frozensets(_entries, max_size=6), max_size=5), _ops)
def test_a_matching_deny_always_wins(acls, op):
    """Whatever else is granted, a DENY that matches the principal, host and operation (or ALL) on any
    pattern applying to the resource refuses it; without one, an ALLOW implying the operation grants it."""
    a = AclAuthorizer()
    a.load(acls)
    applying = [e for p, es in acls.items() if p.name in ("payments", "*") or
                (p.pattern_type == PT.PREFIXED and "payments".startswith(p.name)) for e in es]
    matches = [e for e in applying if e.principal in ("User:alice", "User:*") and e.host in ("10.0.0.1", "*")]
    denied = any(e.permission == Perm.DENY and e.operation in (op, Op.ALL) for e in matches)
    implied = {op, Op.ALL} | ({Op.READ, Op.WRITE, Op.DELETE, Op.ALTER} if op == Op.DESCRIBE else set()) | \
        ({Op.ALTER_CONFIGS} if op == Op.DESCRIBE_CONFIGS else set())
    allowed = any(e.permission == Perm.ALLOW and e.operation in implied for e in matches)
    assert a.authorize(ALICE, op, RT.TOPIC, "payments") == (not denied and allowed)


@pytest.mark.parametrize("pattern,why", [
    (ResourcePattern(RT.CLUSTER, "other", PT.LITERAL), "only valid name for the CLUSTER resource is kafka-cluster"),
    (ResourcePattern(RT.GROUP, "a/b", PT.LITERAL), "cannot contain '/'"),
    (ResourcePattern(RT.TOPIC, "*", PT.PREFIXED), "wildcard"),
    (ResourcePattern(RT.TOPIC, "t", PT.MATCH), "LITERAL or PREFIXED"),
    (ResourcePattern(RT.ANY, "t", PT.LITERAL), "Invalid resource type"),
])
def test_acls_on_invalid_patterns_are_refused(pattern, why):
    from kafkalite.errors import InvalidRequestError
    with pytest.raises(InvalidRequestError, match=why):
        pattern.validate()


def test_filters_match_as_kafkas_acl_binding_filter():
    p_lit, p_pre, p_all = topic("payments"), topic("pay", PT.PREFIXED), topic("*")
    match = AclBindingFilter(RT.TOPIC, "payments", PT.MATCH)
    assert all(match.matches_pattern(p) for p in (p_lit, p_pre, p_all))
    assert not match.matches_pattern(topic("orders"))
    assert AclBindingFilter(RT.ANY, None, PT.PREFIXED).matches_pattern(p_pre)
    assert not AclBindingFilter(RT.ANY, "pay", PT.LITERAL).matches_pattern(p_pre)
    assert AclBindingFilter(operation=Op.READ).matches_entry(allow("User:a", Op.READ))
    assert not AclBindingFilter(principal="User:b").matches_entry(allow("User:a", Op.READ))


def test_acl_znodes_use_kafkas_paths_and_json():
    assert z.acl_path(topic("orders")) == "/kafka-acl/Topic/orders"
    assert z.acl_path(ResourcePattern(RT.TRANSACTIONAL_ID, "tx", PT.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/TransactionalId/tx"
    data = z.encode_acls([allow("User:alice", Op.DESCRIBE_CONFIGS)])
    assert data == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                    b'"operation":"DescribeConfigs","host":"*"}]}')
    assert z.decode_acls("/p", data) == {allow("User:alice", Op.DESCRIBE_CONFIGS)}
    assert z.encode_acl_change(topic("orders")) == b"TOPIC:orders"
    pre = topic("pay", PT.PREFIXED)
    assert z.decode_acl_change(f"{z.ACL_EXTENDED_CHANGES}/acl_changes_0000000001", z.encode_acl_change(pre)) == pre
    assert z.decode_acl_change(f"{z.ACL_CHANGES}/acl_changes_0000000001", b"Topic:orders") == topic("orders")
    with pytest.raises(z.ZnodeFormatError, match="/p"):
        z.decode_acls("/p", b'{"version":1,"acls":[{"principal":"User:a"}]}')


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.builds(lambda d: json.dumps(d).encode(), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
        st.sampled_from(["version", "acls", "principal", "host", "operation", "permissionType", "resourceType",
                         "name", "patternType"]), kids, max_size=5), max_leaves=12)))
def test_malformed_acl_znodes_fail_naming_the_path(data):
    """Whatever a znode holds, decoding gives ACLs or ZnodeFormatError naming the path, nothing else."""
    for path, decode in (("/kafka-acl/Topic/t", z.decode_acls),
                         (f"{z.ACL_CHANGES}/acl_changes_0000000001", z.decode_acl_change),
                         (f"{z.ACL_EXTENDED_CHANGES}/acl_changes_0000000001", z.decode_acl_change)):
        try:
            decode(path, data)
        except z.ZnodeFormatError as exc:
            assert path in str(exc)


def test_every_served_api_has_an_authorization_gate():
    assert RequestAuthorizer.ungated(SUPPORTED_VERSIONS) == []
    assert ApiKey.API_VERSIONS in UNCHECKED


# --- end to end: one broker -------------------------------------------------------------------------------

def seed_store(store: Any, acls: dict[ResourcePattern, Iterable[AclEntry]]) -> None:
    """Write ACLs into a cluster store before any broker runs (Kafka's kafka-acls --authorizer-properties
    zookeeper.connect=... does the same for ZooKeeper)."""
    async def run() -> None:
        await store.start()
        try:
            for pattern, entries in acls.items():
                got, version = await store.resource_acls(pattern)
                assert await store.set_resource_acls(pattern, got | frozenset(entries), version)
        finally:
            await store.close()
    asyncio.run(run())


def client_config(bootstrap: str, principal: str = ANONYMOUS, password: str | None = None,
                  mechanism: str = "SCRAM-SHA-512", ca_pem: Any = None) -> dict[str, Any]:
    """confluent-kafka settings to connect as `principal`: over PLAINTEXT only ANONYMOUS exists; a SASL user
    (`User:alice`) logs in with `password` and `mechanism`, over SASL_SSL when `ca_pem` (the CA that signed the
    broker's certificate) is given, else SASL_PLAINTEXT (tests/test_security_combined.py)."""
    if principal == ANONYMOUS:
        return {"bootstrap.servers": bootstrap}
    if password is None:
        raise ValueError(f"{principal}: a SASL user needs its password")
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL" if ca_pem else "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": principal.removeprefix("User:"), "sasl.password": password}
    if ca_pem is not None:
        conf["ssl.ca.location"] = str(ca_pem)
    return conf


def acl_request(bootstrap: str, api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
    with KafkaClient(bootstrap, timeout_s=15) as c:
        return c.request(api, body)


def grant(bootstrap: str, pattern: ResourcePattern, *entries: AclEntry) -> None:
    out = acl_request(bootstrap, ApiKey.CREATE_ACLS, {"creations": [
        {"resource_type": int(pattern.resource_type), "resource_name": pattern.name,
         "resource_pattern_type": int(pattern.pattern_type), "principal": e.principal, "host": e.host,
         "operation": int(e.operation), "permission_type": int(e.permission)} for e in entries]})
    assert all(r["error_code"] == 0 for r in out["results"]), out


def revoke(bootstrap: str, pattern: ResourcePattern, entry: AclEntry | None = None) -> None:
    """Delete the pattern's ACLs (only `entry`, if given)."""
    out = acl_request(bootstrap, ApiKey.DELETE_ACLS, {"filters": [
        {"resource_type_filter": int(pattern.resource_type), "resource_name_filter": pattern.name,
         "pattern_type_filter": int(pattern.pattern_type), "principal_filter": entry.principal if entry else None,
         "host_filter": entry.host if entry else None, "operation": int(entry.operation if entry else Op.ANY),
         "permission_type": int(entry.permission if entry else Perm.ANY)}]})
    assert out["filter_results"][0]["error_code"] == 0, out


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """One broker with the authorizer on and no ACLs but ANONYMOUS's right to manage ACLs (module-wide: each
    test uses its own topic and group names)."""
    data = tmp_path_factory.mktemp("acl") / "data"
    data.mkdir()
    seed_store(LocalStore(data, 1), {CLUSTER: {allow(ANONYMOUS, Op.ALTER), allow(ANONYMOUS, Op.DESCRIBE)}})
    b = BrokerProcess(data, {**AUTHORIZER, "node.id": 1, "offsets.topic.num.partitions": 1}).start()
    try:
        yield b
    finally:
        assert b.stop() == 0, b.output()


def log_bytes(broker: BrokerProcess, name: str) -> int:
    return sum(f.stat().st_size for f in (broker.data_dir / f"{name}-0").glob("*.log"))


def create_as_granted(bootstrap: str, name: str) -> None:
    """Create a topic with a CREATE right granted for the moment."""
    grant(bootstrap, topic(name), allow(ANONYMOUS, Op.CREATE))
    with KafkaClient(bootstrap, timeout_s=15) as c:
        c.create_topic(name, 1, 1)
    revoke(bootstrap, topic(name))


def test_without_acls_producing_consuming_and_administering_are_refused_and_nothing_is_written(secured):
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bs = secured.bootstrap
    create_as_granted(bs, "locked")
    conf = client_config(bs, ANONYMOUS)
    admin = AdminClient(conf)
    # Metadata hides the topic; creating and deleting topics are refused
    assert "locked" not in admin.list_topics(timeout=10).topics
    with pytest.raises(KafkaException) as exc:
        admin.create_topics([NewTopic("newone", 1, 1)])["newone"].result(timeout=15)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as exc:
        admin.delete_topics(["locked"])["locked"].result(timeout=15)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # producing
    errors: list[Any] = []
    p = Producer({**conf, "message.timeout.ms": 5000})
    p.produce("locked", b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(15)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # consuming in a group, the topic readable: the group is refused
    grant(bs, topic("locked"), allow(ANONYMOUS, Op.READ))
    c = Consumer({**conf, "group.id": "locked-group", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["locked"])
        deadline, seen = time.monotonic() + 15, None
        while time.monotonic() < deadline and seen is None:
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                seen = m.error().code()
        assert seen == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()
    # nothing was written, nothing created, nothing deleted
    assert log_bytes(secured, "locked") == 0
    with KafkaClient(bs, timeout_s=15) as kc:
        md = kc.metadata(["locked", "newone"])
    assert {t["name"]: t["error_code"] for t in md["topics"]} == \
        {"locked": E.NONE, "newone": E.TOPIC_AUTHORIZATION_FAILED}
    revoke(bs, topic("locked"))


def test_kafka_python_is_refused_with_kafkas_errors(secured):
    import kafka.errors as ke
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic

    bs = secured.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=10000)
    try:
        with pytest.raises(ke.TopicAuthorizationFailedError):
            admin.create_topics([NewTopic("kp-new", 1, 1)])
    finally:
        admin.close()
    create_as_granted(bs, "kp")
    grant(bs, topic("kp"), allow(ANONYMOUS, Op.READ))
    consumer = KafkaConsumer("kp", bootstrap_servers=bs, group_id="kp-group", consumer_timeout_ms=8000)
    try:
        with pytest.raises(ke.GroupAuthorizationFailedError):
            for _ in range(20):
                consumer.poll(500)
    finally:
        consumer.close()
    revoke(bs, topic("kp"))


def test_granted_rights_let_the_same_principal_produce_and_consume_while_other_topics_stay_refused(secured):
    from confluent_kafka import Consumer, KafkaError, Producer

    bs = secured.bootstrap
    create_as_granted(bs, "open")
    create_as_granted(bs, "closed")
    grant(bs, topic("op", PT.PREFIXED), allow(ANONYMOUS, Op.WRITE), allow(ANONYMOUS, Op.READ))
    grant(bs, ResourcePattern(RT.GROUP, "open-group", PT.LITERAL), allow(ANONYMOUS, Op.READ))
    conf = client_config(bs, ANONYMOUS)
    results: list[Any] = []
    p = Producer({**conf, "message.timeout.ms": 5000})
    p.produce("open", b"hello", on_delivery=lambda err, _m: results.append(("open", err)))
    p.produce("closed", b"no", on_delivery=lambda err, _m: results.append(("closed", err)))
    p.flush(15)
    assert dict((t, e.code() if e else None) for t, e in results) == \
        {"open": None, "closed": KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert log_bytes(secured, "open") > 0 and log_bytes(secured, "closed") == 0
    c = Consumer({**conf, "group.id": "open-group", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["open"])
        deadline, got = time.monotonic() + 20, None
        while time.monotonic() < deadline and got is None:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got = m.value()
        assert got == b"hello"
    finally:
        c.close()
    # a DENY wins over the prefixed ALLOW, at once
    grant(bs, topic("open"), deny(ANONYMOUS, Op.WRITE))
    with KafkaClient(bs, timeout_s=15) as kc:
        out = kc.request(ApiKey.METADATA, {"topics": [{"name": "open"}], "allow_auto_topic_creation": False})
        assert out["topics"][0]["error_code"] == E.NONE  # READ still implies DESCRIBE
    results.clear()
    p.produce("open", b"denied", on_delivery=lambda err, _m: results.append(("open", err)))
    p.flush(15)
    assert results[0][1] is not None and results[0][1].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    revoke(bs, topic("op", PT.PREFIXED))  # the module's other tests start without these rights
    revoke(bs, ResourcePattern(RT.GROUP, "open-group", PT.LITERAL))


def test_kafkalite_acls_add_list_remove_round_trip(secured):
    bs = secured.bootstrap

    def acls(*args: str, ok: bool = True) -> str:
        r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "acls", "--bootstrap-server", bs, *args],
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode == 0) == ok, r.stdout + r.stderr
        return r.stdout + r.stderr

    out = acls("--add", "--allow-principal", "User:alice", "--allow-principal", "User:bob", "--operation", "Read",
               "--operation", "Describe", "--topic", "cli-t", "--resource-pattern-type", "prefixed")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=cli-t, patternType=PREFIXED)`" in out
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in out
    out = acls("--add", "--allow-principal", "User:carol", "--consumer", "--topic", "cli-t", "--group", "cli-g")
    assert "resourceType=GROUP, name=cli-g" in out
    out = acls("--list", "--topic", "cli-t-x", "--resource-pattern-type", "match")
    assert "patternType=PREFIXED" in out and "User:alice" in out and "User:carol" not in out
    acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "cli-t",
         "--resource-pattern-type", "prefixed")
    described = acl_request(bs, ApiKey.DESCRIBE_ACLS, {
        "resource_type_filter": int(RT.TOPIC), "resource_name_filter": "cli-t", "pattern_type_filter": int(PT.ANY),
        "principal_filter": None, "host_filter": None, "operation": int(Op.ANY), "permission_type": int(Perm.ANY)})
    got = {(r["pattern_type"], a["principal"], a["operation"]) for r in described["resources"] for a in r["acls"]}
    assert got == {(PT.PREFIXED, "User:alice", Op.DESCRIBE), (PT.PREFIXED, "User:bob", Op.READ),
                   (PT.PREFIXED, "User:bob", Op.DESCRIBE), (PT.LITERAL, "User:carol", Op.READ),
                   (PT.LITERAL, "User:carol", Op.DESCRIBE)}
    refused = acls("--add", "--allow-principal", "User:x", "--operation", "ClusterAction", "--group", "g", ok=False)
    assert "ResourceType Group only supports operations" in refused
    acls("--remove", "--force", "--topic", "cli-t", "--resource-pattern-type", "any")
    acls("--remove", "--force", "--topic", "cli-t")
    out = acls("--list", "--topic", "cli-t", "--resource-pattern-type", "any")
    assert "User:" not in out
    # the ACLs are znodes of the broker's metadata file; its change notifications are deleted once applied
    znodes = json.loads((secured.data_dir / "kafkalite-metadata.json").read_text())["znodes"]
    assert "/kafka-acl-extended/prefixed/Topic/cli-t" not in znodes and "/kafka-acl/Group/cli-g" in znodes
    deadline = time.monotonic() + 5
    while any(p.startswith(("/kafka-acl-changes/", "/kafka-acl-extended-changes/")) for p in znodes):
        assert time.monotonic() < deadline, sorted(znodes)
        time.sleep(0.1)
        znodes = json.loads((secured.data_dir / "kafkalite-metadata.json").read_text())["znodes"]
    assert "only zookeeper.connect is supported" in acls("--authorizer-properties", "zookeeper.set.acl=true",
                                                         "--list", ok=False)


def test_acl_apis_answer_security_disabled_without_an_authorizer(tmp_path):
    b = BrokerProcess(tmp_path / "d").start()
    try:
        out = acl_request(b.bootstrap, ApiKey.DESCRIBE_ACLS, {
            "resource_type_filter": int(RT.ANY), "resource_name_filter": None, "pattern_type_filter": int(PT.ANY),
            "principal_filter": None, "host_filter": None, "operation": int(Op.ANY),
            "permission_type": int(Perm.ANY)})
        assert out["error_code"] == E.SECURITY_DISABLED
    finally:
        assert b.stop() == 0


# --- end to end: a ZooKeeper cluster ----------------------------------------------------------------------

@pytest.mark.cluster
def test_an_acl_added_through_one_broker_is_enforced_by_the_others_within_a_second(tmp_path, zk_connect):
    from tests.support.cluster import Cluster

    # the brokers' own principal (ANONYMOUS here) holds ClusterAction, granted in ZooKeeper before they start
    r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "acls", "--authorizer-properties",
                        f"zookeeper.connect={zk_connect}", "--add", "--allow-principal", ANONYMOUS, "--cluster",
                        *[a for op in ("ClusterAction", "Alter", "Describe", "Create") for a in ("--operation", op)]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "operation=CLUSTER_ACTION" in r.stdout, r.stdout + r.stderr
    c = Cluster(tmp_path, zk_connect, **AUTHORIZER).start()
    try:
        c.create_topic("shared", partitions=1, replication_factor=3)
        c.wait_isr("shared", 1, 3)  # followers fetch: ClusterAction holds

        def described(bid: int) -> int:
            md = c.request(bid, ApiKey.METADATA, {"topics": [{"name": "shared"}], "allow_auto_topic_creation": False})
            return md["topics"][0]["error_code"]

        assert {described(b) for b in (1, 2, 3)} == {E.TOPIC_AUTHORIZATION_FAILED}
        grant(c.brokers[1].bootstrap, topic("shar", PT.PREFIXED), allow(ANONYMOUS, Op.DESCRIBE))
        assert c.zk_json("/kafka-acl-extended/prefixed/Topic/shar") == {"version": 1, "acls": [
            {"principal": ANONYMOUS, "permissionType": "Allow", "operation": "Describe", "host": "*"}]}
        started = time.monotonic()
        c.wait_for("every broker lets ANONYMOUS describe 'shared'",
                   lambda: all(described(b) == E.NONE for b in (2, 3)), timeout_s=5)
        assert time.monotonic() - started < 1.5
        assert c.zk().get_children("/kafka-acl-extended-changes")  # kept for 15 minutes, as Kafka
    finally:
        c.stop()


def test_confluent_and_kafka_python_admins_manage_acls(secured):
    """CreateAcls, DescribeAcls and DeleteAcls as librdkafka and kafka-python encode them."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import (
        AclOperation as COp,
    )
    from confluent_kafka.admin import (
        ResourceType as CRT,
    )
    from kafka import KafkaAdminClient
    from kafka.admin import ACLFilter, ACLPermissionType, ACLResourcePatternType, ResourcePatternFilter
    from kafka.admin import ACLOperation as KOp
    from kafka.admin import ResourceType as KRT

    admin = AdminClient(client_config(secured.bootstrap))
    binding = AclBinding(CRT.TOPIC, "admin-t", ResourcePatternType.PREFIXED, "User:dave", "*", COp.WRITE,
                         AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        f.result(timeout=15)
    flt = AclBindingFilter(CRT.TOPIC, "admin-t", ResourcePatternType.ANY, None, None, COp.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(flt).result(timeout=15) == [binding]
    kp = KafkaAdminClient(bootstrap_servers=secured.bootstrap, request_timeout_ms=10000)
    try:
        found, error = kp.describe_acls(ACLFilter(principal=None, host="*", operation=KOp.ANY,
                                                  permission_type=ACLPermissionType.ANY,
                                                  resource_pattern=ResourcePatternFilter(
                                                      KRT.TOPIC, "admin-t-1", ACLResourcePatternType.MATCH)))
        assert error.errno == 0 and [(a.principal, a.operation) for a in found] == [("User:dave", KOp.WRITE)]
    finally:
        kp.close()
    deleted = [b for f in admin.delete_acls([flt]).values() for b in f.result(timeout=15)]
    assert deleted == [binding]
    assert admin.describe_acls(flt).result(timeout=15) == []


def test_every_gate_answers_its_refusal_where_kafka_puts_it(secured):
    """Raw requests to each gated API without rights: the error in the place Kafka puts it, in a response
    the client decodes (v0 and the highest version), and nothing done."""
    bs = secured.bootstrap
    create_as_granted(bs, "raw")
    TAF, GAF, CAF = E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED
    with KafkaClient(bs, timeout_s=15) as c:
        def ask(api: ApiKey, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
            return c.request(api, body, version)

        lo = ask(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [{"name": "raw", "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]})
        assert lo["topics"][0]["partitions"][0]["error_code"] == TAF
        fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "topics": [{"topic": "raw", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}]}
        assert ask(ApiKey.FETCH, fetch)["responses"][0]["partitions"][0]["error_code"] == TAF
        assert ask(ApiKey.FETCH, {**fetch, "replica_id": 7})["responses"][0]["partitions"][0]["error_code"] == TAF
        dr = ask(ApiKey.DELETE_RECORDS, {"topics": [{"name": "raw", "partitions": [
            {"partition_index": 0, "offset": 0}]}], "timeout_ms": 1000})
        assert dr["topics"][0]["partitions"][0]["error_code"] == TAF
        cp = ask(ApiKey.CREATE_PARTITIONS, {"topics": [{"name": "raw", "count": 2, "assignments": None}],
                                            "timeout_ms": 1000})
        assert cp["results"][0]["error_code"] == TAF
        dc = ask(ApiKey.DESCRIBE_CONFIGS, {"resources": [
            {"resource_type": 2, "resource_name": "raw", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "1", "configuration_keys": None}]})
        assert sorted(r["error_code"] for r in dc["results"]) == [TAF, CAF]
        ia = ask(ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [{"resource_type": 2, "resource_name": "raw",
                                                                   "configs": []}]})
        assert ia["responses"][0]["error_code"] == TAF
        assert ask(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 1000})[
            "error_code"] == CAF
        assert ask(ApiKey.DESCRIBE_CLUSTER, {})["error_code"] == E.NONE  # ANONYMOUS holds DESCRIBE on the cluster
        # ANONYMOUS holds ALTER but not CLUSTER_ACTION on the cluster: the controller's requests are refused
        stop = {"controller_id": 9, "controller_epoch": 99, "broker_epoch": -1, "delete_partitions": True,
                "topics": [{"name": "raw", "partition_indexes": [0]}]}
        assert ask(ApiKey.STOP_REPLICA, stop, version=1)["error_code"] == CAF
        assert ask(ApiKey.CONTROLLED_SHUTDOWN, {"broker_id": 1, "broker_epoch": -1})["error_code"] == CAF
        assert ask(ApiKey.UPDATE_METADATA, {"controller_id": 9, "controller_epoch": 99, "broker_epoch": -1,
                                            "topic_states": [], "live_brokers": []})["error_code"] == CAF
        fc = ask(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["raw-g"]})
        assert fc["coordinators"][0]["error_code"] == GAF
        assert ask(ApiKey.FIND_COORDINATOR, {"key_type": 0, "key": "raw-g"}, version=0)["error_code"] == GAF
        hb = ask(ApiKey.HEARTBEAT, {"group_id": "raw-g", "generation_id": 1, "member_id": "m"})
        assert hb["error_code"] == GAF
        oc = ask(ApiKey.OFFSET_COMMIT, {"group_id": "raw-g", "generation_id_or_member_epoch": -1, "member_id": "",
                                        "topics": [{"name": "raw", "partitions": [
                                            {"partition_index": 0, "committed_offset": 5}]}]})
        assert oc["topics"][0]["partitions"][0]["error_code"] == GAF
        of = ask(ApiKey.OFFSET_FETCH, {"groups": [{"group_id": "raw-g", "topics": None}]})
        assert of["groups"][0]["error_code"] == GAF
        dg = ask(ApiKey.DESCRIBE_GROUPS, {"groups": ["raw-g"]})
        assert dg["groups"][0]["error_code"] == GAF
        assert ask(ApiKey.LIST_GROUPS, {})["error_code"] == E.NONE
        dl = ask(ApiKey.DELETE_GROUPS, {"groups_names": ["raw-g"]})
        assert dl["results"][0]["error_code"] == GAF
        od = ask(ApiKey.OFFSET_DELETE, {"group_id": "raw-g", "topics": [{"name": "raw", "partitions": [
            {"partition_index": 0}]}]})
        assert (od["error_code"], od["topics"]) == (GAF, [])
        dt = ask(ApiKey.DELETE_TOPICS, {"topic_names": ["raw"], "timeout_ms": 1000}, version=5)
        assert dt["responses"][0]["error_code"] == TAF
        # with READ on the group and the topic: the commit goes through for the readable topic only
        grant(bs, ResourcePattern(RT.GROUP, "raw-g", PT.LITERAL), allow(ANONYMOUS, Op.READ))
        grant(bs, topic("raw"), allow(ANONYMOUS, Op.READ))
        deadline = time.monotonic() + 15  # READ implies DESCRIBE: the coordinator is found (__consumer_offsets made)
        while ask(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["raw-g"]})["coordinators"][0][
                "error_code"] != E.NONE and time.monotonic() < deadline:
            time.sleep(0.1)
        two = [{"name": n, "partitions": [{"partition_index": 0, "committed_offset": 0}]} for n in ("raw", "hidden")]
        oc = ask(ApiKey.OFFSET_COMMIT, {"group_id": "raw-g", "generation_id_or_member_epoch": -1, "member_id": "",
                                        "topics": two})
        assert {t["name"]: t["partitions"][0]["error_code"] for t in oc["topics"]} == {"raw": E.NONE, "hidden": TAF}
        # OffsetDelete needs DELETE on the group (READ is not enough), then READ on each topic
        names = [{"name": n, "partitions": [{"partition_index": 0}]} for n in ("raw", "hidden")]
        assert ask(ApiKey.OFFSET_DELETE, {"group_id": "raw-g", "topics": names})["error_code"] == GAF
        grant(bs, ResourcePattern(RT.GROUP, "raw-g", PT.LITERAL), allow(ANONYMOUS, Op.DELETE))
        od = ask(ApiKey.OFFSET_DELETE, {"group_id": "raw-g", "topics": names})
        assert od["error_code"] == E.NONE
        assert {t["name"]: t["partitions"][0]["error_code"] for t in od["topics"]} == {"raw": E.NONE, "hidden": TAF}
        revoke(bs, ResourcePattern(RT.GROUP, "raw-g", PT.LITERAL), allow(ANONYMOUS, Op.DELETE))
        oc = ask(ApiKey.OFFSET_COMMIT, {"group_id": "raw-g", "generation_id_or_member_epoch": -1, "member_id": "",
                                        "topics": two[:1]})  # the commit back, for what follows
        assert oc["topics"][0]["partitions"][0]["error_code"] == E.NONE
        md = ask(ApiKey.METADATA, {"topics": [{"name": "raw"}], "allow_auto_topic_creation": False,
                                   "include_cluster_authorized_operations": True,
                                   "include_topic_authorized_operations": True}, version=10)
        read_describe = (1 << Op.READ) | (1 << Op.DESCRIBE)
        assert md["topics"][0]["topic_authorized_operations"] == read_describe
        assert md["cluster_authorized_operations"] == (1 << Op.ALTER) | (1 << Op.DESCRIBE)
        dcl = ask(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True})
        assert dcl["cluster_authorized_operations"] == (1 << Op.ALTER) | (1 << Op.DESCRIBE)
        dg = ask(ApiKey.DESCRIBE_GROUPS, {"groups": ["raw-g", "other-g"], "include_authorized_operations": True})
        assert {g["group_id"]: (g["error_code"], g["authorized_operations"]) for g in dg["groups"]} == \
            {"raw-g": (E.NONE, read_describe), "other-g": (GAF, -2147483648)}
        of = ask(ApiKey.OFFSET_FETCH, {"group_id": "raw-g", "topics": None}, version=7)
        assert [t["name"] for t in of["topics"]] == ["raw"]
        assert "raw-g" in [g["group_id"] for g in ask(ApiKey.LIST_GROUPS, {})["groups"]]  # DESCRIBE on the cluster
        no_describe = deny(ANONYMOUS, Op.DESCRIBE)
        grant(bs, CLUSTER, no_describe)  # now only the groups it may DESCRIBE (READ implies it) are listed
        assert [g["group_id"] for g in ask(ApiKey.LIST_GROUPS, {})["groups"]] == ["raw-g"]
        assert ask(ApiKey.DESCRIBE_CLUSTER, {})["error_code"] == CAF
        revoke(bs, CLUSTER, no_describe)
        revoke(bs, topic("raw"))
        revoke(bs, ResourcePattern(RT.GROUP, "raw-g", PT.LITERAL))
    assert log_bytes(secured, "raw") == 0


def test_a_refused_acks_zero_produce_closes_the_connection_and_writes_nothing(secured):
    """Kafka answers no acks=0 produce; a refused one closes the connection (the client learns of it)."""
    import socket

    from kafkalite.client import produce_request
    from kafkalite.protocol import encode_request
    from kafkalite.records import SimpleRecord, build_batch

    create_as_granted(secured.bootstrap, "fire")
    batch = bytes(build_batch([SimpleRecord(None, b"refused", int(time.time() * 1000))]))
    host, port = secured.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(encode_request(ApiKey.PRODUCE, 7, 1, "raw", produce_request({("fire", 0): [batch]}, acks=0,
                                                                               timeout_ms=1000)))
        assert s.recv(1) == b""  # closed by the broker, nothing answered
    assert log_bytes(secured, "fire") == 0
