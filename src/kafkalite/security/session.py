"""The identity a request is served under: Kafka's `RequestContext` principal, client address and listener.

One `Session` belongs to one connection. It starts as `User:ANONYMOUS` (PLAINTEXT, or TLS without a client
certificate) and changes when SASL authentication succeeds or a client certificate names the peer; every
handler receives it, so the authorizer decides on what the connection proved, never on what a request claims.
"""

from __future__ import annotations

from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"


@dataclass
class Session:
    """The authenticated principal ("User:alice", Kafka's `KafkaPrincipal.toString()`), the client's address,
    the listener the connection arrived on and the security protocol it speaks."""

    host: str
    listener: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"
    principal: str = ANONYMOUS

    @property
    def user(self) -> str:
        """The principal's name without its type ("alice" for "User:alice")."""
        return self.principal.partition(":")[2]


def internal_session() -> Session:
    """For requests a broker makes of itself in-process (tests, tools): treated as the broker's own principal."""
    return Session(host="127.0.0.1", principal="User:ANONYMOUS")
