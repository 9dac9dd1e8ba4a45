"""`kafkalite produce` / `kafkalite consume`: line-oriented console clients, like kafka-console-producer/consumer.

The producer reads lines (optionally `headers<TAB>key<TAB>value`, per Kafka's parse.key / parse.headers
properties) and places keyed records where Java's default partitioner does, keyless ones a batch at a time
per partition. The consumer reads every partition of a topic (or one), standalone or as a member of a
consumer group that commits what it printed. Both use kafkalite's own small client.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from kafkalite.cli.common import add_command_config, client_security, unreachable
from kafkalite.cli.console_props import (
    CONSUMER_PROPERTIES,
    PRODUCER_CLIENT_PROPERTIES,
    PRODUCER_PROPERTIES,
    PropertyError,
    flag,
    parse_properties,
)
from kafkalite.cli.group_member import GroupMember
from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.errors import InvalidConfigError
from kafkalite.partitioner import partition_for_key
from kafkalite.records import CompressionType, SimpleRecord, build_batch
from kafkalite.records.batch import iter_batches

CODECS = {"none": CompressionType.NONE, "gzip": CompressionType.GZIP, "snappy": CompressionType.SNAPPY,
          "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}
BOOTSTRAP_HELP = "host:port of a broker to connect to (comma-separated list; default 127.0.0.1:9092)"


class InputError(ValueError):
    """A line the producer cannot split as its properties say."""


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("produce", help="send lines of stdin as records (like kafka-console-producer.sh)",
                       description="Send each line of stdin as a record. Keyed records go to the partition "
                                   "Java's default partitioner picks (murmur2 of the key); keyless ones fill one "
                                   "partition per batch, moving round the partitions.")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092", help=BOOTSTRAP_HELP)
    p.add_argument("--topic", required=True, help="topic to write to (auto-created if the broker allows)")
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--key-separator", help="shortcut for --property parse.key=true --property key.separator=SEP")
    p.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                   help="line reader setting: " + ", ".join(sorted(PRODUCER_PROPERTIES)))
    p.add_argument("--producer-property", action="append", default=[], metavar="NAME=VALUE",
                   help="producer setting: " + ", ".join(sorted(PRODUCER_CLIENT_PROPERTIES)))
    add_command_config(p, "--producer.config")
    p.add_argument("--compression-codec", choices=sorted(CODECS), default="none")
    p.add_argument("--acks", choices=("-1", "0", "1", "all"), default="-1")
    p.add_argument("--batch-size", type=int, default=500, help="records per request")
    p.set_defaults(func=run_produce)

    c = sub.add_parser("consume", help="print records of a topic (like kafka-console-consumer.sh)",
                       description="Print the records of every partition of a topic (or of --partition), "
                                   "or of the partitions a consumer group (--group) assigns to this member.")
    c.add_argument("--bootstrap-server", default="127.0.0.1:9092", help=BOOTSTRAP_HELP)
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, help="read only this partition")
    c.add_argument("--offset", help="where to start in --partition: earliest, latest or an offset (default latest)")
    c.add_argument("--from-beginning", action="store_true",
                   help="start at the log start when there is no committed offset (default: the end)")
    add_command_config(c, "--consumer.config")
    c.add_argument("--group", help="consumer group to join; commits what was printed")
    c.add_argument("--max-messages", type=int, help="stop after this many records")
    c.add_argument("--timeout-ms", type=int, default=2000, help="stop after this long without new records")
    c.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                   help="formatter setting: " + ", ".join(sorted(CONSUMER_PROPERTIES)))
    c.set_defaults(func=run_consume)


def _fail(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return 1


# --- produce -------------------------------------------------------------------------------------


class LineReader:
    """Kafka's LineMessageReader: [headers<delimiter>][key<separator>]value per line."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = flag(props, "parse.key")
        self.parse_headers = flag(props, "parse.headers")
        self.ignore_error = flag(props, "ignore.error")
        self.key_sep = props["key.separator"].encode()
        self.headers_delim = props["headers.delimiter"].encode()
        self.headers_sep = props["headers.separator"].encode()
        self.header_key_sep = props["headers.key.separator"].encode()
        self.null_marker = props["null.marker"].encode() or None
        if self.parse_key and not self.key_sep:
            raise PropertyError("key.separator must not be empty")
        if self.parse_headers and not (self.headers_delim and self.headers_sep and self.header_key_sep):
            raise PropertyError("headers.delimiter, headers.separator and headers.key.separator must not be empty")

    def _null(self, b: bytes) -> bytes | None:
        return None if self.null_marker is not None and b == self.null_marker else b

    def parse(self, line: bytes, number: int) -> SimpleRecord:
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            h, sep, after = rest.partition(self.headers_delim)
            if sep:
                rest = after
                for item in h.split(self.headers_sep) if h else []:
                    k, ksep, v = item.partition(self.header_key_sep)
                    headers.append((k.decode(), self._null(v) if ksep else None))
            elif not self.ignore_error:
                raise InputError(f"no headers delimiter found on line number {number}: {line!r}")
        key = None
        if self.parse_key:
            k, sep, v = rest.partition(self.key_sep)
            if sep:
                key, rest = self._null(k), v
            elif not self.ignore_error:
                raise InputError(f"no key separator found on line number {number}: {line!r}")
        return SimpleRecord(key, self._null(rest), int(time.time() * 1000), headers)


