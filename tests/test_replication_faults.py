"""Replication under faults (issue 15; the failure scenarios of Kafka's own replication system tests), short
versions for CI: three real `kafkalite serve` brokers on a real ZooKeeper, each reaching the others and ZooKeeper
through test proxies (tests/support/proxy.py), idempotent acks=all confluent-kafka producers writing unique
values, and the checker (tests/support/checker.py) judging what a fresh consumer and each replica's data
dir hold afterwards: no acknowledged record lost, none duplicated (copies a client re-sent under a bumped producer
epoch are counted apart, see the checker), no two values at one offset, nothing refused ever readable, replicas
byte-identical below the high watermark.

Tests marked `replication` need followers, the ISR and acks=all waiting for them (issue 15); the rest check the
harness itself. `make soak` runs the same scenarios long (KAFKALITE_SOAK_* below) and prints the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from kafka import TopicPartition as KafkaTopicPartition

from kafkalite.protocol.api_keys import ApiKey
from tests.support.checker import Report, check, latency_figures, snapshot_replicas
from tests.support.cluster import SESSION_TIMEOUT_MS, Cluster
from tests.support.workload import END_OFFSETS_TRY_S, Send, Workload, end_offsets, fresh_consumer, probe_send, read_all

pytestmark = pytest.mark.cluster

TOPIC = "events"
PARTITIONS = 3
LAG_MS = 3000
BROKER = {"replica.lag.time.max.ms": LAG_MS, "replica.fetch.wait.max.ms": 200,
          "unclean.leader.election.enable": "false", "group.initial.rebalance.delay.ms": 0}
TOPIC_CONFIG = {"min.insync.replicas": "2"}

# soak knobs (`make soak` raises them); the defaults are the CI sizes
KILLS = int(os.environ.get("KAFKALITE_SOAK_KILLS", "5"))
CONTROLLER_KILLS = int(os.environ.get("KAFKALITE_SOAK_CONTROLLER_KILLS", "3"))
ROUNDS = int(os.environ.get("KAFKALITE_SOAK_ROUNDS", "2"))
CHURNS = int(os.environ.get("KAFKALITE_SOAK_CHURNS", "4"))
STEADY_S = float(os.environ.get("KAFKALITE_SOAK_STEADY_SECONDS", "15"))
RATE = float(os.environ.get("KAFKALITE_FAULT_RATE", "500"))  # per producer; two producers

FIGURES: list[dict[str, Any]] = []


@pytest.fixture(scope="module", autouse=True)
def figures_table(request):
    """Print every scenario's figures as one table at the end of the module (and to a JSON file when
    KAFKALITE_FAULT_FIGURES names one): `make soak` shows them."""
    yield
    if not FIGURES:
        return
    keys: list[str] = []
    for row in FIGURES:
        keys += [k for k in row if k not in keys]
    lines = ["", "replication fault figures:", " | ".join(keys)]
    lines += [" | ".join(_fmt(row.get(k, "")) for k in keys) for row in FIGURES]
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # past pytest's output capture, to the terminal
            for line in lines:
                tr.write_line(line)
    out = os.environ.get("KAFKALITE_FAULT_FIGURES")
    if out:
        with open(out, "a") as f:
            for row in FIGURES:
                f.write(json.dumps(row) + "\n")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, list) and v and isinstance(v[0], float):
        return f"n={len(v)} min={min(v):.2f} max={max(v):.2f} mean={sum(v) / len(v):.2f}"
    return str(v)


@pytest.fixture
def cluster(tmp_path, zk_connect):
    c = Cluster(tmp_path, zk_connect, proxied=True, **BROKER)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _topic(cluster: Cluster, rf: int = 3) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, rf, TOPIC_CONFIG if rf > 1 else {})
    if rf > 1:
        cluster.wait_isr(TOPIC, PARTITIONS, rf)


def _workload(cluster: Cluster, **kw: Any) -> Workload:
    return Workload(cluster.bootstrap, TOPIC, PARTITIONS, producers=2, rate=RATE, **kw)


def _heal(cluster: Cluster) -> None:
    """Undo every fault: proxies pass, paused brokers resume, dead ones restart."""
    if cluster.hub is not None:
        cluster.hub.heal_all()
    for bid in list(cluster.paused):
        cluster.resume(bid)
    for bid, b in cluster.brokers.items():
        if b.proc is None or b.proc.poll() is not None:
            if bid in cluster.registered():
                cluster.wait_deregistered(bid)
            cluster.restart(bid)


def _watch_failover(cluster: Cluster, p: int, old: int, t: float, timeout_s: float = 30) -> tuple[float, float]:
    """Seconds from the kill at `t` until ZooKeeper dropped `old`'s registration (detection) and until partition
    `p` had another leader (election), polled every 20 ms: the failover time split into detection and election."""
    gone = elected = None
    deadline = t + timeout_s
    while (gone is None or elected is None) and time.monotonic() < deadline:
        now = time.monotonic()
        if gone is None and old not in cluster.registered():
            gone = now - t
        if elected is None and cluster.leader(TOPIC, p) not in (-1, old):
            elected = now - t
        time.sleep(0.02)
    assert gone is not None and elected is not None, f"broker {old} not replaced within {timeout_s} s"
    return gone, elected


def _judge(cluster: Cluster, sends: list[Send], rf: int = 3, settle_s: float = 30, **figures: Any) -> Report:
    """After the faults healed and the workload stopped: wait for the ISR to be full, then read everything back
    and compare the replicas; replicas still catching up get `settle_s` to reach the high watermark."""
    if rf > 1:
        cluster.wait_isr(TOPIC, PARTITIONS, rf)
    deadline = time.monotonic() + settle_s
    while True:
        reads, hws = read_all(cluster.bootstrap, TOPIC, PARTITIONS)
        replicas = snapshot_replicas({b: p.data_dir for b, p in cluster.brokers.items()}, TOPIC, PARTITIONS)
        rep = check(sends, reads, replicas, hws, expect_replicas=rf)
        if not rep.replica_divergence or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    rep.figures.update(latency_figures(sends), **figures)
    rep.figures["leader_epochs"] = [cluster.partition_state(TOPIC, p)["leader_epoch"] for p in range(PARTITIONS)]
    FIGURES.append({"scenario": figures.get("scenario", "?"), "sent": rep.sent, "acked": rep.acked,
                    "unknown": rep.unknown, "failed": rep.failed, **rep.counts(),
                    "resent_after_epoch_bump": len(rep.resent_after_epoch_bump), **rep.figures})
    return rep


# --- the harness itself (runs without replication) ------------------------------------------------------------


def test_layout_clients_direct_brokers_and_zookeeper_through_proxies(cluster):
    """Clients get the PLAINTEXT listener; /brokers/ids advertise REPLICATION at the proxy; each broker's ZooKeeper
    session runs through its own proxy, so blackholing it expires that broker's session alone."""
    cluster.wait_for("3 brokers registered", lambda: cluster.registered() == {1, 2, 3})
    view = cluster.agreed_view(lambda v: len(v[1]) == 3)
    assert list(view[1]) == [(bid, b.port) for bid, b in sorted(cluster.brokers.items())]
    for bid in (1, 2, 3):
        reg = cluster.zk_json(f"/brokers/ids/{bid}")
        assert f"REPLICATION://{cluster.link[bid].address}" in reg["endpoints"], reg
        assert f"PLAINTEXT://127.0.0.1:{cluster.brokers[bid].port}" in reg["endpoints"], reg
        assert cluster.zk_link[bid].stats.accepted >= 1 and cluster.zk_link[bid].stats.forwarded > 0
    victim = next(b for b in (1, 2, 3) if b != cluster.controller_id())
    cluster.zk_link[victim].blackhole()
    waited = cluster.wait_deregistered(victim, timeout_s=20)
    assert waited < SESSION_TIMEOUT_MS / 1000 + 5
    assert cluster.registered() == {1, 2, 3} - {victim}  # the others kept their sessions
    cluster.zk_link[victim].heal()
    cluster.wait_for(f"broker {victim} registered again", lambda: victim in cluster.registered(), 30)
    cluster.agreed_view(lambda v: len(v[1]) == 3)


