"""The source schema, identical to Spark's Kafka connector, in Spark and in Arrow form.

Spark checks every Arrow batch a Python source yields against the Arrow form of the declared
schema, field by field (int32 vs int64, `timestamp[us, tz=UTC]`, nullability), so both forms are
built here once from the same list.
"""

from __future__ import annotations

from functools import lru_cache

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def spark_schema(include_headers: bool) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType [, headers]; all nullable, as in Spark."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool) -> pa.Schema:
    """What Spark expects the batches to be: `to_arrow_schema` of the Spark schema, in UTC."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_headers), timezone="UTC")
