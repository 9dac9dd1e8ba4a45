"""`kafkalite producer-perf-test` / `consumer-perf-test`: Kafka's kafka-producer-perf-test.sh and
kafka-consumer-perf-test.sh, with their options and their output lines, on kafkalite's own client.

An operator checks a cluster with these before trusting it: the producer sends `--num-records` records of
`--record-size` bytes (or lines of `--payload-file`) as fast as `--throughput` allows, pipelining up to
`max.in.flight.requests.per.connection` requests per leader, and prints a window line every 5 s and the
latency percentiles at the end; the consumer joins a group, reads `--messages` records and prints Kafka's
one-line summary. Both measure the cluster through a Python client, so on one machine the client's CPU is
part of what they report (README, "The CLI").
"""

from __future__ import annotations

import collections
import datetime
import random
import select
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafkalite.cli.common import DEFAULT_BOOTSTRAP, unreachable
from kafkalite.cli.console import CODECS
from kafkalite.cli.console_props import PropertyError, parse_properties
from kafkalite.cli.group_member import GroupMember
from kafkalite.client import PRODUCE_RETRY, BrokerConnection, KafkaClient, KafkaClientError, produce_request
from kafkalite.config.properties import read_properties
from kafkalite.errors import InvalidConfigError
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.records import CompressionType, SimpleRecord, build_batch
from kafkalite.records.batch import RECORD_BATCH_OVERHEAD, compute_crc, iter_batches
from kafkalite.records.varint import size_of_varint
from kafkalite.security.transport import ClientSecurity

MB = 1024 * 1024  # Kafka's perf tools divide by 1024 * 1024 and call it MB
RETRY_BACKOFF_S = 0.1  # retry.backoff.ms's default
WINDOW_MS = 5000  # kafka-producer-perf-test.sh's reporting window
LATENCY_SAMPLES = 500_000  # as Kafka's tool: a sample of at most this many latencies gives the percentiles

# Producer settings the producer perf test acts on, with Kafka's producer defaults; security.protocol, ssl.* and
# sasl.* are read by ClientSecurity. Anything else is refused by name.
PRODUCER_SETTINGS: dict[str, str] = {
    "bootstrap.servers": "",
    "acks": "all",
    "batch.size": "16384",
    "linger.ms": "0",
    "compression.type": "none",
    "client.id": "perf-producer-client",
    "max.in.flight.requests.per.connection": "5",
    "request.timeout.ms": "30000",
    "delivery.timeout.ms": "120000",
    "enable.idempotence": "false",
}
CONSUMER_SETTINGS: dict[str, str] = {"bootstrap.servers": "", "group.id": "", "client.id": "perf-consumer-client"}
# Where a v2 batch keeps what a re-sent template changes: its CRC and its base and max timestamps.
_CRC, _CRC_AT = struct.Struct(">I"), 17
_TIMESTAMPS, _BASE_TIMESTAMP = struct.Struct(">qq"), 27


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("producer-perf-test", help="measure produce throughput and latency (like "
                                                  "kafka-producer-perf-test.sh)",
                       description="Send --num-records records at up to --throughput records/s and print "
                                   "records/s, MB/s and latency every 5 s and percentiles at the end, as "
                                   "kafka-producer-perf-test.sh does.")
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--record-size", type=int, help="bytes per record value (random letters)")
    size.add_argument("--payload-file", help="values are the file's lines (split at --payload-delimiter), "
                                             "picked at random")
    p.add_argument("--payload-delimiter", default="\\n", help="what separates payloads in --payload-file")
    p.add_argument("--throughput", type=float, required=True,
                   help="records per second at most; -1 for no limit")
    p.add_argument("--bootstrap-server", help="host:port of a broker (comma-separated list); or bootstrap.servers "
                                              f"in --producer-props; default {DEFAULT_BOOTSTRAP}")
    p.add_argument("--producer-props", nargs="+", default=[], metavar="NAME=VALUE",
                   help="producer settings: " + ", ".join(sorted(PRODUCER_SETTINGS)) +
                        ", security.protocol, ssl.*, sasl.*")
    p.add_argument("--producer.config", dest="command_config", metavar="FILE", help="producer properties file")
    p.add_argument("--print-metrics", action="store_true", help="print the producer's counters at the end")
    p.set_defaults(func=run_producer_perf_test)

    c = sub.add_parser("consumer-perf-test", help="measure consume throughput (like kafka-consumer-perf-test.sh)",
                       description="Join a group, read --messages records of --topic and print "
                                   "kafka-consumer-perf-test.sh's summary line.")
    c.add_argument("--bootstrap-server", help="host:port of a broker (comma-separated list); or bootstrap.servers "
                                              f"in --consumer.config; default {DEFAULT_BOOTSTRAP}")
    c.add_argument("--topic", required=True)
    c.add_argument("--messages", type=int, required=True, help="records to read")
    c.add_argument("--group", help="consumer group (default perf-consumer-NNNNN)")
    c.add_argument("--from-latest", action="store_true", help="start at the end when the group has no offset")
    c.add_argument("--fetch-size", type=int, default=1048576, help="bytes per partition per fetch")
    c.add_argument("--timeout", type=int, default=10000, help="ms without records before giving up")
    c.add_argument("--reporting-interval", type=int, default=5000, help="ms between --show-detailed-stats lines")
    c.add_argument("--show-detailed-stats", action="store_true", help="a line per reporting interval")
    c.add_argument("--hide-header", action="store_true")
    c.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS",
                   help="Java SimpleDateFormat of the time columns (y, M, d, H, m, s, S)")
    c.add_argument("--consumer.config", dest="command_config", metavar="FILE", help="consumer properties file")
    c.add_argument("--print-metrics", action="store_true", help="print the consumer's counters at the end")
    c.set_defaults(func=run_consumer_perf_test)


