"""Client connections that prove themselves: TCP, then TLS when the protocol says SSL, then a SASL login when
it says SASL_*. One home for every outgoing connection: the controller's channels, a follower's fetcher, a
broker's ControlledShutdown, and the blocking client behind the CLI tools and Spark's broker mode.

`ClientSecurity` is built from Kafka's client property names (`security.protocol`, `ssl.*`, `sasl.*`), or for
a broker's own inter-broker connections from its server.properties (`ClientSecurity.for_inter_broker`).

The SASL login is Kafka's: SaslHandshake v1 naming the mechanism, then SaslAuthenticate requests carrying the
mechanism's tokens (security/sasl.py's SaslClientExchange), before the connection is handed to its user.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kafkalite.config import registry
from kafkalite.config.listeners import SECURITY_PROTOCOLS, TLS_PROTOCOLS
from kafkalite.error_codes import ErrorCode
from kafkalite.errors import InvalidConfigError, SaslAuthenticationError
from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.connection import ClientConnection
from kafkalite.security.sasl import SCRAM_MECHANISMS, JaasError, SaslClientExchange, parse_jaas
from kafkalite.security.tls import TlsSettings, client_context

PLAINTEXT = "PLAINTEXT"
CLIENT_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connection authenticates. `ssl_context` is set for SSL and SASL_SSL (its check_hostname
    says whether the broker's certificate must name the host connected to:
    ssl.endpoint.identification.algorithm=https). SASL fields for SASL_*."""

    protocol: str = PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)  # never in a log line or a traceback

    @property
    def uses_tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_client_props(cls, props: Mapping[str, str], where: str = "client properties") -> ClientSecurity:
        """From a client's properties (Kafka's names; a Java client's --command-config file; Spark's kafka.*
        options without the prefix). TLS settings take Java's names (ssl.truststore.*, ssl.keystore.*, ...)
        and, for convenience, librdkafka's ssl.ca.location / ssl.certificate.location / ssl.key.location.
        Unknown security.protocol values and ssl.* settings kafkalite cannot honour are refused by name."""
        protocol = str(props.get("security.protocol", PLAINTEXT)).strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(f"{where}: security.protocol={protocol} is not one of "
                                     f"{', '.join(SECURITY_PROTOCOLS)}")
        ctx = client_tls_context(props, where) if protocol in TLS_PROTOCOLS else None
        if not protocol.startswith("SASL_"):
            return cls(protocol, ctx)
        try:
            mechanism, username, password = sasl_client_login(props)
        except ValueError as exc:
            raise InvalidConfigError(f"{where}: {exc}") from None
        return cls(protocol, ctx, sasl_mechanism=mechanism, sasl_username=username, sasl_password=password)

    @classmethod
    def for_inter_broker(cls, config: Any, listener: str | None = None) -> ClientSecurity:
        """A broker's own connections to other brokers (replica fetchers, controlled shutdown; the controller's
        channels, on `listener` when control.plane.listener.name names one): the listener's protocol (default the
        inter-broker listener), and for TLS that listener's settings (its per-listener overrides first): the
        broker's keystore as client certificate, its truststore for the peer's. SASL uses
        sasl.mechanism.inter.broker.protocol on either listener, as Kafka's ZooKeeper-mode controller does."""
        listener = listener or config.inter_broker_listener().name
        protocol = config.security_protocol(listener)
        ctx = None
        if protocol in TLS_PROTOCOLS:
            settings = TlsSettings.read(functools.partial(config.listener_prop, listener),
                                        where=f"broker-to-broker listener {listener}")
            ctx = client_context(settings)
        if not protocol.startswith("SASL_"):
            return cls(protocol, ctx)
        mechanism = str(config.get("sasl.mechanism.inter.broker.protocol")).upper()
        try:
            login = sasl_for_inter_broker(protocol, mechanism, config.sasl_jaas_config(listener, mechanism))
        except ValueError as exc:
            raise InvalidConfigError(f"listener {listener}: {exc}") from None
        return replace(login, ssl_context=ctx)


# librdkafka's names for PEM files, accepted beside Java's
_LIBRDKAFKA = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


def client_tls_context(props: Mapping[str, str], where: str) -> ssl.SSLContext:
    """The SSLContext of a client's properties (registry types and defaults, Kafka's client defaults being the
    broker's for these keys)."""
    for k in props:
        if k.startswith("ssl.") and k not in _LIBRDKAFKA and (k not in registry.KEYS or k in registry.SSL_REFUSED):
            raise InvalidConfigError(f"{where}: {k} is not a TLS setting kafkalite supports")

    def get(name: str) -> Any:
        return registry.parse(name, props[name]) if name in props else registry.default(name)

    settings = TlsSettings.read(get, where)
    if props.get("ssl.ca.location"):
        if settings.truststore_location:
            raise InvalidConfigError(f"{where}: set ssl.truststore.location or ssl.ca.location, not both")
        settings = replace(settings, truststore_type="PEM", truststore_location=props["ssl.ca.location"])
    if props.get("ssl.certificate.location") or props.get("ssl.key.location"):
        if settings.has_keystore or not (props.get("ssl.certificate.location") and props.get("ssl.key.location")):
            raise InvalidConfigError(f"{where}: ssl.certificate.location and ssl.key.location go together, instead "
                                     "of ssl.keystore.*")
        settings = replace(settings, keystore_type="PEM", keystore_location=props["ssl.certificate.location"],
                           key_location=props["ssl.key.location"])
    return client_context(settings)


