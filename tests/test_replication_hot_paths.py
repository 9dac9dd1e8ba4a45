"""The replication hot paths made faster for issue 15's performance targets, each checked for behaviour:

- a Log flush (the one a roll schedules, or the periodic one) fsyncs outside the log's lock, so appends and
  reads go on meanwhile; a truncation during the flush keeps the recovery point where it put it;
- small fetched records are answered as bytes (one send with the header), large ones as a sendfile region;
- a follower appends a large fetch answer in runs of whole batches of at most replica.fetch.max.bytes;
- the replica fetcher's connection reads response frames straight into their buffer, however the bytes are
  split on the wire, and reports a connection lost in the middle of a frame.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from kafkalite.broker.replica_fetcher import _ResponseStream
from kafkalite.broker.replica_manager import SMALL_RECORDS_COPIED, ReplicaManager
from kafkalite.errors import CorruptRecordError
from kafkalite.protocol import ApiKey, FileRegion
from kafkalite.protocol.codec import RequestHeader, encode_response
from kafkalite.protocol.connection import ClientConnection, ServerConnection
from kafkalite.records import SimpleRecord, build_batch, iter_batches
from kafkalite.storage.log import FetchIsolation
from tests.support.logs import Env


def _batch(n: int = 1, size: int = 100) -> bytes:
    return bytes(build_batch([SimpleRecord(None, b"v" * size)] * n))


class _BlockedFsync:
    """os.fsync that blocks until released (the OS call, not one of ours): a flush caught in the middle."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real = os.fsync

        def fsync(fd: int) -> None:
            self.entered.set()
            assert self.release.wait(10), "the test never released the fsync"
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


@pytest.mark.slow
def test_appends_and_reads_go_on_while_a_flush_is_in_fsync(tmp_path, monkeypatch):
    lg = Env().open(tmp_path / "t-0")
    for _ in range(5):
        lg.append_as_leader(_batch(3))
    blocked = _BlockedFsync(monkeypatch)
    flusher = _in_thread(lambda: lg.flush(include_active=True))
    assert blocked.entered.wait(5)
    # the flusher is inside fsync: the log must still take appends and serve reads (the event loop's work)
    done: list[object] = []
    worker = _in_thread(lambda: done.extend([lg.append_as_leader(_batch(2)), lg.read(0, 1 << 20)]))
    worker.join(3)
    blocked.release.set()
    flusher.join(10)
    assert not worker.is_alive() and len(done) == 2, "an append waited for another thread's fsync"
    assert lg.log_end_offset == 17
    assert lg.recovery_point == 15  # what was there when the flush began, not what came meanwhile
    lg.close()


@pytest.mark.slow
def test_a_truncation_during_a_flush_keeps_its_recovery_point(tmp_path, monkeypatch):
    lg = Env().open(tmp_path / "t-0")
    for _ in range(5):
        lg.append_as_leader(_batch(3), leader_epoch=0)
    blocked = _BlockedFsync(monkeypatch)
    flusher = _in_thread(lambda: lg.flush(include_active=True))
    assert blocked.entered.wait(5)
    truncated = _in_thread(lambda: lg.truncate_to(6))
    truncated.join(3)
    blocked.release.set()
    flusher.join(10)
    assert not truncated.is_alive()
    assert lg.log_end_offset == 6
    assert lg.recovery_point <= 6, "a flush that began before the truncation moved the recovery point past it"
    lg.close()