def _fail(message: str, code: int = 1) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return code


def _settings(args: Any, items: list[str], known: dict[str, str], option: str
              ) -> tuple[dict[str, str], ClientSecurity, str]:
    """The tool's settings (file first, then the command line), its security and its bootstrap list. Names
    that are neither the tool's nor security's are refused, listing the known ones."""
    raw: dict[str, str] = dict(read_properties(args.command_config)) if args.command_config else {}
    for name, value in (item.partition("=")[::2] for item in items):
        raw[name.strip()] = value
    security_keys = {k for k in raw if k == "security.protocol" or k.startswith(("ssl.", "sasl."))}
    plain = [f"{k}={v}" for k, v in raw.items() if k not in security_keys]
    settings = {**known, **parse_properties(plain, known, option)}
    security = ClientSecurity.from_client_props({k: raw[k] for k in security_keys},
                                                where=args.command_config or option)
    bootstrap = args.bootstrap_server or settings["bootstrap.servers"] or DEFAULT_BOOTSTRAP
    return settings, security, bootstrap


def _int(settings: dict[str, str], name: str, low: int) -> int:
    try:
        value = int(settings[name])
    except ValueError:
        raise PropertyError(f"{name} must be an integer, not {settings[name]!r}") from None
    if value < low:
        raise PropertyError(f"{name} must be at least {low}, not {value}")
    return value


# --- producer ---------------------------------------------------------------------------------------


class Throttler:
    """Kafka's ThroughputThrottler: at most `per_second` sends per second on average since the start
    (negative: no limit; 0 is refused before); a slow start is made up."""

    def __init__(self, per_second: float, start: float) -> None:
        self.per_second = per_second
        self.start = start

    def wait_s(self, sent: int, now: float) -> float:
        """How long to wait before send number `sent` (0 when it may go now)."""
        if self.per_second < 0:
            return 0.0
        return max(0.0, self.start + sent / self.per_second - now)


