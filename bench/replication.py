"""Replication benchmarks (issue 15): a real ZooKeeper and three `kafkalite serve` processes on 127.0.0.1,
each figure next to the machine limit it is judged by, measured in the same run.

- throughput: confluent-kafka (the client of the broker benchmark), 1 KiB records, one partition:
  acks=all to a replication-factor-3 topic (min.insync.replicas 2) vs acks=1 to a replication-factor-1
  topic on the same leader; target ratio >= 0.6;
- latency: produce p99 at low load (one record in flight) with acks=all / RF 3 vs the limit acks=1 p99
  + 2 loopback round trips + 1 ms (a follower fetch that the append wakes, then the HW in the answer);
- failover: kill -9 of the partition's leader -> the next acks=all produce that succeeds (kafkalite's
  client, retrying as Kafka's producers do) vs zookeeper.session.timeout.ms + 2 s;
- catch-up: a follower killed, N bytes produced, the follower restarted -> back in the ISR with a log as
  long as the leader's (DescribeLogDirs sizes equal) vs 2x the time loopback sendfile needs for N bytes.
- reassign: a partition of N bytes on brokers [1, 2] moved to [3, 2] (AlterPartitionReassignments, as
  `kafkalite reassign-partitions --execute`) -> the move complete (broker 3 copied it, leads it, broker 1's
  replica deleted), judged by the same limit as the catch-up: the copy is a follower's fetch.

Sizes: BENCH_REPL_MIB (throughput data per run, default 64), BENCH_CATCHUP_MIB (N, default 128 for a
quick run; the issue's figure is BENCH_CATCHUP_MIB=1024), BENCH_REPL_FAILOVERS (default 3),
BENCH_REPEATS as everywhere; BENCH_REPL_PARTS (comma-separated of throughput, latency, failover, catchup,
reassign; default all) runs only those parts, e.g. `BENCH_REPL_PARTS=catchup` to iterate on the catch-up. Skipped with a
message when ZooKeeper is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import threading
import time

from bench.broker import RECORD, _loopback_sendfile, _p, _raw_produce, _rtt_samples
from bench.common import REPEATS, GiB, MiB, fmt_rate, median_rates, prefault, scratch_dir
from kafkalite.client import KafkaClient, KafkaClientError, ProduceOutcomeUnknown
from kafkalite.protocol import ApiKey
from kafkalite.records import SimpleRecord, build_batch
from tests.support.cluster import SESSION_TIMEOUT_MS, Cluster
from tests.support.zookeeper import ZooKeeperServer, missing

DATA_BYTES = int(os.environ.get("BENCH_REPL_MIB", "64")) * MiB
CATCHUP_BYTES = int(os.environ.get("BENCH_CATCHUP_MIB", "128")) * MiB
FAILOVERS = int(os.environ.get("BENCH_REPL_FAILOVERS", "3"))
PARTS = {p.strip() for p in os.environ.get("BENCH_REPL_PARTS",
                                           "throughput,latency,failover,catchup,reassign").split(",")}
LATENCY_SAMPLES = 1500
LAG_TIME_MS = 3000  # replica.lag.time.max.ms for the run (Kafka's default: 30000): a dead follower leaves the ISR soon


def _producer(bootstrap: str, acks: str, **extra: object):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20,
                     "compression.type": "none", "queue.buffering.max.kbytes": 1 << 20, **extra})


def _produce_all(bootstrap: str, topic: str, acks: str, total: int) -> tuple[int, float]:
    p = _producer(bootstrap, acks)
    value = os.urandom(RECORD)
    n = total // RECORD
    failed: list[object] = []

    def report(err, _msg) -> None:
        if err is not None:
            failed.append(err)

    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, on_delivery=report)
                break
            except BufferError:
                p.poll(0.001)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left or failed:
        raise RuntimeError(f"{left} records undelivered, {len(failed)} failed ({failed[:1]}) producing to {topic}")
    return n * RECORD, elapsed


def _create(cluster: Cluster, topic: str, replicas: list[int], min_isr: int = 1) -> None:
    res = cluster.request(replicas[0], ApiKey.CREATE_TOPICS, {"topics": [{
        "name": topic, "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": 0, "broker_ids": replicas}],
        "configs": [{"name": "min.insync.replicas", "value": str(min_isr)}]}], "timeout_ms": 30000})
    assert res["topics"][0]["error_code"] == 0, res
    _wait(lambda: _state(cluster, topic, replicas[0])[0] == replicas[0], 30, f"{topic} to get its leader")


def _state(cluster: Cluster, topic: str, bid: int) -> tuple[int, int, tuple[int, ...]]:
    """(leader, leader epoch, ISR) of partition 0 as broker `bid` tells it; (-1, -1, ()) when unknown."""
    with contextlib.suppress(OSError, KeyError, IndexError):
        p = cluster.metadata(bid, [topic])["topics"][0]["partitions"][0]
        return p["leader_id"], p["leader_epoch"], tuple(p["isr_nodes"])
    return -1, -1, ()


def _wait(cond, timeout_s: float, what: str) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"waited {timeout_s:g} s for {what}")
        time.sleep(0.05)
    return time.monotonic() - t0


def _throughput(cluster: Cluster, results: dict) -> None:
    _create(cluster, "rf1", [1])
    _create(cluster, "rf3", [1, 2, 3], min_isr=2)
    bootstrap = cluster.bootstrap

    rates = median_rates({"acks=1 RF1": lambda: _produce_all(bootstrap, "rf1", "1", DATA_BYTES),
                          "acks=all RF3": lambda: _produce_all(bootstrap, "rf3", "all", DATA_BYTES)},
                         repeats=max(1, min(REPEATS, 3)))
    one, replicated = rates["acks=1 RF1"], rates["acks=all RF3"]
    results["replication: produce acks=all, RF 3 (confluent-kafka, 1 KiB records)"] = (
        fmt_rate(replicated), f"{replicated / one:.2f}x acks=1 with RF 1 ({fmt_rate(one)})", ">= 0.6x")


def _latency_of(bootstrap: str, topic: str, acks: str, samples: int = LATENCY_SAMPLES, warm_up: int = 300
                ) -> list[float]:
    """One 1 KiB record in flight, produce() to delivery report; the client waits in poll(timeout), it does
    not spin (a spinning client takes a core from the brokers on two cores)."""
    p = _producer(bootstrap, acks, **{"linger.ms": 0, "socket.nagle.disable": True})
    value = os.urandom(RECORD)
    lat = []
    for _ in range(warm_up + samples):
        done = threading.Event()
        t0 = time.perf_counter()
        p.produce(topic, value, on_delivery=lambda err, msg, done=done: done.set())
        while not done.is_set():
            p.poll(0.05)
        lat.append(time.perf_counter() - t0)
    p.flush(10)
    return lat[warm_up:]


def _latency(cluster: Cluster, results: dict) -> None:
    prefault()
    rtt = statistics.median(_rtt_samples())
    one = _latency_of(cluster.bootstrap, "rf1", "1")
    replicated = _latency_of(cluster.bootstrap, "rf3", "all")
    limit = _p(one, 99) + 2 * rtt + 0.001
    p99 = _p(replicated, 99)
    results["replication: produce latency p99 acks=all, RF 3, low load"] = (
        f"{p99 * 1e6:,.0f} µs (median {statistics.median(replicated) * 1e6:,.0f} µs)",
        f"{p99 / limit:.0%} of acks=1 p99 + 2 RTT + 1 ms ({_p(one, 99) * 1e6:,.0f} + 2x{rtt * 1e6:,.0f} + 1,000 µs)",
        "<= 100%")


def _failover(cluster: Cluster, results: dict) -> None:
    _create(cluster, "fo", [1, 2, 3], min_isr=2)
    batch = bytes(build_batch([SimpleRecord(None, b"x" * 100)]))
    took = []
    with KafkaClient(cluster.bootstrap, timeout_s=5, retry_timeout_s=60, retry_backoff_s=0.02) as c:
        c.produce("fo", 0, batch, acks=-1)
        for _ in range(FAILOVERS):
            cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=60)
            _wait(lambda: len(_state(cluster, "fo", 1)[2]) == 3, 60, "all three replicas in the ISR of fo-0")
            leader = _state(cluster, "fo", next(iter(cluster.running())))[0]
            t0 = time.monotonic()
            cluster.brokers[leader].kill()
            while True:
                try:
                    c.produce("fo", 0, batch, acks=-1)
                    break
                except (ProduceOutcomeUnknown, KafkaClientError, OSError):
                    time.sleep(0.01)
                    if time.monotonic() - t0 > 120:
                        raise
            took.append(time.monotonic() - t0)
            cluster.brokers[leader].start()
    med, worst = statistics.median(took), max(took)
    limit = SESSION_TIMEOUT_MS / 1000 + 2
    results[f"replication: failover, leader kill -9 -> next acks=all produce (median of {len(took)})"] = (
        f"{med:.2f} s (max {worst:.2f} s)", f"{worst / limit:.0%} of session timeout + 2 s ({limit:g} s)",
        "<= 100%")


def _log_size(cluster: Cluster, bid: int, topic: str) -> int:
    """Bytes of partition 0 of `topic` in broker `bid`'s log dirs (DescribeLogDirs); -1 when not there."""
    with contextlib.suppress(OSError), KafkaClient(cluster.brokers[bid].bootstrap, timeout_s=10) as c:
        for d in c.describe_log_dirs({topic: [0]}):
            for t in d.get("topics", []):
                for p in t.get("partitions", []):
                    if t["name"] == topic and p["partition_index"] == 0:
                        return p["partition_size"]
    return -1


