"""The replica fetcher's look-ahead (ReplicaFetcher._speculate): while a follower catches up below the leader's
HW it sends the next Fetch, from the end of the records just received, before appending them.

A real follower (Log, Partition, ReplicaFetcherManager) fetches over a real socket from a leader stand-in on
127.0.0.1 that answers Fetch v12 from a real leader Partition (its `read`, so diverging epochs are the
broker's own), with a high watermark the test sets. Checked: the look-ahead happens while lagging below the
HW and never at it; a corrupt batch, a truncation and a leader change in a looked-ahead round lose nothing
and duplicate nothing (the follower's log ends byte-identical to the leader's).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kafkalite.broker.replica_fetcher import (
    FetcherSettings,
    ReplicaFetcher,
    ReplicaFetcherManager,
    _ResponseStream,
)
from kafkalite.protocol import ApiKey
from kafkalite.protocol.codec import RequestHeader, encode_response
from kafkalite.protocol.connection import ClientConnection, CorrelationError, ServerConnection
from kafkalite.records import SimpleRecord, build_batch, iter_batches
from kafkalite.replication.partition import Partition, follower_runs
from kafkalite.storage.log import FetchIsolation, Log
from tests.support.logs import Env

BATCH_VALUE = 2000
ROUND_BYTES = 10_000  # replica.fetch.max.bytes = replica.fetch.response.max.bytes: ~4 batches a round


class Leader:
    """Broker 1 leading t-0 at `epoch`, served on 127.0.0.1 by a minimal Fetch v12 responder."""

    def __init__(self, tmp_path, batches: int, epoch: int = 3) -> None:
        self.env = Env()
        self.log = self.env.open(tmp_path / "leader" / "t-0")
        self.part = Partition("t", 0, self.log, local_broker_id=1)
        self.part.make_leader(epoch, isr=[1, 2], replicas=[1, 2])
        self.append(batches, epoch)
        self.hw = self.log.log_end_offset  # what answers carry as high_watermark
        self.requests: list[tuple[int, int]] = []  # (fetch offset, last fetched epoch) of each Fetch
        self.before_answer: Callable[[int, dict[str, Any]], None] = lambda _n, _p: None
        self.edit_records: Callable[[int, bytes], bytes] = lambda _n, data: data
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    def append(self, batches: int, epoch: int) -> None:
        for i in range(batches):
            self.log.append_as_leader(build_batch([SimpleRecord(None, bytes([i % 251]) * BATCH_VALUE)] * (1 + i % 2)),
                                      leader_epoch=epoch)

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = ServerConnection(1 << 20)
        self.writers.append(writer)
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                req = conn.decode(await reader.readexactly(size))
                assert req.header.api_key == ApiKey.FETCH
                writer.write(b"".join(bytes(p) for p in self._answer(req.header, req.body)))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _answer(self, header: RequestHeader, body: dict[str, Any]) -> list:
        p = body["topics"][0]["partitions"][0]
        n = len(self.requests)
        self.requests.append((p["fetch_offset"], p["last_fetched_epoch"]))
        self.before_answer(n, p)
        r = self.part.read(p["fetch_offset"], p["partition_max_bytes"], isolation=FetchIsolation.LOG_END,
                           min_one_message=True, current_leader_epoch=p["current_leader_epoch"],
                           last_fetched_epoch=p["last_fetched_epoch"], replica_id=body["replica_id"])
        records = r.records.tobytes() if not isinstance(r.records, bytes) else r.records
        entry: dict[str, Any] = {
            "partition_index": 0, "error_code": r.error, "high_watermark": self.hw if not r.error else -1,
            "last_stable_offset": self.hw, "log_start_offset": r.log_start_offset, "aborted_transactions": None,
            "preferred_read_replica": -1, "records": self.edit_records(n, records)}
        if r.diverging is not None:
            entry["diverging_epoch"] = {"epoch": r.diverging[0], "end_offset": r.diverging[1]}
        return encode_response(RequestHeader(ApiKey.FETCH, header.api_version, header.correlation_id, None), {
            "throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": "t", "partitions": [entry]}]})


    def drop_connections(self) -> None:
        """What a restart does to the connections the followers hold."""
        for w in self.writers:
            w.close()
        self.writers.clear()


class Follower:
    def __init__(self, tmp_path, leader_epoch: int = 3, backoff_ms: int = 50) -> None:
        self.log = Env().open(tmp_path / "follower" / "t-0")
        self.part = Partition("t", 0, self.log, local_broker_id=2)
        self.part.make_follower(1, leader_epoch, isr=[1, 2], replicas=[1, 2])
        self.failed: list[OSError] = []
        self.manager = ReplicaFetcherManager(
            FetcherSettings(2, wait_max_ms=20, max_bytes=ROUND_BYTES, response_max_bytes=ROUND_BYTES,
                            backoff_ms=backoff_ms),
            lambda t, p: self.part if (t, p) == ("t", 0) else None, lambda _t, _p, exc: self.failed.append(exc))

    def follow(self, port: int) -> ReplicaFetcher:
        self.manager.learn_leaders([{"broker_id": 1, "host_name": "127.0.0.1", "port": port}])
        self.manager.add_partition(self.part)
        fetcher = self.manager.fetchers[1]
        fetcher.frame_buffers.min_size = 0  # every frame from the reused buffers (10 MiB rounds in production)
        return fetcher


def _bytes(lg: Log) -> bytes:
    return lg.read(lg.log_start_offset, 1 << 26, FetchIsolation.LOG_END).records.tobytes()


def _batch_starts(data: bytes) -> list[tuple[int, int]]:
    """(byte position, base offset) of each batch."""
    out, pos = [], 0
    for b in iter_batches(data):
        out.append((pos, b.base_offset))
        pos += len(b.buffer)
    return out


async def _caught_up(leader: Leader, follower: Follower, timeout_s: float = 20) -> None:
    async with asyncio.timeout(timeout_s):
        while follower.log.log_end_offset != leader.log.log_end_offset or follower.log.high_watermark < leader.hw:
            await asyncio.sleep(0.01)


def _run(tmp_path, batches: int, test: Callable[[Leader, Follower, int], Any], leader_epoch: int = 3,
         backoff_ms: int = 50) -> None:
    async def main() -> None:
        leader = Leader(tmp_path, batches, leader_epoch)
        follower = Follower(tmp_path, leader_epoch, backoff_ms)
        port = await leader.start()
        try:
            await test(leader, follower, port)
        finally:
            await follower.manager.stop()
            assert leader.server is not None
            leader.server.close()
            follower.log.close()
            leader.log.close()

    asyncio.run(main())


def test_follower_runs_walks_batch_headers_to_the_last_whole_batch(tmp_path):
    leader = Leader(tmp_path, 6)
    data = _bytes(leader.log)
    starts = _batch_starts(data)
    walk = follower_runs(data, 5000)
    assert walk.next_offset == leader.log.log_end_offset and walk.last_epoch == 3
    assert walk.runs[0][0] == 0 and walk.runs[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(walk.runs, walk.runs[1:], strict=False))  # contiguous
    cut = follower_runs(data[:-10], None)  # a partial last batch: left for the next fetch
    assert cut.runs == [(0, starts[-1][0])] and cut.next_offset == starts[-1][1]
    broken = bytearray(data)
    broken[starts[2][0] + 8:starts[2][0] + 12] = (3).to_bytes(4, "big")  # a length below Kafka's minimum
    assert follower_runs(broken, None).next_offset == -1
    leader.log.close()


def test_a_follower_behind_the_hw_fetches_ahead_and_copies_the_log_byte_for_byte(tmp_path):
    async def test(leader: Leader, follower: Follower, port: int) -> None:
        fetcher = follower.follow(port)
        await _caught_up(leader, follower)
        offsets = [o for o, _ in leader.requests]
        rounds = sum(1 for o in offsets if o < leader.log.log_end_offset)
        assert rounds > 10
        # every round after the first was asked for before its predecessor's append; the fetch from the log end
        # (the HW) was not: the answer before it reached the HW
        assert fetcher.speculative_fetches == rounds - 1
        assert _bytes(follower.log) == _bytes(leader.log)
        # two buffers served every answer (one being appended, one being received), none reused too early
        assert fetcher.frame_buffers.reused >= len(offsets) - 4 and fetcher.frame_buffers.allocated <= 4
        assert offsets == sorted(offsets)  # nothing asked twice, nothing skipped back
        assert follower.log.leader_epoch_cache.epoch_entries() == leader.log.leader_epoch_cache.epoch_entries()
        st = follower.manager.fetch_state("t", 0)
        assert st is not None and st.appending is not None  # the rounds fetched ahead went to the append thread

    _run(tmp_path, 60, test)


@pytest.mark.slow
def test_a_role_change_waits_for_the_write_of_records_fetched_ahead(tmp_path):
    """Records fetched ahead are written on the manager's append thread while the event loop receives the next
    answer. LeaderAndIsr takes a partition from its fetcher before changing its role (make_leader reads the log
    end to start its epoch, as Kafka's waits on leaderIsrUpdateLock): that removal waits for a write in
    progress, and nothing is written as follower after it. The write is held up by holding the follower log's
    lock on another thread, as a long page-cache write would."""

    async def test(leader: Leader, follower: Follower, port: int) -> None:
        release = threading.Event()
        held = threading.Event()

        def hold_the_log() -> None:
            with follower.log._lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold_the_log)

        def first_fetch(n: int, _p: dict[str, Any]) -> None:  # the fetcher's truncation to its HW is done
            if n == 0:
                holder.start()
                assert held.wait(5)

        leader.before_answer = first_fetch
        try:
            follower.follow(port)
            async with asyncio.timeout(10):  # the first answer, fetched ahead of, is on the append thread
                while (st := follower.manager.fetch_state("t", 0)) is None or st.appending is None:
                    await asyncio.sleep(0.005)
            assert not st.appending.done() and follower.log.log_end_offset == 0
            threading.Timer(0.3, release.set).start()
            t0 = time.monotonic()
            follower.manager.remove_partition("t", 0)
            assert time.monotonic() - t0 > 0.2 and st.appending.done()
        finally:
            release.set()
            if holder.is_alive():
                holder.join()
        end = follower.log.log_end_offset
        assert end > 0  # the write finished before the removal returned
        follower.part.make_leader(4, isr=[2], replicas=[1, 2])
        await asyncio.sleep(0.3)  # the fetcher resumes after the write, the look-ahead's answer arrives
        assert follower.log.log_end_offset == end
        assert _bytes(leader.log).startswith(_bytes(follower.log))

    _run(tmp_path, 60, test)


def test_a_connection_the_leader_closed_while_idle_is_reopened_without_backing_off(tmp_path):
    """A leader restarting while a follower has nothing to fetch from it (a rolling restart moves leadership
    away and back) closes the fetcher's idle connection; the next fetch reconnects at once, as Kafka's
    NetworkClient does. Backing off replica.fetch.backoff.ms there held the HW (and acks=all) for a second at
    each step of a rolling restart."""

    async def test(leader: Leader, follower: Follower, port: int) -> None:
        fetcher = follower.follow(port)
        await _caught_up(leader, follower)
        follower.manager.remove_partition("t", 0)  # leadership moved elsewhere: the fetcher idles, connected
        async with asyncio.timeout(10):
            while fetcher._stream is not None and fetcher._stream._answers:  # the last fetch's answer is in
                await asyncio.sleep(0.01)
            assert fetcher._stream is not None
            leader.drop_connections()  # the leader restarts
            while not fetcher._stream.lost_while_idle:
                await asyncio.sleep(0.01)
        leader.append(5, 3)
        leader.hw = leader.log.log_end_offset
        t = asyncio.get_running_loop().time()
        follower.manager.add_partition(follower.part)  # it follows this partition there again
        await _caught_up(leader, follower)
        assert asyncio.get_running_loop().time() - t < 5  # the back-off (30 s here) was not waited
        assert _bytes(follower.log) == _bytes(leader.log)

    _run(tmp_path, 10, test, backoff_ms=30_000)


@pytest.mark.slow
def test_a_partition_reassigned_after_a_failed_fetch_is_fetched_without_waiting_out_the_back_off(tmp_path):
    """A fetch that fails on the wire delays the partitions it was for by replica.fetch.backoff.ms, not the
    fetcher: a LeaderAndIsr that makes this broker follow the restarted leader at a new epoch is acted on at once
    (Kafka's AbstractFetcherThread delays partitions; a newly added one is not delayed)."""

    async def test(leader: Leader, follower: Follower, port: int) -> None:
        follower.follow(port)
        await _caught_up(leader, follower)
        leader.drop_connections()  # the leader restarts under a fetch (or between two)
        await asyncio.sleep(0.3)
        leader.part.make_leader(4, isr=[1, 2], replicas=[1, 2])
        leader.append(5, 4)
        leader.hw = leader.log.log_end_offset
        t = asyncio.get_running_loop().time()
        follower.part.make_follower(1, 4, isr=[1, 2], replicas=[1, 2])
        follower.manager.add_partition(follower.part)
        await _caught_up(leader, follower)
        assert asyncio.get_running_loop().time() - t < 5  # the back-off (30 s here) was not waited
        assert _bytes(follower.log) == _bytes(leader.log)
        assert follower.log.leader_epoch_cache.epoch_entries() == leader.log.leader_epoch_cache.epoch_entries()

    _run(tmp_path, 10, test, backoff_ms=30_000)


@pytest.mark.slow
def test_a_leader_that_has_not_applied_its_leader_and_isr_yet_is_asked_again_within_milliseconds(tmp_path):
    """The controller sends LeaderAndIsr to the new leader and its followers at once; a follower that asks first is
    answered UNKNOWN_LEADER_EPOCH. It asks again after 50 ms (doubling), not after replica.fetch.backoff.ms: the
    ISR is often the leader and this follower, so the HW and every acks=all produce would wait that long."""

    async def test(leader: Leader, follower: Follower, port: int) -> None:
        follower.part.make_follower(1, 4, isr=[1, 2], replicas=[1, 2])  # epoch 4 here, the leader still at 3
        follower.follow(port)
        codes = []
        leader.before_answer = lambda _n, p: codes.append(p["current_leader_epoch"])
        await asyncio.sleep(0.5)
        assert follower.log.log_end_offset == 0
        assert 3 <= len(codes) <= 6  # 50 + 100 + 200 ms apart, then 400: a few, not a busy loop
        leader.part.make_leader(4, isr=[1, 2], replicas=[1, 2])
        leader.append(3, 4)
        leader.hw = leader.log.log_end_offset
        t = asyncio.get_running_loop().time()
        await _caught_up(leader, follower)
        assert asyncio.get_running_loop().time() - t < 5  # the back-off (30 s here) was not waited
        assert _bytes(follower.log) == _bytes(leader.log)

    _run(tmp_path, 10, test, backoff_ms=30_000)


def test_no_fetch_ahead_at_or_past_the_hw(tmp_path):
    async def test(leader: Leader, follower: Follower, port: int) -> None:
        starts = _batch_starts(_bytes(leader.log))
        leader.hw = starts[2][1]  # the first round (~4 batches) already reaches the HW
        fetcher = follower.follow(port)
        await _caught_up(leader, follower)
        assert fetcher.speculative_fetches == 0
        assert _bytes(follower.log) == _bytes(leader.log)

    _run(tmp_path, 40, test)


def test_fetch_ahead_stops_below_the_hw(tmp_path):
    """With the HW in the middle of the leader's log, a fetch ahead never asks from the HW or past it."""

    async def test(leader: Leader, follower: Follower, port: int) -> None:
        starts = _batch_starts(_bytes(leader.log))
        hw = leader.hw = starts[len(starts) // 2][1]
        ahead: list[int] = []

        def note(n: int, p: dict[str, Any]) -> None:
            if fetcher.speculative_fetches > len(ahead):  # this request was sent ahead
                ahead.append(p["fetch_offset"])

        leader.before_answer = note
        fetcher = follower.follow(port)
        await _caught_up(leader, follower)
        assert ahead and max(ahead) < hw
        assert _bytes(follower.log) == _bytes(leader.log)

    _run(tmp_path, 60, test)


def test_a_corrupt_batch_in_a_round_fetched_ahead_loses_and_duplicates_nothing(tmp_path):
    """The last batch of the third answer has a bad CRC. The follower already asked for the records after it
    (the leader sees a fetch from past the corrupt batch: evidence of the look-ahead); its append refuses the
    answer, it drops the answer to the look-ahead, and fetches the third answer's records again."""

    async def test(leader: Leader, follower: Follower, port: int) -> None:
        corrupted: list[int] = []

        def corrupt(n: int, data: bytes) -> bytes:
            if n != 2:
                return data
            starts = _batch_starts(data)
            pos, base = starts[-1]
            corrupted.append(base)
            out = bytearray(data)
            out[pos + 70] ^= 0xFF  # a record byte: covered by the CRC
            return bytes(out)

        leader.edit_records = corrupt
        fetcher = follower.follow(port)
        await _caught_up(leader, follower)
        assert corrupted
        offsets = [o for o, _ in leader.requests]
        assert offsets[3] > corrupted[0]  # asked past the corrupt batch before the append found it
        assert offsets[4] == offsets[2]  # the look-ahead's answer dropped: the refused records asked again
        assert fetcher.speculative_fetches > 0
        assert _bytes(follower.log) == _bytes(leader.log)

    _run(tmp_path, 60, test)


def test_a_truncation_in_a_round_fetched_ahead_loses_and_duplicates_nothing(tmp_path):
    """When the look-ahead's answer arrives, the follower was truncated below it (as the fetcher does after a
    diverging epoch): the answer is for an offset nobody asks any more and is dropped; fetching resumes at the
    new log end."""

    async def test(leader: Leader, follower: Follower, port: int) -> None:
        cut: list[int] = []

        def truncate(n: int, p: dict[str, Any]) -> None:
            if n == 4 and fetcher.speculative_fetches >= 3:
                # request 4 was sent ahead of the append of answer 3, which is appended by now (or soon: it runs
                # on the append thread, and a truncation, the fetcher's own, never overlaps it)
                st = follower.manager.fetch_state("t", 0)
                assert st is not None and st.appending is not None
                concurrent.futures.wait([st.appending])
                cut.append(follower.log.log_end_offset)
                target = _batch_starts(_bytes(follower.log))[2][1]
                follower.part.truncate_to(target)
                st = follower.manager.fetch_state("t", 0)
                assert st is not None
                st.fetch_offset = target

        leader.before_answer = truncate
        fetcher = follower.follow(port)
        await _caught_up(leader, follower)
        assert cut, "no look-ahead by the fourth fetch"
        offsets = [o for o, _ in leader.requests]
        assert offsets[4] == cut[0] and offsets[5] < cut[0]  # the dropped answer's offset, then the new end
        assert _bytes(follower.log) == _bytes(leader.log)

    _run(tmp_path, 60, test)


def test_a_leader_change_in_a_round_fetched_ahead_truncates_to_the_new_history(tmp_path):
    """Between the look-ahead's request and its answer the leader changed its history (epoch 4 from offset
    T, as after an unclean election) and LeaderAndIsr made this broker follow epoch 4: the look-ahead's answer
    (fenced: epoch 3) is dropped, the diverging epoch truncates the follower to T, and it copies the new
    history byte for byte."""

    async def test(leader: Leader, follower: Follower, port: int) -> None:
        changed: list[int] = []

        def new_leader_epoch(n: int, p: dict[str, Any]) -> None:
            if n == 3 and fetcher.speculative_fetches >= 2 and not changed:
                # LeaderAndIsr's first step, before the role changes: the last answer's write (on the append
                # thread, perhaps still running) finishes, nothing more is written as a follower of epoch 3
                follower.manager.remove_partition("t", 0)
                starts = _batch_starts(_bytes(leader.log))
                t = starts[5][1]
                assert follower.log.log_end_offset > t
                changed.append(t)
                leader.log.truncate_to(t)
                leader.part.make_leader(4, isr=[1], replicas=[1, 2])
                leader.append(30, 4)
                leader.hw = leader.log.log_end_offset
                follower.part.make_follower(1, 4, isr=[1], replicas=[1, 2])
                follower.manager.add_partition(follower.part)

        leader.before_answer = new_leader_epoch
        fetcher = follower.follow(port)
        await _caught_up(leader, follower)
        assert changed
        assert _bytes(follower.log) == _bytes(leader.log)
        assert follower.log.leader_epoch_cache.epoch_entries() == leader.log.leader_epoch_cache.epoch_entries()

    _run(tmp_path, 60, test)


def _answer_frames(correlation_ids: list[int], hws: list[int]) -> bytes:
    out = b""
    for cid, hw in zip(correlation_ids, hws, strict=True):
        out += b"".join(bytes(p) for p in encode_response(RequestHeader(ApiKey.FETCH, 12, cid, None), {
            "throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{"topic": "t", "partitions": [{
                "partition_index": 0, "error_code": 0, "high_watermark": hw, "last_stable_offset": hw,
                "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
                "records": b""}]}]}))
    return out


