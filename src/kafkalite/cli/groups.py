"""`kafkalite groups`: list consumer groups, describe their members, offsets and lag, reset or delete their offsets
and delete them on a running broker, like kafka-consumer-groups.sh."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from kafkalite.cli.common import UsageError, add_command_config, with_client
from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.coordinator import compute_lag
from kafkalite.coordinator.consumer_protocol import decode_assignment
from kafkalite.coordinator.lag import Owner
from kafkalite.protocol import ErrorCode


def add_parser(sub: Any) -> None:
    p = sub.add_parser("groups", help="list, describe, reset and delete consumer groups "
                                      "(like kafka-consumer-groups.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092",
                   help="host:port of a broker to connect to (comma-separated list; default 127.0.0.1:9092)")
    add_command_config(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true")
    action.add_argument("--describe", action="store_true")
    action.add_argument("--reset-offsets", action="store_true",
                        help="set the committed offsets of an inactive group (plan only unless --execute)")
    action.add_argument("--delete", action="store_true", help="delete inactive groups with their offsets")
    action.add_argument("--delete-offsets", action="store_true",
                        help="delete a group's committed offsets of --topic (not of topics its members consume)")
    p.add_argument("--group", action="append", default=[], help="group id (repeatable; default every group)")
    p.add_argument("--all-groups", action="store_true", help="--describe, --delete: every group")
    detail = p.add_mutually_exclusive_group()
    detail.add_argument("--offsets", action="store_true", help="--describe: committed offsets and lag (the default)")
    detail.add_argument("--members", action="store_true", help="--describe: the members and how many partitions each")
    detail.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                        help="--describe: coordinator, assignment strategy, state and member count; --list: each "
                             "group's state, or only the groups in STATES (comma-separated, e.g. Stable,Empty)")
    p.add_argument("--type", nargs="?", const="", default=None, metavar="TYPES",
                   help="--list: each group's type, or only the groups of TYPES (comma-separated: classic, consumer)")
    p.add_argument("--verbose", dest="details", action="store_true", help="--describe --members: the assignment")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P2]",
                   help="--reset-offsets, --delete-offsets: topic, optionally with partitions (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic the group has offsets in")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-current", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N", help="move the committed offsets by N (may be negative)")
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]",
                    help="first offset at or after this time (local time without a zone)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the plan")
    p.set_defaults(func=run)


def run(args: Any) -> int:
    return with_client(args, "kafkalite-groups", lambda client: _run(client, args))


def _run(client: KafkaClient, args: Any) -> int:
    if args.delete:
        return delete(client, sorted(client.list_groups()) if args.all_groups else args.group)
    if args.reset_offsets:
        return reset_offsets(client, args)
    if args.delete_offsets:
        return delete_offsets(client, args)
    if args.list:
        return list_groups(client, args)
    if args.type is not None:
        raise UsageError("--type goes with --list")
    listed = client.list_groups()
    names = sorted(listed)
    wanted = names if args.all_groups else args.group or names
    for i, group in enumerate(wanted):
        if i:
            print()
        if args.state is not None:
            if args.state:
                raise UsageError("--describe --state takes no value (states filter --list)")
            describe_state(client, group)
        elif args.members:
            describe_members(client, group, args.details)
        else:
            describe(client, group)
    return 0


GROUP_STATES = ("Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead")
GROUP_TYPES = ("classic", "consumer")  # Kafka's GroupType as kafka-consumer-groups.sh takes it (KIP-848)


def _choices(raw: str, known: tuple[str, ...], what: str) -> list[str]:
    """A comma-separated filter of --state or --type, each name checked case-insensitively as Kafka's tool does."""
    wanted = [v.strip() for v in raw.split(",") if v.strip()]
    bad = [v for v in wanted if v.lower() not in {k.lower() for k in known}]
    if bad:
        raise UsageError(f"Invalid {what} list '{raw}'. Valid {what}s are: {', '.join(known)}")
    return wanted


