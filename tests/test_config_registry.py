"""The broker config registry: one default per key shared by every component, Kafka's error wording, warnings
for unknown keys, refusal of TLS/SASL/ACL settings, and the `.properties` reader against Java's grammar."""

from __future__ import annotations

import math
import re

import javaproperties
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.broker.config import BrokerConfig
from kafkalite.cleaner.config import CleanerConfig
from kafkalite.config import registry
from kafkalite.config.properties import parse_properties, read_properties
from kafkalite.coordinator.config import CoordinatorConfig
from kafkalite.errors import InvalidConfigError
from kafkalite.manager.log_manager import ManagerConfig
from kafkalite.storage.log_config import CONFIG_DEFS, LogConfig


def load(**props: object) -> BrokerConfig:
    return BrokerConfig.load(None, {k: v for k, v in props.items()})


def test_each_key_has_one_default_that_every_component_uses():
    assert registry.default("num.recovery.threads.per.data.dir") == 1
    threads = ManagerConfig().num_recovery_threads_per_data_dir
    assert threads == load().manager_config().num_recovery_threads_per_data_dir == 1
    assert load().get("num.recovery.threads.per.data.dir") == ManagerConfig().num_recovery_threads_per_data_dir
    coord = CoordinatorConfig()
    for key, attr in [("offsets.topic.num.partitions", "offsets_topic_num_partitions"),
                      ("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms"),
                      ("group.max.size", "group_max_size"), ("offset.metadata.max.bytes", "offset_metadata_max_bytes")]:
        assert getattr(coord, attr) == registry.default(key)
    assert coord.offsets_retention_ms == registry.default("offsets.retention.minutes") * 60_000
    cleaner = CleanerConfig()  # keeps its own field defaults: they must agree with the registry
    assert (cleaner.enable, cleaner.threads, cleaner.dedupe_buffer_size, cleaner.dedupe_buffer_load_factor,
            cleaner.io_buffer_size, cleaner.max_io_bytes_per_second, cleaner.backoff_ms) == tuple(
        registry.default(f"log.cleaner.{k}") for k in ("enable", "threads", "dedupe.buffer.size",
                                                       "io.buffer.load.factor", "io.buffer.size",
                                                       "io.max.bytes.per.second", "backoff.ms"))


def test_topic_default_keys_come_from_log_config():
    for d in CONFIG_DEFS:
        for b in d.broker:
            key = registry.KEYS[b]
            assert key.topic is d
            if key.default is not None and b not in ("log.roll.hours", "log.retention.hours",
                                                     "log.roll.jitter.hours"):
                assert key.default == d.default, b
    assert load().log_config() == LogConfig()
    assert registry.default("log.retention.hours") * 3_600_000 == LogConfig().retention_ms


def test_every_default_parses_back_to_itself():
    for name, key in registry.KEYS.items():
        if key.default is None or key.effect != "used" or key.default == math.inf:
            continue
        text = load().describe()[name][0]
        value = registry.parse(name, text)
        assert (list(value) if key.kind == "list" and key.topic is None else value) == (
            list(key.default) if isinstance(key.default, tuple) else key.default), name


@pytest.mark.parametrize("key,value,rule", [
    ("socket.request.max.bytes", "-5", "Value must be at least 1"),
    ("socket.request.max.bytes", "0", "Value must be at least 1"),
    ("node.id", "-1", "Value must be at least 0"),
    ("num.recovery.threads.per.data.dir", "0", "Value must be at least 1"),
    ("offsets.topic.compression.codec", "9", "0 (none)"),
    ("log.retention.hours", "many", "Expected value to be a number"),
    ("log.roll.hours", "0", "Value must be at least 1"),
    ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
    ("group.max.size", "2147483648", "32-bit"),
])
def test_bad_values_use_kafkas_wording(key, value, rule):
    with pytest.raises(InvalidConfigError, match=re.escape(f"Invalid value {value} for configuration {key}: ")
                       + ".*" + re.escape(rule)):
        load(**{key: value})


@pytest.mark.parametrize("listeners", ["PLAINTEXT://127.0.0.1:65536", "PLAINTEXT://127.0.0.1:-1", "127.0.0.1",
                                       "A://h:1,A://h:2", ""])
def test_bad_listeners(listeners):
    with pytest.raises(InvalidConfigError, match="configuration listeners"):
        load(listeners=listeners)
    load(listeners="PLAINTEXT://127.0.0.1:65535,OTHER://127.0.0.1:0",
         **{"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"})


def test_tls_settings_are_accepted():
    """TLS is implemented (tests/test_security_tls.py): its keys are checked by type, not refused."""
    cfg = load(**{"listeners": "SSL://127.0.0.1:9093", "ssl.client.auth": "required",
                  "listener.name.ssl.ssl.keystore.location": "/k.p12", "ssl.enabled.protocols": "TLSv1.3"})
    assert cfg.listener_prop("SSL", "ssl.keystore.location") == "/k.p12"
    assert cfg.listener_prop("SSL", "ssl.client.auth") == "required"
    assert cfg.get("ssl.keystore.location") == ""


