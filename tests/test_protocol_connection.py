"""The sans-IO connection object: frames out of bytes however they are split, pipelined responses matched
to their requests in order, oversize and negative sizes refused as Kafka refuses them."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader, encode_response
from kafkalite.protocol.connection import (
    ClientConnection,
    CorrelationError,
    FrameDecoder,
    InvalidReceiveError,
    RefusedRequest,
    Reply,
    Request,
    ServerConnection,
)

payloads = st.lists(st.binary(max_size=300), min_size=1, max_size=8)


def framed(parts: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in parts)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for c in [*points, len(data)]:
        out.append(data[prev:c])
        prev = c
    return out


@given(payloads, st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_feed_returns_every_frame_whatever_the_split_points(parts, cuts):
    dec = FrameDecoder(max_size=1000)
    got = []
    for chunk in split(framed(parts), cuts):
        got += [bytes(f) for f in dec.feed(chunk)]
    assert got == parts
    assert dec.buffered == 0 and dec.want() == 4


@given(payloads, st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=50))
def test_recv_into_path_returns_every_frame(parts, reads):
    """The recv_into path: a reader that writes at most k bytes of what is left into recv_buffer()."""
    data = framed(parts)
    dec = FrameDecoder()
    got, pos, i = [], 0, 0
    while pos < len(data):
        buf = dec.recv_buffer()
        assert len(buf) == dec.want() > 0
        n = min(len(buf), reads[i % len(reads)], len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        i += 1
        frame = dec.received(n)
        if frame is not None:
            got.append(bytes(frame))
    assert got == parts


@given(payloads, st.lists(st.integers(min_value=0, max_value=10_000), max_size=6), st.data())
def test_feed_and_recv_into_mix(parts, cuts, data):
    """A reader may switch between the two interfaces between chunks without losing a byte."""
    dec = FrameDecoder()
    got = []
    for chunk in split(framed(parts), cuts):
        if chunk and data.draw(st.booleans()):
            mv = memoryview(chunk)
            while mv:
                buf = dec.recv_buffer()
                n = min(len(buf), len(mv))
                buf[:n] = mv[:n]
                mv = mv[n:]
                frame = dec.received(n)
                if frame is not None:
                    got.append(bytes(frame))
        else:
            got += [bytes(f) for f in dec.feed(chunk)]
    assert got == parts


def test_whole_frames_in_a_chunk_are_views_not_copies():
    chunk = framed([b"a" * 1000, b"b" * 10])
    frames = FrameDecoder().feed(chunk)
    assert [f.obj for f in frames] == [chunk, chunk]  # memoryviews of the caller's chunk


@given(st.integers(min_value=1001, max_value=2**31 - 1), st.integers(min_value=1, max_value=4))
def test_oversize_frame_is_refused_as_kafka_does(size, first):
    head = struct.pack(">i", size)
    dec = FrameDecoder(max_size=1000)
    with pytest.raises(InvalidReceiveError, match=rf"^Invalid receive \(size = {size} larger than 1000\)$"):
        dec.feed(head[:first])
        dec.feed(head[first:] + b"x")


@given(st.integers(min_value=-2**31, max_value=-1))
def test_negative_size_is_refused(size):
    with pytest.raises(InvalidReceiveError, match=rf"^Invalid receive \(size = {size}\)$"):
        FrameDecoder().feed(struct.pack(">i", size))


def test_frames_before_an_oversize_one_are_not_lost_to_a_later_feed():
    dec = FrameDecoder(max_size=10)
    assert [bytes(f) for f in dec.feed(framed([b"ok"]))] == [b"ok"]
    with pytest.raises(InvalidReceiveError):
        dec.feed(struct.pack(">i", 11))


def _metadata_response(correlation: int, version: int, node: int) -> bytes:
    header = RequestHeader(ApiKey.METADATA, version, correlation, "c")
    body = {"brokers": [{"node_id": node, "host": "h", "port": 1, "rack": None}], "cluster_id": "x",
            "controller_id": node, "topics": []}
    return b"".join(bytes(p) for p in encode_response(header, body))  # type: ignore[arg-type]


@given(st.lists(st.sampled_from([1, 9, 12]), min_size=1, max_size=6),
       st.lists(st.integers(min_value=0, max_value=5000), max_size=8))
def test_pipelined_responses_are_matched_in_order_with_their_versions(versions, cuts):
    """Flexible (v9, v12) and non-flexible (v1) header versions interleaved on one connection."""
    conn = ClientConnection("c")
    sent = [conn.send_request(ApiKey.METADATA, v, {"topics": None})[0] for v in versions]
    assert conn.pending == len(versions)
    data = b"".join(_metadata_response(c, v, node=i) for i, (c, v) in enumerate(zip(sent, versions, strict=True)))
    answers = []
    for chunk in split(data, cuts):
        answers += conn.feed(chunk)
    assert [(p.correlation_id, p.api_version) for p, _ in answers] == list(zip(sent, versions, strict=True))
    assert [b["controller_id"] for _, b in answers] == list(range(len(versions)))
    assert conn.pending == 0


def test_a_response_out_of_order_breaks_the_connection():
    conn = ClientConnection("c")
    first, _ = conn.send_request(ApiKey.METADATA, 9, {"topics": None})
    second, _ = conn.send_request(ApiKey.METADATA, 9, {"topics": None})
    with pytest.raises(CorrelationError, match=rf"response \({second}\) does not match request \({first}\)"):
        conn.feed(_metadata_response(second, 9, 0))


def test_a_response_nobody_asked_for_is_an_error():
    with pytest.raises(CorrelationError, match="no request awaiting"):
        ClientConnection("c").feed(_metadata_response(1, 9, 0))


def test_acks_0_produce_expects_no_answer():
    conn = ClientConnection("c")
    conn.send_request(ApiKey.PRODUCE, 9, {"acks": 0, "timeout_ms": 1, "topic_data": []}, expect_response=False)
    assert conn.pending == 0


def test_server_connection_decodes_a_client_connections_request():
    client = ClientConnection("the-client")
    correlation, frame = client.send_request(ApiKey.METADATA, 12, {"topics": [{"name": "t"}]})
    server = ServerConnection(max_request_bytes=1 << 20)
    [got] = server.feed(frame)
    req = server.decode(got)
    assert isinstance(req, Request)
    assert req.header == RequestHeader(ApiKey.METADATA, 12, correlation, "the-client")
    assert req.body["topics"][0]["name"] == "t"


def test_server_answers_api_versions_it_does_not_know_with_the_v0_fallback():
    client = ClientConnection("c")
    _, frame = client.send_request(ApiKey.API_VERSIONS, 0, {})
    frame = frame[:6] + struct.pack(">h", 99) + frame[8:]  # ApiVersions v99
    reply = ServerConnection(1 << 20).decode(frame[4:])
    assert isinstance(reply, Reply)
    [(_, body)] = client.feed(b"".join(bytes(p) for p in reply.parts))  # type: ignore[arg-type]
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("frame, why", [
    (struct.pack(">hh", 3, 1), "unreadable request header"),
    (struct.pack(">hhih", 999, 0, 1, -1), "API key 999 is not supported"),
    (struct.pack(">hhih", 3, 99, 1, -1), "unsupported version 99 of METADATA"),
    (struct.pack(">hhih", 0, 7, 1, -1) + b"\xff\xff\xff\xff", "malformed PRODUCE v7 request"),
])
def test_server_refuses_what_kafka_closes_the_connection_for(frame, why):
    with pytest.raises(RefusedRequest, match=why):
        ServerConnection(1 << 20).decode(frame)
