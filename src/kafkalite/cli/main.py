"""The `kafkalite` command: one entry point, one sub-command per task a Kafka operator knows."""

from __future__ import annotations

import argparse
import logging
import sys

from kafkalite import __version__
from kafkalite.cli import (
    acls,
    broker_api_versions,
    cluster,
    configs,
    console,
    delete_records,
    demo,
    dump_log,
    get_offsets,
    groups,
    leader_election,
    log_dirs,
    perf_test,
    reassign_partitions,
    serve,
    topics,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkalite", description="Kafka's storage engine and broker, in Python.")
    parser.add_argument("--version", action="version", version=f"kafkalite {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="-v logs what happens, -vv debug details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve.add_parser(sub)
    cluster.add_parser(sub)
    topics.add_parser(sub)
    groups.add_parser(sub)
    console.add_parsers(sub)
    perf_test.add_parsers(sub)
    configs.add_parser(sub)
    acls.add_parser(sub)
    get_offsets.add_parser(sub)
    delete_records.add_parser(sub)
    log_dirs.add_parser(sub)
    broker_api_versions.add_parser(sub)
    leader_election.add_parser(sub)
    reassign_partitions.add_parser(sub)
    dump_log.add_parser(sub)
    demo.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
