"""The broker's receive path (issue 17): `broker.channel.Channel` reads frames straight into the decoder's
buffer, mutes the connection while a request is handled, and bounds what a slow reader makes the broker hold.

The channel is driven over real loopback sockets, in-process where its state must be observed (is reading
paused, how big is the write buffer), and through a real `kafkalite serve` for what clients see.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import threading
import time
import uuid

import pytest

from kafkalite.broker.channel import STAGE_BYTES, Channel
from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey, FileRegion, encode_request
from kafkalite.protocol.connection import FrameDecoder, InvalidReceiveError
from kafkalite.records import SimpleRecord, build_batch, iter_batches
from kafkalite.security.transport import ClientSecurity, open_connection
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig
from tests.support.brokers import BrokerProcess
from tests.support.certs import PASSWORD
from tests.test_broker_wire import read_response, recv_exact

MiB = 1 << 20


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def _serve(on_channel, *, max_size: int | None = None):
    """An asyncio server whose connections are Channels handed to `on_channel`; returns (server, port)."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def factory() -> Channel:
        def made(ch: Channel) -> None:
            ch.decoder = FrameDecoder(max_size)
            task = loop.create_task(on_channel(ch))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return Channel(on_made=made)

    server = await loop.create_server(factory, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_pipelined_requests_are_taken_one_at_a_time_with_reading_paused():
    """Three pipelined frames, the last two sent while the first is handled: each is answered in order, and
    the channel stopped reading when they arrived (Kafka's muted channel): what follows waits in the kernel."""
    frames = [os.urandom(n) for n in (10, 5000, 300)]

    async def main() -> tuple[list[bytes], list[bool]]:
        got: list[bytes] = []
        reading_while_busy: list[bool] = []

        async def on_channel(ch: Channel) -> None:
            for _ in frames:
                f = await ch.next_frame()
                got.append(bytes(f))
                await asyncio.sleep(0.05)  # "handling": the rest of the pipeline arrives meanwhile
                reading_while_busy.append(ch.transport.is_reading())
                ch.write(frame(bytes(f)[::-1]))
                await ch.drain()
            ch.close()

        server, port = await _serve(on_channel)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(frame(frames[0]))
        await asyncio.sleep(0.02)  # the first request is being handled: the next two arrive meanwhile
        w.write(frame(frames[1]) + frame(frames[2]))
        answers = [await asyncio.wait_for(r.readexactly(4 + len(f)), 5) for f in frames]
        w.close()
        server.close()
        assert answers == [frame(f[::-1]) for f in frames]
        return got, reading_while_busy

    got, reading = asyncio.run(main())
    assert got == frames
    assert reading[:2] == [False, False]  # requests were still queued behind the one being handled


def test_a_big_frame_split_into_many_segments_arrives_whole_in_a_buffer_of_its_size():
    """A 1 MiB frame written in 1,000-byte pieces: one frame, in a writable buffer of exactly its size that
    the kernel filled (no staging copy beyond the first read)."""
    payload = os.urandom(MiB)

    async def main() -> memoryview:
        out: asyncio.Future[memoryview] = asyncio.get_running_loop().create_future()

        async def on_channel(ch: Channel) -> None:
            out.set_result(await ch.next_frame())
            ch.close()

        server, port = await _serve(on_channel, max_size=2 * MiB)
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = frame(payload)
        for i in range(0, len(data), 1000):
            w.write(data[i:i + 1000])
            if i % 50_000 == 0:
                await w.drain()
                await asyncio.sleep(0.001)
        got = await asyncio.wait_for(out, 10)
        w.close()
        server.close()
        return got

    got = asyncio.run(main())
    assert got == payload
    assert not got.readonly and isinstance(got.obj, bytearray) and len(got.obj) == MiB


def test_a_connection_closed_mid_frame_ends_with_an_incomplete_read():
    async def main() -> BaseException:
        out: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

        async def on_channel(ch: Channel) -> None:
            try:
                await ch.next_frame()
            except BaseException as exc:
                out.set_result(exc)
            ch.close()

        server, port = await _serve(on_channel)
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(frame(os.urandom(100_000))[:70_000])
        await w.drain()
        w.close()
        exc = await asyncio.wait_for(out, 5)
        server.close()
        return exc

    assert isinstance(asyncio.run(main()), asyncio.IncompleteReadError)


def test_a_size_over_the_limit_raises_when_the_frame_is_taken():
    """The frames before a bad size prefix are still handed out (and answered); the bad one then raises."""
    async def main() -> tuple[list[bytes], BaseException]:
        got: list[bytes] = []
        out: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

        async def on_channel(ch: Channel) -> None:
            try:
                while True:
                    got.append(bytes(await ch.next_frame()))
            except BaseException as exc:
                out.set_result(exc)
            ch.close()

        server, port = await _serve(on_channel, max_size=1000)
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(frame(b"a" * 10) + frame(b"b" * 1000) + struct.pack(">i", 1001) + b"c" * 1001)
        exc = await asyncio.wait_for(out, 5)
        w.close()
        server.close()
        return got, exc

    got, exc = asyncio.run(main())
    assert got == [b"a" * 10, b"b" * 1000]
    assert isinstance(exc, InvalidReceiveError)


def test_many_small_frames_in_one_read_are_copied_out_of_the_staging_buffer():
    """More small frames than fit the staging buffer, pipelined: every one is handed out intact and in order,
    none a view of the staging buffer (it is reused for the next read)."""
    frames = [os.urandom(1 + i * 37 % 3000) for i in range(200)]
    assert sum(len(f) for f in frames) > 2 * STAGE_BYTES

    async def main() -> list[bytes]:
        views: list[memoryview] = []
        done = asyncio.get_running_loop().create_future()

        async def on_channel(ch: Channel) -> None:
            for _ in frames:
                views.append(await ch.next_frame())
            done.set_result(None)
            ch.close()

        server, port = await _serve(on_channel)
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"".join(frame(f) for f in frames))
        await asyncio.wait_for(done, 5)
        w.close()
        server.close()
        return [bytes(v) for v in views]

    assert asyncio.run(main()) == frames


