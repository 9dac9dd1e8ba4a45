"""The `kafkalite` sink: Spark's Kafka sink columns in, record batches out, to data dirs or a broker.

Columns, as in Spark's Kafka sink: `value` (string or binary, required), `key` (string or binary),
`headers` (array<struct<key string, value binary>>), `topic` (string; the `topic` option wins),
`partition` (int; else murmur2 of the key, as Kafka's producer). Other columns are ignored.

Tasks encode their rows (Arrow, column-wise) and route them to partitions here, the same way for
both backends; the backend's stage takes the batches. Embedded mode stages them to files that the
driver appends at commit: batch writes land all together or not at all, streaming writes exactly
once per micro-batch id (see embedded_sink). Broker mode produces them from the tasks and commits
nothing: at-least-once, as Spark's Kafka sink (see broker_sink).
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from kafkalite.spark.arrow_encode import StickyPartitioner, build_batches, choose_partitions
from kafkalite.spark.backend import SinkBackend, Stage, StagedFile
from kafkalite.spark.embedded_sink import sink_id_for
from kafkalite.spark.errors import OptionError, SinkError
from kafkalite.spark.options import WriteOptions, parse_write_options
from kafkalite.spark.specs import BrokerSpec


@dataclass
class StagedMessage(WriterCommitMessage):
    """What a write task hands to the driver's commit: where its encoded batches are."""

    staged: StagedFile