def sasl_client_login(props: Mapping[str, str]) -> tuple[str, str, str]:
    """(mechanism, username, password) from sasl.mechanism (Kafka's default GSSAPI is refused by name) and
    sasl.jaas.config's PlainLoginModule/ScramLoginModule, or librdkafka's sasl.username/sasl.password."""
    mechanism = str(props.get("sasl.mechanism", "GSSAPI")).strip().upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ValueError(f"sasl.mechanism={mechanism} is not supported (supported: {', '.join(CLIENT_MECHANISMS)})")
    username = str(props.get("sasl.username", ""))
    password = str(props.get("sasl.password", ""))
    jaas = str(props.get("sasl.jaas.config", "")).strip()
    if jaas:
        try:
            entry = parse_jaas(jaas)
        except JaasError as exc:
            raise ValueError(str(exc)) from None
        if not entry.module.endswith(("PlainLoginModule", "ScramLoginModule")):
            raise ValueError(f"sasl.jaas.config: login module {entry.module} is not supported (PlainLoginModule "
                             "or ScramLoginModule)")
        username, password = entry.username or username, entry.password or password
    if not username:
        raise ValueError(f"security.protocol=SASL_* with sasl.mechanism={mechanism} needs a username: set "
                         "sasl.jaas.config (username=\"...\" password=\"...\") or sasl.username/sasl.password")
    return mechanism, username, password


def sasl_for_inter_broker(protocol: str, mechanism: str, jaas_text: str) -> ClientSecurity:
    """A broker's own login to the other brokers (sasl.mechanism.inter.broker.protocol) with the username and
    password of its inter-broker listener's JAAS entry for that mechanism. Plain protocols pass through."""
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol)
    try:
        entry = parse_jaas(jaas_text)
    except JaasError as exc:
        raise ValueError(f"the inter-broker listener's JAAS configuration for {mechanism}: {exc}") from None
    if not entry.username:
        raise ValueError(f"the inter-broker listener's JAAS configuration for {mechanism} has no username/password "
                         "for the broker's own connections")
    return ClientSecurity(protocol, sasl_mechanism=mechanism, sasl_username=entry.username,
                          sasl_password=entry.password)


PLAINTEXT_CLIENT = ClientSecurity()


class _Login:
    """The SASL requests of one login over a ClientConnection: what to send next, what each answer means."""

    def __init__(self, security: ClientSecurity) -> None:
        self.security = security
        self.conn = ClientConnection("kafkalite")
        self.exchange = SaslClientExchange(security.sasl_mechanism, security.sasl_username, security.sasl_password)

    def handshake(self) -> bytes:
        return self.conn.send_request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": self.security.sasl_mechanism})[1]

    def authenticate(self, token: bytes) -> bytes:
        return self.conn.send_request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})[1]

    def answer(self, data: bytes) -> bytes | None:
        """The next request to send after `data` (a whole response frame with its size), None when done."""
        responses = self.conn.feed(data)
        if not responses:
            raise SaslAuthenticationError("SASL login: incomplete response")
        pending, body = responses[0]
        if pending.api_key == ApiKey.SASL_HANDSHAKE:
            if body["error_code"] != ErrorCode.NONE:
                raise SaslAuthenticationError(
                    f"SASL mechanism {self.security.sasl_mechanism} is not enabled on the broker "
                    f"(error {ErrorCode(body['error_code']).name}; enabled: {', '.join(body['mechanisms'])})")
            return self.authenticate(self.exchange.first())
        if body["error_code"] != ErrorCode.NONE:
            raise SaslAuthenticationError(body.get("error_message") or
                                          f"SASL authentication failed ({ErrorCode(body['error_code']).name})")
        try:
            token = self.exchange.step(bytes(body["auth_bytes"]))
        except Exception as exc:  # scramp: the server's signature or nonce does not verify
            raise SaslAuthenticationError(f"SASL {self.security.sasl_mechanism}: the broker's answer does not "
                                          f"verify ({exc})") from None
        return None if token is None else self.authenticate(token)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    return head + await reader.readexactly(int.from_bytes(head, "big", signed=True))


async def open_connection(host: str, port: int, security: ClientSecurity = PLAINTEXT_CLIENT
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An asyncio connection to a broker, secured and logged in as `security` says."""
    if security.ssl_context is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        reader, writer = await asyncio.open_connection(host, port, ssl=security.ssl_context, server_hostname=host)
    if security.uses_sasl:
        try:
            login = _Login(security)
            request: bytes | None = login.handshake()
            while request is not None:
                writer.write(request)
                await writer.drain()
                request = login.answer(await _read_frame(reader))
        except BaseException:
            writer.close()
            raise
    return reader, writer


def _recv_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection during the SASL login")
            buf += chunk
        return bytes(buf)
    head = exactly(4)
    return head + exactly(int.from_bytes(head, "big", signed=True))


def connect(host: str, port: int, security: ClientSecurity = PLAINTEXT_CLIENT, timeout_s: float = 30.0
            ) -> socket.socket:
    """A blocking socket to a broker, secured and logged in as `security` says (the CLI tools' client)."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    try:
        if security.ssl_context is not None:
            sock = security.ssl_context.wrap_socket(sock, server_hostname=host)
        if security.uses_sasl:
            login = _Login(security)
            request: bytes | None = login.handshake()
            while request is not None:
                sock.sendall(request)
                request = login.answer(_recv_frame(sock))
    except BaseException:
        sock.close()
        raise
    return sock