@pytest.mark.slow
def test_a_slow_reader_of_a_big_tls_response_is_not_buffered_whole(pki, tmp_path):
    """32 MiB of record bytes to a TLS client that reads slowly: the broker copies them through the TLS
    transport chunk by chunk and waits for the transport to drain, so its write buffer stays bounded."""
    from kafkalite.broker.config import BrokerConfig
    from kafkalite.broker.server import Broker, _handshake, listener_tls_context

    cfg = BrokerConfig.load(None, {"listeners": "SSL://127.0.0.1:0", "log.dirs": tmp_path / "d",
                                   "ssl.keystore.type": "PKCS12", "ssl.keystore.location": pki.broker.p12,
                                   "ssl.keystore.password": PASSWORD})
    ctx = listener_tls_context(cfg, "SSL")
    assert ctx is not None
    size = 32 * MiB
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(os.urandom(size))
    broker = Broker(cfg)

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        peak = [0]
        sent = loop.create_future()

        async def on_channel(ch: Channel) -> None:
            assert await _handshake(ch, ctx, None, "SSL") is None

            async def watch() -> None:
                while not sent.done():
                    peak[0] = max(peak[0], ch.transport.get_write_buffer_size())
                    await asyncio.sleep(0.005)

            watcher = asyncio.create_task(watch())
            await broker._send(ch, [FileRegion(os.open(segment, os.O_RDONLY), 0, size)])
            sent.set_result(None)
            await watcher
            ch.close()

        def factory() -> Channel:
            return Channel(tls=True, on_made=lambda ch: loop.create_task(on_channel(ch)))

        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await open_connection("127.0.0.1", port, ClientSecurity.from_client_props(
            {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)}))
        got = 0
        while got < size:
            chunk = await asyncio.wait_for(r.read(256 * 1024), 10)
            if not chunk:
                break
            got += len(chunk)
            await asyncio.sleep(0.002)  # a slow reader
        await asyncio.wait_for(sent, 10)
        w.close()
        server.close()
        return got, peak[0]

    got, peak = asyncio.run(main())
    assert got == size
    assert peak < 4 * MiB, peak  # one 1 MiB copy chunk plus TLS records in flight, never the whole response


