"""Every option name the `kafkalite` source and sink know, and the one WARNING for those they do not use.

Spark's own Kafka connector ignores options it does not know, so a typo (`startingOffset`, `subcribe`)
or an option of another connector (`deliveryGuarantee`) silently changes nothing. kafkalite names
each such option once, with the nearest known name, and goes on (Spark jobs often carry options for
several formats). Spark hands options over lower-cased; the names here are lower-cased too, and the
messages use the spelling of docs/spark.md.
"""

from __future__ import annotations

import difflib
import logging
import sys
from collections.abc import Iterable, Mapping
from typing import Literal

log = logging.getLogger("kafkalite.spark")

Use = Literal["read", "write"]
Mode = Literal["embedded", "broker"]

# Spark's own options for any data source, passed through to it (DataFrameReader/Writer and DataStreamWriter)
SPARK_GENERIC = ("path", "checkpointLocation", "queryName")

READ_OPTIONS = (
    "subscribe", "subscribePattern", "assign", "startingOffsets", "startingTimestamp",
    "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "endingOffsets", "endingTimestamp",
    "endingOffsetsByTimestamp", "failOnDataLoss", "maxOffsetsPerTrigger", "minOffsetsPerTrigger",
    "maxTriggerDelay", "minPartitions", "includeHeaders",
)
WRITE_OPTIONS = ("topic", "numPartitions", "lockTimeoutMs", "sinkId")
WRITE_PREFIXES = ("topicConfig.",)

# Options of Spark's Kafka connector that mean nothing here, and why (a Kafka job carries them over)
SPARK_KAFKA_UNUSED = {
    "groupidprefix": "no consumer group is joined: offsets live in Spark's checkpoint",
    "kafkaconsumer.polltimeoutms": "reads are bounded by kafka.request.timeout.ms instead",
    "fetchoffset.numretries": "offset lookups are retried until kafka.default.api.timeout.ms instead",
    "fetchoffset.retryintervalms": "offset lookups back off by kafka.retry.backoff.ms instead",
    "maxrecordsperpartition": "use minPartitions to split large partitions",
}

# `kafka.*` settings (without the prefix) each mode reads; ssl.* and sasl.* are checked by ClientSecurity
KAFKA_READ = ("check.crcs",)
KAFKA_EMBEDDED_WRITE = ("compression.type", "batch.size")
KAFKA_BROKER = (
    "bootstrap.servers", "client.id", "request.timeout.ms", "socket.connection.setup.timeout.ms",
    "default.api.timeout.ms", "retry.backoff.ms", "security.protocol",
)
KAFKA_BROKER_READ = ("isolation.level", "max.partition.fetch.bytes", "fetch.max.bytes")
KAFKA_BROKER_WRITE = ("acks", "max.request.size", "compression.type", "batch.size")
KAFKA_SECURITY_PREFIXES = ("ssl.", "sasl.")

# the Python workers in which Spark builds a second reader or writer for a query already planned (one
# keeps a streaming query's offsets, the other commits its micro-batches): the planner already warned
_RUNNERS = ("pyspark.sql.streaming.python_streaming_source_runner",
            "pyspark.sql.streaming.python_streaming_sink_runner",
            "pyspark.sql.worker.python_streaming_sink_runner")


def known(use: Use, mode: Mode) -> tuple[list[str], tuple[str, ...]]:
    """(names, name prefixes) this source (`read`) or sink (`write`) uses in `mode`, as docs/spark.md spells them."""
    names = [*SPARK_GENERIC, *(READ_OPTIONS if use == "read" else WRITE_OPTIONS)]
    if use == "read":
        names += [f"kafka.{k}" for k in KAFKA_READ]
    prefixes: tuple[str, ...] = WRITE_PREFIXES if use == "write" else ()
    if mode == "broker":
        names += [f"kafka.{k}" for k in (*KAFKA_BROKER, *(KAFKA_BROKER_READ if use == "read" else KAFKA_BROKER_WRITE))]
        prefixes += tuple(f"kafka.{p}" for p in KAFKA_SECURITY_PREFIXES)
    elif use == "write":
        names += [f"kafka.{k}" for k in KAFKA_EMBEDDED_WRITE]
    return names, prefixes


def unused_options(options: Iterable[str], use: Use, mode: Mode) -> dict[str, str]:
    """Each given option (lower-cased) this source or sink will not use, with the sentence saying why."""
    names, prefixes = known(use, mode)
    lowered = {n.lower(): n for n in names}
    low_prefixes = tuple(p.lower() for p in prefixes)
    out = {}
    for name in options:
        if name in lowered or name.startswith(low_prefixes):
            continue
        out[name] = _why(name, use, mode, names)
    return out


def _why(name: str, use: Use, mode: Mode, names: list[str]) -> str:
    what = f"{mode}-mode {'source' if use == 'read' else 'sink'}"
    if name in SPARK_KAFKA_UNUSED:
        return f"option {name} of Spark's Kafka connector has no effect in kafkalite: {SPARK_KAFKA_UNUSED[name]}"
    users = [(m, u) for m in ("embedded", "broker") for u in ("read", "write") if _is_known(name, u, m)]
    if users:
        spelt = _spelling(name)
        uses = sorted({u for _, u in users})
        modes = sorted({m for m, _ in users})
        where = " and ".join("the source" if u == "read" else "the sink" for u in uses)
        if len(modes) == 1:
            where += f" in {modes[0]} mode"
        return f"option {spelt} is only used by {where}; it has no effect on this {what}"
    if name.startswith("kafka."):
        return (f"option {name} is a Kafka client setting that kafkalite's {what} does not use; it has no "
                "effect (docs/spark.md lists the kafka.* settings that do)")
    near = difflib.get_close_matches(name, [n.lower() for n in names], n=1, cutoff=0.6)
    hint = f" (did you mean {_spelling(near[0])}?)" if near else ""
    return f"unknown option {name} is ignored by the {what}{hint}"


def _is_known(name: str, use: Use, mode: Mode) -> bool:
    names, prefixes = known(use, mode)
    return name in {n.lower() for n in names} or name.startswith(tuple(p.lower() for p in prefixes))


def _spelling(name: str) -> str:
    """An option as docs/spark.md spells it (Spark lower-cases the names it passes on)."""
    for n in (*SPARK_GENERIC, *READ_OPTIONS, *WRITE_OPTIONS):
        if n.lower() == name:
            return n
    return name


def warn_unused(options: Mapping[str, str], use: Use, mode: Mode) -> None:
    """One WARNING per option the query will not use; none in Spark's runner processes (see _RUNNERS)."""
    if _in_runner():
        return
    unused = unused_options(options, use, mode)
    if unused and not log.handlers and not logging.getLogger().handlers:
        # a Python worker of Spark configures no logging, and Python's last-resort handler would print the bare
        # sentence: say what it is and where from
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
    for why in unused.values():
        log.warning("%s", why)


def _in_runner() -> bool:
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    return (main is not None and main.name in _RUNNERS) or any(name in sys.modules for name in _RUNNERS)