@dataclass
class Stats:
    """Kafka's producer perf test Stats: totals, a 5 s window and a latency sample."""

    start: float
    sample_every: int
    count: int = 0
    bytes: int = 0
    total_latency_ms: float = 0.0
    max_latency_ms: float = 0.0
    errors: int = 0
    samples: list[float] = field(default_factory=list)
    window_start: float = 0.0
    window_count: int = 0
    window_bytes: int = 0
    window_latency_ms: float = 0.0
    window_max_ms: float = 0.0
    seen: int = 0

    def record(self, latencies_ms: list[float], nbytes: int, now: float) -> None:
        total = sum(latencies_ms)
        top = max(latencies_ms)
        self.count += len(latencies_ms)
        self.bytes += nbytes
        self.total_latency_ms += total
        self.max_latency_ms = max(self.max_latency_ms, top)
        self.window_count += len(latencies_ms)
        self.window_bytes += nbytes
        self.window_latency_ms += total
        self.window_max_ms = max(self.window_max_ms, top)
        for latency in latencies_ms:
            if self.seen % self.sample_every == 0:
                self.samples.append(latency)
            self.seen += 1
        if now - self.window_start >= WINDOW_MS / 1000:
            self.print_window(now)

    def print_window(self, now: float) -> None:
        elapsed = max(now - self.window_start, 1e-9)
        if self.window_count:
            print(f"{self.window_count} records sent, {self.window_count / elapsed:.1f} records/sec "
                  f"({self.window_bytes / elapsed / MB:.2f} MB/sec), "
                  f"{self.window_latency_ms / self.window_count:.1f} ms avg latency, "
                  f"{self.window_max_ms:.1f} ms max latency.", flush=True)
        self.window_start, self.window_count, self.window_bytes = now, 0, 0
        self.window_latency_ms = self.window_max_ms = 0.0

    def print_total(self, now: float) -> None:
        elapsed = max(now - self.start, 1e-9)
        ordered = sorted(self.samples)

        def pct(q: float) -> int:
            return int(ordered[min(int(len(ordered) * q), len(ordered) - 1)]) if ordered else 0
        avg = self.total_latency_ms / self.count if self.count else 0.0
        print(f"{self.count} records sent, {self.count / elapsed:f} records/sec ({self.bytes / elapsed / MB:.2f} "
              f"MB/sec), {avg:.2f} ms avg latency, {self.max_latency_ms:.2f} ms max latency, {pct(0.5)} ms 50th, "
              f"{pct(0.95)} ms 95th, {pct(0.99)} ms 99th, {pct(0.999)} ms 99.9th.", flush=True)