def list_groups(client: KafkaClient, args: Any) -> int:
    """--list [--state [STATES]] [--type [TYPES]]: group ids, or a table with the TYPE and STATE columns asked for
    (kafka-consumer-groups.sh's layout); a value filters on it (ListGroups v4 states_filter, v5 types_filter)."""
    states = _choices(args.state, GROUP_STATES, "state") if args.state else []
    types = _choices(args.type, GROUP_TYPES, "type") if args.type else []
    listed = client.list_groups(states, types)
    names = sorted(listed)
    if args.state is None and args.type is None:
        for n in names:
            print(n)
        return 0
    header = ["GROUP"] + (["TYPE"] if args.type is not None else []) + (["STATE"] if args.state is not None else [])
    rows = [[n] + ([listed[n][2].capitalize() or "-"] if args.type is not None else [])
            + ([listed[n][1] or "-"] if args.state is not None else []) for n in names]
    _print_table(header, rows)
    return 0


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    """Columns as wide as their widest cell, two spaces apart (kafka-consumer-groups.sh's layout)."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _assignments(g: dict[str, Any]) -> dict[str, dict[str, list[int]]]:
    """Member id -> its assigned partitions by topic (consumer-protocol groups; others have none readable)."""
    out: dict[str, dict[str, list[int]]] = {}
    for m in g.get("members", []):
        assigned = m.get("member_assignment")
        out[m["member_id"]] = decode_assignment(bytes(assigned)) if g.get("protocol_type") == "consumer" and \
            assigned else {}
    return out


def describe_state(client: KafkaClient, group: str) -> None:
    """--describe --state: one row per group, with the broker coordinating it."""
    g = client.describe_group(group)
    conn = client.coordinator(group)
    _print_table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                 [[group, f"{conn.host}:{conn.port} ({conn.node_id})", g.get("protocol_data") or "",
                   g.get("group_state", ""), str(len(g.get("members", [])))]])


def describe_members(client: KafkaClient, group: str, details: bool) -> None:
    """--describe --members [--verbose]: one row per member, with its partition count (and assignment)."""
    g = client.describe_group(group)
    if not g.get("members"):
        print(f"Consumer group '{group}' has no active members.")
        return
    assigned = _assignments(g)
    header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if details else [])
    rows = []
    for m in sorted(g["members"], key=lambda m: m["member_id"]):
        parts = assigned[m["member_id"]]
        row = [group, m["member_id"], m.get("client_host") or "-", m.get("client_id") or "-",
               str(sum(len(ps) for ps in parts.values()))]
        if details:
            row.append(",".join(f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(parts.items())) or "-")
        rows.append(row)
    _print_table(header, rows)


def describe(client: KafkaClient, group: str) -> None:
    g = client.describe_group(group)  # (at the group's coordinator, as the OffsetFetch below)
    owners: dict[tuple[str, int], Owner] = {}
    assigned = _assignments(g)
    for m in g.get("members", []):
        for topic, parts in assigned[m["member_id"]].items():
            for p in parts:
                owners[(topic, p)] = Owner(m["member_id"], m.get("client_host", ""), m.get("client_id", ""))
    committed = client.offset_fetch(group)

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
    _print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"],
                 [[r.group, r.topic, str(r.partition), _dash(r.current_offset), _dash(r.log_end_offset),
                   _dash(r.lag), r.consumer_id or "-", r.host or "-", r.client_id or "-"] for r in rows])


def _dash(v: int | None) -> str:
    return "-" if v is None else str(v)


def delete(client: KafkaClient, groups: list[str]) -> int:
    if not groups:
        print("Error: --delete needs --group", file=sys.stderr)
        return 2
    results = client.delete_groups(groups)
    failed = {g: code for g, code in results.items() if code}
    if not failed:
        print(f"Deletion of requested consumer groups ({', '.join(repr(g) for g in groups)}) was successful.")
        return 0
    print("Deletion of some consumer groups failed:")
    for g, code in failed.items():
        print(f"* Group '{g}' could not be deleted due to: {ErrorCode(code).name}")
    ok = [g for g in groups if g not in failed]
    if ok:
        print(f"These consumer groups were deleted successfully: {', '.join(repr(g) for g in ok)}")
    return 1


def delete_offsets(client: KafkaClient, args: Any) -> int:
    """kafka-consumer-groups.sh --delete-offsets: one group, the partitions of each --topic (all of a topic's
    when none are given; a topic that does not exist is reported, not sent), then Kafka's status table."""
    if len(args.group) != 1 or not args.topic or args.all_topics:
        raise UsageError("--delete-offsets needs one --group and at least one --topic (not --all-topics)")
    group = args.group[0]
    asked: list[tuple[str, int]] = []
    statuses: dict[tuple[str, int], int] = {}
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        if parts:
            asked += [(topic, int(p)) for p in parts.split(",") if p.strip()]
            continue
        meta = next(iter(client.metadata([topic])["topics"]))
        if meta["error_code"]:
            statuses[(topic, -1)] = meta["error_code"]
        else:
            asked += [(topic, p["partition_index"]) for p in sorted(meta["partitions"],
                                                                     key=lambda p: p["partition_index"])]
    top, results = client.delete_offsets(group, asked) if asked else (0, {})
    statuses.update(results)
    topics = ", ".join(dict.fromkeys(t for t, _ in [*asked, *statuses]))
    failed = top or any(statuses.values())
    if top == 0 and not failed:
        print(f"Request succeed for deleting offsets with topic {topics} group {group}")
    elif top == ErrorCode.GROUP_ID_NOT_FOUND:
        print(f"Error: '{group}' does not exist.", file=sys.stderr)
    elif top == ErrorCode.NON_EMPTY_GROUP:
        print(f"Error: Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.",
              file=sys.stderr)
    elif top == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        print(f"Error: Access to '{group}' is not authorized.", file=sys.stderr)
    elif top:
        print(f"Error: Encounter some unknown error: {ErrorCode(top).name}", file=sys.stderr)
    else:
        print("Error: Encounter some partition level error, see the follow-up details:", file=sys.stderr)
    if top == 0:
        print(f"\n{'TOPIC':<30} {'PARTITION':<15} STATUS")
        for (t, p), code in sorted(statuses.items()):
            status = f"Error: {ErrorCode(code).name}" if code else "Successful"
            print(f"{t:<30} {p if p >= 0 else 'Not Provided':<15} {status}")
    return 1 if failed else 0


