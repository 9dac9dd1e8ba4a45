"""Topic creation at scale, against a real `kafkalite serve`: request limits, the open-file limit, other clients
kept served during a large creation, descriptor exhaustion that is not a disk failure, a creation cut off by
kill -9, and the metadata dir's disk being full or lost."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.records import SimpleRecord, build_batch
from tests.support.brokers import BrokerProcess

E = ErrorCode


def create_body(*topics: tuple[str, int], validate_only: bool = False) -> dict:
    return {"topics": [{"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [], "configs": []}
                       for n, p in topics], "timeout_ms": 120_000, "validate_only": validate_only}


def create(client: KafkaClient, *topics: tuple[str, int]) -> list[dict]:
    return client.request(ApiKey.CREATE_TOPICS, create_body(*topics))["topics"]


def partition_dirs(data: Path, topic: str) -> list[Path]:
    return [p for p in data.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] == topic]


def topic_partitions(client: KafkaClient, topic: str) -> list[dict]:
    (t,) = client.metadata([topic])["topics"]
    assert t["error_code"] == 0, t
    return t["partitions"]


def limited(b: BrokerProcess, nofile: int) -> BrokerProcess:
    """Run the broker under a hard open-file limit (as `ulimit -n` in its shell would)."""
    b.args = ["/bin/sh", "-c", f'ulimit -n {nofile} && exec "$@"', "sh", *b.args]
    return b


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("scale") / "data").start()
    yield b
    assert b.stop() == 0, b.output()


@pytest.mark.slow
def test_a_request_beyond_kafkas_partition_limit_is_refused_quickly(broker):
    with KafkaClient(broker.bootstrap, timeout_s=30) as c:
        started = time.monotonic()
        res = create(c, ("huge", 30_000))
        res2 = create(c, ("half-a", 6_000), ("half-b", 5_000))
        elapsed = time.monotonic() - started
        assert elapsed < 2, elapsed
        for r in res + res2:
            assert r["error_code"] == E.POLICY_VIOLATION, r
            assert "10000" in r["error_message"] and "Excessively large number of partitions" in r["error_message"]
        assert not any(partition_dirs(broker.data_dir, t) for t in ("huge", "half-a", "half-b"))
        assert all(t["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
                   for t in c.metadata(["huge", "half-a", "half-b"])["topics"])
        topic = f"grow-{uuid.uuid4().hex[:6]}"
        assert create(c, (topic, 1))[0]["error_code"] == 0
        resp = c.request(ApiKey.CREATE_PARTITIONS, {"topics": [{"name": topic, "count": 20_002, "assignments": None}],
                                                    "timeout_ms": 5000, "validate_only": False})
        (r,) = resp["results"]
        assert r["error_code"] == E.POLICY_VIOLATION and "10000" in r["error_message"], r
        assert len(topic_partitions(c, topic)) == 1


@pytest.mark.slow
def test_other_clients_are_served_while_thousands_of_partitions_are_created(broker):
    """2,000 partitions take seconds to create; ApiVersions and Metadata from another connection must not wait."""
    topic = f"big-{uuid.uuid4().hex[:6]}"
    n = 2000
    with KafkaClient(broker.bootstrap, timeout_s=60) as probe:
        small = f"small-{uuid.uuid4().hex[:6]}"
        assert create(probe, (small, 1))[0]["error_code"] == 0
        result: dict = {}

        def big() -> None:
            with KafkaClient(broker.bootstrap, timeout_s=120) as c:
                t0 = time.monotonic()
                result["res"] = create(c, (topic, n))[0]
                result["s"] = time.monotonic() - t0

        th = threading.Thread(target=big)
        th.start()
        took = []
        while th.is_alive():
            t0 = time.monotonic()
            probe.request(ApiKey.API_VERSIONS, {})
            assert topic_partitions(probe, small)[0]["error_code"] == 0
            took.append(time.monotonic() - t0)
            time.sleep(0.01)
        th.join()
        took.sort()
        worst, p99 = took[-1], took[int(len(took) * 0.99)]
        print(f"\ncreated {n} partitions in {result['s']:.2f} s; {len(took)} ApiVersions+Metadata round trips "
              f"meanwhile: median {took[len(took) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.0f} ms, "
              f"worst {worst * 1000:.0f} ms")
        assert result["res"]["error_code"] == 0, result
        assert len(took) >= 5
        # Before: one round trip waited for the whole creation (10-40 s). The bound is loose for the worst
        # case because the 2-core CI machine is shared; the 99th percentile must stay under 200 ms.
        assert p99 < 0.2 and worst < 1.0, (p99, worst)
        parts = topic_partitions(probe, topic)
        assert len(parts) == n and all(p["error_code"] == 0 for p in parts)
        assert len(partition_dirs(broker.data_dir, topic)) == n


@pytest.mark.slow
def test_a_creation_the_open_file_limit_cannot_hold_is_refused(tmp_path):
    b = limited(BrokerProcess(tmp_path / "data"), 1024).start()
    try:
        with KafkaClient(b.bootstrap, timeout_s=30) as c:
            (r,) = create(c, ("too-many", 2000))
            assert r["error_code"] == E.POLICY_VIOLATION, r
            assert "ulimit -n" in r["error_message"] and "1024" in r["error_message"], r
            assert not partition_dirs(b.data_dir, "too-many")
            assert create(c, ("fits", 50))[0]["error_code"] == 0
            assert len(topic_partitions(c, "fits")) == 50
    finally:
        assert b.stop() == 0, b.output()


@pytest.mark.slow
def test_running_out_of_descriptors_does_not_take_the_log_dir_offline(tmp_path):
    """EMFILE on a segment roll fails that produce with a clear error; the dir stays online, and once
    descriptors are free again the same partition takes writes."""
    limit = 400
    b = limited(BrokerProcess(tmp_path / "data", {"log.segment.bytes": 2048}), limit).start()
    try:
        with KafkaClient(b.bootstrap, timeout_s=30) as c:
            assert create(c, ("t", 4))[0]["error_code"] == 0
            payload = b"x" * 1500
            batch = build_batch([SimpleRecord(None, payload, timestamp=int(time.time() * 1000))])
            assert c.produce("t", 0, batch)["error_code"] == 0
            # the broker's own answers, no retries; its connection to the leader is opened before descriptors run out
            raw = KafkaClient(b.bootstrap, timeout_s=30, retry_timeout_s=0)
            assert raw.produce("t", 0, batch)["error_code"] == 0
            # use up the broker's descriptors with idle connections
            conns = []
            while fd_count(b.proc.pid) < limit - 1:
                conns.append(socket.create_connection(("127.0.0.1", b.port)))
                time.sleep(0.002)
            time.sleep(0.3)
            errors = []
            written = 2
            for _ in range(4):  # every append rolls (segment.bytes 2048) and so opens new files
                try:
                    raw.produce("t", 0, batch)
                    written += 1
                except KafkaClientError as exc:
                    errors.append((exc.error_code, str(exc)))
            raw.close()
            for conn in conns:
                conn.close()
            assert any(code == E.KAFKA_STORAGE_ERROR and "ulimit -n" in msg for code, msg in errors), errors
            time.sleep(0.5)
            assert c.produce("t", 0, batch)["error_code"] == 0
            assert c.produce("t", 1, batch)["error_code"] == 0
            assert all(p["error_code"] == 0 for p in topic_partitions(c, "t"))
            # nothing acknowledged was lost (a failed append may still be there: the client would retry it)
            assert c.list_offset("t", 0, -1) >= written + 1
        out = b.output()
        assert "is offline" not in out and "emptying" not in out, out
    finally:
        assert b.stop() == 0, b.output()


@pytest.mark.slow
def test_a_creation_cut_off_by_kill_9_is_completed_at_the_next_start(tmp_path):
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    n = 1500
    th = threading.Thread(target=lambda: _create_ignoring_disconnect(b.bootstrap, ("cut", n)))
    th.start()
    deadline = time.monotonic() + 60
    while len(partition_dirs(data, "cut")) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(10)
    b._log.close()
    th.join(30)
    made = len(partition_dirs(data, "cut"))
    assert 0 < made < n, made  # really cut off in the middle
    # the other interrupted state, dirs on disk that the metadata does not list: kafkalite writes the metadata
    # first, so only another writer leaves these; they are adopted, the topic sized by its highest partition
    (data / "orphan-1").mkdir()
    b2 = BrokerProcess(data, port=b.port).start()
    try:
        with KafkaClient(b2.bootstrap, timeout_s=30) as c:
            parts = topic_partitions(c, "cut")
            assert len(parts) == n and all(p["error_code"] == 0 for p in parts)
            assert len(partition_dirs(data, "cut")) == n
            batch = build_batch([SimpleRecord(None, b"v", timestamp=int(time.time() * 1000))])
            assert c.produce("cut", n - 1, batch)["error_code"] == 0
            orphan = topic_partitions(c, "orphan")
            assert len(orphan) == 2 and all(p["error_code"] == 0 for p in orphan), orphan
    finally:
        assert b2.stop() == 0, b2.output()


@pytest.mark.slow
def test_start_up_under_a_too_low_open_file_limit_refuses_before_loading(tmp_path):
    data = tmp_path / "data"
    b = BrokerProcess(data).start()
    try:
        with KafkaClient(b.bootstrap, timeout_s=60) as c:
            assert create(c, ("many", 600))[0]["error_code"] == 0  # ~1 descriptor each: 600 + headroom > 512
    finally:
        assert b.stop() == 0, b.output()
    low = limited(BrokerProcess(data, port=b.port), 512)
    with pytest.raises(RuntimeError, match="ulimit -n"):
        low.start()
    low._log.close()
    b2 = BrokerProcess(data, port=b.port).start()
    try:
        with KafkaClient(b2.bootstrap, timeout_s=30) as c:
            assert len(topic_partitions(c, "many")) == 600
    finally:
        assert b2.stop() == 0, b2.output()


def _create_ignoring_disconnect(bootstrap: str, topic: tuple[str, int]) -> None:
    try:
        with KafkaClient(bootstrap, timeout_s=60) as c:
            create(c, topic)
    except (OSError, ConnectionError, Exception):  # the broker is killed under it
        pass


def test_a_partly_created_partition_dir_does_not_stop_start_up(tmp_path):
    """A crash can leave a partition dir with nothing (or a few empty files) in it: the next start loads it."""
    data = tmp_path / "data"
    with LogManager(data) as m:
        m.get_or_create_log("t", 0)
    (data / "t-1").mkdir()
    (data / "t-2").mkdir()
    (data / "t-2" / "00000000000000000000.log").touch()
    (data / "t-2" / "00000000000000000000.index").touch()
    with LogManager(data) as m:
        assert sorted(p for _t, p in m.logs) == [0, 1, 2]
        assert not any(d.offline for d in m.dirs)


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command to make a small tmpfs for a real ENOSPC")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs for a real ENOSPC (needs root/CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.slow
def test_a_full_metadata_disk_answers_kafka_storage_error(small_tmpfs, tmp_path):
    meta_dir = small_tmpfs / "d0"
    b = BrokerProcess(meta_dir, {"log.dirs": f"{meta_dir},{tmp_path / 'd1'}"}).start()
    filler = small_tmpfs / "filler"
    try:
        with KafkaClient(b.bootstrap, timeout_s=30) as c:
            assert create(c, ("before", 2))[0]["error_code"] == 0
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)  # fill the disk for real
            try:
                while os.write(fd, b"\0" * 4096):
                    pass
            except OSError:
                pass
            finally:
                os.close(fd)
            (r,) = create(c, ("while-full", 2))
            assert r["error_code"] == E.KAFKA_STORAGE_ERROR, r
            assert "full" in r["error_message"] and str(meta_dir) in r["error_message"], r
            assert c.metadata(["while-full"])["topics"][0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
            assert len(topic_partitions(c, "before")) == 2  # same connection, still served
            filler.unlink()
            assert create(c, ("after", 2))[0]["error_code"] == 0
    finally:
        filler.unlink(missing_ok=True)
        assert b.stop() == 0, b.output()
    b2 = BrokerProcess(meta_dir, {"log.dirs": f"{meta_dir},{tmp_path / 'd1'}"}, port=b.port).start()
    try:
        with KafkaClient(b2.bootstrap, timeout_s=30) as c:
            assert {t["name"] for t in c.metadata()["topics"]} >= {"before", "after"}
            assert c.metadata(["while-full"])["topics"][0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        assert b2.stop() == 0, b2.output()


@pytest.mark.slow
def test_losing_the_metadata_dir_halts_the_broker_with_advice(tmp_path):
    d0, d1 = tmp_path / "d0", tmp_path / "d1"
    b = BrokerProcess(d0, {"log.dirs": f"{d0},{d1}"}).start()
    try:
        with KafkaClient(b.bootstrap, timeout_s=30) as c:
            assert create(c, ("first", 1))[0]["error_code"] == 0
            shutil.rmtree(d0)  # the metadata dir is gone (a failed disk, unmounted, ...)
            with pytest.raises((OSError, ConnectionError, Exception)):
                create(c, ("second", 1))
        rc = b.proc.wait(20)
        assert rc != 0
        out = b.output()
        assert "metadata dir" in out and str(d0) in out and "restart" in out, out
    finally:
        b.stop()
