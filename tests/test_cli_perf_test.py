"""`kafkalite producer-perf-test` / `consumer-perf-test` against a real broker: what the producer reports is what
a real client (kafka-python, which checks every batch's CRC) reads back, the throttle holds, the consumer's
summary counts exactly what it committed, and refusals name the setting. The failover run is in
tests/test_cluster.py."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.structs import TopicPartition as KTP

from kafkalite.client import KafkaClient
from kafkalite.records.batch import iter_batches
from tests.support.brokers import BrokerProcess

PRODUCER_TOTAL = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max "
    r"latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CONSUMER_LINE = re.compile(rf"^({STAMP}), ({STAMP}), ([\d.]+), ([\d.]+), (\d+), ([\d.]+), (\d+), (\d+), ([\d.]+), "
                           r"([\d.]+)$")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("perf") / "data", {"group.initial.rebalance.delay.ms": 0}).start()
    yield b
    assert b.stop() == 0, b.output()


def kl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def read_all(broker, topic: str, expect: int) -> list:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", check_crcs=True,
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    parts = [KTP(topic, p) for p in consumer.partitions_for_topic(topic)]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    got = []
    deadline = time.monotonic() + 60
    while len(got) < expect and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            got += records
    consumer.close()
    return got


def committed_total(broker, group: str) -> int:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        return sum(o.offset for o in admin.list_group_offsets(group)[group].values())
    finally:
        admin.close()


@pytest.mark.slow
def test_producer_perf_test_writes_what_it_reports(broker):
    assert kl("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "perf",
              "--partitions", "3").returncode == 0
    t0 = int(time.time() * 1000)
    r = kl("producer-perf-test", "--topic", "perf", "--num-records", "20000", "--record-size", "100",
           "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=all",
           "batch.size=8192")
    t1 = int(time.time() * 1000)
    assert r.returncode == 0, r.stdout + r.stderr
    total = PRODUCER_TOTAL.match(r.stdout.splitlines()[-1])
    assert total, r.stdout
    assert int(total[1]) == 20000
    assert float(total[3]) == pytest.approx(float(total[2]) * 100 / (1024 * 1024), rel=0.02, abs=0.01)
    assert int(total[6]) <= int(total[7]) <= int(total[8]) <= int(total[9]) <= float(total[5])
    records = read_all(broker, "perf", 20000)
    assert len(records) == 20000
    assert all(r.key is None and re.fullmatch(rb"[A-Z]{100}", r.value) for r in records)
    assert all(t0 <= r.timestamp <= t1 for r in records)
    assert {r.partition for r in records} == {0, 1, 2}  # keyless batches move round the partitions


@pytest.mark.slow
def test_producer_perf_test_holds_its_throughput(broker):
    t0 = time.monotonic()
    r = kl("producer-perf-test", "--topic", "slow", "--num-records", "600", "--record-size", "10",
           "--throughput", "300", "--bootstrap-server", broker.bootstrap, "--print-metrics")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    total = PRODUCER_TOTAL.match(r.stdout.splitlines()[0])
    assert total and int(total[1]) == 600, r.stdout
    assert 200 <= float(total[2]) <= 310, r.stdout
    assert took >= 1.9
    assert "producer-metrics:record-send-total = 600" in r.stdout
    assert "producer-metrics:record-error-total = 0" in r.stdout


@pytest.mark.slow
def test_producer_perf_test_payload_file_compression_and_acks_0(broker, tmp_path):
    payloads = tmp_path / "payloads.txt"
    payloads.write_bytes(b"alpha|beta|gamma|")
    r = kl("producer-perf-test", "--topic", "files", "--num-records", "300", "--payload-file", str(payloads),
           "--payload-delimiter", "|", "--throughput", "-1", "--bootstrap-server", broker.bootstrap,
           "--producer-props", "compression.type=gzip", "linger.ms=5")
    assert r.returncode == 0, r.stdout + r.stderr
    r = kl("producer-perf-test", "--topic", "files", "--num-records", "200", "--record-size", "7",
           "--throughput", "-1", "--bootstrap-server", broker.bootstrap, "--producer-props", "acks=0")
    assert r.returncode == 0 and r.stdout.startswith("200 records sent"), r.stdout + r.stderr
    values = [rec.value for rec in read_all(broker, "files", 500)]
    assert len(values) == 500
    assert set(values[:300]) <= {b"alpha", b"beta", b"gamma"} and len(set(values[:300])) == 3
    assert all(re.fullmatch(rb"[A-Z]{7}", v) for v in values[300:])


@pytest.mark.slow
@pytest.mark.parametrize("props, named", [
    (["no.such.setting=1"], "no.such.setting"),
    (["enable.idempotence=true"], "enable.idempotence"),
    (["compression.type=brotli"], "compression.type"),
    (["batch.size=many"], "batch.size"),
    (["security.protocol=CARRIER_PIGEON"], "security.protocol"),
])
def test_producer_perf_test_refuses_settings_by_name(broker, props, named):
    r = kl("producer-perf-test", "--topic", "perf", "--num-records", "1", "--record-size", "1", "--throughput",
           "-1", "--bootstrap-server", broker.bootstrap, "--producer-props", *props)
    assert r.returncode in (1, 2) and named in r.stderr and "records sent" not in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_producer_perf_test_refuses_acks_it_cannot_send(broker):
    r = kl("producer-perf-test", "--topic", "perf", "--num-records", "1", "--record-size", "1", "--throughput",
           "-1", "--bootstrap-server", broker.bootstrap, "--producer-props", "acks=2")
    assert r.returncode == 1 and "acks must be" in r.stderr, r.stdout + r.stderr


@pytest.mark.slow
def test_consumer_perf_test_counts_what_it_commits(broker):
    assert kl("producer-perf-test", "--topic", "eaten", "--num-records", "9000", "--record-size", "50",
              "--throughput", "-1", "--bootstrap-server", broker.bootstrap).returncode == 0
    r = kl("consumer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "eaten", "--messages", "6000",
           "--group", "eater")
    assert r.returncode == 0, r.stdout + r.stderr
    header, line = r.stdout.splitlines()
    assert header == CONSUMER_HEADER
    m = CONSUMER_LINE.match(line)
    assert m, line
    assert int(m[5]) == 6000
    assert float(m[3]) == pytest.approx(6000 * 50 / (1024 * 1024), abs=1e-4)
    assert int(m[7]) + int(m[8]) > 0
    assert committed_total(broker, "eater") == 6000  # exactly where it stopped, mid-batch or not
    r = kl("consumer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "eaten", "--messages", "5000",
           "--group", "eater", "--timeout", "1500", "--hide-header")
    assert r.returncode == 0, r.stdout + r.stderr
    m = CONSUMER_LINE.match(r.stdout.strip())
    assert m and int(m[5]) == 3000, r.stdout  # the rest, then the timeout
    assert "Exiting before consuming the expected number of messages: timeout (1500 ms) exceeded" in r.stderr
    assert committed_total(broker, "eater") == 9000


@pytest.mark.slow
def test_consumer_perf_test_options_and_refusals(broker):
    r = kl("consumer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "eaten", "--messages", "10",
           "--date-format", "yyyy-MM-dd'T'HH:mm:ss.SSS", "--hide-header", "--from-latest", "--timeout", "500")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}, ", r.stdout) and ", 0, " in r.stdout, r.stdout
    r = kl("consumer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "eaten", "--messages", "10",
           "--date-format", "EEE HH:mm")
    assert r.returncode == 2 and "'E'" in r.stderr, r.stderr
    r = kl("consumer-perf-test", "--bootstrap-server", broker.bootstrap, "--topic", "no-such-topic",
           "--messages", "10")
    assert r.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr, r.stdout + r.stderr


@pytest.mark.slow
def test_producer_perf_test_reports_a_broker_that_died(tmp_path):
    """kill -9 of the only broker mid-run: what was in flight is reported as unknown, the run stops naming the
    cause, prints its totals and fails; it does not hang."""
    b = BrokerProcess(tmp_path / "data").start()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "producer-perf-test", "--topic", "t",
                                 "--num-records", "100000", "--record-size", "100", "--throughput", "5000",
                                 "--bootstrap-server", b.bootstrap], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(2.5)
        b.kill()
        out, err = proc.communicate(timeout=60)
    finally:
        if b.proc is not None and b.proc.poll() is None:
            b.kill()
    assert proc.returncode == 1, out + err
    assert "stopped: no broker of" in err, err
    total = PRODUCER_TOTAL.match(out.splitlines()[-1])
    assert total and 0 < int(total[1]) < 100000, out


@pytest.mark.slow
def test_producer_perf_test_refuses_a_throughput_of_zero(broker):
    """0 records/s would wait forever (Kafka's throttler divides by it); -1 is the way to say no limit."""
    r = kl("producer-perf-test", "--topic", "perf", "--num-records", "5", "--record-size", "1", "--throughput", "0",
           "--bootstrap-server", broker.bootstrap, timeout=30)
    assert r.returncode == 2 and "--throughput" in r.stderr and "-1" in r.stderr, r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [4096, 1048576])
