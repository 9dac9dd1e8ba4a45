"""Consumer lag per partition, as `kafka-consumer-groups.sh --describe` reports it.

The rows are the partitions some member owns plus the partitions the group has committed offsets for;
lag is the log end offset minus the committed offset, unknown ("-" in the tool) when either is missing.
Kept apart from the coordinator so a CLI can compute it from whatever source of log end offsets it has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Owner:
    consumer_id: str
    host: str
    client_id: str


@dataclass(frozen=True, slots=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None = None
    host: str | None = None
    client_id: str | None = None


def compute_lag(
    group: str,
    committed: Mapping[TopicPartition, int],
    log_end_offset: Mapping[TopicPartition, int] | Callable[[str, int], int | None],
    owners: Mapping[TopicPartition, Owner] | None = None,
) -> list[PartitionLag]:
    """One row per partition owned or committed, sorted by topic and partition.

    `log_end_offset` is a mapping or a function (topic, partition) -> LEO or None when unknown
    (a deleted topic, say). A committed offset of -1 counts as none, as in Kafka's tool."""
    owners = owners or {}
    leo_of = log_end_offset if callable(log_end_offset) else (lambda t, p: log_end_offset.get((t, p)))
    rows = []
    for tp in sorted(set(committed) | set(owners)):
        current = committed.get(tp)
        if current is not None and current < 0:
            current = None
        leo = leo_of(*tp)
        lag = leo - current if current is not None and leo is not None else None
        owner = owners.get(tp)
        rows.append(PartitionLag(group, tp[0], tp[1], current, leo, lag,
                                 owner.consumer_id if owner else None, owner.host if owner else None,
                                 owner.client_id if owner else None))
    return rows
