"""Three real brokers and a real ZooKeeper on 127.0.0.1: every broker tells clients the same cluster; the
controller survives kill -9 and a pause (the zombie is fenced); topics are administered from any broker;
Kafka clients produce and consume across brokers."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey, ErrorCode
from tests.support.cluster import SESSION_TIMEOUT_MS, Cluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster


def _all_live(view):
    return len(view[1]) == 3 and view[0] in (1, 2, 3)


def test_every_broker_agrees_on_brokers_controller_and_topics(cluster):
    view = cluster.agreed_view(_all_live)
    assert [b for b, _ in view[1]] == [1, 2, 3]
    # a topic with replication factor 3, created through broker 2, is seen alike by all
    with KafkaClient(cluster.brokers[2].bootstrap) as c:
        res = c.request(ApiKey.CREATE_TOPICS, {"topics": [{"name": "orders", "num_partitions": 6,
                                                             "replication_factor": 3}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    view = cluster.agreed_view(lambda v: _all_live(v) and v[2] and all(p[1] >= 0 for p in v[2][0][2]))
    (name, _tid, parts), = view[2]
    assert name == "orders" and len(parts) == 6
    leaders = [p[1] for p in parts]
    assert sorted(set(leaders)) == [1, 2, 3]  # round-robin spreads the leaders
    for _index, leader, epoch, replicas, isr, offline in parts:
        assert sorted(replicas) == [1, 2, 3] and leader == replicas[0] and epoch == 0
        assert sorted(isr) == [1, 2, 3] and offline == ()
    # kafkalite topics --describe prints them as kafka-topics.sh does, from any broker
    r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "topics", "--describe", "--topic", "orders",
                        "--bootstrap-server", cluster.brokers[3].bootstrap], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    for index, leader, _epoch, replicas, isr, _offline in parts:
        line = (f"\tTopic: orders\tPartition: {index}\tLeader: {leader}\tReplicas: {','.join(map(str, replicas))}"
                f"\tIsr: {','.join(map(str, isr))}")
        assert line in r.stdout, r.stdout
    assert "ReplicationFactor: 3" in r.stdout


def test_topic_operations_from_each_broker(cluster):
    cluster.agreed_view(_all_live)
    for bid in (1, 2, 3):
        res = cluster.request(bid, ApiKey.CREATE_TOPICS, {"topics": [{"name": f"t{bid}", "num_partitions": 2,
                                                                       "replication_factor": 2}],
                                                          "timeout_ms": 20000})
        assert res["topics"][0]["error_code"] == 0, res
    # a second creation of the same name is refused by any broker
    res = cluster.request(3, ApiKey.CREATE_TOPICS, {"topics": [{"name": "t1", "num_partitions": 1,
                                                                 "replication_factor": 1}], "timeout_ms": 5000})
    assert res["topics"][0]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
    res = cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{"name": "big", "num_partitions": 1,
                                                                 "replication_factor": 4}], "timeout_ms": 5000})
    assert res["topics"][0]["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
    view = cluster.agreed_view(lambda v: len(v[2]) == 3)
    assert [t[0] for t in view[2]] == ["t1", "t2", "t3"]
    res = cluster.request(2, ApiKey.CREATE_PARTITIONS, {"topics": [{"name": "t3", "count": 4, "assignments": None}],
                                                        "timeout_ms": 20000})
    assert res["results"][0]["error_code"] == 0, res
    cluster.agreed_view(lambda v: len(dict((t[0], t[2]) for t in v[2])["t3"]) == 4)
    # a config change through broker 1 is stored in ZooKeeper, described alike by every broker, and applied
    # by the brokers hosting the topic
    res = cluster.request(1, ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [{
        "resource_type": 2, "resource_name": "t2", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "3600000"}]}]})
    assert res["responses"][0]["error_code"] == 0, res
    for bid in (1, 2, 3):
        res = cluster.request(bid, ApiKey.DESCRIBE_CONFIGS, {"resources": [{
            "resource_type": 2, "resource_name": "t2", "configuration_keys": ["retention.ms"]}]})
        assert [(c["name"], c["value"]) for c in res["results"][0]["configs"]] == [("retention.ms", "3600000")]
    hosts = {b for p in dict((t[0], t[2]) for t in view[2])["t2"] for b in p[3]}
    deadline = time.monotonic() + 10
    while not all("Updated the configs of topic t2" in cluster.brokers[b].output() for b in hosts):
        assert time.monotonic() < deadline, "the hosting brokers did not apply the change"
        time.sleep(0.1)
    res = cluster.request(2, ApiKey.INCREMENTAL_ALTER_CONFIGS, {"resources": [{
        "resource_type": 2, "resource_name": "t2", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "-5"}]}]})
    assert res["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG
    # auto-creation through Metadata (any broker): LEADER_NOT_AVAILABLE at first, then the topic everywhere
    with KafkaClient(cluster.brokers[3].bootstrap) as c:
        first = c.metadata(["auto"], allow_auto_topic_creation=True)["topics"][0]
    assert first["error_code"] == ErrorCode.LEADER_NOT_AVAILABLE
    view = cluster.agreed_view(lambda v: "auto" in [t[0] for t in v[2]] and
                               all(p[1] >= 0 for t in v[2] if t[0] == "auto" for p in t[2]))
    assert [len(p[3]) for t in view[2] if t[0] == "auto" for p in t[2]] == [1]  # num.partitions 1, RF 1
    res = cluster.request(3, ApiKey.DELETE_TOPICS, {"topic_names": ["t1"], "timeout_ms": 20000}, version=4)
    assert res["responses"][0]["error_code"] == 0, res
    view = cluster.agreed_view(lambda v: [t[0] for t in v[2]] == ["auto", "t2", "t3"])


def _wait_controller(cluster, not_in, timeout_s):
    def elected() -> int | None:
        for bid in cluster.running():
            cid = cluster.metadata(bid)["controller_id"]
            if cid not in not_in and cid in cluster.running():
                return cid
        return None
    return wait_until(elected, timeout_s, "a new controller", every_s=0.05)


def test_controller_kill_9_new_controller_within_session_timeout(cluster):
    view = cluster.agreed_view(_all_live)
    res = cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{"name": "k", "num_partitions": 3,
                                                                 "replication_factor": 3}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0
    view = cluster.agreed_view(lambda v: _all_live(v) and v[2] and all(p[1] >= 0 for p in v[2][0][2]))
    old, old_parts = view[0], view[2][0][2]
    killed_at = time.monotonic()
    cluster.brokers[old].kill()
    new = _wait_controller(cluster, {old, -1}, SESSION_TIMEOUT_MS / 1000 + 5)
    took = time.monotonic() - killed_at
    assert took <= SESSION_TIMEOUT_MS / 1000 + 1 + 1.5, took  # + metadata propagation and polling
    # every surviving broker sees: 2 live brokers, the new controller, leaders moved off the dead broker
    view = cluster.agreed_view(lambda v: len(v[1]) == 2 and v[0] == new and
                               all(p[1] not in (old, -1) for p in v[2][0][2]))
    for (_i, leader, epoch, replicas, isr, offline), before in zip(view[2][0][2], old_parts, strict=True):
        assert offline == (old,) and leader in replicas
        if before[1] == old:  # moved: to the first live ISR member in assignment order, with a new epoch
            assert old not in isr and epoch == before[2] + 1 and leader == next(b for b in replicas if b != old)
        else:  # leader kept; the new controller takes the dead replica out of the ISR at failover (Kafka's
            # replica state machine start-up: OfflineReplica), which is a new leader epoch
            assert leader == before[1] and old not in isr and epoch == before[2] + 1
    # the new leader fences requests by leader epoch: older FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH
    index, leader, epoch = next((p[0], p[1], p[2]) for p in view[2][0][2] if p[2] == 1)
    with KafkaClient(cluster.brokers[leader].bootstrap) as c:
        codes = [c.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [{"name": "k", "partitions": [
            {"partition_index": index, "timestamp": -1, "current_leader_epoch": e}]}]}, version=7)
            ["topics"][0]["partitions"][0]["error_code"] for e in (epoch - 1, epoch, epoch + 1)]
    assert codes == [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NONE, ErrorCode.UNKNOWN_LEADER_EPOCH]
    # the dead broker comes back: it is live again (and rejoins the ISRs once its fetches catch up)
    cluster.brokers[old].start()
    view = cluster.agreed_view(lambda v: len(v[1]) == 3)
    assert all(p[5] == () for p in view[2][0][2])


def test_paused_controller_is_fenced_after_it_wakes(cluster):
    view = cluster.agreed_view(_all_live)
    res = cluster.request(2, ApiKey.CREATE_TOPICS, {"topics": [{"name": "z", "num_partitions": 3,
                                                                 "replication_factor": 3}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0
    view = cluster.agreed_view(lambda v: _all_live(v) and v[2] and all(p[1] >= 0 for p in v[2][0][2]))
    old = view[0]
    proc = cluster.brokers[old].proc
    proc.send_signal(signal.SIGSTOP)
    cluster.paused.add(old)
    try:
        new = _wait_controller(cluster, {old, -1}, SESSION_TIMEOUT_MS / 1000 + 5)
        cluster.agreed_view(lambda v: v[0] == new and len(v[1]) == 2, timeout_s=20)
    finally:
        proc.send_signal(signal.SIGCONT)
        cluster.paused.discard(old)
    # the zombie wakes, finds its session gone, re-registers and does not take control back
    view = cluster.agreed_view(lambda v: len(v[1]) == 3 and v[0] == new, timeout_s=20)
    epochs = [p[2] for p in view[2][0][2]]
    time.sleep(1)
    assert cluster.agreed_view(lambda v: True)[0] == new
    assert [p[2] for p in cluster.agreed_view()[2][0][2]] == epochs
    out = cluster.brokers[old].output()
    assert "resigns as controller" in out or "is no longer the controller" in out, out[-3000:]
    assert f"Broker {old} registered again with broker epoch" in out, out[-3000:]  # after its lost session


def test_broker_bounce_gets_a_new_epoch_and_keeps_serving(cluster):
    cluster.agreed_view(_all_live)
    res = cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{"name": "b", "num_partitions": 3,
                                                                 "replication_factor": 1}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0
    before = cluster.agreed_view(lambda v: v[2] and all(p[1] >= 0 for p in v[2][0][2]))
    controller = before[0]
    victim = next(b for b in (1, 2, 3) if b != controller)
    cluster.brokers[victim].stop()
    cluster.brokers[victim].start()
    after = cluster.agreed_view(lambda v: len(v[1]) == 3 and all(p[1] >= 0 for p in v[2][0][2]))
    assert after[0] == controller
    # RF=1 partitions on the bounced broker are led by it again, with a newer leader epoch
    for (i, leader, epoch, replicas, _isr, _off), (_i, _l, old_epoch, _r, _s, _o) in zip(after[2][0][2],
                                                                                       before[2][0][2], strict=True):
        assert leader == replicas[0], i
        if leader == victim:
            assert epoch > old_epoch


def test_brokers_refuse_requests_of_an_old_controller_or_registration(cluster):
    view = cluster.agreed_view(_all_live)
    body = {"controller_id": view[0], "controller_epoch": 0, "broker_epoch": 1 << 40, "topic_states": [],
            "live_brokers": []}
    res = cluster.request(2, ApiKey.UPDATE_METADATA, body, version=7)
    assert res["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    res = cluster.request(2, ApiKey.LEADER_AND_ISR, {**body, "live_leaders": []}, version=6)
    assert res["error_code"] == ErrorCode.STALE_CONTROLLER_EPOCH
    res = cluster.request(2, ApiKey.STOP_REPLICA, {**body, "controller_epoch": 1 << 20, "broker_epoch": 1},
                          version=3)
    assert res["error_code"] == ErrorCode.STALE_BROKER_EPOCH
    assert cluster.agreed_view() == view  # nothing changed


def test_confluent_kafka_produces_and_consumes_across_brokers(cluster):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster.agreed_view(_all_live)
    admin = AdminClient({"bootstrap.servers": cluster.brokers[3].bootstrap})
    admin.create_topics([NewTopic("events", num_partitions=6, replication_factor=1)])["events"].result(30)
    view = cluster.agreed_view(lambda v: v[2] and all(p[1] >= 0 for t in v[2] for p in t[2]))
    assert {p[1] for p in dict((t[0], t[2]) for t in view[2])["events"]} == {1, 2, 3}  # leaders everywhere
    # the producer knows one broker only and finds every partition's leader through Metadata
    producer = Producer({"bootstrap.servers": cluster.brokers[1].bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    sent = [f"m{i}".encode() for i in range(600)]
    failures = []
    for i, v in enumerate(sent):
        producer.produce("events", v, key=str(i).encode(),
                         on_delivery=lambda err, _m: failures.append(err) if err else None)
    assert producer.flush(30) == 0 and not failures, failures
    consumer = Consumer({"bootstrap.servers": cluster.brokers[2].bootstrap, "group.id": "g1",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["events"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(sent) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed(consumer.assignment(), timeout=10)
    consumer.close()
    assert sorted(got) == sorted(sent)
    assert sum(tp.offset for tp in committed) == len(sent)
    # a produce request sent straight to a broker that does not lead the partition is refused
    not_leader = next(p for p in dict((t[0], t[2]) for t in view[2])["events"] if p[1] != 1)
    with KafkaClient(cluster.brokers[1].bootstrap) as c:
        res = c.request(ApiKey.LIST_OFFSETS, {"replica_id": -1, "topics": [{"name": "events", "partitions": [
            {"partition_index": not_leader[0], "timestamp": -1}]}]})
    assert res["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_kafka_python_across_brokers(cluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    cluster.agreed_view(_all_live)
    res = cluster.request(2, ApiKey.CREATE_TOPICS, {"topics": [{"name": "kp", "num_partitions": 3,
                                                                 "replication_factor": 2}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0
    cluster.agreed_view(lambda v: v[2] and all(p[1] >= 0 for p in v[2][0][2]))
    producer = KafkaProducer(bootstrap_servers=cluster.brokers[3].bootstrap, acks=1)
    for i in range(90):
        producer.send("kp", f"v{i}".encode(), partition=i % 3)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.brokers[1].bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    consumer.assign([TopicPartition("kp", p) for p in range(3)])
    got = sorted(m.value for _, m in zip(range(90), consumer, strict=False))
    consumer.close()
    assert got == sorted(f"v{i}".encode() for i in range(90))


def test_the_groups_tool_lists_and_describes_the_groups_of_every_coordinator(cluster):
    """A broker lists only the groups it coordinates and answers NOT_COORDINATOR for the others: `kafkalite
    groups` asks every broker for the list (as Kafka's Admin.listConsumerGroups) and each group's coordinator
    for its description and offsets, whichever broker it was pointed at."""
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    cluster.agreed_view(_all_live)
    cluster.create_topic("gt", 1, 3)
    groups = [f"tool-g{i}" for i in range(8)]
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        for g in groups:
            admin.alter_group_offsets(g, {KTP("gt", 0): OffsetAndMetadata(0, "", -1)})
    finally:
        admin.close()
    with KafkaClient(cluster.brokers[1].bootstrap) as client:
        coordinators = {g: client.coordinator(g).node_id for g in groups}
    assert len(set(coordinators.values())) >= 2, coordinators  # else this test shows nothing
    bs = ["--bootstrap-server", cluster.brokers[1].bootstrap]

    def kl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "groups", *bs, *args],
                              capture_output=True, text=True, timeout=60)
    r = kl("--list")
    assert r.returncode == 0 and set(groups) <= set(r.stdout.split()), r.stdout + r.stderr
    for g in groups:
        r = kl("--describe", "--group", g)
        assert r.returncode == 0, r.stdout + r.stderr
        assert [g, "gt", "0", "0", "0", "0"] in [line.split()[:6] for line in r.stdout.splitlines()], r.stdout


def test_the_controller_reaches_brokers_on_the_control_plane_listener(tmp_path, zk_connect):
    """control.plane.listener.name (KIP-291): with every broker's replication listener cut off, the controller's
    LeaderAndIsr and UpdateMetadata still reach all brokers on their CONTROL listener, so a topic created meanwhile
    is known, with a leader, everywhere. (Sharing the replication listener, brokers other than the controller
    would not hear of it until the link came back.)"""
    c = Cluster(tmp_path, zk_connect, proxied=True, control_plane=True).start()
    try:
        cluster_view = c.agreed_view(_all_live)
        controller = cluster_view[0]
        for link in c.link.values():
            link.blackhole()
        others = [b for b in c.brokers if b != controller]
        res = c.request(others[0], ApiKey.CREATE_TOPICS, {"topics": [{"name": "ctl", "num_partitions": 2,
                                                                       "replication_factor": 3}],
                                                          "timeout_ms": 20000})
        assert res["topics"][0]["error_code"] == 0, res

        def known_everywhere(v: tuple) -> bool:
            return any(name == "ctl" and len(parts) == 2 and all(p[1] >= 0 for p in parts) for name, _id, parts in v[2])
        c.agreed_view(known_everywhere, timeout_s=20)
    finally:
        c.stop()


def test_topics_describe_reports_under_replicated_and_unavailable_partitions(cluster):
    """kafka-topics.sh's health reports after a broker dies: --under-replicated-partitions lists the partitions whose
    ISR lost it, --unavailable-partitions the one it alone held (Leader: none, Offline: 3); neither prints topic
    lines, and a healthy cluster reports nothing."""
    cluster.agreed_view(_all_live)
    cluster.create_topic("hr", 2, 3)
    res = cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{
        "name": "solo", "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": 0, "broker_ids": [3]}]}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    cluster.wait_for("solo has a leader", lambda: cluster.leader("solo", 0) == 3)

    def report(option: str) -> list[str]:
        r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "topics", "--bootstrap-server",
                            cluster.brokers[1].bootstrap, "--describe", "--exclude-internal", option],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout.splitlines()
    assert report("--under-replicated-partitions") == [] and report("--unavailable-partitions") == []
    cluster.kill(3)
    cluster.wait_deregistered(3)
    cluster.wait_for("the ISRs without broker 3", lambda: all(
        3 not in p["isr_nodes"] for t in cluster.metadata(1, ["hr"])["topics"] for p in t["partitions"]))
    under = report("--under-replicated-partitions")
    assert all(line.startswith("\tTopic: ") for line in under), under
    hr_lines = [line for line in under if line.startswith("\tTopic: hr\t")]
    assert sorted(line.split("\t")[2] for line in hr_lines) == ["Partition: 0", "Partition: 1"], under
    unavailable = report("--unavailable-partitions")
    assert len(unavailable) == 1 and unavailable[0].startswith("\tTopic: solo\tPartition: 0\tLeader: none\t"), \
        unavailable
    assert unavailable[0].endswith("\tOffline: 3"), unavailable


def test_group_survives_the_death_of_its_coordinator(cluster):
    """The group's coordinator is the leader of its __consumer_offsets partition; when that broker dies the
    partition gets a new leader and the consumer finds its new coordinator and goes on consuming."""
    from confluent_kafka import Consumer, Producer

    from kafkalite.coordinator.config import coordinator_key_partition

    cluster.agreed_view(_all_live)
    with KafkaClient(cluster.brokers[1].bootstrap) as c:
        for _ in range(100):  # the first FindCoordinator creates __consumer_offsets
            found = c.request(ApiKey.FIND_COORDINATOR, {"key": "grp", "key_type": 0}, version=3)
            if found["error_code"] == 0:
                break
            time.sleep(0.1)
    coordinator = found["node_id"]
    view = cluster.agreed_view(lambda v: any(t[0] == "__consumer_offsets" for t in v[2]))
    offsets = dict((t[0], t[2]) for t in view[2])["__consumer_offsets"]
    assert len(offsets) == 50 and all(len(p[3]) == 3 for p in offsets)  # offsets.topic.replication.factor
    assert offsets[coordinator_key_partition("grp", 50)][1] == coordinator
    others = [b for b in (1, 2, 3) if b != coordinator]
    # the data partitions live on the two other brokers only, so no record is lost with the coordinator
    res = cluster.request(others[0], ApiKey.CREATE_TOPICS, {"topics": [{"name": "work", "assignments": [
        {"partition_index": 0, "broker_ids": [others[0]]}, {"partition_index": 1, "broker_ids": [others[1]]}],
        "num_partitions": -1, "replication_factor": -1}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    cluster.agreed_view(lambda v: any(t[0] == "work" and all(p[1] >= 0 for p in t[2]) for t in v[2]))
    bootstrap = ",".join(cluster.brokers[b].bootstrap for b in others)
    producer = Producer({"bootstrap.servers": bootstrap})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "grp", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe(["work"])

    def produce_and_read(values: list[bytes], timeout_s: float) -> set[bytes]:
        for i, v in enumerate(values):
            producer.produce("work", v, partition=i % 2)
        assert producer.flush(20) == 0
        got: set[bytes] = set()
        deadline = time.monotonic() + timeout_s
        while not set(values) <= got and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.add(m.value())
        return got

    first = [f"a{i}".encode() for i in range(20)]
    assert set(first) <= produce_and_read(first, 30)
    cluster.brokers[coordinator].kill()
    second = [f"b{i}".encode() for i in range(20)]
    assert set(second) <= produce_and_read(second, 45)
    consumer.close()
    view = cluster.agreed_view(lambda v: len(v[1]) == 2)
    offsets = dict((t[0], t[2]) for t in view[2])["__consumer_offsets"]
    assert offsets[coordinator_key_partition("grp", 50)][1] in others


RETRIED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def _fetch_offsets(cluster, bid: int, group: str, timeout_s: float = 30) -> dict[tuple[str, int], int]:
    """A group's committed offsets of work-0 and work-1 from broker `bid` once it coordinates the group."""
    body = {"group_id": group, "topics": [{"name": "work", "partition_indexes": [0, 1]}], "require_stable": False}
    deadline = time.monotonic() + timeout_s
    while True:
        res = cluster.request(bid, ApiKey.OFFSET_FETCH, body, version=7)
        if res["error_code"] not in RETRIED or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert res["error_code"] == 0, res
    return {(t["name"], p["partition_index"]): p["committed_offset"] for t in res["topics"] for p in t["partitions"]}


def _commit_offsets(cluster, bid: int, group: str, offsets: dict[int, int], timeout_s: float = 30) -> None:
    body = {"group_id": group, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "work", "partitions": [{"partition_index": p, "committed_offset": o,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}
                                                       for p, o in offsets.items()]}]}
    deadline = time.monotonic() + timeout_s
    while True:
        res = cluster.request(bid, ApiKey.OFFSET_COMMIT, body, version=8)
        errors = {p["error_code"] for t in res["topics"] for p in t["partitions"]}
        if not errors & set(RETRIED) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert errors == {0}, res