@pytest.mark.parametrize("name", ["kafkalite.security.acl.AclAuthorizer", "kafka.security.authorizer.AclAuthorizer",
                                  "org.apache.kafka.metadata.authorizer.StandardAuthorizer", ""])
def test_kafkas_authorizer_class_names_select_the_acl_authorizer(name):
    cfg = load(**{"authorizer.class.name": name, "super.users": "User:admin;User:broker",
                  "allow.everyone.if.no.acl.found": "true"})
    assert cfg.get("authorizer.class.name") == name and cfg.get("allow.everyone.if.no.acl.found") is True


def test_another_authorizer_class_is_refused_by_name():
    refused = r"com\.example\.MyAuthorizer.*kafka\.security\.authorizer\.AclAuthorizer"
    with pytest.raises(InvalidConfigError, match=refused):
        load(**{"authorizer.class.name": "com.example.MyAuthorizer"})


def test_a_protocol_map_with_ssl_entries_is_fine_while_listeners_are_plaintext():
    load(**{"listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL",
            "authorizer.class.name": "", "security.inter.broker.protocol": "plaintext"})
    with pytest.raises(InvalidConfigError, match="no security protocol is defined for listener INTERNAL"):
        load(listeners="INTERNAL://127.0.0.1:1")


def test_unknown_and_no_effect_keys_are_warned_about_by_name():
    cfg = load(listners="x", **{"log.retention.hourz": "5", "num.io.threads": "8", "zzz.qqq": "1"})
    warnings = cfg.warnings()
    assert "Unknown configuration 'listners' is ignored (did you mean listeners?)" in warnings
    assert "Unknown configuration 'log.retention.hourz' is ignored (did you mean log.retention.hours?)" in warnings
    assert "Unknown configuration 'zzz.qqq' is ignored" in warnings
    assert any(w.startswith("Configuration num.io.threads is accepted but has no effect") for w in warnings)
    assert load(**{"log.retention.hours": "5", "broker.id": "3"}).warnings() == []


def test_aliases_and_duplicate_dirs(tmp_path):
    assert load(**{"broker.id": "3"}).node_id == 3
    assert load(**{"log.dir": str(tmp_path)}).log_dirs == [tmp_path]
    with pytest.raises(InvalidConfigError, match="disagree"):
        load(**{"broker.id": "3", "node.id": "4"})
    with pytest.raises(InvalidConfigError, match=re.escape(f"{tmp_path}/a/ and {tmp_path}/a are the same")):
        load(**{"log.dirs": f"{tmp_path}/a,{tmp_path}/b,{tmp_path}/a/"})


def test_manager_config_is_checked_by_the_registry():
    cfg = ManagerConfig.from_broker_props({"num.recovery.threads.per.data.dir": "3", "broker.id": "7",
                                           "log.initial.task.delay.ms": "5"})
    assert (cfg.num_recovery_threads_per_data_dir, cfg.node_id, cfg.initial_task_delay_ms) == (3, 7, 5)
    with pytest.raises(InvalidConfigError, match=re.escape("num.recovery.threads.per.data.dir")):
        ManagerConfig.from_broker_props({"num.recovery.threads.per.data.dir": "0"})


def test_describe_keeps_its_contract():
    d = load(**{"num.partitions": "3", "made.up": "x"}).describe()
    assert d["num.partitions"] == ("3", False) and d["made.up"] == ("x", False)
    assert d["num.recovery.threads.per.data.dir"] == ("1", True)
    assert d["auto.create.topics.enable"] == ("true", True) and d["log.dirs"] == ("kafkalite-data", True)
    assert all(isinstance(v, str) and isinstance(dflt, bool) for v, dflt in d.values())


def test_properties_reader_handles_java_escapes(tmp_path):
    text = ("# comment\n! also a comment\n"
            "a\\ key = value with \\u00e9 and \\= sign\n"
            "path=/x/\\\n     y\n"
            "colon:1\n"
            "space 2\n"
            "empty\n"
            "tab\\tkey=\\ttab\n")
    assert parse_properties(text) == {"a key": "value with é and = sign", "path": "/x/y", "colon": "1",
                                      "space": "2", "empty": "", "tab\tkey": "\ttab"}
    f = tmp_path / "s.properties"
    f.write_bytes("k=\u00e9\n".encode("latin-1"))
    assert read_properties(f) == {"k": "é"}
    f.write_text("k=\u00e9\n", encoding="utf-8")
    assert read_properties(f) == {"k": "é"}
    f.write_text("k=\\u00zz\n")
    with pytest.raises(InvalidConfigError, match=re.escape(str(f))):
        read_properties(f)
    with pytest.raises(InvalidConfigError, match="cannot read the config file"):
        read_properties(tmp_path / "missing")


_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)


@given(st.dictionaries(_text.filter(bool), _text, max_size=8))
def test_properties_round_trip_through_javas_writer(props):
    assert parse_properties(javaproperties.dumps(props, timestamp=None)) == props
