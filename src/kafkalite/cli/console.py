"""`kafkalite produce` / `kafkalite consume`: line-oriented console clients, like kafka-console-producer/consumer.

Input lines become record values (or `key<sep>value` with --key-separator); consumed records print one per
line. Both talk to a running broker through kafkalite's own small client.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.records import CompressionType, SimpleRecord, build_batch

CODECS = {"none": CompressionType.NONE, "gzip": CompressionType.GZIP, "snappy": CompressionType.SNAPPY,
          "lz4": CompressionType.LZ4, "zstd": CompressionType.ZSTD}


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("produce", help="send lines of stdin as records (like kafka-console-producer.sh)")
    p.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, default=0)
    p.add_argument("--key-separator", help="split each line into key and value at the first SEP")
    p.add_argument("--compression-codec", choices=sorted(CODECS), default="none")
    p.add_argument("--acks", type=int, choices=(-1, 0, 1), default=-1)
    p.add_argument("--batch-size", type=int, default=500, help="records per batch")
    p.set_defaults(func=run_produce)

    c = sub.add_parser("consume", help="print records of a partition (like kafka-console-consumer.sh)")
    c.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, default=0)
    c.add_argument("--from-beginning", action="store_true", help="start at the log start (default: the end)")
    c.add_argument("--offset", type=int, help="start at this offset")
    c.add_argument("--max-messages", type=int, help="stop after this many records")
    c.add_argument("--timeout-ms", type=int, default=2000, help="stop after this long without new records")
    c.add_argument("--property", action="append", default=[], metavar="print.key=true",
                   help="print.key / print.offset / print.timestamp / print.headers = true")
    c.set_defaults(func=run_consume)


def run_produce(args: Any) -> int:
    try:
        with KafkaClient(args.bootstrap_server, client_id="kafkalite-producer") as client:
            pending: list[SimpleRecord] = []
            sent = 0

            def flush() -> None:
                nonlocal sent
                if pending:
                    client.produce(args.topic, args.partition,
                                   bytes(build_batch(pending, compression=CODECS[args.compression_codec])), args.acks)
                    sent += len(pending)
                    pending.clear()

            for line in sys.stdin.buffer:
                line = line.rstrip(b"\r\n")
                key = None
                if args.key_separator:
                    k, sep, v = line.partition(args.key_separator.encode())
                    key, line = (k, v) if sep else (None, line)
                pending.append(SimpleRecord(key, line, int(time.time() * 1000)))
                if len(pending) >= args.batch_size:
                    flush()
            flush()
            print(f"Produced {sent} records to {args.topic}-{args.partition}", file=sys.stderr)
    except KafkaClientError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"Error: cannot reach the broker at {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    return 0


def run_consume(args: Any) -> int:
    props = {k.strip(): v.strip().lower() == "true" for k, _, v in (p.partition("=") for p in args.property)}
    count = 0
    try:
        with KafkaClient(args.bootstrap_server, client_id="kafkalite-consumer") as client:
            if args.offset is not None:
                start = args.offset
            else:
                start = client.list_offset(args.topic, args.partition, -2 if args.from_beginning else -1)
            out = sys.stdout.buffer
            for offset, batch in client.consume(args.topic, args.partition, start,
                                                idle_timeout_s=args.timeout_ms / 1000):
                for r in batch.records():
                    if r.offset < offset:
                        continue
                    fields = []
                    if props.get("print.timestamp"):
                        fields.append(f"CreateTime:{r.timestamp}".encode())
                    if props.get("print.offset"):
                        fields.append(f"Offset:{r.offset}".encode())
                    if props.get("print.headers"):
                        fields.append(b",".join(k.encode() + b":" + (v or b"NULL") for k, v in r.headers) or
                                      b"NO_HEADERS")
                    if props.get("print.key"):
                        fields.append(r.key if r.key is not None else b"null")
                    fields.append(r.value if r.value is not None else b"null")
                    out.write(b"\t".join(fields) + b"\n")
                    count += 1
                    if args.max_messages is not None and count >= args.max_messages:
                        out.flush()
                        print(f"Processed a total of {count} messages", file=sys.stderr)
                        return 0
                out.flush()
    except KafkaClientError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"Error: cannot reach the broker at {args.bootstrap_server}: {exc}", file=sys.stderr)
        return 1
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
