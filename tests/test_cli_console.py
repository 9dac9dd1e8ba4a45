"""`kafkalite produce` / `consume` against a real broker, checked with real clients: keyed records land where
Java's partitioner puts them, every partition is read, and a --group consumer is a real group member."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kafkalite.partitioner import murmur2, partition_for_key
from tests.support.brokers import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("console") / "data", {"num.partitions": 3}).start()
    yield b
    assert b.stop() == 0, b.output()


def kl(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[tuple[int, bytes | None, bytes]]:
    """(partition, key, value) of every record, read by librdkafka."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append((m.partition(), m.key(), m.value()))
    c.close()
    return out


# --- the partitioner -----------------------------------------------------------------------------


def test_murmur2_matches_kafkas_own_test_vectors():
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829, b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}
    for data, expected in cases.items():
        assert murmur2(data) == expected, data


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_matches_kafka_python(key, partitions):
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)
    assert partition_for_key(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


# --- produce -------------------------------------------------------------------------------------


def test_keyed_records_go_where_javas_partitioner_and_librdkafka_put_them(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "keyed", "--partitions", "3").returncode == 0
    lines = "".join(f"user-{i}:v{i}\n" for i in range(300))
    r = kl("produce", *bs, "--topic", "keyed", "--property", "parse.key=true", "--property", "key.separator=:",
           stdin=lines)
    assert r.returncode == 0, r.stderr
    got = read_all(broker.bootstrap, "keyed", 3, 300)
    assert len(got) == 300
    assert {p for p, _, _ in got} == {0, 1, 2}
    for p, key, value in got:
        assert p == partition_for_key(key, 3), key
        assert value == b"v" + key[5:]
    # librdkafka's Java-compatible partitioner agrees for the same keys
    prod = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    placed = {}
    for i in range(0, 300, 7):
        prod.produce("keyed", key=f"user-{i}".encode(), value=b"x",
                     on_delivery=lambda err, m: placed.__setitem__(m.key(), m.partition()))
    prod.flush(10)
    assert placed and all(p == partition_for_key(k, 3) for k, p in placed.items())


def test_keyless_records_spread_and_partition_forces_one(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "keyless", "--partitions", "3").returncode == 0
    r = kl("produce", *bs, "--topic", "keyless", "--batch-size", "50", stdin="".join(f"{i}\n" for i in range(300)))
    assert r.returncode == 0, r.stderr
    got = read_all(broker.bootstrap, "keyless", 3, 300)
    counts = {p: sum(1 for q, _, _ in got if q == p) for p in range(3)}
    assert sum(counts.values()) == 300 and min(counts.values()) >= 50, counts
    r = kl("produce", *bs, "--topic", "keyless", "--partition", "2", "--key-separator", ":",
           stdin="".join(f"k{i}:{i}\n" for i in range(30)))
    assert r.returncode == 0 and "keyless-2: 30" in r.stderr, r.stderr
    r = kl("produce", *bs, "--topic", "keyless", "--partition", "3", stdin="x\n")
    assert r.returncode == 1 and "partition 3 does not exist" in r.stderr


def test_produce_auto_creates_the_topic(broker):
    r = kl("produce", "--bootstrap-server", broker.bootstrap, "--topic", "made-on-demand", stdin="a\nb\n")
    assert r.returncode == 0, r.stderr
    r = kl("topics", "--bootstrap-server", broker.bootstrap, "--describe", "--topic", "made-on-demand")
    assert "PartitionCount: 3" in r.stdout


def test_produce_headers_null_marker_and_property_errors(broker):
    bs = ["--bootstrap-server", broker.bootstrap, "--topic", "headed"]
    props = ["--property", "parse.headers=true", "--property", "parse.key=true", "--property", "key.separator=|",
             "--property", "headers.delimiter=;", "--property", "null.marker=NULL", "--partition", "0"]
    r = kl("produce", *bs, *props, stdin="h1:a,h2:b;k1|v1\n;k2|NULL\n")
    assert r.returncode == 0, r.stderr
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "h", "enable.auto.commit": False})
    c.assign([TopicPartition("headed", 0, 0)])
    msgs = []
    deadline = time.monotonic() + 20
    while len(msgs) < 2 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            msgs.append(m)
    c.close()
    assert [(m.key(), m.value(), m.headers()) for m in msgs] == [
        (b"k1", b"v1", [("h1", b"a"), ("h2", b"b")]), (b"k2", None, None)]
    r = kl("produce", *bs, "--property", "parse.kye=true", stdin="x\n")
    assert r.returncode == 1 and "parse.kye" in r.stderr and "parse.key" in r.stderr and "ignore.error" in r.stderr
    r = kl("produce", *bs, "--producer-property", "linger.ms=5", stdin="x\n")
    assert r.returncode == 1 and "linger.ms" in r.stderr and "acks" in r.stderr
    # a line without the key separator is an error naming its line number, unless ignore.error
    r = kl("produce", *bs, "--key-separator", ":", stdin="a:1\nno separator\n")
    assert r.returncode == 1 and "line number 2" in r.stderr
    r = kl("produce", *bs, "--key-separator", ":", "--property", "ignore.error=true", "--producer-property",
           "acks=all", stdin="a:1\nno separator\n")
    assert r.returncode == 0 and "Produced 2 records" in r.stderr, r.stderr


# --- consume -------------------------------------------------------------------------------------


