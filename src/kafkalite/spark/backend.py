"""Where the data lives, behind one small interface: Kafka data dirs on disk, or a Kafka cluster.

The reader and writer code (`source`, `stream`, `sink`) only talks to these protocols; embedded mode
(`path`: `embedded.py`, `embedded_sink.py`) and broker mode (`kafka.bootstrap.servers`, the Kafka
protocol: `broker_source.py`, `broker_sink.py`) implement them:

- partition discovery (`list_topics`),
- offset lookup: earliest, latest safely readable, and by timestamp (ListOffsets),
- "read the batches of a partition range" as raw v2 batch bytes (Fetch), which the shared Arrow
  decoder turns into rows,
- and, for the sink, staging encoded batches from tasks and committing them from the driver.

A backend is rebuilt from a small picklable spec wherever Spark runs code (planner, executors,
the streaming runner), because Spark ships specs, never open files or connections.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kafkalite.spark.arrow_decode import RawChunk

TopicPartition = tuple[str, int]


class RangeMovedError(Exception):
    """Raised by `SourceBackend.read` when the data at the offset being read vanished under it
    (retention, DeleteRecords, a deleted partition); the reader then checks the log start again and
    applies failOnDataLoss."""


class LogTruncatedError(Exception):
    """Raised by `SourceBackend.read` when, after a leader change, the new leader's history leaves the
    records already read (KIP-320: its end offset for the epoch of the last record read is below the
    position): what was read from `diverged_at` to `position` is not in the log any more, and the new
    records at those offsets will not be read. The reader applies failOnDataLoss, then (false) goes on
    from `position`."""

    def __init__(self, message: str, position: int, diverged_at: int) -> None:
        super().__init__(message)
        self.position = position
        self.diverged_at = diverged_at


@dataclass(frozen=True, slots=True)
class OffsetBounds:
    """The offsets a partition can serve now: [earliest, latest). `latest` is the safely readable end
    (high watermark, or recovery point while a writer is live), not necessarily the log end."""

    earliest: int
    latest: int


class SourceBackend(Protocol):
    """What a reader needs from the data, in the driver (planning) and the executors (reading)."""

    def list_topics(self) -> dict[str, list[int]]:
        """Every topic and its partitions, sorted."""
        ...

    def offset_bounds(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetBounds]:
        """Earliest and latest offsets; raises UnknownTopicError for a partition that does not exist."""
        ...

    def offsets_for_timestamps(self, targets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """First offset whose timestamp is >= the target, per partition; None where no record is that late."""
        ...

    def earliest_offset(self, tp: TopicPartition) -> int:
        """The log start offset, cheaply (checked by executors before reading)."""
        ...

    def read(self, tp: TopicPartition, start: int, end: int) -> Iterator[tuple[RawChunk, int]]:
        """Whole batches covering [start, end), each chunk with the offset following it.

        May include records outside the range at either end (batches are whole); may stop short of
        `end` when the data is gone, which the caller detects from the offsets reached, or raise
        RangeMovedError (or FileNotFoundError) when the offset being read is no longer there.
        """
        ...

    def close(self) -> None:
        """Release connections or files; the backend is not used afterwards."""
        ...


@dataclass(frozen=True, slots=True)
class StagedBatches:
    """Encoded batches of one partition written by a task, as the sink's commit message lists them."""

    topic: str
    partition: int
    locations: tuple[tuple[int, int], ...]  # (position, size) of each batch in the staging file
    records: int


@dataclass(frozen=True, slots=True)
class StagedFile:
    """One write task's output: a staging file and the batches it holds per partition."""

    file: str
    batches: tuple[StagedBatches, ...]
    partition_counts: tuple[tuple[str, int], ...] = ()  # topics written and their partitions: new ones get all

    @property
    def records(self) -> int:
        return sum(b.records for b in self.batches)


class Stage(Protocol):
    """A write task's output in the making: batches go in as they are encoded (memory stays bounded)."""

    def add(self, tp: TopicPartition, batch: bytes, records: int) -> None: ...

    def finish(self, partition_counts: Mapping[str, int]) -> StagedFile:
        """Make what was added durable; the result travels to the driver's commit."""
        ...

    def discard(self) -> None: ...


class SinkBackend(Protocol):
    """What the writer needs. Tasks `stage` encoded batches; the driver `commit`s them or `abort`s.

    The broker implementation produces as batches are staged and its `commit` does nothing
    (at-least-once, as Spark's Kafka sink); the embedded one stages to files and appends at commit.
    """

    def partition_count(self, topic: str) -> int | None:
        """Partitions of an existing topic, or None if the topic does not exist yet."""
        ...

    def create_topic(self, topic: str, partitions: int) -> int:
        """Prepare a topic `partition_count` did not find; returns the partitions to route its rows
        over. Embedded: created at commit (the staged file records the count). Broker: created now,
        or found created by a concurrent task (whose count wins)."""
        ...

    def close(self) -> None:
        ...

    def open_stage(self, job_id: str) -> Stage:
        """Where one write task puts its encoded batches, as it encodes them."""
        ...

    def commit(self, job_id: str, staged: Sequence[StagedFile], *, sink_id: str | None = None,
               batch_id: int | None = None) -> int:
        """Append what was staged; returns the records appended (0 for a batch id already committed)."""
        ...

    def abort(self, job_id: str, staged: Sequence[StagedFile | None], *, sink_id: str | None = None) -> None:
        ...


class BackendSpec(Protocol):
    """Picklable description of a backend; `open_source`/`open_sink` build it where the code runs."""

    def open_source(self) -> SourceBackend: ...

    def open_sink(self, topic_configs: Mapping[str, str] | None = None, lock_timeout_ms: int = 60_000
                  ) -> SinkBackend: ...
