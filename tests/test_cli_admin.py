"""The admin sub-commands against a real broker, checked with real clients: topics --alter, configs,
get-offsets, delete-records, groups --reset-offsets / --delete, log-dirs (and DescribeLogDirs itself),
broker-api-versions."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime

import kafka.errors
import pytest
from kafka import KafkaConsumer
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KTP

from kafkalite.cli.configs import parse_add_config
from kafkalite.cli.delete_records import parse_offset_json
from tests.support.brokers import BrokerProcess

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402

# Record timestamps within retention.ms (7 days): older ones are deleted by the broker's retention pass.
RECENT = (int(time.time()) - 3600) * 1000
COMMANDS = ["produce", "consume", "topics", "groups", "configs", "get-offsets", "delete-records", "log-dirs",
            "broker-api-versions", "producer-perf-test", "consumer-perf-test"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("admin") / "data").start()
    yield b
    assert b.stop() == 0, b.output()


@pytest.fixture(scope="module")
def admin(broker):
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield a
    a.close()


def kl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=60)


def produce(broker, topic: str, partition: int, values: list[str], timestamps: list[int] | None = None) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(), partition=partition, timestamp=timestamps[i] if timestamps else 0)
    assert p.flush(10) == 0


def joined_consumer(broker, topic: str, group: str) -> KafkaConsumer:
    """A kafka-python consumer that has joined `group` and holds partitions of `topic` (the group is Stable)."""
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline
        consumer.poll(timeout_ms=300)
    return consumer


@pytest.mark.parametrize("command", COMMANDS)
def test_help_says_how_to_reach_the_broker(command):
    r = kl(command, "--help")
    assert r.returncode == 0 and "--bootstrap-server" in r.stdout and "127.0.0.1:9092" in r.stdout, r.stdout


def test_topics_alter_adds_partitions(broker):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "growing", "--partitions", "1").returncode == 0
    r = kl("topics", *bs, "--alter", "--topic", "growing", "--partitions", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PartitionCount: 3" in kl("topics", *bs, "--describe", "--topic", "growing").stdout
    r = kl("topics", *bs, "--alter", "--topic", "growing", "--partitions", "2")
    assert r.returncode == 1 and "INVALID_PARTITIONS" in r.stdout
    r = kl("topics", *bs, "--alter", "--topic", "no-such-topic", "--partitions", "2")
    assert r.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in r.stdout
    assert kl("topics", *bs, "--alter", "--topic", "no-such-topic", "--partitions", "2", "--if-exists").returncode == 0


def test_parse_add_config_keeps_bracketed_lists():
    assert parse_add_config("a=1,cleanup.policy=[compact,delete],b=x=y") == [
        ("a", "1"), ("cleanup.policy", "compact,delete"), ("b", "x=y")]


def test_configs_describe_alter_delete(broker, admin):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "tuned").returncode == 0
    r = kl("configs", *bs, "--alter", "--entity-type", "topics", "--entity-name", "tuned",
           "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert r.returncode == 0 and "Completed updating config for topic tuned." in r.stdout, r.stdout + r.stderr
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "tuned")])
    [by_name] = res.values()
    entries = by_name["tuned"]
    assert entries["retention.ms"]["value"] == "1000", entries["retention.ms"]
    assert entries["cleanup.policy"]["value"] == "compact,delete"
    r = kl("configs", *bs, "--describe", "--entity-type", "topics", "--entity-name", "tuned")
    assert r.returncode == 0 and "Dynamic configs for topic tuned are:" in r.stdout
    assert "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}" in r.stdout
    r = kl("configs", *bs, "--alter", "--entity-type", "topics", "--entity-name", "tuned", "--delete-config",
           "retention.ms")
    assert r.returncode == 0
    r = kl("configs", *bs, "--describe", "--entity-type", "topics", "--entity-name", "tuned")
    assert "retention.ms" not in r.stdout and "cleanup.policy=compact,delete" in r.stdout
    r = kl("configs", *bs, "--describe", "--entity-type", "topics", "--entity-name", "tuned", "--all")
    assert "retention.ms=604800000" in r.stdout and "DEFAULT_CONFIG" in r.stdout
    r = kl("configs", *bs, "--alter", "--entity-type", "topics", "--entity-name", "tuned", "--add-config", "nope=1")
    assert r.returncode == 1 and "nope" in r.stdout
    r = kl("configs", *bs, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all")
    assert r.returncode == 0 and "All configs for broker 1 are:" in r.stdout and "log.dirs=" in r.stdout
    r = kl("configs", *bs, "--alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config",
           "log.retention.ms=5")
    assert r.returncode == 1 and "restart" in r.stdout


def test_message_format_version_is_accepted_as_deprecated_and_without_effect(broker, admin):
    """Kafka 3.9 accepts the topic config message.format.version (deprecated by KIP-724, removed in 4.0) and shows
    it in DescribeConfigs; so does kafkalite, with a WARNING naming it, while every batch stays in format v2."""
    bs = ["--bootstrap-server", broker.bootstrap]
    r = kl("topics", *bs, "--create", "--topic", "legacy-fmt", "--config", "message.format.version=2.8")
    assert r.returncode == 0, r.stdout + r.stderr
    [by_name] = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "legacy-fmt")]).values()
    assert by_name["legacy-fmt"]["message.format.version"]["value"] == "2.8"
    r = kl("configs", *bs, "--describe", "--entity-type", "topics", "--entity-name", "legacy-fmt")
    assert "  message.format.version=2.8 sensitive=false" in r.stdout, r.stdout
    deadline = time.monotonic() + 10
    while "Topic config message.format.version=2.8 is deprecated" not in broker.log_path.read_text():
        assert time.monotonic() < deadline, broker.output()
        time.sleep(0.1)
    r = kl("configs", *bs, "--alter", "--entity-type", "topics", "--entity-name", "legacy-fmt", "--delete-config",
           "message.format.version")
    assert r.returncode == 0, r.stdout + r.stderr
    r = kl("configs", *bs, "--describe", "--entity-type", "topics", "--entity-name", "legacy-fmt", "--all")
    assert "message.format.version=3.0-IV1" in r.stdout and "DEFAULT_CONFIG" in r.stdout, r.stdout
    r = kl("configs", *bs, "--alter", "--entity-type", "topics", "--entity-name", "legacy-fmt", "--add-config",
           "message.format.version=two")
    assert r.returncode == 1 and "Version `two` is not a valid version" in r.stdout, r.stdout
    produce(broker, "legacy-fmt", 0, ["v"])  # and it changes nothing: the log holds a v2 batch
    r = kl("dump-log", "--files", str(next((broker.data_dir / "legacy-fmt-0").glob("*.log"))))
    assert " magic: 2 " in r.stdout, r.stdout


def test_get_offsets_and_delete_records(broker, tmp_path):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "offs", "--partitions", "2").returncode == 0
    t0 = RECENT
    produce(broker, "offs", 0, [str(i) for i in range(10)], [t0 + i * 1000 for i in range(10)])
    produce(broker, "offs", 1, [str(i) for i in range(5)], [t0 + 100_000 - i for i in range(5)])
    r = kl("get-offsets", *bs, "--topic", "offs")
    assert r.returncode == 0 and r.stdout.splitlines() == ["offs:0:10", "offs:1:5"], r.stdout + r.stderr
    assert kl("get-offsets", *bs, "--topic", "offs", "--time", "-2").stdout.splitlines() == ["offs:0:0", "offs:1:0"]
    assert kl("get-offsets", *bs, "--topic", "offs", "--time", "earliest", "--partitions", "1").stdout == "offs:1:0\n"
    assert kl("get-offsets", *bs, "--topic", "offs", "--time", str(t0 + 3500)).stdout == "offs:0:4\noffs:1:0\n"
    assert kl("get-offsets", *bs, "--topic", "offs", "--time", "-3").stdout == "offs:0:9\noffs:1:0\n"
    r = kl("get-offsets", *bs, "--topic", "offs", "--time", "soon")
    assert r.returncode == 2 and "--time" in r.stderr
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "offs", "partition": 0, "offset": 4},
                                               {"topic": "offs", "partition": 1, "offset": -1}], "version": 1}))
    r = kl("delete-records", *bs, "--offset-json-file", str(plan))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "partition: offs-0\tlow_watermark: 4" in r.stdout and "partition: offs-1\tlow_watermark: 5" in r.stdout
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    assert c.beginning_offsets([KTP("offs", 0), KTP("offs", 1)]) == {KTP("offs", 0): 4, KTP("offs", 1): 5}
    c.close()
    assert kl("get-offsets", *bs, "--topic", "offs", "--time", "-2").stdout.splitlines() == ["offs:0:4", "offs:1:5"]
    plan.write_text(json.dumps({"partitions": [{"topic": "offs", "partition": 7, "offset": 1}]}))
    r = kl("delete-records", *bs, "--offset-json-file", str(plan))
    assert r.returncode == 1 and "offs-7\terror: UNKNOWN_TOPIC_OR_PARTITION" in r.stdout


def test_parse_offset_json_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"partitions\[1\]"):
        parse_offset_json('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}, {"topic": "a"}]}', "f.json")
    with pytest.raises(ValueError, match="duplicate"):
        parse_offset_json('{"partitions": [{"topic": "a", "partition": 0, "offset": 1},'
                          '{"topic": "a", "partition": 0, "offset": 2}]}', "f.json")
    with pytest.raises(ValueError, match=r"f\.json: not JSON"):
        parse_offset_json("{", "f.json")


def test_groups_reset_offsets_and_delete(broker, admin):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "rst", "--partitions", "2").returncode == 0
    produce(broker, "rst", 0, [str(i) for i in range(10)], [RECENT + i * 1000 for i in range(10)])
    produce(broker, "rst", 1, [str(i) for i in range(6)])
    admin.alter_group_offsets("rg", {KTP("rst", 0): OffsetAndMetadata(7, "", -1),
                                     KTP("rst", 1): OffsetAndMetadata(3, "", -1)})

    def committed() -> dict[int, int]:
        return {tp.partition: om.offset for tp, om in admin.list_group_offsets("rg")["rg"].items()}

    assert committed() == {0: 7, 1: 3}
    r = kl("groups", *bs, "--reset-offsets", "--group", "rg", "--topic", "rst", "--to-earliest")
    assert r.returncode == 0 and "--execute" in r.stderr, r.stdout + r.stderr
    lines = r.stdout.split("\n")
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [row.split() for row in lines[2:4]] == [["rg", "rst", "0", "0"], ["rg", "rst", "1", "0"]]
    assert committed() == {0: 7, 1: 3}  # a dry run changes nothing
    r = kl("groups", *bs, "--reset-offsets", "--group", "rg", "--topic", "rst:1", "--to-latest", "--execute")
    assert r.returncode == 0 and committed() == {0: 7, 1: 6}, r.stdout + r.stderr
    r = kl("groups", *bs, "--reset-offsets", "--group", "rg", "--all-topics", "--shift-by", "-5", "--execute")
    assert r.returncode == 0 and committed() == {0: 2, 1: 1}
    r = kl("groups", *bs, "--reset-offsets", "--group", "rg", "--topic", "rst", "--to-offset", "8", "--execute")
    assert r.returncode == 0 and committed() == {0: 8, 1: 6}  # clamped to the log end
    when = datetime.fromtimestamp((RECENT + 3500) / 1000, UTC).isoformat(timespec="milliseconds")
    r = kl("groups", *bs, "--reset-offsets", "--group", "rg", "--topic", "rst:0", "--to-datetime", when, "--execute")
    assert r.returncode == 0 and committed() == {0: 4, 1: 6}, r.stdout + r.stderr
    r = kl("groups", *bs, "--reset-offsets", "--group", "rg", "--to-earliest", "--execute")
    assert r.returncode == 2 and "--all-topics" in r.stderr
    # an active group is refused, as Kafka does; so is deleting it
    consumer = joined_consumer(broker, "rst", "rg")
    try:
        r = kl("groups", *bs, "--reset-offsets", "--group", "rg", "--all-topics", "--to-earliest", "--execute")
        assert r.returncode == 1 and "inactive, but the current state is Stable" in r.stdout, r.stdout
        r = kl("groups", *bs, "--delete", "--group", "rg")
        assert r.returncode == 1 and "NON_EMPTY_GROUP" in r.stdout, r.stdout
    finally:
        consumer.close()
    assert committed() == {0: 4, 1: 6}
    r = kl("groups", *bs, "--delete", "--group", "rg")
    assert r.returncode == 0 and "Deletion of requested consumer groups ('rg') was successful." in r.stdout, r.stdout
    assert "rg" not in kl("groups", *bs, "--list").stdout.split()


def test_groups_delete_offsets(broker, admin):
    """kafka-consumer-groups.sh --delete-offsets: a whole topic or some partitions; an active group keeps the
    offsets of the topics it consumes (GROUP_SUBSCRIBED_TO_TOPIC), an unknown topic is reported; kafka-python's
    delete_group_offsets reads the same."""
    bs = ["--bootstrap-server", broker.bootstrap]
    for t in ("dof", "dog"):
        assert kl("topics", *bs, "--create", "--topic", t, "--partitions", "2").returncode == 0
    admin.alter_group_offsets("dg", {KTP(t, p): OffsetAndMetadata(1 + p, "", -1) for t in ("dof", "dog")
                                     for p in (0, 1)})

    def committed() -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in admin.list_group_offsets("dg")["dg"]}

    r = kl("groups", *bs, "--delete-offsets", "--group", "dg", "--topic", "dof", "--topic", "missing")
    assert r.returncode == 1 and "partition level error" in r.stderr, r.stdout + r.stderr
    rows = [[line[:30].strip(), line[31:46].strip(), line[47:]] for line in r.stdout.strip().splitlines()]
    assert rows == [["TOPIC", "PARTITION", "STATUS"], ["dof", "0", "Successful"], ["dof", "1", "Successful"],
                    ["missing", "Not Provided", "Error: UNKNOWN_TOPIC_OR_PARTITION"]]
    assert committed() == {("dog", 0), ("dog", 1)}
    r = kl("groups", *bs, "--delete-offsets", "--group", "dg", "--topic", "dog:1")
    assert r.returncode == 0 and r.stdout.startswith("Request succeed for deleting offsets with topic dog group dg")
    assert committed() == {("dog", 0)}
    admin.alter_group_offsets("dg", {KTP("dof", 0): OffsetAndMetadata(5, "", -1)})
    consumer = joined_consumer(broker, "dog", "dg")
    try:
        assert admin.delete_group_offsets("dg", [KTP("dog", 0), KTP("dof", 0)]) == {
            KTP("dog", 0): kafka.errors.GroupSubscribedToTopicError, KTP("dof", 0): kafka.errors.NoError}
    finally:
        consumer.close()
    assert committed() == {("dog", 0)}
    r = kl("groups", *bs, "--delete-offsets", "--group", "nobody", "--topic", "dog")
    assert r.returncode == 1 and "'nobody' does not exist." in r.stderr
    r = kl("groups", *bs, "--delete-offsets", "--group", "dg", "--all-topics")
    assert r.returncode == 2 and "--delete-offsets needs one --group and at least one --topic" in r.stderr


def test_groups_describe_members_and_state(broker, admin):
    """--describe --members [--verbose], --describe --state and --list --state, as kafka-consumer-groups.sh."""
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "dms", "--partitions", "3").returncode == 0
    admin.alter_group_offsets("idle-g", {KTP("dms", 0): OffsetAndMetadata(0, "", -1)})
    consumer = joined_consumer(broker, "dms", "live-g")
    try:
        r = kl("groups", *bs, "--describe", "--group", "live-g", "--members", "--verbose")
        assert r.returncode == 0, r.stdout + r.stderr
        head, row = (line.split() for line in r.stdout.splitlines())
        assert head == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert row[0] == "live-g" and row[4:] == ["3", "dms(0,1,2)"]
        r = kl("groups", *bs, "--describe", "--group", "live-g", "--state")
        assert r.stdout.splitlines()[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                                                    "#MEMBERS"]
        assert r.stdout.splitlines()[1].split() == ["live-g", f"127.0.0.1:{broker.port}", "(1)", "range", "Stable",
                                                    "1"], r.stdout
        r = kl("groups", *bs, "--list", "--state")
        states = dict(line.split() for line in r.stdout.splitlines()[1:])
        assert states["live-g"] == "Stable" and states["idle-g"] == "Empty", r.stdout
    finally:
        consumer.close()
    r = kl("groups", *bs, "--describe", "--group", "idle-g", "--members")
    assert r.stdout.strip() == "Consumer group 'idle-g' has no active members."
    r = kl("groups", *bs, "--describe", "--group", "idle-g", "--members", "--state")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr


def test_groups_list_filters_by_state_and_type_as_kafka_consumer_groups_does(broker, admin):
    """--list --state [STATES] and --list --type [TYPES] (KIP-848's ListGroups v5: every group here is classic)."""
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "typed", "--partitions", "1").returncode == 0
    admin.alter_group_offsets("typed-idle", {KTP("typed", 0): OffsetAndMetadata(0, "", -1)})
    consumer = joined_consumer(broker, "typed", "typed-live")
    try:
        def table(*extra: str) -> list[list[str]]:
            r = kl("groups", *bs, "--list", *extra)
            assert r.returncode == 0, r.stdout + r.stderr
            return [line.split() for line in r.stdout.splitlines()]

        rows = table("--type")
        assert rows[0] == ["GROUP", "TYPE"] and ["typed-live", "Classic"] in rows and ["typed-idle", "Classic"] in rows
        rows = table("--type", "--state")
        assert rows[0] == ["GROUP", "TYPE", "STATE"] and ["typed-live", "Classic", "Stable"] in rows
        assert ["typed-idle", "Classic", "Empty"] in rows
        names = [r[0] for r in table("--state", "stable")[1:]]  # case-insensitive, as Kafka's tool
        assert "typed-live" in names and "typed-idle" not in names
        names = [r[0] for r in table("--state", "Empty,Dead", "--type", "CLASSIC")[1:]]
        assert "typed-idle" in names and "typed-live" not in names
        assert table("--type", "consumer") == [["GROUP", "TYPE"]]  # no KIP-848 groups
    finally:
        consumer.close()
    r = kl("groups", *bs, "--list", "--type", "share")
    assert r.returncode == 2 and "Invalid type list 'share'. Valid types are: classic, consumer" in r.stderr, r.stderr
    r = kl("groups", *bs, "--list", "--state", "Sleeping")
    assert r.returncode == 2 and "Invalid state list 'Sleeping'" in r.stderr, r.stderr
    r = kl("groups", *bs, "--describe", "--group", "typed-idle", "--type")
    assert r.returncode == 2 and "--type goes with --list" in r.stderr, r.stderr