def test_consume_reads_every_partition(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "all-parts", "--partitions", "3").returncode == 0
    assert kl("produce", *bs, "--topic", "all-parts", "--key-separator", ":",
              stdin="".join(f"k{i}:{i}\n" for i in range(300))).returncode == 0
    r = kl("consume", *bs, "--topic", "all-parts", "--from-beginning", "--timeout-ms", "1500")
    assert r.returncode == 0, r.stderr
    assert sorted(map(int, r.stdout.split())) == list(range(300))
    assert "Processed a total of 300 messages" in r.stderr
    # --partition narrows; --offset (with --partition) starts there; print.partition/key/timestamp format
    expected = sorted(i for i in range(300) if partition_for_key(f"k{i}".encode(), 3) == 1)
    r = kl("consume", *bs, "--topic", "all-parts", "--partition", "1", "--offset", "earliest", "--timeout-ms", "1000",
           "--property", "print.partition=true", "--property", "print.key=true", "--property", "key.separator=,")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"Partition:1,k{i},{i}" for i in expected]
    r = kl("consume", *bs, "--topic", "all-parts", "--partition", "1", "--offset", "5", "--max-messages", "1",
           "--property", "print.offset=true", "--property", "print.timestamp=true")
    assert r.returncode == 0 and r.stdout.startswith("CreateTime:") and f"\tOffset:5\t{expected[5]}\n" in r.stdout
    r = kl("consume", *bs, "--topic", "all-parts", "--offset", "5")
    assert r.returncode == 1 and "--partition" in r.stderr
    r = kl("consume", *bs, "--topic", "all-parts", "--property", "print.kye=true")
    assert r.returncode == 1 and "print.kye" in r.stderr and "print.key" in r.stderr


def test_consume_group_commits_and_shares_partitions_with_kafka_python(broker):
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KTP

    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "grouped", "--partitions", "4").returncode == 0
    assert kl("produce", *bs, "--topic", "grouped", "--key-separator", ":",
              stdin="".join(f"k{i}:{i}\n" for i in range(200))).returncode == 0
    r = kl("consume", *bs, "--topic", "grouped", "--group", "g1", "--from-beginning", "--timeout-ms", "1500")
    assert r.returncode == 0, r.stderr
    assert sorted(map(int, r.stdout.split())) == list(range(200))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        committed = admin.list_group_offsets("g1")["g1"]
        ends = {}
        for p in range(4):
            n = sum(1 for i in range(200) if partition_for_key(f"k{i}".encode(), 4) == p)
            ends[KTP("grouped", p)] = n
        assert {tp: om.offset for tp, om in committed.items()} == ends
    finally:
        admin.close()
    r = kl("groups", *bs, "--describe", "--group", "g1")
    assert r.returncode == 0 and r.stdout.count("grouped") == 4, r.stdout
    # a second member: the console consumer and kafka-python split the partitions and read each record once
    assert kl("topics", *bs, "--create", "--topic", "shared", "--partitions", "4").returncode == 0
    cli = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "consume", *bs, "--topic", "shared",
                            "--group", "g2", "--from-beginning", "--timeout-ms", "8000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    consumer = None
    try:
        deadline = time.monotonic() + 20
        while "console-consumer" not in kl("groups", *bs, "--describe", "--group", "g2").stdout:
            assert time.monotonic() < deadline, "the console consumer did not join"
            time.sleep(0.3)
        consumer = KafkaConsumer("shared", bootstrap_servers=broker.bootstrap, group_id="g2",
                                 auto_offset_reset="earliest", enable_auto_commit=False)
        while not consumer.assignment():
            assert time.monotonic() < deadline + 20, "kafka-python got no partitions"
            consumer.poll(timeout_ms=300)
        mine = {tp.partition for tp in consumer.assignment()}
        time.sleep(1)  # the console consumer's rejoin completes with the same generation
        assert kl("produce", *bs, "--topic", "shared", "--key-separator", ":",
                  stdin="".join(f"k{i}:{i}\n" for i in range(200))).returncode == 0
        seen: list[int] = []
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < 3:
            for records in consumer.poll(timeout_ms=300).values():
                seen += [int(m.value) for m in records]
                quiet_since = time.monotonic()
        out, err = cli.communicate(timeout=40)
    finally:
        if consumer is not None:
            consumer.close()
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 0, err
    printed = [int(x) for x in out.split()]
    assert len(mine) == 2, mine  # range assignor, two members, four partitions
    by_partition = {i: partition_for_key(f"k{i}".encode(), 4) for i in range(200)}
    assert sorted(seen) == sorted(i for i, p in by_partition.items() if p in mine)
    assert sorted(printed) == sorted(i for i, p in by_partition.items() if p not in mine)


def test_ctrl_c_commits_what_was_printed_and_leaves_the_group(broker):
    import signal

    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "interrupted", "--partitions", "2").returncode == 0
    assert kl("produce", *bs, "--topic", "interrupted", stdin="".join(f"{i}\n" for i in range(50))).returncode == 0
    cli = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "consume", *bs, "--topic", "interrupted",
                            "--group", "g3", "--from-beginning", "--timeout-ms", "60000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while "console-consumer" not in kl("groups", *bs, "--describe", "--group", "g3").stdout:
            assert time.monotonic() < deadline, "the console consumer did not join"
            time.sleep(0.3)
        time.sleep(1)
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 0 and "Processed a total of 50 messages" in err, err
    assert sorted(map(int, out.split())) == list(range(50))
    r = kl("groups", *bs, "--describe", "--group", "g3")
    assert "has no active members" in r.stdout, r.stdout
    rows = [line.split() for line in r.stdout.splitlines() if line.startswith("g3 ")]
    assert sum(int(row[3]) for row in rows if row[3] != "-") == 50 and {row[5] for row in rows} <= {"0", "-"}, rows
