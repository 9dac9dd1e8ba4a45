"""Protocol codec benchmarks: Produce request decode and Fetch response encode, the broker's hot paths.

Rates are messages per second for one core. The reference is kafka-python 3.0.12's codec (also
generated from Kafka's schemas, also pure Python) on the same messages, when it is installed; its
Fetch encode gets the record bytes in memory, ours a FileRegion (what the broker hands over), so
ours does strictly less copying there by design.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from tqdm import tqdm

from bench.common import median_rates
from kafkalite.protocol import ApiKey, FileRegion, RequestHeader, decode_request, encode_request, encode_response

BATCH = 16 * 1024  # one 16 KiB record batch per partition, like a busy librdkafka producer
PRODUCE_VERSION = 9
FETCH_VERSION = 12
SECONDS = float(os.environ.get("BENCH_PROTOCOL_SECONDS", "0.5"))


def _topics(partitions: int) -> list[tuple[str, list[int]]]:
    per_topic = min(partitions, 4)
    return [(f"topic-{t}", list(range(per_topic))) for t in range(max(1, partitions // per_topic))]


def produce_body(partitions: int, records: bytes) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": name, "partition_data": [{"index": p, "records": records} for p in parts]}
        for name, parts in _topics(partitions)]}


def fetch_body(partitions: int, records: object) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": name, "partitions": [
            {"partition_index": p, "error_code": 0, "high_watermark": 1_000_000, "last_stable_offset": 1_000_000,
             "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": records}
            for p in parts]}
        for name, parts in _topics(partitions)]}


def _loop(op: Callable[[], object]) -> Callable[[], tuple[int, float]]:
    """Run op for about SECONDS; returns (calls, seconds) for median_rates."""

    def run() -> tuple[int, float]:
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + SECONDS
        while True:
            for _ in range(100):
                op()
            n += 100
            now = time.perf_counter()
            if now >= deadline:
                return n, now - t0

    return run


def _kafka_python() -> tuple[Callable, Callable] | None:
    try:
        from kafka.protocol.consumer import FetchResponse
        from kafka.protocol.producer import ProduceRequest
    except ImportError:
        return None

    def decode(frame: bytes) -> object:
        return ProduceRequest.decode(frame, version=PRODUCE_VERSION, header=True)

    def encode(partitions: int, records: bytes) -> Callable[[], object]:
        F = FetchResponse
        topics = [F.FetchableTopicResponse(topic=name, partitions=[F.FetchableTopicResponse.PartitionData(
            partition_index=p, error_code=0, high_watermark=1_000_000, last_stable_offset=1_000_000,
            log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1, records=records)
            for p in parts]) for name, parts in _topics(partitions)]

        def run() -> object:
            msg = F[FETCH_VERSION](throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
            msg.with_header(correlation_id=7)
            return msg.encode(header=True, framed=True)

        return run

    return decode, encode


def bench_protocol(results: dict) -> None:
    records = os.urandom(BATCH)
    region = FileRegion(0, 0, BATCH)  # never read: encode_response only hands it back
    header = RequestHeader(ApiKey.FETCH, FETCH_VERSION, 7, "bench")
    kp = _kafka_python()
    fns: dict[str, Callable[[], tuple[int, float]]] = {}
    for partitions in (1, 16):
        frame = encode_request(ApiKey.PRODUCE, PRODUCE_VERSION, 7, "bench", produce_body(partitions, records))[4:]
        body = fetch_body(partitions, region)
        fns[f"produce-{partitions}"] = _loop(lambda f=frame: decode_request(f))
        fns[f"fetch-{partitions}"] = _loop(lambda b=body: encode_response(header, b))
        if kp is not None:
            fns[f"kp-produce-{partitions}"] = _loop(lambda f=frame: kp[0](f))
            fns[f"kp-fetch-{partitions}"] = _loop(kp[1](partitions, records))
    with tqdm(total=len(fns) * 3, desc="protocol codec", leave=False) as bar:
        rates = median_rates(fns, repeats=3, progress=bar)
    for partitions in (1, 16):
        for what, label in (("produce", f"Produce v{PRODUCE_VERSION} request decode"),
                            ("fetch", f"Fetch v{FETCH_VERSION} response encode (FileRegion records)")):
            ours = rates[f"{what}-{partitions}"]
            theirs = rates.get(f"kp-{what}-{partitions}")
            ratio = f"{ours / theirs:.1f}x kafka-python ({theirs:,.0f}/s)" if theirs else "-"
            results[f"{label}, {partitions} partition{'s' if partitions > 1 else ''}"] = (
                f"{ours:,.0f}/s", ratio, "informational")


ALL = {"protocol": bench_protocol}
