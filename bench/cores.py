"""Using every core (issue 17): `python -m bench cores`.

A kafkalite broker is one asyncio event loop: one core. A bigger node runs several broker processes, each with
its own log.dirs and port, in one cluster (what `kafkalite cluster --brokers N` starts), with the partitions'
leadership spread over them (docs/scaling.md). This measures the aggregate produce and consume throughput of
1 and 2 broker processes on this machine under the same client load:

- one ZooKeeper; a 1-broker and a 2-broker cluster side by side (their own chroots), measured in interleaved
  repetitions so that both see the same background load;
- a topic of CLIENTS partitions (replication factor 1), partition i led by broker (i mod N) + 1;
- CLIENTS client processes (not threads: a Python client would otherwise share one core), client i pipelining
  1 MiB Produce requests (acks=1) to partition i's leader, then fetching that backlog back (8 MiB per fetch),
  all starting together (a barrier); the lean client of the broker benchmark (bench/broker.py), which sends
  prebuilt requests and does not open records, so that the client's CPU is small next to the brokers';
- the rate is the clients' bytes over the wall time from the first start to the last end; CPU seconds per GiB
  are read from /proc for each broker process and from each client, so the curve can be read on a machine
  whose cores the clients share with the brokers; "of the cores" is all that CPU over cores x wall time.

Limits of this machine in the same run: W16K (one writer's raw 16 KiB os.write) for produce, loopback sendfile
for consume. Sizes: BENCH_CORES_MIB (all clients together per repetition, default 256), BENCH_CORES_CLIENTS
(default 2), BENCH_REPEATS (capped at 3 here). Skipped with a message when ZooKeeper is not installed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench.broker import _loopback_sendfile, _raw_fetch, _raw_produce
from bench.common import REPEATS, GiB, MiB, fmt_rate, prefault, raw_write_16k, scratch_dir, timed
from kafkalite.protocol import ApiKey
from tests.support.cluster import Cluster
from tests.support.zookeeper import ZooKeeperServer, missing

DATA_BYTES = int(os.environ.get("BENCH_CORES_MIB", "256")) * MiB
CLIENTS = int(os.environ.get("BENCH_CORES_CLIENTS", "2"))
SIZES = (1, 2)
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _machine_busy_seconds() -> float:
    """CPU seconds all processes of the machine have run so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICK


def _client(kind: str, port: int, topic: str, partition: int, nbytes: int, barrier: Any, out: Any) -> None:
    """One client process: wait for the others, then produce or fetch `nbytes` of one partition; reports
    (bytes, start, end, CPU seconds) with start and end on the system-wide monotonic clock."""
    barrier.wait()
    cpu0 = time.process_time()
    if kind == "produce":
        n, took = _raw_produce(port, topic, nbytes, partition=partition)
    else:
        n, took = _raw_fetch(port, topic, nbytes, partition=partition)
    end = time.monotonic()
    out.put((n, end - took, end, time.process_time() - cpu0))


@dataclass
class Run:
    rate: float  # bytes per second, all clients together
    broker_cpu: list[float]  # CPU seconds per GiB, each broker process
    broker_busy: list[float]  # CPU seconds over wall seconds, each broker process (1.0: a whole core)
    client_cpu: float  # CPU seconds per GiB, all clients together
    busy: float  # all that CPU over (cores x wall time)
    others: float  # CPU of the rest of the machine (other processes) over (cores x wall time), same interval


