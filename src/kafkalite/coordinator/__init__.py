"""Kafka's group coordinator for classic consumer groups, with offsets in `__consumer_offsets`."""

from kafkalite.coordinator.config import (
    OFFSETS_TOPIC,
    CoordinatorConfig,
    coordinator_key_partition,
    java_string_hash,
)
from kafkalite.coordinator.coordinator import GROUP_API_KEYS, GroupCoordinator
from kafkalite.coordinator.errors import CoordinatorError
from kafkalite.coordinator.group import ClassicGroup, GroupState, Member
from kafkalite.coordinator.lag import PartitionLag, compute_lag
from kafkalite.coordinator.offsets import OffsetAndMetadata

__all__ = [
    "GROUP_API_KEYS",
    "OFFSETS_TOPIC",
    "ClassicGroup",
    "CoordinatorConfig",
    "CoordinatorError",
    "GroupCoordinator",
    "GroupState",
    "Member",
    "OffsetAndMetadata",
    "PartitionLag",
    "compute_lag",
    "coordinator_key_partition",
    "java_string_hash",
]
