"""`kafkalite demo`: the README's main command.

Until the Spark pipeline exists, the demo exercises the storage engine end to end on the default
data directory: it writes a realistic page-view stream into partition `events-0` through the
partition `Log` (every codec, headers, rolling segments), reopens it as after a crash (recovery
checks every batch and rebuilds the indexes), looks offsets up by time, applies size retention,
and prints the first segment with dump-log. It replaces its own output on every run.
"""

from __future__ import annotations

import io
import random
import shutil
import time
from pathlib import Path
from typing import Any

from kafkalite.clock import SYSTEM_CLOCK
from kafkalite.records import CompressionType, SimpleRecord, build_batch
from kafkalite.scheduler import MockScheduler
from kafkalite.storage.log import FetchIsolation, Log
from kafkalite.storage.log_config import LogConfig

DEFAULT_DATA_DIR = Path("kafkalite-data")
URLS = ["/", "/search", "/product/42", "/product/7", "/cart", "/checkout", "/help"]


def page_views(n: int, start_ms: int, seed: int = 7) -> list[SimpleRecord]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        user = f"user-{rnd.randrange(50):02d}"
        url = rnd.choice(URLS)
        value = f'{{"user": "{user}", "url": "{url}", "ms": {rnd.randrange(20, 900)}}}'.encode()
        out.append(SimpleRecord(user.encode(), value, start_ms + i * 10, [("source", b"demo")]))
    return out


def run(args: Any) -> int:
    from kafkalite.cli.dump_log import Dumper

    data_dir = Path(args.data_dir)
    part = data_dir / "events-0"
    if part.exists():
        shutil.rmtree(part)
    config = LogConfig.from_props({"segment.bytes": 64 * 1024, "retention.bytes": 256 * 1024,
                                   "index.interval.bytes": 1024})
    now = SYSTEM_CLOCK.milliseconds()
    views = page_views(args.records, now - args.records * 10)
    codecs = list(CompressionType)

    started = time.perf_counter()
    lg = Log(part, config, scheduler=MockScheduler(_Clock()))
    for i in range(0, len(views), 50):
        lg.append_as_leader(build_batch(views[i : i + 50], compression=codecs[(i // 50) % len(codecs)]), leader_epoch=0)
    lg.update_high_watermark(lg.log_end_offset)
    elapsed = time.perf_counter() - started
    print(f"Wrote {lg.log_end_offset} page views to {part} in {elapsed * 1000:.0f} ms "
          f"({lg.log_end_offset / elapsed:,.0f} records/s), {lg.number_of_segments} segments, {lg.size:,} bytes")
    lg.close(flush=False)  # no flush and no clean-shutdown marker: the next open must recover

    started = time.perf_counter()
    lg = Log(part, config, scheduler=MockScheduler(_Clock()), recovery_point=0, clean_shutdown=False)
    print(f"Reopened after an unclean stop: checked every batch of {lg.number_of_segments} segments and rebuilt "
          f"their indexes in {(time.perf_counter() - started) * 1000:.0f} ms; log end offset {lg.log_end_offset}")
    lg.update_high_watermark(lg.log_end_offset)

    middle = views[len(views) // 2].timestamp
    found = lg.fetch_offset_by_timestamp(middle)
    print(f"First page view at or after {middle}: offset {found.offset if found else None}")

    deleted = lg.delete_old_segments()
    print(f"Size retention (retention.bytes=256 KiB) deleted {deleted} segment(s); log start offset is now "
          f"{lg.log_start_offset}, {lg.size:,} bytes left")

    counts: dict[bytes, int] = {}
    for batch in lg.batches(None, FetchIsolation.HIGH_WATERMARK):
        for r in batch.records():
            counts[r.key] = counts.get(r.key, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:3]
    print("Most active users still retained: " + ", ".join(f"{k.decode()} ({v})" for k, v in top))
    first_log = lg.segments.peekitem(0)[1].log.path
    lg.close()

    buf = io.StringIO()
    dumper = Dumper(buf, deep=args.print_records, print_data=args.print_records, as_json=False, max_bytes=None)
    dumper.dump(first_log)
    lines = buf.getvalue().splitlines()
    print(f"\n$ kafkalite dump-log {first_log}  (first {min(len(lines), 8)} of {len(lines)} lines)")
    print("\n".join(lines[:8]))
    print(f"\nDone. The partition is in Kafka's layout under {part}; problems found: {dumper.problems}")
    return 1 if dumper.problems else 0


class _Clock:
    """Wall-clock time for the scheduler the demo hands to its logs; their tasks run when they are due."""

    def milliseconds(self) -> int:
        return SYSTEM_CLOCK.milliseconds()

    def nanoseconds(self) -> int:
        return SYSTEM_CLOCK.nanoseconds()

    def sleep(self, ms: int) -> None:
        pass


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="write, recover, search and trim a sample partition, then dump it")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help="data directory (default: ./kafkalite-data)")
    p.add_argument("--records", type=int, default=20000, help="page views to write (default 20000)")
    p.add_argument("--print-records", action="store_true", help="include records in the dump")
    p.set_defaults(func=run)
