"""Committed offsets in memory: the materialized view of the offset commit records of `__consumer_offsets`.

The log is the truth; this store is what replaying it yields (the last value per group/topic/partition,
tombstones removing entries), so a restart rebuilds exactly what clients last committed. Both live
commits and loading go through `replay`, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kafkalite.coordinator.records import NO_LEADER_EPOCH, NO_TIMESTAMP, OffsetCommitValue

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """One committed offset (Kafka's OffsetAndMetadata); -1 means "not set" for epoch and expiry."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp: int = NO_TIMESTAMP

    @classmethod
    def from_value(cls, value: OffsetCommitValue) -> OffsetAndMetadata:
        return cls(value.offset, value.metadata, value.commit_timestamp, value.leader_epoch, value.expire_timestamp)

    def to_value(self) -> OffsetCommitValue:
        return OffsetCommitValue(self.offset, self.metadata, self.commit_timestamp, self.leader_epoch,
                                 self.expire_timestamp)

    def is_expired(self, now_ms: int, retention_ms: int, base_timestamp: Callable[[OffsetAndMetadata], int]) -> bool:
        """Kafka's OffsetExpirationConditionImpl: an explicit expire timestamp (commits of OffsetCommit
        v2-v4 with a retention time) wins; otherwise retention counts from the group's chosen base."""
        if self.expire_timestamp != NO_TIMESTAMP:
            return now_ms >= self.expire_timestamp
        return now_ms - base_timestamp(self) >= retention_ms


class OffsetStore:
    """group -> (topic, partition) -> OffsetAndMetadata, in insertion order (OffsetFetch "all" order)."""

    def __init__(self) -> None:
        self._by_group: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    def replay(self, group: str, topic: str, partition: int, value: OffsetAndMetadata | None) -> None:
        """Apply one offset commit record; None is a tombstone."""
        tp = (topic, partition)
        if value is not None:
            self._by_group.setdefault(group, {})[tp] = value
            return
        offsets = self._by_group.get(group)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self._by_group[group]

    def get(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        offsets = self._by_group.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def group_offsets(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return dict(self._by_group.get(group, {}))

    def has_offsets(self, group: str) -> bool:
        return bool(self._by_group.get(group))

    def groups(self) -> list[str]:
        return list(self._by_group)

    def __iter__(self) -> Iterator[tuple[str, TopicPartition, OffsetAndMetadata]]:
        for group, offsets in list(self._by_group.items()):
            for tp, om in list(offsets.items()):
                yield group, tp, om

    def __len__(self) -> int:
        return sum(len(o) for o in self._by_group.values())
