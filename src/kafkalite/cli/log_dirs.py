"""`kafkalite log-dirs --describe`: each log dir's partitions and sizes as JSON, like kafka-log-dirs.sh,
through DescribeLogDirs."""

from __future__ import annotations

import json
from typing import Any

from kafkalite.cli.common import add_bootstrap, with_client
from kafkalite.client import KafkaClient, KafkaClientError, topics_of
from kafkalite.protocol import ErrorCode


def add_parser(sub: Any) -> None:
    p = sub.add_parser("log-dirs", help="describe log dirs and partition sizes as JSON (like kafka-log-dirs.sh)")
    add_bootstrap(p)
    p.add_argument("--describe", action="store_true", required=True)
    p.add_argument("--topic-list", help="comma-separated topics (default every topic)")
    p.set_defaults(func=run)


def run(args: Any) -> int:
    return with_client(args, "kafkalite-log-dirs", lambda client: _run(client, args))


def _run(client: KafkaClient, args: Any) -> int:
    topics = None
    if args.topic_list:
        names = [t.strip() for t in args.topic_list.split(",") if t.strip()]
        topics = {}
        for t in topics_of(client.metadata(names)):
            if t["error_code"]:
                raise KafkaClientError(t["error_code"], t["name"])
            topics[t["name"]] = [p["partition_index"] for p in t["partitions"]]
    print("Querying brokers for log directories information")
    results = client.describe_log_dirs(topics)
    brokers = client.metadata([])["brokers"]
    broker = next((b["node_id"] for b in brokers if (b["host"], b["port"]) == (client.host, client.port)),
                  brokers[0]["node_id"])
    print(f"Received log directory information from brokers {broker}")
    dirs = []
    for d in results:
        dirs.append({"logDir": d["log_dir"],
                     "error": None if not d["error_code"] else ErrorCode(d["error_code"]).name,
                     "partitions": [{"partition": f"{t['name']}-{p['partition_index']}", "size": p["partition_size"],
                                     "offsetLag": p["offset_lag"], "isFuture": p["is_future_key"]}
                                    for t in d["topics"] for p in t["partitions"]]})
    print(json.dumps({"brokers": [{"broker": broker, "logDirs": dirs}], "version": 1}, separators=(",", ":")))
    return 0
