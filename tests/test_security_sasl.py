"""SASL over SASL_PLAINTEXT with real brokers and real clients (confluent-kafka, kafka-python, aiokafka, kcat,
kafkajs): PLAIN users from the listener's JAAS text, SCRAM-SHA-256/512 users made with `kafkalite configs`;
refusals (wrong password, unknown user, a request before authentication, an oversized pre-auth frame) close
only that connection and write nothing; re-authentication (connections.max.reauth.ms); a fuzz of the exchange;
and a ZooKeeper cluster replicating over a SASL_PLAINTEXT inter-broker listener.

The broker of most tests has two listeners: SASL_PLAINTEXT first (what Metadata advertises, so clients stay on
it) and PLAINTEXT for `kafkalite configs` and the checks that nothing was written.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite.client import KafkaClient
from kafkalite.errors import InvalidConfigError, SaslAuthenticationError
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.protocol.codec import decode_response, encode_request
from kafkalite.security.sasl import JaasError, SaslClientExchange, SaslServerAuthenticator, parse_jaas
from kafkalite.security.scram import ScramCredential, credential_for
from kafkalite.security.transport import ClientSecurity, connect
from tests.support.brokers import BrokerProcess, free_port

JS_DIR = Path(__file__).parent / "js"
ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("bob", "bob-secret"),
         "SCRAM-SHA-512": ("carol", "carol-secret")}
MECHANISMS = list(USERS)


def sasl_props(port: int, admin_port: int | None = None, **extra: object) -> dict[str, object]:
    listeners = f"SASL_PLAINTEXT://127.0.0.1:{port}"
    if admin_port is not None:
        listeners += f",PLAINTEXT://127.0.0.1:{admin_port}"
    return {"listeners": listeners, "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": ADMIN_JAAS, **extra}


def configs_cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "configs", "--bootstrap-server", bootstrap,
                           *args], capture_output=True, text=True, timeout=60, env=os.environ.copy())


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class SaslBroker:
    def __init__(self, proc: BrokerProcess, admin_port: int) -> None:
        self.proc = proc
        self.bootstrap = proc.bootstrap
        self.port = proc.port
        self.admin = f"127.0.0.1:{admin_port}"

    def end_offset(self, topic: str) -> int:
        with KafkaClient(self.admin, timeout_s=10) as c:
            if c.metadata([topic])["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return 0  # the topic does not exist: nothing was written
            return c.list_offset(topic, 0, -1)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("sasl")
    port, admin_port = free_port(), free_port()
    proc = BrokerProcess(root / "data", sasl_props(port, admin_port), port=port).start()
    b = SaslBroker(proc, admin_port)
    try:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            user, password = USERS[mech]
            r = configs_cli(b.admin, "--alter", "--entity-type", "users", "--entity-name", user,
                            "--add-config", f"{mech}=[iterations=8192,password={password}]")
            assert r.returncode == 0, r.stdout + r.stderr
            assert f"Completed updating config for user {user}." in r.stdout
        yield b
    finally:
        rc = proc.stop()
        assert rc == 0, proc.output()
        assert "Unexpected error" not in proc.output(), proc.output()


def confluent_conf(b: SaslBroker, mech: str, password: str | None = None) -> dict[str, object]:
    user, good = USERS[mech]
    return {"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mech,
            "sasl.username": user, "sasl.password": good if password is None else password}


# --- the authenticator and JAAS text, without I/O ------------------------------------------------------------


def _login(auth: SaslServerAuthenticator, mech: str, user: str, password: str) -> bool:
    assert auth.handshake(1, mech).body["error_code"] == ErrorCode.NONE
    client = SaslClientExchange(mech, user, password)
    token: bytes | None = client.first()
    while token is not None:
        out = auth.authenticate(2, token)
        assert out.body is not None
        if out.body["error_code"] != ErrorCode.NONE:
            assert out.close and out.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
            return False
        token = client.step(out.body["auth_bytes"])
    return True


def test_authenticator_plain_and_scram_without_io():
    creds = {("bob", "SCRAM-SHA-256"): credential_for("SCRAM-SHA-256", "bob-secret"),
             ("carol", "SCRAM-SHA-512"): credential_for("SCRAM-SHA-512", "carol-secret")}

    def new() -> SaslServerAuthenticator:
        return SaslServerAuthenticator(MECHANISMS, {"alice": "alice-secret"}, lambda u, m: creds.get((u, m)))
    for mech, (user, password) in USERS.items():
        auth = new()
        assert _login(auth, mech, user, password) and auth.principal == f"User:{user}"
        assert not _login(new(), mech, user, password + "x")
        assert not _login(new(), mech, "mallory", password)
    refused = new().handshake(1, "GSSAPI")
    assert refused.close and refused.body["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert refused.body["mechanisms"] == MECHANISMS
    # SaslAuthenticate without a handshake: ILLEGAL_SASL_STATE
    assert new().authenticate(1, b"\0a\0b").body["error_code"] == ErrorCode.ILLEGAL_SASL_STATE


def test_scram_client_final_must_carry_the_server_nonce():
    """Only librdkafka's doubled client nonce is tolerated; a nonce without the server's part is refused."""
    cred = credential_for("SCRAM-SHA-256", "pw")
    for forged in (lambda c, s: c, lambda c, s: c + "x" + s, lambda c, s: s):
        auth = SaslServerAuthenticator(["SCRAM-SHA-256"], {}, lambda u, m: cred)
        auth.handshake(1, "SCRAM-SHA-256")
        first = auth.authenticate(1, b"n,,n=bob,r=clientnonce").body["auth_bytes"].decode()
        full = first.split(",")[0][2:]
        out = auth.authenticate(1, f"c=biws,r={forged('clientnonce', full)},p=AAAA".encode())
        assert out.close and out.body["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_authenticator_v0_raw_tokens_and_reauthentication_rules():
    now = [100.0]
    auth = SaslServerAuthenticator(["PLAIN", "SCRAM-SHA-256"], {"alice": "pw", "bob": "pw2"}, lambda u, m: None,
                                   reauth_ms=1000, clock=lambda: now[0])
    assert auth.handshake(0, "PLAIN").body["error_code"] == ErrorCode.NONE and auth.raw_tokens
    out = auth.raw_token(b"\0alice\0pw")
    assert out.token == b"" and auth.authenticated and not auth.raw_tokens
    assert not auth.expired()
    now[0] += 1.0
    assert auth.expired()
    # re-authentication: v1, same mechanism, same principal
    assert auth.handshake(0, "PLAIN").close
    assert auth.handshake(1, "SCRAM-SHA-256").close
    assert auth.handshake(1, "PLAIN").body["error_code"] == ErrorCode.NONE
    out = auth.authenticate(1, b"\0alice\0pw")
    assert out.body["error_code"] == ErrorCode.NONE and out.body["session_lifetime_ms"] == 1000
    assert not auth.expired()
    assert auth.handshake(1, "PLAIN").body["error_code"] == ErrorCode.NONE
    changed = auth.authenticate(1, b"\0bob\0pw2")
    assert changed.close and "principal" in changed.body["error_message"]


_FUZZ_CRED = credential_for("SCRAM-SHA-256", "pw")


@settings(max_examples=500, deadline=None)
@given(mech=st.sampled_from(MECHANISMS), version=st.integers(0, 2),
       steps=st.lists(st.tuples(st.sampled_from(["handshake", "junk-handshake", "authenticate", "raw"]),
                                st.one_of(st.binary(max_size=200),
                                          st.sampled_from([b"\0alice\0alice-secret", b"n,,n=bob,r=abc",
                                                           b"n,,n=bob,r=abc,x=1", b"c=biws,r=abc,p=AA=="]))),
                      max_size=6))
def test_authenticator_never_raises(mech, version, steps):
    """Any sequence of SASL requests gets an answer or a close, never an exception (sans-IO fuzz)."""
    auth = SaslServerAuthenticator(MECHANISMS, {"alice": "alice-secret"}, lambda u, m: _FUZZ_CRED, reauth_ms=10)
    for kind, data in steps:
        if kind == "handshake":
            out = auth.handshake(min(version, 1), mech)
        elif kind == "junk-handshake":
            out = auth.handshake(min(version, 1), data.decode("latin-1"))
        elif kind == "authenticate":
            out = auth.authenticate(version, data)
        elif auth.raw_tokens:
            out = auth.raw_token(data)
        else:
            continue
        assert out.close or out.body is not None or out.token is not None
        if out.close:
            break


def test_jaas_parsing():
    e = parse_jaas(ADMIN_JAAS)
    assert e.module.endswith("PlainLoginModule") and (e.username, e.password) == ("admin", "admin-secret")
    assert e.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}
    q = parse_jaas('org.apache.kafka.common.security.scram.ScramLoginModule required username=bob '
                   'password="p\\"w;x";')
    assert (q.username, q.password) == ("bob", 'p"w;x')
    for bad in ("", "PlainLoginModule", 'x required username="a"', 'x required a="b"; y required c="d";'):
        with pytest.raises(JaasError):
            parse_jaas(bad)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_jaas_parser_never_crashes(text):
    with contextlib.suppress(JaasError):
        parse_jaas(text)


def test_credential_text_is_kafkas_format():
    c = credential_for("SCRAM-SHA-256", "pw", 4096)
    text = c.to_text()
    assert text.startswith("salt=") and text.endswith(",iterations=4096")
    assert [p.split("=", 1)[0] for p in text.split(",")] == ["salt", "stored_key", "server_key", "iterations"]
    assert ScramCredential.from_text(text) == c


def test_config_refuses_unsupported_mechanisms_by_name(tmp_path):
    from kafkalite.broker.config import BrokerConfig

    port = free_port()
    for mech in ("GSSAPI", "OAUTHBEARER"):
        with pytest.raises(InvalidConfigError, match=f"SASL mechanism {mech} is not supported"):
            BrokerConfig.load(None, {**sasl_props(port), "sasl.enabled.mechanisms": mech, "log.dirs": str(tmp_path)})
    # Kafka's default (GSSAPI) on a SASL listener is refused too, naming the key
    props = {k: v for k, v in sasl_props(port).items() if k != "sasl.enabled.mechanisms"}
    with pytest.raises(InvalidConfigError, match=r"sasl\.enabled\.mechanisms"):
        BrokerConfig.load(None, {**props, "log.dirs": str(tmp_path)})
    cfg = BrokerConfig.load(None, {**sasl_props(port), "log.dirs": str(tmp_path)})
    assert not [w for w in cfg.warnings() if "listener.name" in w]
    assert cfg.sasl_jaas_config("SASL_PLAINTEXT", "PLAIN") == ADMIN_JAAS


def test_plain_without_jaas_users_stops_the_broker(tmp_path):
    from kafkalite.broker.config import BrokerConfig
    from kafkalite.broker.server import Broker
    from kafkalite.errors import KafkaliteError

    props = {k: v for k, v in sasl_props(free_port()).items() if "jaas" not in k}
    with pytest.raises(KafkaliteError, match=r"listener\.name\.sasl_plaintext\.plain\.sasl\.jaas\.config"):
        Broker(BrokerConfig.load(None, {**props, "log.dirs": str(tmp_path)}))
    bad = {**props, "sasl.jaas.config": 'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;'}
    with pytest.raises(KafkaliteError, match="Krb5LoginModule is not supported for PLAIN"):
        Broker(BrokerConfig.load(None, {**bad, "log.dirs": str(tmp_path)}))


# --- real clients --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mech", MECHANISMS)
def test_confluent_kafka_produce_consume(sasl_broker, mech):
    from confluent_kafka import Consumer, Producer

    topic = topic_name("ck")
    p = Producer(confluent_conf(sasl_broker, mech))
    for i in range(10):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**confluent_conf(sasl_broker, mech), "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mech", MECHANISMS)
def test_kafka_python_produce_consume(sasl_broker, mech):
    from kafka import KafkaConsumer, KafkaProducer

    user, password = USERS[mech]
    conf = {"bootstrap_servers": sasl_broker.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mech, "sasl_plain_username": user, "sasl_plain_password": password}
    topic = topic_name("kp")
    p = KafkaProducer(**conf)
    for i in range(5):
        p.send(topic, f"v{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20000, **conf)
    got = []
    for m in c:
        got.append(m.value)
        if len(got) == 5:
            break
    c.close()
    assert got == [f"v{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mech", MECHANISMS)
def test_aiokafka_produce_consume(sasl_broker, mech):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    user, password = USERS[mech]
    conf = {"bootstrap_servers": sasl_broker.bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mech, "sasl_plain_username": user, "sasl_plain_password": password}
    topic = topic_name("aio")

    async def main() -> list[bytes]:
        p = AIOKafkaProducer(**conf)
        await p.start()
        try:
            for i in range(5):
                await p.send_and_wait(topic, f"v{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await c.start()
        try:
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while len(out) < 5:
                    batch = await c.getmany(timeout_ms=500)
                    out += [m.value for ms in batch.values() for m in ms]
            return out
        finally:
            await c.stop()
    assert asyncio.run(main()) == [f"v{i}".encode() for i in range(5)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/run installs it)")
@pytest.mark.parametrize("mech", MECHANISMS)
def test_kcat_produce_consume(sasl_broker, mech):
    user, password = USERS[mech]
    topic = topic_name("kcat")
    common = ["kcat", "-b", sasl_broker.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT", "-X",
              f"sasl.mechanisms={mech}", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    r = subprocess.run([*common, "-P", "-t", topic], input="a\nb\nc\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*common, "-C", "-t", topic, "-o", "beginning", "-e", "-c", "3"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["a", "b", "c"]


@pytest.fixture(scope="module")
def kafkajs() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node/npm not on PATH: the kafkajs tests need Node.js 18+")
    if not (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=JS_DIR,
                           capture_output=True, text=True, timeout=180)
        if r.returncode != 0:
            pytest.skip(f"npm ci in tests/js failed ({r.returncode}): {r.stderr[-1000:]}")
    return Path(node)


@pytest.mark.parametrize("mech", MECHANISMS)
def test_kafkajs_produce_consume(sasl_broker, kafkajs, mech):
    user, password = USERS[mech]
    env = {**os.environ, "KAFKALITE_JS_SASL": json.dumps({"mechanism": mech.lower(), "username": user,
                                                           "password": password})}
    r = subprocess.run([str(kafkajs), str(JS_DIR / "client.js"), sasl_broker.bootstrap, "produce-consume",
                        topic_name("js")], cwd=JS_DIR, capture_output=True, text=True, timeout=90, env=env)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and lines, r.stdout + r.stderr
    assert json.loads(lines[-1])["values"] == [f"v{i}" for i in range(50)]


def test_kafkalite_client_and_configs_describe(sasl_broker):
    """kafkalite's own client logs in (security/transport.py); `configs --describe` lists the SCRAM users."""
    for mech, (user, password) in USERS.items():
        security = ClientSecurity.from_client_props({
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mech,
            "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                f'username="{user}" password="{password}";'})
        with KafkaClient(sasl_broker.bootstrap, timeout_s=10, security=security) as c:
            assert c.metadata([])["brokers"]
    r = configs_cli(sasl_broker.admin, "--describe", "--entity-type", "users")
    assert r.returncode == 0, r.stderr
    assert "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192" in r.stdout
    assert "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=8192" in r.stdout
    r = configs_cli(sasl_broker.admin, "--alter", "--entity-type", "users", "--entity-name", "bob",
                    "--add-config", "producer_byte_rate=1024")
    assert r.returncode == 2 and "producer_byte_rate is not supported" in r.stderr


def test_confluent_admin_alters_and_describes_scram_users(sasl_broker):
    """librdkafka's AlterUserScramCredentials / DescribeUserScramCredentials (APIs 51 and 50) against ours:
    a user made this way logs in; a deleted credential no longer does."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(confluent_conf(sasl_broker, "SCRAM-SHA-256"))
    sha256, sha512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("erin", ScramCredentialInfo(sha256, 10000), b"erin-secret"),
        UserScramCredentialUpsertion("erin", ScramCredentialInfo(sha512, 4096), b"erin-secret"),
        UserScramCredentialUpsertion("frank", ScramCredentialInfo(sha256, 100), b"frank-secret"),  # too few
    ])
    futures["erin"].result(10)
    with pytest.raises(Exception, match=r"UNACCEPTABLE_CREDENTIAL|Iterations"):
        futures["frank"].result(10)
    described = admin.describe_user_scram_credentials(["erin"])["erin"].result(10)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == \
        sorted([(sha256, 10000), (sha512, 4096)])
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        connect("127.0.0.1", sasl_broker.port, ClientSecurity("SASL_PLAINTEXT", None, mech, "erin", "erin-secret"),
                10).close()
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("erin", sha512)])["erin"].result(10)
    with pytest.raises(SaslAuthenticationError):
        connect("127.0.0.1", sasl_broker.port,
                ClientSecurity("SASL_PLAINTEXT", None, "SCRAM-SHA-512", "erin", "erin-secret"), 10)
    with pytest.raises(Exception, match=r"RESOURCE_NOT_FOUND|does not exist"):
        admin.alter_user_scram_credentials([UserScramCredentialDeletion("nobody", sha512)])["nobody"].result(10)


def test_describe_configs_hides_jaas_passwords(sasl_broker):
    """sasl.jaas.config is a PASSWORD config in Kafka: DescribeConfigs answers null, is_sensitive=true."""
    with KafkaClient(sasl_broker.admin, timeout_s=10) as c:
        entries = {e["name"]: e for e in c.describe_configs(4, "")}
    jaas = entries["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas["value"] is None and jaas["is_sensitive"]
    assert not any("admin-secret" in str(e.get("value")) for e in entries.values())
    r = configs_cli(sasl_broker.admin, "--describe", "--entity-type", "brokers", "--all")
    assert r.returncode == 0 and "admin-secret" not in r.stdout and "sasl.jaas.config=null" in r.stdout


def test_spark_broker_mode_options(sasl_broker):
    """kafka.security.protocol / kafka.sasl.* of Spark's broker mode reach the backend's client (no Spark
    session needed: the backend's Cluster is what the data source's readers and writers use)."""
    from kafkalite.spark.broker_cluster import Cluster as SparkCluster
    from kafkalite.spark.broker_settings import BrokerSettings
    from kafkalite.spark.errors import OptionError

    user, password = USERS["SCRAM-SHA-512"]
    settings = BrokerSettings.parse(sasl_broker.bootstrap, {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
                            f'password="{password}";'})
    topic = topic_name("spark")
    with KafkaClient(sasl_broker.admin, timeout_s=10) as admin:
        admin.create_topic(topic, 2, 1)
    cluster = SparkCluster(settings)
    try:
        assert sorted(cluster.metadata([topic])[topic].leaders) == [0, 1]
    finally:
        cluster.close()
    with pytest.raises(OptionError, match="GSSAPI is not supported"):
        BrokerSettings.parse("h:1", {"security.protocol": "SASL_PLAINTEXT"})


# --- refusals ------------------------------------------------------------------------------------------------


def _frame(api: int, version: int, body: dict, cid: int = 1) -> bytes:
    return encode_request(api, version, cid, "sasl-test", body)


def _read(sock: socket.socket) -> bytes | None:
    """One response frame, or None when the broker closed the connection."""
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    size = struct.unpack(">i", head)[0]
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _closed(sock: socket.socket, timeout_s: float = 10) -> bool:
    sock.settimeout(timeout_s)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _logged_in(b: SaslBroker, mech: str = "PLAIN") -> socket.socket:
    user, password = USERS[mech]
    return connect("127.0.0.1", b.port, ClientSecurity("SASL_PLAINTEXT", None, mech, user, password), 10)


def _metadata_works(sock: socket.socket) -> bool:
    sock.sendall(_frame(ApiKey.METADATA, 1, {"topics": []}, cid=7))
    data = _read(sock)
    return data is not None and decode_response(ApiKey.METADATA, 1, data)[0] == 7


@pytest.mark.parametrize("mech", MECHANISMS)
@pytest.mark.parametrize("who", ["wrong password", "unknown user"])
def test_failed_login_is_refused_and_writes_nothing(sasl_broker, mech, who):
    from confluent_kafka import KafkaError, Producer

    bystander = _logged_in(sasl_broker, "SCRAM-SHA-256")
    user, password = USERS[mech]
    if who == "unknown user":
        user = "mallory"
    else:
        password += "-wrong"
    with pytest.raises(SaslAuthenticationError, match="Authentication failed"):
        connect("127.0.0.1", sasl_broker.port, ClientSecurity("SASL_PLAINTEXT", None, mech, user, password), 10)
    topic = topic_name("refused")
    errors: list[int] = []
    p = Producer({**confluent_conf(sasl_broker, mech), "sasl.username": user, "sasl.password": password,
                  "message.timeout.ms": 3000, "error_cb": lambda e: errors.append(e.code())})
    p.produce(topic, b"must not be written")
    deadline = time.monotonic() + 15
    while KafkaError._AUTHENTICATION not in errors and time.monotonic() < deadline:
        p.poll(0.1)
    p.purge()
    p.flush(1)
    assert KafkaError._AUTHENTICATION in errors
    assert sasl_broker.end_offset(topic) == 0
    assert _metadata_works(bystander)
    bystander.close()


def test_requests_before_authentication_close_the_connection(sasl_broker):
    bystander = _logged_in(sasl_broker)
    topic = topic_name("preauth")
    # ApiVersions is served before authentication
    s = socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10)
    s.sendall(_frame(ApiKey.API_VERSIONS, 0, {}))
    versions = decode_response(ApiKey.API_VERSIONS, 0, _read(s))[1]
    assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= {k["api_key"] for k in versions["api_keys"]}
    # anything else closes it: a produce writes nothing
    for api, version, body in [
        (ApiKey.METADATA, 1, {"topics": []}),
        (ApiKey.PRODUCE, 3, {"transactional_id": None, "acks": -1, "timeout_ms": 1000,
                             "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": b""}]}]}),
        (ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"}),  # without a handshake
    ]:
        s = socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10)
        s.sendall(_frame(api, version, body))
        data = _read(s)
        if api == ApiKey.SASL_AUTHENTICATE:  # answered ILLEGAL_SASL_STATE, then closed
            assert data is not None
            assert decode_response(api, version, data)[1]["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
            assert _closed(s)
        else:
            assert data is None
        s.close()
    assert sasl_broker.end_offset(topic) == 0
    assert _metadata_works(bystander)
    bystander.close()
    assert "Metadata request before SASL authentication" in sasl_broker.proc.output() or \
        "METADATA request before SASL authentication" in sasl_broker.proc.output()


def test_oversized_pre_auth_frame_closes_the_connection(sasl_broker):
    bystander = _logged_in(sasl_broker)
    s = socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10)
    s.sendall(struct.pack(">i", 524288 + 1) + b"\0" * 1024)  # sasl.server.max.receive.size is 524288
    assert _closed(s)
    s.close()
    assert "sasl.server.max.receive.size" in sasl_broker.proc.output()
    # the same size is fine once authenticated (socket.request.max.bytes applies)
    s = _logged_in(sasl_broker)
    big = _frame(ApiKey.METADATA, 1, {"topics": [{"name": "x" * 30000}] * 20})
    assert len(big) > 524288
    s.sendall(big)
    assert _read(s) is not None
    s.close()
    assert _metadata_works(bystander)
    bystander.close()


def test_sasl_handshake_v0_raw_tokens(sasl_broker):
    """Old clients: SaslHandshake v0, then raw size-prefixed tokens without a Kafka header."""
    s = socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10)
    s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))
    assert decode_response(ApiKey.SASL_HANDSHAKE, 0, _read(s))[1]["error_code"] == ErrorCode.NONE
    token = b"\0alice\0alice-secret"
    s.sendall(struct.pack(">i", len(token)) + token)
    assert _read(s) == b""
    assert _metadata_works(s)
    s.close()


# --- fuzz ----------------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(mech=st.sampled_from(MECHANISMS), version=st.integers(0, 2),
       tokens=st.lists(st.binary(max_size=300), min_size=1, max_size=3), raw=st.booleans(),
       flip=st.integers(0, 400))
def test_fuzz_sasl_exchange_only_closes_that_connection(sasl_broker, mech, version, tokens, raw, flip):
    """Random and mutated tokens (a valid first token with one byte flipped, or random bytes), in SaslAuthenticate
    requests or as raw frames: the broker answers or closes within the bound, and keeps serving others."""
    user, password = USERS[mech]
    first = bytearray(SaslClientExchange(mech, user, password).first())
    first[flip % len(first)] ^= 0x5A
    s = socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=5)
    try:
        s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mech}))
        assert _read(s) is not None
        for i, token in enumerate([bytes(first), *tokens]):
            if raw:
                s.sendall(struct.pack(">i", len(token)) + token)
            else:
                s.sendall(_frame(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}, cid=i + 2))
            try:
                data = _read(s)
            except TimeoutError:
                pytest.fail("the broker neither answered nor closed within 5 s")
            if data is None:
                break
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    ok = _logged_in(sasl_broker, "SCRAM-SHA-512")
    assert _metadata_works(ok)
    ok.close()


def test_single_broker_keeps_scram_users_salted_across_restarts(tmp_path):
    """No ZooKeeper: the credentials live in the data dir's kafkalite-metadata.json (the /config/users znode,
    salted, never the password) and log in after a restart."""
    port, admin_port = free_port(), free_port()
    props = sasl_props(port, admin_port)
    b = BrokerProcess(tmp_path / "data", props, port=port).start()
    try:
        r = configs_cli(f"127.0.0.1:{admin_port}", "--alter", "--entity-type", "users", "--entity-name", "gina",
                        "--add-config", "SCRAM-SHA-256=[password=gina-secret]")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        assert b.stop() == 0, b.output()
    raw = (tmp_path / "data" / "kafkalite-metadata.json").read_text()
    assert "gina-secret" not in raw
    node = json.loads(raw)["znodes"]["/config/users/gina"]
    stored = json.loads(base64.b64decode(node["data"]))
    assert stored["version"] == 1 and stored["config"]["SCRAM-SHA-256"].startswith("salt=")
    b = BrokerProcess(tmp_path / "data", props, port=port).start()
    try:
        connect("127.0.0.1", port, ClientSecurity("SASL_PLAINTEXT", None, "SCRAM-SHA-256", "gina", "gina-secret"),
                10).close()
    finally:
        assert b.stop() == 0, b.output()


# --- re-authentication ---------------------------------------------------------------------------------------


def test_reauthentication(tmp_path):
    from confluent_kafka import Producer

    port = free_port()
    b = BrokerProcess(tmp_path / "data", sasl_props(port, **{"connections.max.reauth.ms": 1500}), port=port).start()
    try:
        # the lifetime is announced in SaslAuthenticate v1+
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
        _read(s)
        s.sendall(_frame(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"}, cid=2))
        answer = decode_response(ApiKey.SASL_AUTHENTICATE, 1, _read(s))[1]
        assert answer["error_code"] == ErrorCode.NONE and answer["session_lifetime_ms"] == 1500
        assert _metadata_works(s)
        # re-authenticated before expiry: still served after the first lifetime ended
        time.sleep(1.0)
        s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, cid=3))
        _read(s)
        s.sendall(_frame(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0alice\0alice-secret"}, cid=4))
        assert decode_response(ApiKey.SASL_AUTHENTICATE, 1, _read(s))[1]["error_code"] == ErrorCode.NONE
        time.sleep(0.8)
        assert _metadata_works(s)
        # not re-authenticated: the next request after the lifetime closes the connection
        time.sleep(1.6)
        s.sendall(_frame(ApiKey.METADATA, 1, {"topics": []}, cid=9))
        assert _read(s) is None
        s.close()
        assert "expired (connections.max.reauth.ms)" in b.output()
        # a real client keeps producing across several lifetimes (librdkafka re-authenticates in time)
        p = Producer({"bootstrap.servers": b.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                      "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
        topic = topic_name("reauth")
        for i in range(4):
            p.produce(topic, f"v{i}".encode())
            assert p.flush(20) == 0
            time.sleep(1.0)
    finally:
        assert b.stop() == 0, b.output()


# --- a ZooKeeper cluster --------------------------------------------------------------------------------------


@pytest.mark.cluster
def test_cluster_replicates_over_sasl_and_scram_users_reach_every_broker(tmp_path, zk_connect):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.cluster import Cluster

    ports: dict[int, tuple[int, int]] = {}  # broker -> (its SASL port, its PLAINTEXT port for the tools)

    def props(bid: int, port: int) -> dict[str, object]:
        ports[bid] = (port, free_port())
        return sasl_props(*ports[bid])

    c = Cluster(tmp_path, zk_connect, per_broker=props).start()
    try:
        r = configs_cli(f"127.0.0.1:{ports[1][1]}", "--alter", "--entity-type", "users", "--entity-name", "dave",
                        "--add-config", "SCRAM-SHA-512=[password=dave-secret]")
        assert r.returncode == 0, r.stdout + r.stderr
        # Kafka's layout in ZooKeeper: the salted credential and a change notification naming the user
        stored = c.zk_json("/config/users/dave")
        assert stored["version"] == 1 and stored["config"]["SCRAM-SHA-512"].startswith("salt=")
        assert "dave-secret" not in json.dumps(stored)
        changes = [c.zk_json(f"/config/changes/{n}") for n in c.zk().get_children("/config/changes")]
        assert {"version": 2, "entity_path": "users/dave"} in changes
        # the user created through broker 1 logs in on broker 3 (a change notification, no restart)
        deadline = time.monotonic() + 15
        while True:
            try:
                connect("127.0.0.1", ports[3][0],
                        ClientSecurity("SASL_PLAINTEXT", None, "SCRAM-SHA-512", "dave", "dave-secret"), 5).close()
                break
            except SaslAuthenticationError:
                assert time.monotonic() < deadline, "broker 3 never saw the new user"
                time.sleep(0.2)
        conf = {"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p, _ in ports.values()),
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "dave", "sasl.password": "dave-secret"}
        topic = topic_name("repl")
        admin_client = AdminClient(conf)
        admin_client.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        p = Producer({**conf, "acks": "all"})
        for i in range(20):
            p.produce(topic, f"v{i}".encode())
        assert p.flush(30) == 0
        login = ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", *USERS["PLAIN"])
        with KafkaClient(conf["bootstrap.servers"], timeout_s=10, security=login) as client:
            deadline = time.monotonic() + 20
            while True:
                part = client.metadata([topic])["topics"][0]["partitions"][0]
                if sorted(part["isr_nodes"]) == [1, 2, 3]:
                    break
                assert time.monotonic() < deadline, part
                time.sleep(0.2)
            assert client.list_offset(topic, 0, -1) == 20
    finally:
        c.stop()


def test_a_client_login_never_shows_its_password():
    """ClientSecurity ends up in settings objects (controller, fetchers, Spark options) that may be logged or
    appear in a traceback: the SASL password must not be in its repr."""
    login = ClientSecurity("SASL_SSL", None, "SCRAM-SHA-512", "alice", "alice-secret")
    assert "alice-secret" not in repr(login) and "alice" in repr(login)
    assert login.sasl_password == "alice-secret"


def test_perf_tools_log_in_with_their_producer_props_and_consumer_config(sasl_broker, tmp_path):
    """kafka-producer-perf-test.sh takes security settings in --producer-props, kafka-consumer-perf-test.sh in
    --consumer.config: both log in with SCRAM here; a wrong password is refused without a record written."""
    topic = topic_name("perf")
    user, password = USERS["SCRAM-SHA-512"]
    login = ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-512",
             f"sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
             f'username="{user}" password="{password}";']
    kl = [sys.executable, "-m", "kafkalite.cli.main"]
    r = subprocess.run([*kl, "producer-perf-test", "--topic", topic, "--num-records", "2000", "--record-size", "64",
                        "--throughput", "-1", "--producer-props", f"bootstrap.servers={sasl_broker.bootstrap}",
                        "acks=all", *login], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("2000 records sent"), r.stdout + r.stderr
    assert sasl_broker.end_offset(topic) == 2000
    config = tmp_path / "consumer.properties"
    config.write_text("\n".join(login) + "\n")
    r = subprocess.run([*kl, "consumer-perf-test", "--bootstrap-server", sasl_broker.bootstrap, "--topic", topic,
                        "--messages", "2000", "--consumer.config", str(config), "--hide-header"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and ", 2000, " in r.stdout, r.stdout + r.stderr
    wrong = [*login[:2], login[2].replace(password, "not-the-password")]
    r = subprocess.run([*kl, "producer-perf-test", "--topic", topic, "--num-records", "10", "--record-size", "64",
                        "--throughput", "-1", "--bootstrap-server", sasl_broker.bootstrap, "--producer-props", *wrong],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Authentication failed" in r.stderr and "records sent" not in r.stdout, r.stderr
    assert sasl_broker.end_offset(topic) == 2000
