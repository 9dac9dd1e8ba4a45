"""`kafkalite topics`: create, delete, list and describe topics on a running broker, like kafka-topics.sh."""

from __future__ import annotations

import sys
from typing import Any

from kafkalite.cli.common import add_command_config, client_security, unreachable
from kafkalite.cli.reassign_partitions import list_reassignments
from kafkalite.client import KafkaClient, KafkaClientError, topics_of
from kafkalite.errors import InvalidConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("topics", help="manage topics on a running broker (like kafka-topics.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092",
                   help="host:port of a broker to connect to (comma-separated list; default 127.0.0.1:9092)")
    add_command_config(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true")
    action.add_argument("--delete", action="store_true")
    action.add_argument("--list", action="store_true")
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true", help="add partitions to --topic (with --partitions)")
    p.add_argument("--topic", help="topic name (required for --create/--delete/--alter; filters --describe)")
    p.add_argument("--partitions", type=int, default=-1, help="partitions of a new topic (default num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic config of a new topic, e.g. cleanup.policy=compact (repeatable)")
    p.add_argument("--if-not-exists", action="store_true")
    p.add_argument("--if-exists", action="store_true")
    p.add_argument("--exclude-internal", action="store_true", help="--list, --describe: leave out internal topics")
    report = p.add_mutually_exclusive_group()
    report.add_argument("--under-replicated-partitions", action="store_true",
                        help="--describe: only partitions whose ISR is smaller than their replicas")
    report.add_argument("--unavailable-partitions", action="store_true",
                        help="--describe: only partitions without a live leader")
    report.add_argument("--under-min-isr-partitions", action="store_true",
                        help="--describe: only partitions whose ISR is smaller than min.insync.replicas")
    report.add_argument("--at-min-isr-partitions", action="store_true",
                        help="--describe: only partitions whose ISR is exactly min.insync.replicas")
    p.set_defaults(func=run)


def run(args: Any) -> int:
    try:
        with KafkaClient(args.bootstrap_server, client_id="kafkalite-topics", security=client_security(args)) as client:
            return _run(client, args)
    except InvalidConfigError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except KafkaClientError as exc:
        print(f"Error: {exc}")
        return 1
    except (ConnectionError, OSError) as exc:
        print(f"Error: {unreachable(args, exc)}")
        return 1


# over the complexity limit: still to split (issue 34)
def _run(client: KafkaClient, args: Any) -> int:  # noqa: C901
    if (args.create or args.delete or args.alter) and not args.topic:
        print("Error: --topic is required with --create, --delete and --alter")
        return 2
    if args.alter:
        if args.partitions < 1:
            print("Error: --alter needs --partitions N (the new, larger partition count)")
            return 2
        if args.config:
            print("Error: --alter changes partitions only; change configs with `kafkalite configs --alter`")
            return 2
        try:
            client.create_partitions(args.topic, args.partitions)
        except KafkaClientError as exc:
            if args.if_exists and exc.error_code == 3:
                return 0
            raise
        return 0
    if args.create:
        configs = {}
        for item in args.config:
            k, sep, v = item.partition("=")
            if not sep:
                print(f"Error: --config expects KEY=VALUE, got {item!r}")
                return 2
            configs[k] = v
        try:
            client.create_topic(args.topic, args.partitions, args.replication_factor, configs)
        except KafkaClientError as exc:
            if args.if_not_exists and exc.error_code == 36:
                return 0
            raise
        print(f"Created topic {args.topic}.")
    elif args.delete:
        try:
            client.delete_topic(args.topic)
        except KafkaClientError as exc:
            if args.if_exists and exc.error_code == 3:
                return 0
            raise
        print(f"Deleted topic {args.topic}.")
    elif args.list:
        for t in topics_of(client.metadata()):
            if not (args.exclude_internal and t.get("is_internal")):
                print(t["name"])
    else:
        meta = client.metadata([args.topic] if args.topic else None)
        live = {b["node_id"] for b in meta.get("brokers", [])}
        moving = _moving(client)
        reporting = _reporting(args)
        found = False
        for t in topics_of(meta):
            if t["error_code"]:
                raise KafkaClientError(t["error_code"], t["name"])
            found = True
            if args.exclude_internal and t.get("is_internal"):
                continue
            described = client.describe_topic_configs(t["name"])
            min_isr = next((int(c["value"]) for c in described if c["name"] == "min.insync.replicas"), 1)
            if not reporting:  # kafka-topics.sh prints the topic's line only without a partition report
                cfg = ",".join(f"{c['name']}={c['value']}" for c in described if c.get("config_source") == 1)
                print(f"Topic: {t['name']}\tTopicId: {_b64(t.get('topic_id'))}\tPartitionCount: "
                      f"{len(t['partitions'])}\tReplicationFactor: "
                      f"{len(t['partitions'][0]['replica_nodes']) if t['partitions'] else 0}\tConfigs: {cfg}")
            for p in sorted(t["partitions"], key=lambda p: p["partition_index"]):
                sets = moving.get((t["name"], p["partition_index"]))
                if reporting and not _reported(args, p, sets, live, min_isr):
                    continue
                leader = p["leader_id"] if p["leader_id"] >= 0 else "none"
                offline = p.get("offline_replicas") or []
                print(f"\tTopic: {t['name']}\tPartition: {p['partition_index']}\tLeader: {leader}"
                      f"\tReplicas: {','.join(map(str, p['replica_nodes']))}"
                      f"\tIsr: {','.join(map(str, p['isr_nodes']))}" + _move_columns(sets)
                      + (f"\tOffline: {','.join(map(str, offline))}" if offline else ""))
        if args.topic and not found:
            print(f"Error: topic {args.topic} does not exist")
            return 1
    return 0


def _reporting(args: Any) -> bool:
    return bool(args.under_replicated_partitions or args.unavailable_partitions or args.under_min_isr_partitions
                or args.at_min_isr_partitions)


def _reported(args: Any, p: dict[str, Any], sets: dict[str, list[int]] | None, live: set[int], min_isr: int) -> bool:
    """kafka-topics.sh's partition reports (PartitionDescription): whether --describe prints partition `p`. The
    replication factor of a partition being moved leaves out the replicas it is adding, as Kafka's."""
    isr = len(p["isr_nodes"])
    if args.under_replicated_partitions:
        return isr < len(p["replica_nodes"]) - len(sets["adding"] if sets else [])
    if args.unavailable_partitions:
        return p["leader_id"] not in live  # (no leader: -1, never a live broker)
    if args.under_min_isr_partitions:
        return isr < min_isr
    return isr == min_isr  # --at-min-isr-partitions


def _moving(client: KafkaClient) -> dict[tuple[str, int], dict[str, list[int]]]:
    """The partitions being reassigned (as kafka-topics.sh --describe asks the controller), {} with a warning
    when the controller cannot say."""
    try:
        return list_reassignments(client, timeout_ms=5000)
    except (KafkaClientError, OSError) as exc:
        print(f"Warning: cannot list partition reassignments ({exc}): moves in progress are not shown",
              file=sys.stderr)
        return {}


def _move_columns(sets: dict[str, list[int]] | None) -> str:
    if sets is None:
        return ""
    return (f"\tAdding Replicas: {','.join(map(str, sets['adding']))}"
            f"\tRemoving Replicas: {','.join(map(str, sets['removing']))}")


def _b64(topic_id: Any) -> str:
    from kafkalite.storage.checkpoint import uuid_to_base64

    return uuid_to_base64(topic_id) if topic_id is not None else "-"