@dataclass
class Setup:
    """One cluster of `size` broker processes and the topics written to it so far."""
    size: int
    cluster: Cluster
    topics: list[str] = field(default_factory=list)

    def leader_port(self, partition: int) -> int:
        return self.cluster.brokers[partition % self.size + 1].port

    def create_topic(self) -> str:
        topic = f"cores-{len(self.topics)}"
        assignments = [{"partition_index": i, "broker_ids": [i % self.size + 1]} for i in range(CLIENTS)]
        res = self.cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{
            "name": topic, "num_partitions": -1, "replication_factor": -1, "assignments": assignments,
            "configs": []}], "timeout_ms": 30000})
        assert res["topics"][0]["error_code"] == 0, res
        deadline = time.monotonic() + 30
        while True:  # every broker knows every leader (the clients go straight to them)
            views = [self.cluster.metadata(b, [topic])["topics"][0]["partitions"] for b in self.cluster.brokers]
            if all(len(v) == CLIENTS and all(p["leader_id"] == p["partition_index"] % self.size + 1 for p in v)
                   for v in views):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: leaders not known to every broker within 30 s: {views}")
            time.sleep(0.05)
        self.topics.append(topic)
        return topic

    def run(self, kind: str, topic: str) -> Run:
        ctx = mp.get_context("fork")
        barrier = ctx.Barrier(CLIENTS)
        out = ctx.Queue()
        each = DATA_BYTES // CLIENTS - (2 * MiB if kind == "fetch" else 0)  # the last fetch may hold a part batch
        pids = [b.proc.pid for b in self.cluster.brokers.values() if b.proc is not None]
        prefault()
        cpu0 = [_cpu_seconds(p) for p in pids]
        machine0, since = _machine_busy_seconds(), time.monotonic()
        procs = [ctx.Process(target=_client, args=(kind, self.leader_port(i), topic, i, each, barrier, out))
                 for i in range(CLIENTS)]
        for p in procs:
            p.start()
        got = [out.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(30)
            if p.exitcode != 0:
                raise RuntimeError(f"a {kind} client exited with {p.exitcode}")
        cpu = [_cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True)]
        machine = _machine_busy_seconds() - machine0
        total = sum(g[0] for g in got)
        wall = max(g[2] for g in got) - min(g[1] for g in got)
        client_cpu = sum(g[3] for g in got)
        gib = total / GiB
        cores = os.cpu_count() or 1
        span = time.monotonic() - since  # the machine's counter covers the clients' start and reaping too
        ours = sum(cpu) + client_cpu
        return Run(total / wall, [c / gib for c in cpu], [c / wall for c in cpu], client_cpu / gib,
                   ours / (cores * wall), max(0.0, machine - ours) / (cores * span))


def _median_run(runs: list[Run]) -> Run:
    return Run(statistics.median(r.rate for r in runs),
               [statistics.median(r.broker_cpu[i] for r in runs) for i in range(len(runs[0].broker_cpu))],
               [statistics.median(r.broker_busy[i] for r in runs) for i in range(len(runs[0].broker_cpu))],
               statistics.median(r.client_cpu for r in runs), statistics.median(r.busy for r in runs),
               statistics.median(r.others for r in runs))


def bench_cores(results: dict) -> None:
    why = missing()
    if why:
        print(f"cores skipped: {why}")
        return
    d = scratch_dir()
    zk = ZooKeeperServer(d / "zk").start()
    setups: dict[int, Setup] = {}
    try:
        for n in SIZES:
            cluster = Cluster(d / f"n{n}", zk.connect(f"cores{n}"), size=n, **{"log.segment.bytes": 256 * MiB})
            setups[n] = Setup(n, cluster)
            cluster.start()
        for s in setups.values():
            s.cluster.agreed_view(lambda v, s=s: len(v[1]) == s.size, timeout_s=60)
        repeats = max(1, min(REPEATS, 3))
        w16k = raw_write_16k(d / "raw")
        sendfile = _loopback_sendfile(d / "sf", DATA_BYTES)
        runs: dict[tuple[str, int], list[Run]] = {}
        limits: dict[str, list[float]] = {"produce": [], "fetch": []}
        for _ in range(repeats):
            limits["produce"].append(timed(w16k))
            for n, s in setups.items():
                runs.setdefault(("produce", n), []).append(s.run("produce", s.create_topic()))
        for _ in range(repeats):
            limits["fetch"].append(timed(sendfile))
            for n, s in setups.items():
                runs.setdefault(("fetch", n), []).append(s.run("fetch", s.topics[0]))
        names = {"produce": ("produce, acks=1, 1 MiB requests", "W16K"),
                 "fetch": ("fetch a backlog", "loopback sendfile")}
        for kind in ("produce", "fetch"):
            limit = statistics.median(limits[kind])
            one = _median_run(runs[(kind, 1)])
            for n in SIZES:
                r = _median_run(runs[(kind, n)])
                per = ", ".join(f"{c:.2f} ({b:.0%} of a core)" for c, b in zip(r.broker_cpu, r.broker_busy,
                                                                                 strict=True))
                scale = f"{r.rate / one.rate:.2f}x 1 process; " if n > 1 else ""
                results[f"cores: {names[kind][0]}, {n} broker process{'es' if n > 1 else ''}, {CLIENTS} clients"] = (
                    fmt_rate(r.rate),
                    f"{scale}{r.rate / limit:.0%} of {names[kind][1]} ({fmt_rate(limit)}); CPU s/GiB: brokers {per}, "
                    f"clients {r.client_cpu:.2f}; ours {r.busy:.0%} of the cores, other processes {r.others:.0%}",
                    "curve (docs/scaling.md)")
    finally:
        for s in setups.values():
            s.cluster.stop()
        zk.stop()
        shutil.rmtree(d, ignore_errors=True)


ALL = {"cores": bench_cores}
