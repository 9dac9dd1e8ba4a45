"""`kafkalite broker-api-versions`: the request versions every broker of the cluster answers, printed as
kafka-broker-api-versions.sh prints them (Kafka's NodeApiVersions text), with the version this tool would use.

A broker that cannot be reached gets an `ERROR:` line, as in Kafka's tool, and the rest are still printed."""

from __future__ import annotations

from typing import Any

from kafkalite.cli.common import add_bootstrap, with_client
from kafkalite.client import BrokerConnection, KafkaClient
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey

_OURS: dict[int, tuple[int, int]] = {int(k): v for k, v in SUPPORTED_VERSIONS.items()}  # what this tool speaks


def add_parser(sub: Any) -> None:
    p = sub.add_parser("broker-api-versions",
                       help="print the request versions each broker supports (like kafka-broker-api-versions.sh)")
    add_bootstrap(p)
    p.set_defaults(func=run)


def run(args: Any) -> int:
    return with_client(args, "kafkalite-broker-api-versions", _run)


def _run(client: KafkaClient) -> int:
    brokers = client.metadata([])["brokers"]
    failed = 0
    for b in sorted(brokers, key=lambda b: b["node_id"]):
        node = f"{b['host']}:{b['port']} (id: {b['node_id']} rack: {b.get('rack') or 'null'})"
        try:
            conn: BrokerConnection = client.broker(b["node_id"])
        except OSError as exc:
            print(f"{node} -> ERROR: {exc.strerror or exc}")
            failed += 1
            continue
        print(f"{node} -> {versions_text(conn.broker_versions)}")
    return 1 if failed else 0


def api_name(key: int) -> str:
    """Kafka's name of an API (ApiKeys.name: the message name, `OffsetForLeaderEpoch`), or UNKNOWN."""
    try:
        return "".join(w.capitalize() for w in ApiKey(key).name.split("_"))
    except ValueError:
        return "UNKNOWN"


def versions_text(announced: dict[int, tuple[int, int]]) -> str:
    """Kafka's NodeApiVersions.toString(lineBreaks=true): one line per API key in order, the broker's range, and
    the highest version this client would use ([usable: N]); keys this client knows and the broker does not
    announce are UNSUPPORTED. An API this tool has no codec for gets no usable bracket."""
    lines = {}
    for key, (lo, hi) in announced.items():
        text = f"{api_name(key)}({key}): {lo}" if lo == hi else f"{api_name(key)}({key}): {lo} to {hi}"
        ours = _OURS.get(key)
        if ours is not None:
            if ours[1] < lo:
                text += " [unusable: node too new]"
            elif hi < ours[0]:
                text += " [unusable: node too old]"
            else:
                text += f" [usable: {min(ours[1], hi)}]"
        lines[key] = text
    for key in ApiKey:
        lines.setdefault(int(key), f"{api_name(key)}({int(key)}): UNSUPPORTED")
    return "(\n\t" + ",\n\t".join(lines[k] for k in sorted(lines)) + "\n)"
