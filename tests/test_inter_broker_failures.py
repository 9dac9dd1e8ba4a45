"""A broker that cannot reach itself over its own inter-broker listener (a truststore that does not trust its
certificate, a certificate that does not name its advertised host, a SASL login it refuses) used to start, listen
and then hang: its controller retried every second, its clients waited for an answer that never came, and nothing
said why. Now the start is refused in one line naming the fix, and a connection to another broker that only the
operator can fix is logged at ERROR once per peer and cause (security/connect_failures.py)."""

from __future__ import annotations

import asyncio
import logging
import ssl
import subprocess
import sys

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.server import _handshake, listener_tls_context
from kafkalite.security.connect_failures import FailureLog, operator_fix
from kafkalite.security.transport import ClientSecurity, open_connection
from tests.support.brokers import free_port
from tests.support.certs import PASSWORD

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="{password}" user_admin="admin-secret";')


def serve(tmp_path, props: dict[str, object]) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "kafkalite.cli.main", "serve"]
    for k, v in {"log.dirs": tmp_path / "data", **props}.items():
        args += ["--override", f"{k}={v}"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def keystore(pki) -> dict[str, object]:
    return {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12, "ssl.keystore.password": PASSWORD}


def refused_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if "cannot reach itself" in line]
    assert len(lines) == 1, r.stdout  # one line, not one a second
    assert "ERROR" not in r.stdout.replace(lines[0], ""), r.stdout
    return lines[0]


def test_a_truststore_that_does_not_trust_the_brokers_own_certificate_refuses_the_start(pki, tmp_path):
    port = free_port()
    r = serve(tmp_path, {"listeners": f"SSL://127.0.0.1:{port}", "security.inter.broker.protocol": "SSL",
                         **keystore(pki), "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.other_ca_pem})
    line = refused_line(r)
    assert f"broker 1 cannot reach itself over SSL at 127.0.0.1:{port} (listener SSL): certificate verify failed" \
        in line
    assert "set ssl.truststore.location to a file that holds the CA that signed the broker's certificate" in line


def test_sasl_ssl_without_a_truststore_refuses_the_start(pki, tmp_path):
    """The case as an operator met it: the only listener SASL_SSL, no truststore at all (the system's CAs)."""
    port = free_port()
    r = serve(tmp_path, {"listeners": f"SASL_SSL://127.0.0.1:{port}", "security.inter.broker.protocol": "SASL_SSL",
                         "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
                         "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS.format(password="admin-secret"),
                         **keystore(pki)})
    line = refused_line(r)
    assert f"over SASL_SSL at 127.0.0.1:{port}" in line and "certificate verify failed" in line, line
    assert "set ssl.truststore.location" in line


def test_a_certificate_that_does_not_name_the_advertised_host_refuses_the_start(pki, tmp_path):
    port = free_port()
    r = serve(tmp_path, {"listeners": f"SSL://127.0.0.2:{port}", "security.inter.broker.protocol": "SSL",
                         **keystore(pki), "ssl.truststore.type": "PKCS12", "ssl.truststore.location": pki.ca_p12,
                         "ssl.truststore.password": PASSWORD})
    line = refused_line(r)
    assert "IP address mismatch" in line and "the broker's certificate does not name 127.0.0.2" in line, line


def test_an_inter_broker_sasl_login_the_broker_refuses_refuses_the_start(tmp_path):
    port = free_port()
    r = serve(tmp_path, {"listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
                         "security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
                         "sasl.mechanism.inter.broker.protocol": "PLAIN",
                         "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS.format(password="wrong")})
    line = refused_line(r)
    assert "SASL login failed" in line and "sasl.jaas.config" in line, line


def test_a_failure_only_the_operator_can_fix_is_logged_once_per_peer_and_cause(pki, tmp_path, caplog):
    """Real handshakes against a TLS listener: an untrusted certificate is an ERROR once however often it is
    retried, a plaintext peer is another cause, a refused connection is left to the retries."""
    cfg = BrokerConfig.load(None, {"listeners": "SSL://127.0.0.1:0", "log.dirs": tmp_path, **keystore(pki)})
    ctx = listener_tls_context(cfg, "SSL")
    failures = FailureLog(logging.getLogger("kafkalite.test.failures"))

    async def main() -> None:
        async def on_tls(reader, writer):
            await _handshake(writer, ctx, None, "SSL")
            writer.close()

        async def on_plain(reader, writer):
            writer.close()

        tls = await asyncio.start_server(on_tls, "127.0.0.1", 0)
        plain = await asyncio.start_server(on_plain, "127.0.0.1", 0)
        untrusting = ClientSecurity.from_client_props({"security.protocol": "SSL",
                                                       "ssl.ca.location": str(pki.other_ca_pem)})
        for port, times in ((tls.sockets[0].getsockname()[1], 3), (plain.sockets[0].getsockname()[1], 1)):
            for _ in range(times):
                try:
                    await open_connection("127.0.0.1", port, untrusting)
                except (OSError, ssl.SSLError) as exc:
                    assert failures.failed("2", "broker 1 cannot reach broker 2", exc, "broker 2", "127.0.0.1") == \
                        (port == tls.sockets[0].getsockname()[1] or operator_fix(exc, "broker 2", "h") is not None)
        refused = ConnectionRefusedError(111, "Connection refused")
        assert not failures.failed("2", "broker 1 cannot reach broker 2", refused, "broker 2", "127.0.0.1")
        failures.reached("2")
        try:
            await open_connection("127.0.0.1", tls.sockets[0].getsockname()[1], untrusting)
        except ssl.SSLCertVerificationError as exc:
            failures.failed("2", "broker 1 cannot reach broker 2", exc, "broker 2", "127.0.0.1")
        tls.close()
        plain.close()

    with caplog.at_level(logging.ERROR, logger="kafkalite.test.failures"):
        asyncio.run(main())
    untrusted = [r for r in caplog.records if "holds the CA that signed broker 2's certificate" in r.getMessage()]
    assert len(untrusted) == 2, [r.getMessage() for r in caplog.records]  # once, then once again after a success
    assert all(r.levelno == logging.ERROR for r in caplog.records)
