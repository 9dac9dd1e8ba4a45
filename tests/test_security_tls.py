"""TLS as Kafka users configure it: SSL listeners with Kafka's ssl.* names (PKCS12 and PEM keystores, PEM
and PKCS12 truststores, per-listener overrides), real clients over server-authenticated and mutual TLS, the
refusals (no, expired or untrusted client certificate, a plaintext client, an expired broker certificate)
each closing only its own connection with nothing written, one address per listener in Metadata, the CLI
with --command-config, and a ZooKeeper cluster replicating over an SSL inter-broker listener.

One broker process serves the single-broker tests, with four listeners: PLAINTEXT, SSL (server auth), MTLS
(ssl.client.auth=required, inline PEM keystore) and EXPIRED (an expired broker certificate)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.server import _handshake, listener_tls_context
from kafkalite.config import registry
from kafkalite.errors import InvalidConfigError
from kafkalite.security.tls import TLS13_SUITES
from kafkalite.security.transport import ClientSecurity, connect, open_connection
from tests.support.brokers import BrokerProcess, free_port
from tests.support.certs import PASSWORD

# SASL_SSL listeners authenticate with SASL (PLAIN users of a JAAS entry, as Kafka writes it)
JAAS_FOR_SASL_SSL = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                     'password="admin-secret" user_admin="admin-secret";')

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

JS_DIR = Path(__file__).parent / "js"


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def tls_broker(pki, tmp_path_factory):
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "MTLS", "EXPIRED")}
    props = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,EXPIRED:SSL",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12, "ssl.keystore.password": PASSWORD,
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": pki.ca_p12, "ssl.truststore.password": PASSWORD,
        # MTLS: client certificates required; the keystore inline as PEM with an encrypted key
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.keystore.type": "PEM",
        "listener.name.mtls.ssl.keystore.location": "",
        "listener.name.mtls.ssl.keystore.certificate.chain": pki.broker.cert.read_text(),
        "listener.name.mtls.ssl.keystore.key": pki.broker.key_encrypted.read_text(),
        "listener.name.mtls.ssl.key.password": PASSWORD,
        "listener.name.expired.ssl.keystore.location": pki.expired_broker.p12,
        "num.partitions": 1,
    }
    b = BrokerProcess(tmp_path_factory.mktemp("tls") / "data", props, port=ports["PLAINTEXT"]).start()
    b.ports = ports  # type: ignore[attr-defined]
    yield b
    rc = b.stop()
    assert rc == 0, b.output()


def ck_conf(broker, listener: str, pki, identity=None, **extra) -> dict:
    """confluent-kafka (librdkafka) settings for one listener; `identity` a client certificate (CertFiles)."""
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}"}
    if listener != "PLAINTEXT":
        conf.update({"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)})
    if identity is not None:
        conf.update({"ssl.certificate.location": str(identity.cert), "ssl.key.location": str(identity.key)})
    return {**conf, **extra}


def create_topic(broker) -> str:
    name = topic_name("tls")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=15)
    return name


def ck_consume(conf: dict, topic: str, n: int, timeout_s: float = 20) -> list[bytes]:
    c = Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m.value())
    finally:
        c.close()
    return out


def ck_produce(conf: dict, topic: str, values: list[bytes]) -> None:
    p = Producer({**conf, "linger.ms": 5, "acks": "all"})
    errors: list = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(20) == 0 and errors == []


# --- real clients ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("listener,identity", [("SSL", None), ("MTLS", "client")], ids=["server-auth", "mutual"])
def test_confluent_kafka_over_tls(tls_broker, pki, listener, identity):
    conf = ck_conf(tls_broker, listener, pki, getattr(pki, identity) if identity else None)
    topic = create_topic(tls_broker)
    values = [f"value-{i}-".encode() * 50 for i in range(2000)]  # ~1.5 MB: several fetches through TLS
    ck_produce(conf, topic, values)
    assert ck_consume(conf, topic, len(values)) == values
    assert ck_consume(ck_conf(tls_broker, "PLAINTEXT", pki), topic, len(values)) == values


def test_kafka_python_mutual_tls(tls_broker, pki):
    kafka = pytest.importorskip("kafka")
    common = {"bootstrap_servers": f"127.0.0.1:{tls_broker.ports['MTLS']}", "security_protocol": "SSL",
              "ssl_cafile": str(pki.ca_pem), "ssl_certfile": str(pki.client.cert), "ssl_keyfile": str(pki.client.key)}
    topic = create_topic(tls_broker)
    producer = kafka.KafkaProducer(acks="all", **common)
    for i in range(100):
        producer.send(topic, f"kp-{i}".encode())
    producer.flush(20)
    producer.close()
    consumer = kafka.KafkaConsumer(consumer_timeout_ms=5000, **common)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [m.value for m in consumer]
    consumer.close()
    assert got == [f"kp-{i}".encode() for i in range(100)]


def test_aiokafka_mutual_tls(tls_broker, pki):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    topic = create_topic(tls_broker)

    async def main() -> list[bytes]:
        ctx = create_ssl_context(cafile=str(pki.ca_pem), certfile=str(pki.client.cert), keyfile=str(pki.client.key))
        common = {"bootstrap_servers": f"127.0.0.1:{tls_broker.ports['MTLS']}", "security_protocol": "SSL",
                  "ssl_context": ctx}
        producer = aiokafka.AIOKafkaProducer(acks="all", **common)
        await producer.start()
        try:
            for i in range(100):
                await producer.send(topic, f"ai-{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            out: list[bytes] = []
            while len(out) < 100:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                out += [m.value for ms in batch.values() for m in ms]
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(main()) == [f"ai-{i}".encode() for i in range(100)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/run installs it)")
def test_kcat_mutual_tls(tls_broker, pki):
    topic = create_topic(tls_broker)
    tls = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki.ca_pem}",
           "-X", f"ssl.certificate.location={pki.client.cert}", "-X", f"ssl.key.location={pki.client.key}"]
    bootstrap = f"127.0.0.1:{tls_broker.ports['MTLS']}"
    lines = "".join(f"k{i}:v{i}\n" for i in range(50))
    r = subprocess.run(["kcat", "-b", bootstrap, *tls, "-P", "-t", topic, "-K:"], input=lines.encode(),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    r = subprocess.run(["kcat", "-b", bootstrap, *tls, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
                        "-f", "%k=%s\n"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == [f"k{i}=v{i}" for i in range(50)]


def test_kafkajs_over_tls(tls_broker, pki):
    node = shutil.which("node")  # kafkajs from tests/js/package-lock.json, installed on first use
    if node is None or not (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        r = subprocess.run([shutil.which("npm") or "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
                           cwd=JS_DIR, capture_output=True, text=True, timeout=180) if node else None
        if r is None or r.returncode != 0:
            pytest.skip("node or tests/js/node_modules (npm ci) not available")
    mutual = {"ca": str(pki.ca_pem), "cert": str(pki.client.cert), "key": str(pki.client.key)}
    for listener, files in (("SSL", {"ca": str(pki.ca_pem)}), ("MTLS", mutual)):
        r = subprocess.run([str(node), str(JS_DIR / "client.js"), f"127.0.0.1:{tls_broker.ports[listener]}",
                            "produce-consume", topic_name("js-tls")], cwd=JS_DIR, capture_output=True, text=True,
                           timeout=90, env={**os.environ, "KAFKALITE_JS_SSL": json.dumps(files)})
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        assert r.returncode == 0 and lines, f"{listener}: {r.stdout}\n{r.stderr}"
        assert json.loads(lines[-1])["values"] == [f"v{i}" for i in range(50)]


def test_each_listener_advertises_its_own_address(tls_broker, pki):
    """Metadata, FindCoordinator: the endpoint of the listener the request arrived on (Kafka's rule)."""
    for listener in ("PLAINTEXT", "SSL", "MTLS"):
        identity = pki.client if listener == "MTLS" else None
        md = AdminClient(ck_conf(tls_broker, listener, pki, identity)).list_topics(timeout=15)
        assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {1: ("127.0.0.1", tls_broker.ports[listener])}
    kafka = pytest.importorskip("kafka")
    client = kafka.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{tls_broker.ports['SSL']}", security_protocol="SSL",
                                    ssl_cafile=str(pki.ca_pem))
    try:
        nodes = client.describe_cluster()["brokers"]
        assert [(n["host"], n["port"]) for n in nodes] == [("127.0.0.1", tls_broker.ports["SSL"])]
    finally:
        client.close()