def run_produce(args: Any) -> int:
    try:
        props = {**PRODUCER_PROPERTIES, **parse_properties(args.property, PRODUCER_PROPERTIES, "--property")}
        client_props = parse_properties(args.producer_property, PRODUCER_CLIENT_PROPERTIES, "--producer-property")
        if args.key_separator is not None:
            props.update({"parse.key": "true", "key.separator": args.key_separator})
        reader = LineReader(props)
        acks = int({"all": "-1"}.get(client_props.get("acks", args.acks), client_props.get("acks", args.acks)))
        if acks not in (-1, 0, 1):
            raise PropertyError(f"acks must be all, -1, 0 or 1, not {acks}")
        codec_name = client_props.get("compression.type", args.compression_codec)
        if codec_name not in CODECS:
            raise PropertyError(f"compression.type must be one of {', '.join(sorted(CODECS))}, not {codec_name!r}")
        batch_size = int(client_props.get("batch.size", args.batch_size))
    except (PropertyError, ValueError) as exc:
        return _fail(str(exc))
    try:
        security = client_security(args)
        with KafkaClient(args.bootstrap_server, client_id=client_props.get("client.id", "console-producer"),
                         security=security) as client:
            return _produce(client, args, reader, acks, CODECS[codec_name], max(1, batch_size))
    except (KafkaClientError, InvalidConfigError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(unreachable(args, exc, "--producer.config"))


def _produce(client: KafkaClient, args: Any, reader: LineReader, acks: int, codec: CompressionType,
             batch_size: int) -> int:
    partitions = client.partition_count(args.topic, auto_create=True)
    if args.partition is not None and not 0 <= args.partition < partitions:
        return _fail(f"partition {args.partition} does not exist: {args.topic} has {partitions} partitions")
    pending: dict[int, list[SimpleRecord]] = {}
    counts: dict[int, int] = {}
    sticky = 0  # the partition keyless records fill until the next send
    interactive = sys.stdin.isatty()

    def flush() -> None:
        nonlocal sticky
        if not pending:
            return
        batches = {(args.topic, p): bytes(build_batch(rs, compression=codec)) for p, rs in pending.items()}
        answers = client.produce_many(batches, acks)
        for (_, p), res in answers.items():
            if res["error_code"]:
                raise KafkaClientError(res["error_code"], res.get("error_message") or f"{args.topic}-{p}")
        for p, rs in pending.items():
            counts[p] = counts.get(p, 0) + len(rs)
        pending.clear()
        sticky = (sticky + 1) % partitions

    error = None
    queued = 0
    for number, raw in enumerate(sys.stdin.buffer, 1):
        try:
            record = reader.parse(raw.rstrip(b"\r\n"), number)
        except InputError as exc:
            error = str(exc)
            break
        if args.partition is not None:
            p = args.partition
        elif record.key is not None:
            p = partition_for_key(record.key, partitions)
        else:
            p = sticky
        pending.setdefault(p, []).append(record)
        queued += 1
        if queued >= batch_size or interactive:
            flush()
            queued = 0
    flush()
    where = ", ".join(f"{args.topic}-{p}: {n}" for p, n in sorted(counts.items()))
    print(f"Produced {sum(counts.values())} records ({where or 'none'})", file=sys.stderr)
    return _fail(error) if error else 0


# --- consume -------------------------------------------------------------------------------------


class Formatter:
    """Kafka's DefaultMessageFormatter: [timestamp][partition][offset][headers][key][value] per record."""

    def __init__(self, props: dict[str, str]) -> None:
        self.fields = [name for name in ("print.timestamp", "print.partition", "print.offset", "print.headers",
                                         "print.key", "print.value") if flag(props, name)]
        self.sep = props["key.separator"].encode()
        self.line = props["line.separator"].encode()
        self.headers_sep = props["headers.separator"].encode()
        self.header_key_sep = props["headers.key.separator"].encode()
        self.null = props["null.literal"].encode()

    def format(self, partition: int, r: Any, timestamp_type: str) -> bytes:
        out = []
        for f in self.fields:
            if f == "print.timestamp":
                out.append(f"{timestamp_type}:{r.timestamp}".encode() if r.timestamp >= 0 else b"NO_TIMESTAMP")
            elif f == "print.partition":
                out.append(f"Partition:{partition}".encode())
            elif f == "print.offset":
                out.append(f"Offset:{r.offset}".encode())
            elif f == "print.headers":
                out.append(self.headers_sep.join(k.encode() + self.header_key_sep + (self.null if v is None else v)
                                                 for k, v in r.headers) or b"NO_HEADERS")
            elif f == "print.key":
                out.append(self.null if r.key is None else r.key)
            else:
                out.append(self.null if r.value is None else r.value)
        return self.sep.join(out) + self.line


def _start_offset(client: KafkaClient, topic: str, partition: int, spec: str) -> int:
    if spec in ("earliest", "latest"):
        return client.list_offset(topic, partition, -2 if spec == "earliest" else -1)
    offset = int(spec)
    if offset < 0:
        raise ValueError(f"--offset must be earliest, latest or a non-negative offset, not {spec}")
    return offset


def run_consume(args: Any) -> int:
    try:
        props = {**CONSUMER_PROPERTIES, **parse_properties(args.property, CONSUMER_PROPERTIES, "--property")}
        formatter = Formatter(props)
    except PropertyError as exc:
        return _fail(str(exc))
    if args.offset is not None and args.partition is None:
        return _fail("the partition is required when offset is specified (--offset needs --partition)")
    if args.group and args.partition is not None:
        return _fail("--partition cannot be used with --group: a group member reads the partitions the group "
                     "assigns it")
    if args.offset is not None and args.from_beginning:
        return _fail("--offset and --from-beginning cannot be used together")
    count = 0
    member = None
    try:
        with KafkaClient(args.bootstrap_server, client_id="console-consumer", security=client_security(args)) as client:
            partitions = client.partition_count(args.topic)
            if args.partition is not None and not 0 <= args.partition < partitions:
                return _fail(f"partition {args.partition} does not exist: {args.topic} has {partitions} partitions")
            coordinator = client
            if args.group:
                host, port = client.find_coordinator(args.group)
                if (host, port) != (client.host, client.port):
                    coordinator = KafkaClient(f"{host}:{port}", client_id="console-consumer", security=client.security)
                member = GroupMember(coordinator, args.group, [args.topic], "console-consumer")
            printed: dict[tuple[str, int], int] = {}  # next offset after what was printed, to commit
            try:
                count = _consume(client, member, args, formatter, partitions, printed)
            finally:
                if member is not None:
                    _commit_and_leave(member, printed)
                    member.client.close()
                if coordinator is not client:
                    coordinator.close()
    except (KafkaClientError, InvalidConfigError) as exc:
        return _fail(str(exc))
    except ValueError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(unreachable(args, exc, "--consumer.config"))
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _positions(client: KafkaClient, member: GroupMember | None, args: Any, partitions: int
               ) -> dict[tuple[str, int], int]:
    topic = args.topic
    reset = -2 if args.from_beginning else -1
    if member is not None:
        member.join()
        committed = member.committed()
        owned = [(t, p) for t, ps in member.assignment.items() for p in ps]
        missing = {tp: reset for tp in owned if tp not in committed}
        start = {tp: committed[tp] for tp in owned if tp in committed}
    elif args.partition is not None:
        if args.offset is not None:
            return {(topic, args.partition): _start_offset(client, topic, args.partition, args.offset)}
        missing, start = {(topic, args.partition): reset}, {}
    else:
        missing, start = {(topic, p): reset for p in range(partitions)}, {}
    if missing:
        for tp, res in client.list_offsets(missing).items():
            if res["error_code"]:
                raise KafkaClientError(res["error_code"], f"{tp[0]}-{tp[1]}")
            start[tp] = res["offset"]
    return start


def _commit_and_leave(member: GroupMember, printed: dict[tuple[str, int], int]) -> None:
    """At exit, also after Ctrl-C cut a request short (then over a new connection to the coordinator)."""
    if not member.member_id:
        return
    try:
        if member.client.broken:
            member.client = KafkaClient(member.client.address, client_id=member.client_id,
                                        security=member.client.security)
        member.commit(printed)
    except (OSError, KafkaClientError) as exc:
        print(f"Warning: offsets of what was printed were not committed: {exc}", file=sys.stderr)
    try:
        member.leave()
    except (OSError, KafkaClientError) as exc:
        print(f"Warning: could not leave group {member.group}: {exc}", file=sys.stderr)


# over the complexity limit: still to split (issue 34)
def _consume(client: KafkaClient, member: GroupMember | None, args: Any, formatter: Formatter,  # noqa: C901
             partitions: int, printed: dict[tuple[str, int], int]) -> int:
    out = sys.stdout.buffer
    positions = _positions(client, member, args, partitions)
    count = 0
    idle_since = time.monotonic()
    try:
        while True:
            if member is not None and member.poll():
                member.commit(printed)
                printed.clear()
                positions = _positions(client, member, args, partitions)
            if not positions:
                time.sleep(0.2)  # a member the group gave nothing to, waiting for a rebalance
                fetched: dict = {}
            else:
                fetched = client.fetch_many(positions)
            progressed = False
            for (topic, p), (part, data) in sorted(fetched.items()):
                if part["error_code"]:
                    raise KafkaClientError(part["error_code"], f"{topic}-{p} at offset {positions[(topic, p)]}")
                for batch in iter_batches(data):
                    if batch.last_offset < positions[(topic, p)]:
                        continue
                    if not batch.is_control:  # transaction markers are not records to show
                        ts_type = batch.timestamp_type.display
                        for r in batch.records():
                            if r.offset < positions[(topic, p)]:
                                continue
                            out.write(formatter.format(p, r, ts_type))
                            count += 1
                            printed[(topic, p)] = positions[(topic, p)] = r.offset + 1
                            if args.max_messages is not None and count >= args.max_messages:
                                return count
                    # past the whole batch, also when compaction left its last offsets without records
                    printed[(topic, p)] = positions[(topic, p)] = batch.last_offset + 1
                    progressed = True
            out.flush()
            if member is not None and progressed:
                member.commit(printed)
            if progressed:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > args.timeout_ms / 1000:
                return count
    except KeyboardInterrupt:
        return count  # Ctrl-C ends a console consumer normally: commit, leave, print the total
    finally:
        out.flush()