def test_small_fetched_records_are_sent_as_bytes_large_ones_by_sendfile(tmp_path):
    lg = Env().open(tmp_path / "t-0")
    small = _batch(1, 200)
    lg.append_as_leader(small)
    big = _batch(8, SMALL_RECORDS_COPIED // 8)
    lg.append_as_leader(big)
    first = lg.read(0, len(small), FetchIsolation.LOG_END).records
    wire = ReplicaManager.records_for_wire(first)
    assert isinstance(wire, bytes) and wire == first.tobytes() and wire[16:] == small[16:]  # offset, epoch stamped
    both = lg.read(0, 1 << 20, FetchIsolation.LOG_END).records
    region = ReplicaManager.records_for_wire(both)
    try:
        assert isinstance(region, FileRegion) and region.size == len(small) + len(big)
    finally:
        os.close(region.fd)
    lg.close()


async def _serve_once(frames_of, split: int, close_after: int | None = None):
    """A leader stand-in on 127.0.0.1: answers one request with `frames_of(header)`, written `split` bytes at a
    time (or only `close_after` bytes, then closes)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ServerConnection(1 << 20)
        size = int.from_bytes(await reader.readexactly(4), "big")
        request = conn.decode(await reader.readexactly(size))
        data = b"".join(bytes(p) for p in frames_of(request.header))
        if close_after is not None:
            data = data[:close_after]
        for i in range(0, len(data), split):
            writer.write(data[i:i + split])
            await writer.drain()
            await asyncio.sleep(0)
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _fetch_answer(records: bytes):
    def frames(header: RequestHeader) -> list:
        return encode_response(RequestHeader(ApiKey.FETCH, 12, header.correlation_id, None), {
            "throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [{
                "partition_index": 0, "error_code": 0, "high_watermark": 7, "last_stable_offset": 7,
                "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
                "records": records}]}]})
    return frames


_FETCH = {"replica_id": 2, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
          "session_id": 0, "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}


@pytest.mark.slow
@pytest.mark.parametrize("split", [1, 7, 4096, 1 << 20])
def test_the_fetcher_stream_reads_a_response_however_it_is_split(split):
    records = _batch(40, 1000)

    async def run() -> dict:
        server = await _serve_once(_fetch_answer(records), split)
        async with server:
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            stream = _ResponseStream.take_over(reader, writer, ClientConnection("test"))
            try:
                return await asyncio.wait_for(stream.request(ApiKey.FETCH, 12, _FETCH), 20)
            finally:
                stream.close()

    body = asyncio.run(run())
    part = body["responses"][0]["partitions"][0]
    assert part["high_watermark"] == 7 and bytes(part["records"]) == records


def test_the_fetcher_stream_reports_a_connection_lost_in_the_middle_of_a_frame():
    async def run() -> None:
        server = await _serve_once(_fetch_answer(_batch(10, 1000)), 512, close_after=3000)
        async with server:
            port = server.sockets[0].getsockname()[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            stream = _ResponseStream.take_over(reader, writer, ClientConnection("test"))
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(stream.request(ApiKey.FETCH, 12, _FETCH), 20)
            with pytest.raises(ConnectionError):  # and stays lost
                await stream.request(ApiKey.FETCH, 12, _FETCH)

    asyncio.run(run())


def _leader_bytes(tmp_path, batches: int = 12, size: int = 3000) -> bytes:
    """What a leader's fetch answer holds: whole batches with the leader's offsets and epoch."""
    leader = Env().open(tmp_path / "leader" / "t-0")
    for i in range(batches):
        leader.append_as_leader(_batch(1 + i % 3, size), leader_epoch=3)
    data = leader.read(0, 1 << 24, FetchIsolation.LOG_END).records.tobytes()
    leader.close()
    return data


def _follower(tmp_path):
    from kafkalite.replication.partition import Partition

    lg = Env().open(tmp_path / "follower" / "t-0")
    return lg, Partition("t", 0, lg, local_broker_id=2)


def test_a_large_fetch_is_appended_in_runs_of_whole_batches(tmp_path):
    data = _leader_bytes(tmp_path)
    lg, part = _follower(tmp_path)
    info = part.append_records_as_follower(memoryview(data), chunk_bytes=20_000)
    assert lg.read(0, 1 << 24, FetchIsolation.LOG_END).records.tobytes() == data  # byte for byte
    assert (info.first_offset, info.last_offset, info.last_leader_epoch) == (0, lg.log_end_offset - 1, 3)
    # one offset-index entry per run after the first (Kafka's rule: one per append past index.interval.bytes)
    runs, filled = 1, 0
    for b in iter_batches(data):
        if filled + len(b.buffer) > 20_000:
            runs, filled = runs + 1, 0
        filled += len(b.buffer)
    assert runs > 3 and lg.active_segment.offset_index.entries == runs - 1
    lg.close()


def test_a_partial_last_batch_is_left_for_the_next_fetch(tmp_path):
    data = _leader_bytes(tmp_path)
    last = max(b.base_offset for b in iter_batches(data))
    lg, part = _follower(tmp_path)
    part.append_records_as_follower(memoryview(data)[:-100], chunk_bytes=20_000)
    assert lg.log_end_offset == last


def test_a_corrupt_batch_length_in_a_large_fetch_is_refused_after_the_runs_before_it(tmp_path):
    data = bytearray(_leader_bytes(tmp_path))
    positions = []
    pos = 0
    while pos < len(data):
        positions.append(pos)
        pos += int.from_bytes(data[pos + 8:pos + 12], "big") + 12
    data[positions[8] + 8:positions[8] + 12] = (5).to_bytes(4, "big")
    lg, part = _follower(tmp_path)
    with pytest.raises(CorruptRecordError):
        part.append_records_as_follower(memoryview(data), chunk_bytes=20_000)
    assert 0 < lg.log_end_offset <= int.from_bytes(data[positions[8]:positions[8] + 8], "big")
    lg.close()


def test_a_hw_move_completes_acks_all_and_wakes_consumers_but_not_the_other_followers_parked_fetch(tmp_path):
    from kafkalite.broker.config import BrokerConfig
    from kafkalite.broker.metadata import MetadataStore
    from kafkalite.manager.log_manager import LogManager

    cfg = BrokerConfig.load(None, {"log.dirs": str(tmp_path / "data"), "node.id": 1})
    lm = LogManager(cfg.log_dirs, cfg.log_config(), cfg.manager_config())
    rm = ReplicaManager(cfg, lm, MetadataStore(lm.dirs[0].path))
    part = rm.lead_locally(lm.get_or_create_log("t", 0))
    part.make_leader(1, isr=[1, 2, 3], replicas=[1, 2, 3])

    def follower_fetch(replica: int, offset: int):
        return rm.fetch([("t", 0, offset, 1 << 20, 1, -1)], max_wait_ms=3000, min_bytes=1, max_bytes=1 << 20,
                        isolation=FetchIsolation.LOG_END, replica_id=replica, log_start_offsets=[0])

    async def run() -> None:
        entry = rm.append("t", 0, _batch(3), acks_all=True)
        assert entry["_required_offset"] == 3
        produce = asyncio.create_task(rm.complete_produce("t", entry, 5000))
        consumer = asyncio.create_task(rm.fetch([("t", 0, 0, 1 << 20, -1, -1)], max_wait_ms=3000, min_bytes=1,
                                                max_bytes=1 << 20, isolation=FetchIsolation.HIGH_WATERMARK))
        parked = asyncio.create_task(follower_fetch(2, 3))  # follower 2 has the batch: parks, HW still 0
        await asyncio.sleep(0.05)
        seen = part.remote[2].last_fetch_time_ms
        assert part.high_watermark == 0 and not parked.done() and not consumer.done()
        await asyncio.sleep(0.02)
        other = asyncio.create_task(follower_fetch(3, 3))  # follower 3 too: the HW moves to 3
        await asyncio.wait_for(produce, 2)
        assert entry["error_code"] == 0 and part.high_watermark == 3
        got = await asyncio.wait_for(consumer, 2)
        assert got[0].size > 0  # the consumer's fetch was woken by the HW move
        await asyncio.sleep(0.02)
        assert not parked.done() and part.remote[2].last_fetch_time_ms == seen, \
            "follower 2's parked fetch was woken by follower 3's HW move for an empty read"
        rm.append("t", 0, _batch(1))  # new data wakes both followers' fetches
        for task in (parked, other):
            assert (await asyncio.wait_for(task, 2))[0].size > 0

    try:
        asyncio.run(run())
    finally:
        lm.shutdown()
