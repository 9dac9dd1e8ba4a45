"""`kafkalite leader-election`: kafka-leader-election.sh. Asks the controller (found through Metadata) to elect
the preferred replica (PREFERRED: the first replica of the assignment, if it is alive and in sync) or, for
partitions without a leader, any live replica (UNCLEAN: may lose committed records), and prints what Kafka's
tool prints. Exit code 1 if any partition could not be elected."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from kafkalite.cli.common import UsageError, add_bootstrap, controller_request, with_client
from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.protocol import ApiKey, ErrorCode

ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
JSON_EXAMPLE = '{"partitions": [{"topic": "foo", "partition": 1}, {"topic": "foobar", "partition": 2}]}'
TIMEOUT_MS = 30000  # the tool's default.api.timeout.ms

EPILOG = f"""\
examples:
  kafkalite leader-election --bootstrap-server 127.0.0.1:9092 --election-type preferred --all-topic-partitions
      give every partition back to its preferred replica where that replica is alive and in sync
  kafkalite leader-election --election-type preferred --topic orders --partition 3
  kafkalite leader-election --election-type unclean --path-to-json-file partitions.json
      partitions.json: {JSON_EXAMPLE}
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("leader-election", help="elect preferred or unclean leaders (like kafka-leader-election.sh)",
                       description="Run a leader election on the controller, as kafka-leader-election.sh.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bootstrap(p)
    p.add_argument("--election-type", required=True, type=_election_type, metavar="PREFERRED|UNCLEAN",
                   help="preferred: elect the preferred replica where the leader is another one; unclean: elect "
                        "a live replica for partitions that have no leader (records may be lost)")
    p.add_argument("--topic", help="the topic of the partition to elect (with --partition)")
    p.add_argument("--partition", type=int, help="the partition to elect (required with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of the cluster")
    p.add_argument("--path-to-json-file", type=Path, help=f"the partitions to elect, e.g. {JSON_EXAMPLE}")
    p.set_defaults(func=run)


def _election_type(text: str) -> str:
    name = text.strip().upper()
    if name not in ELECTION_TYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not an election type: preferred or unclean")
    return name


def parse_election_json(text: str, source: str) -> list[tuple[str, int]]:
    """The partitions of kafka-leader-election.sh's JSON file; errors say what is wrong and where."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or "partitions" not in doc:
        raise UsageError(f'{source}: Replica election data is missing "partitions" field')
    if not isinstance(doc["partitions"], list):
        raise UsageError(f'{source}: "partitions" must be a list, e.g. {JSON_EXAMPLE}')
    out: list[tuple[str, int]] = []
    for i, entry in enumerate(doc["partitions"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str) \
                or type(entry.get("partition")) is not int:
            raise UsageError(f'{source}: partitions[{i}] needs "topic" (string) and "partition" (integer), '
                             f"got {entry!r}")
        out.append((entry["topic"], entry["partition"]))
    duplicates = sorted({tp for tp in out if out.count(tp) > 1})
    if duplicates:
        raise UsageError(f"{source}: Replica election data contains duplicate partitions: "
                         + ", ".join(f"{t}-{p}" for t, p in duplicates))
    if not out:
        raise UsageError(f"{source}: Replica election data is empty")
    return out


def _partitions(args: Any) -> list[tuple[str, int]] | None:
    """The partitions asked for; None = all (--all-topic-partitions)."""
    chosen = [name for name, given in (("--topic", args.topic is not None),
                                       ("--all-topic-partitions", args.all_topic_partitions),
                                       ("--path-to-json-file", args.path_to_json_file is not None)) if given]
    if len(chosen) != 1:
        raise UsageError("One and only one of the following options is required: --topic, --all-topic-partitions, "
                         f"--path-to-json-file{' (given: ' + ', '.join(chosen) + ')' if chosen else ''}")
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition is only allowed with --topic")
    if args.topic is not None:
        if args.partition is None:
            raise UsageError("Missing required option --partition: it is required with --topic")
        return [(args.topic, args.partition)]
    if args.path_to_json_file is not None:
        path = args.path_to_json_file
        try:
            text = path.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        return parse_election_json(text, str(path))
    return None


def run(args: Any) -> int:
    try:
        partitions = _partitions(args)
    except UsageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    return with_client(args, "kafkalite-leader-election",
                       lambda client: _run(client, args.election_type, partitions))


def elect_leaders(client: KafkaClient, election_type: int, partitions: list[tuple[str, int]] | None,
                  timeout_ms: int = TIMEOUT_MS) -> dict[tuple[str, int], tuple[int, str | None]]:
    """ElectLeaders sent to the controller (as Kafka's admin client does); NOT_CONTROLLER or an unreachable
    controller: find it again through Metadata and retry, until `timeout_ms`."""
    topics: dict[str, list[int]] = {}
    for t, p in partitions or []:
        topics.setdefault(t, []).append(p)
    body = {"election_type": election_type, "timeout_ms": timeout_ms,
            "topic_partitions": None if partitions is None else [{"topic": t, "partitions": ps}
                                                                  for t, ps in topics.items()]}

    def moved(answer: dict[str, Any]) -> bool:
        codes = [e["error_code"] for r in answer["replica_election_results"] for e in r["partition_result"]]
        top = answer.get("error_code", ErrorCode.NONE)
        if top not in (ErrorCode.NONE, ErrorCode.NOT_CONTROLLER):
            raise KafkaClientError(top, f"the controller refused the election: {ErrorCode(top).name}")
        return top == ErrorCode.NOT_CONTROLLER or (bool(codes) and all(c == ErrorCode.NOT_CONTROLLER for c in codes))

    answer = controller_request(client, ApiKey.ELECT_LEADERS, body, timeout_ms, moved)
    return {(r["topic"], e["partition_id"]): (e["error_code"], e["error_message"])
            for r in answer["replica_election_results"] for e in r["partition_result"]}


def _exception(code: int, message: str | None) -> str:
    """The error as Kafka's tool shows it: its Java exception's toString()."""
    name = ErrorCode(code).name
    words = "".join(w.capitalize() for w in name.split("_"))
    cls = words if name.endswith("_EXCEPTION") else f"{words}Exception"
    return f"org.apache.kafka.common.errors.{cls}" + (f": {message}" if message else "")


def _run(client: KafkaClient, election_type: str, partitions: list[tuple[str, int]] | None) -> int:
    results = elect_leaders(client, ELECTION_TYPES[election_type], partitions)
    succeeded = sorted(tp for tp, (code, _m) in results.items() if code == ErrorCode.NONE)
    noop = sorted(tp for tp, (code, _m) in results.items() if code == ErrorCode.ELECTION_NOT_NEEDED)
    failed = sorted((tp, r) for tp, r in results.items() if r[0] not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED))
    if succeeded:
        print(f"Successfully completed leader election ({election_type}) for partitions "
              + ", ".join(f"{t}-{p}" for t, p in succeeded))
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(f"{t}-{p}" for t, p in noop))
    for (t, p), (code, message) in failed:
        print(f"Error completing leader election ({election_type}) for partition: {t}-{p}: "
              f"{_exception(code, message)}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
