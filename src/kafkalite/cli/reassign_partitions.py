"""`kafkalite reassign-partitions`: kafka-reassign-partitions.sh. Moves partitions' replicas between brokers (and
changes replication factors) through the controller's AlterPartitionReassignments (KIP-455): --generate proposes
an assignment, --execute starts it (printing the current one to roll back with), --verify and --list follow it,
--cancel stops it. The JSON files are Kafka's. Replication throttles and log-dir moves are not offered and are
refused by name."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kafkalite.cli.common import UsageError, add_bootstrap, controller_request, with_client
from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.cluster.assignment import assign_replicas
from kafkalite.errors import KafkaliteError
from kafkalite.protocol import ApiKey, ErrorCode

TIMEOUT_MS = 30000
ACTIONS = ("--generate", "--execute", "--verify", "--cancel", "--list")
REASSIGNMENT_EXAMPLE = '{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3,4]}]}'
TOPICS_EXAMPLE = '{"version":1,"topics":[{"topic":"orders"}]}'
UNSUPPORTED = {"throttle": "replication throttles", "replica_alter_log_dirs_throttle": "log-dir moves",
               "disable_rack_aware": "turning rack awareness off"}

EPILOG = f"""\
examples:
  kafkalite reassign-partitions --bootstrap-server 127.0.0.1:9092 --generate \\
      --topics-to-move-json-file topics.json --broker-list 2,3,4
      propose an assignment of the topics over brokers 2, 3 and 4; topics.json: {TOPICS_EXAMPLE}
  kafkalite reassign-partitions --execute --reassignment-json-file plan.json
      start the moves; plan.json: {REASSIGNMENT_EXAMPLE}
  kafkalite reassign-partitions --verify --reassignment-json-file plan.json
  kafkalite reassign-partitions --list
  kafkalite reassign-partitions --cancel --reassignment-json-file plan.json

A move adds the new replicas, which copy the partition from its leader; once they are all in sync the leader
moves if it must and the replicas no longer wanted are deleted. A replication factor changes the same way
(name more or fewer replicas). Every target broker must be alive.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("reassign-partitions", help="move partitions' replicas between brokers (like "
                       "kafka-reassign-partitions.sh)",
                       description="Generate, execute, verify, list or cancel partition reassignments, as "
                                   "kafka-reassign-partitions.sh.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap(p)
    for flag in ACTIONS:
        p.add_argument(flag, action="store_true", help=f"{flag[2:]} (one action per run)")
    p.add_argument("--reassignment-json-file", type=Path, metavar="FILE",
                   help=f"the assignment to execute, verify or cancel, e.g. {REASSIGNMENT_EXAMPLE}")
    p.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE",
                   help=f"the topics whose partitions --generate assigns, e.g. {TOPICS_EXAMPLE}")
    p.add_argument("--broker-list", metavar="IDS", help="the brokers --generate assigns to, e.g. 1,2,3")
    p.add_argument("--additional", action="store_true",
                   help="--execute although other reassignments are in progress")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS", help="how long --execute waits for the "
                   "controller (default 10000)")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="accepted for compatibility: kafkalite sets no throttles")
    for name in UNSUPPORTED:
        p.add_argument(f"--{name.replace('_', '-')}", default=None, action="store_true"
                       if name == "disable_rack_aware" else "store", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


# --- the JSON files ------------------------------------------------------------------------------------------

def parse_reassignment_json(text: str, source: str) -> dict[tuple[str, int], list[int]]:
    """Kafka's reassignment file: {"version":1,"partitions":[{"topic","partition","replicas"[,"log_dirs"]}]}."""
    doc = _load(text, source)
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{source}: Partition reassignment list cannot be empty: it needs \"partitions\", e.g. "
                         f"{REASSIGNMENT_EXAMPLE}")
    out: dict[tuple[str, int], list[int]] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("topic"), str) or type(e.get("partition")) is not int \
                or not isinstance(e.get("replicas"), list) or not all(type(b) is int for b in e["replicas"]):
            raise UsageError(f'{source}: partitions[{i}] needs "topic" (string), "partition" (integer) and '
                             f'"replicas" (a list of broker ids), got {e!r}')
        tp = (e["topic"], e["partition"])
        if tp in out:
            raise UsageError(f"{source}: Partition reassignment contains duplicate topic partitions: {tp[0]}-{tp[1]}")
        replicas = list(e["replicas"])
        if not replicas:
            raise UsageError(f"{source}: Partition replica list cannot be empty ({tp[0]}-{tp[1]})")
        if len(set(replicas)) != len(replicas):
            raise UsageError(f"{source}: Partition replica lists may not contain duplicate entries: {tp[0]}-{tp[1]} "
                             f"has {replicas}")
        dirs = e.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or len(dirs) != len(replicas)):
            raise UsageError(f"{source}: log_dirs of {tp[0]}-{tp[1]} must list one directory per replica")
        if dirs is not None and any(d != "any" for d in dirs):
            raise UsageError(f"{source}: log_dirs other than \"any\" ({tp[0]}-{tp[1]}: {dirs}) move replicas between "
                             "a broker's log dirs, which kafkalite does not do; use \"any\" or leave log_dirs out")
        out[tp] = replicas
    return out


