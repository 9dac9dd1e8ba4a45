"""What every admin sub-command shares: how it is told where the broker is, and how it reports failure."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.config.properties import read_properties
from kafkalite.errors import InvalidConfigError
from kafkalite.protocol import ErrorCode
from kafkalite.security.transport import PLAINTEXT_CLIENT, ClientSecurity

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_HELP = f"host:port of a broker to connect to (comma-separated list; default {DEFAULT_BOOTSTRAP})"
COMMAND_CONFIG_HELP = ("a client properties file (Kafka's names: security.protocol, ssl.truststore.location, "
                       "ssl.keystore.location, ...) for connecting to the broker")


def add_bootstrap(p: Any) -> None:
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help=BOOTSTRAP_HELP)
    add_command_config(p)


def add_command_config(p: Any, flag: str = "--command-config") -> None:
    """Kafka tools' option naming a client properties file; the console tools call it --producer.config /
    --consumer.config, as Kafka's do."""
    p.add_argument(flag, dest="command_config", metavar="FILE", help=COMMAND_CONFIG_HELP)


def client_security(args: Any) -> ClientSecurity:
    """How the tool connects: from --command-config (raises InvalidConfigError naming the file and key)."""
    path = getattr(args, "command_config", None)
    if not path:
        return PLAINTEXT_CLIENT
    return ClientSecurity.from_client_props(read_properties(path), where=path)


def unreachable(args: Any, exc: OSError, option: str = "--command-config") -> str:
    """The message for a broker that could not be spoken to. A TLS or SASL listener closes a plaintext client's
    connection without a word, so when the tool connected in plaintext, say which option is missing (Kafka's
    tools only time out there)."""
    message = f"cannot reach the broker at {args.bootstrap_server}: {exc}"
    if client_security(args).protocol == "PLAINTEXT" and "closed the connection" in str(exc):
        message += (f" (a TLS or SASL listener closes plaintext connections: give {option} FILE with its "
                    "security.protocol, ssl.* and sasl.* settings)")
    return message


CONTROLLER_RETRY_BACKOFF_S = 0.2


def controller_request(client: KafkaClient, api: int, body: dict[str, Any], timeout_ms: int,
                       moved: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """`body` sent to the controller found through Metadata, as Kafka's admin client sends controller requests;
    when the answer says it is not the controller (`moved`) or the controller cannot be reached, the controller
    is looked up again and asked again until `timeout_ms`."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        controller = client.metadata([])["controller_id"]
        try:
            answer: dict[str, Any] = client.broker(controller).request(api, body)
        except (OSError, KeyError) as exc:
            why = f"cannot reach the controller (broker {controller}): {exc}"
        else:
            if not moved(answer):
                return answer
            why = "the controller moved"
        if time.monotonic() >= deadline:
            raise KafkaClientError(ErrorCode.REQUEST_TIMED_OUT, f"Timeout waiting for the controller ({why})")
        client.drop(controller)
        time.sleep(CONTROLLER_RETRY_BACKOFF_S)


class UsageError(ValueError):
    """Options that do not fit together; reported like argparse would, exit code 2."""


def with_client(args: Any, client_id: str, body: Callable[[KafkaClient], int]) -> int:
    """Run `body` with a connected client; broker errors and unreachable brokers become messages, exit 1."""
    try:
        with KafkaClient(args.bootstrap_server, client_id=client_id, security=client_security(args)) as client:
            return body(client)
    except InvalidConfigError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except KafkaClientError as exc:
        print(f"Error: {exc}")
        return 1
    except OSError as exc:
        print(f"Error: {unreachable(args, exc)}")
        return 1


def parse_partitions(text: str, what: str) -> list[int]:
    """`0,1,3-5` to [0, 1, 3, 4, 5]."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        try:
            out += list(range(int(lo), int(hi) + 1)) if sep else [int(item)]
        except ValueError:
            raise UsageError(f"{what}: {item!r} is not a partition number or range") from None
    return out