def _copy_limit(d) -> tuple[float, float]:
    """(limit s, loopback sendfile rate) for copying CATCHUP_BYTES to a follower: 2x the time loopback sendfile
    needs for them, measured now (median of 3). The catch-up and the reassignment are judged by it."""
    sf = _loopback_sendfile(d / "sf", CATCHUP_BYTES)
    sendfile_rate = statistics.median(CATCHUP_BYTES / sf()[1] for _ in range(3))
    (d / "sf").unlink()
    return 2 * CATCHUP_BYTES / sendfile_rate, sendfile_rate


def _catch_up(cluster: Cluster, results: dict, d) -> None:
    limit, sendfile_rate = _copy_limit(d)
    label = f"replication: follower restarted {CATCHUP_BYTES // MiB:,} MiB behind -> back in the ISR"
    cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=60)  # the last failover's broker is back
    _create(cluster, "cu", [1, 2, 3])
    follower = cluster.brokers[3]
    follower.kill()
    _raw_produce(cluster.brokers[1].port, "cu", CATCHUP_BYTES)  # acks=1 straight to the leader
    target = _log_size(cluster, 1, "cu")
    cluster.agreed_view(lambda v: len(v[1]) == 2, timeout_s=SESSION_TIMEOUT_MS / 1000 + 30)  # its session ended
    prefault(CATCHUP_BYTES + 256 * MiB)  # the follower's page cache grows by N: host-backed memory, as everywhere
    log_start = follower.log_path.stat().st_size if follower.log_path.exists() else 0
    follower.start()
    t0, wall0 = time.monotonic(), time.time()
    cpu0 = _cpu_seconds(follower.proc.pid)
    timeout = max(60.0, 10 * limit)
    try:
        _wait(lambda: _log_size(cluster, 3, "cu") >= target and 3 in _state(cluster, "cu", 1)[2], timeout,
              "broker 3 to catch up")
        took = time.monotonic() - t0
        cpu = _cpu_seconds(follower.proc.pid) - cpu0
        started = _first_fetch_after(follower.log_path, log_start, "cu", wall0)
        results[label] = (f"{took:.2f} s ({fmt_rate(CATCHUP_BYTES / took)}; fetching began after {started:.2f} s), "
                          f"follower CPU {cpu * GiB / CATCHUP_BYTES:.2f} s per GiB",
                          f"{took / limit:.0%} of 2x loopback sendfile time ({limit:.2f} s, "
                          f"{fmt_rate(sendfile_rate)})", "<= 100%")
    except TimeoutError:
        got = max(_log_size(cluster, 3, "cu"), 0)
        results[label] = (f"not within {timeout:.0f} s ({got // MiB:,} of {target // MiB:,} MiB)",
                          f"limit {limit:.2f} s (2x loopback sendfile)", "<= 100%")