def test_restarted_coordinator_serves_its_groups_offsets_once_it_leads_again(tmp_path, zk_connect):
    """Group state follows leadership of the group's __consumer_offsets partition: the coordinator loads
    the partition's groups when it becomes leader (also after a restart) and unloads them when it stops
    leading. Followers copy the partition, so the successor serves the offsets and the returning broker
    fetches the successor's commit; the test hands the partition back to it by stopping the two others (an
    unclean election, enabled for this cluster, since a returning broker stays out of the ISR)."""
    from kafkalite.coordinator.config import coordinator_key_partition

    # no auto rebalance: its first check, 5 s after the controller's failover (as in Kafka), gave the partition back to
    # the returning broker once it was in the ISR again, before the test asked it as a follower
    cluster = Cluster(tmp_path, zk_connect, **{"unclean.leader.election.enable": True,
                                               "auto.leader.rebalance.enable": False}).start()
    try:
        cluster.agreed_view(_all_live)
        for _ in range(100):  # the first FindCoordinator creates __consumer_offsets
            found = cluster.request(1, ApiKey.FIND_COORDINATOR, {"key": "grp", "key_type": 0}, version=3)
            if found["error_code"] == 0:
                break
            time.sleep(0.1)
        coordinator = found["node_id"]
        p = coordinator_key_partition("grp", 50)
        others = [b for b in (1, 2, 3) if b != coordinator]
        res = cluster.request(others[0], ApiKey.CREATE_TOPICS, {"topics": [{"name": "work", "num_partitions": 2,
                                                                            "replication_factor": 1}],
                                                                "timeout_ms": 20000})
        assert res["topics"][0]["error_code"] == 0, res
        cluster.agreed_view(lambda v: any(t[0] == "work" and all(q[1] >= 0 for q in t[2]) for t in v[2]))
        _commit_offsets(cluster, coordinator, "grp", {0: 7, 1: 11})
        assert _fetch_offsets(cluster, coordinator, "grp") == {("work", 0): 7, ("work", 1): 11}

        def leader_of_p(v: tuple) -> int:
            return dict((t[0], t[2]) for t in v[2])["__consumer_offsets"][p][1]

        cluster.brokers[coordinator].kill()
        view = cluster.agreed_view(lambda v: len(v[1]) == 2 and leader_of_p(v) in others, timeout_s=30)
        successor = leader_of_p(view)
        # the successor serves the group from its own log, a follower's copy of the coordinator's
        assert _fetch_offsets(cluster, successor, "grp") == {("work", 0): 7, ("work", 1): 11}
        _commit_offsets(cluster, successor, "grp", {0: 99})
        assert _fetch_offsets(cluster, successor, "grp")[("work", 0)] == 99

        cluster.brokers[coordinator].start()
        cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=30)
        res = cluster.request(coordinator, ApiKey.OFFSET_FETCH, {"group_id": "grp", "topics": None,
                                                                 "require_stable": False}, version=7)
        assert res["error_code"] == ErrorCode.NOT_COORDINATOR  # a follower of the partition
        from kafkalite.storage.log import Log

        def ends() -> set[int]:
            out = set()
            for b in (coordinator, successor):
                lg = Log.open_read_only(cluster.brokers[b].data_dir / f"__consumer_offsets-{p}")
                out.add(lg.log_end_offset)
                lg.close()
            return out
        deadline = time.monotonic() + 20
        while len(ends()) != 1 and time.monotonic() < deadline:  # the returning broker fetches the commit of 99
            time.sleep(0.1)
        for b in others:
            cluster.brokers[b].stop()
        cluster.agreed_view(lambda v: len(v[1]) == 1 and leader_of_p(v) == coordinator, timeout_s=30)
        assert _fetch_offsets(cluster, coordinator, "grp") == {("work", 0): 99, ("work", 1): 11}
        out = cluster.brokers[coordinator].log_path.read_text(errors="replace")  # all of it: ISR changes follow
        assert f"records of __consumer_offsets-{p} (0 skipped): this broker leads it" in out, out[-3000:]
    finally:
        cluster.stop()


