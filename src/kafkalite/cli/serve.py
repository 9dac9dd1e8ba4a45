"""`kafkalite serve`: run a broker on a data directory until SIGTERM or SIGINT, then shut down cleanly."""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import signal
from typing import Any

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.server import Broker
from kafkalite.broker.stall_watchdog import LoopStallWatchdog, thread_stacks
from kafkalite.errors import KafkaliteError

log = logging.getLogger("kafkalite.broker")

EPILOG = """\
examples:
  kafkalite serve
      listen on 127.0.0.1:9092, data in ./kafkalite-data
  kafkalite serve --override listeners=PLAINTEXT://0.0.0.0:9092 --override log.dirs=/var/lib/kafkalite
      listen on every interface, data in /var/lib/kafkalite
  kafkalite serve --override listeners=PLAINTEXT://127.0.0.1:9092 \\
      --override advertised.listeners=PLAINTEXT://broker.example.com:9092
      tell clients another address than the one bound
  kafkalite serve --config config/server.properties --override log.retention.hours=24
      Kafka's server.properties, with one setting changed
  kafkalite serve --override listeners=SSL://127.0.0.1:9093 --override ssl.keystore.type=PEM \
      --override ssl.keystore.location=broker-keystore.pem
      a TLS listener (SASL_PLAINTEXT and SASL_SSL take Kafka's sasl.* settings: docs/security.md)
  kafkalite serve --override broker.id=1 --override zookeeper.connect=127.0.0.1:2181/kafkalite \
      --override listeners=PLAINTEXT://127.0.0.1:9093 --override log.dirs=/data/b1
      one broker of a cluster whose metadata is in ZooKeeper (docs/cluster.md)

Settings use Kafka's names (node.id, listeners, log.dirs, log.segment.bytes, log.retention.hours,
num.partitions, ...). An unknown or misspelt name is reported with the nearest known one; a value out of
range stops the broker with the rule it breaks. Listeners may be PLAINTEXT, SSL, SASL_PLAINTEXT and
SASL_SSL, several at once; authorizer.class.name turns on ACLs. The broker runs until SIGTERM or Ctrl-C,
then flushes and marks its data dirs clean; SIGQUIT (kill -3) writes what each of its tasks is waiting on,
and every thread's stack, to the log, as a JVM's thread dump does. If the event loop stops for 10 s, the
broker logs every thread's stack by itself.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run a Kafka-compatible broker",
                       description="Serve a data directory over Kafka's wire protocol. Settings use Kafka's "
                                   "server.properties names; the defaults listen on 127.0.0.1:9092 with data "
                                   "in ./kafkalite-data.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="a Kafka server.properties file (Java .properties syntax)")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="set one property, e.g. --override log.dirs=/data/k1 (repeatable; wins over --config)")
    p.set_defaults(func=run)


def parse_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"--override expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def dump_tasks() -> None:
    """SIGQUIT (kill -3), as a JVM's thread dump: what every asyncio task of the broker is waiting on, and every
    thread's stack, in its log, without stopping it. The first thing to ask a broker that seems stuck; one whose
    event loop is stuck cannot answer (this runs on the loop), and the stall watchdog logs the threads for it."""
    tasks = asyncio.all_tasks()
    out = io.StringIO()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f"--- task {task.get_name()}\n")
        task.print_stack(limit=12, file=out)
    log.warning("SIGQUIT: %d asyncio tasks\n%s\nthreads:\n%s", len(tasks), out.getvalue(), thread_stacks())


async def serve(config: BrokerConfig) -> None:
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, broker.request_stop)
    loop.add_signal_handler(signal.SIGQUIT, dump_tasks)
    watchdog = LoopStallWatchdog(loop)
    watchdog.start()
    try:
        await broker.start()
        await broker.serve_until_stopped()
    finally:
        await broker.stop()  # announces a shutdown only if the broker had started
        watchdog.stop()
        # Closing the loop would give SIGQUIT its default action back (terminate, rc -3) for the rest of the exit,
        # which with 10,000 partitions takes a while: a dump asked for then finds nothing to dump, and must not
        # turn a clean stop into a failed one.
        loop.remove_signal_handler(signal.SIGQUIT)
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def run(args: Any) -> int:
    if not getattr(args, "verbose", 0):
        logging.getLogger("kafkalite").setLevel(logging.INFO)  # a server says what it does by default
    try:
        config = BrokerConfig.load(args.config, parse_overrides(args.override))
        for warning in config.warnings():
            log.warning("%s", warning)
        asyncio.run(serve(config))
    except (KafkaliteError, argparse.ArgumentTypeError) as exc:
        print(f"kafkalite serve: {exc}")
        return 1
    except OSError as exc:
        print(f"kafkalite serve: {exc}")
        return 1
    return 0