def test_fault_helpers_kill_pause_terminate_restart(cluster):
    """The fault helpers do what the scenarios rely on: kill -9 and SIGSTOP end a broker's ZooKeeper session
    within about the session timeout, SIGCONT and restart bring it back under the same id, SIGTERM exits 0."""
    cluster.wait_for("3 brokers registered", lambda: cluster.registered() == {1, 2, 3})
    bound = SESSION_TIMEOUT_MS / 1000 + 5
    cluster.kill(3)
    assert cluster.brokers[3].proc.returncode == -9
    assert cluster.wait_deregistered(3, timeout_s=20) < bound
    cluster.restart(3)
    cluster.wait_for("broker 3 back", lambda: 3 in cluster.registered(), 30)
    cluster.pause(2)
    assert 2 not in cluster.running()
    assert cluster.wait_deregistered(2, timeout_s=20) < bound
    cluster.resume(2)
    cluster.wait_for("broker 2 back after SIGCONT", lambda: 2 in cluster.registered(), 30)
    assert cluster.terminate(1) == 0
    cluster.wait_for("broker 1 deregistered at once on SIGTERM", lambda: 1 not in cluster.registered(), 5)
    cluster.restart(1)
    cluster.agreed_view(lambda v: len(v[1]) == 3, timeout_s=30)


