"""Consumer groups with real clients against `kafkalite serve`: assignment, rebalances on join/leave/kill,
commits that survive a broker restart, and `kafkalite groups`."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.records import SimpleRecord, build_batch
from tests.support.brokers import BrokerProcess

ck = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", {"num.partitions": 6}).start()
    yield b
    assert b.stop() == 0, b.output()


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    with KafkaClient(bootstrap) as c:
        with contextlib.suppress(KafkaClientError):  # already there
            c.create_topic(topic, partitions, 1)
        now = int(time.time() * 1000)
        for p in range(partitions):
            c.produce(topic, p, bytes(build_batch([SimpleRecord(b"%d" % p, b"%d-%d" % (p, i), now)
                                                   for i in range(per_partition)])))


def consumer(bootstrap: str, group: str, **extra) -> ck.Consumer:
    return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, "session.timeout.ms": 6000,
                        "heartbeat.interval.ms": 500, **extra})


def poll_until(consumers: list, predicate, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.1)
        if predicate():
            return
    raise AssertionError("condition not reached in time")


def assignments(consumers: list) -> list[set[tuple[str, int]]]:
    return [{(tp.topic, tp.partition) for tp in c.assignment()} for c in consumers]


def test_three_consumers_six_partitions_then_join_leave_and_kill(broker, tmp_path):
    topic = f"g-{uuid.uuid4().hex[:6]}"
    group = f"grp-{uuid.uuid4().hex[:6]}"
    fill(broker.bootstrap, topic, 6, 5)
    everything = {(topic, p) for p in range(6)}
    cs = [consumer(broker.bootstrap, group) for _ in range(3)]
    for c in cs:
        c.subscribe([topic])

    def disjoint_complete(members: list) -> bool:
        sets = assignments(members)
        return all(sets) and sum(len(s) for s in sets) == 6 and set().union(*sets) == everything

    poll_until(cs, lambda: disjoint_complete(cs))
    assert [len(s) for s in assignments(cs)] == [2, 2, 2]

    # a fourth member joins: a rebalance, still disjoint and complete
    joiner = consumer(broker.bootstrap, group)
    joiner.subscribe([topic])
    poll_until([*cs, joiner], lambda: disjoint_complete([*cs, joiner]))

    # it leaves cleanly: the other three take its partitions back
    joiner.close()
    poll_until(cs, lambda: disjoint_complete(cs))

    # a member in another process is killed: after its session timeout the others own everything
    script = tmp_path / "member.py"
    script.write_text(textwrap.dedent(f"""
        import confluent_kafka, sys, time
        c = confluent_kafka.Consumer({{"bootstrap.servers": "{broker.bootstrap}", "group.id": "{group}",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False}})
        c.subscribe(["{topic}"])
        while True:
            c.poll(0.1)
            if c.assignment():
                print("assigned", flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for c in cs:
                c.poll(0.1)
            if sum(len(s) for s in assignments(cs)) < 6:
                break
        assert sum(len(s) for s in assignments(cs)) < 6, "the fourth member never got partitions"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    started = time.monotonic()
    poll_until(cs, lambda: disjoint_complete(cs), timeout_s=30)
    assert time.monotonic() - started < 20  # session.timeout.ms 6 s + a rebalance
    for c in cs:
        c.close()


def test_commits_survive_a_broker_restart_and_consumers_resume_exactly(tmp_path):
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    topic, group = "resume", "resumers"
    fill(b.bootstrap, topic, 2, 50)
    c = consumer(b.bootstrap, group)
    c.subscribe([topic])
    seen: list[tuple[int, int]] = []
    poll_until([c], lambda: len(c.assignment()) == 2)
    deadline = time.monotonic() + 20
    while len(seen) < 60 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            seen.append((m.partition(), m.offset()))
    c.commit(asynchronous=False)
    c.close()
    assert b.stop() == 0, b.output()

    b = BrokerProcess(data, port=b.port).start()
    try:
        r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "groups", "--bootstrap-server", b.bootstrap,
                            "--describe", "--group", group], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "CURRENT-OFFSET" in r.stdout and "resume" in r.stdout
        lag_total = sum(int(line.split()[5]) for line in r.stdout.splitlines()[1:] if line.startswith(group))
        assert lag_total == 100 - len(seen)
        c = consumer(b.bootstrap, group)
        c.subscribe([topic])
        rest: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while len(seen) + len(rest) < 100 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                rest.append((m.partition(), m.offset()))
        c.close()
        assert sorted(seen + rest) == sorted((p, o) for p in range(2) for o in range(50))  # nothing lost or twice
        listed = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "groups", "--bootstrap-server",
                                 b.bootstrap, "--list"], capture_output=True, text=True, timeout=60)
        assert group in listed.stdout.split()
    finally:
        assert b.stop() == 0, b.output()


def test_group_join_with_default_settings_under_five_seconds(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": 3000}).start()
    try:
        fill(b.bootstrap, "defaults", 1, 3)
        c = ck.Consumer({"bootstrap.servers": b.bootstrap, "group.id": "default-group",
                         "auto.offset.reset": "earliest"})
        started = time.monotonic()
        c.subscribe(["defaults"])
        got = None
        while got is None and time.monotonic() - started < 15:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got = m
        elapsed = time.monotonic() - started
        c.close()
        assert got is not None and elapsed < 5, elapsed
    finally:
        assert b.stop() == 0, b.output()


def test_kafka_python_group_consume_and_commit(broker):
    kafka = pytest.importorskip("kafka")
    topic = f"kpg-{uuid.uuid4().hex[:6]}"
    fill(broker.bootstrap, topic, 3, 10)
    c = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="kp-group",
                            auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=10000)
    got = []
    for m in c:
        got.append((m.partition, m.offset))
        if len(got) == 30:
            break
    c.commit()
    committed = {p: c.committed(kafka.TopicPartition(topic, p)) for p in range(3)}
    c.close()
    assert sorted(got) == sorted((p, o) for p in range(3) for o in range(10))
    assert committed == {0: 10, 1: 10, 2: 10}


def test_aiokafka_group(broker):
    aiokafka = pytest.importorskip("aiokafka")
    topic = f"aiog-{uuid.uuid4().hex[:6]}"
    fill(broker.bootstrap, topic, 2, 10)

    async def go():
        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="aio-group",
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            got = []
            while len(got) < 20:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 20)
                for msgs in batch.values():
                    got.extend((m.partition, m.offset) for m in msgs)
            await c.commit()
            tp = aiokafka.TopicPartition(topic, 0)
            return got, await c.committed(tp)
        finally:
            await c.stop()

    got, committed = asyncio.run(go())
    assert sorted(got) == sorted((p, o) for p in range(2) for o in range(10))
    assert committed == 10


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/run installs it)")
def test_kcat_balanced_consumer(broker):
    topic = f"kcg-{uuid.uuid4().hex[:6]}"
    fill(broker.bootstrap, topic, 2, 5)
    r = subprocess.run(["kcat", "-b", broker.bootstrap, "-G", "kcat-group", "-o", "beginning", "-e", "-f", "%p:%o\n",
                        "-X", "session.timeout.ms=6000", topic], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    lines = sorted(r.stdout.decode().split())
    assert lines == sorted(f"{p}:{o}" for p in range(2) for o in range(5))
