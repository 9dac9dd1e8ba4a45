"""The fault tests' workload: real producers writing unique values, and a
fresh consumer reading everything back afterwards.

Each producer is a confluent-kafka (librdkafka) Producer on its own thread, idempotent with acks=all by
default, writing "<producer>-<seq>" round-robin over the partitions at a modest rate (the machine has two
cores shared with ZooKeeper and three brokers). Every send is recorded with its outcome:

- ok: acknowledged, with its partition and offset;
- fail: definitively refused before it was appended (e.g. NOT_ENOUGH_REPLICAS on a send's only attempt,
  `retries=0`): such a record must never be readable (Jepsen's "aborted read" if it is);
- timeout: anything else that did not succeed (the message timed out, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
  REQUEST_TIMED_OUT, a lost connection): it may or may not be in the log, so it may be read but need not be.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaTimeoutError

from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey, ErrorCode

# Broker answers that mean "not appended": the record cannot appear later. Only trusted when librdkafka reports
# them as the final error of a send it did not retry after an indeterminate attempt (retries=0, or idempotent
# sends, where librdkafka retries retriable errors until the message times out and reports that instead).
DEFINITE_FAILURES = frozenset({
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_REQUIRED_ACKS,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.INVALID_MSG, KafkaError.INVALID_RECORD,
})


@dataclass
class Send:
    """One record a producer sent and what became of it."""

    id: str
    partition: int
    sent_at: float  # time.monotonic() when produce() was called
    outcome: str = "pending"  # ok / fail / timeout
    offset: int | None = None
    acked_at: float | None = None
    error: str = ""


@dataclass
class _ProducerThread:
    name: str
    producer: Any
    thread: threading.Thread | None = None
    sends: list[Send] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # client-level errors (fatal ones fail the scenario)


class Workload:
    """`producers` threads writing `rate` records/s each to `topic`'s `partitions` until `stop()`.

    A context manager: leaving it stops the threads and flushes (bounded by `flush_s`), even on failure.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int = 3, *, producers: int = 2, rate: float = 500,
                 acks: str = "all", idempotent: bool = True, delivery_timeout_ms: int = 30000,
                 flush_s: float = 45, extra: dict[str, Any] | None = None, name: str = "p") -> None:
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.flush_s = flush_s
        self._stop = threading.Event()
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": idempotent,
            "message.timeout.ms": delivery_timeout_ms, "linger.ms": 5, "retry.backoff.ms": 100,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "socket.timeout.ms": 10000,
            "topic.metadata.refresh.interval.ms": 5000, **(extra or {}),
        }
        self._threads: list[_ProducerThread] = []
        for i in range(producers):
            pt = _ProducerThread(f"{name}{i}", None)
            pt.producer = Producer({**conf, "client.id": pt.name,
                                    "error_cb": lambda err, pt=pt: pt.errors.append(str(err))})
            self._threads.append(pt)

    @property
    def sends(self) -> list[Send]:
        return [s for pt in self._threads for s in pt.sends]

    @property
    def fatal_errors(self) -> list[str]:
        return [e for pt in self._threads for e in pt.errors if "fatal" in e.lower()]

    def start(self) -> Workload:
        for pt in self._threads:
            pt.thread = threading.Thread(target=self._run, args=(pt,), name=f"workload-{pt.name}", daemon=True)
            pt.thread.start()
        return self

    def stop(self) -> None:
        """Stop sending, then wait for every outstanding send's outcome (timeouts included)."""
        self._stop.set()
        for pt in self._threads:
            if pt.thread is not None:
                pt.thread.join(self.flush_s + 15)
        for pt in self._threads:
            for s in pt.sends:
                if s.outcome == "pending":  # flush gave up: the outcome is unknown
                    s.outcome, s.error = "timeout", "no delivery report before the workload stopped"

    def __enter__(self) -> Workload:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, pt: _ProducerThread) -> None:
        def report(err: KafkaError | None, msg: Any, send: Send) -> None:
            send.acked_at = time.monotonic()
            if err is None:
                send.outcome, send.offset = "ok", msg.offset()
            else:
                send.outcome = "fail" if err.code() in DEFINITE_FAILURES else "timeout"
                send.error = err.name()

        t0 = time.monotonic()
        seq = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while seq < due and not self._stop.is_set():
                send = Send(f"{pt.name}-{seq}", seq % self.partitions, time.monotonic())
                try:
                    pt.producer.produce(self.topic, value=send.id.encode(), partition=send.partition,
                                        on_delivery=lambda err, msg, send=send: report(err, msg, send))
                except BufferError:
                    pt.producer.poll(0.05)
                    continue
                pt.sends.append(send)
                seq += 1
            pt.producer.poll(0.005)
        pt.producer.flush(self.flush_s)
        # destroyed now (the last reference), not when the garbage collector breaks its cycle through error_cb:
        # a producer left alive keeps reconnecting to this test's stopped brokers during the tests that follow
        pt.producer = None

    # --- figures -------------------------------------------------------------------------------------------

    def first_ack_after(self, t: float, partitions: set[int] | None = None) -> float | None:
        """Seconds from `t` to the first acknowledged send produced at or after `t` (on `partitions`): the
        failover time a user sees. A send issued after a leader died can only be acknowledged by a new one."""
        acks = []
        for pt in self._threads:
            for s in reversed(pt.sends):  # appended in sent_at order: only the tail since `t` (soak runs are long)
                if s.sent_at < t:
                    break
                if s.outcome == "ok" and s.acked_at is not None and (partitions is None or s.partition in partitions):
                    acks.append(s.acked_at)
        return min(acks) - t if acks else None

    def wait_acked_after(self, t: float, partitions: set[int] | None = None, timeout_s: float = 30) -> float:
        """Block until `first_ack_after(t, partitions)` exists; returns it (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.first_ack_after(t, partitions)
            if got is not None:
                return got
            time.sleep(0.05)
        raise AssertionError(f"no acknowledged produce on partitions {partitions} within {timeout_s} s of the fault")


def probe_send(bootstrap: str, topic: str, partition: int, value: str, *, timeout_s: float = 10) -> Send:
    """One acks=all send with no retries (not idempotent, so librdkafka accepts retries=0): its error is the
    broker's answer to this one attempt, so NOT_ENOUGH_REPLICAS here is a definite refusal."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False, "retries": 0,
                  "message.timeout.ms": int(timeout_s * 1000), "linger.ms": 0})
    send = Send(value, partition, time.monotonic())

    def report(err: KafkaError | None, msg: Any) -> None:
        send.acked_at = time.monotonic()
        if err is None:
            send.outcome, send.offset = "ok", msg.offset()
        else:
            send.outcome = "fail" if err.code() in DEFINITE_FAILURES else "timeout"
            send.error = err.name()

    p.produce(topic, value=value.encode(), partition=partition, on_delivery=report)
    p.flush(timeout_s + 5)
    if send.outcome == "pending":
        send.outcome, send.error = "timeout", "no delivery report"
    return send


