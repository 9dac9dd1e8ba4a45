"""Broker configuration: Kafka's `server.properties` names and defaults, parsed once at start-up.

Operators move between Kafka and kafkalite with the same file, so every setting keeps Kafka's name.
Topic-level defaults (`log.segment.bytes`, `log.retention.hours`, ...) are handed to `LogConfig`, the
manager's settings to `ManagerConfig`; what only the network layer needs lives here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalite.errors import InvalidConfigError
from kafkalite.manager.log_manager import ManagerConfig
from kafkalite.storage.log_config import LogConfig

DEFAULT_PORT = 9092
DEFAULT_DATA_DIR = "kafkalite-data"

# name -> (kind, default). Kinds: int, long, bool, str, list.
BROKER_DEFAULTS: dict[str, tuple[str, Any]] = {
    "node.id": ("int", 1),
    "listeners": ("str", f"PLAINTEXT://127.0.0.1:{DEFAULT_PORT}"),
    "advertised.listeners": ("str", ""),
    "log.dirs": ("list", DEFAULT_DATA_DIR),
    "num.partitions": ("int", 1),
    "default.replication.factor": ("int", 1),
    "auto.create.topics.enable": ("bool", True),
    "delete.topic.enable": ("bool", True),
    "socket.request.max.bytes": ("int", 104857600),
    "message.max.bytes": ("int", 1048588),
    "replica.high.watermark.checkpoint.interval.ms": ("long", 5000),
    "fetch.max.bytes": ("int", 57671680),
    "connections.max.idle.ms": ("long", 600000),
    "num.recovery.threads.per.data.dir": ("int", 2),
    "offsets.topic.num.partitions": ("int", 50),
    "offsets.topic.segment.bytes": ("int", 104857600),
    "offsets.retention.minutes": ("int", 10080),
    "offsets.retention.check.interval.ms": ("long", 600000),
    "group.initial.rebalance.delay.ms": ("int", 3000),
    "group.min.session.timeout.ms": ("int", 6000),
    "group.max.session.timeout.ms": ("int", 1800000),
    "group.max.size": ("int", 2147483647),
    "cluster.id": ("str", "kafkalite-cluster"),
    "broker.rack": ("str", ""),
}
_ALIASES = {"broker.id": "node.id", "log.dir": "log.dirs"}
_LISTENER = re.compile(r"^(?:(?P<name>[A-Za-z0-9_]+)://)?(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


def parse_properties(text: str) -> dict[str, str]:
    """Java `.properties` as Kafka reads server.properties: `k=v` / `k: v` / `k v`, `#`/`!` comments,
    trailing backslash continues a line."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        m = re.match(r"^((?:\\.|[^=:\s])+)\s*[=:\s]\s*(.*)$", line)
        if m:
            out[m.group(1).replace("\\", "")] = m.group(2)
        elif line:
            out[line] = ""
    return out


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int


def parse_listeners(value: str) -> list[Listener]:
    listeners = []
    for part in filter(None, (p.strip() for p in value.split(","))):
        m = _LISTENER.match(part)
        if not m:
            raise InvalidConfigError(f"Invalid listener {part!r}: expected NAME://host:port, e.g. "
                                     f"PLAINTEXT://127.0.0.1:{DEFAULT_PORT}")
        host = m.group("host").strip("[]")
        listeners.append(Listener(m.group("name") or "PLAINTEXT", host, int(m.group("port"))))
    if not listeners:
        raise InvalidConfigError("listeners is empty: give at least one, e.g. PLAINTEXT://127.0.0.1:9092")
    return listeners


def _convert(name: str, kind: str, raw: object) -> Any:
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: Expected value to be "
                                     "either true or false")
        return text == "true"
    if kind in ("int", "long"):
        try:
            return int(str(raw).strip())
        except ValueError:
            raise InvalidConfigError(f"Invalid value {raw!r} for configuration {name}: Not a number of type "
                                     f"{kind.upper()}") from None
    if kind == "list":
        return [p.strip() for p in str(raw).split(",") if p.strip()]
    return str(raw).strip()


@dataclass(frozen=True)
class BrokerConfig:
    """Every property the broker was given (`props`), plus typed access to the ones it uses."""

    props: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Mapping[str, object] | None = None) -> BrokerConfig:
        props: dict[str, str] = {}
        if path is not None:
            try:
                props.update(parse_properties(Path(path).read_text()))
            except OSError as exc:
                raise InvalidConfigError(f"cannot read the config file {path}: {exc.strerror}") from None
        for k, v in (overrides or {}).items():
            props[k] = str(v)
        for alias, name in _ALIASES.items():
            if alias in props and name not in props:
                props[name] = props[alias]
        cfg = cls(props)
        cfg.validate()
        return cfg

    def get(self, name: str) -> Any:
        kind, default = BROKER_DEFAULTS[name]
        raw = self.props.get(name)
        return default if raw is None else _convert(name, kind, raw)

    def validate(self) -> None:
        for name in BROKER_DEFAULTS:
            self.get(name)
        self.listeners()
        self.log_config()
        if self.get("num.partitions") < 1:
            raise InvalidConfigError("Invalid value for configuration num.partitions: Value must be at least 1")

    @property
    def node_id(self) -> int:
        return self.get("node.id")

    @property
    def log_dirs(self) -> list[Path]:
        value = self.get("log.dirs")
        return [Path(p) for p in (value if isinstance(value, list) else [value])]

    def listeners(self) -> list[Listener]:
        return parse_listeners(self.get("listeners"))

    def advertised(self) -> list[Listener]:
        """What Metadata tells clients; a wildcard bind address is advertised as loopback."""
        given = self.get("advertised.listeners")
        chosen = parse_listeners(given) if given else self.listeners()
        return [Listener(li.name, "127.0.0.1" if li.host in ("", "0.0.0.0", "::") else li.host, li.port)
                for li in chosen]

    def log_config(self) -> LogConfig:
        """Topic defaults from the broker-level names (`log.segment.bytes` -> `segment.bytes`, ...)."""
        return LogConfig.from_broker_props(self.props)

    def manager_config(self) -> ManagerConfig:
        props = dict(self.props)
        props.setdefault("num.recovery.threads.per.data.dir", str(self.get("num.recovery.threads.per.data.dir")))
        props.setdefault("node.id", str(self.node_id))
        return ManagerConfig.from_broker_props(props)

    def describe(self) -> dict[str, tuple[str, bool]]:
        """name -> (value, is_default) of every broker setting we know, for DescribeConfigs."""
        out: dict[str, tuple[str, bool]] = {}
        for name, (kind, default) in BROKER_DEFAULTS.items():
            if name in self.props:
                out[name] = (self.props[name], False)
            else:
                out[name] = (str(default).lower() if kind == "bool" else str(default), True)
        for k, v in self.props.items():
            out.setdefault(k, (v, False))
        return out