# --- through a real broker ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("channel") / "data", {"socket.request.max.bytes": 4 * MiB}).start()
    yield b
    assert b.stop() == 0, b.output()


def _produce_request(topic: str, batch: bytes, correlation: int) -> bytes:
    return encode_request(ApiKey.PRODUCE, 8, correlation, "channel-test", {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})


@pytest.mark.slow
def test_broker_takes_a_1_mib_produce_in_small_segments_and_pipelined_requests_in_order(broker):
    with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        topic = f"ch-{uuid.uuid4().hex[:8]}"
        client.create_topic(topic, 1, 1)
        big = build_batch([SimpleRecord(None, os.urandom(MiB - 200))])
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            req = _produce_request(topic, big, 1)
            for i in range(0, len(req), 1400):
                sock.sendall(req[i:i + 1400])
                if i % 140_000 == 0:
                    time.sleep(0.001)
            corr, body = read_response(sock, ApiKey.PRODUCE, 8)
            assert corr == 1
            part = body["responses"][0]["partition_responses"][0]
            assert (part["error_code"], part["base_offset"]) == (0, 0)
            # five small produces in one write: five answers, in order, offsets 1..5
            small = [build_batch([SimpleRecord(None, f"v{i}".encode())]) for i in range(5)]
            sock.sendall(b"".join(_produce_request(topic, b, 10 + i) for i, b in enumerate(small)))
            answers = [read_response(sock, ApiKey.PRODUCE, 8) for _ in small]
            assert [c for c, _ in answers] == [10, 11, 12, 13, 14]
            assert [a["responses"][0]["partition_responses"][0]["base_offset"] for _, a in answers] == [1, 2, 3, 4, 5]
        # a connection that goes away mid-frame appends nothing and leaves the broker serving the others
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            sock.sendall(_produce_request(topic, big, 2)[:300_000])
        time.sleep(0.2)
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
            sock.sendall(encode_request(ApiKey.LIST_OFFSETS, 1, 4, "t", {"replica_id": -1, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}))
            corr, body = read_response(sock, ApiKey.LIST_OFFSETS, 1)
        assert corr == 4 and body["topics"][0]["partitions"][0]["offset"] == 6


@pytest.mark.slow
def test_requests_received_into_reused_buffers_are_written_exactly_as_sent(broker):
    """Three connections pipelining produce requests of 130 KiB to 1000 KiB at once: the broker receives request
    frames into a few buffers it reuses (`FrameBuffers`), so a buffer handed out again while a view of its last
    request is alive would overwrite a batch before (or while) it is written. Every batch in the segment files is
    the one sent, byte for byte after the fields the leader assigns (base offset, leader epoch)."""
    rng = random.Random(11)
    topics = [f"pool-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    sent: dict[str, list[bytes]] = {  # one batch a request (Produce v3+), under max.message.bytes
        t: [build_batch([SimpleRecord(None, os.urandom(rng.randint(130 * 1024, 1000 * 1024)))]) for _ in range(12)]
        for t in topics}
    with KafkaClient(f"127.0.0.1:{broker.port}") as client:
        for t in topics:
            client.create_topic(t, 1, 1)
    errors: list[BaseException] = []

    def produce(topic: str) -> None:
        try:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
                sock.sendall(b"".join(_produce_request(topic, b, i) for i, b in enumerate(sent[topic])))
                for i in range(len(sent[topic])):
                    corr, body = read_response(sock, ApiKey.PRODUCE, 8)
                    part = body["responses"][0]["partition_responses"][0]
                    assert (corr, part["error_code"], part["base_offset"]) == (i, 0, i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(t,)) for t in topics]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    for t in topics:
        on_disk = (broker.data_dir / f"{t}-0" / "00000000000000000000.log").read_bytes()
        batches = [bytes(b.buffer) for b in iter_batches(on_disk)]
        assert [b[16:] for b in batches] == [b[16:] for b in sent[t]]


