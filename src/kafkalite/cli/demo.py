"""`kafkalite demo`: the README's main command, a small data pipeline on an embedded data directory.

1. A page-view stream (user ids, urls, timings, headers) goes into topic `events` (3 partitions) through
   the LogManager, in Kafka's on-disk format, compressed batches of every codec.
2. A Spark Structured Streaming query reads `events` with `readStream.format("kafkalite")` and maintains
   per-user aggregates (views, time on page, last url) in the compacted topic `user-stats`, through the
   kafkalite sink, exactly once per micro-batch.
3. A second wave of events arrives; the same query restarts from its checkpoint and only reads the new data.
4. The log cleaner compacts `user-stats`: one record per user remains, the latest.
5. The demo prints what happened and writes `demo-report.html` (`demo_report`): the segments before and after
   compaction, what the cleaner removed, the query's micro-batches and the most active users.

It needs the `spark` extra and Java 17+; both are checked first, and a missing one is named in one line
(exit code 2) rather than found out by Spark with a traceback.

Everything lives under the data dir (default ./kafkalite-data); the demo replaces its own topics, checkpoint
and report on every run, so it can be run again.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from kafkalite import spark as kspark
from kafkalite.cli.demo_report import DemoReport, PartitionSnapshot, micro_batches, snapshot_log, write_report
from kafkalite.clock import SYSTEM_CLOCK
from kafkalite.manager.log_manager import LogManager, ManagerConfig
from kafkalite.records import CompressionType, SimpleRecord, build_batch

DEFAULT_DATA_DIR = Path("kafkalite-data")
EVENTS, STATS = "events", "user-stats"
PARTITIONS = 3
URLS = ["/", "/search", "/product/42", "/product/7", "/cart", "/checkout", "/help", "/account"]
STATS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 64 * 1024, "min.cleanable.dirty.ratio": 0.01,
                "delete.retention.ms": 0}


def page_views(n: int, start_ms: int, users: int, rnd: random.Random) -> list[tuple[int, SimpleRecord]]:
    """(partition, record): keyed by user, partitioned by user like Kafka's default partitioner would spread them."""
    out = []
    weights = [1 / (i + 1) for i in range(users)]  # a few very active users, a long tail
    for i in range(n):
        u = rnd.choices(range(users), weights)[0]
        user = f"user-{u:03d}"
        value = json.dumps({"user": user, "url": rnd.choice(URLS), "ms": rnd.randrange(20, 900),
                            "ts": start_ms + i}).encode()
        out.append((u % PARTITIONS, SimpleRecord(user.encode(), value, start_ms + i, [("source", b"demo")])))
    return out


def reset_topics(data_dir: Path) -> None:
    """Delete the demo's topics of an earlier run the way a broker does (so the cleaner forgets them too)."""
    manager = LogManager([data_dir], config=ManagerConfig(file_delete_delay_ms=0))
    try:
        for topic, partition in list(manager.logs):
            if topic in (EVENTS, STATS):
                manager.delete_log(topic, partition)
        manager.delete_logs()
    finally:
        manager.shutdown()


