"""`kafkalite delete-records`: move partitions' log start forward, like kafka-delete-records.sh, from its
JSON file: {"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1} (offset -1: the
high watermark)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kafkalite.cli.common import UsageError, add_bootstrap, with_client
from kafkalite.client import KafkaClient
from kafkalite.protocol import ErrorCode


def add_parser(sub: Any) -> None:
    p = sub.add_parser("delete-records", help="delete records before offsets (like kafka-delete-records.sh)")
    add_bootstrap(p)
    p.add_argument("--offset-json-file", required=True, type=Path,
                   help='{"partitions": [{"topic": "t", "partition": 0, "offset": 10}], "version": 1}')
    p.set_defaults(func=run)


def parse_offset_json(text: str, source: str) -> dict[tuple[str, int], int]:
    """The partitions and offsets of kafka-delete-records.sh's JSON; errors name what is wrong and where."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise UsageError(f'{source}: expected an object with a "partitions" list')
    if doc.get("version", 1) != 1:
        raise UsageError(f"{source}: unknown version {doc.get('version')!r} (only 1)")
    out: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(doc["partitions"]):
        if (not isinstance(entry, dict) or not isinstance(entry.get("topic"), str)
                or type(entry.get("partition")) is not int or type(entry.get("offset")) is not int):
            raise UsageError(f'{source}: partitions[{i}] needs "topic" (string), "partition" and "offset" '
                             f"(integers), got {entry!r}")
        tp = (entry["topic"], entry["partition"])
        if tp in out:
            raise UsageError(f"{source}: offset json file contains duplicate topic partitions: {tp[0]}-{tp[1]}")
        out[tp] = entry["offset"]
    if not out:
        raise UsageError(f"{source}: no partitions given")
    return out


def run(args: Any) -> int:
    try:
        offsets = parse_offset_json(args.offset_json_file.read_text(), str(args.offset_json_file))
    except (OSError, UsageError) as exc:
        print(f"Error: {exc}")
        return 2
    return with_client(args, "kafkalite-delete-records", lambda client: _run(client, offsets))


def _run(client: KafkaClient, offsets: dict[tuple[str, int], int]) -> int:
    print("Executing records delete operation")
    results = client.delete_records(offsets)
    print("Records delete operation completed:")
    failed = False
    for (topic, p), res in sorted(results.items()):
        if res["error_code"]:
            failed = True
            print(f"partition: {topic}-{p}\terror: {ErrorCode(res['error_code']).name}")
        else:
            print(f"partition: {topic}-{p}\tlow_watermark: {res['low_watermark']}")
    return 1 if failed else 0
