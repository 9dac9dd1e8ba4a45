"""The group coordinator's settings, read from Kafka's broker property names, and the group -> partition map.

Operators move between Kafka and kafkalite with the same `server.properties`, so every setting keeps its
Kafka name and default. `coordinator_key_partition` must match Kafka's exactly: it decides which
`__consumer_offsets` partition holds a group, and a data dir written by Kafka has to load here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafkalite.config import registry
from kafkalite.errors import InvalidConfigError

OFFSETS_TOPIC = "__consumer_offsets"

_PROPS: dict[str, str] = {
    "offsets.topic.num.partitions": "offsets_topic_num_partitions",
    "offsets.topic.segment.bytes": "offsets_topic_segment_bytes",
    "offsets.topic.compression.codec": "offsets_topic_compression_codec",
    "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
    "offsets.commit.timeout.ms": "offsets_commit_timeout_ms",
    "offset.metadata.max.bytes": "offset_metadata_max_bytes",
    "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
    "group.min.session.timeout.ms": "group_min_session_timeout_ms",
    "group.max.session.timeout.ms": "group_max_session_timeout_ms",
    "group.max.size": "group_max_size",
}


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Kafka's GroupCoordinatorConfig; names, defaults and rules come from the config registry.
    `offsets.retention.minutes` is kept in milliseconds."""

    offsets_topic_num_partitions: int = registry.default("offsets.topic.num.partitions")
    offsets_topic_segment_bytes: int = registry.default("offsets.topic.segment.bytes")
    offsets_topic_compression_codec: int = registry.default("offsets.topic.compression.codec")
    offsets_retention_ms: int = registry.default("offsets.retention.minutes") * 60_000
    offsets_retention_check_interval_ms: int = registry.default("offsets.retention.check.interval.ms")
    offsets_commit_timeout_ms: int = registry.default("offsets.commit.timeout.ms")
    offset_metadata_max_bytes: int = registry.default("offset.metadata.max.bytes")
    group_initial_rebalance_delay_ms: int = registry.default("group.initial.rebalance.delay.ms")
    group_min_session_timeout_ms: int = registry.default("group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = registry.default("group.max.session.timeout.ms")
    group_max_size: int = registry.default("group.max.size")
    # Kafka's classicGroupNewMemberJoinTimeoutMs: not a broker property there either.
    new_member_join_timeout_ms: int = 300_000

    @classmethod
    def from_props(cls, props: Mapping[str, object] | None) -> CoordinatorConfig:
        """Take the coordinator's settings out of a dict of broker properties; other keys are ignored."""
        props = props or {}
        values: dict[str, int] = {}
        for name, attr in _PROPS.items():
            if name in props:
                values[attr] = registry.parse(name, props[name])
        if "offsets.retention.minutes" in props:
            values["offsets_retention_ms"] = registry.parse("offsets.retention.minutes",
                                                            props["offsets.retention.minutes"]) * 60_000
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Rules across keys (each key's own rule is the registry's)."""
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise InvalidConfigError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")

    def offsets_topic_configs(self) -> dict[str, object]:
        """Topic configs Kafka gives `__consumer_offsets` when it creates it."""
        return {"cleanup.policy": "compact", "compression.type": "producer",
                "segment.bytes": self.offsets_topic_segment_bytes}


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, in signed 32-bit arithmetic."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_key_partition(group_id: str, num_partitions: int) -> int:
    """Kafka's partitionFor: Utils.abs(groupId.hashCode) % offsets.topic.num.partitions
    (Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
