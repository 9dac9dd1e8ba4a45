"""The records of `__consumer_offsets`, byte for byte as Kafka's group coordinator writes them.

Every record is a key and a value, each starting with an int16 version. The key's version says what the
record is (Kafka's `coordinator-key` schemas: 0 and 1 = offset commit, 2 = classic group metadata,
3 and up = the KIP-848 consumer, share and streams group records this coordinator ignores). The value's
version picks its layout (OffsetCommitValue 0-4, GroupMetadataValue 0-4, flexible from 4). A null value
is a tombstone: the cleaner drops the key once `delete.retention.ms` has passed.

What Kafka writes, and so what this module writes: offset commit keys at version 1; offset commit values
at version 3, or version 1 when the commit carried a retention time (OffsetCommit v2-v4), the only layout
with an expire timestamp; group metadata keys at version 2 and values at version 3. Every version is read,
so a data dir written by any Kafka since 0.10 loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkalite.coordinator.wire import Reader, Writer
from kafkalite.errors import CorruptRecordError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OtherKey:
    """A record type of a newer group protocol (consumer/share/streams groups); loading skips it."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = NO_TIMESTAMP
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp: int = NO_TIMESTAMP  # only version 1 stores it


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = NO_TIMESTAMP
    members: list[MemberMetadata] = field(default_factory=list)


# --- keys --------------------------------------------------------------------------------------------


def encode_offset_commit_key(key: OffsetCommitKey) -> bytes:
    return (Writer().int16(OFFSET_COMMIT_KEY_VERSION).string(key.group).string(key.topic).int32(key.partition)
            .getvalue())


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return Writer().int16(GROUP_METADATA_KEY_VERSION).string(key.group).getvalue()


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | OtherKey:
    r = Reader(data)
    version = r.int16("key version")
    if version in (0, 1):
        return OffsetCommitKey(r.string("group"), r.string("topic"), r.int32("partition"))
    if version == 2:
        return GroupMetadataKey(r.string("group"))
    if version < 0:
        raise CorruptRecordError(f"__consumer_offsets key with negative version {version}")
    return OtherKey(version)


# --- offset commit values ------------------------------------------------------------------------------


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """Kafka's choice: version 1 when an expire timestamp must be kept, else version 3."""
    if value.expire_timestamp != NO_TIMESTAMP:
        return OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY
    return OFFSET_COMMIT_VALUE_VERSION


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    v = offset_commit_value_version(value) if version is None else version
    if not 0 <= v <= 4:
        raise ValueError(f"OffsetCommitValue has versions 0-4, not {v}")
    flexible = v >= 4
    w = Writer().int16(v).int64(value.offset)
    if v >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata, compact=flexible).int64(value.commit_timestamp)
    if v == 1:
        w.int64(value.expire_timestamp)
    if flexible:
        w.no_tagged_fields()
    return w.getvalue()


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    r = Reader(data)
    v = r.int16("offset commit value version")
    if not 0 <= v <= 4:
        raise CorruptRecordError(f"unknown OffsetCommitValue version {v}")
    flexible = v >= 4
    offset = r.int64("offset")
    leader_epoch = r.int32("leaderEpoch") if v >= 3 else NO_LEADER_EPOCH
    metadata = r.string("metadata", compact=flexible)
    commit_ts = r.int64("commitTimestamp")
    expire_ts = r.int64("expireTimestamp") if v == 1 else NO_TIMESTAMP
    if flexible:
        r.skip_tagged_fields()
    return OffsetCommitValue(offset, metadata, commit_ts, leader_epoch, expire_ts)


# --- group metadata values -----------------------------------------------------------------------------


def encode_group_metadata_value(value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue has versions 0-4, not {version}")
    c = version >= 4
    w = Writer().int16(version)
    w.string(value.protocol_type, compact=c).int32(value.generation)
    w.string(value.protocol, compact=c).string(value.leader, compact=c)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    w.array_len(len(value.members), compact=c)
    for m in value.members:
        w.string(m.member_id, compact=c)
        if version >= 3:
            w.string(m.group_instance_id, compact=c)
        w.string(m.client_id, compact=c).string(m.client_host, compact=c)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription, compact=c).bytes_(m.assignment, compact=c)
        if c:
            w.no_tagged_fields()
    if c:
        w.no_tagged_fields()
    return w.getvalue()


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = Reader(data)
    v = r.int16("group metadata value version")
    if not 0 <= v <= 4:
        raise CorruptRecordError(f"unknown GroupMetadataValue version {v}")
    c = v >= 4
    protocol_type = r.string("protocolType", compact=c)
    generation = r.int32("generation")
    protocol = r.nullable_string("protocol", compact=c)
    leader = r.nullable_string("leader", compact=c)
    state_ts = r.int64("currentStateTimestamp") if v >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(r.array_len("members", compact=c)):
        member_id = r.string("memberId", compact=c)
        instance_id = r.nullable_string("groupInstanceId", compact=c) if v >= 3 else None
        client_id = r.string("clientId", compact=c)
        client_host = r.string("clientHost", compact=c)
        rebalance_timeout = r.int32("rebalanceTimeout") if v >= 1 else -1
        session_timeout = r.int32("sessionTimeout")
        subscription = r.bytes_("subscription", compact=c)
        assignment = r.bytes_("assignment", compact=c)
        if c:
            r.skip_tagged_fields()
        members.append(MemberMetadata(member_id, client_id, client_host, session_timeout, rebalance_timeout,
                                      subscription, assignment, instance_id))
    if c:
        r.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, members)
