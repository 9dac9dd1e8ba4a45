"""The streaming reader: micro-batches of offset ranges, with Spark's admission control.

Spark runs this reader's offset methods in a long-lived driver-side process (so state such as the
availableNow target and the time of the last trigger lives here), and pickles a *separate*
instance to the executors for `read`; everything a task needs is in its `OffsetRange`.

Offsets are `{"topic": {"partition": next offset}}`. As in Spark's Kafka source: partitions that
appear later start at their earliest offset, partitions that disappear are data loss, the per-
trigger limit (maxOffsetsPerTrigger) is split across partitions by backlog, and
minOffsetsPerTrigger holds a trigger back until enough offsets arrived or maxTriggerDelay passed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from kafkalite.spark.backend import OffsetBounds, SourceBackend, TopicPartition
from kafkalite.spark.errors import DataLossError
from kafkalite.spark.offsets import from_json, rate_limit, to_json_dict
from kafkalite.spark.options import ReadOptions, Subscription
from kafkalite.spark.planning import discover, option_name, resolve
from kafkalite.spark.reading import OffsetRange, read_range

log = logging.getLogger("kafkalite.spark")


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._backend: SourceBackend | None = None
        self._target: dict[TopicPartition, int] | None = None
        self._last_trigger = time.monotonic()
        self._latest: dict[TopicPartition, int] = {}

    def __getstate__(self) -> dict:
        """Only the options travel to executors; an open backend stays where it was opened."""
        return {"opts": self.opts}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["opts"])  # type: ignore[misc]

    @property
    def backend(self) -> SourceBackend:
        if self._backend is None:
            self._backend = self.opts.backend.open_source()
        return self._backend

    # --- offsets (driver runner) ----------------------------------------------------------------------

    def _bounds(self, strict: bool) -> dict[TopicPartition, OffsetBounds]:
        tps = _discover(self.backend, self.opts.subscription, strict)
        bounds = self.backend.offset_bounds(tps)
        self._latest = {tp: b.latest for tp, b in bounds.items()}
        return bounds

    def initialOffset(self) -> dict:
        bounds = self._bounds(strict=True)
        tps = sorted(bounds)
        start = resolve(self.backend, self.opts.starting, tps, bounds,
                        option=option_name(self.opts.starting, "starting"), strategy=self.opts.starting_strategy)
        return to_json_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """availableNow: read what is there now (in batches of the usual limit), then stop."""
        self._target = {tp: b.latest for tp, b in self._bounds(strict=False).items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        current = from_json(start, "stream offsets")
        bounds = self._bounds(strict=False)
        gone = sorted(set(current) - set(bounds))
        if gone:
            self._data_loss(f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} were deleted")
        begin: dict[TopicPartition, int] = {}
        end: dict[TopicPartition, int] = {}
        for tp, b in bounds.items():
            if self._target is not None and tp not in self._target and tp not in current:
                continue  # availableNow reads only the partitions that existed when it was prepared
            latest = b.latest if self._target is None else min(b.latest, self._target.get(tp, b.latest))
            begin[tp] = current.get(tp, b.earliest)
            end[tp] = max(begin[tp], latest)
        total = sum(end[tp] - begin[tp] for tp in end)
        if not isinstance(limit, ReadAllAvailable) and self._target is None:
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else self.opts.min_offsets_per_trigger
            waited_ms = (time.monotonic() - self._last_trigger) * 1000
            if min_rows and total < min_rows and waited_ms < self.opts.max_trigger_delay_ms:
                return start  # not enough yet: no micro-batch (the same offsets mean "nothing new")
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        if end != current:
            self._last_trigger = time.monotonic()
        return to_json_dict(end)  # deleted partitions drop out (after _data_loss let them)

    def reportLatestOffset(self) -> dict | None:
        return to_json_dict(self._latest) if self._latest else None

    def _data_loss(self, what: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{what}. Set failOnDataLoss=false to go on without them")
        log.warning("%s; going on without them (failOnDataLoss=false)", what)

    # --- planning and reading -----------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = from_json(start, "stream offsets")
        stop = from_json(end, "stream offsets")
        ranges: list[InputPartition] = []
        for tp in sorted(stop):
            first = begin.get(tp)
            if first is None:  # a partition that appeared in this micro-batch starts at its earliest offset
                first = self.backend.earliest_offset(tp)
            if first > stop[tp]:
                self._data_loss(f"{tp[0]}-{tp[1]} went back from offset {first} to {stop[tp]} "
                                "(the partition was recreated or truncated)")
                continue
            if first < stop[tp]:
                ranges.append(OffsetRange(self.opts.backend, tp[0], tp[1], first, stop[tp],
                                          self.opts.include_headers, self.opts.fail_on_data_loss, self.opts.check_crcs))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # nothing planned: Spark still runs one task with a placeholder partition
        return read_range(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in the data dirs."""


def _discover(backend: SourceBackend, sub: Subscription, strict: bool) -> list[TopicPartition]:
    """Partitions now; after the start, subscribed topics that vanished only drop out (data loss is
    noticed by `latestOffset` from the partitions that went missing)."""
    if strict or sub.kind == "subscribePattern":
        return discover(backend, sub)
    topics = backend.list_topics()
    if sub.kind == "subscribe":
        return sorted((t, p) for t in sub.topics for p in topics.get(t, ()))
    return sorted(tp for tp in sub.partitions if tp[1] in topics.get(tp[0], ()))