def _reassign(cluster: Cluster, results: dict, d) -> None:
    limit, _rate = _copy_limit(d)
    label = f"replication: partition of {CATCHUP_BYTES // MiB:,} MiB moved from brokers [1, 2] to [3, 2]"
    cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=60)
    _create(cluster, "ra", [1, 2])
    _raw_produce(cluster.brokers[1].port, "ra", CATCHUP_BYTES)
    _wait(lambda: _log_size(cluster, 2, "ra") >= _log_size(cluster, 1, "ra") > 0, 60, "broker 2 to copy ra-0")
    prefault(CATCHUP_BYTES + 256 * MiB)
    t0 = time.monotonic()
    move = {"timeout_ms": 30000, "topics": [{"name": "ra", "partitions": [{"partition_index": 0, "replicas": [3, 2]}]}]}
    res = cluster.request(cluster.controller_id(), ApiKey.ALTER_PARTITION_REASSIGNMENTS, move)
    assert res["responses"][0]["partitions"][0]["error_code"] == 0, res

    def done() -> bool:
        doc = cluster.zk_json("/brokers/topics/ra")
        return doc["partitions"]["0"] == [3, 2] and not doc.get("adding_replicas")
    try:
        _wait(done, max(60.0, 10 * limit), "the move of ra-0")
    except TimeoutError:
        results[label] = ("not complete", f"limit {limit:.2f} s (2x loopback sendfile)", "<= 100%")
        return
    took = time.monotonic() - t0
    leader = cluster.partition_state("ra", 0)["leader"]
    results[label] = (f"{took:.2f} s ({fmt_rate(CATCHUP_BYTES / took)}), leader now {leader}",
                      f"{took / limit:.0%} of 2x loopback sendfile time ({limit:.2f} s)", "<= 100%")


