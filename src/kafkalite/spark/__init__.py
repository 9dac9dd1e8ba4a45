"""kafkalite as a PySpark data source: `spark.read.format("kafkalite")`, `readStream`, `write`, `writeStream`.

Same schema and options as Spark's Kafka connector; `path` names Kafka data dirs read and written
in place (embedded mode). Installed normally, Spark finds the source by itself (through the
`pyspark_kafkalite` module); with an editable install, or to be explicit, call `register(spark)`.
See docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "kafkalite"


def register(spark: SparkSession) -> None:
    """Make `format("kafkalite")` available in this session (needed with editable installs)."""
    from kafkalite.spark.source import KafkaliteDataSource

    spark.dataSource.register(KafkaliteDataSource)


__all__ = ["FORMAT", "register"]