def test_r1_steady_state_rf1_checks_the_harness(cluster):
    """R1 with replication factor 1 (no followers needed): the workload, reads and checker agree end to end."""
    _topic(cluster, rf=1)
    with _workload(cluster) as wl:
        time.sleep(min(STEADY_S, 10))
    rep = _judge(cluster, wl.sends, rf=1, scenario="R1 rf1")
    assert not wl.fatal_errors
    rep.assert_clean(min_acked=1000)
    assert rep.unknown == 0 and rep.read == rep.acked == rep.sent
    assert rep.replicas_compared == PARTITIONS and rep.batches_compared > 0


# --- scenarios that need replication (issue 15) -----------------------------------------------------------------


@pytest.mark.replication
def test_inter_broker_traffic_goes_through_the_replication_proxies(cluster):
    """inter.broker.listener.name=REPLICATION: followers fetch from each leader through its proxy."""
    _topic(cluster)
    with _workload(cluster) as wl:
        time.sleep(3)
    for p in range(PARTITIONS):
        leader = cluster.leader(TOPIC, p)
        assert cluster.link[leader].stats.forwarded > 0, cluster.link[leader]
    _judge(cluster, wl.sends, scenario="proxy path").assert_clean()


@pytest.mark.replication
def test_r1_steady_state(cluster):
    _topic(cluster)
    with _workload(cluster) as wl:
        time.sleep(STEADY_S)
    rep = _judge(cluster, wl.sends, scenario="R1 steady")
    assert not wl.fatal_errors
    rep.assert_clean(min_acked=int(STEADY_S * RATE))
    assert rep.unknown == 0 and rep.read == rep.acked


@pytest.mark.replication
def test_r2_leader_kill9_chase(cluster):
    """kill -9 of a partition's leader under load, KILLS times (restart after its ZooKeeper registration is gone,
    wait for a full ISR before the next): no acknowledged record lost; failover = kill -> first ack of a send
    issued after the kill, on that partition."""
    _topic(cluster)
    failover, detection, election, full_isr = [], [], [], []
    with _workload(cluster) as wl:
        time.sleep(2)
        for i in range(KILLS):
            p = i % PARTITIONS
            old = cluster.leader(TOPIC, p)
            epoch = cluster.partition_state(TOPIC, p)["leader_epoch"]
            t = time.monotonic()
            cluster.kill(old)
            gone, elected = _watch_failover(cluster, p, old, t)
            detection.append(gone)
            election.append(elected)
            failover.append(wl.wait_acked_after(t, {p}, timeout_s=30))
            state = cluster.partition_state(TOPIC, p)
            assert state["leader"] not in (old, -1) and state["leader_epoch"] > epoch, state
            assert old not in state["isr"] and len(state["isr"]) == 2, state
            cluster.restart(old)
            t_up = time.monotonic()
            cluster.wait_isr(TOPIC, PARTITIONS, 3)
            full_isr.append(time.monotonic() - t_up)
        time.sleep(1)
    rep = _judge(cluster, wl.sends, scenario=f"R2 leader kill x{KILLS}", failover_s=failover,
                 detection_s=detection, election_s=election, rejoin_isr_s=full_isr)
    assert not wl.fatal_errors
    rep.assert_clean()
    # the bound: failover <= zookeeper.session.timeout.ms + 2 s
    assert max(failover) <= SESSION_TIMEOUT_MS / 1000 + 2 + 2, failover  # +2 s slack for a shared 2-core CI box