# --- refusals ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["no-client-cert", "expired-client-cert", "untrusted-client-cert",
                                  "plaintext-client", "expired-broker-cert"])
def test_refused_connections_write_nothing_and_spare_the_others(tls_broker, pki, case):
    topic = create_topic(tls_broker)
    log_before = len(tls_broker.log_path.read_bytes())
    good = Producer({**ck_conf(tls_broker, "MTLS", pki, pki.client), "linger.ms": 0, "acks": "all"})
    errors: list = []
    good.produce(topic, b"before", on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert good.flush(20) == 0 and errors == []
    bad = {
        "no-client-cert": ck_conf(tls_broker, "MTLS", pki),
        "expired-client-cert": ck_conf(tls_broker, "MTLS", pki, pki.expired_client),
        "untrusted-client-cert": ck_conf(tls_broker, "MTLS", pki, pki.untrusted_client),
        "plaintext-client": {"bootstrap.servers": f"127.0.0.1:{tls_broker.ports['MTLS']}"},
        "expired-broker-cert": ck_conf(tls_broker, "EXPIRED", pki, pki.client),
    }[case]
    refused: list = []
    p = Producer({**bad, "message.timeout.ms": 3000, "linger.ms": 0})
    p.produce(topic, b"refused", on_delivery=lambda err, _m: refused.append(err))
    p.flush(15)
    assert len(refused) == 1 and refused[0] is not None, refused
    # the connection made before is unaffected, and nothing of the refused client was written
    good.produce(topic, b"after", on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert good.flush(20) == 0 and errors == []
    assert ck_consume(ck_conf(tls_broker, "PLAINTEXT", pki), topic, 3, timeout_s=3) == [b"before", b"after"]
    log = tls_broker.log_path.read_bytes()[log_before:].decode(errors="replace")
    reason = {"no-client-cert": "PEER_DID_NOT_RETURN_A_CERTIFICATE",
              "expired-client-cert": "client certificate refused: certificate has expired",
              "untrusted-client-cert": "self-signed certificate in certificate chain", "plaintext-client": "",
              "expired-broker-cert": "CERTIFICATE"}[case]
    failures = [line for line in log.splitlines() if "TLS handshake with ('127.0.0.1'" in line]
    assert failures and all("failed, closing the connection" in f for f in failures), log
    assert any(reason in f for f in failures), failures


# --- the principal, the client side of transport.py ------------------------------------------------------


def test_client_certificate_gives_the_principal(pki, tmp_path):
    cfg = BrokerConfig.load(None, {"listeners": "SSL://127.0.0.1:0", "log.dirs": tmp_path, "ssl.keystore.type": "PEM",
                                   "ssl.keystore.certificate.chain": pki.broker.cert.read_text(),
                                   "ssl.keystore.key": pki.broker.key.read_text(), "ssl.truststore.type": "PEM",
                                   "ssl.truststore.location": pki.ca_pem, "ssl.client.auth": "requested"})
    ctx = listener_tls_context(cfg, "SSL")
    alice = pki.identity("alice")

    async def main() -> list:
        seen: list = []

        async def on_connection(reader, writer):
            seen.append(await _handshake(writer, ctx, writer.get_extra_info("peername"), "SSL"))
            if seen[-1] is not False:
                writer.write(b"x")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        base = {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem)}
        with_p12 = ClientSecurity.from_client_props({**base, "ssl.keystore.type": "PKCS12",
                                                     "ssl.keystore.location": str(pki.client.p12),
                                                     "ssl.keystore.password": PASSWORD})
        r, w = await open_connection("127.0.0.1", port, with_p12)
        assert await r.readexactly(1) == b"x"
        w.close()
        rdkafka_names = ClientSecurity.from_client_props({
            "security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem),
            "ssl.certificate.location": str(alice.cert), "ssl.key.location": str(alice.key)})
        sock = await asyncio.to_thread(connect, "127.0.0.1", port, rdkafka_names, 10)
        assert await asyncio.to_thread(sock.recv, 1) == b"x"
        sock.close()
        r, w = await open_connection("127.0.0.1", port, ClientSecurity.from_client_props(base))  # no certificate
        assert await r.readexactly(1) == b"x"
        w.close()
        server.close()
        return seen

    assert asyncio.run(main()) == ["User:CN=client", "User:CN=alice", None]


def test_client_checks_the_broker_certificate_names_the_host(pki, tmp_path):
    """ssl.endpoint.identification.algorithm=https (the default): the broker's certificate names 127.0.0.1 and
    localhost, not 127.0.0.2; an empty value turns the check off."""
    cfg = BrokerConfig.load(None, {"listeners": "SSL://127.0.0.1:0", "log.dirs": tmp_path,
                                   "ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12,
                                   "ssl.keystore.password": PASSWORD})
    ctx = listener_tls_context(cfg, "SSL")

    async def main() -> None:
        async def on_connection(reader, writer):
            if await _handshake(writer, ctx, None, "SSL") is not False:
                writer.write(b"x")
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(on_connection, "127.0.0.2", 0)
        port = server.sockets[0].getsockname()[1]
        props = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)}
        with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
            await open_connection("127.0.0.2", port, ClientSecurity.from_client_props(props))
        r, w = await open_connection("127.0.0.2", port, ClientSecurity.from_client_props(
            {**props, "ssl.endpoint.identification.algorithm": ""}))
        assert await r.readexactly(1) == b"x"
        w.close()
        server.close()

    asyncio.run(main())


