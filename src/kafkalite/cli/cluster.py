"""`kafkalite cluster`: a local ZooKeeper and N brokers in one command, for development (not a Kafka tool).

Each broker is a `kafkalite serve` process with its own id, port and data directory under --dir, all sharing
one ZooKeeper chroot; their output goes to --dir/broker-<id>.log. Ctrl-C (or SIGTERM) stops the brokers
cleanly, then ZooKeeper. A broker that exits during start-up stops the others, and the command fails naming it.
Once all are up, a broker that exits (say, one killed to watch a failover) is reported and the others keep
running; SIGHUP (`kill -HUP <pid of this command>`) starts every exited broker again with its own command line,
and the command ends, failing, only when no broker is left.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kafkalite.cluster.zookeeper_server import DEBIAN_JAR, ZooKeeperServer
from kafkalite.config.listeners import SECURITY_PROTOCOLS
from kafkalite.errors import KafkaliteError

EPILOG = """\
examples:
  kafkalite cluster --brokers 3
      ZooKeeper on 127.0.0.1:2181, brokers 1-3 on 127.0.0.1:9092-9094, data in ./kafkalite-cluster
  kafkalite cluster --brokers 3 --port 19092 --zookeeper-port 12181 --dir /tmp/kl --override num.partitions=6
  kafkalite cluster --brokers 2 --override 'log.dirs=/mnt/disk{id}/kafkalite' --override broker.rack=node1
      one broker process per core of a node, each on its own disk ({id} is the broker's id): docs/scaling.md
  kafkalite cluster --brokers 3 --security-protocol SASL_SSL --override ssl.keystore.location=broker.p12 ...
      every broker's one listener is SASL_SSL (brokers talk to each other on it too); its ssl.* and sasl.*
      settings, the same for every broker, come with --override (see docs/security-*.md)

ZooKeeper comes from Debian's `zookeeper` package (apt-get install zookeeper); --zookeeper-jar names another.
How the brokers replicate and fail over: docs/cluster.md, docs/replication.md.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cluster", help="run a local ZooKeeper and N brokers for development",
                       description="Start ZooKeeper and N kafkalite brokers on 127.0.0.1 and run them until "
                                   "Ctrl-C.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--dir", default="kafkalite-cluster", help="data directory of ZooKeeper and every broker")
    p.add_argument("--port", type=int, default=9092, help="first broker's port; broker i listens on port+i-1")
    p.add_argument("--zookeeper-port", type=int, default=2181)
    p.add_argument("--zookeeper-jar", default=str(DEBIAN_JAR), help=f"ZooKeeper's jar (default {DEBIAN_JAR})")
    p.add_argument("--override", metavar="KEY=VALUE", action="append", default=[],
                   help="a broker setting for every broker (repeatable); {id} in VALUE becomes the broker's id")
    p.add_argument("--security-protocol", default="PLAINTEXT", choices=SECURITY_PROTOCOLS,
                   help="protocol of each broker's listener (default PLAINTEXT); other brokers connect to it too "
                        "(inter.broker.listener.name) unless an --override names the inter-broker listener")
    p.set_defaults(func=run)


INTER_BROKER_KEYS = ("inter.broker.listener.name", "security.inter.broker.protocol")
# this command's own per-broker settings: an --override of them would be the same for every broker (the first
# three always; the others unless their value has {id})
OWN_KEYS = ("listeners", "broker.id", "node.id", "zookeeper.connect")
PER_BROKER_KEYS = ("advertised.listeners", "log.dirs", "log.dir")


def refused_overrides(overrides: list[str], brokers: int = 3) -> list[str]:
    """The keys of --override settings that cannot be the same for every one of `brokers` brokers."""
    refused = set()
    for o in overrides:
        key, _, value = o.partition("=")
        key = key.strip()
        if key in OWN_KEYS or (brokers > 1 and key in PER_BROKER_KEYS and "{id}" not in value):
            refused.add(key)
    return sorted(refused)