@pytest.mark.replication
def test_r3_controller_kill9(cluster):
    """kill -9 of the controller CONTROLLER_KILLS times: the controller epoch goes up by one each time, every
    partition keeps a leader, and nothing acknowledged is lost."""
    _topic(cluster)
    moves = []
    with _workload(cluster) as wl:
        time.sleep(2)
        for _ in range(CONTROLLER_KILLS):
            old, epoch = cluster.controller_id(), cluster.controller_epoch()
            t = time.monotonic()
            cluster.kill(old)
            cluster.wait_for("a new controller", lambda old=old: cluster.controller_id() not in (-1, old), 30)
            moves.append(time.monotonic() - t)
            assert cluster.controller_epoch() == epoch + 1
            if old in cluster.registered():
                cluster.wait_deregistered(old)
            cluster.wait_for("every partition led", lambda: all(
                cluster.leader(TOPIC, p) >= 0 for p in range(PARTITIONS)), 30)
            wl.wait_acked_after(time.monotonic(), None, timeout_s=30)
            cluster.restart(old)
            cluster.wait_isr(TOPIC, PARTITIONS, 3)
        time.sleep(1)
    rep = _judge(cluster, wl.sends, scenario=f"R3 controller kill x{CONTROLLER_KILLS}", controller_move_s=moves,
                 controller_epoch=cluster.controller_epoch())
    assert not wl.fatal_errors
    rep.assert_clean()


@pytest.mark.replication
def test_r4_clean_rolling_restart(cluster):
    """SIGTERM each broker in turn (exit code 0), restart it, wait for a full ISR; ROUNDS times. Leadership moves
    away in controlled shutdown, so produce stalls stay short."""
    _topic(cluster)
    stops = []
    with _workload(cluster) as wl:
        time.sleep(2)
        for _ in range(ROUNDS):
            for bid in (1, 2, 3):
                t = time.monotonic()
                assert cluster.terminate(bid) == 0, cluster.brokers[bid].output()
                stops.append(time.monotonic() - t)
                cluster.restart(bid)
                cluster.wait_isr(TOPIC, PARTITIONS, 3)
        time.sleep(1)
    rep = _judge(cluster, wl.sends, scenario=f"R4 rolling restart x{ROUNDS}", shutdown_s=stops)
    assert not wl.fatal_errors
    rep.assert_clean()
    # Issue 15's target: max produce stall < 1 s with short timeouts. Measured 0.33-0.86 s with two busy processes
    # beside the test on two cores (1.0-2.2 s before followers stopped waiting replica.fetch.backoff.ms for a leader
    # that had not applied its LeaderAndIsr yet, or for an idle connection to a restarted leader; those have unit
    # tests in test_replica_fetcher_pipeline.py). The bound catches waits on session expiry (3 s + election) or on a
    # delivery timeout, which is what a broken controlled shutdown gives.
    assert rep.figures["max_ack_gap_s"] < 3.0, rep.summary()
    assert rep.unknown == 0, rep.summary()  # no send waited out its 30 s delivery timeout


@pytest.mark.replication
def test_r5_follower_paused(cluster):
    """SIGSTOP a broker for 10 s (longer than the lag time and the session): it leaves every ISR, the others keep
    acknowledging acks=all; after SIGCONT it catches up and rejoins every ISR."""
    _topic(cluster)
    with _workload(cluster) as wl:
        time.sleep(2)
        victim = cluster.leader(TOPIC, 1)  # also a follower of partitions 0 and 2
        t = time.monotonic()
        cluster.pause(victim)
        cluster.wait_for(f"broker {victim} out of every ISR", lambda: all(
            victim not in cluster.partition_state(TOPIC, p)["isr"] for p in range(PARTITIONS)), 10)
        shrink = time.monotonic() - t
        wl.wait_acked_after(time.monotonic(), set(range(PARTITIONS)), timeout_s=10)
        time.sleep(max(0.0, 10 - (time.monotonic() - t)))
        cluster.resume(victim)
        t_resume = time.monotonic()
        cluster.wait_isr(TOPIC, PARTITIONS, 3)
        rejoin = time.monotonic() - t_resume
        time.sleep(1)
    followed = latency_figures([s for s in wl.sends if s.partition != 1])
    rep = _judge(cluster, wl.sends, scenario="R5 follower pause 10s", isr_shrink_s=shrink, rejoin_isr_s=rejoin,
                 followed_p99_ms=followed["p99_ms"], followed_max_ms=followed["max_ms"])
    assert not wl.fatal_errors
    rep.assert_clean()
    # acks=all on the partitions it only followed waits at most for the ISR shrink (the lag time, checked every
    # lag/2 as Kafka's isr-expiration task); on the one it led, for a failover (session timeout) as well
    assert followed["max_ms"] <= LAG_MS * 1.5 + 2000, rep.summary()
    assert rep.figures["max_ms"] <= LAG_MS * 1.5 + SESSION_TIMEOUT_MS + 3000, rep.summary()


