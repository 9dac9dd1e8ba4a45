"""TLS, SASL and ACLs together, as issue 16's "Done when" puts it: real clients over SASL_SSL with SCRAM-SHA-256
and -512; authenticated users whom ACLs allow or refuse, with Kafka's errors and nothing written; and a
three-broker cluster with SASL_SSL between brokers and clients, ACLs on, surviving the leader's kill -9.

Everything is set up the way an operator would, with the CLI over SASL_SSL as the super user `admin` (PLAIN,
`--command-config admin.properties`): SCRAM users with `kafkalite configs`, topics with `kafkalite topics`,
ACLs with `kafkalite acls`. One broker process serves the single-broker tests (module-scoped); the cluster
test starts its own three.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kafkalite.client import KafkaClient
from kafkalite.errors import SaslAuthenticationError
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.security.transport import ClientSecurity, connect
from tests.support.brokers import BrokerProcess, consecutive_free_ports, free_port
from tests.support.certs import PASSWORD
from tests.test_security_acl import client_config
from tests.test_security_sasl import JS_DIR, kafkajs, topic_name  # noqa: F401 - kafkajs is a fixture

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret";')
SCRAM = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
# users made with `kafkalite configs`: carol (every client of the matrix), alice (rights on t1/g1), bob (none)
PASSWORDS = {"carol": "carol-secret", "alice": "alice-secret", "bob": "bob-secret"}


def sasl_ssl_props(pki: Any, port: int) -> dict[str, object]:
    """One SASL_SSL listener (server-authenticated TLS, then SASL), the brokers' own connections over it as
    User:admin with PLAIN, SCRAM for users, and the ACL authorizer with admin as the super user."""
    return {"listeners": f"SASL_SSL://127.0.0.1:{port}", "inter.broker.listener.name": "SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": ADMIN_JAAS,
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12,
            "ssl.keystore.password": PASSWORD, "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca_pem,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}


def write_admin_properties(path: Path, pki: Any) -> Path:
    """What an operator writes for Kafka's tools: the super user's PLAIN login over SASL_SSL."""
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="admin" password="admin-secret";\n'
                    f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca_pem}\n")
    return path


def cli(*args: str) -> str:
    """`kafkalite ...`; fails the test unless it exits 0; stdout and stderr."""
    r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", *args], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"kafkalite {' '.join(args)}: {r.stdout}{r.stderr}"
    return r.stdout + r.stderr


def sasl_ssl_security(pki: Any, mechanism: str, user: str, password: str) -> ClientSecurity:
    """kafkalite's own client (security/transport.py) from Kafka's client property names."""
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    return ClientSecurity.from_client_props({
        "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "ssl.ca.location": str(pki.ca_pem),
        "sasl.jaas.config": f'org.apache.kafka.common.security.{module} required username="{user}" '
                            f'password="{password}";'})


def admin_security(pki: Any) -> ClientSecurity:
    return sasl_ssl_security(pki, "PLAIN", "admin", "admin-secret")


def add_scram_users(bootstrap: str, admin_props: Path, users: list[str]) -> None:
    for user in users:
        out = cli("configs", "--bootstrap-server", bootstrap, "--command-config", str(admin_props), "--alter",
                  "--entity-type", "users", "--entity-name", user, "--add-config",
                  f"SCRAM-SHA-256=[iterations=8192,password={PASSWORDS[user]}],"
                  f"SCRAM-SHA-512=[password={PASSWORDS[user]}]")
        assert f"Completed updating config for user {user}." in out


def conf(broker: Any, pki: Any, user: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    return client_config(broker.bootstrap, f"User:{user}", PASSWORDS[user], mechanism, pki.ca_pem)


@pytest.fixture(scope="module")
def secure_broker(pki, tmp_path_factory):
    """One broker, SASL_SSL only, ACLs on. carol may do anything with topics and groups (the client matrix);
    alice may WRITE t1 and READ t1 and group g1; bob has no ACL."""
    root = tmp_path_factory.mktemp("secure")
    port = free_port()
    b = BrokerProcess(root / "data", {**sasl_ssl_props(pki, port), "num.partitions": 1,
                                      "offsets.topic.num.partitions": 1}, port=port).start()
    admin_props = write_admin_properties(root / "admin.properties", pki)
    b.admin_props = admin_props  # type: ignore[attr-defined]
    try:
        add_scram_users(b.bootstrap, admin_props, list(PASSWORDS))
        acl = ["acls", "--bootstrap-server", b.bootstrap, "--command-config", str(admin_props), "--add"]
        cli(*acl, "--allow-principal", "User:carol", "--operation", "All", "--topic", "*", "--group", "*")
        cli("topics", "--bootstrap-server", b.bootstrap, "--command-config", str(admin_props), "--create",
            "--topic", "t1", "--partitions", "1")
        out = cli(*acl, "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read",
                  "--topic", "t1")
        assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in out
        cli(*acl, "--allow-principal", "User:alice", "--operation", "Read", "--group", "g1")
        yield b
    finally:
        rc = b.stop()
        assert rc == 0, b.output()
        assert "Unexpected error" not in b.output(), b.output()


def end_offset(broker: Any, pki: Any, topic: str) -> int:
    with KafkaClient(broker.bootstrap, timeout_s=15, security=admin_security(pki)) as c:
        return c.list_offset(topic, 0, -1)


def topic_names(broker: Any, pki: Any) -> set[str]:
    with KafkaClient(broker.bootstrap, timeout_s=15, security=admin_security(pki)) as c:
        return {t["name"] for t in c.metadata(None)["topics"]}


# --- 1. real clients over SASL_SSL with SCRAM -----------------------------------------------------------------


@pytest.mark.parametrize("mech", SCRAM)
def test_confluent_kafka_over_sasl_ssl(secure_broker, pki, mech):
    topic = topic_name("ck")
    c = conf(secure_broker, pki, "carol", mech)
    admin = AdminClient(c)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=15)
    p = Producer({**c, "acks": "all", "linger.ms": 5})
    values = [f"v{i}-".encode() * 40 for i in range(500)]
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0
    consumer = Consumer({**c, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < len(values) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        consumer.close()
    assert got == values


@pytest.mark.parametrize("mech", SCRAM)
def test_kafka_python_over_sasl_ssl(secure_broker, pki, mech):
    from kafka import KafkaConsumer, KafkaProducer

    common = {"bootstrap_servers": secure_broker.bootstrap, "security_protocol": "SASL_SSL",
              "ssl_cafile": str(pki.ca_pem), "sasl_mechanism": mech, "sasl_plain_username": "carol",
              "sasl_plain_password": PASSWORDS["carol"]}
    topic = topic_name("kp")
    p = KafkaProducer(acks="all", **common)
    for i in range(20):
        p.send(topic, f"v{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", consumer_timeout_ms=20000,
                      **common)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 20:
            break
    c.close()
    assert got == [f"v{i}".encode() for i in range(20)]


@pytest.mark.parametrize("mech", SCRAM)
def test_aiokafka_over_sasl_ssl(secure_broker, pki, mech):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = topic_name("aio")

    async def main() -> list[bytes]:
        common = {"bootstrap_servers": secure_broker.bootstrap, "security_protocol": "SASL_SSL",
                  "ssl_context": create_ssl_context(cafile=str(pki.ca_pem)), "sasl_mechanism": mech,
                  "sasl_plain_username": "carol", "sasl_plain_password": PASSWORDS["carol"]}
        p = AIOKafkaProducer(acks="all", **common)
        await p.start()
        try:
            for i in range(20):
                await p.send_and_wait(topic, f"v{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest", **common)
        await c.start()
        try:
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < 20:
                    batch = await c.getmany(timeout_ms=500)
                    out += [m.value for ms in batch.values() for m in ms]
            return out
        finally:
            await c.stop()

    assert asyncio.run(main()) == [f"v{i}".encode() for i in range(20)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/run installs it)")
@pytest.mark.parametrize("mech", SCRAM)
def test_kcat_over_sasl_ssl(secure_broker, pki, mech):
    topic = topic_name("kcat")
    common = ["kcat", "-b", secure_broker.bootstrap, "-X", "security.protocol=SASL_SSL",
              "-X", f"ssl.ca.location={pki.ca_pem}", "-X", f"sasl.mechanisms={mech}", "-X", "sasl.username=carol",
              "-X", f"sasl.password={PASSWORDS['carol']}"]
    r = subprocess.run([*common, "-P", "-t", topic, "-K:"], input="".join(f"k{i}:v{i}\n" for i in range(30)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*common, "-C", "-t", topic, "-o", "beginning", "-e", "-c", "30", "-f", "%k=%s\n"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"k{i}=v{i}" for i in range(30)]


@pytest.mark.parametrize("mech", SCRAM)
def test_kafkajs_over_sasl_ssl(secure_broker, pki, kafkajs, mech):  # noqa: F811 - the imported fixture
    env = {**os.environ, "KAFKALITE_JS_SSL": json.dumps({"ca": str(pki.ca_pem)}),
           "KAFKALITE_JS_SASL": json.dumps({"mechanism": mech.lower(), "username": "carol",
                                            "password": PASSWORDS["carol"]})}
    r = subprocess.run([str(kafkajs), str(JS_DIR / "client.js"), secure_broker.bootstrap, "produce-consume",
                        topic_name("js")], cwd=JS_DIR, capture_output=True, text=True, timeout=90, env=env)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and lines, r.stdout + r.stderr
    assert json.loads(lines[-1])["values"] == [f"v{i}" for i in range(50)]


def test_wrong_scram_password_over_sasl_ssl_is_refused(secure_broker, pki):
    with pytest.raises(SaslAuthenticationError, match="Authentication failed"):
        connect("127.0.0.1", secure_broker.port, sasl_ssl_security(pki, "SCRAM-SHA-256", "alice", "not-secret"), 10)
    connect("127.0.0.1", secure_broker.port, sasl_ssl_security(pki, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]),
            10).close()


# --- 2. ACLs decide what authenticated users may do -----------------------------------------------------------


def _produce(p: Producer, topic: str, value: bytes) -> KafkaError | None:
    """One record; the delivery error (None when acknowledged)."""
    results: list[Any] = []
    p.produce(topic, value, on_delivery=lambda err, _m: results.append(err))
    p.flush(20)
    assert len(results) == 1, results
    return results[0]


def _errors_until(consumer: Consumer, wanted: int, timeout_s: float = 15) -> set[int]:
    """The error codes the consumer reports until `wanted` is among them (or the time is up); no record."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while wanted not in seen and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None:
            assert m.error() is not None, m.value()
            seen.add(m.error().code())
    return seen


