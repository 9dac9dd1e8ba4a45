"""The follower side of replication (Kafka's ReplicaFetcherManager, ReplicaFetcherThread, AbstractFetcherThread).

One asyncio task per source (leader) broker: the partitions this broker follows on that leader share one
sessionless Fetch request (v12: `replica_id` = this broker, `current_leader_epoch`, `last_fetched_epoch`,
`log_start_offset`, fetch offset = the local log end). The answer is appended as follower (the leader's
offsets and epochs kept, producer state rebuilt), the follower HW becomes min(leader HW, LEO) and the log
start follows the leader's. Errors as AbstractFetcherThread.processFetchRequest: FENCED_LEADER_EPOCH parks the
partition until the next LeaderAndIsr; retriable errors and lost connections back off `replica.fetch.backoff.ms` (a
leader that has not applied its LeaderAndIsr yet is asked again sooner: LEADER_NOT_READY);
KAFKA_STORAGE_ERROR or a local failure marks the partition failed (a local OSError first takes its log dir
offline through the LogManager).

Truncation (KIP-101/279) has one home, `replication.truncation.truncation_offset`. Which question feeds it follows Kafka
2.8/3.x (AbstractFetcherThread.addPartitions): a log with a leader epoch starts *fetching* at its LEO with
`last_fetched_epoch`, and the leader's `diverging_epoch` answer drives truncation; iteration (KIP-279) is
the next fetch with the new last epoch. A log without epochs starts *truncating* to its HW. When
`inter.broker.protocol.version` is below 2.7 (Kafka's isTruncationOnFetchSupported) a partition with
epochs starts truncating through OffsetsForLeaderEpoch instead, asking again until the answer completes,
and fetches with v11 (no `last_fetched_epoch`). OFFSET_OUT_OF_RANGE asks the leader's log end and start
with ListOffsets (AbstractFetcherThread.fetchOffsetAndTruncate).

Everything that touches a log runs on the event loop between awaits, as the broker's leader appends do, and
only after checking that the partition still follows the same leader at the same epoch as when the request
left: LeaderAndIsr removes a partition from its fetcher before changing its role, so a stale answer is
dropped rather than applied.

While a follower catches up below the leader's HW, the next Fetch goes out before the last answer is
appended (`ReplicaFetcher._speculate`; docs/design.md, deviations): two requests in flight, never more, and
only where the offset it reports can move neither the leader's HW nor its ISR. That append is the one log
write off the event loop: it runs on the manager's append thread while the loop receives the next answer,
and removing the partition from its fetcher (the first step of every role change) waits for it to finish.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkalite.broker.frame_buffers import FrameBuffers
from kafkalite.broker.low_water import ReceiveLowWater
from kafkalite.error_codes import RETRIABLE, error_name
from kafkalite.errors import CorruptRecordError, KafkaliteError, SaslAuthenticationError
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.protocol.connection import ClientConnection
from kafkalite.replication.partition import FollowerRuns, Partition, follower_runs
from kafkalite.replication.truncation import truncation_offset
from kafkalite.security.connect_failures import FailureLog
from kafkalite.security.transport import PLAINTEXT_CLIENT, ClientSecurity, open_connection
from kafkalite.storage.leader_epoch import UNDEFINED_EPOCH

log = logging.getLogger("kafkalite.broker.replica_fetcher")
FAILURES = FailureLog(log)  # a misconfigured connection to a leader is said once per leader and cause

FETCH_VERSION = 12  # the highest kafkalite serves (protocol/messages/fetch.py); truncate-on-fetch needs 12
FETCH_VERSION_NO_TRUNCATION = 11  # what an IBP below 2.7 sends
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 7
LATEST, EARLIEST = -1, -2
# The leader has not applied the LeaderAndIsr this follower already acts on: the controller sends both at once,
# so the follower often asks first. These are retried after 50 ms, doubling per error in a row up to
# replica.fetch.backoff.ms (Kafka waits the whole backoff, 1 s, which at every leader move held the HW and
# acks=all for that second: the new ISR is the leader and this follower).
LEADER_NOT_READY = {ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE}
LEADER_NOT_READY_FIRST_BACKOFF_MS = 50

TopicPartition = tuple[str, int]


# --- fetch state ------------------------------------------------------------------------------------------

@dataclass
class FetcherSettings:
    node_id: int
    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1048576
    response_max_bytes: int = 10485760
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30000
    truncate_on_fetch: bool = True
    security: ClientSecurity = PLAINTEXT_CLIENT  # the inter-broker listener's protocol, as a client

    @classmethod
    def from_config(cls, config: Any) -> FetcherSettings:
        return cls(config.node_id, config.get("replica.fetch.wait.max.ms"), config.get("replica.fetch.min.bytes"),
                   config.get("replica.fetch.max.bytes"), config.get("replica.fetch.response.max.bytes"),
                   config.get("replica.fetch.backoff.ms"), config.get("replica.socket.timeout.ms"),
                   truncation_on_fetch_supported(config.get("inter.broker.protocol.version")))


def truncation_on_fetch_supported(ibp: str) -> bool:
    """Kafka's MetadataVersion.isTruncationOnFetchSupported: IBP 2.7-IV1 and later (2.7 is taken as 2.7-IV1)."""
    m = re.match(r"(\d+)\.(\d+)", ibp.strip())
    return m is not None and (int(m[1]), int(m[2])) >= (2, 7)