_FETCH = {"replica_id": 2, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
          "session_id": 0, "session_epoch": -1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}


@pytest.mark.parametrize("in_order", [True, False])
def test_two_requests_in_flight_are_answered_in_order_or_the_connection_is_lost(in_order):
    """The stream pairs answers with requests by correlation id, oldest first (Kafka answers a connection's
    requests in order); an answer out of order loses the stream, failing both requests."""

    async def run() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = ServerConnection(1 << 20)
            cids = []
            for _ in range(2):
                size = int.from_bytes(await reader.readexactly(4), "big")
                cids.append(conn.decode(await reader.readexactly(size)).header.correlation_id)
            writer.write(_answer_frames(cids if in_order else cids[::-1], [10, 20] if in_order else [20, 10]))
            await writer.drain()
            await reader.read()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
            stream = _ResponseStream.take_over(reader, writer, ClientConnection("test"))
            first, second = stream.send(ApiKey.FETCH, 12, _FETCH), stream.send(ApiKey.FETCH, 12, _FETCH)
            try:
                if in_order:
                    b2 = await asyncio.wait_for(stream.answer(second), 10)
                    b1 = await asyncio.wait_for(stream.answer(first), 10)
                    assert [b["responses"][0]["partitions"][0]["high_watermark"] for b in (b1, b2)] == [10, 20]
                else:
                    for answer in (first, second):
                        with pytest.raises(CorrelationError):
                            await asyncio.wait_for(stream.answer(answer), 10)
                    with pytest.raises(ConnectionError):
                        stream.send(ApiKey.FETCH, 12, _FETCH)
            finally:
                stream.close()

    asyncio.run(run())
