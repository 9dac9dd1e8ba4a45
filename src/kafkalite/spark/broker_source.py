"""The broker backend's reading side: a SourceBackend over the Kafka protocol, for any Kafka cluster.

- Partitions come from Metadata; offsets from ListOffsets asked of each partition's leader, with
  the query's isolation level: `latest` is the high watermark under read_uncommitted (Spark's
  default) and the last stable offset under `kafka.isolation.level=read_committed`, exactly what a
  Kafka consumer may read. Timestamps resolve on the broker (ListOffsets with a timestamp).
- Reading a range is a loop of Fetch requests to the leader, one partition each, at most
  `max.partition.fetch.bytes` per answer. The answer's batches go to the shared Arrow decoder as
  they are (whole batches; the decoder trims records outside the range). The next fetch is sent
  before the current answer is handed over, so the broker reads while the task decodes.
- OFFSET_OUT_OF_RANGE below the log start (retention, DeleteRecords) raises RangeMovedError, for
  the reader's data-loss check (failOnDataLoss); past the high watermark (a truncated log) the read
  stops, and the reader reports the offsets it did not get.
- A leader change mid-read (the fetch fails, the new leader is looked up) is checked for truncation
  as Kafka's consumers do (KIP-320): the new leader is asked (OffsetsForLeaderEpoch) where the epoch
  of the last batch read ends; below the position read so far, the records read past that point are
  gone from the log: LogTruncatedError, which the reader turns into failOnDataLoss's error or warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kafkalite.client import READ_COMMITTED, KafkaClientError, fetch_request
from kafkalite.error_codes import error_name
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.records.batch import LOG_OVERHEAD, PREFIX
from kafkalite.spark.arrow_decode import RawChunk
from kafkalite.spark.backend import LogTruncatedError, OffsetBounds, RangeMovedError, TopicPartition
from kafkalite.spark.broker_cluster import RETRIABLE, Cluster, RetriableError
from kafkalite.spark.broker_records import drop_aborted
from kafkalite.spark.broker_settings import BrokerSettings
from kafkalite.spark.errors import BrokerError, UnknownTopicError
from kafkalite.spark.segments import complete_prefix

log = logging.getLogger("kafkalite.spark")

EARLIEST = -2
LATEST = -1
_MAX_FETCH_BYTES = (1 << 31) - 1
_EMPTY_ANSWERS = 5  # fetches below the high watermark that return nothing, before giving up


class BrokerSource:
    """SourceBackend over `kafka.bootstrap.servers`; one per Spark process that plans or reads."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.cluster = Cluster(settings)

    def close(self) -> None:
        self.cluster.close()

    # --- discovery and offsets --------------------------------------------------------------------

    def list_topics(self) -> dict[str, list[int]]:
        found = self.cluster.retrying("listing topics (Metadata)", lambda: self.cluster.metadata(None))
        return {name: sorted(info.leaders) for name, info in sorted(found.items()) if info.leaders}

    def offset_bounds(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetBounds]:
        tps = list(partitions)
        earliest = self._list_offsets(dict.fromkeys(tps, EARLIEST))
        latest = self._list_offsets(dict.fromkeys(tps, LATEST))
        return {tp: OffsetBounds(earliest[tp], max(earliest[tp], latest[tp])) for tp in tps}

    def offsets_for_timestamps(self, targets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        found = self._list_offsets(targets)
        return {tp: (None if found[tp] < 0 else found[tp]) for tp in targets}

    def earliest_offset(self, tp: TopicPartition) -> int:
        return self._list_offsets({tp: EARLIEST})[tp]

    def _list_offsets(self, queries: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets of each partition, asked of its leader; transient errors are retried."""
        out: dict[TopicPartition, int] = {}

        def attempt() -> dict[TopicPartition, int]:
            todo = {tp: ts for tp, ts in queries.items() if tp not in out}
            retry = []
            for node, tps in self.cluster.leaders(todo).items():
                answers = self.cluster.client.list_offsets({tp: todo[tp] for tp in tps},
                                                           self.settings.isolation_level)
                for tp in tps:
                    answer = answers.get(tp)
                    code = ErrorCode.UNKNOWN_SERVER_ERROR if answer is None else answer["error_code"]
                    if code == ErrorCode.NONE:
                        out[tp] = answer["offset"]  # type: ignore[index]
                    elif code in RETRIABLE or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        retry.append(f"{tp[0]}-{tp[1]}: {error_name(code)}")  # leaders are looked up again
                    else:
                        raise BrokerError(f"ListOffsets of {tp[0]}-{tp[1]} on broker {node} failed: "
                                          f"{error_name(code)}")
            if retry:
                raise RetriableError("ListOffsets " + ", ".join(retry))
            return out

        return self.cluster.retrying("looking up offsets (ListOffsets)", attempt)

    # --- reading ----------------------------------------------------------------------------------

    def read(self, tp: TopicPartition, start: int, end: int) -> Iterator[tuple[RawChunk, int]]:
        offset = start
        backoff = self.cluster.backoff(f"fetching {tp[0]}-{tp[1]}")
        epoch = [-1]  # leader epoch of the last batch read (set by _fetch_from)
        validate = False
        while True:
            try:
                if validate and epoch[0] >= 0:
                    self._check_truncation(tp, offset, epoch[0])
                validate = True  # from now on a failure means another leader may answer next
                node = next(iter(self.cluster.leaders([tp])))
                for chunk, next_offset in self._fetch_from(node, tp, offset, end, epoch):
                    yield chunk, next_offset
                    offset = next_offset
                    backoff.reset()
                return
            except UnknownTopicError:
                raise RangeMovedError(f"{tp[0]}-{tp[1]} no longer exists") from None
            except (RetriableError, OSError) as exc:
                backoff.failed(exc)  # a leader change or a broker restart: look up again, go on from `offset`

    def _check_truncation(self, tp: TopicPartition, offset: int, epoch: int) -> None:
        """KIP-320: raise LogTruncatedError when the leader's log diverges below `offset`."""
        try:
            divergent = self.cluster.client.find_truncation({tp: (offset, epoch)})
        except KafkaClientError as exc:  # e.g. no leader elected yet: retried with backoff like a fetch
            raise RetriableError(f"validating {tp[0]}-{tp[1]} after a leader change: {exc}") from None
        if tp in divergent:
            at = divergent[tp][0]
            raise LogTruncatedError(
                f"{tp[0]}-{tp[1]} was truncated under the reader: records up to offset {offset} of leader epoch "
                f"{epoch} were read, but its leader's log diverges at offset {max(at, 0)} (an unclean leader "
                f"election, or records the old leader never replicated); those read past it are not in the log "
                f"any more and the new ones at those offsets are not read", offset, at)

    def _fetch_from(self, node: int, tp: TopicPartition, offset: int, end: int,
                    epoch: list[int] | None = None) -> Iterator[tuple[RawChunk, int]]:
        """Chunks from one leader until `end`, the high watermark, or an error; `epoch[0]` is set to the
        leader epoch of the last batch handed over."""
        topic, partition = tp
        client = self.cluster.node(node)
        size = self.settings.fetch_bytes
        committed = self.settings.isolation_level == READ_COMMITTED

        def ask(at: int) -> None:
            client.send(ApiKey.FETCH, fetch_request([(topic, partition, at, size)], max_bytes=max(size, 1),
                                                    max_wait_ms=0, isolation_level=self.settings.isolation_level,
                                                    leader_epochs=self.cluster.leader_epochs([tp])))

        empty = 0
        ask(offset)
        try:
            while True:
                part = _partition_of(client.receive(), tp)
                code = part["error_code"]
                if code:
                    self._fetch_error(node, tp, offset, code)
                    return
                data = part.get("records") or b""
                bound = part["high_watermark"]
                if committed and part.get("last_stable_offset", -1) >= 0:
                    bound = part["last_stable_offset"]
                cut, next_offset, _ = complete_prefix(data, end)
                if next_offset is None or next_offset <= offset:
                    if offset >= bound:
                        return  # nothing more to read: the caller compares where it got with `end`
                    if len(data) and size < _MAX_FETCH_BYTES:
                        size = min(2 * size, _MAX_FETCH_BYTES)  # one batch larger than asked for (pre-KIP-74 broker)
                    else:
                        empty += 1
                        if empty > _EMPTY_ANSWERS:
                            # no batch holds these offsets (say, compaction emptied the end of a segment):
                            # the caller reports them as lost, or skips them with failOnDataLoss=false
                            log.warning("fetching %s-%d at offset %d from broker %d returned no records %d times "
                                        "although its high watermark is %d", topic, partition, offset, node, empty,
                                        bound)
                            return
                    ask(offset)
                    continue
                empty = 0
                more = next_offset < end and next_offset < bound
                if more:
                    ask(next_offset)  # pipelined: the broker prepares it while this chunk is decoded
                chunk = data[:cut]
                if epoch is not None:
                    epoch[0] = _last_batch_epoch(chunk, epoch[0])
                if committed and part.get("aborted_transactions"):
                    chunk = drop_aborted(chunk, part["aborted_transactions"])
                yield RawChunk(chunk, f"broker {client.address} (fetch of {topic}-{partition} at offset {offset})"), \
                    next_offset
                offset = next_offset
                if not more:
                    return
        finally:
            if client.pending:
                self.cluster.drop(node)  # an answer nobody reads would be taken for the next request's

    def _fetch_error(self, node: int, tp: TopicPartition, offset: int, code: int) -> None:
        """Act on a fetch error: returns to end the read short, raises otherwise."""
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if offset < self.earliest_offset(tp):
                raise RangeMovedError(f"offset {offset} of {tp[0]}-{tp[1]} is below the log start")
            return  # past the high watermark: the log was truncated since the range was planned
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            self.cluster.forget_leaders()
            raise RetriableError(f"broker {node} does not know {tp[0]}-{tp[1]} (moved or deleted)")
        if code in RETRIABLE:
            raise RetriableError(f"fetch of {tp[0]}-{tp[1]} from broker {node}: {error_name(code)}")
        raise BrokerError(f"fetching {tp[0]}-{tp[1]} at offset {offset} from broker {node} failed: {error_name(code)}")


def _last_batch_epoch(data: bytes | memoryview, default: int) -> int:
    """partitionLeaderEpoch of the last whole batch in `data` (a walk over batch headers, not records)."""
    at, last = 0, -1
    n = len(data)
    while n - at >= LOG_OVERHEAD + 4:
        _base, length = PREFIX.unpack_from(data, at)
        if at + LOG_OVERHEAD + length > n:
            break
        last = at
        at += LOG_OVERHEAD + length
    return default if last < 0 else int.from_bytes(data[last + 12:last + 16], "big", signed=True)


def _partition_of(response: dict[str, Any], tp: TopicPartition) -> dict[str, Any]:
    if response.get("error_code"):
        raise BrokerError(f"fetch of {tp[0]}-{tp[1]} refused: {error_name(response['error_code'])}")
    for t in response.get("responses", []):
        for p in t.get("partitions", []):
            if p["partition_index"] == tp[1]:
                return p
    raise BrokerError(f"the fetch answer does not mention {tp[0]}-{tp[1]}")