@pytest.mark.replication
def test_r7_leader_isolated_from_followers(cluster):
    """Cut partition 0's leader off from its followers (its REPLICATION proxy blackholed; clients and ZooKeeper
    still reach it): after the lag time it shrinks the ISR to itself, acks=all there is refused with
    NOT_ENOUGH_REPLICAS, leadership stays; after healing the ISR is full again and nothing acknowledged is lost."""
    _topic(cluster)
    probes: list[Send] = []
    with _workload(cluster) as wl:
        time.sleep(2)
        leader = cluster.leader(TOPIC, 0)
        t = time.monotonic()
        cluster.link[leader].blackhole()
        cluster.wait_for("ISR of partition 0 shrunk to its leader",
                         lambda: cluster.partition_state(TOPIC, 0)["isr"] == [leader], LAG_MS / 1000 + 10)
        shrink = time.monotonic() - t
        assert cluster.leader(TOPIC, 0) == leader  # the controller still sees it alive

        # ZooKeeper has the shrunk ISR a moment before the leader applies it (it does once the write returns, as
        # Kafka's does): a send in between is appended under the old ISR and, since the high watermark no longer
        # moves below min.insync.replicas (KIP-966), times out. The leader must refuse within a few probes.
        def refused() -> bool:
            probes.append(probe_send(cluster.bootstrap, TOPIC, 0, f"probe-r7-{len(probes)}", timeout_s=5))
            return (probes[-1].outcome, probes[-1].error) == ("fail", "NOT_ENOUGH_REPLICAS")
        cluster.wait_for("NOT_ENOUGH_REPLICAS from the isolated leader", refused, 15, every_s=0.2)
        assert len(probes) <= 2, probes
        cluster.link[leader].heal()
        t_heal = time.monotonic()
        cluster.wait_isr(TOPIC, PARTITIONS, 3)
        rejoin = time.monotonic() - t_heal
        time.sleep(1)
    rep = _judge(cluster, wl.sends + probes, scenario="R7 leader isolated", isr_shrink_s=shrink,
                 rejoin_isr_s=rejoin)
    assert not wl.fatal_errors
    rep.assert_clean()
    assert rep.failed == 1 and not rep.aborted_reads


@pytest.mark.replication
def test_r8_two_brokers_down(cluster):
    """kill -9 two of three brokers: the survivor leads everything with ISR {itself}; acks=all is refused with
    NOT_ENOUGH_REPLICAS on every partition and no refused record is ever acknowledged or readable; restarting
    the two restores the ISR, and nothing acknowledged before, during or after is lost."""
    _topic(cluster)
    probes: list[Send] = []
    with _workload(cluster) as wl:
        time.sleep(2)
        survivor = cluster.leader(TOPIC, 0)
        dead = [b for b in (1, 2, 3) if b != survivor]
        for b in dead:
            cluster.kill(b)
        for b in dead:
            cluster.wait_deregistered(b)
        cluster.wait_for("survivor leads every partition with ISR {survivor}", lambda: all(
            cluster.partition_state(TOPIC, p)["leader"] == survivor
            and cluster.partition_state(TOPIC, p)["isr"] == [survivor] for p in range(PARTITIONS)), 20)
        t_refusing = time.monotonic()
        for p in range(PARTITIONS):
            def refused(p: int = p) -> bool:
                probes.append(probe_send(cluster.bootstrap, TOPIC, p, f"probe-r8-{p}-{len(probes)}", timeout_s=5))
                return probes[-1].error == "NOT_ENOUGH_REPLICAS"
            cluster.wait_for(f"NOT_ENOUGH_REPLICAS on partition {p}", refused, 20, every_s=0.2)
        time.sleep(2)
        t_restart = time.monotonic()
        acked_while_down = [s for s in wl.sends if s.outcome == "ok" and s.acked_at is not None
                            and t_refusing <= s.acked_at <= t_restart]
        for b in dead:
            cluster.restart(b)
        cluster.wait_isr(TOPIC, PARTITIONS, 3)
        wl.wait_acked_after(time.monotonic(), set(range(PARTITIONS)), timeout_s=30)
        time.sleep(1)
    assert not acked_while_down, acked_while_down[:5]
    assert not [s for s in probes if s.outcome == "ok"], probes
    rep = _judge(cluster, wl.sends + probes, scenario="R8 two brokers down",
                 refusals=sum(s.outcome == "fail" for s in probes))
    assert not wl.fatal_errors
    rep.assert_clean()
    assert rep.failed >= PARTITIONS and not rep.aborted_reads