def _reset_scope(client: KafkaClient, args: Any, committed: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
    if args.all_topics == bool(args.topic):
        raise UsageError("--reset-offsets needs exactly one of --topic and --all-topics")
    if args.all_topics:
        return sorted(committed)
    out = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        meta = next(iter(client.metadata([topic])["topics"]))
        if meta["error_code"]:
            raise KafkaClientError(meta["error_code"], topic)
        present = sorted(p["partition_index"] for p in meta["partitions"])
        wanted = [int(p) for p in parts.split(",") if p.strip()] if parts else present
        for p in wanted:
            if p not in present:
                raise KafkaClientError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{p}")
            out.append((topic, p))
    return out


def _offsets_at(client: KafkaClient, tps: list[tuple[str, int]], ts: int) -> dict[tuple[str, int], int]:
    res = client.list_offsets({tp: ts for tp in tps})
    for (t, p), r in res.items():
        if r["error_code"]:
            raise KafkaClientError(r["error_code"], f"{t}-{p}")
    return {tp: r["offset"] for tp, r in res.items()}


def plan_reset(client: KafkaClient, args: Any, tps: list[tuple[str, int]], committed: dict[tuple[str, int], int]
               ) -> dict[tuple[str, int], int]:
    """The new offset of each partition, as kafka-consumer-groups.sh computes it (clamped to the log's
    range for --to-offset and --shift-by)."""
    earliest = _offsets_at(client, tps, -2)
    latest = _offsets_at(client, tps, -1)

    def clamp(tp: tuple[str, int], offset: int) -> int:
        return max(earliest[tp], min(latest[tp], offset))

    def current(tp: tuple[str, int]) -> int:
        if tp not in committed:
            raise UsageError(f"group has no committed offset for {tp[0]}-{tp[1]}")
        return committed[tp]

    if args.to_earliest:
        return earliest
    if args.to_latest:
        return latest
    if args.to_current:
        return {tp: current(tp) for tp in tps}
    if args.to_offset is not None:
        return {tp: clamp(tp, args.to_offset) for tp in tps}
    if args.shift_by is not None:
        return {tp: clamp(tp, current(tp) + args.shift_by) for tp in tps}
    if args.to_datetime:
        try:
            when = datetime.fromisoformat(args.to_datetime)
        except ValueError:
            raise UsageError(f"--to-datetime {args.to_datetime!r} is not "
                             "YYYY-MM-DDTHH:mm:SS.sss with an optional zone") from None
        at = _offsets_at(client, tps, int(when.timestamp() * 1000))
        return {tp: at[tp] if at[tp] >= 0 else latest[tp] for tp in tps}
    raise UsageError("--reset-offsets needs one of --to-earliest, --to-latest, "
                     "--to-current, --to-offset, --shift-by, --to-datetime")


def reset_offsets(client: KafkaClient, args: Any) -> int:
    if len(args.group) != 1:
        print("Error: --reset-offsets needs one --group", file=sys.stderr)
        return 2
    group = args.group[0]
    if not args.dry_run and not args.execute:
        print("WARN: No action will be performed as the --execute option is missing. Add --dry-run to say you "
              "only want the plan, --execute to apply it.", file=sys.stderr)
    state = client.describe_group(group)["group_state"]
    if state not in ("Empty", "Dead"):
        print(f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state "
              f"is {state}.")
        return 1
    committed = client.offset_fetch(group)
    plan = plan_reset(client, args, _reset_scope(client, args, committed), committed)
    print()
    print(f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}".rstrip())
    for (t, p), off in sorted(plan.items()):
        print(f"{group:<30} {t:<30} {p:<10} {off:<15}".rstrip())
    if args.execute:
        failed = {tp: code for tp, code in client.offset_commit(group, plan).items() if code}
        if failed:
            (t, p), code = next(iter(sorted(failed.items())))
            raise KafkaClientError(code, f"committing the new offset of {t}-{p} for group {group}")
    return 0
