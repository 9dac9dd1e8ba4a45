"""Broker benchmarks (issue 5), with confluent-kafka (librdkafka) as the client and a real `kafkalite serve`.

- produce: 1 KiB records, acks=1, one partition, vs W16K (raw 16 KiB os.write) in the same run;
- consume: a backlog read by assign() from the beginning, vs loopback sendfile bandwidth;
- latency: produce p99 at low load (one record in flight), vs the blocking loopback round trip.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import threading
import time

from tqdm import tqdm

from bench.common import DATA_BYTES, KiB, MiB, fmt_rate, median_rates, prefault, raw_write_16k, scratch_dir
from tests.brokerutil import BrokerProcess

RECORD = 1 * KiB


def _producer(bootstrap: str, **extra: object):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                     "compression.type": "none", "queue.buffering.max.kbytes": 1 << 20, **extra})


def _produce_all(bootstrap: str, topic: str, total: int) -> tuple[int, float]:
    p = _producer(bootstrap)
    value = os.urandom(RECORD)
    n = total // RECORD
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.001)
    p.flush(120)
    return n * RECORD, time.perf_counter() - t0


def _consume_all(bootstrap: str, topic: str, total: int) -> tuple[int, float]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 * MiB, "max.partition.fetch.bytes": 8 * MiB,
                  "queued.max.messages.kbytes": 256 * 1024})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    want = total // RECORD
    got = 0
    size = 0
    t0 = None  # from the first record: the backlog rate, not the client's connect and offset lookup
    while got < want:
        for m in c.consume(10_000, timeout=1.0):
            if m.error() is None:
                if t0 is None:
                    t0 = time.perf_counter()
                got += 1
                size += len(m.value())
    elapsed = time.perf_counter() - (t0 or time.perf_counter())
    c.close()
    return size, elapsed


def _loopback_sendfile(path, total: int):
    """SF: the machine's loopback sendfile bandwidth for a cached file, reader draining into a buffer."""
    with open(path, "wb") as f:
        block = os.urandom(MiB)
        for _ in range(total // MiB):
            f.write(block)

    def run() -> tuple[int, float]:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        result: list[float] = []

        def sender() -> None:
            conn, _ = srv.accept()
            with conn, open(path, "rb") as f:
                sent = 0
                while sent < total:
                    sent += os.sendfile(conn.fileno(), f.fileno(), sent, total - sent)

        t = threading.Thread(target=sender)
        t.start()
        cli = socket.create_connection(("127.0.0.1", port))
        buf = bytearray(MiB)
        mv = memoryview(buf)
        n = 0
        t0 = time.perf_counter()
        while n < total:
            k = cli.recv_into(mv)
            if not k:
                break
            n += k
        result.append(time.perf_counter() - t0)
        cli.close()
        t.join()
        srv.close()
        return n, result[0]

    return run


def _rtt_samples(n: int = 2000) -> list[float]:
    """Blocking loopback round trips of a 1 KiB message through an echo thread."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo() -> None:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    cli = socket.create_connection(srv.getsockname())
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = os.urandom(RECORD)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        cli.sendall(msg)
        got = 0
        while got < len(msg):
            got += len(cli.recv(65536))
        out.append(time.perf_counter() - t0)
    cli.close()
    srv.close()
    return out


def _p(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100)[int(q) - 1]


def bench_broker(results: dict) -> None:
    d = scratch_dir()
    broker = BrokerProcess(d / "data", {"log.segment.bytes": 256 * MiB}).start()
    topic_n = [0]
    try:
        def produce() -> tuple[int, float]:
            topic_n[0] += 1
            return _produce_all(broker.bootstrap, f"bench-{topic_n[0]}", DATA_BYTES)

        with tqdm(total=10, desc="broker produce vs W16K", leave=False) as bar:
            rates = median_rates({"W16K": raw_write_16k(d / "raw"), "produce": produce}, progress=bar)
        results["broker produce, acks=1, 1 KiB records (confluent-kafka)"] = (
            fmt_rate(rates["produce"]), f"{rates['produce'] / rates['W16K']:.0%} of W16K "
            f"({fmt_rate(rates['W16K'])})", ">= 25%")

        backlog = "bench-1"  # written by the first produce round

        def consume() -> tuple[int, float]:
            return _consume_all(broker.bootstrap, backlog, DATA_BYTES)

        with tqdm(total=6, desc="broker consume vs sendfile", leave=False) as bar:
            rates = median_rates({"SF": _loopback_sendfile(d / "sf", DATA_BYTES), "consume": consume}, repeats=3,
                                 progress=bar)
        results["broker consume backlog, 1 KiB records (confluent-kafka)"] = (
            fmt_rate(rates["consume"]), f"{rates['consume'] / rates['SF']:.0%} of loopback sendfile "
            f"({fmt_rate(rates['SF'])})", ">= 60%")

        prefault()
        rtt = _rtt_samples()
        p = _producer(broker.bootstrap, **{"linger.ms": 0, "socket.nagle.disable": True})
        lat = []
        value = os.urandom(RECORD)
        for _ in tqdm(range(1000), desc="broker produce latency", leave=False):
            done = threading.Event()
            t0 = time.perf_counter()
            p.produce("bench-latency", value, on_delivery=lambda err, msg, done=done: done.set())
            while not done.is_set():
                p.poll(0.0005)
            lat.append(time.perf_counter() - t0)
        p99, rtt_med = _p(lat[100:], 99), statistics.median(rtt)
        results["broker produce latency p99, low load"] = (
            f"{p99 * 1e6:,.0f} µs (median {statistics.median(lat) * 1e6:,.0f} µs)",
            f"{p99 / rtt_med:.1f}x the loopback round trip ({rtt_med * 1e6:,.0f} µs median, "
            f"{_p(rtt, 99) * 1e6:,.0f} µs p99)", "<= 5x")
    finally:
        broker.stop()
        shutil.rmtree(d, ignore_errors=True)


ALL = {"broker": bench_broker}
