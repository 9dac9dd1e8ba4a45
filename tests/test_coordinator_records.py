"""`__consumer_offsets` record bytes against vectors assembled by hand from Kafka's message schemas
(OffsetCommitKey/Value, GroupMetadataKey/Value in group-coordinator/src/main/resources/common/message),
plus the group -> partition hash and the consumer protocol prefix."""

from __future__ import annotations

import asyncio

import pytest

from kafkalite.clock import MockClock
from kafkalite.coordinator import OFFSETS_TOPIC, coordinator_key_partition, java_string_hash
from kafkalite.coordinator.consumer_protocol import (
    decode_assignment,
    decode_subscription_topics,
    encode_assignment,
    encode_subscription,
)
from kafkalite.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    OtherKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from kafkalite.errors import CorruptRecordError
from kafkalite.storage.log import FetchIsolation
from tests.support import T0
from tests.support.coordinator import COMMIT, coordinator, manager

H = bytes.fromhex
T0_BYTES = "0000018bcfe56800"  # 1700000000000 as int64

# OffsetCommitKey, key version 1: group "grp", topic "orders", partition 3
OFFSET_KEY = H("0001" "0003" "677270" "0006" "6f7264657273" "00000003")
# OffsetCommitValue v3: offset 42, leaderEpoch 5, metadata "m", commitTimestamp T0
OFFSET_VALUE_V3 = H("0003" "000000000000002a" "00000005" "0001" "6d" + T0_BYTES)
# OffsetCommitValue v1: offset 7, metadata "", commitTimestamp T0, expireTimestamp T0 + 123456
OFFSET_VALUE_V1 = H("0001" "0000000000000007" "0000" + T0_BYTES + "0000018bcfe74a40")
# GroupMetadataKey, key version 2: group "grp"
GROUP_KEY = H("0002" "0003" "677270")
# GroupMetadataValue v3: "consumer", generation 1, protocol "range", leader "m1", currentStateTimestamp T0,
# one member: id "m1", no instance id, client "c", host "/127.0.0.1", rebalance 300000, session 45000,
# subscription b"S", assignment b"A"
GROUP_VALUE_V3 = H(
    "0003" "0008" "636f6e73756d6572" "00000001" "0005" "72616e6765" "0002" "6d31" + T0_BYTES + "00000001"
    "0002" "6d31" "ffff" "0001" "63" "000a" "2f3132372e302e302e31" "000493e0" "0000afc8" "00000001" "53"
    "00000001" "41"
)
MEMBER = MemberMetadata("m1", "c", "/127.0.0.1", 45000, 300000, b"S", b"A")


def test_offset_commit_key_and_values_match_kafka_layout():
    assert encode_offset_commit_key(OffsetCommitKey("grp", "orders", 3)) == OFFSET_KEY
    assert encode_offset_commit_value(OffsetCommitValue(42, "m", T0, leader_epoch=5)) == OFFSET_VALUE_V3
    # a commit with a retention time (OffsetCommit v2-v4) is the only one kept at version 1
    assert encode_offset_commit_value(OffsetCommitValue(7, "", T0, expire_timestamp=T0 + 123456)) == OFFSET_VALUE_V1
    assert decode_key(OFFSET_KEY) == OffsetCommitKey("grp", "orders", 3)
    assert decode_offset_commit_value(OFFSET_VALUE_V3) == OffsetCommitValue(42, "m", T0, 5)
    assert decode_offset_commit_value(OFFSET_VALUE_V1) == OffsetCommitValue(7, "", T0, -1, T0 + 123456)


def test_group_metadata_key_and_value_match_kafka_layout():
    value = GroupMetadataValue("consumer", 1, "range", "m1", T0, [MEMBER])
    assert encode_group_metadata_key(GroupMetadataKey("grp")) == GROUP_KEY
    assert encode_group_metadata_value(value) == GROUP_VALUE_V3
    assert decode_key(GROUP_KEY) == GroupMetadataKey("grp")
    assert decode_group_metadata_value(GROUP_VALUE_V3) == value