def broker_command(broker_id: int, port: int, zookeeper_connect: str, root: Path, overrides: list[str],
                   protocol: str = "PLAINTEXT") -> list[str]:
    """The `kafkalite serve` command line of broker `broker_id`: its id, its listener (`protocol` on `port`),
    ZooKeeper and data directory under `root`, then the user's --override settings in order (a later setting
    wins, so they can replace log.dirs), with `{id}` in their values replaced by the broker's id: settings that
    must differ per broker, such as log.dirs on a disk of each broker's own, then fit in one --override. With a
    TLS or SASL listener the brokers talk to each other on it, unless an override names the inter-broker
    listener."""
    cmd = [sys.executable, "-m", "kafkalite.cli.main", "serve",
           "--override", f"broker.id={broker_id}", "--override", f"zookeeper.connect={zookeeper_connect}",
           "--override", f"listeners={protocol}://127.0.0.1:{port}",
           "--override", f"log.dirs={root / f'broker-{broker_id}'}"]
    if protocol != "PLAINTEXT" and not any(o.partition("=")[0].strip() in INTER_BROKER_KEYS for o in overrides):
        cmd += ["--override", f"inter.broker.listener.name={protocol}"]
    for o in overrides:
        cmd += ["--override", o.replace("{id}", str(broker_id))]
    return cmd


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class _Stop(Exception):
    pass


# over the complexity limit: still to split (issue 34)
def run(args: Any) -> int:  # noqa: C901
    if args.brokers < 1:
        print("Error: --brokers must be at least 1")
        return 2
    per_broker = refused_overrides(args.override, args.brokers)
    if per_broker:
        print(f"Error: --override {', '.join(per_broker)} would be the same for every broker; this command gives "
              "each broker its own listener on --port + id - 1 (its protocol: --security-protocol), id and "
              "data directory ({id} in a log.dirs or advertised.listeners value becomes the broker's id)")
        return 2
    root = Path(args.dir).resolve()
    busy = [p for p in range(args.port, args.port + args.brokers) if _listening(p)]
    if busy:
        print(f"Error: port(s) {busy} are in use (--port {args.port} gives brokers ports {args.port}.."
              f"{args.port + args.brokers - 1})")
        return 1
    zk = ZooKeeperServer(root / "zookeeper", args.zookeeper_port, jar=Path(args.zookeeper_jar))

    def stop(_sig: int, _frame: Any) -> None:
        raise _Stop
    restart = [False]

    def hangup(_sig: int, _frame: Any) -> None:
        restart[0] = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, hangup)
    procs: dict[int, subprocess.Popen] = {}
    commands: dict[int, list[str]] = {}

    def launch(i: int) -> None:
        with open(root / f"broker-{i}.log", "ab") as log:
            procs[i] = subprocess.Popen(commands[i], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        try:
            zk.start()
        except KafkaliteError as exc:
            print(f"Error: {exc}")
            return 1
        connect = f"{zk.address}/kafkalite"
        for i in range(1, args.brokers + 1):
            commands[i] = broker_command(i, args.port + i - 1, connect, root, args.override, args.security_protocol)
            launch(i)
        deadline = time.monotonic() + 60
        pending = set(procs)
        while pending:
            for i in list(pending):
                if procs[i].poll() is not None:
                    print(f"Error: broker {i} exited with {procs[i].returncode}; see {root / f'broker-{i}.log'}")
                    return 1
                if _listening(args.port + i - 1):
                    pending.discard(i)
            if time.monotonic() > deadline:
                print(f"Error: brokers {sorted(pending)} did not start within 60 s; see their logs in {root}")
                return 1
            time.sleep(0.1)
        print(f"ZooKeeper   {zk.address} (zookeeper.connect={connect})")
        for i in procs:
            print(f"broker {i:<4} 127.0.0.1:{args.port + i - 1}  (log {root / f'broker-{i}.log'})")
        if args.security_protocol != "PLAINTEXT":
            print(f"security.protocol={args.security_protocol}")
        print("bootstrap.servers=" + ",".join(f"127.0.0.1:{args.port + i - 1}" for i in procs), flush=True)
        print(f"Ctrl-C stops them all; kill -HUP {os.getpid()} restarts any that exited.", flush=True)
        reported: set[int] = set()
        while True:
            if restart[0]:
                restart[0] = False
                for i in sorted(reported):
                    print(f"restarting broker {i} on 127.0.0.1:{args.port + i - 1}", flush=True)
                    launch(i)
                reported.clear()
            for i, p in procs.items():
                if p.poll() is not None and i not in reported:
                    reported.add(i)
                    print(f"broker {i} exited with {p.returncode} (see {root / f'broker-{i}.log'}); the others keep "
                          f"running; kill -HUP {os.getpid()} starts it again", flush=True)
            if len(reported) == len(procs):
                print("Error: every broker has exited")
                return 1
            time.sleep(0.2)
    except (KeyboardInterrupt, _Stop):
        print("Stopping the brokers and ZooKeeper ...", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for i, p in procs.items():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                print(f"broker {i} did not stop within 30 s; killed")
                p.kill()
                p.wait()
        zk.stop()
