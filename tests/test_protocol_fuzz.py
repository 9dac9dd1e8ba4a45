"""Hostile frames: anything a peer sends must end in a decoded body, ProtocolDecodeError or
UnsupportedVersionError, never another exception, a long loop or a large allocation."""

from __future__ import annotations

import contextlib
import struct
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
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
from tests.support.protocol_strategies import fields_of, rich_body

EXPECTED = (ProtocolDecodeError, UnsupportedVersionError)
VERSIONS = [(key, v) for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()) for v in range(lo, hi + 1)]


def _request_frame(api_key: int, version: int) -> bytes:
    return encode_request(api_key, version, 1, "fuzz", rich_body(fields_of(api_key, "request"), version))[4:]


def _response_frame(api_key: int, version: int) -> bytes:
    body = rich_body(fields_of(api_key, "response"), version)
    if api_key == ApiKey.API_VERSIONS:
        body["error_code"] = 0
    return b"".join(encode_response(RequestHeader(api_key, version, 1, None), body))[4:]


def _header(api_key: int, version: int, client_id: bytes = b"c") -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id
    return head + (b"\x00" if MESSAGES[api_key].is_flexible(version) else b"")  # type: ignore[index]


def _decode_quietly(frame: bytes) -> None:
    with contextlib.suppress(EXPECTED):
        decode_request(frame)


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_arbitrary_bytes(frame: bytes) -> None:
    _decode_quietly(frame)
    with contextlib.suppress(ProtocolDecodeError):
        read_request_header(frame)


@pytest.mark.slow
@settings(max_examples=400)
@given(st.sampled_from(VERSIONS), st.binary(max_size=80))
def test_valid_header_random_body(key_version: tuple[int, int], body: bytes) -> None:
    api_key, version = key_version
    _decode_quietly(_header(api_key, version) + body)
    with contextlib.suppress(EXPECTED):
        decode_response(api_key, version, body)


@pytest.mark.parametrize(("api_key", "version"), VERSIONS, ids=[f"{ApiKey(k).name}-v{v}" for k, v in VERSIONS])
def test_every_truncation_fails_cleanly(api_key: int, version: int) -> None:
    request = _request_frame(api_key, version)
    response = _response_frame(api_key, version)
    decode_request(request)
    decode_response(api_key, version, response)
    for cut in range(len(request)):
        with pytest.raises(ProtocolDecodeError):
            decode_request(request[:cut])
    for cut in range(len(response)):
        with pytest.raises(ProtocolDecodeError):
            decode_response(api_key, version, response[:cut])


@pytest.mark.slow
@settings(max_examples=300)
@given(st.sampled_from(VERSIONS), st.data())
def test_mutated_frames(key_version: tuple[int, int], data: st.DataObject) -> None:
    api_key, version = key_version
    for frame, request in ((_request_frame(api_key, version), True), (_response_frame(api_key, version), False)):
        mutated = bytearray(frame)
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(mutated) - 1))
            mutated[at] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, data.draw(st.integers(0, 255))]))
        try:
            if request:
                decode_request(bytes(mutated))
            else:
                decode_response(api_key, version, bytes(mutated))
        except EXPECTED:
            pass


def _fails_fast(frame: bytes, api_key: int | None = None, version: int = 0) -> ProtocolDecodeError:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ProtocolDecodeError) as e:
            if api_key is None:
                decode_request(frame)
            else:
                decode_response(api_key, version, frame)
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 0.05 and peak < 256 * 1024, (elapsed, peak)
    return e.value


