"""Rebuilding groups and offsets from `__consumer_offsets` records (Kafka's coordinator replay).

Replay is a fold over the log: the latest group metadata record of a group is its state (a Stable group
with its members and assignments, or an Empty one), the latest offset commit record of a partition is its
committed offset, and tombstones delete. Offsets committed without a group record create a "simple"
group, as in Kafka. Records of a transaction (TxnOffsetCommit) wait for its end marker. Unknown record
types (newer group protocols) and undecodable records are skipped with a warning, never fatal: one bad
record must not keep every group of a partition from loading.
"""

from __future__ import annotations

import logging

from kafkalite.clock import Clock
from kafkalite.coordinator.group import ClassicGroup, GroupState, Member
from kafkalite.coordinator.offsets import OffsetAndMetadata, OffsetStore
from kafkalite.coordinator.offsets_topic import LoadedRecord, TxnMarker
from kafkalite.coordinator.records import (
    NO_TIMESTAMP,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from kafkalite.errors import KafkaliteError

log = logging.getLogger("kafkalite.coordinator")


def group_from_record(group_id: str, value: GroupMetadataValue, clock: Clock) -> ClassicGroup:
    """A group as its last GroupMetadataValue describes it: Stable with members, else Empty."""
    group = ClassicGroup(group_id, clock, state=GroupState.STABLE if value.members else GroupState.EMPTY,
                         generation_id=value.generation, protocol_type=value.protocol_type or None,
                         protocol_name=value.protocol, leader_id=value.leader)
    group.current_state_timestamp = None if value.current_state_timestamp == NO_TIMESTAMP \
        else value.current_state_timestamp
    for m in value.members:
        rebalance = m.session_timeout if m.rebalance_timeout == -1 else m.rebalance_timeout
        member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, rebalance, m.session_timeout,
                        value.protocol_type, [(value.protocol or "", m.subscription)], m.assignment)
        group.add(member)
    group.protocol_type = value.protocol_type or None
    group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
    group.subscribed_topics = group.compute_subscribed_topics()
    return group


class Replayer:
    """Applies records, in log order, to the groups and offsets of a coordinator."""

    def __init__(self, groups: dict[str, ClassicGroup], offsets: OffsetStore, clock: Clock) -> None:
        self.groups = groups
        self.offsets = offsets
        self.clock = clock
        self._pending: dict[int, list[tuple[OffsetCommitKey, OffsetAndMetadata | None]]] = {}
        self.records = 0
        self.skipped = 0

    def apply(self, item: LoadedRecord | TxnMarker) -> None:
        if isinstance(item, TxnMarker):
            pending = self._pending.pop(item.producer_id, [])
            if item.commit:
                for key, om in pending:
                    self._replay_offset(key, om)
            return
        self.records += 1
        try:
            self._apply_record(item)
        except KafkaliteError as exc:
            self.skipped += 1
            log.warning("Skipping undecodable __consumer_offsets record at offset %d: %s", item.offset, exc)

    def _apply_record(self, item: LoadedRecord) -> None:
        if item.key is None:
            raise KafkaliteError("record without a key")
        key = decode_key(item.key)
        if isinstance(key, OffsetCommitKey):
            om = None if item.value is None else OffsetAndMetadata.from_value(decode_offset_commit_value(item.value))
            if item.transactional and item.producer_id >= 0:
                self._pending.setdefault(item.producer_id, []).append((key, om))
            else:
                self._replay_offset(key, om)
        elif isinstance(key, GroupMetadataKey):
            if item.value is None:
                self.groups.pop(key.group, None)
            else:
                self.groups[key.group] = group_from_record(key.group, decode_group_metadata_value(item.value),
                                                           self.clock)
        # else: a record of a newer group protocol; kafkalite runs classic groups only

    def _replay_offset(self, key: OffsetCommitKey, om: OffsetAndMetadata | None) -> None:
        if om is not None and key.group not in self.groups:
            self.groups[key.group] = ClassicGroup(key.group, self.clock)  # a simple group: commits only
        self.offsets.replay(key.group, key.topic, key.partition, om)