class Payloads:
    """Record values and ready-made batches. With --record-size every value is the same random letters (as
    Kafka's tool), so a batch of n records is built once and only its timestamps and CRC change per send."""

    def __init__(self, args: Any, codec: CompressionType) -> None:
        self.codec = codec
        self.values: list[bytes] = []
        if args.record_size is not None:
            if args.record_size < 0:
                raise PropertyError(f"--record-size must not be negative, not {args.record_size}")
            self.values = [bytes(random.choice(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(args.record_size))]
        else:
            delimiter = args.payload_delimiter.replace("\\n", "\n").replace("\\t", "\t").encode()
            with open(args.payload_file, "rb") as f:
                self.values = [v for v in f.read().split(delimiter) if v]
            if not self.values:
                raise PropertyError(f"{args.payload_file}: no payloads found (split at {args.payload_delimiter!r})")
        self._templates: dict[int, bytearray] = {}

    def value(self) -> bytes:
        return self.values[0] if len(self.values) == 1 else random.choice(self.values)

    def batch(self, values: list[bytes], timestamp_ms: int) -> bytes:
        if len(self.values) > 1:
            return bytes(build_batch([SimpleRecord(None, v, timestamp_ms) for v in values], compression=self.codec))
        template = self._templates.get(len(values))
        if template is None:
            template = self._templates[len(values)] = build_batch(
                [SimpleRecord(None, self.values[0], 0)] * len(values), compression=self.codec)
        out = bytearray(template)
        _TIMESTAMPS.pack_into(out, _BASE_TIMESTAMP, timestamp_ms, timestamp_ms)  # records carry delta 0
        _CRC.pack_into(out, _CRC_AT, compute_crc(out))
        return bytes(out)


def _record_size(value_len: int, offset_delta: int) -> int:
    """The encoded size of a keyless, headerless record (timestamp delta 0) in a v2 batch: its length varint,
    attributes, timestamp delta, offset delta, key length -1, value length, the value, the header count."""
    body = 1 + 1 + size_of_varint(offset_delta) + 1 + size_of_varint(value_len) + value_len + 1
    return size_of_varint(body) + body


class _NoBroker(ConnectionError):
    """No broker of the cluster answers a metadata request: the test cannot go on."""


@dataclass
class InFlight:
    tp: tuple[str, int]
    batch: bytes
    sent_at: list[float]  # when each record was handed to the producer
    nbytes: int
    deadline: float  # delivery.timeout.ms after the batch was made: retries stop there


class Producer:
    """Batches per partition (keyless records stick to one partition per batch, as Kafka's default
    partitioner), each leader's requests pipelined up to `max_in_flight`, answers read as they come."""

    def __init__(self, client: KafkaClient, topic: str, settings: dict[str, str], payloads: Payloads,
                 stats: Stats) -> None:
        self.client, self.topic, self.payloads, self.stats = client, topic, payloads, stats
        acks = settings["acks"].strip().lower()
        if acks not in ("all", "-1", "0", "1"):
            raise PropertyError(f"acks must be all, -1, 0 or 1, not {settings['acks']!r}")
        self.acks = -1 if acks == "all" else int(acks)
        self.batch_bytes = _int(settings, "batch.size", 0)
        self.linger_s = _int(settings, "linger.ms", 0) / 1000
        self.max_in_flight = _int(settings, "max.in.flight.requests.per.connection", 1)
        self.timeout_ms = _int(settings, "request.timeout.ms", 1)
        self.delivery_timeout_s = _int(settings, "delivery.timeout.ms", 1) / 1000
        self.partitions = client.partition_count(topic, auto_create=True)
        self.sticky = random.randrange(self.partitions)
        self.values: list[bytes] = []
        self.sent_at: list[float] = []
        self.size = 0
        self.opened = 0.0
        self.in_flight: dict[int, collections.deque[InFlight]] = {}

    def add(self, now: float) -> None:
        """One record into the open batch. As Kafka's accumulator, a batch never grows past batch.size (measured
        uncompressed, so a compressed one stays under it too) unless it holds one record larger than that."""
        value = self.payloads.value()
        size = _record_size(len(value), len(self.values))
        if self.values and self.size + size > self.batch_bytes:
            self.send_batch()
            size = _record_size(len(value), 0)
        if not self.values:
            self.opened = now
            self.size = RECORD_BATCH_OVERHEAD
        self.values.append(value)
        self.sent_at.append(now)
        self.size += size
        if self.size >= self.batch_bytes:
            self.send_batch()

    def idle(self, until: float) -> None:
        """Nothing to add before `until`: send what lingered long enough and read answers meanwhile."""
        if self.values and time.monotonic() - self.opened >= self.linger_s:
            self.send_batch()
        self.read_answers(max(0.0, until - time.monotonic()))

    def send_batch(self) -> None:
        if not self.values:
            return
        tp = (self.topic, self.sticky)
        batch = self.payloads.batch(self.values, int(time.time() * 1000))
        item = InFlight(tp, batch, self.sent_at, sum(len(v) for v in self.values),
                        time.monotonic() + self.delivery_timeout_s)
        self.values, self.sent_at, self.size = [], [], 0
        self.sticky = (self.sticky + 1) % self.partitions
        self._send(item)

    def _send(self, item: InFlight) -> None:
        """Send one batch to its partition's leader, first reading answers while that connection has
        `max_in_flight` outstanding. A leader that is unknown, cannot be reached or closed the connection
        before the batch was sent is looked up again until request.timeout.ms (nothing was written, so
        trying again is safe), as the producer waits for metadata."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            node, conn, before = -1, None, -1
            try:
                node = self.client.cluster.leader(item.tp)
                conn = self.client.broker(node)  # KeyError: no leader known; OSError: it cannot be reached
                while conn.pending >= self.max_in_flight and not conn.broken:
                    self._answer(node, conn)
                before = conn.pending
                conn.send(ApiKey.PRODUCE, produce_request({item.tp: [item.batch]}, acks=self.acks,
                                                          timeout_ms=self.timeout_ms), expect_response=self.acks != 0)
                break
            except (KeyError, OSError) as exc:
                maybe_sent = conn is not None and before >= 0 and (self.acks == 0 or conn.pending > before)
                if maybe_sent:
                    self._lost(node, f"sending to the leader of {item.tp[0]}-{item.tp[1]} failed: {exc}",
                               [item, *self.in_flight.get(node, ())])
                    return
                if time.monotonic() >= deadline:
                    self.stats.errors += len(item.sent_at)
                    print(f"Error: {len(item.sent_at)} records not sent: no reachable leader for {item.tp[0]}-"
                          f"{item.tp[1]} within request.timeout.ms ({exc or 'no leader'})", file=sys.stderr)
                    return
                if conn is not None:
                    self.client.drop(node)  # it closed before the batch went out: a new connection next time
                time.sleep(RETRY_BACKOFF_S)
                self._refresh()  # raises when no broker answers at all
        if self.acks == 0:
            self.stats.record([0.0] * len(item.sent_at), item.nbytes, time.monotonic())
        else:
            self.in_flight.setdefault(node, collections.deque()).append(item)

    def _answer(self, node: int, conn: BrokerConnection) -> None:
        queue = self.in_flight[node]
        try:
            res = conn.receive()
        except OSError as exc:
            self._lost(node, f"the connection to broker {node} failed: {exc}", list(queue))
            return
        item = queue.popleft()
        part = res["responses"][0]["partition_responses"][0]
        now = time.monotonic()
        code = part["error_code"]
        if code in PRODUCE_RETRY and now < item.deadline:  # the leader is looked up again, the batch sent again
            time.sleep(RETRY_BACKOFF_S)  # retry.backoff.ms: the controller's news takes a moment to spread
            self._refresh()
            self._send(item)
        elif code:
            self.stats.errors += len(item.sent_at)
            print(f"Error: {len(item.sent_at)} records to {item.tp[0]}-{item.tp[1]} failed: "
                  f"{ErrorCode(code).name} {part.get('error_message') or ''}".rstrip(), file=sys.stderr)
        else:
            self.stats.record([(now - t) * 1000 for t in item.sent_at], item.nbytes, now)

    def _refresh(self) -> None:
        try:
            self.client.refresh_metadata([self.topic])
        except OSError as exc:
            raise _NoBroker(str(exc)) from exc

    def _lost(self, node: int, why: str, items: list[InFlight]) -> None:
        """A connection broke: the outcome of what it carried is unknown; reported, not retried (a retry
        could write the records twice, which Kafka's idempotent producer would prevent)."""
        count = sum(len(i.sent_at) for i in items)
        self.stats.errors += count
        print(f"Error: {why}; {count} records may or may not have been written", file=sys.stderr)
        self.in_flight.pop(node, None)
        if node >= 0:
            self.client.drop(node)
        self._refresh()

    def read_answers(self, wait_s: float) -> None:
        """Read the answers that arrive within `wait_s` (at least those already there)."""
        deadline = time.monotonic() + wait_s
        while True:
            waiting = {n: self.client.connections().get(n) for n, q in self.in_flight.items() if q}
            socks = {c.fileno(): (n, c) for n, c in waiting.items() if c is not None and not c.broken}
            if not socks:
                time.sleep(max(0.0, deadline - time.monotonic()))
                return
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select(list(socks), [], [], left)
            for fd in ready:
                self._answer(*socks[fd])
            if not ready and time.monotonic() >= deadline:
                return

    def close(self) -> None:
        """Send what is left and wait for every answer."""
        self.send_batch()
        for node, queue in list(self.in_flight.items()):
            conn = self.client.connections().get(node)
            while queue and conn is not None and not conn.broken:
                self._answer(node, conn)


def run_producer_perf_test(args: Any) -> int:
    try:
        settings, security, bootstrap = _settings(args, args.producer_props, PRODUCER_SETTINGS, "--producer-props")
        if settings["enable.idempotence"].strip().lower() != "false":
            raise PropertyError("enable.idempotence=true is not supported by kafkalite's producer perf test "
                                "(Kafka's producer turns it on by default; this one sends without producer ids)")
        codec = settings["compression.type"]
        if codec not in CODECS:
            raise PropertyError(f"compression.type must be one of {', '.join(sorted(CODECS))}, not {codec!r}")
        if args.num_records < 0:
            raise PropertyError(f"--num-records must not be negative, not {args.num_records}")
        if args.throughput == 0:
            raise PropertyError("--throughput 0 would send nothing, ever: give records per second, or -1 for no limit")
        payloads = Payloads(args, CODECS[codec])
    except (PropertyError, InvalidConfigError, OSError) as exc:
        return _fail(str(exc), 2)
    try:
        with KafkaClient(bootstrap, client_id=settings["client.id"], security=security) as client:
            start = time.monotonic()
            stats = Stats(start, max(1, args.num_records // min(max(args.num_records, 1), LATENCY_SAMPLES)),
                          window_start=start)
            producer = Producer(client, args.topic, settings, payloads, stats)
            throttler = Throttler(args.throughput, time.monotonic())
            stopped = ""
            try:
                for sent in range(args.num_records):
                    now = time.monotonic()
                    wait = throttler.wait_s(sent, now)
                    if wait > 0:
                        producer.idle(now + wait)
                    producer.add(time.monotonic())
                producer.close()
            except KeyboardInterrupt:
                pass
            except OSError as exc:  # no broker of the cluster answers any more: say what was done, then why
                stopped = f"stopped: no broker of {bootstrap} can be reached ({exc})"
            stats.print_total(time.monotonic())
            if args.print_metrics:
                print(f"producer-metrics:record-send-total = {stats.count}\n"
                      f"producer-metrics:record-error-total = {stats.errors}\n"
                      f"producer-metrics:byte-total = {stats.bytes}")
            if stopped:
                return _fail(stopped)
            return 1 if stats.errors else 0
    except (KafkaClientError, InvalidConfigError, PropertyError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        args.bootstrap_server = bootstrap
        return _fail(unreachable(args, exc, "--producer.config"))


# --- consumer ---------------------------------------------------------------------------------------


def java_date_format(pattern: str) -> Callable[[float], str]:
    """A formatter for SimpleDateFormat's common letters (yyyy yy MM dd HH mm ss SSS; text in quotes is
    literal); other letters are refused by name rather than printed wrong."""
    codes = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S", "SSS": ""}
    parts: list[tuple[bool, str]] = []  # (is a field, strftime code or literal text)
    i = 0
    while i < len(pattern):
        token = next((t for t in codes if pattern.startswith(t, i)), None)
        if token is not None:
            parts.append((True, codes[token]))
            i += len(token)
        elif pattern[i] == "'":
            end = pattern.find("'", i + 1)
            end = len(pattern) if end < 0 else end
            parts.append((False, pattern[i + 1:end]))
            i = end + 1
        elif pattern[i].isalpha():
            raise PropertyError(f"--date-format: letter {pattern[i]!r} is not supported "
                                "(yyyy, yy, MM, dd, HH, mm, ss, SSS)")
        else:
            parts.append((False, pattern[i]))
            i += 1

    def format_time(t: float) -> str:
        when = datetime.datetime.fromtimestamp(t)
        out = []
        for is_field, code in parts:
            if not is_field:
                out.append(code)
            else:
                out.append(when.strftime(code) if code else f"{when.microsecond // 1000:03d}")
        return "".join(out)
    return format_time


HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
          "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DETAILED_HEADER = ("time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")


def _record_sizes(data: bytes, positions: dict[tuple[str, int], int], tp: tuple[str, int]) -> Iterator[int]:
    """Key plus value bytes of each record at or after the position (what Kafka's tool counts); the position
    moves past each record before it is counted, so stopping part way leaves it after the last one counted."""
    for batch in iter_batches(data):
        if batch.last_offset < positions[tp]:
            continue
        if not batch.is_control:
            for r in batch.records():
                if r.offset >= positions[tp]:
                    positions[tp] = r.offset + 1
                    yield len(r.key or b"") + len(r.value or b"")
        positions[tp] = batch.last_offset + 1


def run_consumer_perf_test(args: Any) -> int:
    try:
        settings, security, bootstrap = _settings(args, [], CONSUMER_SETTINGS, "--consumer.config")
        fmt = java_date_format(args.date_format)
        if args.messages < 0 or args.fetch_size <= 0 or args.timeout <= 0 or args.reporting_interval <= 0:
            raise PropertyError("--messages must not be negative; --fetch-size, --timeout and "
                                "--reporting-interval must be positive")
    except (PropertyError, InvalidConfigError, OSError) as exc:
        return _fail(str(exc), 2)
    group = args.group or settings["group.id"] or f"perf-consumer-{random.randrange(100000)}"
    try:
        with KafkaClient(bootstrap, client_id=settings["client.id"], security=security) as client:
            return _consume(client, args, group, fmt)
    except (KafkaClientError, InvalidConfigError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        args.bootstrap_server = bootstrap
        return _fail(unreachable(args, exc, "--consumer.config"))


# over the complexity limit: still to split (issue 34)
def _consume(client: KafkaClient, args: Any, group: str, fmt: Callable[[float], str]) -> int:  # noqa: C901
    start_wall, start = time.time(), time.monotonic()
    client.partition_count(args.topic)  # UNKNOWN_TOPIC_OR_PARTITION before joining, as a named error
    member = GroupMember(client, group, [args.topic], client.client_id)
    member.join()
    joined = time.monotonic()
    rebalance_ms = (joined - start) * 1000

    def positions_of() -> dict[tuple[str, int], int]:
        committed = member.committed()
        owned = [(t, p) for t, ps in member.assignment.items() for p in ps]
        missing = {tp: -1 if args.from_latest else -2 for tp in owned if tp not in committed}
        out = {tp: committed[tp] for tp in owned if tp in committed}
        for tp, res in client.list_offsets(missing).items() if missing else ():
            if res["error_code"]:
                raise KafkaClientError(res["error_code"], f"{tp[0]}-{tp[1]}")
            out[tp] = res["offset"]
        return out

    positions = positions_of()
    count = nbytes = 0
    last = time.monotonic()
    report_at, last_report = joined + args.reporting_interval / 1000, (joined, 0, 0)
    if not args.hide_header:
        print(DETAILED_HEADER if args.show_detailed_stats else HEADER, flush=True)
    timed_out = False
    try:
        while count < args.messages:
            if member.poll():
                member.commit(positions)
                member.join()
                positions = positions_of()
            fetched = client.fetch_many(positions, partition_max_bytes=args.fetch_size) if positions else {}
            for tp, (part, data) in sorted(fetched.items()):
                if part["error_code"]:
                    raise KafkaClientError(part["error_code"], f"{tp[0]}-{tp[1]} at offset {positions[tp]}")
                if count >= args.messages:
                    break
                for size in _record_sizes(data, positions, tp):
                    count += 1
                    nbytes += size
                    if count >= args.messages:
                        break
                last = time.monotonic() if data else last
            now = time.monotonic()
            if args.show_detailed_stats and now >= report_at:
                t0, c0, b0 = last_report
                span = max(now - t0, 1e-9)
                mb = nbytes / MB
                print(f"{fmt(time.time())}, 0, {mb:.4f}, {(nbytes - b0) / MB / span:.4f}, {count}, "
                      f"{(count - c0) / span:.4f}, 0, {span * 1000:.0f}, {(nbytes - b0) / MB / span:.4f}, "
                      f"{(count - c0) / span:.4f}", flush=True)
                last_report, report_at = (now, count, nbytes), now + args.reporting_interval / 1000
            if count < args.messages and now - last > args.timeout / 1000:
                timed_out = True
                break
    except KeyboardInterrupt:
        pass
    finally:
        try:
            member.commit(positions)
            member.leave()
        except (OSError, KafkaClientError) as exc:
            print(f"Warning: group {group}: {exc}", file=sys.stderr)
    end_wall, end = time.time(), time.monotonic()
    if timed_out:
        print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) "
              "exceeded. You can use the --timeout option to increase the timeout.", file=sys.stderr)
    if not args.show_detailed_stats:
        elapsed = max(end - start, 1e-9)
        fetch_s = max(end - joined, 1e-9)
        mb = nbytes / MB
        print(f"{fmt(start_wall)}, {fmt(end_wall)}, {mb:.4f}, {mb / elapsed:.4f}, {count}, {count / elapsed:.4f}, "
              f"{rebalance_ms:.0f}, {fetch_s * 1000:.0f}, {mb / fetch_s:.4f}, {count / fetch_s:.4f}", flush=True)
    if args.print_metrics:
        print(f"consumer-fetch-manager-metrics:records-consumed-total = {count}\n"
              f"consumer-fetch-manager-metrics:bytes-consumed-total = {nbytes}")
    return 0