@pytest.mark.replication
def test_r9_rapid_leader_churn(cluster):
    """Partition 0's leader killed CHURNS times in a row, each restarted as soon as its registration is gone and
    the next kill following the election at once (no wait for a full ISR): replicas with different tails must
    converge (KIP-279) and end byte-identical below the high watermark."""
    _topic(cluster)
    elections = []
    with _workload(cluster) as wl:
        time.sleep(2)
        for _ in range(CHURNS):
            old = cluster.leader(TOPIC, 0)
            t = time.monotonic()
            cluster.kill(old)
            cluster.wait_for("a new leader of partition 0",
                             lambda old=old: cluster.leader(TOPIC, 0) not in (-1, old), 30, every_s=0.02)
            elections.append(time.monotonic() - t)
            if old in cluster.registered():
                cluster.wait_deregistered(old)
            cluster.restart(old)
            # the next leader is killed as soon as the restarted broker can be elected again (in the ISR)
            cluster.wait_for(f"broker {old} back in partition 0's ISR",
                             lambda old=old: old in cluster.partition_state(TOPIC, 0)["isr"], 30, every_s=0.02)
        _heal(cluster)
        time.sleep(1)
    rep = _judge(cluster, wl.sends, scenario=f"R9 leader churn x{CHURNS}", election_s=elections)
    assert not wl.fatal_errors
    rep.assert_clean()


@pytest.mark.replication
def test_r10_preferred_leader_election_onto_a_broker_that_just_died(cluster):
    """A follower dies and, before its ZooKeeper session ends, an operator's ElectLeaders asks for it as the
    preferred leader (the auto-rebalance can race a crash the same way). Kafka's ZooKeeper controller elects it and
    the partition has no live leader until the session expires; kafkalite's refuses once its connection to the
    broker has failed (PREFERRED_LEADER_NOT_AVAILABLE, docs/design.md), and elects it only if the request wins the
    race with the end of file of the killed process's socket. When the dead broker was elected, the old leader
    leads again at a newer epoch with everything it had, including appends it answered NOT_LEADER_OR_FOLLOWER for:
    librdkafka retries them, and sometimes re-sends them under a bumped epoch (counted apart by the checker,
    confluentinc/librdkafka#4953). Nothing acknowledged may be lost, nothing duplicated within an epoch."""
    _topic(cluster)
    controller = cluster.controller_id()
    p = next(p for p in range(PARTITIONS) if cluster.leader(TOPIC, p) != controller)
    elect = {"election_type": 0, "topic_partitions": [{"topic": TOPIC, "partitions": [p]}], "timeout_ms": 100}
    answers = []
    with _workload(cluster) as wl:
        time.sleep(2)
        for _ in range(2):
            preferred = cluster.leader(TOPIC, p)
            # leadership away from the preferred replica, which comes back as a follower in the ISR
            cluster.kill(preferred)
            cluster.wait_for("another leader", lambda b=preferred: cluster.leader(TOPIC, p) not in (-1, b), 30)
            if preferred in cluster.registered():
                cluster.wait_deregistered(preferred)
            cluster.restart(preferred)
            cluster.wait_for(f"broker {preferred} in the ISR",
                             lambda b=preferred: b in cluster.partition_state(TOPIC, p)["isr"], 30)
            time.sleep(1)
            # it dies, and is elected while still registered
            cluster.kill(preferred)
            res = cluster.request(cluster.controller_id(), ApiKey.ELECT_LEADERS, elect)
            answers.append(res["replica_election_results"][0]["partition_result"][0]["error_code"])
            if preferred in cluster.registered():
                cluster.wait_deregistered(preferred)
            cluster.wait_for("a live leader", lambda b=preferred: cluster.leader(TOPIC, p) not in (-1, b), 30)
            cluster.restart(preferred)
            cluster.wait_for(f"broker {preferred} in the ISR",
                             lambda b=preferred: b in cluster.partition_state(TOPIC, p)["isr"], 30)
            # the preferred replica leads again for the next round
            elect_now = {**elect, "timeout_ms": 10000}
            cluster.request(cluster.controller_id(), ApiKey.ELECT_LEADERS, elect_now)
            cluster.wait_for(f"broker {preferred} leads", lambda b=preferred: cluster.leader(TOPIC, p) == b, 30)
            time.sleep(1)
        _heal(cluster)
        time.sleep(1)
    rep = _judge(cluster, wl.sends, scenario="R10 preferred election onto a dead broker", election_answers=answers)
    assert not wl.fatal_errors
    # the election either won the race (NONE, or REQUEST_TIMED_OUT waiting for the dead broker's metadata) or lost
    # it (PREFERRED_LEADER_NOT_AVAILABLE): never anything else
    assert set(answers) <= {0, 7, 80}, answers
    rep.assert_clean()


