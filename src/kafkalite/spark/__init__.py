"""kafkalite as a PySpark data source: `spark.read.format("kafkalite")`, `readStream`, `write`, `writeStream`.

Same schema and options as Spark's Kafka connector; `path` names Kafka data dirs read and written
in place (embedded mode), `kafka.bootstrap.servers` a Kafka cluster spoken to over the Kafka
protocol (broker mode: kafkalite's broker or Apache Kafka). Installed normally, Spark finds the
source by itself (through the `pyspark_kafkalite` module); with an editable install, or to be
explicit, call `register(spark)`. See docs/spark.md.
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


def local_session(app_name: str, **conf: str) -> SparkSession:
    """A `local[2]` session bound to loopback with kafkalite registered: what the demo, the tests and the
    benchmarks run on. Python workers use this interpreter (so they see the same kafkalite), the UI is
    off, and shuffles use 2 partitions, which suits a 2-core machine; `conf` adds or overrides settings.

    The JVM and its Python workers talk over Unix domain sockets (Spark >= 4.1,
    `spark.python.unix.domain.socket.enabled`) rather than loopback TCP: every record a Python source
    yields crosses that socket, and it costs the reading JVM thread about a tenth less CPU. (Spark
    then prints a harmless BrokenPipeError when it retires a worker idle for a minute; see
    docs/spark.md, "Running it fast".)"""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName(app_name)
    settings = {"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1", "spark.sql.shuffle.partitions": "2",
                "spark.python.unix.domain.socket.enabled": "true", **conf}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


__all__ = ["FORMAT", "local_session", "register"]
