"""Options of Spark's Kafka connector, parsed and checked once, into plain picklable values.

The names, defaults and rules are those of `spark-sql-kafka-0-10` (see docs/spark.md for the
table), so a job written for Kafka runs against kafkalite by changing the format name (and, to read
data dirs in place, `kafka.bootstrap.servers` into `path`). Every mistake is reported as an OptionError naming the
option, the bad value and what would be accepted, before any data is touched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kafkalite.errors import InvalidConfigError, UnsupportedCompressionTypeError
from kafkalite.records.compression import CompressionType
from kafkalite.spark.backend import BackendSpec, TopicPartition
from kafkalite.spark.errors import OptionError
from kafkalite.spark.offsets import EARLIEST, LATEST, from_json, parse_assign
from kafkalite.spark.option_names import warn_unused
from kafkalite.spark.specs import BrokerSpec, EmbeddedSpec
from kafkalite.storage.log_config import LogConfig

# Kafka consumer/producer settings Spark's connector refuses, with its reasons
_FORBIDDEN_KAFKA = {
    "auto.offset.reset": "set the source option startingOffsets instead",
    "key.deserializer": "keys are always read as bytes; use DataFrame operations to deserialize them",
    "value.deserializer": "values are always read as bytes; use DataFrame operations to deserialize them",
    "key.serializer": "keys are always written as bytes; serialize them with DataFrame operations",
    "value.serializer": "values are always written as bytes; serialize them with DataFrame operations",
    "enable.auto.commit": "offsets are tracked by Spark's checkpoint, never committed to Kafka",
    "interceptor.classes": "interceptors are not supported, as in Spark's Kafka connector",
}
_TIME_UNITS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000
DEFAULT_BATCH_BYTES = 64 * 1024
DEFAULT_LOCK_TIMEOUT_MS = 60_000

QueryKind = Literal["batch", "stream"]


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a read starts or ends: earliest, latest, per-partition offsets, or by timestamp."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions to read: exactly one of Kafka's subscribe, subscribePattern, assign."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern or "", topic) is not None
        return any(t == topic for t, _ in self.partitions)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return f"assign={sorted(self.partitions)}"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    backend: BackendSpec
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_strategy: Literal["error", "latest"] = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    check_crcs: bool = True  # Kafka consumer's check.crcs, passed as kafka.check.crcs


@dataclass(frozen=True, slots=True)
class WriteOptions:
    backend: BackendSpec
    topic: str | None = None
    compression: CompressionType = CompressionType.NONE
    batch_bytes: int = DEFAULT_BATCH_BYTES
    num_partitions: int = 1
    topic_configs: Mapping[str, str] = field(default_factory=dict)
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    sink_id: str | None = None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    """Spark option names are case-insensitive; keep the values as given."""
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def parse_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {raw!r}")
    return value == "true"


def parse_positive(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be a positive integer, got {raw!r}")
    return value


def parse_duration_ms(raw: str, name: str) -> int:
    """Spark's time strings: a number with an optional unit (us, ms, s, m/min, h, d; ms by default)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS):
        raise OptionError(f"option {name} must be a duration such as 15m, 30s or 500ms, got {raw!r}")
    return int(int(match.group(1)) * _TIME_UNITS.get(match.group(2) or "ms", 1))


def _check_kafka_params(opts: Mapping[str, str]) -> None:
    for key, why in _FORBIDDEN_KAFKA.items():
        if f"kafka.{key}" in opts:
            raise OptionError(f"Kafka option 'kafka.{key}' is not supported: {why}")


def parse_backend(opts: Mapping[str, str]) -> BackendSpec:
    """`path` (embedded: data dirs) or `kafka.bootstrap.servers` (broker), exactly one."""
    path = opts.get("path")
    servers = opts.get("kafka.bootstrap.servers")
    if path and servers:
        raise OptionError("give either option path (read data dirs directly) or kafka.bootstrap.servers "
                          "(talk to a broker), not both")
    if servers:
        params = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
        return BrokerSpec(servers.strip(), tuple(sorted(params.items())))
    if not path:
        raise OptionError("option path is required: one or more Kafka data dirs (log.dirs), comma-separated "
                          "(or kafka.bootstrap.servers for a broker)")
    dirs = tuple(p.strip() for p in path.split(",") if p.strip())
    if not dirs:
        raise OptionError(f"option path names no directory: {path!r}")
    return EmbeddedSpec(dirs)


def _mode(backend: BackendSpec) -> Literal["embedded", "broker"]:
    return "broker" if isinstance(backend, BrokerSpec) else "embedded"


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise OptionError("exactly one of the options subscribe, subscribePattern and assign must be given "
                          f"(got {len(given)})")
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise OptionError(f"option subscribe names no topic: {raw!r}; give a comma-separated list")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribepattern":
        if not raw.strip():
            raise OptionError("option subscribePattern is empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a valid regular expression ({exc}): {raw!r}") from None
        return Subscription("subscribePattern", pattern=raw)
    return Subscription("assign", partitions=tuple(parse_assign(raw)))


def _timestamp(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name} must be a timestamp in milliseconds since the epoch, got {raw!r}") from None
    if value < 0:
        raise OptionError(f"option {name} must not be negative, got {raw!r}")
    return value


def _by_timestamp(opts: Mapping[str, str], name: str) -> dict[TopicPartition, int] | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    parsed = from_json(raw, name)
    bad = {tp: ts for tp, ts in parsed.items() if ts < 0}
    if bad:
        raise OptionError(f"option {name}: timestamps must not be negative: {bad}")
    return parsed