def test_fetch_over_tls_reads_the_file_region_instead_of_sendfile(pki, tmp_path):
    """sendfile(2) would put plaintext on a TLS connection: the record bytes of a response go through the TLS
    transport from a buffer (asyncio's sendfile is made to fail here, so using it fails the test)."""
    from kafkalite.broker.server import Broker
    from kafkalite.protocol import FileRegion

    cfg = ssl_config(tmp_path / "d", **{"ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12,
                                        "ssl.keystore.password": PASSWORD})
    ctx = listener_tls_context(cfg, "SSL")
    data = os.urandom(3 * (1 << 20) + 123)  # several chunks
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(data)
    broker = Broker(cfg)

    async def main() -> bytes:
        loop = asyncio.get_running_loop()

        async def no_sendfile(*_args, **_kwargs):
            raise AssertionError("loop.sendfile used on a TLS transport")

        loop.sendfile = no_sendfile  # type: ignore[method-assign]

        async def on_connection(reader, writer):
            assert await _handshake(writer, ctx, None, "SSL") is None
            await broker._send(writer, [b"head", FileRegion(os.open(segment, os.O_RDONLY), 100, len(data) - 200),
                                        b"tail"])
            writer.close()

        server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await open_connection("127.0.0.1", port, ClientSecurity.from_client_props(
            {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)}))
        got = await asyncio.wait_for(r.read(), 20)
        w.close()
        server.close()
        return got

    assert asyncio.run(main()) == b"head" + data[100:-100] + b"tail"


