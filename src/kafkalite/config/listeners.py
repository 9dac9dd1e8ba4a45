"""`listeners` / `advertised.listeners` and the security protocol each listener speaks.

Kafka maps a listener's name to a protocol through `listener.security.protocol.map`; kafkalite speaks all
four of Kafka's protocols (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kafkalite.errors import InvalidConfigError

DEFAULT_PORT = 9092
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")  # the ones that run TLS under the Kafka protocol
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
_LISTENER = re.compile(r"^(?:(?P<name>[A-Za-z0-9_]+)://)?(?P<host>\[[^\]]*\]|[^:]*):(?P<port>-?\d+)$")


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listeners(value: str, key: str = "listeners") -> list[Listener]:
    """NAME://host:port,... ; a port outside 0..65535 or a malformed entry names the key and the entry."""
    listeners = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        m = _LISTENER.match(part)
        if not m:
            raise InvalidConfigError(f"Invalid value {value} for configuration {key}: {part!r} is not "
                                     f"NAME://host:port, e.g. PLAINTEXT://127.0.0.1:{DEFAULT_PORT}")
        port = int(m.group("port"))
        if not 0 <= port <= 65535:
            raise InvalidConfigError(f"Invalid value {value} for configuration {key}: port {port} of {part!r} "
                                     "is outside 0..65535")
        listeners.append(Listener((m.group("name") or "PLAINTEXT").upper(), m.group("host").strip("[]"), port))
    if not listeners:
        raise InvalidConfigError(f"Invalid value {value} for configuration {key}: give at least one listener, "
                                 f"e.g. PLAINTEXT://127.0.0.1:{DEFAULT_PORT}")
    names = [li.name for li in listeners]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise InvalidConfigError(f"Invalid value {value} for configuration {key}: listener name {dup} is used "
                                 "more than once")
    return listeners


def parse_protocol_map(value: str) -> dict[str, str]:
    """listener.security.protocol.map: NAME:PROTOCOL,... with Kafka's protocol names."""
    out = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, sep, proto = part.partition(":")
        proto = proto.strip().upper()
        if not sep or not name.strip() or proto not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(f"Invalid value {value} for configuration listener.security.protocol.map: "
                                     f"{part!r} is not NAME:PROTOCOL with PROTOCOL one of "
                                     f"{', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = proto
    return out


def check_protocols(listeners: list[Listener], protocol_map: dict[str, str], key: str) -> None:
    """Every listener must be mapped to a protocol (parse_protocol_map admits only Kafka's four)."""
    for li in listeners:
        proto = protocol_map.get(li.name)
        if proto is None:
            raise InvalidConfigError(f"Invalid value for configuration {key}: no security protocol is defined for "
                                     f"listener {li.name} in listener.security.protocol.map")