@pytest.mark.replication
def test_r6_leader_isolated_from_zookeeper(cluster):
    """Cut a (non-controller) partition leader off from ZooKeeper only: its session expires, the controller elects
    another leader; the old one is not told and may keep taking acks=1 writes, which are lost when it rejoins as a
    follower and truncates (counted and allowed, as in Kafka); acks=all loses nothing."""
    _topic(cluster)
    acks1 = "events-acks1"
    cluster.create_topic(acks1, PARTITIONS, 3, TOPIC_CONFIG)
    cluster.wait_isr(acks1, PARTITIONS, 3)
    controller = cluster.controller_id()
    p = next(p for p in range(PARTITIONS) if cluster.leader(TOPIC, p) != controller)
    old = cluster.leader(TOPIC, p)
    with _workload(cluster) as wl, Workload(cluster.bootstrap, acks1, PARTITIONS, producers=1, rate=RATE / 2,
                                            acks="1", idempotent=False, name="a") as wl1:
        time.sleep(2)
        t = time.monotonic()
        cluster.zk_link[old].blackhole()
        gone, elected = _watch_failover(cluster, p, old, t)
        # until its session ends the old leader legitimately acknowledges (its followers still fetch): what a
        # user waits for is the first acknowledgement after the election
        failover = wl.wait_acked_after(t + elected, {p}, timeout_s=30)
        time.sleep(3)
        cluster.zk_link[old].heal()
        cluster.wait_for(f"broker {old} registered again", lambda: old in cluster.registered(), 30)
        cluster.wait_isr(TOPIC, PARTITIONS, 3)
        cluster.wait_isr(acks1, PARTITIONS, 3)
        time.sleep(1)
    reads1, hws1 = read_all(cluster.bootstrap, acks1, PARTITIONS)
    rep1 = check(wl1.sends, reads1, None, hws1)
    rep = _judge(cluster, wl.sends, scenario="R6 leader isolated from ZK", detection_s=gone, election_s=elected,
                 after_election_s=failover, acks1_acked=rep1.acked, acks1_lost=len(rep1.acked_lost),
                 acks1_inconsistent=len(rep1.inconsistent))
    assert not wl.fatal_errors
    rep.assert_clean()
    assert rep1.acked > 0 and not rep1.duplicates and not rep1.unexpected, rep1.summary()  # acks=1 may only lose


@pytest.mark.replication
def test_the_checker_reads_end_offsets_across_a_preferred_election(cluster):
    """The checker's high watermarks through a kafka-python consumer whose metadata predates a preferred election
    (an R8 run failed so in CI): kafka-python retries ListOffsets on the old leader without refreshing its
    metadata (tests/support/workload.end_offsets), so the checker asks again with fresh metadata."""
    cluster.create_topic("pe", 1, 3, TOPIC_CONFIG)
    cluster.wait_isr("pe", 1, 3)
    preferred = cluster.leader("pe", 0)
    assert probe_send(cluster.bootstrap, "pe", 0, "before", timeout_s=10).outcome == "ok"
    assert cluster.terminate(preferred) == 0  # controlled shutdown: leadership moves to another replica
    cluster.wait_for("a new leader", lambda: cluster.leader("pe", 0) not in (-1, preferred), 30)
    cluster.restart(preferred)
    cluster.wait_isr("pe", 1, 3)
    tps = [KafkaTopicPartition("pe", 0)]
    stale = fresh_consumer(cluster.bootstrap, tps)
    assert stale.end_offsets(tps) == {tps[0]: 1}  # its metadata names the leader of now
    res = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "leader-election", "--bootstrap-server",
                          cluster.bootstrap, "--election-type", "preferred", "--topic", "pe", "--partition", "0"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    cluster.wait_for("the preferred leader back", lambda: cluster.leader("pe", 0) == preferred, 30)
    t0 = time.monotonic()
    hws, c = end_offsets(stale, cluster.bootstrap, tps, timeout_s=30)
    took = time.monotonic() - t0
    c.close()
    assert hws == {0: 1} and took < 3 * END_OFFSETS_TRY_S, (hws, took)