def test_a_request_over_socket_request_max_bytes_closes_only_that_connection(broker):
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as bad, \
            socket.create_connection(("127.0.0.1", broker.port), timeout=10) as good:
        bad.sendall(struct.pack(">i", 4 * MiB + 1) + b"x" * 1000)
        assert bad.recv(1) == b""  # closed by the broker
        good.sendall(encode_request(ApiKey.API_VERSIONS, 0, 3, "t", {}))
        size = struct.unpack(">i", recv_exact(good, 4))[0]
        assert size > 0 and recv_exact(good, size)[:4] == struct.pack(">i", 3)


# --- the leader's append from the received buffer -----------------------------------------------------------


def test_the_leader_appends_a_batch_from_a_writable_buffer_in_place(tmp_path):
    """The offsets and leader epoch are patched into the caller's writable buffer (a request frame the
    broker owns) and the batch is written from it: no copy of the batch in between."""
    lg = Log(tmp_path / "t-0", LogConfig())
    try:
        lg.append_as_leader(build_batch([SimpleRecord(None, b"first")]), leader_epoch=3)
        frame_buf = bytearray(b"head" + build_batch([SimpleRecord(None, b"x" * 1000)]))
        view = memoryview(frame_buf)[4:]
        info = lg.append_as_leader(view, leader_epoch=3)
        assert info.first_offset == 1
        base, _length, epoch = struct.unpack_from(">qii", frame_buf, 4)
        assert (base, epoch) == (1, 3)  # patched where it lay: the view was not copied first
    finally:
        lg.close()
    on_disk = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    assert on_disk.endswith(bytes(view))


# --- the send path: file regions straight to the socket ------------------------------------------------------


def _regions_file(tmp_path, sizes: list[int]) -> tuple[str, bytes]:
    data = os.urandom(sum(sizes))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    return str(path), data


