"""The protocol codec on its own: round trips of every api/version/direction, headers, defaults,
tagged fields, records parts, and the ApiVersions fallback bytes."""

from __future__ import annotations

import os
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ErrorCode,
    FileRegion,
    ProtocolDecodeError,
    RequestHeader,
    UnsupportedVersionError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    read_request_header,
)
from kafkalite.protocol.messages import MESSAGES
from tests.support.protocol_strategies import DIRECTIONS, body_strategy, defaults, fields_of, normalize, rich_body


def _join(parts: list) -> bytes:
    assert not any(isinstance(p, FileRegion) for p in parts)
    return b"".join(parts)


def roundtrip(api_key: int, version: int, direction: str, body: dict) -> dict:
    if direction == "request":
        frame = encode_request(api_key, version, 42, "client-1", body)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        header, decoded = decode_request(frame[4:])
        assert header == RequestHeader(api_key, version, 42, "client-1")
        return decoded
    frame = _join(encode_response(RequestHeader(api_key, version, 42, "c"), body))
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 42
    return decoded


def test_supported_versions_cover_the_brief() -> None:
    expected = {
        ApiKey.API_VERSIONS: (0, 4), ApiKey.METADATA: (0, 12), ApiKey.PRODUCE: (0, 9), ApiKey.FETCH: (4, 12),
        ApiKey.LIST_OFFSETS: (1, 7), ApiKey.FIND_COORDINATOR: (0, 4), ApiKey.JOIN_GROUP: (0, 7),
        ApiKey.SYNC_GROUP: (0, 5), ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5),
        ApiKey.OFFSET_COMMIT: (2, 9), ApiKey.OFFSET_FETCH: (1, 8), ApiKey.INIT_PRODUCER_ID: (0, 4),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4), ApiKey.CREATE_TOPICS: (0, 7), ApiKey.DELETE_TOPICS: (0, 6),
        ApiKey.DELETE_RECORDS: (0, 2), ApiKey.DESCRIBE_CONFIGS: (0, 4), ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        ApiKey.ALTER_CONFIGS: (0, 2), ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
        ApiKey.CREATE_PARTITIONS: (0, 3), ApiKey.DESCRIBE_GROUPS: (0, 5), ApiKey.LIST_GROUPS: (0, 5),
        ApiKey.DELETE_GROUPS: (0, 2), ApiKey.OFFSET_DELETE: (0, 0), ApiKey.DESCRIBE_CLUSTER: (0, 1),
        ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
        ApiKey.ELECT_LEADERS: (0, 2), ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        # inter-broker (cluster mode): controller requests and controlled shutdown
        ApiKey.LEADER_AND_ISR: (0, 7), ApiKey.STOP_REPLICA: (0, 4), ApiKey.UPDATE_METADATA: (0, 8),
        ApiKey.CONTROLLED_SHUTDOWN: (1, 3),
        # ACLs (issue 16)
        ApiKey.DESCRIBE_ACLS: (0, 3), ApiKey.CREATE_ACLS: (0, 3), ApiKey.DELETE_ACLS: (0, 3),
        ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0), ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    }
    assert expected == SUPPORTED_VERSIONS


@pytest.mark.slow
@pytest.mark.parametrize(("api_key", "direction"), DIRECTIONS, ids=[f"{ApiKey(k).name}-{d}" for k, d in DIRECTIONS])
@settings(max_examples=25)
@given(data=st.data())
def test_roundtrip_every_api_version_direction(api_key: int, direction: str, data: st.DataObject) -> None:
    lo, hi = SUPPORTED_VERSIONS[api_key]
    version = data.draw(st.integers(lo, hi), label="version")
    body = data.draw(body_strategy(fields_of(api_key, direction), version), label="body")
    if api_key == ApiKey.API_VERSIONS and direction == "response" and body["error_code"] == 35:
        body["error_code"] = 0  # 35 makes clients (and decode_response) read the body as v0
    assert normalize(roundtrip(api_key, version, direction, body)) == normalize(body)


