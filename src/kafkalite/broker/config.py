"""Broker configuration: Kafka's `server.properties` names, checked once at start-up against the registry.

Operators move between Kafka and kafkalite with the same file, so every setting keeps Kafka's name. The
names, types, defaults and rules live in kafkalite.config.registry (one home for each key); this class holds
what the operator gave, refuses what cannot be honoured, and hands the components their parts: topic
defaults to `LogConfig`, the manager's settings to `ManagerConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalite.config import registry
from kafkalite.config.listeners import (
    DEFAULT_PORT,
    Listener,
    check_protocols,
    parse_listeners,
    parse_protocol_map,
)
from kafkalite.config.properties import parse_properties, read_properties
from kafkalite.config.registry import ALIASES, DEFAULT_DATA_DIR, KEYS
from kafkalite.errors import InvalidConfigError
from kafkalite.manager.log_manager import ManagerConfig
from kafkalite.storage.log_config import LogConfig

__all__ = ["DEFAULT_DATA_DIR", "DEFAULT_PORT", "BrokerConfig", "Listener", "parse_listeners", "parse_properties"]


@dataclass(frozen=True)
class BrokerConfig:
    """Every property the broker was given (`props`, aliases resolved), plus typed access to the known ones."""

    props: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path | None = None, overrides: Mapping[str, object] | None = None) -> BrokerConfig:
        """The file (if any) with `overrides` on top, validated; raises InvalidConfigError naming the key."""
        props: dict[str, str] = dict(read_properties(path)) if path is not None else {}
        for k, v in (overrides or {}).items():
            props[k] = str(v)
        for alias, name in ALIASES.items():
            if alias in props:
                if name in props and registry.parse(name, props[name]) != registry.parse(name, props[alias]):
                    raise InvalidConfigError(f"{alias}={props[alias]} and {name}={props[name]} disagree: "
                                             f"set only {name}")
                props[name] = props.pop(alias)
        cfg = cls(props)
        cfg.validate()
        return cfg

    def get(self, name: str) -> Any:
        raw = self.props.get(name)
        return registry.default(name) if raw is None else registry.parse(name, raw)

    def validate(self) -> None:
        """Refuse what cannot be honoured; the first problem found is raised, naming key, value and rule."""
        refusals = registry.security_refusals(self.props)
        if refusals:
            raise InvalidConfigError(refusals[0])
        for name, raw in self.props.items():
            if name in KEYS:
                self.get(name)
            elif (base := registry.listener_override_base(name)) in KEYS:
                registry.parse(base, raw)
        protocols = parse_protocol_map(self.get("listener.security.protocol.map"))
        check_protocols(self.listeners(), protocols, "listeners")
        self._check_sasl(protocols)
        given = self.get("advertised.listeners")
        if given:
            check_protocols(parse_listeners(given, "advertised.listeners"), protocols, "advertised.listeners")
        self._check_log_dirs()
        self.control_plane_listener()  # (refused now, naming the key, rather than when the controller connects)
        if self.get("zookeeper.connect"):
            ib = self.inter_broker_listener()
            if protocols.get(ib.name, "").startswith("SASL_"):
                mech = str(self.get("sasl.mechanism.inter.broker.protocol")).strip().upper()
                if mech not in self.sasl_mechanisms(ib.name):
                    raise InvalidConfigError(
                        f"Invalid value {mech} for configuration sasl.mechanism.inter.broker.protocol: the "
                        f"inter-broker listener {ib.name} offers {','.join(self.sasl_mechanisms(ib.name))}")
        if self.get("group.min.session.timeout.ms") > self.get("group.max.session.timeout.ms"):
            raise InvalidConfigError(f"Invalid value {self.get('group.min.session.timeout.ms')} for configuration "
                                     "group.min.session.timeout.ms: must not exceed group.max.session.timeout.ms "
                                     f"({self.get('group.max.session.timeout.ms')})")
        self.log_config()

    def sasl_mechanisms(self, listener: str) -> list[str]:
        """The SASL mechanisms `listener` offers (sasl.enabled.mechanisms, per listener), upper case."""
        return [m.strip().upper() for m in self.listener_prop(listener, "sasl.enabled.mechanisms")]

    def sasl_jaas_config(self, listener: str, mechanism: str) -> str:
        """The JAAS text for `mechanism` on `listener`: listener.name.<l>.<mechanism>.sasl.jaas.config, else
        listener.name.<l>.sasl.jaas.config, else sasl.jaas.config ("" when none is set)."""
        prefix = f"listener.name.{listener.lower()}."
        for key in (f"{prefix}{mechanism.lower()}.sasl.jaas.config", f"{prefix}sasl.jaas.config"):
            if key in self.props:
                return str(self.props[key])
        return str(self.get("sasl.jaas.config"))

    def _check_sasl(self, protocols: dict[str, str]) -> None:
        """Each SASL_* listener must offer only mechanisms kafkalite speaks (GSSAPI, Kafka's default, and
        OAUTHBEARER are refused by name), and a SASL inter-broker listener must offer the inter-broker one."""
        for li in self.listeners():
            if not protocols.get(li.name, "").startswith("SASL_"):
                continue
            mechanisms = self.sasl_mechanisms(li.name)
            key = f"listener.name.{li.name.lower()}.sasl.enabled.mechanisms"
            key = key if key in self.props else "sasl.enabled.mechanisms"
            if not mechanisms:
                raise InvalidConfigError(f"Invalid value for configuration {key}: listener {li.name} is "
                                         f"{protocols[li.name]} and needs at least one SASL mechanism")
            for m in mechanisms:
                if m not in registry.SASL_MECHANISMS:
                    what = "is not supported by kafkalite" if m in registry.SASL_REFUSED else "is unknown"
                    raise InvalidConfigError(
                        f"Invalid value {','.join(mechanisms)} for configuration {key}: SASL mechanism {m} {what} "
                        f"(listener {li.name}; supported: {', '.join(registry.SASL_MECHANISMS)})")

    def _check_log_dirs(self) -> None:
        dirs = self.get("log.dirs")
        if not dirs:
            raise InvalidConfigError("Invalid value for configuration log.dirs: give at least one directory")
        seen: dict[Path, str] = {}
        for d in dirs:
            resolved = Path(d).expanduser().resolve()
            if resolved in seen:
                raise InvalidConfigError(f"Invalid value {','.join(dirs)} for configuration log.dirs: {d} and "
                                         f"{seen[resolved]} are the same directory ({resolved}); list it once")
            seen[resolved] = d

    def warnings(self) -> list[str]:
        """One line per key that will not do what its author may expect: unknown (with the nearest known
        name), or known to Kafka but without effect here. Logged by `kafkalite serve` at WARNING."""
        out = []
        for name in self.props:
            key = KEYS.get(name) or KEYS.get(registry.listener_override_base(name) or "")
            if key is None:
                out.append(registry.unknown_key_warning(name))
            elif key.effect == "none":
                out.append(registry.no_effect_warning(name))
        if self.get("num.replica.fetchers") != 1:
            out.append(f"num.replica.fetchers={self.get('num.replica.fetchers')} has no effect: kafkalite runs one "
                       "fetcher task per source broker, as num.replica.fetchers=1")
        return out

    @property
    def node_id(self) -> int:
        return self.get("node.id")

    @property
    def log_dirs(self) -> list[Path]:
        return [Path(p) for p in self.get("log.dirs")]

    def listeners(self) -> list[Listener]:
        return parse_listeners(self.get("listeners"))

    def advertised(self) -> list[Listener]:
        """What Metadata tells clients; a wildcard bind address is advertised as loopback."""
        given = self.get("advertised.listeners")
        chosen = parse_listeners(given, "advertised.listeners") if given else self.listeners()
        return [Listener(li.name, "127.0.0.1" if li.host in ("", "0.0.0.0", "::") else li.host, li.port)
                for li in chosen]

    def security_protocol(self, listener_name: str) -> str:
        """The protocol a listener speaks (listener.security.protocol.map; validate() checked it is mapped)."""
        return parse_protocol_map(self.get("listener.security.protocol.map"))[listener_name]

    def listener_prop(self, listener: str, name: str) -> Any:
        """`name` for one listener: Kafka's per-listener override `listener.name.<listener lower-case>.<name>`
        (ListenerName.configPrefix) when set, else the broker-wide value."""
        raw = self.props.get(f"listener.name.{listener.lower()}.{name}")
        return self.get(name) if raw is None else registry.parse(name, raw)

    def inter_broker_listener(self) -> Listener:
        """The advertised listener other brokers reach this one on (Kafka's interBrokerListenerName):
        inter.broker.listener.name, else the listener named as security.inter.broker.protocol. Refused,
        naming the key, when it is not advertised (as Kafka refuses at start-up)."""
        name = self.get("inter.broker.listener.name")
        key = "inter.broker.listener.name"
        if not name:
            name, key = self.get("security.inter.broker.protocol").upper(), "security.inter.broker.protocol"
        adv = self.advertised()
        for li in adv:
            if li.name == name:
                return li
        if not self.get("zookeeper.connect") and not self.get("inter.broker.listener.name"):
            return adv[0]  # a single broker, its own controller, reaches itself on its first listener
        raise InvalidConfigError(f"Invalid value {name} for configuration {key}: the inter-broker listener must be "
                                 f"one of advertised.listeners ({', '.join(li.name for li in adv)})")

    def control_plane_listener(self) -> Listener:
        """The advertised listener the controller reaches this broker on (Kafka's controlPlaneListenerName, KIP-291):
        control.plane.listener.name, else the inter-broker listener. Refused, naming the key, when it is not
        advertised or is the inter-broker listener itself (as Kafka refuses at start-up)."""
        name = self.get("control.plane.listener.name")
        inter_broker = self.inter_broker_listener()
        if not name:
            return inter_broker
        if name == inter_broker.name:
            raise InvalidConfigError(f"Invalid value {name} for configuration control.plane.listener.name: it must "
                                     "not be the inter-broker listener (leave it unset to share that listener)")
        for li in self.advertised():
            if li.name == name:
                return li
        raise InvalidConfigError(f"Invalid value {name} for configuration control.plane.listener.name: it must be "
                                 f"one of advertised.listeners ({', '.join(li.name for li in self.advertised())})")

    def log_config(self) -> LogConfig:
        """Topic defaults from the broker-level names (`log.segment.bytes` -> `segment.bytes`, ...)."""
        return LogConfig.from_broker_props(self.props)

    def manager_config(self) -> ManagerConfig:
        return ManagerConfig.from_broker_props(self.props)

    def describe(self) -> dict[str, tuple[str, bool]]:
        """name -> (value, is_default) of every broker setting in use, for DescribeConfigs: the keys kafkalite
        reads (those with a default of their own) and every key the operator set."""
        out: dict[str, tuple[str, bool]] = {}
        for name, key in KEYS.items():
            if name in self.props:
                out[name] = (self.props[name], False)
            elif key.effect == "used" and key.default is not None:
                out[name] = (_text(key.default), True)
        for k, v in self.props.items():
            out.setdefault(k, (v, False))
        return out


def _text(value: Any) -> str:
    """A default as Kafka shows it: booleans in lower case, lists comma-separated."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple, frozenset)):
        return ",".join(sorted(value) if isinstance(value, frozenset) else value)
    return str(value)