def _plain_broker(tmp_path):
    """A broker object with one PLAINTEXT listener, not started: its `_send` is what these tests drive."""
    from kafkalite.broker.config import BrokerConfig
    from kafkalite.broker.server import Broker

    return Broker(BrokerConfig.load(None, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": tmp_path / "d"}))


async def _echo(ch: Channel, f: memoryview) -> None:
    ch.write(frame(bytes(f)))
    await ch.drain()


@pytest.mark.slow
def test_a_response_of_many_regions_goes_to_a_slow_reader_whole_without_loop_sendfile(tmp_path):
    """200 partitions' headers and 64 KiB regions, then a 16 MiB one, to a reader slower than the socket: every
    byte arrives in order, the wait for a full socket happens in `send_parts` (asyncio's sendfile, which
    pauses and resumes reading and registers a writer around each region, is made to fail here), and the
    connection reads requests again afterwards."""
    sizes = [64 * 1024] * 200 + [16 * MiB]
    path, data = _regions_file(tmp_path, sizes)
    broker = _plain_broker(tmp_path)

    def parts() -> tuple[list, bytes]:
        out: list = [b"head"]
        want = bytearray(b"head")
        pos = 0
        for i, n in enumerate(sizes):
            hdr = struct.pack(">i", i)
            out += [hdr, FileRegion(os.open(path, os.O_RDONLY), pos, n)]
            want += hdr + data[pos:pos + n]
            pos += n
        return [*out, b"tail"], bytes(want + b"tail")

    async def main() -> tuple[bytes, bytes, bytes]:
        loop = asyncio.get_running_loop()

        async def no_sendfile(*_args, **_kwargs):
            raise AssertionError("loop.sendfile used for a plaintext response")

        loop.sendfile = no_sendfile  # type: ignore[method-assign]
        response, want = parts()

        async def on_channel(ch: Channel) -> None:
            assert ch.sends_directly
            await ch.next_frame()
            await broker._send(ch, response)
            await _echo(ch, await ch.next_frame())  # reading resumed: the next request is taken
            ch.close()

        server, port = await _serve(on_channel)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(frame(b"fetch"))
        got = bytearray()
        while len(got) < len(want):
            chunk = await asyncio.wait_for(r.read(256 * 1024), 10)
            assert chunk, "the connection closed early"
            got += chunk
            if len(got) < 8 * MiB:
                await asyncio.sleep(0.001)  # a slow reader: the broker's socket fills
        w.write(frame(b"next"))
        echo = await asyncio.wait_for(r.readexactly(8), 10)
        w.close()
        server.close()
        return bytes(got), want, echo

    got, want, echo = asyncio.run(main())
    assert got == want
    assert echo == frame(b"next")


@pytest.mark.slow
def test_a_reader_that_goes_away_mid_response_ends_only_its_connection(tmp_path):
    """The peer closes while a 64 MiB region waits for room in its socket: sending ends with a
    ConnectionError, every region's descriptor is closed, the writer registration is gone (the next
    connection, which may get the same descriptor number, is served normally)."""
    path, _data = _regions_file(tmp_path, [64 * MiB])
    broker = _plain_broker(tmp_path)
    fds = [os.open(path, os.O_RDONLY) for _ in range(3)]

    async def main() -> tuple[list[str], bytes]:
        outcomes: list[str] = []
        first = True

        async def on_channel(ch: Channel) -> None:
            nonlocal first
            f = await ch.next_frame()
            if first:
                first = False
                try:
                    await broker._send(ch, [b"hdr", FileRegion(fds[0], 0, 64 * MiB), b"mid",
                                            FileRegion(fds[1], 0, MiB), FileRegion(fds[2], 0, MiB)])
                    outcomes.append("sent")
                except ConnectionError as exc:
                    outcomes.append(type(exc).__name__)
            else:
                await _echo(ch, f)
            ch.close()

        server, port = await _serve(on_channel)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(frame(b"fetch"))
        await asyncio.wait_for(r.readexactly(MiB), 10)  # some of it, then go away
        w.transport.abort()
        for _ in range(200):
            if outcomes:
                break
            await asyncio.sleep(0.01)
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w2.write(frame(b"again"))
        echo = await asyncio.wait_for(r2.readexactly(9), 10)
        w2.close()
        server.close()
        return outcomes, echo

    outcomes, echo = asyncio.run(main())
    assert outcomes and outcomes[0] != "sent", outcomes
    assert echo == frame(b"again")
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)  # closed by _send


@pytest.mark.slow
def test_regions_wait_for_the_bytes_the_transport_still_holds(tmp_path):
    """Bytes written through the transport before a response of file regions (8 MiB, most of them still
    buffered: the reader has not started) leave first: `send_parts` waits for the transport to empty before
    its own writes, so the stream stays in order."""
    path, data = _regions_file(tmp_path, [4 * MiB])
    before = os.urandom(8 * MiB)
    broker = _plain_broker(tmp_path)

    async def main() -> tuple[bytes, int]:
        held = [0]

        async def on_channel(ch: Channel) -> None:
            await ch.next_frame()
            ch.write(before)
            held[0] = ch.buffered_out
            await broker._send(ch, [b"hdr", FileRegion(os.open(path, os.O_RDONLY), 0, len(data)), b"end"])
            ch.close()

        server, port = await _serve(on_channel)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(frame(b"fetch"))
        await asyncio.sleep(0.2)  # the broker's socket and transport fill up meanwhile
        got = await asyncio.wait_for(r.read(), 20)
        w.close()
        server.close()
        return got, held[0]

    got, held = asyncio.run(main())
    assert held > 0  # the transport did hold bytes when the regions were sent
    assert got == before + b"hdr" + data + b"end"
