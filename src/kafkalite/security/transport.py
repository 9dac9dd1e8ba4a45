"""Client connections that prove themselves: TCP, then TLS when the protocol says SSL, then a SASL login when
it says SASL_*. One home for every outgoing connection: the controller's channels, a follower's fetcher, a
broker's ControlledShutdown, and the blocking client behind the CLI tools and Spark's broker mode.

`ClientSecurity` is built from Kafka's client property names (`security.protocol`, `ssl.*`, `sasl.*`), or for
a broker's own inter-broker connections from its server.properties (`ClientSecurity.for_inter_broker`).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kafkalite.config import registry
from kafkalite.errors import InvalidConfigError
from kafkalite.security.tls import TlsSettings, client_context

PLAINTEXT = "PLAINTEXT"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ClientSecurity:
    """How a client connection authenticates. `ssl_context` is set for SSL and SASL_SSL (its check_hostname
    says whether the broker's certificate must name the host connected to:
    ssl.endpoint.identification.algorithm=https). SASL fields for SASL_*."""

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
    def from_client_props(cls, props: Mapping[str, str], where: str = "client properties") -> ClientSecurity:
        """From a client's properties (Kafka's names; a Java client's --command-config file; Spark's kafka.*
        options without the prefix). TLS settings take Java's names (ssl.truststore.*, ssl.keystore.*, ...)
        and, for convenience, librdkafka's ssl.ca.location / ssl.certificate.location / ssl.key.location.
        Unknown security.protocol values and ssl.* settings kafkalite cannot honour are refused by name."""
        protocol = str(props.get("security.protocol", PLAINTEXT)).strip().upper()
        if protocol not in PROTOCOLS:
            raise InvalidConfigError(f"{where}: security.protocol={protocol} is not one of {', '.join(PROTOCOLS)}")
        ctx = client_tls_context(props, where) if protocol in ("SSL", "SASL_SSL") else None
        return cls(protocol, ctx)

    @classmethod
    def for_inter_broker(cls, config: Any) -> ClientSecurity:
        """A broker's own connections to other brokers (controller channels, replica fetchers, controlled
        shutdown): the inter-broker listener's protocol, and for TLS that listener's settings (its per-listener
        overrides first): the broker's keystore as client certificate, its truststore for the peer's."""
        listener = config.inter_broker_listener().name
        protocol = config.security_protocol(listener)
        if protocol not in ("SSL", "SASL_SSL"):
            return cls(protocol)
        settings = TlsSettings.read(functools.partial(config.listener_prop, listener),
                                    where=f"inter-broker listener {listener}")
        return cls(protocol, client_context(settings))


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


PLAINTEXT_CLIENT = ClientSecurity()


async def open_connection(host: str, port: int, security: ClientSecurity = PLAINTEXT_CLIENT
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An asyncio connection to a broker, secured and logged in as `security` says."""
    if security.ssl_context is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        reader, writer = await asyncio.open_connection(host, port, ssl=security.ssl_context, server_hostname=host)
    if security.uses_sasl:
        try:
            await _login(reader, writer, security)
        except BaseException:
            writer.close()
            raise
    return reader, writer


async def _login(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, security: ClientSecurity) -> None:
    """The SASL login after TCP (and TLS for SASL_SSL): SaslHandshake + SaslAuthenticate. The SASL part of
    issue 16 fills this in (and `_login_blocking` below)."""
    raise ConnectionError(f"security.protocol={security.protocol}: the SASL client login is not implemented yet")


def _login_blocking(sock: socket.socket, security: ClientSecurity) -> None:
    """`_login` for the blocking client."""
    raise ConnectionError(f"security.protocol={security.protocol}: the SASL client login is not implemented yet")


def connect(host: str, port: int, security: ClientSecurity = PLAINTEXT_CLIENT, timeout_s: float = 30.0
            ) -> socket.socket:
    """A blocking socket to a broker, secured and logged in as `security` says (the CLI tools' client)."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    try:
        if security.ssl_context is not None:
            sock = security.ssl_context.wrap_socket(sock, server_hostname=host)
        if security.uses_sasl:
            _login_blocking(sock, security)
    except BaseException:
        sock.close()
        raise
    return sock