@pytest.mark.parametrize(("api_key", "direction"), DIRECTIONS, ids=[f"{ApiKey(k).name}-{d}" for k, d in DIRECTIONS])
def test_roundtrip_rich_bodies_of_every_version(api_key: int, direction: str) -> None:
    lo, hi = SUPPORTED_VERSIONS[api_key]
    for version in range(lo, hi + 1):
        body = rich_body(fields_of(api_key, direction), version)
        assert normalize(roundtrip(api_key, version, direction, body)) == normalize(body)


@pytest.mark.parametrize(("api_key", "direction"), DIRECTIONS, ids=[f"{ApiKey(k).name}-{d}" for k, d in DIRECTIONS])
def test_missing_fields_take_schema_defaults(api_key: int, direction: str) -> None:
    lo, hi = SUPPORTED_VERSIONS[api_key]
    for version in range(lo, hi + 1):
        fields = fields_of(api_key, direction)
        assert normalize(roundtrip(api_key, version, direction, {})) == normalize(defaults(fields, version))


def test_defaults_follow_the_schema() -> None:
    _, body = decode_response(ApiKey.METADATA, 12, _join(encode_response(
        RequestHeader(ApiKey.METADATA, 12, 1, None), {"topics": [{"name": "t", "partitions": [{}]}]}))[4:])
    assert body["controller_id"] == -1 and body["cluster_id"] is None
    topic = body["topics"][0]
    assert topic["topic_authorized_operations"] == -2147483648 and topic["topic_id"] == uuid.UUID(int=0)
    assert topic["partitions"][0]["leader_epoch"] == -1
    # nullable only from v7: null in v7, "" before
    for version, expected in ((6, ""), (7, None)):
        _, body = decode_response(ApiKey.JOIN_GROUP, version, _join(encode_response(
            RequestHeader(ApiKey.JOIN_GROUP, version, 1, None), {}))[4:])
        assert body["protocol_name"] == expected


def test_fields_outside_the_version_are_ignored_and_absent() -> None:
    body = {"error_code": 3, "node_id": 1, "host": "h", "port": 9, "throttle_time_ms": 5, "error_message": "x",
            "coordinators": [{"key": "g"}]}
    _, v0 = decode_response(ApiKey.FIND_COORDINATOR, 0, _join(encode_response(
        RequestHeader(ApiKey.FIND_COORDINATOR, 0, 1, None), body))[4:])
    assert v0 == {"error_code": 3, "node_id": 1, "host": "h", "port": 9}
    _, v4 = decode_response(ApiKey.FIND_COORDINATOR, 4, _join(encode_response(
        RequestHeader(ApiKey.FIND_COORDINATOR, 4, 1, None), body))[4:])
    assert set(v4) == {"throttle_time_ms", "coordinators"}


# --- headers and the ApiVersions fallback -------------------------------------------------------


def test_api_versions_v0_fallback_bytes() -> None:
    """What Kafka sends for an ApiVersions version it does not know: a v0 body, header v0."""
    header = RequestHeader(ApiKey.API_VERSIONS, 0, 0x01020304, "c")
    body = {"error_code": ErrorCode.UNSUPPORTED_VERSION,
            "api_keys": [{"api_key": ApiKey.API_VERSIONS, "min_version": 0, "max_version": 4}]}
    assert encode_response(header, body) == [bytes.fromhex(
        "00000010" "01020304" "0023" "00000001" "0012" "0000" "0004")]


def test_unsupported_api_versions_request_can_still_be_answered() -> None:
    frame = encode_request(ApiKey.API_VERSIONS, 3, 7, "c", {})[4:]
    future = bytearray(frame)
    struct.pack_into(">h", future, 2, 9)  # a v9 ApiVersions from a future client
    with pytest.raises(UnsupportedVersionError) as e:
        decode_request(future)
    assert e.value.header == RequestHeader(18, 9, 7, "c") == read_request_header(future)
    assert e.value.error_code == 35
    reply = encode_response(e.value.header._replace(api_version=0), {"error_code": 35})
    assert decode_response(ApiKey.API_VERSIONS, 0, reply[0][4:]) == (7, {"error_code": 35, "api_keys": []})