def test_producer_perf_test_batches_never_pass_batch_size(broker, batch_size):
    """A batch closes before a record would take it past batch.size (as Kafka's accumulator): with batch.size at
    1 MiB a batch of 1 KiB records must still fit the topic's max.message.bytes (1 MiB + 12), which a rough size
    estimate missed (every batch refused with MESSAGE_TOO_LARGE)."""
    topic = f"sized-{batch_size}"
    r = kl("producer-perf-test", "--topic", topic, "--num-records", "3000", "--record-size", "1000",
           "--throughput", "-1", "--bootstrap-server", broker.bootstrap, "--producer-props", f"batch.size={batch_size}")
    assert r.returncode == 0 and r.stdout.startswith("3000 records sent"), r.stdout + r.stderr[-2000:]
    with KafkaClient(broker.bootstrap) as c:
        sizes, records, offset = [], 0, 0
        while records < 3000:
            part, data = c.fetch_many({(topic, 0): offset}, partition_max_bytes=4 << 20)[(topic, 0)]
            assert part["error_code"] == 0 and data
            for batch in iter_batches(data):
                sizes.append(batch.size_in_bytes)
                records += batch.records_count
                offset = batch.last_offset + 1
    assert records == 3000 and max(sizes) <= batch_size, (max(sizes), batch_size)
    assert max(sizes) > batch_size - 1100  # and full up to the last record that fits