def test_kafkalite_cluster_command_starts_and_stops_everything(tmp_path, zookeeper_server):
    from tests.support.brokers import consecutive_free_ports

    port = consecutive_free_ports(2)
    zk_port = consecutive_free_ports(1, avoid=range(port, port + 2))
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "cluster", "--brokers", "2", "--dir",
                             str(tmp_path / "c"), "--port", str(port), "--zookeeper-port", str(zk_port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
            if line.startswith("bootstrap.servers="):
                break
        assert lines[-1].strip() == f"bootstrap.servers=127.0.0.1:{port},127.0.0.1:{port + 1}", lines
        deadline = time.monotonic() + 20
        while True:
            with KafkaClient(f"127.0.0.1:{port + 1}") as c:
                md = c.metadata()
            if len(md["brokers"]) == 2 and md["controller_id"] in (1, 2):
                break
            assert time.monotonic() < deadline, md
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for p in (port, port + 1, zk_port):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", p), timeout=0.5).close()


def test_kafkalite_client_routes_to_each_partitions_leader(cluster):
    """kafkalite.client (bootstrapped to one broker) sends each partition's produce and fetch to its leader;
    a broker that holds a partition as follower refuses it itself (its Partition), one that does not hold
    it refuses it from the metadata cache."""
    from kafkalite.records import SimpleRecord, build_batch

    cluster.agreed_view(_all_live)
    res = cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{"name": "r", "assignments": [
        {"partition_index": 0, "broker_ids": [1, 2]}, {"partition_index": 1, "broker_ids": [2, 3]},
        {"partition_index": 2, "broker_ids": [3, 1]}], "num_partitions": -1, "replication_factor": -1}],
        "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    cluster.agreed_view(lambda v: v[2] and all(p[1] >= 0 for p in v[2][0][2]))
    with KafkaClient(cluster.brokers[1].bootstrap) as c:
        for p in range(3):
            out = c.produce("r", p, bytes(build_batch([SimpleRecord(b"k", f"p{p}".encode())])), acks=1)
            assert out["base_offset"] == 0
        got = {p: [r.value for _o, b in c.consume("r", p, 0, until=1) for r in b.records()] for p in range(3)}
    assert got == {p: [f"p{p}".encode()] for p in range(3)}
    batch = bytes(build_batch([SimpleRecord(b"k", b"x")]))
    for bid, p in ((2, 0), (3, 0)):  # 2 follows partition 0, 3 does not hold it
        res = cluster.request(bid, ApiKey.PRODUCE, {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "r", "partition_data": [{"index": p, "records": batch}]}]}, version=9)
        assert res["responses"][0]["partition_responses"][0]["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_second_broker_with_a_registered_id_refuses_to_start(cluster, tmp_path):
    from tests.support.brokers import BrokerProcess

    cluster.agreed_view(_all_live)
    twin = BrokerProcess(tmp_path / "twin", {"broker.id": 2, "zookeeper.connect": cluster.zk_connect})
    with contextlib.suppress(RuntimeError):  # it may exit before it even listens
        twin.start(timeout_s=30)
    assert twin.stop() == 1
    assert "broker.id 2 is already registered" in twin.output() and "give each broker its own broker.id" in \
        twin.output()
    assert len(cluster.agreed_view()[1]) == 3  # the running broker 2 is untouched


@pytest.mark.slow
def test_a_broker_restarted_within_its_old_zookeeper_session_waits_it_out(cluster):
    """kill -9 leaves the broker's registration until ZooKeeper expires its session; restarted at once (same
    endpoints), the broker waits for that expiry, saying so, instead of taking itself for a second broker."""
    cluster.agreed_view(_all_live)
    cluster.kill(2)
    t0 = time.monotonic()
    cluster.brokers[2].start()
    back = cluster.agreed_view(lambda v: len(v[1]) == 3 and 2 in [b[0] for b in v[1]], timeout_s=30)
    took = time.monotonic() - t0
    log_text = cluster.brokers[2].log_path.read_text(errors="replace")
    assert "broker.id 2 is still registered by this broker's previous ZooKeeper session" in log_text, log_text[-3000:]
    assert "Broker 2 registered: the previous session's registration expired" in log_text
    assert "already registered" not in log_text
    assert took < SESSION_TIMEOUT_MS / 1000 * 1.5 + 5 + 10, took
    assert len(back[1]) == 3


def _replicated_topic_and_a_dead_replica(cluster) -> tuple[int, int]:
    """Topic "d" (2 partitions on all 3 brokers), then a non-controller broker killed: (controller, victim)."""
    controller = cluster.agreed_view(_all_live)[0]
    res = cluster.request(1, ApiKey.CREATE_TOPICS, {"topics": [{"name": "d", "num_partitions": 2,
                                                                 "replication_factor": 3}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    cluster.agreed_view(lambda v: v[2] and all(p[1] >= 0 for p in v[2][0][2]))
    victim = next(b for b in (1, 2, 3) if b != controller)
    vdir = cluster.brokers[victim].data_dir
    deadline = time.monotonic() + 10
    while not ((vdir / "d-0").is_dir() and (vdir / "d-1").is_dir()):
        assert time.monotonic() < deadline, "the victim did not create its replicas"
        time.sleep(0.1)
    cluster.brokers[victim].kill()
    cluster.agreed_view(lambda v: len(v[1]) == 2, timeout_s=SESSION_TIMEOUT_MS / 1000 + 15)
    return controller, victim


def test_deletion_waits_for_a_dead_replica_and_completes_when_it_returns(cluster):
    """Kafka's TopicDeletionManager: the topic's znodes and its marker stay until every replica
    has deleted its partition; a replica on a dead broker makes the deletion wait for that broker's return."""
    from kazoo.client import KazooClient

    controller, victim = _replicated_topic_and_a_dead_replica(cluster)
    vdir = cluster.brokers[victim].data_dir
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=10)
    try:
        t0 = time.monotonic()
        res = cluster.request(controller, ApiKey.DELETE_TOPICS, {"topic_names": ["d"], "timeout_ms": 20000},
                              version=4)
        assert res["responses"][0]["error_code"] == 0, res
        assert time.monotonic() - t0 < 10
        # the live replicas are deleted, but the topic stays marked for deletion while the victim is away
        live_dirs = [cluster.brokers[b].data_dir for b in (1, 2, 3) if b != victim]
        deadline = time.monotonic() + 10
        while any((d / f"d-{p}").exists() for d in live_dirs for p in (0, 1)):
            assert time.monotonic() < deadline, "the live replicas were not deleted"
            time.sleep(0.1)
        time.sleep(1)
        assert zk.exists("/brokers/topics/d") and zk.exists("/config/topics/d") and zk.exists("/admin/delete_topics/d")
        md = cluster.metadata(controller, ["d"])
        assert md["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        res = cluster.request(controller, ApiKey.CREATE_TOPICS, {"topics": [{
            "name": "d", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000})
        assert res["topics"][0]["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS, res
        assert "marked for deletion" in res["topics"][0]["error_message"]
        # the victim returns: it is told to delete its replicas, and then the deletion completes
        cluster.brokers[victim].start()
        deadline = time.monotonic() + 30
        while zk.exists("/brokers/topics/d") or zk.exists("/admin/delete_topics/d") or zk.exists("/config/topics/d"):
            assert time.monotonic() < deadline, "the deletion did not complete after the victim returned"
            time.sleep(0.1)
        assert not (vdir / "d-0").exists() and not (vdir / "d-1").exists()
        cluster.agreed_view(lambda v: len(v[1]) == 3 and v[2] == ())
        res = cluster.request(victim, ApiKey.CREATE_TOPICS, {"topics": [{
            "name": "d", "num_partitions": 1, "replication_factor": 3}], "timeout_ms": 20000})
        assert res["topics"][0]["error_code"] == 0, res
    finally:
        zk.stop()
        zk.close()


def test_a_new_controller_resumes_a_waiting_deletion(cluster):
    """The deletion marker outlives the controller that started the deletion: the next one finishes it."""
    from kazoo.client import KazooClient

    controller, victim = _replicated_topic_and_a_dead_replica(cluster)
    res = cluster.request(controller, ApiKey.DELETE_TOPICS, {"topic_names": ["d"], "timeout_ms": 20000}, version=4)
    assert res["responses"][0]["error_code"] == 0, res
    cluster.brokers[controller].kill()
    survivor = next(b for b in (1, 2, 3) if b not in (controller, victim))
    cluster.agreed_view(lambda v: v[0] == survivor and len(v[1]) == 1, timeout_s=SESSION_TIMEOUT_MS / 1000 + 15)
    zk = KazooClient(hosts=cluster.zk_connect)
    zk.start(timeout=10)
    try:
        assert zk.exists("/brokers/topics/d") and zk.exists("/admin/delete_topics/d")
        # the new controller knows nothing of what the old one heard: it waits for both dead brokers (as Kafka)
        cluster.brokers[victim].start()
        cluster.brokers[controller].start()
        deadline = time.monotonic() + 30
        while zk.exists("/brokers/topics/d") or zk.exists("/admin/delete_topics/d"):
            assert time.monotonic() < deadline, "the new controller did not complete the deletion"
            time.sleep(0.1)
        for b in (1, 2, 3):
            d = cluster.brokers[b].data_dir
            assert not (d / "d-0").exists() and not (d / "d-1").exists(), b
    finally:
        zk.stop()
        zk.close()


def test_producer_perf_test_goes_on_through_a_leader_kill(cluster):
    """kafka-producer-perf-test.sh's job on a cluster: kill -9 of the partition's leader mid-run. The tool reports
    what was in flight as unknown, waits for the new leader and sends the rest there; every record it counts as
    sent is in the new leader's log (acks=all, min.insync.replicas=2)."""
    cluster.create_topic("pt", partitions=1, configs={"min.insync.replicas": "2"})
    leader = cluster.leader("pt", 0)
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "producer-perf-test", "--topic", "pt",
                             "--num-records", "12000", "--record-size", "100", "--throughput", "1500",
                             "--bootstrap-server", cluster.bootstrap, "--producer-props", "acks=all"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        cluster.brokers[leader].kill()
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    sent = int(out.splitlines()[-1].split()[0])
    unknown = sum(int(n) for n in re.findall(r"; (\d+) records may or may not have been written", err))
    unsent = sum(int(n) for n in re.findall(r"Error: (\d+) records not sent", err))
    assert proc.returncode == (1 if unknown + unsent else 0), out + err
    assert sent + unknown + unsent == 12000, out + err  # nothing dropped without a word
    assert unknown + unsent <= 100, err  # only what was in flight at the kill: the rest waited for the new leader
    new_leader = cluster.leader("pt", 0)
    assert new_leader not in (-1, leader)
    with KafkaClient(cluster.bootstrap) as c:
        c.refresh_metadata(["pt"])
        end = c.list_offset("pt", 0, -1)
    assert sent <= end <= 12000, (sent, end, out, err)
