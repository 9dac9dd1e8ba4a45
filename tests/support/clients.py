"""Real-client helpers for tests against a broker process: produce, consume and create a topic with
confluent-kafka (librdkafka), the client most Kafka users run."""

from __future__ import annotations

import time
import uuid

import confluent_kafka as ck
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.brokers import BrokerProcess


def produce(broker: BrokerProcess, topic: str, values: list[bytes], extra: dict | None = None) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "acks": "all", **(extra or {})})
    errors = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _msg: errors.append(err) if err else None)
    assert p.flush(20) == 0
    assert errors == []


def consume_values(broker: BrokerProcess, topic: str, n: int, timeout_s: float = 20) -> list[bytes]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tests", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(m.value())
    finally:
        c.close()
    return out


def create_topic(broker: BrokerProcess) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=15)
    return name