def test_every_older_and_flexible_version_decodes():
    # OffsetCommitValue v0 and v2: offset, metadata, commitTimestamp
    for v in ("0000", "0002"):
        assert decode_offset_commit_value(H(v + "0000000000000009" "0002" "6869" + T0_BYTES)) == \
            OffsetCommitValue(9, "hi", T0)
    # v4 is flexible: compact string (length + 1) and an empty tagged-field section
    v4 = H("0004" "000000000000002a" "00000005" "02" "6d" + T0_BYTES + "00")
    assert decode_offset_commit_value(v4) == OffsetCommitValue(42, "m", T0, 5)
    assert encode_offset_commit_value(OffsetCommitValue(42, "m", T0, 5), version=4) == v4
    # v4 with an unknown tagged field (tag 0, 2 bytes) still reads
    assert decode_offset_commit_value(v4[:-1] + H("01" "00" "02" "abcd")) == OffsetCommitValue(42, "m", T0, 5)
    # GroupMetadataValue v0: no rebalance timeout, no state timestamp, no instance id
    v0 = H("0000" "0008" "636f6e73756d6572" "00000003" "0005" "72616e6765" "0002" "6d31" "00000001"
           "0002" "6d31" "0001" "63" "0001" "68" "00002710" "00000000" "00000000")
    g0 = decode_group_metadata_value(v0)
    assert (g0.generation, g0.protocol, g0.current_state_timestamp) == (3, "range", -1)
    assert g0.members == [MemberMetadata("m1", "c", "h", 10000, -1, b"", b"")]
    # GroupMetadataValue v4, an empty group: compact strings, null protocol and leader, tagged fields
    v4g = H("0004" "09" "636f6e73756d6572" "00000002" "00" "00" + T0_BYTES + "01" "00")
    assert decode_group_metadata_value(v4g) == GroupMetadataValue("consumer", 2, None, None, T0, [])
    assert encode_group_metadata_value(GroupMetadataValue("consumer", 2, None, None, T0), version=4) == v4g
    # key versions 3+ belong to newer group protocols
    assert decode_key(H("0003" "0003" "677270")) == OtherKey(3)
    with pytest.raises(CorruptRecordError):
        decode_offset_commit_value(OFFSET_VALUE_V3[:-3])
    with pytest.raises(CorruptRecordError):
        decode_offset_commit_value(H("0009") + OFFSET_VALUE_V3[2:])


def test_group_partition_is_javas_string_hash():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Hello World") == -862545276
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair
    assert coordinator_key_partition("Hello World", 50) == 862545276 % 50
    assert coordinator_key_partition("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert coordinator_key_partition("hello", 50) == 99162322 % 50


def test_consumer_protocol_prefix_reads_every_version():
    for v in range(4):
        assert decode_subscription_topics(encode_subscription(["a", "b"], b"ud", version=v)) == ["a", "b"]
        assert decode_assignment(encode_assignment({"a": [0, 2]}, version=v)) == {"a": [0, 2]}
    # the bytes of a v0 subscription: version, [topics], user data (null)
    assert encode_subscription(["t"]) == H("0000" "00000001" "0001" "74" "ffffffff")
    assert decode_assignment(b"") == {}


def test_commit_writes_kafkas_records_in_one_batch(tmp_path):
    async def run():
        lm = manager(tmp_path)
        coord = coordinator(lm, MockClock(T0))
        await coord.load()
        resp = await coord.handle(COMMIT, 8, {
            "group_id": "grp", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "orders", "partitions": [
                {"partition_index": 3, "committed_offset": 42, "committed_leader_epoch": 5, "committed_metadata": "m"},
                {"partition_index": 4, "committed_offset": 43, "committed_leader_epoch": -1,
                 "committed_metadata": None}]}]}, "c", "127.0.0.1")
        assert [p["error_code"] for p in resp["topics"][0]["partitions"]] == [0, 0]
        # OffsetCommit v2 with a retention time keeps an expire timestamp: value version 1
        await coord.handle(COMMIT, 2, {
            "group_id": "grp", "generation_id": -1, "member_id": "", "retention_time_ms": 123456,
            "topics": [{"name": "orders", "partitions": [
                {"partition_index": 5, "committed_offset": 7, "committed_metadata": ""}]}]}, "c", "127.0.0.1")
        partition = coordinator_key_partition("grp", 4)
        assert coord.coordinator_key_partition("grp") == partition
        lg = lm.get_log(OFFSETS_TOPIC, partition)
        assert lg.config.compact and lg.config.segment_bytes == 100 * 1024 * 1024
        assert lg.high_watermark == lg.log_end_offset == 3
        batches = list(lg.batches(0, FetchIsolation.HIGH_WATERMARK))
        assert [b.records_count for b in batches] == [2, 1]
        b = batches[0]
        assert (b.magic, b.producer_id, b.attributes, b.base_timestamp, b.max_timestamp) == (2, -1, 0, T0, T0)
        recs = b.records()
        assert (recs[0].key, recs[0].value) == (OFFSET_KEY, OFFSET_VALUE_V3)
        assert recs[1].key == encode_offset_commit_key(OffsetCommitKey("grp", "orders", 4))
        assert recs[1].value == H("0003" "000000000000002b" "ffffffff" "0000" + T0_BYTES)
        r = batches[1].records()[0]
        assert (r.key, r.value) == (encode_offset_commit_key(OffsetCommitKey("grp", "orders", 5)), OFFSET_VALUE_V1)
        coord.close()
        lm.shutdown()

    asyncio.run(run())