# --- configuration ------------------------------------------------------------------------------------------


def ssl_config(tmp_path, **props) -> BrokerConfig:
    return BrokerConfig.load(None, {"listeners": "SSL://127.0.0.1:0", "log.dirs": tmp_path, **props})


def test_tls_settings_that_cannot_be_honoured_are_refused_by_name(pki, tmp_path):
    jks = tmp_path / "keystore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    cases = [
        ({}, "an SSL listener needs a keystore"),
        ({"ssl.keystore.location": jks, "ssl.keystore.password": "x"}, "keytool -importkeystore"),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12, "ssl.keystore.password": "wrong"},
         "ssl.keystore.password"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.location": pki.broker.cert}, "cannot load the keystore"),
        ({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": pki.broker.cert.read_text(),
          "ssl.keystore.key": pki.broker.key_encrypted.read_text(), "ssl.key.password": "wrong"}, "ssl.key.password"),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12, "ssl.keystore.password": PASSWORD,
          "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "not every TLS 1.3 suite"),
        ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12, "ssl.keystore.password": PASSWORD,
          "ssl.cipher.suites": "TLS_NO_SUCH_SUITE"}, "TLS_NO_SUCH_SUITE"),
    ]
    for props, message in cases:
        with pytest.raises(InvalidConfigError, match=message):
            listener_tls_context(ssl_config(tmp_path, **props), "SSL")
    for props, message in [({"ssl.engine.factory.class": "com.example.Engine"}, "ssl.engine.factory.class"),
                           ({"ssl.keystore.flavour": "x"}, "ssl.keystore.flavour"),
                           ({"listener.name.ssl.ssl.client.auth": "maybe"}, "none, requested, required"),
                           ({"ssl.enabled.protocols": "TLSv1.1"}, "TLSv1.1")]:
        with pytest.raises(InvalidConfigError, match=message):
            ssl_config(tmp_path, **props)