def test_client_reads_fallback_answer_as_v0() -> None:
    reply = encode_response(RequestHeader(18, 0, 3, None), {"error_code": 35, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 2}]})
    assert decode_response(ApiKey.API_VERSIONS, 4, reply[0][4:]) == (3, {"error_code": 35, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 2}]})


def test_response_headers() -> None:
    # ApiVersions v3 (flexible body) keeps header v0: the body starts right after the correlation id
    flexible_api_versions = encode_response(RequestHeader(18, 3, 1, None), {})[0]
    assert flexible_api_versions[4:10] == bytes.fromhex("00000001" "0000")
    # other flexible responses use header v1: correlation id, then an empty tagged-field section
    heartbeat_v4 = encode_response(RequestHeader(12, 4, 1, None), {"error_code": 0})[0]
    assert heartbeat_v4 == bytes.fromhex("0000000c" "00000001" "00" "00000000" "0000" "00")
    heartbeat_v3 = encode_response(RequestHeader(12, 3, 1, None), {"error_code": 0})[0]
    assert heartbeat_v3 == bytes.fromhex("0000000a" "00000001" "00000000" "0000")


def test_request_header_client_id_stays_int16_string_in_flexible_versions() -> None:
    frame = encode_request(ApiKey.HEARTBEAT, 4, 5, "ab", {"group_id": "g", "member_id": "m"})
    assert frame[4:17] == bytes.fromhex("000c" "0004" "00000005" "0002") + b"ab" + b"\x00"  # then header tags
    assert decode_request(frame[4:]) == (RequestHeader(12, 4, 5, "ab"), {
        "group_id": "g", "generation_id": 0, "member_id": "m", "group_instance_id": None})
    null_client = encode_request(ApiKey.HEARTBEAT, 0, 5, None, {})
    assert read_request_header(null_client[4:]).client_id is None


def test_unknown_api_key_and_version() -> None:
    frame = bytearray(encode_request(ApiKey.HEARTBEAT, 0, 1, "c", {})[4:])
    struct.pack_into(">h", frame, 0, 999)
    with pytest.raises(UnsupportedVersionError):
        decode_request(frame)
    with pytest.raises(UnsupportedVersionError):
        decode_request(encode_request(ApiKey.FETCH, 4, 1, "c", {})[4:].replace(b"\x00\x04", b"\x00\x03", 1))
    with pytest.raises(UnsupportedVersionError):
        encode_response(RequestHeader(ApiKey.PRODUCE, 10, 1, None), {})


# --- tagged fields ------------------------------------------------------------------------------


def test_tagged_fields_not_written_at_default() -> None:
    header = RequestHeader(ApiKey.API_VERSIONS, 3, 1, None)
    body = {"api_keys": [{"api_key": 0, "min_version": 0, "max_version": 9}],
            "supported_features": [], "finalized_features_epoch": -1, "finalized_features": [],
            "zk_migration_ready": False}
    frame = encode_response(header, body)[0]
    assert frame.endswith(bytes.fromhex("00000000" "00"))  # throttle_time_ms, no tagged fields
    tagged = encode_response(header, {**body, "finalized_features_epoch": 5, "zk_migration_ready": True})[0]
    assert tagged.endswith(bytes.fromhex("00000000" "02" "01" "08" "0000000000000005" "03" "01" "01"))
    assert decode_response(18, 3, tagged[4:])[1]["finalized_features_epoch"] == 5


