"""The `kafka.*` options of broker mode, parsed once into a picklable value.

Broker mode speaks the Kafka protocol to `kafka.bootstrap.servers`, so the Kafka client settings a
Spark job already passes keep their Kafka names and meanings. Only those that change what this
connector does are read (the table in docs/spark.md); the rest change nothing, and each is named in one
WARNING (spark/option_names.py) where Spark's own connector would ignore it silently. A value that cannot be
used is an OptionError when the query is planned, before any connection is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkalite.client import READ_COMMITTED, READ_UNCOMMITTED, parse_bootstrap_servers
from kafkalite.errors import InvalidConfigError
from kafkalite.security.transport import ClientSecurity
from kafkalite.spark.errors import OptionError

# Kafka's consumer reads 1 MiB per partition per fetch by default; a Spark task reads one partition
# at a time and decodes each response as one chunk, so larger answers mean fewer round trips for the
# same memory a segment-file chunk takes (see segments.CHUNK_BYTES).
DEFAULT_MAX_PARTITION_FETCH_BYTES = 4 << 20
DEFAULT_FETCH_MAX_BYTES = 50 << 20  # Kafka's fetch.max.bytes
DEFAULT_MAX_REQUEST_SIZE = 1 << 20  # Kafka's max.request.size
_INT32_MAX = (1 << 31) - 1
_ISOLATION = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
_ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}
DEFAULT_CLIENT_ID = "kafkalite-spark"


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """What the broker backends need to know, from `kafka.*` options (names without the prefix)."""

    bootstrap_servers: str
    client_id: str = DEFAULT_CLIENT_ID
    request_timeout_ms: int = 30_000  # request.timeout.ms: one request's answer
    connect_timeout_ms: int = 10_000  # socket.connection.setup.timeout.ms
    api_timeout_ms: int = 60_000  # default.api.timeout.ms: retrying leader moves and broker restarts
    retry_backoff_ms: int = 100  # retry.backoff.ms
    isolation_level: int = READ_UNCOMMITTED  # isolation.level
    max_partition_fetch_bytes: int = DEFAULT_MAX_PARTITION_FETCH_BYTES
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    acks: int = -1  # acks: all
    max_request_size: int = DEFAULT_MAX_REQUEST_SIZE
    # security.protocol, ssl.* and sasl.* as given (an SSLContext does not pickle: each process builds its own)
    security_props: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # passwords: never printed

    def security(self) -> ClientSecurity:
        """How connections are secured (kafka.security.protocol, kafka.ssl.*, kafka.sasl.*), checked when parsed."""
        return ClientSecurity.from_client_props(dict(self.security_props), where="Spark options")

    @property
    def fetch_bytes(self) -> int:
        """Bytes asked for per fetch: one partition per request, so the smaller of the two limits."""
        return min(self.max_partition_fetch_bytes, self.fetch_max_bytes)

    @classmethod
    def parse(cls, bootstrap_servers: str, params: Mapping[str, str]) -> BrokerSettings:
        """Settings from the `kafka.*` options (keys lower-cased, without `kafka.`)."""
        try:
            parse_bootstrap_servers(bootstrap_servers)
        except ValueError as exc:
            raise OptionError(f"option kafka.bootstrap.servers: {exc}; give host:port[,host:port...]") from None
        protocol = params.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise OptionError(f"option kafka.security.protocol={protocol} is not supported: kafkalite's broker mode "
                              "speaks PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL")
        # ssl.* and sasl.* only matter with a protocol that uses them (Kafka's clients leave them unused too)
        security = () if protocol == "PLAINTEXT" else (("security.protocol", protocol), *sorted(
            (k, v.strip()) for k, v in params.items() if k.startswith(("ssl.", "sasl."))))
        try:
            ClientSecurity.from_client_props(dict(security), where="Spark options")
        except InvalidConfigError as exc:
            raise OptionError(f"option kafka.*: {exc}") from None
        isolation = params.get("isolation.level", "read_uncommitted").strip().lower()
        if isolation not in _ISOLATION:
            raise OptionError(f"option kafka.isolation.level must be read_uncommitted or read_committed, "
                              f"got {isolation!r}")
        acks = params.get("acks", "all").strip().lower()
        if acks not in _ACKS:
            raise OptionError(f"option kafka.acks must be all, -1, 1 or 0, got {acks!r}")
        return cls(
            bootstrap_servers=bootstrap_servers,
            client_id=params.get("client.id", "").strip() or DEFAULT_CLIENT_ID,
            request_timeout_ms=_int(params, "request.timeout.ms", 30_000, 1),
            connect_timeout_ms=_int(params, "socket.connection.setup.timeout.ms", 10_000, 1),
            api_timeout_ms=_int(params, "default.api.timeout.ms", 60_000, 0),
            retry_backoff_ms=_int(params, "retry.backoff.ms", 100, 0),
            isolation_level=_ISOLATION[isolation],
            max_partition_fetch_bytes=_int(params, "max.partition.fetch.bytes", DEFAULT_MAX_PARTITION_FETCH_BYTES, 1),
            fetch_max_bytes=_int(params, "fetch.max.bytes", DEFAULT_FETCH_MAX_BYTES, 1),
            acks=_ACKS[acks],
            max_request_size=_int(params, "max.request.size", DEFAULT_MAX_REQUEST_SIZE, 1),
            security_props=security,
        )


def _int(params: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value is None or not minimum <= value <= _INT32_MAX:
        raise OptionError(f"option kafka.{name} must be an integer from {minimum} to {_INT32_MAX}, got {raw!r}")
    return value
