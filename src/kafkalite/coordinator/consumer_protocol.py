"""The embedded consumer protocol (protocol type "consumer"): subscriptions and assignments as bytes.

The coordinator treats JoinGroup metadata and SyncGroup assignments as opaque, except for two things
Kafka also looks inside them for: which topics a group subscribes to (a Stable consumer group keeps the
offsets of those topics from expiring) and which member owns which partition (the `groups --describe`
view). Every version (0-3) starts with the version-0 fields, so reading that prefix works for all of them,
as Kafka itself does. The encoders exist for tests and tools that play a consumer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kafkalite.coordinator.wire import Reader, Writer
from kafkalite.errors import CorruptRecordError

PROTOCOL_TYPE = "consumer"


def decode_subscription_topics(metadata: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription (any version); raises CorruptRecordError if malformed."""
    r = Reader(metadata)
    version = r.int16("subscription version")
    if version < 0:
        raise CorruptRecordError(f"consumer protocol subscription with negative version {version}")
    return [r.string("topic") for _ in range(r.array_len("topics"))]


def decode_assignment(assignment: bytes) -> dict[str, list[int]]:
    """Partitions by topic of a ConsumerProtocolAssignment (any version); empty bytes = nothing assigned."""
    if not assignment:
        return {}
    r = Reader(assignment)
    version = r.int16("assignment version")
    if version < 0:
        raise CorruptRecordError(f"consumer protocol assignment with negative version {version}")
    out: dict[str, list[int]] = {}
    for _ in range(r.array_len("assigned partitions")):
        topic = r.string("topic")
        out.setdefault(topic, []).extend(r.int32("partition") for _ in range(r.array_len("partitions")))
    return out


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription at version 0 (topics, user data) or 1-3 with empty newer fields."""
    w = Writer().int16(version)
    topics = list(topics)
    w.array_len(len(topics))
    for t in topics:
        w.string(t)
    w.bytes_(user_data)
    if version >= 1:
        w.array_len(0)  # owned partitions
    if version >= 2:
        w.int32(-1)  # generation id
    if version >= 3:
        w.string(None)  # rack id
    return w.getvalue()


def encode_assignment(partitions: Mapping[str, Iterable[int]], user_data: bytes | None = None,
                      version: int = 0) -> bytes:
    w = Writer().int16(version).array_len(len(partitions))
    for topic, parts in partitions.items():
        plist = list(parts)
        w.string(topic).array_len(len(plist))
        for p in plist:
            w.int32(p)
    w.bytes_(user_data)
    return w.getvalue()