def parse_topics_json(text: str, source: str) -> list[str]:
    doc = _load(text, source)
    entries = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("topic"), str) for e in entries):
        raise UsageError(f'{source}: expected {{"topics": [{{"topic": NAME}}, ...]}}, e.g. {TOPICS_EXAMPLE}')
    return list(dict.fromkeys(e["topic"] for e in entries))


def _load(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON: {exc}") from None


def _read(path: Path | None, option: str) -> tuple[str, str]:
    if path is None:
        raise UsageError(f"Missing required argument {option}")
    try:
        return path.read_text(), str(path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def assignment_json(assignment: dict[tuple[str, int], list[int]]) -> str:
    """Kafka's format, one line, as the tool prints it (and reads back for a rollback)."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": rs, "log_dirs": ["any"] * len(rs)}
        for (t, p), rs in sorted(assignment.items())]}, separators=(",", ":"))


# --- requests ------------------------------------------------------------------------------------------------

def _current(client: KafkaClient, topics: list[str]) -> dict[tuple[str, int], list[int]]:
    """The replicas of every partition of `topics` (Metadata); UsageError for a topic that does not exist."""
    md = client.metadata(topics)
    out: dict[tuple[str, int], list[int]] = {}
    for t in md["topics"]:
        if t["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise UsageError(f"Topic {t['name']} not found")
        for p in t["partitions"]:
            out[(t["name"], p["partition_index"])] = list(p["replica_nodes"])
    return out


def alter_reassignments(client: KafkaClient, wanted: dict[tuple[str, int], list[int] | None],
                        timeout_ms: int = TIMEOUT_MS) -> dict[tuple[str, int], tuple[int, str | None]]:
    """AlterPartitionReassignments at the controller: per partition (error code, message)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (t, p), replicas in sorted(wanted.items()):
        topics.setdefault(t, []).append({"partition_index": p, "replicas": replicas})
    body = {"timeout_ms": timeout_ms, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    answer = controller_request(client, ApiKey.ALTER_PARTITION_REASSIGNMENTS, body, timeout_ms, _moved)
    return {(r["name"], e["partition_index"]): (e["error_code"], e["error_message"])
            for r in answer["responses"] for e in r["partitions"]}


def list_reassignments(client: KafkaClient, partitions: list[tuple[str, int]] | None = None,
                       timeout_ms: int = TIMEOUT_MS) -> dict[tuple[str, int], dict[str, list[int]]]:
    """ListPartitionReassignments at the controller: the partitions being moved, with their replica sets."""
    topics: dict[str, list[int]] = {}
    for t, p in partitions or []:
        topics.setdefault(t, []).append(p)
    body = {"timeout_ms": timeout_ms, "topics": None if partitions is None else [
        {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
    answer = controller_request(client, ApiKey.LIST_PARTITION_REASSIGNMENTS, body, timeout_ms, _moved)
    return {(t["name"], p["partition_index"]): {"replicas": p["replicas"], "adding": p["adding_replicas"],
                                                "removing": p["removing_replicas"]}
            for t in answer["topics"] for p in t["partitions"]}


def _moved(answer: dict[str, Any]) -> bool:
    code = answer.get("error_code", ErrorCode.NONE)
    if code not in (ErrorCode.NONE, ErrorCode.NOT_CONTROLLER):
        raise KafkaClientError(code, answer.get("error_message") or ErrorCode(code).name)
    return code == ErrorCode.NOT_CONTROLLER


# --- actions -------------------------------------------------------------------------------------------------

def _action(args: Any) -> str:
    chosen = [flag for flag in ACTIONS if getattr(args, flag[2:])]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --generate, --execute, --verify, --cancel or "
                         f"--list{' (given: ' + ', '.join(chosen) + ')' if chosen else ''}")
    for name, what in UNSUPPORTED.items():
        if getattr(args, name, None):
            raise UsageError(f"--{name.replace('_', '-')} is not supported: kafkalite has no {what}")
    return chosen[0][2:]


def run(args: Any) -> int:
    try:
        action = _action(args)
    except UsageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    body = {"generate": _generate, "execute": _execute, "verify": _verify, "cancel": _cancel, "list": _list}[action]
    return with_client(args, "kafkalite-reassign-partitions", lambda client: body(client, args))


def _generate(client: KafkaClient, args: Any) -> int:
    text, source = _read(args.topics_to_move_json_file, "--topics-to-move-json-file")
    topics = parse_topics_json(text, source)
    if not args.broker_list:
        raise UsageError("Missing required argument --broker-list (with --generate)")
    try:
        brokers = sorted({int(b) for b in args.broker_list.split(",")})
    except ValueError:
        raise UsageError(f"--broker-list: {args.broker_list!r} is not a comma-separated list of broker ids") from None
    live = {b["node_id"]: b.get("rack") for b in client.metadata([])["brokers"]}
    unknown = [b for b in brokers if b not in live]
    if unknown:
        raise UsageError(f"Unknown broker id(s) {unknown} in --broker-list (brokers: {sorted(live)})")
    current = _current(client, topics)
    proposed: dict[tuple[str, int], list[int]] = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            plan = assign_replicas(len(parts), rf, brokers, {b: live[b] for b in brokers})
        except KafkaliteError as exc:
            raise UsageError(f"{topic}: {exc}") from None
        proposed.update({(topic, p): plan[i] for i, p in enumerate(parts)})
    print("Current partition replica assignment")
    print(assignment_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(assignment_json(proposed))
    return 0


def _execute(client: KafkaClient, args: Any) -> int:
    text, source = _read(args.reassignment_json_file, "--reassignment-json-file")
    wanted = parse_reassignment_json(text, source)
    current = _current(client, sorted({t for t, _p in wanted}))
    missing = [tp for tp in wanted if tp not in current]
    if missing:
        raise UsageError("Unable to find partition(s): " + ", ".join(f"{t}-{p}" for t, p in missing))
    if not args.additional and list_reassignments(client):
        raise UsageError("Cannot execute because there is an existing partition assignment. Use --additional to "
                         "override this and create a new partition assignment in addition to the existing one. "
                         "The --list option shows the reassignments in progress.")
    print("Current partition replica assignment")
    print()
    print(assignment_json({tp: current[tp] for tp in wanted}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    results = alter_reassignments(client, dict(wanted), args.timeout)
    failed = {tp: r for tp, r in results.items() if r[0] != ErrorCode.NONE}
    started = sorted(tp for tp in results if tp not in failed)
    if started:
        print("Successfully started partition reassignment" + ("s" if len(started) > 1 else "") + " for "
              + ",".join(f"{t}-{p}" for t, p in started))
    for (t, p), (code, message) in sorted(failed.items()):
        print(f"Error reassigning partition(s):\n{t}-{p}: {ErrorCode(code).name}: {message or ''}".rstrip(": "))
    return 1 if failed else 0


def _verify(client: KafkaClient, args: Any) -> int:
    text, source = _read(args.reassignment_json_file, "--reassignment-json-file")
    wanted = parse_reassignment_json(text, source)
    moving = list_reassignments(client, list(wanted))
    current = _current(client, sorted({t for t, _p in wanted}))
    print("Status of partition reassignment:")
    pending = 0
    for (t, p), target in sorted(wanted.items()):
        if (t, p) in moving:
            pending += 1
            print(f"Reassignment of partition {t}-{p} is still in progress.")
        elif current.get((t, p)) == target:
            print(f"Reassignment of partition {t}-{p} is completed.")
        else:
            pending += 1
            have = ",".join(map(str, current.get((t, p), [])))
            print(f"There is no active reassignment of partition {t}-{p}, but replica set is {have} rather than "
                  f"{','.join(map(str, target))}.")
    return 1 if pending else 0


def _cancel(client: KafkaClient, args: Any) -> int:
    text, source = _read(args.reassignment_json_file, "--reassignment-json-file")
    wanted = parse_reassignment_json(text, source)
    results = alter_reassignments(client, dict.fromkeys(wanted), TIMEOUT_MS)
    cancelled = sorted(tp for tp, (code, _m) in results.items() if code == ErrorCode.NONE)
    inactive = sorted(tp for tp, (code, _m) in results.items() if code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    failed = {tp: r for tp, r in results.items() if tp not in cancelled and tp not in inactive}
    if cancelled:
        print("Successfully cancelled partition reassignments for: " + ",".join(f"{t}-{p}" for t, p in cancelled))
    if inactive and not cancelled:
        print("None of the specified partition reassignments are active.")
    for (t, p), (code, message) in sorted(failed.items()):
        print(f"Error cancelling the reassignment of {t}-{p}: {ErrorCode(code).name}: {message or ''}".rstrip(": "))
    return 1 if failed else 0


def _list(client: KafkaClient, _args: Any) -> int:
    moving = list_reassignments(client)
    if not moving:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), sets in sorted(moving.items()):
        print(f"{t}-{p}: replicas: {','.join(map(str, sets['replicas']))}. adding: "
              f"{','.join(map(str, sets['adding']))}. removing: {','.join(map(str, sets['removing']))}.")
    return 0
