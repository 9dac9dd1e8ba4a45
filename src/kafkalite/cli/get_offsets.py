"""`kafkalite get-offsets`: offsets of partitions at a point in time, like kafka-get-offsets.sh
(`topic:partition:offset` per line), through ListOffsets."""

from __future__ import annotations

from typing import Any

from kafkalite.cli.common import UsageError, add_bootstrap, parse_partitions, with_client
from kafkalite.client import KafkaClient, KafkaClientError, topics_of

TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("get-offsets", help="print topic:partition:offset at a time (like kafka-get-offsets.sh)")
    add_bootstrap(p)
    p.add_argument("--topic", help="topic name (default every non-internal topic)")
    p.add_argument("--partitions", help="comma-separated partitions, ranges allowed (default all)")
    p.add_argument("--time", default="-1",
                   help="-1 or latest (default), -2 or earliest, -3 or max-timestamp (offset of the record with "
                        "the largest timestamp), or a timestamp in ms (first offset at or after it)")
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave out __consumer_offsets etc.")
    p.set_defaults(func=run)


def parse_time(text: str) -> int:
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--time must be -1, -2, -3, latest, earliest, max-timestamp or ms, not {text!r}") from None
    if value < -3:
        raise UsageError(f"--time {value} is not a timestamp kafkalite answers (-1, -2, -3 or ms)")
    return value


def run(args: Any) -> int:
    return with_client(args, "kafkalite-get-offsets", lambda client: _run(client, args))


def _run(client: KafkaClient, args: Any) -> int:
    ts = parse_time(args.time)
    wanted = parse_partitions(args.partitions, "--partitions") if args.partitions else None
    meta = client.metadata([args.topic] if args.topic else None)
    queries = {}
    for t in topics_of(meta):
        if t["error_code"]:
            raise KafkaClientError(t["error_code"], t["name"])
        if t.get("is_internal") and (args.exclude_internal_topics or not args.topic):
            continue
        present = {p["partition_index"] for p in t["partitions"]}
        if wanted is not None and args.topic and not set(wanted) <= present:
            missing = sorted(set(wanted) - present)
            raise UsageError(f"topic {t['name']} has no partition {', '.join(map(str, missing))}")
        for p in sorted(present):
            if wanted is None or p in wanted:
                queries[(t["name"], p)] = ts
    if not queries:
        return 0
    for (topic, p), res in sorted(client.list_offsets(queries).items()):
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], f"{topic}-{p}")
        if res["offset"] >= 0:  # no record at or after the timestamp: Kafka's tool prints nothing for it
            print(f"{topic}:{p}:{res['offset']}")
    return 0