END_OFFSETS_TRY_S = 5.0


def fresh_consumer(bootstrap: str, tps: list[KafkaTopicPartition]) -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      isolation_level="read_uncommitted", request_timeout_ms=30000)
    c.assign(tps)
    return c


def end_offsets(c: KafkaConsumer, bootstrap: str, tps: list[KafkaTopicPartition], timeout_s: float = 60
                ) -> tuple[dict[int, int], KafkaConsumer]:
    """({partition: high watermark}, the consumer to go on with) through kafka-python's `end_offsets`, asked of a
    new consumer (so with fresh metadata) every END_OFFSETS_TRY_S. kafka-python 3.0.12 retries a ListOffsets
    answered NOT_LEADER_OR_FOLLOWER against the leader its metadata names without refreshing that metadata
    (`Fetcher._fetch_offsets_by_times_async`; its Fetch, offset-reset and OffsetsForLeaderEpoch paths do refresh,
    as Java's consumer does everywhere), so one whose metadata predates a leader change, e.g. a preferred election
    the moment the checker starts, asks the old leader until its timeout: a CI run of R8 failed so.
    `test_the_checker_reads_end_offsets_across_a_preferred_election` shows it. A broker cannot help: Kafka's
    answer is the same error."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = c.end_offsets(tps, timeout_ms=int(END_OFFSETS_TRY_S * 1000))
            return {tp.partition: off for tp, off in got.items()}, c
        except KafkaTimeoutError as exc:
            if time.monotonic() + END_OFFSETS_TRY_S > deadline:
                topic = tps[0].topic
                raise AssertionError(f"kafka-python's end_offsets of {topic} timed out for {timeout_s:.0f} s with "
                                     f"fresh metadata every {END_OFFSETS_TRY_S:.0f} s; what each broker says now: "
                                     f"{offsets_seen(bootstrap, topic, len(tps))}") from exc
            c.close()
            c = fresh_consumer(bootstrap, tps)


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60) -> tuple[
        dict[int, list[tuple[int, bytes]]], dict[int, int]]:
    """Every record of every partition from the log start to the high watermark, with a fresh consumer
    (kafka-python, read_uncommitted, no group: librdkafka's consumer needs a group.id, and its coordinator lookup
    would create __consumer_offsets, 50 more partitions to replicate mid-scenario); returns
    ({partition: [(offset, value)]}, {partition: high watermark})."""
    tps = [KafkaTopicPartition(topic, p) for p in range(partitions)]
    c = fresh_consumer(bootstrap, tps)
    try:
        hws, c = end_offsets(c, bootstrap, tps)
        c.seek_to_beginning(*tps)
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any(c.position(tp) < hws[tp.partition] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError(f"read_all: {topic} not read to its high watermarks {hws} within {timeout_s} s "
                                     f"(at {[c.position(tp) for tp in tps]})")
            for tp, msgs in c.poll(500, max_records=5000).items():
                out[tp.partition] += [(m.offset, m.value) for m in msgs if m.offset < hws[tp.partition]]
        return out, hws
    finally:
        c.close()


def offsets_seen(bootstrap: str, topic: str, partitions: int) -> str:
    """Each broker's Metadata (leader, leader epoch, ISR) and ListOffsets(latest) answer for every partition:
    what a checker that could not get the end offsets reports, so the failure says which broker refused what."""
    out = []
    for address in bootstrap.split(","):
        try:
            with KafkaClient(address, timeout_s=5) as c:
                md = c.metadata([topic])
                parts = {p["partition_index"]: p for t in md["topics"] for p in t["partitions"]}
                res = c.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "timestamp": -1} for p in range(partitions)]}]})
            answers = {a["partition_index"]: a for t in res["topics"] for a in t["partitions"]}
            seen = []
            for p in range(partitions):
                m, a = parts.get(p, {}), answers.get(p, {})
                seen.append(f"p{p} leader {m.get('leader_id')} epoch {m.get('leader_epoch')} isr {m.get('isr_nodes')}"
                            f" list-offsets {ErrorCode(a.get('error_code', 0)).name} {a.get('offset')}")
            out.append(f"{address}: " + "; ".join(seen))
        except Exception as exc:  # a diagnostic: whatever a broker does is reported, never raised
            out.append(f"{address}: {type(exc).__name__} {exc}")
    return " | ".join(out)
