"""Scale benchmark (issue 17): one real `kafkalite serve` with BENCH_SCALE_PARTITIONS (default 10,000) partitions.

Measured on the broker process: the topic's creation time, open descriptors per partition (/proc/PID/fd), idle
RSS per partition (VmRSS after creation minus before, divided by the partitions), a clean restart (SIGTERM) of the
empty partitions, a restart after kill -9 with data in every partition and a clean restart with that data, each
timed from the process start to the first Metadata answer that lists every partition with a leader, and a
Metadata of the whole topic and a Fetch of 1,000 of its partitions, each one request.
Medians of BENCH_SCALE_REPEATS (default 3) restarts.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import time

from bench.common import scratch_dir
from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey
from kafkalite.records import SimpleRecord, build_batch
from tests.support.brokers import BrokerProcess

PARTITIONS = int(os.environ.get("BENCH_SCALE_PARTITIONS", "10000"))
REPEATS = int(os.environ.get("BENCH_SCALE_REPEATS", "3"))
TOPIC = "wide"
WIDE_REQUEST = 1000  # partitions in one Metadata / Fetch request


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _ready(b: BrokerProcess, partitions: int, deadline_s: float = 300) -> float:
    """Seconds from now until a Metadata answer lists `partitions` partitions of TOPIC, each with a leader."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < deadline_s:
        try:
            with KafkaClient(b.bootstrap, timeout_s=30) as c:
                while time.perf_counter() - t0 < deadline_s:
                    (t,) = c.metadata([TOPIC])["topics"]
                    parts = t["partitions"]
                    if t["error_code"] == 0 and len(parts) == partitions and all(p["leader_id"] >= 0 for p in parts):
                        return time.perf_counter() - t0
                    time.sleep(0.02)
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"broker not ready within {deadline_s} s:\n{b.output()}")


def _start_timed(b: BrokerProcess, partitions: int) -> float:
    t0 = time.perf_counter()
    b.start(timeout_s=300)
    return time.perf_counter() - t0 + _ready(b, partitions)


def _produce_everywhere(c: KafkaClient, partitions: int) -> None:
    """One small batch into every partition, 1,000 partitions a request, acks=1 (not flushed: kill -9 leaves
    every partition's tail to recover)."""
    now_ms = int(time.time() * 1000)  # a timestamp of 0 would be past retention: the data would be deleted
    batch = bytes(build_batch([SimpleRecord(None, b"x" * 100, now_ms)] * 10))
    for lo in range(0, partitions, WIDE_REQUEST):
        data = [{"index": p, "records": batch} for p in range(lo, min(partitions, lo + WIDE_REQUEST))]
        resp = c.request(ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 30000,
                                          "topic_data": [{"name": TOPIC, "partition_data": data}]})
        bad = [p for t in resp["responses"] for p in t["partition_responses"] if p["error_code"]]
        assert not bad, bad[:3]


def _wide_requests(c: KafkaClient, partitions: int) -> tuple[float, float]:
    """Median seconds of a Metadata of the whole topic and of a Fetch naming WIDE_REQUEST partitions."""
    n = min(partitions, WIDE_REQUEST)
    meta, fetch = [], []
    fetch_body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20, "isolation_level": 0,
                  "topics": [{"topic": TOPIC, "partitions": [
                      {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in range(n)]}]}
    for _ in range(7):
        t0 = time.perf_counter()
        c.metadata([TOPIC])
        meta.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        c.request(ApiKey.FETCH, fetch_body, version=4)
        fetch.append(time.perf_counter() - t0)
    return statistics.median(meta), statistics.median(fetch)


def bench_scale(results: dict) -> None:
    d = scratch_dir()
    b = BrokerProcess(d / "data")
    try:
        b.start(timeout_s=120)
        assert b.proc is not None
        time.sleep(1.0)
        rss0, fds0 = vm_rss_kib(b.proc.pid), fd_count(b.proc.pid)
        with KafkaClient(b.bootstrap, timeout_s=600) as c:
            t0 = time.perf_counter()
            res = c.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": []}], "timeout_ms": 600_000})
            assert res["topics"][0]["error_code"] == 0, res
            created = time.perf_counter() - t0 + _ready(b, PARTITIONS)
        time.sleep(2.0)  # idle
        rss1, fds1 = vm_rss_kib(b.proc.pid), fd_count(b.proc.pid)
        clean, unclean = [], []
        for _ in range(REPEATS):
            assert b.stop() == 0, b.output()
            clean.append(_start_timed(b, PARTITIONS))
        with KafkaClient(b.bootstrap, timeout_s=120) as c:
            _produce_everywhere(c, PARTITIONS)
            meta_s, fetch_s = _wide_requests(c, PARTITIONS)
        for _ in range(REPEATS):
            b.stop(signal.SIGKILL)
            unclean.append(_start_timed(b, PARTITIONS))
            with KafkaClient(b.bootstrap, timeout_s=120) as c:
                _produce_everywhere(c, PARTITIONS)  # each restart has a fresh unflushed tail everywhere
        assert b.proc is not None
        time.sleep(2.0)
        rss2 = vm_rss_kib(b.proc.pid)  # after recovering every partition: the most the allocator holds on to
        clean_with_data = []  # every partition with batches, index entries and a producer snapshot to load
        for _ in range(REPEATS):
            assert b.stop() == 0, b.output()
            clean_with_data.append(_start_timed(b, PARTITIONS))
        n = PARTITIONS
        results[f"scale: create {n} partitions (one request)"] = (
            f"{created:.1f} s", f"{(fds1 - fds0) / n:.2f} descriptors per partition", "~1 descriptor per segment")
        results[f"scale: idle RSS per partition ({n})"] = (
            f"{(rss1 - rss0) / n:.1f} KiB after creation, {(rss2 - rss0) / n:.1f} KiB after restarts with data",
            f"{rss1 // 1024} MiB total", "<= 12 KiB")
        results[f"scale: clean restart to first Metadata ({n}, median of {REPEATS})"] = (
            f"{statistics.median(clean):.2f} s", f"runs {', '.join(f'{x:.2f}' for x in clean)}", "<= 3 s")
        results[f"scale: clean restart with data in every partition ({n}, median of {REPEATS})"] = (
            f"{statistics.median(clean_with_data):.2f} s", f"runs {', '.join(f'{x:.2f}' for x in clean_with_data)}",
            "<= 3 s")
        results[f"scale: restart after kill -9 to first Metadata ({n}, median of {REPEATS})"] = (
            f"{statistics.median(unclean):.2f} s", f"runs {', '.join(f'{x:.2f}' for x in unclean)}", "<= 10 s")
        results[f"scale: Metadata of the topic ({n} partitions) / Fetch of {min(n, WIDE_REQUEST)} partitions"] = (
            f"{meta_s * 1000:.1f} ms / {fetch_s * 1000:.1f} ms", "client decode included", "no per-partition hot spot")
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.stop()
        shutil.rmtree(d, ignore_errors=True)


ALL = {"scale": bench_scale}
