"""Latency benchmarks of issue 17 that are not the broker's own (bench/broker.py has `broker-latency`).

- `replication-latency`: acks=all vs acks=1 in a 3-broker cluster, alone;
- `asyncio-floor`: what any Python asyncio server costs per request, whatever it does: a server process that
  answers each 1 KiB length-prefixed request with 12 bytes, written with asyncio streams (`readexactly`, then
  `write` and `drain`, as the broker reads today) and with a `BufferedProtocol` (bytes received into a reusable
  buffer, answered from `buffer_updated`), vs the blocking loopback round trip, all interleaved. The broker's
  latency is this floor plus its own request handling.

replication-latency's measurement is bench/replication.py's (acks=all to a replication-factor-3 topic with
min.insync.replicas 2 vs acks=1 to a replication-factor-1 topic on the same leader, one record in flight, a client
that waits in poll(timeout) rather than spinning); this runs only that part, BENCH_LATENCY_RUNS times (default 3)
against one cluster, each run reported, without the throughput, failover and catch-up runs around it.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

from bench import replication
from bench.broker import RECORD, _against_loopback, _quantiles
from bench.common import MiB, scratch_dir
from tests.support.cluster import Cluster
from tests.support.zookeeper import ZooKeeperServer, missing

RUNS = int(os.environ.get("BENCH_LATENCY_RUNS", "3"))


def bench_replication_latency(results: dict) -> None:
    why = missing()
    if why:
        print(f"replication-latency skipped: {why}")
        return
    d = scratch_dir()
    zk = ZooKeeperServer(d / "zk").start()
    cluster = Cluster(d, zk.connect(), **{"log.segment.bytes": 256 * MiB}).start()
    try:
        cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=60)
        replication._create(cluster, "rf1", [1])
        replication._create(cluster, "rf3", [1, 2, 3], min_isr=2)
        for run in range(1, RUNS + 1):
            one: dict = {}
            replication._latency(cluster, one)
            for label, row in one.items():
                results[f"{label} (run {run})"] = row
    finally:
        cluster.stop()
        zk.stop()
        shutil.rmtree(d, ignore_errors=True)


_FLOOR_SERVER = r'''
import asyncio, gc, sys

async def streams(reader, writer):
    writer.get_extra_info("socket").setsockopt(6, 1, 1)  # TCP_NODELAY
    while True:
        body = await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
        writer.write(b"\x00\x00\x00\x08" + body[:8])
        await writer.drain()

class Proto(asyncio.BufferedProtocol):
    def __init__(self):
        self.buf, self.n = bytearray(1 << 20), 0
    def connection_made(self, t):
        self.t = t
        t.get_extra_info("socket").setsockopt(6, 1, 1)
    def get_buffer(self, hint):
        return memoryview(self.buf)[self.n:]
    def buffer_updated(self, k):
        self.n += k
        while self.n >= 4:
            size = int.from_bytes(self.buf[:4], "big")
            if self.n < 4 + size:
                return
            self.t.write(b"\x00\x00\x00\x08" + bytes(self.buf[4:12]))
            self.buf[:self.n - 4 - size] = self.buf[4 + size:self.n]
            self.n -= 4 + size

async def main():
    loop = asyncio.get_running_loop()
    if sys.argv[1] == "streams":
        srv = await asyncio.start_server(streams, "127.0.0.1", 0)
    else:
        srv = await loop.create_server(Proto, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

gc.freeze()
asyncio.run(main())
'''


class _FloorServer:
    """A request to the floor server (one process, `kind` streams or protocol) and its answer, blocking."""

    def __init__(self, kind: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _FLOOR_SERVER, kind], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.sock = socket.create_connection(("127.0.0.1", int(self.proc.stdout.readline())))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.msg = RECORD.to_bytes(4, "big") + os.urandom(RECORD)

    def one(self) -> float:
        t0 = time.perf_counter()
        self.sock.sendall(self.msg)
        got = 0
        while got < 12:
            k = len(self.sock.recv(64))
            if not k:
                raise ConnectionError("the floor server closed the connection")
            got += k
        return time.perf_counter() - t0

    def close(self) -> None:
        self.sock.close()
        self.proc.kill()
        self.proc.wait()


def bench_asyncio_floor(results: dict) -> None:
    lat, loopback, _ = _against_loopback({"asyncio streams": _FloorServer("streams"),
                                          "asyncio BufferedProtocol": _FloorServer("protocol")})
    rtt = statistics.median(loopback)
    for name, xs in lat.items():
        p50, p99, p999 = _quantiles(xs)
        results[f"latency floor of a Python server answering at once ({name})"] = (
            f"{p99 * 1e6:,.0f} µs (p50 {p50 * 1e6:,.0f}, p99.9 {p999 * 1e6:,.0f} µs)",
            f"{p99 / rtt:.1f}x the loopback round trip ({rtt * 1e6:,.0f} µs); p50 {p50 / rtt:.1f}x", "reference")


ALL = {"replication-latency": bench_replication_latency, "asyncio-floor": bench_asyncio_floor}