def test_acls_decide_what_alice_and_bob_may_do(secure_broker, pki):
    """alice (WRITE t1, READ t1 and g1) produces and consumes in g1; bob (no ACL) is refused each thing with
    Kafka's error while alice's producer keeps working, nothing is written, created or deleted, and Metadata
    does not show him t1."""
    alice, bob = conf(secure_broker, pki, "alice"), conf(secure_broker, pki, "bob", "SCRAM-SHA-256")
    alice_p = Producer({**alice, "acks": "all", "message.timeout.ms": 10000})
    assert _produce(alice_p, "t1", b"alice-1") is None
    before, topics_before = end_offset(secure_broker, pki, "t1"), topic_names(secure_broker, pki)
    assert before >= 1 and "t1" in topics_before

    # Metadata hides t1 from bob; alice sees it
    assert "t1" not in AdminClient(bob).list_topics(timeout=15).topics
    assert "t1" in AdminClient(alice).list_topics(timeout=15).topics
    # bob producing
    bob_p = Producer({**bob, "message.timeout.ms": 5000})
    err = _produce(bob_p, "t1", b"bob-must-not-be-written")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce(alice_p, "t1", b"alice-2") is None  # at the same time, on alice's open connection
    # bob consuming t1 without a group (kafka-python: librdkafka's consumer always has a group), then joining g1
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    kc = KafkaConsumer(bootstrap_servers=secure_broker.bootstrap, security_protocol="SASL_SSL",
                       ssl_cafile=str(pki.ca_pem), sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                       sasl_plain_password=PASSWORDS["bob"], group_id=None, enable_auto_commit=False)
    try:
        kc.assign([KafkaTopicPartition("t1", 0)])
        for _ in range(4):
            assert kc.poll(250) == {}
        assert kc._client.cluster.unauthorized_topics == {"t1"}  # its Metadata answered TOPIC_AUTHORIZATION_FAILED
    finally:
        kc.close()
    # a Fetch sent anyway (what a client with stale metadata would do) is refused per partition
    with KafkaClient(secure_broker.bootstrap, timeout_s=15,
                     security=sasl_ssl_security(pki, "SCRAM-SHA-256", "bob", PASSWORDS["bob"])) as bc:
        fetched = bc.request(ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "topics": [
            {"topic": "t1", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 65536}]}]})
    part = fetched["responses"][0]["partitions"][0]
    assert part["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not part["records"]
    c = Consumer({**bob, "group.id": "g1", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["t1"])
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in _errors_until(c, KafkaError.GROUP_AUTHORIZATION_FAILED)
    finally:
        c.close()
    # bob creating and deleting topics
    bob_admin = AdminClient(bob)
    with pytest.raises(KafkaException) as exc:
        bob_admin.create_topics([NewTopic("bobs-topic", 1, 1)])["bobs-topic"].result(timeout=15)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as exc:
        bob_admin.delete_topics(["t1"])["t1"].result(timeout=15)
    assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce(alice_p, "t1", b"alice-3") is None

    # nothing of bob's was written, created or deleted
    assert end_offset(secure_broker, pki, "t1") == before + 2
    assert topic_names(secure_broker, pki) == topics_before
    # alice consumes t1 in group g1 and commits there
    c = Consumer({**alice, "group.id": "g1", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.subscribe(["t1"])
        deadline = time.monotonic() + 30
        while b"alice-3" not in got and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert got[-3:] == [b"alice-1", b"alice-2", b"alice-3"] and b"bob-must-not-be-written" not in got


def test_bob_is_refused_by_the_cli_too(secure_broker, pki, tmp_path):
    """Kafka's tools with bob's --command-config: refused with Kafka's error name, exit 1, nothing created."""
    props = tmp_path / "bob.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="bob" password="{PASSWORDS["bob"]}";\nssl.truststore.type=PEM\n'
                     f"ssl.truststore.location={pki.ca_pem}\n")
    base = [sys.executable, "-m", "kafkalite.cli.main"]
    for args, error in ((["topics", "--create", "--topic", "bob-cli"], "TOPIC_AUTHORIZATION_FAILED"),
                        (["acls", "--list"], "CLUSTER_AUTHORIZATION_FAILED"),
                        (["acls", "--add", "--allow-principal", "User:bob", "--operation", "All", "--topic", "*"],
                         "CLUSTER_AUTHORIZATION_FAILED")):
        r = subprocess.run([*base, *args, "--bootstrap-server", secure_broker.bootstrap, "--command-config",
                            str(props)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and error in r.stdout + r.stderr, (args, r.stdout, r.stderr)
    assert "bob-cli" not in topic_names(secure_broker, pki)
    out = cli("topics", "--bootstrap-server", secure_broker.bootstrap, "--command-config", str(props), "--list")
    assert "t1" not in out.split()


def test_tools_without_command_config_on_a_secured_listener_say_what_is_missing(secure_broker):
    """A plaintext tool on a SASL_SSL port: the broker closes the connection; the message says that a TLS or
    SASL listener wants --command-config (--producer.config / --consumer.config), not only "closed"."""
    base = [sys.executable, "-m", "kafkalite.cli.main"]
    for args, option in ((["topics", "--list"], "--command-config"), (["acls", "--list"], "--command-config"),
                         (["consume", "--topic", "t1", "--max-messages", "1"], "--consumer.config"),
                         (["produce", "--topic", "t1"], "--producer.config")):
        r = subprocess.run([*base, *args, "--bootstrap-server", secure_broker.bootstrap], input="x\n",
                           capture_output=True, text=True, timeout=60)
        out = r.stdout + r.stderr
        assert r.returncode == 1 and "closed the connection" in out and f"give {option}" in out, (args, out)


# --- 3. the three-broker cluster ------------------------------------------------------------------------------


@pytest.mark.cluster
def test_cluster_over_sasl_ssl_with_acls_survives_the_leaders_kill(pki, tmp_path, zk_connect):
    """Three brokers, SASL_SSL between them (PLAIN as User:admin, a super user) and with clients (SCRAM), ACLs
    on: alice's acks=all produce to an RF=3, min.insync.replicas=2 topic succeeds with an ISR of 3, bob's is
    refused; the leader is killed with SIGKILL and alice's produce goes on after the failover, every
    acknowledged record read back by alice."""
    from tests.support.cluster import Cluster

    ports: dict[int, int] = {}

    def props(bid: int, port: int) -> dict[str, object]:
        ports[bid] = port
        return sasl_ssl_props(pki, port)

    started = time.monotonic()
    cluster = Cluster(tmp_path, zk_connect, per_broker=props, security=admin_security(pki)).start()
    try:
        admin_props = write_admin_properties(tmp_path / "admin.properties", pki)
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.values())
        reg = cluster.zk_json("/brokers/ids/1")
        assert reg["endpoints"] == [f"SASL_SSL://127.0.0.1:{ports[1]}"]
        assert reg["listener_security_protocol_map"] == {"SASL_SSL": "SASL_SSL"}
        assert (reg["host"], reg["port"]) == (None, -1)  # Kafka's legacy fields name PLAINTEXT endpoints only

        add_scram_users(cluster.brokers[1].bootstrap, admin_props, ["alice", "bob"])
        cli("topics", "--bootstrap-server", bootstrap, "--command-config", str(admin_props), "--create", "--topic",
            "orders", "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
        cli("acls", "--bootstrap-server", bootstrap, "--command-config", str(admin_props), "--add",
            "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read", "--topic", "orders")
        cli("acls", "--bootstrap-server", bootstrap, "--command-config", str(admin_props), "--add",
            "--allow-principal", "User:alice", "--operation", "Read", "--group", "g1")
        cluster.wait_isr("orders", 1, 3)
        for bid, port in ports.items():  # every broker knows alice (ZooKeeper notifications)
            cluster.wait_for(f"alice logs in on broker {bid}", lambda port=port: _logs_in(pki, port, "alice"), 15)

        alice = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca_pem),
                 "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": PASSWORDS["alice"]}
        bob = {**alice, "sasl.username": "bob", "sasl.password": PASSWORDS["bob"]}
        acked: list[bytes] = []
        failed: list[Any] = []

        acked_at: list[float] = []

        def delivered(err: Any, msg: Any) -> None:
            if err:
                failed.append(err)
            else:
                acked.append(msg.value())
                acked_at.append(time.monotonic())

        p = Producer({**alice, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                      "message.timeout.ms": 30000})
        for i in range(200):
            p.produce("orders", f"before-{i}".encode(), on_delivery=delivered)
        assert p.flush(30) == 0 and failed == [] and len(acked) == 200
        assert sorted(cluster.partition_state("orders", 0)["isr"]) == [1, 2, 3]
        err = _produce(Producer({**bob, "message.timeout.ms": 5000}), "orders", b"bob")
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        leader = cluster.leader("orders", 0)
        cluster.kill(leader)
        killed = time.monotonic()
        for i in range(200):
            p.produce("orders", f"after-{i}".encode(), on_delivery=delivered)
            p.poll(0)
        assert p.flush(45) == 0
        assert failed == [] and len(acked) == 400
        new_leader = cluster.leader("orders", 0)
        assert new_leader not in (-1, leader)
        print(f"SASL_SSL cluster: first acks=all record acknowledged {acked_at[200] - killed:.1f} s after the "
              f"leader's kill -9")

        c = Consumer({**alice, "group.id": "g1", "enable.auto.commit": False})
        c.assign([TopicPartition("orders", 0, ck.OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        try:
            while len(got) < len(acked) and time.monotonic() < deadline:
                for m in c.consume(500, timeout=0.5):
                    assert m.error() is None, m.error()
                    got.append(m.value())
        finally:
            c.close()
        assert got == acked  # idempotent: each acknowledged record once, in order; bob's never
        assert time.monotonic() - started < 60
    finally:
        cluster.stop()


def _logs_in(pki: Any, port: int, user: str) -> bool:
    try:
        connect("127.0.0.1", port, sasl_ssl_security(pki, "SCRAM-SHA-512", user, PASSWORDS[user]), 5).close()
        return True
    except SaslAuthenticationError:
        return False


def test_registration_without_a_plaintext_endpoint_has_kafkas_null_host_and_port():
    """Kafka's /brokers/ids/<id> keeps the legacy "host"/"port" for the PLAINTEXT endpoint only, null and -1
    without one: a reader of those fields (old tools) must not be sent in plaintext to a SASL_SSL port."""
    from kafkalite.cluster import znodes as z

    secure = z.BrokerRegistration(1, (z.Endpoint("SASL_SSL", "b1.example.com", 9094, "SASL_SSL"),))
    doc = json.loads(secure.encode())
    assert (doc["host"], doc["port"]) == (None, -1)
    assert doc["endpoints"] == ["SASL_SSL://b1.example.com:9094"]
    assert z.BrokerRegistration.decode(1, secure.encode()).endpoints == secure.endpoints
    both = z.BrokerRegistration(1, (secure.endpoints[0], z.Endpoint("INTERNAL", "10.0.0.1", 9092, "PLAINTEXT")))
    assert (json.loads(both.encode())["host"], json.loads(both.encode())["port"]) == ("10.0.0.1", 9092)


# --- 4. the README's commands: `kafkalite cluster` with SASL_SSL and ACLs ------------------------------------

README_JAAS = ('listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule '
               'required username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.mark.cluster
@pytest.mark.skipif(shutil.which("openssl") is None, reason="the README makes its certificates with openssl")
def test_readme_security_commands_on_kafkalite_cluster(tmp_path, monkeypatch):
    """The README's "Security" walk-through, command by command: openssl certificates, `kafkalite cluster
    --security-protocol SASL_SSL` with the ACL authorizer, users, a topic and ACLs made over SASL_SSL as admin,
    alice producing and consuming with the console tools, bob refused with Kafka's errors and nothing written."""
    from tests.support.zookeeper import missing

    if missing():
        pytest.skip(f"kafkalite cluster needs ZooKeeper: {missing()}")
    monkeypatch.chdir(tmp_path)  # the README's commands use relative file names
    for cmd in (["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "365", "-subj", "/CN=my-ca",
                 "-keyout", "ca.key", "-out", "ca.pem"],
                ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=broker", "-keyout", "broker.key",
                 "-out", "broker.csr"],
                ["sh", "-c", "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.ext"],
                ["openssl", "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "365", "-extfile", "san.ext", "-out", "broker.pem"],
                ["sh", "-c", "cat broker.key broker.pem > broker-keystore.pem"]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    port, zk_port = consecutive_free_ports(3), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "cluster", "--brokers", "3", "--port",
                             str(port), "--zookeeper-port", str(zk_port), "--dir", "kl",
                             "--security-protocol", "SASL_SSL",
                             *[a for o in ("ssl.keystore.type=PEM", "ssl.keystore.location=broker-keystore.pem",
                                           "ssl.truststore.type=PEM", "ssl.truststore.location=ca.pem",
                                           "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                                           "sasl.mechanism.inter.broker.protocol=PLAIN", README_JAAS,
                                           "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                                           "super.users=User:admin") for a in ("--override", o)]],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines: list[str] = []
        while not lines or not lines[-1].startswith("bootstrap.servers="):
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "".join(lines)
            lines.append(line)
        assert "security.protocol=SASL_SSL\n" in lines
        bootstrap = lines[-1].strip().split("=", 1)[1]
        Path("admin.properties").write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.jaas.config=org.apache.kafka.common.security.plain."
            'PlainLoginModule required username="admin" password="admin-secret";\n'
            "ssl.truststore.type=PEM\nssl.truststore.location=ca.pem\n")
        for user in ("alice", "bob"):
            Path(f"{user}.properties").write_text(
                "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config=org.apache.kafka.common."
                f'security.scram.ScramLoginModule required username="{user}" password="{user}-secret";\n'
                "ssl.truststore.type=PEM\nssl.truststore.location=ca.pem\n")
        admin = ["--bootstrap-server", bootstrap, "--command-config", "admin.properties"]
        for user in ("alice", "bob"):
            cli("configs", *admin, "--alter", "--entity-type", "users", "--entity-name", user,
                "--add-config", f"SCRAM-SHA-512=[password={user}-secret]")
        cli("topics", *admin, "--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "3",
            "--config", "min.insync.replicas=2")
        cli("acls", *admin, "--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders")
        cli("acls", *admin, "--add", "--allow-principal", "User:alice", "--consumer", "--topic", "orders",
            "--group", "billing")
        described = cli("topics", *admin, "--describe", "--topic", "orders")
        assert described.count("Isr: ") == 3, described

        def console(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", *args, "--bootstrap-server",
                                   bootstrap], input=stdin, capture_output=True, text=True, timeout=60)

        r = console(["produce", "--producer.config", "alice.properties", "--topic", "orders"], "one\ntwo\nthree\n")
        assert r.returncode == 0, r.stdout + r.stderr
        r = console(["consume", "--consumer.config", "alice.properties", "--topic", "orders", "--group", "billing",
                     "--from-beginning", "--max-messages", "3"])
        assert r.returncode == 0 and r.stdout.split() == ["one", "two", "three"], r.stdout + r.stderr
        r = console(["produce", "--producer.config", "bob.properties", "--topic", "orders"], "evil\n")
        assert r.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in r.stdout + r.stderr, r.stdout + r.stderr
        r = console(["topics", "--command-config", "bob.properties", "--delete", "--topic", "orders"])
        assert r.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in r.stdout + r.stderr, r.stdout + r.stderr
        r = console(["topics", "--command-config", "bob.properties", "--list"])
        assert r.returncode == 0 and "orders" not in r.stdout, r.stdout
        r = console(["get-offsets", "--command-config", "alice.properties", "--topic", "orders"])
        assert sorted(r.stdout.split()) == ["orders:0:3", "orders:1:0", "orders:2:0"], r.stdout + r.stderr
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_kafkalite_cluster_refuses_per_broker_settings_in_override(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "cluster", "--dir", str(tmp_path / "kl"),
                        "--override", "listeners=SASL_SSL://127.0.0.1:9093", "--override", "num.partitions=3"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--override listeners would be the same for every broker" in r.stdout, r.stdout
    assert not (tmp_path / "kl").exists()
    from kafkalite.cli.cluster import broker_command, refused_overrides

    assert refused_overrides(["log.dirs=/d{id}", "advertised.listeners=SSL://h{id}:9093", "num.partitions=3"]) == []
    assert refused_overrides(["log.dirs=/d", "broker.id=1", "listeners=SSL://h:1"]) == ["broker.id", "listeners",
                                                                                        "log.dirs"]
    assert refused_overrides(["log.dirs=/d"], brokers=1) == []
    cmd = broker_command(2, 9093, "zk:2181/kl", tmp_path, ["ssl.keystore.location=b{id}.p12"], "SASL_SSL")
    settings = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--override"]
    assert settings[2:] == ["listeners=SASL_SSL://127.0.0.1:9093", f"log.dirs={tmp_path / 'broker-2'}",
                            "inter.broker.listener.name=SASL_SSL", "ssl.keystore.location=b2.p12"]
    cmd = broker_command(2, 9093, "zk:2181/kl", tmp_path, ["security.inter.broker.protocol=SASL_SSL"], "SASL_SSL")
    assert "inter.broker.listener.name=SASL_SSL" not in cmd