def test_tls_versions_and_cipher_suites(pki, tmp_path):
    base = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12, "ssl.keystore.password": PASSWORD}
    ctx = listener_tls_context(ssl_config(tmp_path, **base, **{
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}), "SSL")
    assert ctx is not None and ctx.maximum_version == ssl.TLSVersion.TLSv1_2  # no TLS 1.3 suite listed
    assert {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"} == {
        "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384"}
    ctx = listener_tls_context(ssl_config(tmp_path, **base, **{"ssl.enabled.protocols": "TLSv1.3"}), "SSL")
    assert ctx is not None and ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    only13 = ",".join(sorted(TLS13_SUITES))
    ctx = listener_tls_context(ssl_config(tmp_path, **base, **{"ssl.cipher.suites": only13}), "SSL")
    assert ctx is not None and ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    with pytest.raises(InvalidConfigError, match=r"TLSv1\.3 is not enabled"):
        listener_tls_context(ssl_config(tmp_path, **base, **{"ssl.cipher.suites": only13,
                                                             "ssl.enabled.protocols": "TLSv1.2"}), "SSL")
    sasl_ssl = BrokerConfig.load(None, {"listeners": "SASL_SSL://127.0.0.1:0", "log.dirs": tmp_path, **base,
                                        "ssl.client.auth": "required", "sasl.enabled.mechanisms": "PLAIN",
                                        "sasl.jaas.config": JAAS_FOR_SASL_SSL})
    ctx = listener_tls_context(sasl_ssl, "SASL_SSL")  # KIP-684: only a listener-prefixed ssl.client.auth counts
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE
    sasl_ssl = BrokerConfig.load(None, {**sasl_ssl.props, "listener.name.sasl_ssl.ssl.client.auth": "required",
                                        "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca_pem})
    ctx = listener_tls_context(sasl_ssl, "SASL_SSL")
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
    per_listener = ssl_config(tmp_path, **base, **{"listener.name.ssl.ssl.enabled.protocols": "TLSv1.2"})
    ctx = listener_tls_context(per_listener, "SSL")
    assert ctx is not None and ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    assert per_listener.warnings() == []  # a per-listener ssl key is known, not "unknown"


def test_serve_refuses_an_ssl_listener_without_keystore(tmp_path):
    port = free_port()
    r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "serve", "--override",
                        f"listeners=SSL://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path / 'd'}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "listener SSL: an SSL listener needs a keystore" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "d").exists()


# --- the CLI ------------------------------------------------------------------------------------------------


def test_cli_tools_over_mutual_tls_with_command_config(tls_broker, pki, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SSL\nssl.truststore.type=PKCS12\n"
                     f"ssl.truststore.location={pki.ca_p12}\nssl.truststore.password={PASSWORD}\n"
                     f"ssl.keystore.type=PKCS12\nssl.keystore.location={pki.client.p12}\n"
                     f"ssl.keystore.password={PASSWORD}\n")
    bootstrap = f"127.0.0.1:{tls_broker.ports['MTLS']}"
    topic = topic_name("cli-tls")

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", *args], input=stdin, capture_output=True,
                              text=True, timeout=60)

    r = cli("topics", "--bootstrap-server", bootstrap, "--command-config", str(props), "--create", "--topic", topic,
            "--partitions", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli("topics", "--bootstrap-server", bootstrap, "--command-config", str(props), "--list")
    assert r.returncode == 0 and topic in r.stdout.split(), r.stdout + r.stderr
    r = cli("produce", "--bootstrap-server", bootstrap, "--producer.config", str(props), "--topic", topic,
            stdin="".join(f"line-{i}\n" for i in range(20)))
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli("consume", "--bootstrap-server", bootstrap, "--consumer.config", str(props), "--topic", topic,
            "--from-beginning", "--max-messages", "20")
    assert r.returncode == 0 and r.stdout.splitlines() == [f"line-{i}" for i in range(20)], r.stdout + r.stderr
    r = cli("get-offsets", "--bootstrap-server", bootstrap, "--command-config", str(props), "--topic", topic)
    assert r.returncode == 0 and f"{topic}:0:20" in r.stdout, r.stdout + r.stderr
    # without the client properties the TLS listener cannot be spoken to
    r = cli("topics", "--bootstrap-server", bootstrap, "--list")
    assert r.returncode == 1, r.stdout + r.stderr


# --- a ZooKeeper cluster replicating over TLS ---------------------------------------------------------------


@pytest.mark.cluster
def test_cluster_replicates_over_an_ssl_inter_broker_listener(pki, tmp_path, zk_connect):
    """Three brokers, clients on PLAINTEXT, brokers to each other on SSL with mutual TLS (the broker's keystore
    is its client certificate): acks=all succeeds with every replica in the ISR, the registrations list both
    endpoints and their protocols, and each listener advertises its own addresses."""
    from tests.support.cluster import Cluster

    ssl_ports: dict[int, int] = {}

    def listeners(bid: int, port: int) -> dict[str, object]:
        ssl_ports[bid] = free_port()
        return {"listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_ports[bid]}",
                "inter.broker.listener.name": "SSL", "ssl.client.auth": "required",
                "ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12,
                "ssl.keystore.password": PASSWORD, "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca_pem}

    cluster = Cluster(tmp_path, zk_connect, per_broker=listeners).start()
    try:
        topic = topic_name("repl-tls")
        cluster.create_topic(topic, partitions=2, replication_factor=3)
        cluster.wait_isr(topic, 2, 3)
        values = [f"r{i}".encode() * 100 for i in range(500)]
        ck_produce({"bootstrap.servers": cluster.bootstrap}, topic, values)
        cluster.wait_isr(topic, 2, 3)
        reg = cluster.zk_json("/brokers/ids/1")
        assert reg["endpoints"] == [f"PLAINTEXT://127.0.0.1:{cluster.brokers[1].port}",
                                    f"SSL://127.0.0.1:{ssl_ports[1]}"]
        assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{ssl_ports[2]}", "security.protocol": "SSL",
                          "ssl.ca.location": str(pki.ca_pem), "ssl.certificate.location": str(pki.client.cert),
                          "ssl.key.location": str(pki.client.key)}).list_topics(timeout=15)
        assert {b.id: b.port for b in md.brokers.values()} == ssl_ports
        # every follower has the records: the leader's high watermark moved only once all three had them
        for b in cluster.brokers.values():
            assert "TLS handshake with" not in b.output(), b.output()
        # a follower 24 MiB behind catches up over TLS: the fetcher reads its answers (10 MiB rounds) with the
        # socket's receive low-water mark set; a mark above what is still coming would stall it out of the ISR
        cluster.kill(3)
        # out of the ISR first (its session expires): otherwise a quick produce and restart find 3 still listed,
        # and the wait below would pass before it fetched anything
        cluster.wait_isr(topic, 2, 2, timeout_s=30)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 5})
        chunk = os.urandom(1 << 20)
        for i in range(24 * 1024):
            p.produce(topic, chunk[i % 1000:i % 1000 + 1024], partition=i % 2)
            if i % 2000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        cluster.restart(3)
        cluster.wait_isr(topic, 2, 3, timeout_s=90)

        def replica_logs(partition: int) -> dict[int, bytes]:
            return {bid: b"".join(f.read_bytes() for f in sorted(
                (b.data_dir / f"{topic}-{partition}").glob("*.log"))) for bid, b in cluster.brokers.items()}

        for partition in range(2):
            # back in the ISR means at the HW; the last bytes past it may still be on their way
            logs = cluster.wait_for(f"p{partition}: the three replicas are byte for byte the same",
                                    lambda p=partition: (lg := replica_logs(p)) and len(set(lg.values())) == 1 and lg,
                                    timeout_s=30, every_s=0.5)
            assert len(logs[3]) > 12 << 20
    finally:
        cluster.stop()


