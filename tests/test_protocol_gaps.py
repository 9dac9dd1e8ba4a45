"""Protocol gaps that made real clients fail or hang (issue 13, item 4), each checked with the clients
themselves against a real `kafkalite serve`: legacy AlterConfigs (API 33), transactional producers that
must fail at once (transactions are not implemented), a KIP-848 consumer that must fail at once, and the
plain admin path (create, list, describe cluster, delete) in confluent-kafka, kafka-python, aiokafka and
kafkajs (node scripts in tests/js, kafkajs installed on first use)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from kafkalite.client import KafkaClient
from kafkalite.protocol import ApiKey, ErrorCode
from tests.support.brokers import BrokerProcess

JS_DIR = Path(__file__).parent / "js"
TXN_MESSAGE = "transactions are not supported by kafkalite"
FAST_S = 5.0  # "at once": well under every client's retry timeout (10-60 s)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("gaps") / "data", {"num.partitions": 1}).start()
    yield b
    assert b.stop() == 0, b.output()


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def overrides(c: KafkaClient, topic: str) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.describe_topic_configs(topic) if e["config_source"] == 1}


# --- AlterConfigs (33) on the wire ---------------------------------------------------------------------


def alter(c: KafkaClient, rtype: int, name: str, configs: dict[str, str | None], validate_only: bool = False,
          version: int | None = None) -> dict:
    resp = c.request(ApiKey.ALTER_CONFIGS, {"resources": [{"resource_type": rtype, "resource_name": name, "configs": [
        {"name": k, "value": v} for k, v in configs.items()]}], "validate_only": validate_only}, version=version)
    return resp["responses"][0]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_alter_configs_replaces_the_whole_set_of_topic_configs(broker, version):
    with KafkaClient(broker.bootstrap) as c:
        topic = topic_name("ac")
        c.create_topic(topic, 1, 1, {"retention.ms": "111111", "max.message.bytes": "5000"})
        r = alter(c, 2, topic, {"segment.bytes": "1048576", "cleanup.policy": "compact"}, version=version)
        assert (r["error_code"], r["resource_name"]) == (0, topic)
        # what was left out (retention.ms, max.message.bytes) is back at its default, as in Kafka
        assert overrides(c, topic) == {"segment.bytes": "1048576", "cleanup.policy": "compact"}
        r = alter(c, 2, topic, {}, version=version)
        assert r["error_code"] == 0 and overrides(c, topic) == {}


def test_alter_configs_validate_only_and_errors(broker):
    with KafkaClient(broker.bootstrap) as c:
        topic = topic_name("acv")
        c.create_topic(topic, 1, 1, {"retention.ms": "111111"})
        assert alter(c, 2, topic, {"segment.bytes": "1048576"}, validate_only=True)["error_code"] == 0
        assert overrides(c, topic) == {"retention.ms": "111111"}  # nothing changed
        bad = alter(c, 2, topic, {"retention.ms": "soon"})
        assert bad["error_code"] == ErrorCode.INVALID_CONFIG and "retention.ms" in bad["error_message"]
        unknown = alter(c, 2, topic, {"retention.mss": "1"})
        assert unknown["error_code"] == ErrorCode.INVALID_CONFIG and "retention.mss" in unknown["error_message"]
        assert overrides(c, topic) == {"retention.ms": "111111"}  # a refused request changes nothing
        missing = alter(c, 2, topic_name("nope"), {"retention.ms": "1"})
        assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        broker_r = alter(c, 4, "", {"log.retention.ms": "1000"})
        assert broker_r["error_code"] == ErrorCode.INVALID_REQUEST
        assert "Cannot update these configs dynamically" in broker_r["error_message"]
        assert "log.retention.ms" in broker_r["error_message"]
        assert alter(c, 4, "", {})["error_code"] == 0  # replacing nothing with nothing


def test_kafka_python_alter_configs_legacy(broker):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        topic = topic_name("kp-ac")
        with KafkaClient(broker.bootstrap) as c:
            c.create_topic(topic, 1, 1, {})
            t0 = time.monotonic()
            result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                         configs={"retention.ms": "222222"})], incremental=False)
            assert time.monotonic() - t0 < FAST_S, result
            assert overrides(c, topic) == {"retention.ms": "222222"}
    finally:
        admin.close()


def test_aiokafka_alter_configs(broker):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topic = topic_name("aio-ac")

    async def main() -> list:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            resp = await asyncio.wait_for(admin.alter_configs([ConfigResource(
                ConfigResourceType.TOPIC, topic, configs={"retention.ms": "333333", "cleanup.policy": "compact"})]),
                FAST_S)
            bad = await asyncio.wait_for(admin.alter_configs([ConfigResource(
                ConfigResourceType.TOPIC, topic, configs={"retention.ms": "soon"})]), FAST_S)
            return [resp, bad]
        finally:
            await admin.close()

    with KafkaClient(broker.bootstrap) as c:
        c.create_topic(topic, 1, 1, {})
        resp, bad = asyncio.run(main())
        ok = resp[0] if isinstance(resp, list) else resp
        assert [tuple(r[:2]) for r in ok.resources] == [(0, None)]
        assert overrides(c, topic) == {"retention.ms": "333333", "cleanup.policy": "compact"}
        bad = bad[0] if isinstance(bad, list) else bad
        assert bad.resources[0][0] == ErrorCode.INVALID_CONFIG
        assert overrides(c, topic) == {"retention.ms": "333333", "cleanup.policy": "compact"}


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_confluent_legacy_alter_configs(broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    topic = topic_name("ck-ac")
    with KafkaClient(broker.bootstrap) as c:
        c.create_topic(topic, 1, 1, {"retention.ms": "111111"})
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        res = ConfigResource("topic", topic, set_config={"segment.ms": "3600000"})
        admin.alter_configs([res])[res].result(timeout=FAST_S)
        assert overrides(c, topic) == {"segment.ms": "3600000"}
        bad = ConfigResource("broker", "1", set_config={"num.io.threads": "4"})
        with pytest.raises(KafkaException, match="Cannot update these configs dynamically"):
            admin.alter_configs([bad])[bad].result(timeout=FAST_S)


# --- transactions: refused at once -----------------------------------------------------------------------


def test_find_coordinator_for_a_transaction_fails_non_retriably_every_version(broker):
    with KafkaClient(broker.bootstrap) as c:
        for v in range(1, 4):  # v0 has no key type: always a group
            r = c.request(ApiKey.FIND_COORDINATOR, {"key": "tx", "key_type": 1}, version=v)
            assert r["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert TXN_MESSAGE in r["error_message"]
        r = c.request(ApiKey.FIND_COORDINATOR, {"key_type": 1, "coordinator_keys": ["a", "b"]}, version=4)
        assert [(x["key"], x["error_code"]) for x in r["coordinators"]] == [("a", 53), ("b", 53)]
        assert all(TXN_MESSAGE in x["error_message"] for x in r["coordinators"])
        r = c.request(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["g"]}, version=4)
        assert r["coordinators"][0]["error_code"] == 0  # groups still found
        r = c.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": "tx", "transaction_timeout_ms": 60000})
        assert r["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        r = c.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert r["error_code"] == 0 and r["producer_id"] >= 0  # idempotent producers keep working


def test_confluent_transactional_producer_fails_at_once_with_the_reason(broker):
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name("tx")})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as exc:
        p.init_transactions(30)
    assert time.monotonic() - t0 < FAST_S
    err = exc.value.args[0]
    assert err.fatal() and not err.retriable()
    assert TXN_MESSAGE in err.str()


def test_confluent_idempotent_producer_still_works(broker):
    from confluent_kafka import Producer

    topic = topic_name("idem")
    with KafkaClient(broker.bootstrap) as c:
        c.create_topic(topic, 1, 1, {})
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    errors: list = []
    for i in range(20):
        p.produce(topic, value=b"%d" % i, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(15) == 0 and errors == []


def test_kafka_python_transactional_producer_fails_at_once(broker):
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=topic_name("tx"), max_block_ms=30000)
    try:
        t0 = time.monotonic()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            p.init_transactions()
        assert time.monotonic() - t0 < FAST_S
    finally:
        p.close(timeout=5)


def test_aiokafka_transactional_producer_fails_at_once(broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TransactionalIdAuthorizationFailed

    async def main() -> float:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=topic_name("tx"))
        t0 = time.monotonic()
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await asyncio.wait_for(p.start(), 30)
            return time.monotonic() - t0
        finally:
            await p.stop()

    assert asyncio.run(main()) < FAST_S


# --- KIP-848 consumer: refused at once ---------------------------------------------------------------


def test_confluent_kip848_consumer_fails_at_once(broker):
    from confluent_kafka import Consumer, KafkaError

    topic = topic_name("k848")
    with KafkaClient(broker.bootstrap) as c:
        c.create_topic(topic, 1, 1, {})
    errors: list = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "group.protocol": "consumer",
                         "error_cb": errors.append, "log_level": 0})
    try:
        consumer.subscribe([topic])
        t0 = time.monotonic()
        fatal = None
        while fatal is None and time.monotonic() - t0 < 15:
            m = consumer.poll(0.2)
            if m is not None and m.error() is not None:
                fatal = m.error()
            fatal = fatal or next((e for e in errors if e.fatal()), None)
        assert fatal is not None, "no error from a group.protocol=consumer consumer within 15 s"
        assert time.monotonic() - t0 < FAST_S
        assert fatal.code() == KafkaError._FATAL or fatal.fatal()
        assert "ConsumerGroupHeartbeat" in fatal.str() and "not supported" in fatal.str()
    finally:
        consumer.close()
    assert "group.protocol=consumer" in broker.output()  # the broker log says why, by name


def test_consumer_group_heartbeat_answer_on_the_wire(broker):
    with KafkaClient(broker.bootstrap) as c:
        for v in (0, 1):
            r = c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, {"group_id": "g", "member_id": "", "member_epoch": 0,
                                                            "subscribed_topic_names": ["t"]}, version=v)
            assert r["error_code"] == ErrorCode.UNSUPPORTED_VERSION and r["assignment"] is None
            assert "group.protocol=classic" in r["error_message"]


# --- the plain admin path, every Python client ----------------------------------------------------------


def test_confluent_admin_path(broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = topic_name("ck-admin")
    t0 = time.monotonic()
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=FAST_S)
    assert topic in admin.list_topics(timeout=FAST_S).topics
    cluster = admin.describe_cluster(request_timeout=FAST_S).result(timeout=FAST_S)
    assert len(cluster.nodes) == 1 and cluster.cluster_id
    admin.delete_topics([topic])[topic].result(timeout=FAST_S)
    assert topic not in admin.list_topics(timeout=FAST_S).topics
    assert time.monotonic() - t0 < 4 * FAST_S


def test_kafka_python_admin_path(broker):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(FAST_S * 1000))
    try:
        topic = topic_name("kp-admin")
        t0 = time.monotonic()
        admin.create_topics([NewTopic(topic, 2, 1)])
        assert topic in admin.list_topics()
        cluster = admin.describe_cluster()
        assert len(cluster["brokers"]) == 1
        admin.delete_topics([topic])
        assert topic not in admin.list_topics()
        assert time.monotonic() - t0 < 4 * FAST_S
    finally:
        admin.close()


def test_aiokafka_admin_path(broker):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = topic_name("aio-admin")

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=int(FAST_S * 1000))
        await admin.start()
        try:
            await asyncio.wait_for(admin.create_topics([NewTopic(topic, 2, 1)]), FAST_S)
            assert topic in await asyncio.wait_for(admin.list_topics(), FAST_S)
            cluster = await asyncio.wait_for(admin.describe_cluster(), FAST_S)
            assert len(cluster["brokers"]) == 1
            await asyncio.wait_for(admin.delete_topics([topic]), FAST_S)
            assert topic not in await asyncio.wait_for(admin.list_topics(), FAST_S)
        finally:
            await admin.close()

    asyncio.run(main())


# --- kafkajs ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafkajs() -> Path:
    """tests/js/node_modules, installed from package-lock.json on first use (bounded; skipped only when
    node or npm is missing or the install fails, with the reason)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node/npm not on PATH: the kafkajs tests need Node.js 18+")
    if not (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        try:
            r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=JS_DIR,
                               capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            pytest.skip("npm ci in tests/js took more than 180 s")
        if r.returncode != 0:
            pytest.skip(f"npm ci in tests/js failed ({r.returncode}): {r.stderr[-1000:]}")
    return Path(node)


def run_js(node: Path, broker: BrokerProcess, scenario: str, topic: str, timeout_s: float = 60) -> dict:
    r = subprocess.run([str(node), str(JS_DIR / "client.js"), broker.bootstrap, scenario, topic], cwd=JS_DIR,
                       capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, f"kafkajs {scenario}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    out = json.loads(lines[-1])
    assert r.returncode == 0, out
    return out


def test_kafkajs_produce_consume(kafkajs, broker):
    out = run_js(kafkajs, broker, "produce-consume", topic_name("js-pc"))
    assert out["values"] == [f"v{i}" for i in range(50)]


def test_kafkajs_alter_and_describe_configs(kafkajs, broker):
    out = run_js(kafkajs, broker, "configs", topic_name("js-cfg"))
    assert out["before"]["retention.ms"] == {"value": "111111", "isDefault": False}
    after = {k: v["value"] for k, v in out["after"].items() if not v["isDefault"]}
    assert after == {"segment.bytes": "1048576", "cleanup.policy": "compact"}  # replaced, retention.ms reset
    assert out["invalid"]["type"] == "INVALID_CONFIG"
    assert out["broker"]["type"] == "INVALID_REQUEST"


def test_kafkajs_admin_path(kafkajs, broker):
    out = run_js(kafkajs, broker, "admin", topic_name("js-admin"))
    assert out == {**out, "created": True, "listed": True, "brokers": 1, "partitions": 2, "offsets": 2, "gone": True}
    assert out["ms"] < 4 * FAST_S * 1000


def test_kafkajs_transactional_producer_fails_at_once(kafkajs, broker):
    out = run_js(kafkajs, broker, "transaction", topic_name("js-tx"))
    assert out["error"] is not None and out["error"]["retriable"] is False
    assert out["ms"] < FAST_S * 1000