def _first_fetch_after(log_path, offset: int, topic: str, wall0: float) -> float:
    """Seconds from `wall0` to the follower's log line saying it fetches `topic` (its start-up, ZooKeeper
    registration and the controller's LeaderAndIsr come first); -1 when not found."""
    import datetime

    with open(log_path, "rb") as f:
        f.seek(offset)
        for line in f.read().decode(errors="replace").splitlines():
            if f" fetches {topic}-0 from leader " in line:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                return stamp.timestamp() - wall0
    return -1.0


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/<pid>/stat), seconds: on two shared cores, CPU per GiB is the steadier
    measure of the follower's work than wall time."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_replication(results: dict) -> None:
    why = missing()
    if why:
        print(f"replication skipped: {why}")
        return
    d = scratch_dir()
    zk = ZooKeeperServer(d / "zk").start()
    cluster = Cluster(d, zk.connect(), **{"replica.lag.time.max.ms": LAG_TIME_MS,
                                          "log.segment.bytes": 256 * MiB}).start()
    try:
        cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=60)
        if PARTS & {"throughput", "latency"}:
            _throughput(cluster, results)
        if "latency" in PARTS:
            _latency(cluster, results)
        if "failover" in PARTS:
            _failover(cluster, results)
        if "catchup" in PARTS:
            _catch_up(cluster, results, d)
        if "reassign" in PARTS:
            _reassign(cluster, results, d)
    finally:
        cluster.stop()
        zk.stop()
        shutil.rmtree(d, ignore_errors=True)


ALL = {"replication": bench_replication}
