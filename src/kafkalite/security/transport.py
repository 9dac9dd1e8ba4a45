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
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from kafkalite.error_codes import ErrorCode
from kafkalite.errors import SaslAuthenticationError
from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.connection import ClientConnection
from kafkalite.security.sasl import SCRAM_MECHANISMS, JaasError, SaslClientExchange, parse_jaas

PLAINTEXT = "PLAINTEXT"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
CLIENT_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
_IMPLEMENTED = (PLAINTEXT, SASL_PLAINTEXT)


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connection authenticates. `ssl_context` is set for SSL and SASL_SSL; `server_hostname`
    is the name the broker's certificate is checked against (None: the host connected to, when
    ssl.endpoint.identification.algorithm=https; checking off otherwise). SASL fields for SASL_*."""

    protocol: str = PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = ""

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_client_props(cls, props: Mapping[str, str]) -> ClientSecurity:
        """From a client's properties (Kafka's names; a Java client's --command-config file; librdkafka's
        sasl.username/sasl.password). Unknown security.protocol values and mechanisms are refused by name."""
        protocol = str(props.get("security.protocol", PLAINTEXT)).strip().upper()
        if protocol not in _IMPLEMENTED:
            raise ValueError(f"security.protocol={protocol} is not supported yet")
        if protocol == PLAINTEXT:
            return cls()
        mechanism, username, password = sasl_client_login(props)
        return cls(protocol, sasl_mechanism=mechanism, sasl_username=username, sasl_password=password)


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
    reader, writer = await asyncio.open_connection(host, port)
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
    if security.uses_sasl:
        try:
            login = _Login(security)
            request: bytes | None = login.handshake()
            while request is not None:
                sock.sendall(request)
                request = login.answer(_recv_frame(sock))
        except BaseException:
            sock.close()
            raise
    return sock
