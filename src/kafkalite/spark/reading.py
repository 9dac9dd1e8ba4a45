"""One Spark task's work: the records of one offset range, as Arrow batches.

Runs in executor Python workers, which see nothing of the driver but the pickled `OffsetRange`:
it carries the backend spec and every flag `read` needs. Data loss is checked here, at read
time, because retention may have moved the log start since the range was planned.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from kafkalite.spark import record_walk
from kafkalite.spark.arrow_decode import decode_chunk
from kafkalite.spark.backend import BackendSpec, LogTruncatedError, RangeMovedError, SourceBackend, TopicPartition
from kafkalite.spark.errors import DataLossError, UnknownTopicError
from kafkalite.spark.options import OffsetSpec
from kafkalite.spark.planning import check_order, option_name, resolve

log = logging.getLogger("kafkalite.spark")


@dataclass
class OffsetRange(InputPartition):
    """Offsets [start, end) of one partition: one Spark input partition (a task).

    A batch query's bound given as earliest, latest, -2, -1 or a timestamp is also carried as `late_start` /
    `late_end` and resolved again when the task runs (Spark's connector binds them when the query executes):
    `start` and `end` are then what planning saw. `from_earliest`: the query reads from the earliest offset,
    so a log start that moved past `start` is no data loss. `whole`: the partition is read by this task alone.
    """

    spec: BackendSpec
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    fail_on_data_loss: bool
    check_crcs: bool = True
    late_start: OffsetSpec | None = None
    late_end: OffsetSpec | None = None
    strategy: str = "error"  # startingOffsetsByTimestampStrategy, for a late starting timestamp
    from_earliest: bool = False
    whole: bool = True


def read_range(r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Decode the range's batches into RecordBatches of the source schema."""
    if r.end <= r.start and r.late_start is None and r.late_end is None:
        return
    _freeze_worker_heap()
    backend = r.spec.open_source()
    try:
        bound = _bind(backend, r)
        if bound is not None and bound.end > bound.start:
            yield from _read(backend, bound)
    finally:
        backend.close()


def _bind(backend: SourceBackend, r: OffsetRange) -> OffsetRange | None:
    """The range with its symbolic bounds resolved now; None when its partition is gone (data loss)."""
    if r.late_start is None and r.late_end is None:
        return r
    tp = (r.topic, r.partition)
    try:
        bounds = backend.offset_bounds([tp])
    except UnknownTopicError:
        _lost(r, f"partition {r.topic}-{r.partition} was deleted")
        return None
    start, end = r.start, r.end
    if r.late_start is not None:
        start = resolve(backend, r.late_start, [tp], bounds, option=option_name(r.late_start, "starting"),
                        strategy=r.strategy)[tp]
    if r.late_end is not None:
        end = resolve(backend, r.late_end, [tp], bounds, option=option_name(r.late_end, "ending"),
                      no_match="latest")[tp]
    if r.whole:
        check_order(tp, start, end)
    return replace(r, start=start, end=end, late_start=None, late_end=None)


_heap_frozen = False


def _freeze_worker_heap() -> None:
    """Move what the worker has imported so far out of the collector's reach, once per process.

    PySpark's worker daemon runs a full `gc.collect()` after every task. In a worker that has
    imported pyspark, pyarrow, numpy and loaded the decoder's compiled kernels, that walks ~240,000
    objects, tens of ms of CPU per task taken from the JVM thread converting the rows (after
    freezing: ~8 ms, for the ~30,000 objects each task leaves). Those
    objects live as long as the process, so freezing them loses nothing; later garbage is still
    collected. The kernels are loaded first, so that what they create is frozen too.

    Only in a PySpark worker: any other process (an application reading in-process, a test run)
    keeps its collector as it is.
    """
    global _heap_frozen
    if not _heap_frozen and _in_pyspark_worker():
        record_walk.warm_up()
        gc.freeze()
        _heap_frozen = True


def _in_pyspark_worker() -> bool:
    """Whether this process is a PySpark Python worker (forked by `pyspark.daemon`, or `pyspark.worker`)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name in ("pyspark.daemon", "pyspark.worker")


def _read(backend: SourceBackend, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    tp = (r.topic, r.partition)
    offset = _check_start(backend, r, tp, r.start)
    if offset is None:
        return
    while True:
        try:
            for chunk, next_offset in backend.read(tp, offset, r.end):
                batch = decode_chunk(chunk, r.topic, r.partition, offset, r.end, r.include_headers,
                                     verify_crc=r.check_crcs)
                if batch is not None:
                    yield batch
                offset = max(offset, next_offset)
            break
        except LogTruncatedError as exc:
            _lost(r, str(exc))  # failOnDataLoss=false: go on past what was read, as Spark's source does
            offset = exc.position
        except (FileNotFoundError, RangeMovedError):
            # retention or truncation removed a segment (or the broker's log start passed the offset)
            moved = _check_start(backend, r, tp, offset)
            if moved is None:
                return
            if moved == offset:
                raise
            offset = moved
    if offset < r.end:
        _lost(r, f"{r.topic}-{r.partition} ends at offset {offset}, before the end of the range planned "
                 f"({r.end}): the log was truncated or deleted since")


def _check_start(backend: SourceBackend, r: OffsetRange, tp: TopicPartition, offset: int) -> int | None:
    """Where reading can start: `offset`, or the log start if retention removed what is below it."""
    try:
        earliest = backend.earliest_offset(tp)
    except UnknownTopicError:
        _lost(r, f"partition {r.topic}-{r.partition} was deleted")
        return None
    if offset < earliest and r.from_earliest:
        return earliest if earliest < r.end else None  # the query reads from the earliest: nothing is lost
    if offset < earliest:
        _lost(r, f"offsets {offset} to {earliest - 1} of {r.topic}-{r.partition} are gone (retention or "
                 f"DeleteRecords moved its log start to {earliest}); some data was never read")
        return earliest if earliest < r.end else None
    return offset


def _lost(r: OffsetRange, what: str) -> None:
    if r.fail_on_data_loss:
        raise DataLossError(f"{what}. Set failOnDataLoss=false to skip lost data instead of failing")
    log.warning("%s; skipped (failOnDataLoss=false)", what)