def check_schema(schema: StructType, topic_option: str | None) -> None:
    """The columns Spark's Kafka sink accepts, with its rules; other columns are ignored."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    text_or_bytes = (StringType, BinaryType)
    if "value" not in fields:
        raise SinkError("the data to write needs a value column (string or binary)")
    for name in ("value", "key"):
        if name in fields and not isinstance(fields[name], text_or_bytes):
            raise SinkError(f"column {name} must be string or binary, not {fields[name].simpleString()}; "
                            "cast or serialize it first")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise SinkError(f"column topic must be a string, not {fields['topic'].simpleString()}")
    if topic_option is None and "topic" not in fields:
        raise SinkError("no topic to write to: set option topic, or give a topic column")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise SinkError(f"column partition must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise SinkError(f"column headers must be array<struct<key:string,value:binary>>, not {h.simpleString()}")


class _Encoder:
    """Per task: rows routed to partitions, encoded into batches and handed to the stage as they come."""

    def __init__(self, opts: WriteOptions, sink: SinkBackend, stage: Stage) -> None:
        self.opts = opts
        self.sink = sink
        self.stage = stage
        self.partition_counts: dict[str, int] = {}
        self._sticky: dict[str, StickyPartitioner] = {}

    def _partition_count(self, topic: str) -> int:
        count = self.partition_counts.get(topic)
        if count is None:
            count = self.sink.partition_count(topic)
            if count is None:
                count = self.sink.create_topic(topic, self.opts.num_partitions)
            self.partition_counts[topic] = count
        return count

    def add(self, rb: pa.RecordBatch) -> None:
        if rb.num_rows == 0:
            return
        cols = {name.lower(): rb.column(i) for i, name in enumerate(rb.schema.names)}
        if self.opts.topic is not None:
            self._add_topic(self.opts.topic, cols, None)
            return
        topics = cols["topic"]
        if topics.null_count:
            raise SinkError("null topic present in the data; use the topic option to set a default topic")
        for topic in pc.unique(topics).to_pylist():
            rows = pc.indices_nonzero(pc.equal(topics, topic))
            self._add_topic(topic, cols, rows)

    def _add_topic(self, topic: str, cols: Mapping[str, pa.Array], rows: pa.Array | None) -> None:
        picked = {k: (v if rows is None else v.take(rows)) for k, v in cols.items()}
        count = self._partition_count(topic)
        sticky = self._sticky.get(topic)
        if sticky is None:
            sticky = self._sticky[topic] = StickyPartitioner(self.opts.batch_bytes, random.randrange(count))
        parts = choose_partitions(len(picked["value"]), picked.get("key"), picked.get("partition"), count, sticky,
                                  picked["value"])
        bad = (parts < 0) | (parts >= count)
        if bad.any():
            raise SinkError(f"partition {int(parts[np.argmax(bad)])} does not exist: topic {topic} has "
                            f"{count} partition(s) (0..{count - 1})")
        now = int(time.time() * 1000)
        order = np.argsort(parts, kind="stable")
        bounds = np.flatnonzero(np.diff(parts[order])) + 1
        for group in np.split(order, bounds):
            idx = pa.array(group)
            tp = (topic, int(parts[group[0]]))
            for batch, records in build_batches(_take(picked.get("key"), idx), _take(picked["value"], idx),
                                                _take(picked.get("headers"), idx), now, self.opts.compression,
                                                self.opts.batch_bytes):
                self.stage.add(tp, batch, records)


def _take(column: pa.Array | None, rows: pa.Array) -> pa.Array | None:
    return None if column is None else column.take(rows)


def _sink(opts: WriteOptions) -> SinkBackend:
    return opts.backend.open_sink(opts.topic_configs, opts.lock_timeout_ms)


def _stage(opts: WriteOptions, job_id: str, batches: Iterator[pa.RecordBatch]) -> StagedMessage:
    sink = _sink(opts)
    try:
        stage = sink.open_stage(job_id)
        try:
            encoder = _Encoder(opts, sink, stage)
            for rb in batches:
                encoder.add(rb)
            return StagedMessage(stage.finish(encoder.partition_counts))
        except BaseException:
            stage.discard()
            raise
    finally:
        sink.close()


def _commit(opts: WriteOptions, job_id: str, staged: list[StagedFile], **once: Any) -> None:
    sink = _sink(opts)
    try:
        sink.commit(job_id, staged, **once)
    finally:
        sink.close()


def _abort(opts: WriteOptions, job_id: str, staged: list[StagedFile | None], **once: Any) -> None:
    sink = _sink(opts)
    try:
        sink.abort(job_id, staged, **once)
    finally:
        sink.close()


def _staged(messages: list[WriterCommitMessage | None]) -> list[StagedFile | None]:
    return [m.staged if isinstance(m, StagedMessage) else None for m in messages]


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("kafkalite")`: all rows of a successful job land at commit; none of a failed one."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_write_options(options)
        check_schema(schema, self.opts.topic)
        self.job_id = uuid.uuid4().hex  # pickled into every task and into the commit: one job, one id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _stage(self.opts, self.job_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.opts, self.job_id, [s for s in _staged(messages) if s is not None])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.opts, self.job_id, _staged(messages))


class StreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("kafkalite")`: each micro-batch id is appended exactly once (embedded mode),
    or produced by its tasks at least once (broker mode)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.opts = parse_write_options(options)
        check_schema(schema, self.opts.topic)
        lowered = {k.lower(): v for k, v in options.items()}
        sink_id = self.opts.sink_id
        if sink_id is None and isinstance(self.opts.backend, BrokerSpec):
            sink_id = "broker"  # at-least-once: nothing is kept per sink, so no identity is needed
        if sink_id is None:
            location = lowered.get("checkpointlocation")
            if not location:
                raise OptionError("a streaming write needs option checkpointLocation (or sinkId) to recognise "
                                  "micro-batches it already wrote")
            sink_id = sink_id_for(location)
        if not sink_id.replace("-", "").replace("_", "").isalnum():
            raise OptionError(f"option sinkId may only hold letters, digits, - and _: {sink_id!r}")
        self.sink_id = sink_id

    def _job(self, batch_id: int | str) -> str:
        return f"{self.sink_id}-b{batch_id}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        return _stage(self.opts, self._job(batch_id if batch_id is not None else f"x{os.getpid()}"), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _commit(self.opts, self._job(batchId), [s for s in _staged(messages) if s is not None],
                sink_id=self.sink_id, batch_id=batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.opts, self._job(batchId), _staged(messages), sink_id=self.sink_id)