def test_list_groups_v5_answers_a_type_filter_from_confluent_kafka(broker, admin):
    """librdkafka's ListConsumerGroups with `types` needs ListGroups v5 (it refuses the call on a broker without)."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    assert kl("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "ck-t", "--partitions", "1"
              ).returncode == 0
    admin.alter_group_offsets("ck-typed", {KTP("ck-t", 0): OffsetAndMetadata(0, "", -1)})
    ck_admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    classic = ck_admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}, request_timeout=15).result()
    assert not classic.errors, classic.errors
    got = {g.group_id: g.type for g in classic.valid}
    assert got.get("ck-typed") == ConsumerGroupType.CLASSIC, got
    kip848 = ck_admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}, request_timeout=15).result()
    assert not kip848.errors and "ck-typed" not in {g.group_id for g in kip848.valid}


def test_describe_log_dirs_with_kafka_python_and_the_cli(broker, admin):
    bs = ["--bootstrap-server", broker.bootstrap]
    assert kl("topics", *bs, "--create", "--topic", "sized", "--partitions", "2").returncode == 0
    produce(broker, "sized", 1, ["x" * 1000] * 5)
    answer = admin.describe_log_dirs({"sized": [0, 1]})
    [only] = answer
    [d] = only["log_dirs"]
    assert d["error_code"] == 0 and d["log_dir"] == str(broker.data_dir.resolve())
    assert d["total_bytes"] > 0 and 0 <= d["usable_bytes"] <= d["total_bytes"]
    [t] = d["topics"]
    parts = {p["partition_index"]: p for p in t["partitions"]}
    on_disk = sum(f.stat().st_size for f in (broker.data_dir / "sized-1").glob("*.log"))
    assert parts[0]["partition_size"] == 0 and parts[1]["partition_size"] == on_disk > 5000
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in parts.values())
    everything = admin.describe_log_dirs()[0]["log_dirs"][0]["topics"]
    assert "sized" in {t["name"] for t in everything}
    r = kl("log-dirs", *bs, "--describe", "--topic-list", "sized")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout.splitlines()[-1])
    assert doc["version"] == 1 and doc["brokers"][0]["broker"] == 1
    [ld] = doc["brokers"][0]["logDirs"]
    assert ld["error"] is None and ld["logDir"] == d["log_dir"]
    assert sorted(ld["partitions"], key=lambda p: p["partition"]) == [
        {"partition": "sized-0", "size": 0, "offsetLag": 0, "isFuture": False},
        {"partition": "sized-1", "size": on_disk, "offsetLag": 0, "isFuture": False}]


def test_broker_api_versions_prints_what_kafka_python_reads(broker, admin):
    """kafka-broker-api-versions.sh's text: each broker, then one line per API key in order with the broker's
    range and the version this tool would use; the names and ranges are what kafka-python's ApiVersions read."""
    import re

    from kafka.protocol.api_key import ApiKey as KpApiKey  # kafka-python's own names (Kafka's)

    r = kl("broker-api-versions", "--bootstrap-server", broker.bootstrap)
    assert r.returncode == 0, r.stdout + r.stderr
    head, *lines = r.stdout.splitlines()
    assert head == f"127.0.0.1:{broker.port} (id: 1 rack: null) -> (" and lines[-1] == ")"
    body = lines[:-1]
    assert all(line.startswith("\t") for line in body) and all(line.endswith(",") for line in body[:-1])
    parsed = {}
    for line in body:
        m = re.fullmatch(r"\t(\w+)\((\d+)\): (?:(\d+)(?: to (\d+))? \[usable: (\d+)\]|UNSUPPORTED),?", line)
        assert m, line
        name, key, lo, hi, usable = m.groups()
        parsed[int(key)] = (name, None if lo is None else (int(lo), int(hi or lo)), usable)
    assert list(parsed) == sorted(parsed)
    theirs = admin.api_versions()
    for key, (lo, hi) in theirs.items():
        name, ours, usable = parsed[int(key)]
        assert (name, ours, int(usable)) == (KpApiKey(int(key)).name, (lo, hi), hi), (key, parsed[int(key)])
    unsupported = {k for k, (_, rng, _) in parsed.items() if rng is None}
    assert unsupported and not unsupported & {int(k) for k in theirs}
    assert parsed[24][0] == "AddPartitionsToTxn" and 24 in unsupported


def test_broker_api_versions_text_marks_versions_this_tool_cannot_use():
    """A broker newer or older than this tool's codecs: Kafka's `[unusable: node too new/old]`; an API this tool
    has no codec for gets no bracket; an id no one knows is UNKNOWN."""
    from kafkalite.cli.broker_api_versions import versions_text
    from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey

    hi = SUPPORTED_VERSIONS[ApiKey.PRODUCE][1]
    fetch_lo = SUPPORTED_VERSIONS[ApiKey.FETCH][0]
    assert fetch_lo > 0  # (Fetch before v4 is not spoken here)
    text = versions_text({0: (hi + 1, hi + 3), 1: (0, fetch_lo - 1), 24: (0, 4), 999: (1, 1)})
    assert f"\tFetch(1): 0 to {fetch_lo - 1} [unusable: node too old]," in text
    assert f"\tProduce(0): {hi + 1} to {hi + 3} [unusable: node too new]," in text
    assert "\tAddPartitionsToTxn(24): 0 to 4,\n" in text
    assert "\tUNKNOWN(999): 1\n)" in text
    assert "\tMetadata(3): UNSUPPORTED," in text