def test_tagged_struct_written_only_when_it_differs() -> None:
    header = RequestHeader(ApiKey.FETCH, 12, 1, None)

    def partition(**extra: object) -> bytes:
        frame = _join(encode_response(header, {"responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "records": b"", **extra}]}]}))
        return frame

    plain = partition()
    assert partition(diverging_epoch={"epoch": -1, "end_offset": -1}, current_leader={}) == plain
    diverged = partition(diverging_epoch={"epoch": 3, "end_offset": 10})
    assert len(diverged) == len(plain) + 1 + 1 + 4 + 8 + 1  # tag, size, struct (epoch, offset, no tags)
    p = decode_response(1, 12, diverged[4:])[1]["responses"][0]["partitions"][0]
    assert p["diverging_epoch"] == {"epoch": 3, "end_offset": 10}
    assert p["current_leader"] == {"leader_id": -1, "leader_epoch": -1}


def test_unknown_tagged_fields_are_skipped() -> None:
    frame = bytearray(encode_request(ApiKey.HEARTBEAT, 4, 1, "c", {"group_id": "g", "member_id": "m"})[4:])
    header_tags_at = 2 + 2 + 4 + 2 + 1
    assert frame[header_tags_at] == 0
    unknown = bytes.fromhex("02" "05" "03" "aabbcc" "7f" "00")  # tags 5 (3 bytes) and 127 (empty)
    frame[header_tags_at:header_tags_at + 1] = unknown
    assert frame[-1] == 0
    frame[-1:] = unknown
    header, body = decode_request(bytes(frame))
    assert header.client_id == "c" and body["group_id"] == "g" and body["member_id"] == "m"


# --- records ------------------------------------------------------------------------------------


def _produce(records: object, version: int = 9) -> bytes:
    return encode_request(ApiKey.PRODUCE, version, 1, "c", {"acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": records}]}]})


def test_decoded_records_are_views_of_the_frame() -> None:
    batch = os.urandom(300)
    for version in (0, 3, 8, 9):
        frame = bytearray(_produce(batch, version)[4:])
        records = decode_request(frame)[1]["topic_data"][0]["partition_data"][0]["records"]
        assert isinstance(records, memoryview) and records.obj is frame and bytes(records) == batch


def test_records_accept_lists_and_null() -> None:
    parts = [b"ab", bytearray(b"cd"), memoryview(b"efg")]
    records = decode_request(_produce(parts)[4:])[1]["topic_data"][0]["partition_data"][0]["records"]
    assert bytes(records) == b"abcdefg"
    assert decode_request(_produce(None)[4:])[1]["topic_data"][0]["partition_data"][0]["records"] is None
    assert decode_request(_produce(None, 3)[4:])[1]["topic_data"][0]["partition_data"][0]["records"] is None


@pytest.mark.parametrize("version", [4, 11, 12])
def test_file_regions_are_separate_parts(version: int, tmp_path) -> None:
    data = os.urandom(5000)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        region = FileRegion(fd, 100, 4000)
        big = memoryview(bytearray(os.urandom(40_000)))
        body = {"responses": [{"topic": "t", "partitions": [
            {"partition_index": 0, "high_watermark": 9, "records": region},
            {"partition_index": 1, "records": [b"xy", region, b"z"]},
            {"partition_index": 2, "records": big},
            {"partition_index": 3, "records": b"small"},
        ]}]}
        parts = encode_response(RequestHeader(ApiKey.FETCH, version, 1, None), body)
        kinds = [type(p).__name__ for p in parts]
        assert kinds == ["bytes", "FileRegion", "bytes", "FileRegion", "bytes", "memoryview", "bytes"]
        assert parts[1] is region and parts[3] is region and parts[5] is big
        wire = b"".join(os.pread(p.fd, p.size, p.position) if isinstance(p, FileRegion) else bytes(p)
                        for p in parts)
        assert struct.unpack(">i", wire[:4])[0] == len(wire) - 4
        decoded = decode_response(ApiKey.FETCH, version, wire[4:])[1]["responses"][0]["partitions"]
        assert bytes(decoded[0]["records"]) == data[100:4100]
        assert bytes(decoded[1]["records"]) == b"xy" + data[100:4100] + b"z"
        assert bytes(decoded[2]["records"]) == bytes(big)
        assert bytes(decoded[3]["records"]) == b"small"
        # our client reads FileRegions from their file
        request = encode_request(ApiKey.PRODUCE, 9, 1, None, {"topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": region}]}]})
        produced = decode_request(request[4:])[1]["topic_data"][0]["partition_data"][0]["records"]
        assert bytes(produced) == data[100:4100]
    finally:
        os.close(fd)


