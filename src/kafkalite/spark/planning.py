"""Turning options into concrete offsets: which partitions, and where each read starts and ends.

Runs on the driver (batch planning, the streaming runner). The rules are Spark's Kafka
connector's: JSON offsets must name every partition read (-2 earliest, -1 latest), timestamps
resolve to the first offset at or after them, and a starting timestamp with no match fails unless
startingOffsetsByTimestampStrategy=latest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafkalite.spark.backend import OffsetBounds, SourceBackend, TopicPartition
from kafkalite.spark.errors import OptionError, UnknownTopicError
from kafkalite.spark.offsets import EARLIEST, LATEST
from kafkalite.spark.options import OffsetSpec, Subscription


def discover(backend: SourceBackend, sub: Subscription) -> list[TopicPartition]:
    """The partitions a subscription reads now. Subscribed or assigned topics must exist."""
    topics = backend.list_topics()
    if sub.kind == "subscribePattern":
        return [(t, p) for t, ps in topics.items() if sub.matches(t) for p in ps]
    if sub.kind == "subscribe":
        missing = [t for t in sub.topics if t not in topics]
        if missing:
            raise UnknownTopicError(_unknown(missing, topics))
        return sorted((t, p) for t in sub.topics for p in topics[t])
    missing_tps = [tp for tp in sub.partitions if tp[1] not in topics.get(tp[0], ())]
    if missing_tps:
        absent = sorted({t for t, _ in missing_tps if t not in topics})
        if absent:
            raise UnknownTopicError(_unknown(absent, topics))
        raise UnknownTopicError("assign names partitions that do not exist: "
                                + ", ".join(f"{t}-{p} ({t} has partitions {topics[t]})" for t, p in missing_tps))
    return sorted(sub.partitions)


def _unknown(missing: Sequence[str], topics: Mapping[str, list[int]]) -> str:
    known = ", ".join(topics) or "none"
    return f"unknown topic(s) {', '.join(missing)}: not found in the data (known topics: {known})"


def resolve(backend: SourceBackend, spec: OffsetSpec, partitions: Sequence[TopicPartition],
            bounds: Mapping[TopicPartition, OffsetBounds], *, option: str, strategy: str = "error",
            no_match: str = "error") -> dict[TopicPartition, int]:
    """Offsets for `partitions` from a starting or ending spec.

    `no_match` says what a timestamp later than every record gives: "error" (a starting timestamp
    under the default strategy), or "latest" (ending timestamps, or strategy=latest).
    """
    if spec.kind == "earliest":
        return {tp: bounds[tp].earliest for tp in partitions}
    if spec.kind == "latest":
        return {tp: bounds[tp].latest for tp in partitions}
    if spec.kind == "offsets":
        _check_covers(spec.offsets, partitions, option)
        out = {}
        for tp in partitions:
            value = spec.offsets[tp]
            out[tp] = bounds[tp].earliest if value == EARLIEST else bounds[tp].latest if value == LATEST else value
        return out
    if spec.kind == "timestamp":
        targets = {tp: int(spec.timestamp or 0) for tp in partitions}
    else:
        _check_covers(spec.offsets, partitions, option)
        targets = {tp: spec.offsets[tp] for tp in partitions}
    found = backend.offsets_for_timestamps(targets)
    out = {}
    for tp in partitions:
        offset = found.get(tp)
        if offset is None:
            if no_match == "error" and strategy == "error":
                raise OptionError(f"{option}: no record of {tp[0]}-{tp[1]} has a timestamp at or after "
                                  f"{targets[tp]} (set startingOffsetsByTimestampStrategy=latest to start at the "
                                  "end of such partitions instead)")
            offset = bounds[tp].latest
        out[tp] = offset
    return out


def option_name(spec: OffsetSpec, side: str) -> str:
    """The option a spec came from, for error messages (`side`: starting or ending)."""
    return {"timestamp": f"{side}Timestamp", "timestamps": f"{side}OffsetsByTimestamp"}.get(
        spec.kind, f"{side}Offsets")


def check_order(tp: TopicPartition, start: int, end: int) -> None:
    if start > end:
        raise OptionError(f"the starting offset {start} of {tp[0]}-{tp[1]} is after its ending offset {end}; "
                          "check startingOffsets/endingOffsets (or their timestamp forms)")


def late_spec(spec: OffsetSpec, tp: TopicPartition) -> OffsetSpec | None:
    """What of `spec` must be resolved again each time a query runs, for one partition; None for an offset
    given as a number.

    Spark's Kafka connector binds `earliest`, `latest`, -2, -1 and timestamps when the query executes, not when
    the DataFrame is planned, so a DataFrame collected again sees records that arrived (or a log start that
    moved) since. PySpark plans a Python data source's partitions once per DataFrame, so the read task
    resolves them (see reading.read_range).
    """
    if spec.kind == "offsets":
        value = spec.offsets[tp]
        return OffsetSpec("earliest") if value == EARLIEST else OffsetSpec("latest") if value == LATEST else None
    if spec.kind == "timestamps":
        return OffsetSpec("timestamps", offsets={tp: spec.offsets[tp]})
    return spec


def _check_covers(given: Mapping[TopicPartition, int], partitions: Sequence[TopicPartition], option: str) -> None:
    """Spark requires JSON offsets to name exactly the partitions read."""
    wanted = set(partitions)
    missing = sorted(wanted - set(given))
    extra = sorted(set(given) - wanted)
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("not subscribed " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise OptionError(f"{option} must give every partition that is read, and only those ({'; '.join(parts)}); "
                          "use -2 for earliest and -1 for latest")