# --- Spark's broker mode --------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java")
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_spark_broker_mode_writes_and_reads_over_mutual_tls(spark, tls_broker, pki):
    topic = create_topic(tls_broker)
    tls = {"kafka.bootstrap.servers": f"127.0.0.1:{tls_broker.ports['MTLS']}", "kafka.security.protocol": "SSL",
           "kafka.ssl.truststore.type": "PKCS12", "kafka.ssl.truststore.location": str(pki.ca_p12),
           "kafka.ssl.truststore.password": PASSWORD, "kafka.ssl.keystore.type": "PKCS12",
           "kafka.ssl.keystore.location": str(pki.client.p12), "kafka.ssl.keystore.password": PASSWORD}
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(100)], "key string, value string")
    df.write.format("kafkalite").options(**tls).option("topic", topic).mode("append").save()
    back = spark.read.format("kafkalite").options(**tls).option("subscribe", topic).load() \
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "offset").orderBy("offset").collect()
    assert sorted((r.k, r.v) for r in back) == sorted((f"k{i}", f"v{i}") for i in range(100))  # 2 writer tasks
    assert sorted(ck_consume(ck_conf(tls_broker, "PLAINTEXT", pki), topic, 100)) == sorted(
        f"v{i}".encode() for i in range(100))
    # a TLS option kafkalite cannot honour is refused when the query is planned
    with pytest.raises(Exception, match=r"ssl\.engine\.factory\.class"):
        spark.read.format("kafkalite").options(**tls, **{"kafka.ssl.engine.factory.class": "x"}) \
            .option("subscribe", topic).load().collect()


# --- parsers ------------------------------------------------------------------------------------------------

_NAME = st.from_regex(r"[A-Za-z0-9_]{1,12}", fullmatch=True)
_KEY = st.lists(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=4).map(".".join)


@given(_NAME, _KEY)
def test_listener_prefixed_keys_parse_back(listener, key):
    assert registry.listener_key(f"listener.name.{listener.lower()}.{key}") == (listener.upper(), key)
    assert registry.listener_key(key) is None


@given(st.dictionaries(st.one_of(_KEY, _KEY.map(lambda k: f"ssl.{k}"), st.tuples(_NAME, _KEY).map(
    lambda t: f"listener.name.{t[0].lower()}.ssl.{t[1]}")), st.text(max_size=20), max_size=6))
def test_security_refusals_name_each_unknown_ssl_key(props):
    refusals = registry.security_refusals(props)
    for k in props:
        per_listener = registry.listener_key(k)
        key = per_listener[1] if per_listener else k
        if key.startswith("ssl.") and key not in registry.KEYS:
            assert any(r.startswith(f"{k} is set") for r in refusals), (k, refusals)