def test_file_region_at_the_very_end_and_empty_regions() -> None:
    region = FileRegion(3, 0, 1000)
    header = RequestHeader(ApiKey.FETCH, 4, 1, None)
    parts = encode_response(header, {"responses": [{"topic": "t", "partitions": [{"records": region}]}]})
    assert len(parts) == 2 and parts[1] is region  # v4: records are the last bytes of the response
    assert struct.unpack(">i", parts[0][:4])[0] == len(parts[0]) - 4 + 1000
    assert parts[0].endswith(struct.pack(">i", 1000))
    empty = encode_response(header, {"responses": [{"topic": "t", "partitions": [
        {"records": FileRegion(3, 0, 0)}, {"records": [FileRegion(3, 7, 0), b""]}]}]})
    assert len(empty) == 1
    partitions = decode_response(ApiKey.FETCH, 4, empty[0][4:])[1]["responses"][0]["partitions"]
    assert [bytes(p["records"]) for p in partitions] == [b"", b""]


def test_small_responses_are_one_part() -> None:
    body = {"responses": [{"topic": "t", "partitions": [{"records": b"r" * 100}, {"records": b""}]}]}
    parts = encode_response(RequestHeader(ApiKey.FETCH, 12, 1, None), body)
    assert len(parts) == 1 and isinstance(parts[0], bytes)


# --- encode-side validation ---------------------------------------------------------------------


def test_none_in_a_non_nullable_string_or_array_encodes_as_empty() -> None:
    frame = encode_request(ApiKey.JOIN_GROUP, 0, 1, None, {"group_id": None, "protocols": None})
    assert decode_request(frame[4:])[1]["group_id"] == "" and decode_request(frame[4:])[1]["protocols"] == []


def test_encode_rejects_wrong_values() -> None:
    with pytest.raises(struct.error):
        encode_request(ApiKey.HEARTBEAT, 0, 1, None, {"generation_id": 1 << 40})
    with pytest.raises(ValueError):
        encode_request(ApiKey.HEARTBEAT, 0, 1, None, {"group_id": "x" * 40000})
    with pytest.raises(TypeError):
        encode_request(ApiKey.HEARTBEAT, 0, 1, None, {"group_id": 5})


def test_uuid_inputs() -> None:
    u = uuid.uuid4()
    for given_ in (u, u.bytes, str(u)):
        frame = encode_request(ApiKey.METADATA, 10, 1, None, {"topics": [{"topic_id": given_, "name": None}]})
        assert decode_request(frame[4:])[1]["topics"] == [{"topic_id": u, "name": None}]


def test_messages_are_declared_once_per_key() -> None:
    # 32 + the ACL APIs (29-31) + SASL (17, 36) + SCRAM users (50, 51) + reassignments (45, 46)
    assert len(MESSAGES) == 42
    assert all(msg.api_key == key for key, msg in MESSAGES.items())


def test_decode_error_carries_header() -> None:
    frame = encode_request(ApiKey.HEARTBEAT, 0, 9, "c", {"group_id": "g"})[4:]
    with pytest.raises(ProtocolDecodeError) as e:
        decode_request(frame[:-3])
    assert e.value.header == RequestHeader(12, 0, 9, "c")


def test_pre_encoded_body_frames_like_the_dict() -> None:
    from kafkalite.protocol import encode_response_body

    body = {"throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "cluster_id": "c", "controller_id": 1, "topics": [{"error_code": 0, "name": "t", "topic_id": uuid.uuid4(),
                                                                 "is_internal": False, "partitions": []}]}
    for version in (1, 9, 12):
        header = RequestHeader(ApiKey.METADATA, version, 77, "c")
        pre = encode_response_body(ApiKey.METADATA, version, body)
        assert b"".join(encode_response(header, pre)) == b"".join(encode_response(header, body))
    with pytest.raises(ValueError, match="cannot answer"):
        encode_response(RequestHeader(ApiKey.METADATA, 11, 1, None), pre)