def test_huge_array_count_in_a_tiny_frame() -> None:
    frame = _header(ApiKey.METADATA, 0) + struct.pack(">i", 0x7FFFFFFF)
    assert len(frame) < 20
    _fails_fast(frame)
    # a primitive array (Metadata replica nodes), a compact array, and a string array
    replicas = (struct.pack(">iii", 1, 0, 1) + b"\x00\x00" + b"\x00\x01t" + struct.pack(">i", 1)
                + struct.pack(">hiii", 0, 0, 1, 0x7FFFFFFF) + bytes(8))  # 1 topic, 1 partition, its replicas
    assert "array of 2147483647 elements" in str(_fails_fast(replicas, ApiKey.METADATA, 0))
    _fails_fast(_header(ApiKey.METADATA, 9) + b"\xff\xff\xff\xff\x07")
    _fails_fast(_header(ApiKey.DESCRIBE_GROUPS, 0) + struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01a")


def test_oversized_and_negative_lengths() -> None:
    produce = _header(ApiKey.PRODUCE, 3) + struct.pack(">hhii", -1, 1, 1000, 1) + struct.pack(">h", 1) + b"t"
    _fails_fast(produce + struct.pack(">ii", 1, 0) + struct.pack(">i", 0x7FFFFFFF) + b"abc")  # records
    _fails_fast(produce + struct.pack(">ii", 1, 0) + struct.pack(">i", -2))  # records length -2
    _fails_fast(produce + struct.pack(">i", -1))  # non-nullable array is null
    _fails_fast(_header(ApiKey.HEARTBEAT, 0) + struct.pack(">h", 0x7FFF) + b"g")  # string
    _fails_fast(_header(ApiKey.HEARTBEAT, 0) + struct.pack(">h", -1))  # non-nullable string is null
    _fails_fast(_header(ApiKey.HEARTBEAT, 0) + struct.pack(">h", -5))
    _fails_fast(_header(ApiKey.HEARTBEAT, 4) + b"\x00")  # compact non-nullable string is null
    _fails_fast(_header(ApiKey.HEARTBEAT, 4) + b"\xff\xff\xff\x7f")  # compact string past the end
    _fails_fast(_header(ApiKey.JOIN_GROUP, 0) + b"\x00\x01g" + struct.pack(">i", 1) + b"\x00\x00"
                + b"\x00\x00" + struct.pack(">i", 1) + b"\x00\x00" + struct.pack(">i", 0x7FFFFFFF))  # bytes
    frame = struct.pack(">hhih", ApiKey.HEARTBEAT, 0, 1, 500) + b"abc"  # client_id past the end
    _fails_fast(frame)
    with pytest.raises(ProtocolDecodeError):
        read_request_header(frame)
    with pytest.raises(ProtocolDecodeError):
        read_request_header(struct.pack(">hhih", 12, 0, 1, -2))
    with pytest.raises(ProtocolDecodeError):
        read_request_header(struct.pack(">hhih", 12, 0, 1, 2) + b"\xff\xfe")  # not UTF-8


def test_bad_varints_and_tag_sections() -> None:
    heartbeat = struct.pack(">hhih", ApiKey.HEARTBEAT, 4, 1, 1) + b"c"
    _fails_fast(heartbeat + b"\xff\xff\xff\xff\xff\xff\x01")  # varint longer than 5 bytes
    _fails_fast(heartbeat + b"\xff\xff\xff\xff\x07")  # 2**31 tagged fields in the header
    _fails_fast(heartbeat + b"\x01\x00\xff\xff\xff\x7f")  # a tagged field longer than the frame
    body = b"\x02g" + struct.pack(">i", 1) + b"\x02m" + b"\x00"  # group, generation, member, no instance id
    _fails_fast(heartbeat + b"\x00" + body + b"\x01\x00\x09ab")  # body tag section overruns
    api_versions = struct.pack(">i", 1) + b"\x00\x00" + b"\x01" + struct.pack(">i", 0)
    # a known tag (finalized_features_epoch, int64) given 2 bytes: reading it must not run past its size
    _fails_fast(api_versions + b"\x01\x01\x02\x00\x00", ApiKey.API_VERSIONS, 3)


def test_truncated_header_and_unknown_keys() -> None:
    for n in range(10):
        with pytest.raises(ProtocolDecodeError):
            decode_request(bytes(n))
    with pytest.raises(UnsupportedVersionError) as e:
        decode_request(struct.pack(">hhih", 1000, 0, 5, -1))
    assert e.value.header == RequestHeader(1000, 0, 5, None)
    with pytest.raises(UnsupportedVersionError):
        decode_response(1000, 0, b"\x00\x00\x00\x01")
    with pytest.raises(ProtocolDecodeError):
        decode_response(ApiKey.HEARTBEAT, 0, b"\x00\x00")
