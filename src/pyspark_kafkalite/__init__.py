"""Spark's auto-discovery hook: it imports every top-level `pyspark_*` module and registers its
`DefaultSource`. Kept to one import because Spark imports it in every Python worker; a missing piece of
the `spark` extra (say pyarrow) is named with the command that installs it, not as a bare ModuleNotFoundError."""

from kafkalite.spark import _needs_extra

with _needs_extra():
    from kafkalite.spark.source import KafkaliteDataSource as DefaultSource

__all__ = ["DefaultSource"]
