"""`kafkalite groups`: list consumer groups and describe their members, offsets and lag on a running broker,
like kafka-consumer-groups.sh."""

from __future__ import annotations

from typing import Any

from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.coordinator import compute_lag
from kafkalite.coordinator.consumer_protocol import decode_assignment
from kafkalite.coordinator.lag import Owner
from kafkalite.protocol import ApiKey


def add_parser(sub: Any) -> None:
    p = sub.add_parser("groups", help="list and describe consumer groups (like kafka-consumer-groups.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true")
    action.add_argument("--describe", action="store_true")
    p.add_argument("--group", action="append", default=[], help="group id (repeatable; default every group)")
    p.set_defaults(func=run)


def run(args: Any) -> int:
    try:
        with KafkaClient(args.bootstrap_server, client_id="kafkalite-groups") as client:
            groups = client.request(ApiKey.LIST_GROUPS, {"states_filter": []})
            if groups["error_code"]:
                raise KafkaClientError(groups["error_code"], "ListGroups")
            names = sorted(g["group_id"] for g in groups["groups"])
            if args.list:
                for n in names:
                    print(n)
                return 0
            wanted = args.group or names
            for i, group in enumerate(wanted):
                if i:
                    print()
                describe(client, group)
    except KafkaClientError as exc:
        print(f"Error: {exc}")
        return 1
    except OSError as exc:
        print(f"Error: cannot reach the broker at {args.bootstrap_server}: {exc}")
        return 1
    return 0


def describe(client: KafkaClient, group: str) -> None:
    desc = client.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False})
    g = desc["groups"][0]
    if g["error_code"]:
        raise KafkaClientError(g["error_code"], group)
    owners: dict[tuple[str, int], Owner] = {}
    for m in g.get("members", []):
        if g.get("protocol_type") == "consumer" and m.get("member_assignment"):
            for topic, parts in decode_assignment(bytes(m["member_assignment"])).items():
                for p in parts:
                    owners[(topic, p)] = Owner(m["member_id"], m.get("client_host", ""), m.get("client_id", ""))
    fetched = client.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None, "require_stable": False,
                                                   "groups": [{"group_id": group, "topics": None}]})
    topics = fetched.get("topics")
    if topics is None and fetched.get("groups"):
        topics = fetched["groups"][0].get("topics", [])
    committed = {(t["name"], p["partition_index"]): p["committed_offset"]
                 for t in topics or [] for p in t["partitions"] if p["committed_offset"] >= 0}

    def leo(topic: str, partition: int) -> int | None:
        try:
            return client.list_offset(topic, partition, -1)
        except KafkaClientError:
            return None

    rows = compute_lag(group, committed, leo, owners)
    state = g.get("group_state", "")
    if not rows:
        print(f"Consumer group '{group}' has no active members and no committed offsets ({state}).")
        return
    if state != "Stable":
        print(f"Consumer group '{group}' has no active members." if not g.get("members") else
              f"Consumer group '{group}' is {state}.")
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
              "CLIENT-ID"]
    table = [header] + [[r.group, r.topic, str(r.partition), _dash(r.current_offset), _dash(r.log_end_offset),
                         _dash(r.lag), r.consumer_id or "-", r.host or "-", r.client_id or "-"] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _dash(v: int | None) -> str:
    return "-" if v is None else str(v)
