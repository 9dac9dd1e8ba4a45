"""Spark's auto-discovery hook: it imports every top-level `pyspark_*` module and registers its
`DefaultSource`. Kept to one import because Spark imports it in every Python worker."""

from kafkalite.spark.source import KafkaliteDataSource as DefaultSource

__all__ = ["DefaultSource"]
