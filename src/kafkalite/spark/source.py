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
from kafkalite.spark.options import OffsetSpec, ReadOptions, parse_bool, parse_read_options
from kafkalite.spark.planning import discover, resolve
from kafkalite.spark.reading import OffsetRange, read_range
from kafkalite.spark.schema import spark_schema


def option_name(spec: OffsetSpec, side: str) -> str:
    """The option a spec came from, for error messages."""
    return {"timestamp": f"{side}Timestamp", "timestamps": f"{side}OffsetsByTimestamp"}.get(
        spec.kind, f"{side}Offsets")


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
    """Starting and ending offset of every partition a batch query reads."""
    tps = discover(backend, opts.subscription)
    bounds = backend.offset_bounds(tps)
    start = resolve(backend, opts.starting, tps, bounds, option=option_name(opts.starting, "starting"),
                    strategy=opts.starting_strategy)
    end = resolve(backend, opts.ending, tps, bounds, option=option_name(opts.ending, "ending"), no_match="latest")
    for tp in tps:
        if start[tp] > end[tp]:
            raise OptionError(f"the starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending offset "
                              f"{end[tp]}; check startingOffsets/endingOffsets (or their timestamp forms)")
    return start, end


class BatchReader(DataSourceReader):
    """Plans the ranges in the planner process; each range is read by `read` in an executor."""

    def __init__(self, opts: ReadOptions) -> None:
        backend = opts.backend.open_source()
        try:
            start, end = _plan(backend, opts)
        finally:
            backend.close()
        tps = sorted(start)
        ranges = split_ranges([(tp, start[tp], end[tp]) for tp in tps], opts.min_partitions)
        self.ranges: list[InputPartition] = [
            OffsetRange(opts.backend, t, p, s, e, opts.include_headers, opts.fail_on_data_loss, opts.check_crcs)
            for (t, p), s, e in ranges
        ]

    def partitions(self) -> Sequence[InputPartition]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())  # nothing planned: Spark still runs one task with a placeholder partition
        return read_range(partition)