def write_events(data_dir: Path, views: list[tuple[int, SimpleRecord]]) -> float:
    codecs = list(CompressionType)
    started = time.perf_counter()
    with LogManager([data_dir]) as manager:
        logs = [manager.get_or_create_log(EVENTS, p) for p in range(PARTITIONS)]
        by_part: list[list[SimpleRecord]] = [[] for _ in range(PARTITIONS)]
        for p, r in views:
            by_part[p].append(r)
        for p, records in enumerate(by_part):
            for i in range(0, len(records), 500):
                logs[p].append_as_leader(build_batch(records[i:i + 500], compression=codecs[(i // 500) % 5]))
            logs[p].update_high_watermark(logs[p].log_end_offset)
    return time.perf_counter() - started


def spark_session() -> Any:
    import warnings

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    from kafkalite.spark import local_session

    # Loopback TCP to the Python workers, not local_session's Unix domain sockets: the demo's few
    # thousand rows gain nothing from them, and over them Spark 4.3 may print a BrokenPipeError
    # traceback when it stops its Python workers (docs/spark.md, "Running it fast").
    return local_session("kafkalite-demo", **{"spark.ui.showConsoleProgress": "false",
                                              "spark.python.unix.domain.socket.enabled": "false"})


def run_aggregation(spark: Any, data_dir: Path, checkpoint: Path) -> tuple[int, float, list[Any]]:
    """One availableNow run of the streaming query; returns (input rows, seconds, its recentProgress)."""
    from pyspark.sql import functions as F

    schema = "user STRING, url STRING, ms INT, ts LONG"
    events = (spark.readStream.format("kafkalite").option("path", str(data_dir)).option("subscribe", EVENTS)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 20000).load())
    views = events.select(F.from_json(F.col("value").cast("string"), schema).alias("v")).select("v.*")
    stats = views.groupBy("user").agg(F.count("*").alias("views"), F.sum("ms").alias("total_ms"),
                                       F.max_by("url", "ts").alias("last_url"), F.max("ts").alias("last_ts"))
    out = stats.select(F.col("user").cast("binary").alias("key"),
                       F.to_json(F.struct("user", "views", "total_ms", "last_url", "last_ts"))
                       .cast("binary").alias("value"))
    def upsert(batch: Any, batch_id: int) -> None:
        # Python data sources take streaming writes in append mode only, so the updated aggregates of each
        # micro-batch are written as a batch; a replayed batch id rewrites the same values, which the
        # compacted topic absorbs (latest value per key wins).
        batch.write.format("kafkalite").option("path", str(data_dir)).option("topic", STATS).mode("append").save()

    started = time.perf_counter()
    query = (out.writeStream.foreachBatch(upsert).option("checkpointLocation", str(checkpoint))
             .outputMode("update").trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    progress = list(query.recentProgress)
    rows = sum(b.rows for b in micro_batches(0, progress))
    return rows, elapsed, progress


def compact_stats(data_dir: Path) -> tuple[list[PartitionSnapshot], list[PartitionSnapshot]]:
    """Roll and clean every user-stats partition; the segments of each partition before and after."""
    before, after = [], []
    with LogManager([data_dir], topic_configs={STATS: STATS_CONFIG}) as manager:
        logs = sorted((lg for lg in manager.all_logs() if lg.topic == STATS), key=lambda lg: lg.partition)
        for lg in logs:
            before.append(snapshot_log(lg))
            if lg.active_segment.size:
                lg.roll()  # the active segment is never cleaned: close it so everything is eligible
            lg.update_high_watermark(lg.log_end_offset)
            if manager.cleaner is not None:
                # the manager's own cleaner threads may get there first; clean_now then has nothing left
                manager.cleaner.clean_now(STATS, lg.partition)
            after.append(snapshot_log(lg))
    return before, after


def snapshot_topic(data_dir: Path, topic: str) -> list[PartitionSnapshot]:
    with LogManager([data_dir]) as manager:
        logs = sorted((lg for lg in manager.all_logs() if lg.topic == topic), key=lambda lg: lg.partition)
        return [snapshot_log(lg) for lg in logs]


def latest_stats(spark: Any, data_dir: Path) -> list[dict[str, Any]]:
    rows = (spark.read.format("kafkalite").option("path", str(data_dir)).option("subscribe", STATS).load()
            .select("key", "value", "offset").collect())
    latest: dict[bytes, tuple[int, dict[str, Any]]] = {}
    for r in rows:
        if r["value"] is not None and (r["key"] not in latest or latest[r["key"]][0] < r["offset"]):
            latest[r["key"]] = (r["offset"], json.loads(bytes(r["value"])))
    return sorted((v for _, v in latest.values()), key=lambda s: -s["views"])


def missing_prerequisite() -> str | None:
    """One line naming what Spark lacks here (the `spark` extra, Java 17+), or None."""
    missing = kspark.missing_extra()
    if missing:
        return kspark.extra_message(missing)
    return kspark.java_problem()


def run(args: Any) -> int:
    problem = missing_prerequisite()
    if problem:
        print(f"kafkalite demo: {problem}", file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = data_dir / ".demo-checkpoint"  # hidden: not a partition dir
    reset_topics(data_dir)
    shutil.rmtree(checkpoint, ignore_errors=True)
    rnd = random.Random(args.seed)
    n1, n2 = int(args.records * 0.75), args.records - int(args.records * 0.75)
    now = SYSTEM_CLOCK.milliseconds()
    total_started = time.perf_counter()

    wave1 = page_views(n1, now - 3_600_000, args.users, rnd)
    secs = write_events(data_dir, wave1)
    print(f"1. Wrote {n1:,} page views of {args.users} users to topic '{EVENTS}' ({PARTITIONS} partitions) in "
          f"{secs * 1000:.0f} ms ({n1 / secs:,.0f} records/s), in Kafka's on-disk format under {data_dir}")

    print("   Starting Spark (local[2]) ...", flush=True)
    started = time.perf_counter()
    spark = spark_session()
    spark_version = spark.version
    print(f"   Spark {spark_version} ready in {time.perf_counter() - started:.1f} s")
    try:
        rows1, secs1, progress1 = run_aggregation(spark, data_dir, checkpoint)
        print(f"2. Streaming query read {rows1:,} events and updated per-user aggregates in topic '{STATS}' "
              f"in {secs1:.1f} s ({rows1 / max(secs1, 1e-9):,.0f} rows/s)")
        wave2 = page_views(n2, now - 60_000, args.users, rnd)
        write_events(data_dir, wave2)
        rows2, secs2, progress2 = run_aggregation(spark, data_dir, checkpoint)
        print(f"3. {n2:,} new events arrived; the query resumed from its checkpoint and read exactly {rows2:,} "
              f"rows in {secs2:.1f} s")
        stats_before, stats_after = compact_stats(data_dir)
        before, after = sum(p.records for p in stats_before), sum(p.records for p in stats_after)
        cleaned = sum(a.records < b.records for b, a in zip(stats_before, stats_after, strict=True))
        stats_partitions = len(stats_before)
        print(f"4. The log cleaner compacted '{STATS}' ({cleaned} of {stats_partitions} partition(s) had older "
              f"aggregates to drop): {before:,} aggregate records -> {after:,}, one per user")
        top = latest_stats(spark, data_dir)
    finally:
        spark.stop()
    for s in top[:5]:
        print(f"   {s['user']}: {s['views']} views, {s['total_ms'] / max(1, s['views']):.0f} ms average, "
              f"last on {s['last_url']}")
    report = data_dir / "demo-report.html"
    summary = [("events written (2 waves)", f"{n1:,} + {n2:,} = {n1 + n2:,}"), ("users", str(len(top))),
               ("stream rows read, run 1 / run 2", f"{rows1:,} / {rows2:,}"),
               ("user-stats records before / after compaction", f"{before:,} / {after:,}"),
               ("Spark", spark_version), ("total time", f"{time.perf_counter() - total_started:.1f} s")]
    write_report(report, DemoReport(summary, snapshot_topic(data_dir, EVENTS), stats_before, stats_after,
                                    micro_batches(1, progress1) + micro_batches(2, progress2), top[:15]))
    print(f"5. Report (segments before/after compaction, micro-batches, most active users): {report.resolve()}")
    ok = rows1 == n1 and rows2 == n2 and after == len(top) and sum(s["views"] for s in top) == n1 + n2
    print(f"Done in {time.perf_counter() - total_started:.1f} s; every event counted exactly once: {ok}")
    return 0 if ok else 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the demo pipeline: events -> Spark streaming aggregates -> compaction")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help="data directory (default: ./kafkalite-data)")
    p.add_argument("--records", type=int, default=40000, help="page views to generate (default 40000)")
    p.add_argument("--users", type=int, default=200, help="distinct users (default 200)")
    p.add_argument("--seed", type=int, default=7)
    p.set_defaults(func=run)
