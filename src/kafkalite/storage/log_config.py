"""Topic-level configuration (Kafka's LogConfig): names, defaults and validation declared once, as data.

Users and tools speak Kafka's names (`segment.bytes`, `retention.ms`, ...); the code reads snake_case
fields. The table below is the single source for both, for broker-level defaults
(`log.segment.bytes`, ...) and for DescribeConfigs later.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from kafkalite.errors import InvalidConfigError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1
COMPRESSION_TYPES = ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    kind: str  # "int", "long", "double", "bool", "str", "list"
    default: Any
    validate: Callable[[Any], str | None]
    doc: str
    broker: tuple[str, ...] = ()


def at_least(lo: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"Value must be at least {lo}"


def between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"Value must be between {lo} and {hi}"


def one_of(*allowed: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in allowed else f"String must be one of: {', '.join(allowed)}"


def _policy(v: Any) -> str | None:
    bad = [p for p in v if p not in ("delete", "compact")]
    return f"Invalid cleanup.policy {sorted(bad)}; allowed: delete, compact" if bad or not v else None


def _any(_: Any) -> str | None:
    return None


CONFIG_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef("segment.bytes", "int", 1073741824, between(14, INT_MAX), "segment file size", ("log.segment.bytes",)),
    ConfigDef("segment.ms", "long", 604800000, at_least(1), "roll after this long",
              ("log.roll.ms", "log.roll.hours")),
    ConfigDef("segment.jitter.ms", "long", 0, at_least(0), "max random roll jitter",
              ("log.roll.jitter.ms", "log.roll.jitter.hours")),
    ConfigDef("segment.index.bytes", "int", 10485760, between(4, INT_MAX), "index file size",
              ("log.index.size.max.bytes",)),
    ConfigDef("index.interval.bytes", "int", 4096, between(0, INT_MAX), "bytes between index entries",
              ("log.index.interval.bytes",)),
    ConfigDef("retention.ms", "long", 604800000, at_least(-1), "time retention, -1 unlimited",
              ("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    ConfigDef("retention.bytes", "long", -1, _any, "size retention per partition, -1 unlimited",
              ("log.retention.bytes",)),
    ConfigDef("cleanup.policy", "list", frozenset({"delete"}), _policy, "delete and/or compact",
              ("log.cleanup.policy",)),
    ConfigDef("min.cleanable.dirty.ratio", "double", 0.5, between(0, 1), "dirty ratio before cleaning",
              ("log.cleaner.min.cleanable.ratio",)),
    ConfigDef("delete.retention.ms", "long", 86400000, at_least(0), "tombstone retention",
              ("log.cleaner.delete.retention.ms",)),
    ConfigDef("min.compaction.lag.ms", "long", 0, at_least(0), "min time uncompacted",
              ("log.cleaner.min.compaction.lag.ms",)),
    ConfigDef("max.compaction.lag.ms", "long", LONG_MAX, at_least(1), "max time uncompacted",
              ("log.cleaner.max.compaction.lag.ms",)),
    ConfigDef("file.delete.delay.ms", "long", 60000, at_least(0), "delay before deleting files",
              ("log.segment.delete.delay.ms",)),
    ConfigDef("flush.messages", "long", LONG_MAX, at_least(1), "fsync every N messages",
              ("log.flush.interval.messages",)),
    ConfigDef("flush.ms", "long", LONG_MAX, at_least(0), "fsync every N ms", ("log.flush.interval.ms",)),
    ConfigDef("max.message.bytes", "int", 1048588, at_least(0), "largest batch", ("message.max.bytes",)),
    ConfigDef("message.timestamp.type", "str", "CreateTime", one_of(*TIMESTAMP_TYPES), "CreateTime or LogAppendTime",
              ("log.message.timestamp.type",)),
    ConfigDef("message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0), "oldest timestamp accepted",
              ("log.message.timestamp.before.max.ms",)),
    ConfigDef("message.timestamp.after.max.ms", "long", LONG_MAX, at_least(0), "newest timestamp accepted",
              ("log.message.timestamp.after.max.ms",)),
    ConfigDef("preallocate", "bool", False, _any, "preallocate segment files", ("log.preallocate",)),
    ConfigDef("compression.type", "str", "producer", one_of(*COMPRESSION_TYPES), "final compression",
              ("compression.type",)),
    ConfigDef("min.insync.replicas", "int", 1, at_least(1), "replicas for acks=all", ("min.insync.replicas",)),
    ConfigDef("unclean.leader.election.enable", "bool", False, _any, "allow out-of-sync leaders",
              ("unclean.leader.election.enable",)),
)
CONFIGS_BY_NAME = {d.name: d for d in CONFIG_DEFS}
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?(-IV\d+)?$")


def _version(v: Any) -> str | None:
    return None if _VERSION.match(v) else f"Version `{v}` is not a valid version"


# Topic configs Kafka 3.x still accepts though they change nothing (Kafka 4.0 removed them): accepted with a
# WARNING naming them, kept among the topic's overrides and shown by DescribeConfigs, never read.
DEPRECATED_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef("message.format.version", "str", "3.0-IV1", _version,
              "[DEPRECATED] deprecated since Kafka 3.0 (KIP-724) and without effect: kafkalite always writes "
              "record batches in message format v2"),
)
DEPRECATED_BY_NAME = {d.name: d for d in DEPRECATED_DEFS}


def topic_config_def(name: str) -> ConfigDef | None:
    """The declaration of a topic config Kafka accepts, deprecated ones included; None for an unknown name."""
    return CONFIGS_BY_NAME.get(name) or DEPRECATED_BY_NAME.get(name)


def deprecation_warnings(props: Mapping[str, object]) -> list[str]:
    """One sentence per deprecated config in `props`: what the broker logs when a topic is given one."""
    return [f"Topic config {k}={props[k]} is {DEPRECATED_BY_NAME[k].doc.removeprefix('[DEPRECATED] ')}"
            for k in props if k in DEPRECATED_BY_NAME]
_FIELD = {d.name: d.name.replace(".", "_") for d in CONFIG_DEFS}
# Broker keys that give a topic default in another unit: key -> (milliseconds per unit, Kafka's default).
# The `*.ms` synonyms of these have no default of their own in Kafka (null): the coarser key decides.
BROKER_UNIT_KEYS: dict[str, tuple[int, int | None]] = {
    "log.roll.hours": (3_600_000, 168), "log.roll.jitter.hours": (3_600_000, 0),
    "log.retention.hours": (3_600_000, 168), "log.retention.minutes": (60_000, None),
}
BROKER_UNIT_MINIMUM = {"log.roll.hours": 1, "log.roll.jitter.hours": 0}
_HOURS = {k for k, (unit, _) in BROKER_UNIT_KEYS.items() if unit == 3_600_000}
_MINUTES = {k for k, (unit, _) in BROKER_UNIT_KEYS.items() if unit == 60_000}
BROKER_TO_TOPIC = {b: d.name for d in CONFIG_DEFS for b in d.broker}


def parse_value(d: ConfigDef, raw: Any, name: str | None = None) -> Any:
    """`raw` (text from a file or request, or a Python value) as `d.kind`, checked by `d.validate`; errors use
    Kafka's wording and name `name` (a broker-level synonym) when given, else the topic key."""
    def bad(why: str) -> InvalidConfigError:
        return InvalidConfigError(f"Invalid value {raw} for configuration {name or d.name}: {why}")

    value: int | float | bool | frozenset[str] | str
    if d.kind in ("int", "long"):
        if isinstance(raw, bool):
            raise bad("Expected value to be a number")
        try:
            value = int(raw.strip()) if isinstance(raw, str) else int(raw)
        except (TypeError, ValueError):
            raise bad("Expected value to be a number") from None
        if d.kind == "int" and not -(1 << 31) <= value <= INT_MAX:
            raise bad("Expected value to be a 32-bit integer")
        if not -(1 << 63) <= value <= LONG_MAX:
            raise bad("Expected value to be a 64-bit integer")
    elif d.kind == "double":
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise bad("Expected value to be a number") from None
        if value != value:
            raise bad("Expected value to be a number")
    elif d.kind == "bool":
        if isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            value = raw.strip().lower() == "true"
        else:
            raise bad("Expected value to be either true or false")
    elif d.kind == "list":
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        value = frozenset(str(x).strip().lower() for x in items if str(x).strip())
    else:
        value = str(raw).strip()
    why = d.validate(value)
    if why:
        raise bad(why)
    return value


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: frozenset = frozenset({"delete"})
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    preallocate: bool = False
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_props(cls, props: Mapping[str, object] | None = None, defaults: LogConfig | None = None, *,
                   ignore_unknown: bool = False) -> LogConfig:
        """Parse Kafka-named topic configs on top of `defaults` (Kafka's defaults when None)."""
        base = defaults or cls()
        changes: dict[str, Any] = {}
        for key, raw in (props or {}).items():
            d = CONFIGS_BY_NAME.get(key)
            if d is None:
                if key in DEPRECATED_BY_NAME:
                    parse_value(DEPRECATED_BY_NAME[key], raw)  # checked as Kafka checks it, then without effect
                    continue
                if ignore_unknown:
                    continue
                raise InvalidConfigError(f"Unknown topic config name: {key}")
            changes[_FIELD[key]] = parse_value(d, raw)
        return replace(base, **changes)

    @classmethod
    def from_broker_props(cls, props: Mapping[str, object]) -> LogConfig:
        """Topic defaults from server.properties keys; `*.ms` wins over `*.minutes` over `*.hours`."""
        chosen: dict[str, tuple[int, Any]] = {}
        for key, raw in props.items():
            topic_key = BROKER_TO_TOPIC.get(key)
            if topic_key is None:
                continue
            d = CONFIGS_BY_NAME[topic_key]
            rank = 2 if key in _HOURS else 1 if key in _MINUTES else 0
            value = raw
            if rank:
                unit = 3_600_000 if rank == 2 else 60_000
                n = parse_value(ConfigDef(key, "long", 0, _any, ""), raw)
                value = -1 if n < 0 else n * unit
            if topic_key not in chosen or rank < chosen[topic_key][0]:
                chosen[topic_key] = (rank, parse_value(d, value, key if not rank else None))
        return replace(cls(), **{_FIELD[k]: v for k, (_, v) in chosen.items()})

    def with_overrides(self, **kafka_named: object) -> LogConfig:
        return LogConfig.from_props({k.replace("_", "."): v for k, v in kafka_named.items()}, self)

    def to_props(self) -> dict[str, str]:
        out = {}
        for d in CONFIG_DEFS:
            v = getattr(self, _FIELD[d.name])
            if isinstance(v, bool):
                out[d.name] = str(v).lower()
            elif isinstance(v, frozenset):
                out[d.name] = ",".join(sorted(v))
            else:
                out[d.name] = str(v)
        return out

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """A compacted topic must roll at least every max.compaction.lag.ms so old data can be cleaned."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def random_segment_jitter(self, rng: random.Random) -> int:
        if self.segment_jitter_ms == 0:
            return 0
        return abs(rng.getrandbits(31)) % min(self.segment_jitter_ms, self.segment_ms)


assert {f.name for f in fields(LogConfig)} == set(_FIELD.values())