@pytest.mark.replication
def test_r11_reassignment_under_load(cluster, tmp_path):
    """Every partition (RF 2) moved at once, under load, to a replica set without its leader (kafkalite
    reassign-partitions --execute): the new replicas copy the partition, the leaders move, the old replicas are
    deleted, and nothing acknowledged before, during or after is lost or duplicated; the two replicas left are
    byte-identical below the HW."""
    _topic(cluster, rf=2)
    with _workload(cluster) as wl:
        time.sleep(2)
        targets = {}
        for p in range(PARTITIONS):
            replicas = cluster.zk_json(f"/brokers/topics/{TOPIC}")["partitions"][str(p)]
            leader = cluster.leader(TOPIC, p)
            newcomer = next(b for b in (1, 2, 3) if b not in replicas)
            targets[p] = [newcomer, *[b for b in replicas if b != leader]]
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": p, "replicas": rs} for p, rs in targets.items()]}))
        t0 = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "reassign-partitions", "--bootstrap-server",
                              cluster.bootstrap, "--execute", "--reassignment-json-file", str(plan)],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr

        def moved() -> bool:
            doc = cluster.zk_json(f"/brokers/topics/{TOPIC}")
            return doc["partitions"] == {str(p): rs for p, rs in targets.items()} and not doc.get("adding_replicas")
        cluster.wait_for("every partition moved", moved, 60, every_s=0.2)
        took = time.monotonic() - t0
        for p, rs in targets.items():
            assert cluster.partition_state(TOPIC, p)["leader"] == rs[0], (p, cluster.partition_state(TOPIC, p))
        wl.wait_acked_after(time.monotonic(), set(range(PARTITIONS)), timeout_s=30)
        time.sleep(1)
    rep = _judge(cluster, wl.sends, rf=2, scenario="R11 reassignment under load", reassignment_s=took)
    assert not wl.fatal_errors
    rep.assert_clean()


@pytest.mark.replication
def test_r12_reassignment_survives_a_paused_target_and_a_controller_kill(cluster):
    """A move whose new replica's broker is paused (SIGSTOP) as the move starts, so it stays in progress; the
    controller is killed (kill -9) meanwhile: the new controller takes the move up from the topic's znode
    (adding/removing replicas), the paused broker comes back (its session expired: it registers again) and
    catches up, and the move completes. Nothing acknowledged is lost or duplicated."""
    _topic(cluster, rf=2)
    with _workload(cluster) as wl:
        time.sleep(2)
        controller = cluster.controller_id()
        doc = cluster.zk_json(f"/brokers/topics/{TOPIC}")["partitions"]
        p, replicas = next((int(p), rs) for p, rs in sorted(doc.items())
                           if next(b for b in (1, 2, 3) if b not in rs) != controller)
        newcomer = next(b for b in (1, 2, 3) if b not in replicas)
        leader = cluster.leader(TOPIC, p)
        target = [newcomer, *[b for b in replicas if b != leader]]
        cluster.pause(newcomer)
        try:
            res = cluster.request(controller, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"timeout_ms": 10000, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": p, "replicas": target}]}]})
            assert res["error_code"] == 0 and res["responses"][0]["partitions"][0]["error_code"] == 0, res
            assert cluster.zk_json(f"/brokers/topics/{TOPIC}")["adding_replicas"] == {str(p): [newcomer]}
            cluster.kill(controller)
            cluster.wait_for("a new controller", lambda: cluster.controller_id() not in (-1, controller), 30)
            listed = cluster.request(cluster.controller_id(), ApiKey.LIST_PARTITION_REASSIGNMENTS,
                                     {"timeout_ms": 10000, "topics": None})
            assert listed["topics"][0]["partitions"][0]["adding_replicas"] == [newcomer], listed
        finally:
            cluster.resume(newcomer)
        cluster.restart(controller)

        def moved() -> bool:
            d = cluster.zk_json(f"/brokers/topics/{TOPIC}")
            return d["partitions"][str(p)] == target and not d.get("adding_replicas")
        cluster.wait_for(f"partition {p} moved to {target}", moved, 60, every_s=0.2)
        assert cluster.partition_state(TOPIC, p)["leader"] in target
        wl.wait_acked_after(time.monotonic(), set(range(PARTITIONS)), timeout_s=30)
        time.sleep(1)
    rep = _judge(cluster, wl.sends, rf=2, scenario="R12 reassignment, paused target, controller killed")
    assert not wl.fatal_errors
    rep.assert_clean()