@dataclass
class PartitionFetchState:
    """What the fetcher knows of one followed partition (Kafka's PartitionFetchState)."""

    topic: str
    partition: int
    leader_epoch: int  # from LeaderAndIsr: sent as current_leader_epoch; the identity of this follow-ship
    fetch_offset: int
    last_fetched_epoch: int = UNDEFINED_EPOCH
    truncating: bool = False  # Truncating phase: settle the log's end with the leader before fetching
    delayed_until: float = 0.0  # monotonic seconds; backoff after an error
    not_ready_answers: int = 0  # LEADER_NOT_READY answers in a row (`_retry_soon`)
    stopped: str = ""  # why it is not fetched until the next LeaderAndIsr (fenced, failed), "" while active
    # an append of records fetched ahead, running on the manager's append thread (`ReplicaFetcher._fetch`)
    appending: concurrent.futures.Future[BaseException | None] | None = None

    def ready(self, now: float) -> bool:
        return not self.stopped and now >= self.delayed_until


class _Disconnected(Exception):
    pass


class _ResponseStream(asyncio.BufferedProtocol):
    """The fetcher's connection once `open_connection` has secured it: the socket reads straight into the
    buffer of the response frame in progress (`recv_into` on FrameDecoder.recv_buffer), so a megabyte of
    fetched records reaches the follower's log without a copy in Python. A StreamReader would copy it
    three times (into its buffer, out as bytes, into the frame) and stop reading every 128 KiB (its
    limit), one event-loop round each.

    Requests may be pipelined (`send`, then `answer`): Kafka answers a connection's requests in order, and
    ClientConnection checks each answer's correlation id against the oldest request awaiting one. The
    fetcher has at most two in flight, and only while catching up below the HW (ReplicaFetcher._speculate)."""

    def __init__(self, conn: ClientConnection, transport: asyncio.Transport) -> None:
        self.conn = conn
        self.transport = transport
        self._answers: deque[asyncio.Future[dict[str, Any]]] = deque()
        self._writable: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._idle_when_lost = False
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._low_water = ReceiveLowWater()  # no wake-up per arrival while a 10 MiB answer comes in
        self._low_water.attach(transport)

    @classmethod
    def take_over(cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  conn: ClientConnection) -> _ResponseStream:
        """Move a connection from its stream pair to this protocol (TLS transports support it too)."""
        transport = writer.transport
        if getattr(reader, "_buffer", b""):  # the server never speaks first: left-over bytes are a broken stream
            transport.abort()
            raise ConnectionError("unexpected bytes from the leader before the first request")
        stream = cls(conn, transport)  # type: ignore[arg-type]
        stream._streams = (reader, writer)  # a StreamWriter closes its transport when collected
        transport.set_protocol(stream)
        if isinstance(transport, asyncio.ReadTransport):
            transport.resume_reading()
        return stream

    @property
    def lost_while_idle(self) -> bool:
        """The leader closed (or the socket failed) with no request of ours awaiting an answer: typically the
        leader restarted while this fetcher had nothing to fetch from it. Nothing was lost in flight, so the
        next request reconnects at once, as Kafka's NetworkClient does for a connection its poll found closed;
        backing off `replica.fetch.backoff.ms` here would stall the ISR (and acks=all) at every rolling restart."""
        return self._error is not None and self._idle_when_lost

    @property
    def error(self) -> BaseException | None:
        """What closed the connection, or None while it is open."""
        return self._error

    async def request(self, api: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        return await self.answer(self.send(api, version, body))

    def send(self, api: ApiKey, version: int, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Write one request; its answer is the future returned (await it through `answer`)."""
        if self._error is not None:
            raise ConnectionError(f"the connection to the leader is lost ({self._error})")
        _cid, frame = self.conn.send_request(api, version, body)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers.append(answer)
        self.transport.write(frame)
        return answer

    async def answer(self, answer: asyncio.Future[dict[str, Any]]) -> dict[str, Any]:
        if self._writable is not None:
            await asyncio.shield(self._writable)
        return await answer

    def close(self) -> None:
        """Close the connection; answers not received yet fail with ConnectionError."""
        self._fail(ConnectionError("the connection to the leader was closed"))
        self.transport.close()

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
            self._idle_when_lost = not self._answers
        while self._answers:
            a = self._answers.popleft()
            if not a.done():
                a.set_exception(exc if isinstance(exc, Exception) else ConnectionError(str(exc)))
                a.exception()  # a request given up on (a look-ahead dropped) has no reader: no "never retrieved"
        self.resume_writing()  # a writer waiting for the buffer to drain then finds the answer failed

    # asyncio.BufferedProtocol
    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn.recv_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            got = self.conn.received(nbytes)
        except Exception as exc:  # a frame that cannot be decoded or answers nothing: the stream is lost
            self._fail(exc)
            self.transport.abort()
            return
        self._low_water.frame_wants(0 if got is not None else self.conn.frames.want())
        if got is not None:
            answer = self._answers.popleft() if self._answers else None
            if answer is None or answer.done():
                self._fail(ConnectionError("the leader answered a request that was not sent"))
                self.transport.abort()
                return
            answer.set_result(got[1])

    def eof_received(self) -> bool:
        self._fail(ConnectionError("the leader closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("the connection to the leader was closed"))

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None


@dataclass
class ReplicaFetcher:
    """One leader's fetcher task and the partitions it fetches."""

    leader_id: int
    host: str
    port: int
    manager: ReplicaFetcherManager
    partitions: dict[TopicPartition, PartitionFetchState] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    speculative_fetches: int = 0  # fetches sent before the previous answer was appended (`_speculate`)
    frame_buffers: FrameBuffers = field(default_factory=FrameBuffers)
    _stream: _ResponseStream | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"replica-fetcher-{self.manager.settings.node_id}-from-{self.leader_id}")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait([self.task], timeout=5)
        self._disconnect()

    # --- connection (framing in protocol/connection.py) ------------------------------------------------

    async def _connect(self) -> None:
        timeout = self.manager.settings.socket_timeout_ms / 1000
        key = f"{self.leader_id}@{self.host}:{self.port}"
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await open_connection(self.host, self.port, self.manager.settings.security)
        except (OSError, SaslAuthenticationError) as exc:
            FAILURES.failed(key, f"Broker {self.manager.settings.node_id} cannot fetch from leader {self.leader_id} "
                            f"over {self.manager.settings.security.protocol} at {self.host}:{self.port}", exc,
                            f"broker {self.leader_id}", self.host)
            raise
        FAILURES.reached(key)
        self._stream = _ResponseStream.take_over(reader, writer, ClientConnection(
            f"replica-fetcher-{self.manager.settings.node_id}", allocate=self.frame_buffers))

    def _disconnect(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream = None

    async def _request(self, api: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        """One request and its answer; any failure of the connection raises _Disconnected."""
        return await self._answer(await self._send(api, version, body))

    async def _send(self, api: ApiKey, version: int, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Write a request (connecting first if needed); the answer is awaited with `_answer`."""
        try:
            if self._stream is not None and self._stream.lost_while_idle:
                log.info("Broker %d reconnects to leader %d: its idle connection was closed (%s)",
                         self.manager.settings.node_id, self.leader_id, self._stream.error)
                self._disconnect()
            if self._stream is None:
                async with asyncio.timeout(self.manager.settings.socket_timeout_ms / 1000):
                    await self._connect()
            assert self._stream is not None
            return self._stream.send(api, version, body)
        except (OSError, EOFError, TimeoutError, KafkaliteError) as exc:
            self._disconnect()
            raise _Disconnected(f"{type(exc).__name__}: {exc}") from exc

    async def _answer(self, answer: asyncio.Future[dict[str, Any]]) -> dict[str, Any]:
        try:
            if self._stream is None:
                raise ConnectionError("the connection was closed while the request was out")
            async with asyncio.timeout(self.manager.settings.socket_timeout_ms / 1000):
                return await self._stream.answer(answer)
        except (OSError, EOFError, TimeoutError, KafkaliteError) as exc:
            self._disconnect()
            raise _Disconnected(f"{type(exc).__name__}: {exc}") from exc

    # --- the loop --------------------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.manager.settings.backoff_ms / 1000
        while True:
            try:
                now = time.monotonic()
                ready = [st for st in self.partitions.values() if st.ready(now)]
                if not ready:
                    await self._idle(now)
                    continue
                truncating = [st for st in ready if st.truncating]
                if truncating:
                    await self._truncate_phase(truncating)
                    continue
                await self._fetch(ready)
            except _Disconnected as exc:
                # the partitions back off, not the task: one a LeaderAndIsr (re)assigns meanwhile is fetched at
                # once (a new PartitionFetchState), as in Kafka's AbstractFetcherThread
                log.info("Broker %d lost its connection to leader %d at %s:%d (%s); retrying in %.1f s",
                         self.manager.settings.node_id, self.leader_id, self.host, self.port, exc, backoff)
                self._back_off(list(self.partitions.values()))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("The fetcher of broker %d from leader %d failed; retrying", self.manager.settings.node_id,
                              self.leader_id)
                self._back_off(list(self.partitions.values()))
                await asyncio.sleep(backoff)  # a bug, not the wire: never a hot loop of tracebacks

    async def _idle(self, now: float) -> None:
        self.changed.clear()
        waits = [st.delayed_until - now for st in self.partitions.values() if not st.stopped]
        timeout = max(0.0, min(waits)) if waits else None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.changed.wait()

    def _back_off(self, states: list[PartitionFetchState]) -> None:
        until = time.monotonic() + self.manager.settings.backoff_ms / 1000
        for st in states:
            st.delayed_until = until

    def _retry_soon(self, st: PartitionFetchState, code: int) -> None:
        """A LEADER_NOT_READY answer: 50 ms, then doubling per such answer in a row, up to the backoff."""
        backoff_ms = self.manager.settings.backoff_ms
        delay_ms = min(backoff_ms, LEADER_NOT_READY_FIRST_BACKOFF_MS << min(st.not_ready_answers, 16))
        st.not_ready_answers += 1
        st.delayed_until = time.monotonic() + delay_ms / 1000
        log.debug("Leader %d answered %s for %s-%d at epoch %d; asking again in %d ms", self.leader_id,
                  error_name(code), st.topic, st.partition, st.leader_epoch, delay_ms)

    def _current(self, st: PartitionFetchState) -> Partition | None:
        """The partition, if `st` still describes this broker's follow-ship of it (same state object, same
        leader and epoch): anything else means a LeaderAndIsr or StopReplica came while a request was out."""
        key = (st.topic, st.partition)
        if self.partitions.get(key) is not st or st.stopped:
            return None
        part = self.manager.partition(st.topic, st.partition)
        if part is None or part.leader_id != self.leader_id or part.leader_epoch != st.leader_epoch:
            return None
        return part

    # --- fetch -----------------------------------------------------------------------------------------

    async def _fetch(self, states: list[PartitionFetchState]) -> None:
        """Fetch rounds for `states`: normally one; more while the look-ahead (`_speculate`) sends the next
        request before the current answer is appended, so the leader reads and sends the next records while
        this broker writes the last ones. At most two requests are in flight; any way out of here with one
        still unanswered closes the connection, so no later request can be paired with its answer."""
        s = self.manager.settings
        version = FETCH_VERSION if s.truncate_on_fetch else FETCH_VERSION_NO_TRUNCATION
        request = self._fetch_request(states, {})
        if request is None:
            return
        body, sent = request
        answer: asyncio.Future[dict[str, Any]] | None = await self._send(ApiKey.FETCH, version, body)
        try:
            while answer is not None:
                resp = await self._answer(answer)
                answer = None
                if resp.get("error_code", 0):
                    log.warning("Leader %d refused the fetch of broker %d with error %s", self.leader_id, s.node_id,
                                error_name(resp["error_code"]))
                    self._back_off([st for st, _ in sent.values()])
                    return
                answers = [(got, pr) for t in resp.get("responses", []) for pr in t.get("partitions", [])
                           if (got := sent.get((t["topic"], pr["partition_index"]))) is not None]
                ahead = self._speculate(answers, sent, states)
                if ahead is not None:
                    answer = await self._send(ApiKey.FETCH, version, ahead[0])
                if ahead is None:
                    out_of_range = [st for (st, offset), pr in answers if self._process(st, offset, pr)]
                    for st in out_of_range:
                        await self._out_of_range(st)
                else:  # records without error below the HW only (`_speculate`): written beside the next receive
                    for (st, offset), pr in answers:
                        await self._append_beside(st, offset, pr, ahead[2][(st.topic, st.partition)])
                    sent = ahead[1]
        finally:
            if answer is not None:  # left with a request unanswered (cancelled, or an error on the way)
                self._disconnect()

    def _fetch_request(self, states: list[PartitionFetchState], ahead: dict[TopicPartition, tuple[int, int]]
                       ) -> tuple[dict[str, Any], dict[TopicPartition, tuple[PartitionFetchState, int]]] | None:
        """The Fetch body for `states` and what each partition was asked from; `ahead` gives the (offset,
        last fetched epoch) of partitions asked past records not appended yet (`_speculate`)."""
        s = self.manager.settings
        topics: dict[str, list[dict[str, Any]]] = {}
        sent: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        # Each partition may fill its share of replica.fetch.response.max.bytes (at least
        # replica.fetch.max.bytes, Kafka's per-partition figure): a follower that lags behind one busy
        # partition catches up in 10 MiB rounds, not 1 MiB ones (docs/design.md, deviations).
        partition_max = max(s.max_bytes, s.response_max_bytes // max(1, len(states)))
        for st in states:
            part = self._current(st)
            if part is None:
                continue
            offset, epoch = ahead.get((st.topic, st.partition), (st.fetch_offset, st.last_fetched_epoch))
            topics.setdefault(st.topic, []).append({
                "partition": st.partition, "current_leader_epoch": st.leader_epoch, "fetch_offset": offset,
                "last_fetched_epoch": epoch if s.truncate_on_fetch else UNDEFINED_EPOCH,
                "log_start_offset": part.log.log_start_offset, "partition_max_bytes": partition_max})
            sent[(st.topic, st.partition)] = (st, offset)
        if not sent:
            return None
        body = {"replica_id": s.node_id, "max_wait_ms": s.wait_max_ms, "min_bytes": s.min_bytes,
                "max_bytes": s.response_max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()], "forgotten_topics_data": [],
                "rack_id": ""}
        return body, sent

    def _speculate(self, answers: list[tuple[tuple[PartitionFetchState, int], dict[str, Any]]],
                   sent: dict[TopicPartition, tuple[PartitionFetchState, int]], states: list[PartitionFetchState]
                   ) -> tuple[dict[str, Any], dict[TopicPartition, tuple[PartitionFetchState, int]],
                              dict[TopicPartition, FollowerRuns]] | None:
        """The next Fetch, asked from the end of the records just received, before they are appended; None
        when that is not safe (docs/design.md, deviations). Safe only when every partition asked answered
        records without error or diverging epoch, the same partitions are still the ones to fetch, and each
        one's end of whole batches is strictly below the HW in its answer: the leader's HW (over the ISR
        only, never decreasing) is then already past the offset this fetch reports, so the leader can
        neither move its HW nor add this replica to the ISR for records not written here yet. Whatever
        goes wrong in the append (corrupt batch, storage error, a truncation, a new leader or epoch,
        StopReplica) leaves the log end or the fetch state different from the offset asked, and `_process`
        drops the answer. Returns the body, what was asked, and the walks of the current answer's records
        (`Partition.append_records_as_follower` reuses them)."""
        if len(answers) != len(sent) or len(states) != len(sent):
            return None
        now = time.monotonic()
        ready = {id(st) for st in self.partitions.values() if st.ready(now) and not st.truncating}
        if ready != {id(st) for st in states}:
            return None  # a partition added, removed, stopped or delayed meanwhile: the next round takes stock
        ahead: dict[TopicPartition, tuple[int, int]] = {}
        walks: dict[TopicPartition, FollowerRuns] = {}
        for (st, offset), pr in answers:
            records = pr.get("records")
            div = pr.get("diverging_epoch") or {}
            if (pr["error_code"] != ErrorCode.NONE or div.get("epoch", -1) >= 0 or div.get("end_offset", -1) >= 0
                    or not records or pr["high_watermark"] <= offset + 1):
                return None
            part = self._current(st)
            if part is None or st.fetch_offset != offset or part.log_end_offset != offset:
                return None
            walk = follower_runs(records, self.manager.settings.max_bytes)
            if not (offset < walk.next_offset < pr["high_watermark"]):
                return None
            key = (st.topic, st.partition)
            ahead[key] = (walk.next_offset, walk.last_epoch if walk.last_epoch >= 0 else st.last_fetched_epoch)
            walks[key] = walk
        request = self._fetch_request(states, ahead)
        if request is None or len(request[1]) != len(sent):
            return None
        self.speculative_fetches += 1
        log.debug("Broker %d asks leader %d for the next records before appending these: %s",
                  self.manager.settings.node_id, self.leader_id, ahead)
        return request[0], request[1], walks

    def _process(self, st: PartitionFetchState, offset: int, pr: dict[str, Any]) -> bool:
        """One partition of a fetch response (ReplicaFetcherThread.processPartitionData and the error cases
        of AbstractFetcherThread.processFetchRequest); True when it needs the out-of-range path
        (AbstractFetcherThread.fetchOffsetAndTruncate)."""
        part = self._current(st)
        if part is None or st.fetch_offset != offset or part.log_end_offset != offset:
            # The state changed meanwhile: the data is for a fetch nobody wants any more (a LeaderAndIsr or
            # StopReplica, a truncation, or a fetch sent ahead of an append that fell short of its offset).
            return False
        code = pr["error_code"]
        if code not in LEADER_NOT_READY:
            st.not_ready_answers = 0
        if code == ErrorCode.NONE:
            div = pr.get("diverging_epoch") or {}
            if div.get("epoch", -1) >= 0 or div.get("end_offset", -1) >= 0:
                self._truncate(st, part, div["epoch"], div["end_offset"])
                return False
            self._appended(st, part, offset, pr, self._write(part, pr, None))
            return False
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return True
        if code == ErrorCode.FENCED_LEADER_EPOCH:
            log.info("Leader %d fenced the fetch of %s-%d at epoch %d: it waits for a newer LeaderAndIsr",
                     self.leader_id, st.topic, st.partition, st.leader_epoch)
            st.stopped = "fenced"
        elif code == ErrorCode.KAFKA_STORAGE_ERROR:
            log.error("Leader %d has a storage error on %s-%d: the partition is marked failed", self.leader_id,
                      st.topic, st.partition)
            st.stopped = "failed"
        elif code in LEADER_NOT_READY:
            self._retry_soon(st, code)
        else:
            if code not in RETRIABLE:  # an error a retry cannot mend is worth a line; the rest are routine
                log.warning("Error %s fetching %s-%d from leader %d; retrying", error_name(code), st.topic,
                            st.partition, self.leader_id)
            self._back_off([st])
        return False

    async def _append_beside(self, st: PartitionFetchState, offset: int, pr: dict[str, Any],
                             walk: FollowerRuns) -> None:
        """Append a partition's records fetched ahead on the manager's append thread, so that the event loop
        receives the next answer meanwhile: the write (page-cache copy, CRC) and the receive copy each take
        about half of the follower's CPU, and on separate cores they overlap. While the write runs, whatever
        would change the partition's role waits for it (`ReplicaFetcherManager.remove_partition`, as Kafka's
        follower append holds the partition's leaderIsrUpdateLock): the log is never written as follower
        after it became leader, and nothing but that write touches it as follower meanwhile."""
        part = self._current(st)
        if part is None or st.fetch_offset != offset or part.log_end_offset != offset:
            return  # as in `_process`: the state changed while the request was out
        st.not_ready_answers = 0
        # kept (done) until the next one: a cancelled await must not hide a write still running from the waiters
        running = st.appending = self.manager.append_pool().submit(self._write_taken, part, [pr], walk)
        failure = await asyncio.wrap_future(running)
        if self._current(st) is not part:  # a LeaderAndIsr or StopReplica waited for the write: only the
            if isinstance(failure, OSError):  # disk's failure still counts
                self.manager.storage_failed(st, failure)
            elif failure is not None and not isinstance(failure, KafkaliteError):
                raise failure
            return
        self._appended(st, part, offset, pr, failure)

    def _write_taken(self, part: Partition, taken: list[dict[str, Any]], walk: FollowerRuns) -> BaseException | None:
        """`_write` on the append thread. The answer is taken out of `taken`: the pool's work item keeps its
        arguments until its thread gets round to dropping it, which may be after the event loop has already gone on
        to the next answer, and a view of the frame held there would keep its buffer from being reused."""
        return self._write(part, taken.pop(), walk)

    def _write(self, part: Partition, pr: dict[str, Any], walk: FollowerRuns | None) -> BaseException | None:
        """The log write of an answer's records: what it raised (for `_appended`, on the event loop), else None.
        Runs on the event loop or on the append thread; touches nothing but the partition's log."""
        records = pr.get("records")
        if records:
            try:
                part.append_records_as_follower(records, self.manager.settings.max_bytes,
                                                None if walk is None else walk.runs)
            except Exception as exc:  # handed to `_appended`, which re-raises what it does not expect
                return exc
        return None

    def _appended(self, st: PartitionFetchState, part: Partition, offset: int, pr: dict[str, Any],
                  failure: BaseException | None) -> None:
        """After `_write`: the fetch position follows the log end (a large answer goes in runs, and whatever
        got appended before a failure counts); then the failure's handling, or the HW and log start."""
        if part.log_end_offset != st.fetch_offset:
            st.fetch_offset = part.log_end_offset
            latest = part.log.latest_epoch
            if latest is not None and latest >= 0:
                st.last_fetched_epoch = latest
        if isinstance(failure, OSError):
            self.manager.storage_failed(st, failure)
        elif isinstance(failure, CorruptRecordError):
            log.warning("Corrupt records from leader %d for %s-%d at %d (%s); fetching again", self.leader_id,
                        st.topic, st.partition, offset, failure)
            self._back_off([st])
        elif isinstance(failure, KafkaliteError):
            log.error("Broker %d cannot append the records of leader %d for %s-%d at %d: %s; the partition "
                      "is marked failed", self.manager.settings.node_id, self.leader_id, st.topic, st.partition,
                      offset, failure)
            st.stopped = "failed"
        elif failure is not None:
            raise failure  # a bug: the fetcher's loop logs it and backs off, with the fetch position kept right
        else:
            part.update_follower_high_watermark(pr["high_watermark"])
            if pr.get("log_start_offset", -1) >= 0:
                part.maybe_update_log_start_offset(pr["log_start_offset"])

    # --- truncation (KIP-101, KIP-279) -----------------------------------------------------------------

    def _truncate(self, st: PartitionFetchState, part: Partition, leader_epoch: int, leader_end: int) -> None:
        """Apply the leader's (epoch, end offset) through `truncation_offset`; not done -> keep asking: by the
        next fetch's last_fetched_epoch, or (no truncate-on-fetch) by OffsetsForLeaderEpoch."""
        lg = part.log
        offset, done = truncation_offset(leader_epoch, leader_end,
                                         lambda e: lg.leader_epoch_cache.end_offset_for(e, lg.log_end_offset),
                                         lg.log_end_offset, lg.high_watermark)
        try:
            if offset < lg.high_watermark:
                log.warning("Truncating %s-%d to %d, below its high watermark %d (leader %d answered epoch %d end "
                            "%d)", st.topic, st.partition, offset, lg.high_watermark, self.leader_id, leader_epoch,
                            leader_end)
            if part.truncate_to(offset):
                log.info("Truncated %s-%d to %d after leader %d answered epoch %d end %d", st.topic, st.partition,
                         offset, self.leader_id, leader_epoch, leader_end)
        except OSError as exc:
            self.manager.storage_failed(st, exc)
            return
        st.fetch_offset = lg.log_end_offset
        latest = lg.latest_epoch
        st.last_fetched_epoch = UNDEFINED_EPOCH if latest is None else latest
        st.truncating = not done and not self.manager.settings.truncate_on_fetch

    async def _truncate_phase(self, states: list[PartitionFetchState]) -> None:
        """The Truncating phase (AbstractFetcherThread.maybeTruncate): partitions without epochs go back to
        their HW; the others ask OffsetsForLeaderEpoch for their latest epoch."""
        asking: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for st in states:
            part = self._current(st)
            if part is None:
                continue
            latest = part.log.latest_epoch
            if latest is None:
                hw = part.log.high_watermark
                try:
                    part.truncate_to(hw)
                except OSError as exc:
                    self.manager.storage_failed(st, exc)
                    continue
                st.fetch_offset, st.truncating = part.log_end_offset, False
            else:
                asking[(st.topic, st.partition)] = (st, latest)
        if not asking:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, p), (st, latest) in asking.items():
            topics.setdefault(topic, []).append({"partition": p, "current_leader_epoch": st.leader_epoch,
                                                 "leader_epoch": latest})
            log.info("Broker %d asks leader %d through OffsetsForLeaderEpoch where epoch %d of %s-%d ends",
                     self.manager.settings.node_id, self.leader_id, latest, topic, p)
        resp = await self._request(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.manager.settings.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
        for t in resp.get("topics", []):
            for pr in t.get("partitions", []):
                got = asking.get((t["topic"], pr["partition"]))
                if got is None:
                    continue
                st, latest = got
                part = self._current(st)
                if part is None or part.log.latest_epoch != latest:
                    continue
                code = pr["error_code"]
                if code == ErrorCode.NONE:
                    self._truncate(st, part, pr["leader_epoch"], pr["end_offset"])
                elif code == ErrorCode.FENCED_LEADER_EPOCH:
                    st.stopped = "fenced"
                elif code == ErrorCode.KAFKA_STORAGE_ERROR:
                    st.stopped = "failed"
                elif code in LEADER_NOT_READY:
                    self._retry_soon(st, code)
                else:
                    self._back_off([st])

    # --- out of range (fetchOffsetAndTruncate) ---------------------------------------------------------

    async def _leader_offset(self, st: PartitionFetchState, timestamp: int) -> int | None:
        resp = await self._request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
            "replica_id": self.manager.settings.node_id, "isolation_level": 0,
            "topics": [{"name": st.topic, "partitions": [{"partition_index": st.partition,
                                                          "current_leader_epoch": st.leader_epoch,
                                                          "timestamp": timestamp}]}]})
        for t in resp.get("topics", []):
            for pr in t.get("partitions", []):
                if pr["partition_index"] != st.partition:
                    continue
                if pr["error_code"] == ErrorCode.FENCED_LEADER_EPOCH:
                    st.stopped = "fenced"
                elif pr["error_code"]:
                    self._back_off([st])
                else:
                    return int(pr["offset"])
        return None

    async def _out_of_range(self, st: PartitionFetchState) -> None:
        """AbstractFetcherThread.fetchOffsetAndTruncate: behind the leader's log end only after an unclean
        election (truncate to it); otherwise restart at the leader's log start when that is past ours."""
        leader_end = await self._leader_offset(st, LATEST)
        part = self._current(st)
        if leader_end is None or part is None:
            return
        try:
            if leader_end < part.log_end_offset:
                log.warning("Leader %d's log end %d of %s-%d is below this replica's %d (unclean election?): "
                            "truncating", self.leader_id, leader_end, st.topic, st.partition, part.log_end_offset)
                part.truncate_to(leader_end)
            else:
                leader_start = await self._leader_offset(st, EARLIEST)
                part = self._current(st)
                if leader_start is None or part is None:
                    return
                if leader_start > part.log_end_offset:
                    log.info("%s-%d: leader %d's log starts at %d, past this replica's end %d: starting over there",
                             st.topic, st.partition, self.leader_id, leader_start, part.log_end_offset)
                    part.truncate_fully_and_start_at(leader_start)
        except OSError as exc:
            self.manager.storage_failed(st, exc)
            return
        st.fetch_offset = part.log_end_offset
        latest = part.log.latest_epoch
        st.last_fetched_epoch = UNDEFINED_EPOCH if latest is None else latest


class ReplicaFetcherManager:
    """The fetchers of this broker by leader id (Kafka's ReplicaFetcherManager with num.replica.fetchers=1).

    `add_partition` / `remove_partition` are called from LeaderAndIsr and StopReplica handling on the event
    loop; `learn_leaders` takes the leaders' inter-broker endpoints that LeaderAndIsr carries."""

    def __init__(self, settings: FetcherSettings, partition: Callable[[str, int], Partition | None],
                 storage_failed: Callable[[str, int, OSError], object]) -> None:
        self.settings = settings
        self.partition = partition
        self._storage_failed = storage_failed
        self.endpoints: dict[int, tuple[str, int]] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._append_pool: concurrent.futures.ThreadPoolExecutor | None = None

    def append_pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """The one thread that writes records fetched ahead (`ReplicaFetcher._append_beside`): one is what two
        cores can use beside the event loop, and it keeps each partition's writes in order by construction."""
        if self._append_pool is None:
            self._append_pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"replica-append-{self.settings.node_id}")
        return self._append_pool

    def learn_leaders(self, live_leaders: list[dict[str, Any]]) -> None:
        for ll in live_leaders:
            self.endpoints[ll["broker_id"]] = (ll["host_name"], ll["port"])

    def fetch_state(self, topic: str, partition: int) -> PartitionFetchState | None:
        for f in self.fetchers.values():
            st = f.partitions.get((topic, partition))
            if st is not None:
                return st
        return None

    def add_partition(self, part: Partition) -> None:
        """Fetch `part` from its leader (after make_follower), from the local log end with its latest epoch
        when it has one and truncate-on-fetch is on, else through the Truncating phase. A partition already
        fetched from the same leader at the same epoch keeps its state."""
        key = (part.topic, part.partition)
        leader = part.leader_id
        old = self.fetch_state(*key)
        if old is not None and old.leader_epoch == part.leader_epoch and key in self._fetcher_of(leader):
            return
        self.remove_partition(*key)
        if leader < 0:
            return
        address = self.endpoints.get(leader)
        if address is None:
            log.error("Broker %d follows %s-%d but knows no address of its leader %d", self.settings.node_id,
                      part.topic, part.partition, leader)
            return
        fetcher = self.fetchers.get(leader)
        if fetcher is not None and (fetcher.host, fetcher.port) != address:
            moved = list(fetcher.partitions.values())
            self._close(leader)
            fetcher = None
        else:
            moved = []
        if fetcher is None:
            fetcher = self.fetchers[leader] = ReplicaFetcher(leader, address[0], address[1], self)
            fetcher.start()
            for st in moved:
                fetcher.partitions[(st.topic, st.partition)] = st
        lg = part.log
        latest = lg.latest_epoch
        if latest is not None and self.settings.truncate_on_fetch:
            st = PartitionFetchState(part.topic, part.partition, part.leader_epoch, lg.log_end_offset, latest)
        else:
            st = PartitionFetchState(part.topic, part.partition, part.leader_epoch, lg.log_end_offset,
                                     truncating=True)
        fetcher.partitions[key] = st
        fetcher.changed.set()
        log.info("Broker %d fetches %s-%d from leader %d at epoch %d from offset %d%s", self.settings.node_id,
                 part.topic, part.partition, leader, part.leader_epoch, lg.log_end_offset,
                 " after truncating" if st.truncating else f" (last fetched epoch {st.last_fetched_epoch})")

    def _fetcher_of(self, leader: int) -> dict[TopicPartition, PartitionFetchState]:
        f = self.fetchers.get(leader)
        return f.partitions if f is not None else {}

    def remove_partition(self, topic: str, partition: int) -> None:
        """Stop fetching a partition (it leads now, stopped replicating here, or follows another leader);
        a fetcher left without partitions stays and idles, as Kafka's until shutdownIdleFetcherThreads."""
        for f in self.fetchers.values():
            st = f.partitions.pop((topic, partition), None)
            if st is not None:
                f.changed.set()
                _wait_for_write(st)

    def _close(self, leader: int) -> None:
        f = self.fetchers.pop(leader, None)
        if f is not None and f.task is not None:
            f.task.cancel()
            f._disconnect()
            for st in f.partitions.values():  # they move to the leader's new fetcher: one writer at a time
                _wait_for_write(st)

    def storage_failed(self, st: PartitionFetchState, exc: OSError) -> None:
        st.stopped = "failed"
        log.error("Broker %d cannot write %s-%d as follower: %s", self.settings.node_id, st.topic, st.partition, exc)
        self._storage_failed(st.topic, st.partition, exc)

    async def stop(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        await asyncio.gather(*(f.stop() for f in fetchers))
        if self._append_pool is not None:  # the logs close after this: a write still running finishes first
            self._append_pool.shutdown(wait=True, cancel_futures=True)
            self._append_pool = None


def _wait_for_write(st: PartitionFetchState) -> None:
    """Block until a write of `st`'s records fetched ahead has finished: called on the event loop before a
    partition's role changes (a few milliseconds at most, one answer's append; Kafka's makeLeader waits for
    the follower's append the same way, on the partition's leaderIsrUpdateLock)."""
    running = st.appending
    if running is not None and not running.done():
        t0 = time.monotonic()
        concurrent.futures.wait([running])
        log.debug("Waited %.1f ms for the follower write of %s-%d to finish", (time.monotonic() - t0) * 1000,
                  st.topic, st.partition)
