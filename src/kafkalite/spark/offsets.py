"""Offsets as Spark stores them (JSON `{"topic": {"partition": offset}}`) and the range arithmetic on them.

Spark compares streaming offsets as JSON strings, so equal offsets must always serialise to the
same text: topics and partitions are emitted in sorted order (partitions numerically).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from kafkalite.spark.backend import TopicPartition
from kafkalite.spark.errors import OptionError

EARLIEST = -2  # Kafka's and Spark's sentinels inside offset JSON
LATEST = -1


def to_json_dict(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """`{"topic": {"0": 5}}` with keys inserted in sorted order (what the streaming engine stores)."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def to_json(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(to_json_dict(offsets), separators=(",", ":"))


def from_json(value: str | Mapping[str, Mapping[str, int]], what: str = "offsets") -> dict[TopicPartition, int]:
    """Parse `{"topic": {"partition": number}}` (text or the dict Spark hands back)."""
    data = _load(value, what) if isinstance(value, str) else value
    if not isinstance(data, Mapping):
        raise OptionError(f"{what}: expected a JSON object like {{\"topic\":{{\"0\":23}}}}, got {value!r}")
    out: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, Mapping):
            raise OptionError(f"{what}: topic {topic!r} must map partitions to numbers, got {partitions!r}")
        for partition, number in partitions.items():
            try:
                p = int(partition)
            except (TypeError, ValueError):
                raise OptionError(f"{what}: partition {partition!r} of topic {topic!r} is not a number") from None
            if isinstance(number, bool) or not isinstance(number, int):
                raise OptionError(f"{what}: value for {topic}-{p} must be an integer, got {number!r}")
            out[(str(topic), p)] = number
    return out


def parse_assign(value: str) -> list[TopicPartition]:
    """`{"topicA":[0,1],"topicB":[2,4]}` -> sorted topic-partitions."""
    data = _load(value, "assign")
    if not isinstance(data, dict) or not data:
        raise OptionError(f'assign: expected a JSON object like {{"topicA":[0,1]}}, got {value!r}')
    out: set[TopicPartition] = set()
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not all(isinstance(p, int) and not isinstance(p, bool)
                                                       for p in partitions):
            raise OptionError(f"assign: topic {topic!r} must map to a list of partition numbers, got {partitions!r}")
        out.update((topic, p) for p in partitions)
    return sorted(out)


def _load(value: str, what: str) -> object:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{what}: not valid JSON ({exc.msg} at character {exc.pos}): {value!r}") from None


def rate_limit(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
               max_rows: int) -> dict[TopicPartition, int]:
    """Cap the offsets to read at `max_rows` in total, split across partitions by their backlog.

    As Spark's Kafka source: each partition gets its share of the limit in proportion to what it
    has to read, at least one offset when it has anything (so small partitions are not starved).
    """
    sizes = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(end)
    capped = {}
    for tp, stop in end.items():
        begin = start.get(tp, stop)
        share = max_rows * sizes[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        capped[tp] = min(stop, begin + step)
    return capped


def split_ranges(ranges: list[tuple[TopicPartition, int, int]], min_partitions: int | None
                 ) -> list[tuple[TopicPartition, int, int]]:
    """Split (tp, start, end) ranges so there are at least about `min_partitions` of them.

    A partition is split in proportion to its share of all offsets to read, into pieces of equal
    size; ranges are left alone when there are already enough (one Spark task per partition).
    """
    ranges = [r for r in ranges if r[2] > r[1]]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(end - start for _, start, end in ranges)
    out = []
    for tp, start, end in ranges:
        size = end - start
        parts = min(size, max(1, math.ceil(size * min_partitions / total)))
        for i in range(parts):
            lo = start + size * i // parts
            hi = start + size * (i + 1) // parts
            out.append((tp, lo, hi))
    return out