def _offsets_option(opts: Mapping[str, str], name: str, query: QueryKind, default: str,
                    allowed: tuple[str, ...], allowed_sentinels: tuple[int, ...]) -> OffsetSpec:
    raw = opts.get(name.lower(), default).strip()
    word = raw.lower()
    if word in ("earliest", "latest"):
        if word not in allowed:
            raise OptionError(f"option {name}={raw} is not allowed for {query} queries "
                              f"(use {' or '.join(allowed)}, or JSON offsets)")
        return OffsetSpec(word)  # type: ignore[arg-type]
    offsets = from_json(raw, name)
    for tp, off in offsets.items():
        if off < 0 and off not in allowed_sentinels:
            meaning = {EARLIEST: "earliest", LATEST: "latest"}.get(off, "a negative offset")
            raise OptionError(f"option {name}: {tp[0]}-{tp[1]} is {off} ({meaning}), which is not allowed "
                              f"for {query} queries")
    return OffsetSpec("offsets", offsets=offsets)


def parse_read_options(options: Mapping[str, str], query: QueryKind) -> ReadOptions:
    """Everything a batch or streaming read needs, checked against Spark's rules."""
    opts = _lower(options)
    _check_kafka_params(opts)
    backend = parse_backend(opts)
    warn_unused(opts, "read", _mode(backend))
    subscription = parse_subscription(opts)

    start_ts = _timestamp(opts, "startingTimestamp")
    start_by_ts = _by_timestamp(opts, "startingOffsetsByTimestamp")
    if start_ts is not None:
        starting = OffsetSpec("timestamp", timestamp=start_ts)
    elif start_by_ts is not None:
        starting = OffsetSpec("timestamps", offsets=start_by_ts)
    elif query == "batch":
        starting = _offsets_option(opts, "startingOffsets", query, "earliest", ("earliest",), (EARLIEST,))
    else:
        starting = _offsets_option(opts, "startingOffsets", query, "latest", ("earliest", "latest"),
                                   (EARLIEST, LATEST))

    ending_names = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
    if query == "stream":
        present = [n for n in ending_names if n in opts]
        if present:
            raise OptionError(f"option(s) {', '.join(present)} are not valid in streaming queries (only in batch)")
        ending = OffsetSpec("latest")
    else:
        end_ts = _timestamp(opts, "endingTimestamp")
        end_by_ts = _by_timestamp(opts, "endingOffsetsByTimestamp")
        if end_ts is not None:
            ending = OffsetSpec("timestamp", timestamp=end_ts)
        elif end_by_ts is not None:
            ending = OffsetSpec("timestamps", offsets=end_by_ts)
        else:
            ending = _offsets_option(opts, "endingOffsets", query, "latest", ("latest",), (LATEST,))

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")

    max_per = parse_positive(opts, "maxOffsetsPerTrigger")
    min_per = parse_positive(opts, "minOffsetsPerTrigger")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OptionError(f"minOffsetsPerTrigger ({min_per}) must not exceed maxOffsetsPerTrigger ({max_per})")
    delay = opts.get("maxtriggerdelay")
    return ReadOptions(
        backend=backend,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_strategy=strategy,  # type: ignore[arg-type]
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        include_headers=parse_bool(opts, "includeHeaders", False),
        min_partitions=parse_positive(opts, "minPartitions"),
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=DEFAULT_MAX_TRIGGER_DELAY_MS if delay is None else parse_duration_ms(delay,
                                                                                                  "maxTriggerDelay"),
        check_crcs=parse_bool(opts, "kafka.check.crcs", True),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Sink options: Spark's (path/bootstrap, topic, kafka.* producer settings) plus kafkalite's own."""
    opts = _lower(options)
    _check_kafka_params(opts)
    backend = parse_backend(opts)
    warn_unused(opts, "write", _mode(backend))
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OptionError("option topic is empty")
    codec_name = opts.get("kafka.compression.type", "none")
    try:
        codec = CompressionType.from_name(codec_name)
    except UnsupportedCompressionTypeError:
        raise OptionError(f"option kafka.compression.type must be none, gzip, snappy, lz4 or zstd, "
                          f"got {codec_name!r}") from None
    topic_configs = {k[len("topicconfig."):]: v for k, v in opts.items() if k.startswith("topicconfig.")}
    try:
        log_config = LogConfig.from_props(topic_configs)
    except (InvalidConfigError, ValueError) as exc:
        raise OptionError(f"option topicConfig.*: {exc}") from None
    batch_bytes = parse_positive(opts, "kafka.batch.size") or DEFAULT_BATCH_BYTES
    if batch_bytes > log_config.max_message_bytes:
        raise OptionError(f"option kafka.batch.size ({batch_bytes}) is larger than the topic's max.message.bytes "
                          f"({log_config.max_message_bytes}); batches that large would be refused")
    return WriteOptions(
        backend=backend,
        topic=topic.strip() if topic else None,
        compression=codec,
        batch_bytes=batch_bytes,
        num_partitions=parse_positive(opts, "numPartitions") or 1,
        topic_configs=topic_configs,
        lock_timeout_ms=parse_positive(opts, "lockTimeoutMs") or DEFAULT_LOCK_TIMEOUT_MS,
        sink_id=opts.get("sinkid") or None,
    )
