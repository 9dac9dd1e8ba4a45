"""The `kafkalite` data source: Spark's entry point, and the batch reader.

`spark.read.format("kafkalite")` plans one Spark task per partition range (split further with
minPartitions); each task decodes its range straight into Arrow. Planning happens when the first
action runs, so option errors surface there (as Spark's AnalysisException carrying our message).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from kafkalite.spark.backend import SourceBackend, TopicPartition
from kafkalite.spark.errors import OptionError
from kafkalite.spark.offsets import split_ranges
from kafkalite.spark.options import ReadOptions, parse_bool, parse_read_options
from kafkalite.spark.planning import check_order, discover, late_spec, option_name, resolve
from kafkalite.spark.reading import OffsetRange, read_range
from kafkalite.spark.schema import spark_schema


class KafkaliteDataSource(DataSource):
    """Kafka data dirs as a Spark source and sink, with the schema and options of Spark's Kafka connector."""

    @classmethod
    def name(cls) -> str:
        return "kafkalite"

    def schema(self) -> StructType:
        return spark_schema(parse_bool({k.lower(): v for k, v in self.options.items()}, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options, "batch")
        _check_fixed_schema(schema, opts.include_headers)
        return BatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafkalite.spark.stream import StreamReader

        opts = parse_read_options(self.options, "stream")
        _check_fixed_schema(schema, opts.include_headers)
        return StreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafkalite.spark.sink import BatchWriter

        if overwrite:
            raise OptionError("save mode overwrite is not supported: a Kafka topic is append-only; use mode append")
        return BatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafkalite.spark.sink import StreamWriter

        if overwrite:
            raise OptionError("output mode complete is not supported: a Kafka topic is append-only; "
                              "use outputMode append or update")
        return StreamWriter(self.options, schema)


def _check_fixed_schema(schema: StructType, include_headers: bool) -> None:
    """The schema is Kafka's, as in Spark's connector: a user-specified one cannot be honoured."""
    def shape(s: StructType) -> list[tuple[str, str]]:
        return [(f.name, f.dataType.simpleString()) for f in s.fields]

    expected = spark_schema(include_headers)
    if shape(schema) != shape(expected):
        raise OptionError(f"the kafkalite source has a fixed schema ({expected.simpleString()}); do not set one "
                          "with .schema(...), and use includeHeaders to get the headers column")


def _plan(backend: SourceBackend, opts: ReadOptions) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Starting and ending offset of every partition a batch query reads, as they are now."""
    tps = discover(backend, opts.subscription)
    bounds = backend.offset_bounds(tps)
    start = resolve(backend, opts.starting, tps, bounds, option=option_name(opts.starting, "starting"),
                    strategy=opts.starting_strategy)
    end = resolve(backend, opts.ending, tps, bounds, option=option_name(opts.ending, "ending"), no_match="latest")
    for tp in tps:
        check_order(tp, start[tp], end[tp])
    return start, end


def plan_ranges(opts: ReadOptions, start: dict[TopicPartition, int], end: dict[TopicPartition, int]
                ) -> list[OffsetRange]:
    """The read tasks of a batch query: a range per partition (split further by minPartitions).

    A bound given symbolically (earliest, latest, -2, -1, a timestamp) is carried by the task and resolved
    again when it runs, as Spark's Kafka connector binds it when the query executes: the first piece of a
    partition resolves its start, the last its end. So a partition empty now still gets a task when either of
    its bounds is symbolic: it may have records by the time the DataFrame is collected (again).
    """
    late = {tp: (late_spec(opts.starting, tp), late_spec(opts.ending, tp)) for tp in start}
    pieces: dict[TopicPartition, list[tuple[int, int]]] = {}
    for tp, lo, hi in split_ranges([(tp, start[tp], end[tp]) for tp in sorted(start)], opts.min_partitions):
        pieces.setdefault(tp, []).append((lo, hi))
    out = []
    for tp in sorted(start):
        late_start, late_end = late[tp]
        spans = pieces.get(tp) or ([(start[tp], end[tp])] if late_start or late_end else [])
        for i, (lo, hi) in enumerate(spans):
            first, last = i == 0, i == len(spans) - 1
            out.append(OffsetRange(
                opts.backend, tp[0], tp[1], lo, hi, opts.include_headers, opts.fail_on_data_loss, opts.check_crcs,
                late_start=late_start if first else None, late_end=late_end if last else None,
                strategy=opts.starting_strategy, from_earliest=late_start is not None and late_start.kind == "earliest",
                whole=len(spans) == 1))
    return out


class BatchReader(DataSourceReader):
    """Plans the ranges in the planner process; each range is read by `read` in an executor."""

    def __init__(self, opts: ReadOptions) -> None:
        backend = opts.backend.open_source()
        try:
            start, end = _plan(backend, opts)
        finally:
            backend.close()
        self.ranges: list[InputPartition] = list(plan_ranges(opts, start, end))

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # nothing planned: Spark still runs one task with a placeholder partition
        return read_range(partition)
