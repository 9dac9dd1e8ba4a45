"""`kafkalite demo`: the README's main command.

For now it writes a small partition directory in Kafka's layout (several segments, every codec,
headers, a transaction marker) into the default data directory and prints it with dump-log.
It replaces its own output on every run, so it can be run again.
"""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path
from typing import Any

from kafkalite.records import CompressionType, ControlRecordType, RecordBatch, SimpleRecord, build_batch
from kafkalite.records.control import build_end_txn_marker
from kafkalite.storage.segment import LogSegment

DEFAULT_DATA_DIR = Path("kafkalite-data")


def write_sample_partition(directory: Path, now_ms: int, *, records_per_batch: int = 5,
                           batches: int = 12, segment_bytes: int = 2048) -> list[LogSegment]:
    """Write `batches` batches (cycling through the codecs) and roll by size, like the log will."""
    directory.mkdir(parents=True, exist_ok=True)
    segments = [LogSegment.open(directory, 0, index_interval_bytes=256)]
    offset = 0
    codecs = list(CompressionType)
    for i in range(batches):
        recs = [
            SimpleRecord(b"user-%d" % ((offset + j) % 7),
                         b'{"url": "/page/%d", "n": %d}' % ((offset + j) % 13, offset + j),
                         now_ms + offset + j, [("source", b"demo")])
            for j in range(records_per_batch)
        ]
        if i == batches - 1:
            buf = build_end_txn_marker(ControlRecordType.COMMIT, 1000, 0, timestamp=now_ms + offset,
                                       base_offset=offset, partition_leader_epoch=0)
        else:
            buf = build_batch(recs, base_offset=offset, partition_leader_epoch=0, compression=codecs[i % len(codecs)])
        batch = RecordBatch(buf)
        active = segments[-1]
        if active.size > 0 and active.size + len(buf) > segment_bytes:
            active.on_become_inactive_segment()
            segments.append(LogSegment.open(directory, offset, index_interval_bytes=256))
            active = segments[-1]
        active.append(batch.last_offset, batch.max_timestamp, batch.last_offset, buf)
        offset = batch.last_offset + 1
    for s in segments:
        s.close()
    return segments


def run(args: Any) -> int:
    from kafkalite.cli.dump_log import Dumper

    data_dir = Path(args.data_dir)
    part = data_dir / "demo-events-0"
    if part.exists():
        shutil.rmtree(part)
    started = time.perf_counter()
    segments = write_sample_partition(part, int(time.time() * 1000))
    print(f"Wrote {len(segments)} segments to {part} in {1000 * (time.perf_counter() - started):.1f} ms\n")
    buf = io.StringIO()
    dumper = Dumper(buf, deep=True, print_data=True, as_json=False, max_bytes=None)
    for f in sorted(part.iterdir()):
        dumper.dump(f)
    print(buf.getvalue())
    print(f"Dumped {len(list(part.iterdir()))} files; problems found: {dumper.problems}")
    return 1 if dumper.problems else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="write a sample partition to the data directory and dump it")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help="data directory (default: ./kafkalite-data)")
    p.set_defaults(func=run)
