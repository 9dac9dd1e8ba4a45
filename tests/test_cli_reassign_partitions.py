"""`kafkalite reassign-partitions` (kafka-reassign-partitions.sh) against a real three-broker cluster: generate,
execute, verify, list and cancel, the refusals, and the JSON file's rules. The move under load, checked record by
record, is R11 in tests/test_replication_faults.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import InvalidReplicationAssignmentError

from kafkalite.cli.common import UsageError
from kafkalite.cli.reassign_partitions import assignment_json, parse_reassignment_json
from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey
from tests.support.batches import batch_at
from tests.support.cluster import Cluster


def _cli(bootstrap: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "reassign-partitions", "--bootstrap-server",
                           bootstrap, *args], capture_output=True, text=True, timeout=timeout)


def _plan(path: Path, moves: dict[tuple[str, int], list[int]]) -> str:
    path.write_text(assignment_json(moves))
    return str(path)


def _create(cluster: Cluster, name: str, assignment: dict[int, list[int]]) -> None:
    bid = next(iter(cluster.running()))
    res = cluster.request(bid, ApiKey.CREATE_TOPICS, {"topics": [{
        "name": name, "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": p, "broker_ids": rs} for p, rs in assignment.items()],
        "configs": []}], "timeout_ms": 20000})
    assert res["topics"][0]["error_code"] == 0, res
    cluster.wait_for(f"{name} has leaders", lambda: all(cluster.leader(name, p) >= 0 for p in assignment), 30)


def _produce(bootstrap: str, topic: str, n: int) -> None:
    with KafkaClient(bootstrap, timeout_s=10, retry_timeout_s=30) as c:
        for i in range(n):
            c.produce(topic, 0, bytes(batch_at(0, value=f"v{i}".encode())), acks=-1)


def _values(bootstrap: str, topic: str) -> list[bytes]:
    with KafkaClient(bootstrap, timeout_s=10, retry_timeout_s=30) as c:
        end = c.list_offset(topic, 0, -1)
        return [r.value for _, batch in c.consume(topic, 0, 0, until=end) for r in batch.records()]


@pytest.fixture
def cluster(tmp_path, zk_connect):
    c = Cluster(tmp_path, zk_connect, proxied=True, **{"replica.lag.time.max.ms": 3000,
                                                        "auto.leader.rebalance.enable": False})
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.mark.cluster
def test_execute_verify_moves_a_partition_and_its_leader_then_deletes_the_old_replica(cluster, tmp_path):
    _create(cluster, "mv", {0: [1, 2]})
    _produce(cluster.bootstrap, "mv", 20)
    gen = tmp_path / "topics.json"
    gen.write_text(json.dumps({"version": 1, "topics": [{"topic": "mv"}]}))
    res = _cli(cluster.bootstrap, "--generate", "--topics-to-move-json-file", str(gen), "--broker-list", "2,3")
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment" and json.loads(lines[1])["partitions"] == [
        {"topic": "mv", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]
    proposed = json.loads(lines[4])["partitions"][0]
    assert lines[3] == "Proposed partition reassignment configuration" and sorted(proposed["replicas"]) == [2, 3]

    plan = _plan(tmp_path / "plan.json", {("mv", 0): [3, 2]})
    res = _cli(cluster.bootstrap, "--execute", "--reassignment-json-file", plan)
    assert res.returncode == 0, res.stdout + res.stderr
    assert '{"version":1,"partitions":[{"topic":"mv","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}' \
        in res.stdout and "Successfully started partition reassignment for mv-0" in res.stdout, res.stdout
    cluster.wait_for("the move done", lambda: _cli(cluster.bootstrap, "--verify", "--reassignment-json-file",
                                                   plan).returncode == 0, 30, every_s=0.5)
    res = _cli(cluster.bootstrap, "--verify", "--reassignment-json-file", plan)
    assert "Reassignment of partition mv-0 is completed." in res.stdout, res.stdout
    state = cluster.partition_state("mv", 0)
    assert state["leader"] == 3 and sorted(state["isr"]) == [2, 3], state  # the leader left with broker 1
    assert cluster.zk_json("/brokers/topics/mv")["partitions"] == {"0": [3, 2]}
    cluster.wait_for("broker 1's replica deleted", lambda: not (cluster.brokers[1].data_dir / "mv-0").exists(), 15)
    _produce(cluster.bootstrap, "mv", 5)
    assert _values(cluster.bootstrap, "mv") == [f"v{i}".encode() for i in range(20)] + \
        [f"v{i}".encode() for i in range(5)]
    assert _cli(cluster.bootstrap, "--list").stdout.strip() == "No partition reassignments found."


@pytest.mark.cluster
def test_a_move_in_progress_is_listed_and_cancelled(cluster, tmp_path):
    _create(cluster, "cx", {0: [1]})
    _produce(cluster.bootstrap, "cx", 3)
    cluster.link[1].blackhole()  # broker 1's replication listener: the new replica cannot fetch
    try:
        plan = _plan(tmp_path / "plan.json", {("cx", 0): [1, 2]})
        res = _cli(cluster.bootstrap, "--execute", "--reassignment-json-file", plan)
        assert res.returncode == 0, res.stdout + res.stderr
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)  # a real client's view of the same move
        try:
            assert admin.list_partition_reassignments() == {KafkaTopicPartition("cx", 0): {
                "replicas": [1, 2], "adding_replicas": [2], "removing_replicas": []}}
            assert admin.alter_partition_reassignments({KafkaTopicPartition("cx", 0): [1, 9]}) == {
                KafkaTopicPartition("cx", 0): InvalidReplicationAssignmentError}
        finally:
            admin.close()
        # (broker 3's metadata: the controller's UpdateMetadata for broker 1 waits behind the cut link)
        res = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "topics", "--bootstrap-server",
                              cluster.brokers[3].bootstrap, "--describe", "--topic", "cx"], capture_output=True,
                             text=True, timeout=60)
        assert "\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1\tAdding Replicas: 2\tRemoving Replicas: \n" \
            in res.stdout, res.stdout + res.stderr  # as kafka-topics.sh --describe shows a move
        res = _cli(cluster.bootstrap, "--list")
        assert res.stdout.splitlines() == ["Current partition reassignments:",
                                           "cx-0: replicas: 1,2. adding: 2. removing: ."], res.stdout
        res = _cli(cluster.bootstrap, "--verify", "--reassignment-json-file", plan)
        assert res.returncode == 1 and "Reassignment of partition cx-0 is still in progress." in res.stdout
        res = _cli(cluster.bootstrap, "--execute", "--reassignment-json-file", plan)
        assert res.returncode == 2 and "--additional" in res.stderr, res.stderr
        res = _cli(cluster.bootstrap, "--cancel", "--reassignment-json-file", plan)
        assert res.returncode == 0 and "Successfully cancelled partition reassignments for: cx-0" in res.stdout, \
            res.stdout + res.stderr
        assert cluster.zk_json("/brokers/topics/cx")["partitions"] == {"0": [1]}
        assert cluster.zk_json("/brokers/topics/cx").get("adding_replicas") == {}
        cluster.wait_for("broker 2's copy deleted", lambda: not (cluster.brokers[2].data_dir / "cx-0").exists(), 15)
        res = _cli(cluster.bootstrap, "--cancel", "--reassignment-json-file", plan)
        assert res.returncode == 0 and "None of the specified partition reassignments are active." in res.stdout
    finally:
        cluster.link[1].heal()
    _produce(cluster.bootstrap, "cx", 2)
    assert len(_values(cluster.bootstrap, "cx")) == 5


@pytest.mark.cluster
def test_moves_the_controller_cannot_make_are_refused_by_name(cluster, tmp_path):
    _create(cluster, "rf", {0: [1, 2]})
    cases = [({("rf", 0): [1, 9]}, "INVALID_REPLICA_ASSIGNMENT", "not alive"),
             ({("nope", 0): [1, 2]}, None, "Topic nope not found"),
             ({("rf", 7): [1, 2]}, None, "Unable to find partition(s): rf-7")]
    for moves, code, message in cases:
        res = _cli(cluster.bootstrap, "--execute", "--reassignment-json-file", _plan(tmp_path / "p.json", moves))
        assert res.returncode != 0 and message in res.stdout + res.stderr, (moves, res.stdout, res.stderr)
        if code:
            assert code in res.stdout
    res = _cli(cluster.bootstrap, "--execute", "--reassignment-json-file", str(tmp_path / "p.json"),
               "--throttle", "1000000")
    assert res.returncode == 2 and "--throttle is not supported" in res.stderr
    res = _cli(cluster.bootstrap, "--list", "--verify")
    assert res.returncode == 2 and "exactly one action" in res.stderr
    # a replication factor change, 2 -> 3, through the same path
    res = _cli(cluster.bootstrap, "--execute", "--reassignment-json-file",
               _plan(tmp_path / "up.json", {("rf", 0): [1, 2, 3]}))
    assert res.returncode == 0, res.stdout + res.stderr
    cluster.wait_isr("rf", 1, 3)
    cluster.wait_for("the move done", lambda: cluster.zk_json("/brokers/topics/rf")["partitions"] == {"0": [1, 2, 3]}
                     and not cluster.zk_json("/brokers/topics/rf").get("adding_replicas"), 30)


@given(st.lists(st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 100),
                          st.lists(st.integers(0, 50), min_size=1, max_size=5, unique=True)),
                min_size=1, max_size=10, unique_by=lambda e: (e[0], e[1])))
def test_the_json_file_round_trips(entries):
    moves = {(t, p): rs for t, p, rs in entries}
    assert parse_reassignment_json(assignment_json(moves), "f.json") == moves


@pytest.mark.parametrize(("doc", "message"), [
    ("{", "f.json: not JSON"),
    ('{"version":1}', "cannot be empty"),
    ('{"partitions":[{"topic":"t","partition":0}]}', 'partitions[0] needs "topic"'),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[]}]}', "replica list cannot be empty"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}', "duplicate entries"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}',
     "duplicate topic partitions: t-0"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}', "log_dirs other than"),
])
def test_bad_files_are_refused_naming_what_is_wrong(doc, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_reassignment_json(doc, "f.json")

