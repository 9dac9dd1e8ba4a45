"""The follower's settings: Kafka's names and defaults, the inter-broker and control-plane listeners,
num.replica.fetchers."""

from __future__ import annotations

import pytest

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.replica_fetcher import FetcherSettings
from kafkalite.errors import InvalidConfigError

ZK = {"zookeeper.connect": "127.0.0.1:2181"}


def test_defaults_are_kafkas():
    s = FetcherSettings.from_config(BrokerConfig.load(overrides={"node.id": 4}))
    assert (s.node_id, s.wait_max_ms, s.min_bytes, s.max_bytes, s.response_max_bytes, s.backoff_ms,
            s.socket_timeout_ms, s.truncate_on_fetch) == (4, 500, 1, 1048576, 10485760, 1000, 30000, True)


def test_inter_broker_listener_defaults_to_the_protocols_name_and_must_be_advertised():
    two = {"listeners": "PLAINTEXT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT", **ZK}
    assert BrokerConfig.load(overrides=two).inter_broker_listener().port == 9092
    chosen = BrokerConfig.load(overrides={**two, "inter.broker.listener.name": "REPLICATION"})
    chosen.validate()
    assert chosen.inter_broker_listener().port == 9093
    with pytest.raises(InvalidConfigError, match=r"inter\.broker\.listener\.name: the inter-broker listener must"):
        BrokerConfig.load(overrides={**two, "inter.broker.listener.name": "NOPE"}).validate()


def test_the_control_plane_listener_is_its_own_advertised_listener():
    """control.plane.listener.name (KIP-291): defaults to the inter-broker listener; when set, it must be advertised
    and must not be the inter-broker listener itself, as Kafka refuses at start-up."""
    three = {"listeners": "PLAINTEXT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093,CONTROL://127.0.0.1:9094",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT,CONTROL:PLAINTEXT",
             "inter.broker.listener.name": "REPLICATION", **ZK}
    assert BrokerConfig.load(overrides=three).control_plane_listener().port == 9093
    chosen = BrokerConfig.load(overrides={**three, "control.plane.listener.name": "CONTROL"})
    chosen.validate()
    assert chosen.control_plane_listener().port == 9094 and chosen.inter_broker_listener().port == 9093
    with pytest.raises(InvalidConfigError, match=r"control\.plane\.listener\.name: it must be one of advertised"):
        BrokerConfig.load(overrides={**three, "control.plane.listener.name": "NOPE"}).validate()
    with pytest.raises(InvalidConfigError, match=r"control\.plane\.listener\.name: it must not be the inter-broker"):
        BrokerConfig.load(overrides={**three, "control.plane.listener.name": "REPLICATION"}).validate()


def test_other_fetcher_counts_and_old_protocols_are_named():
    cfg = BrokerConfig.load(overrides={"num.replica.fetchers": 3})
    assert any("num.replica.fetchers=3" in w for w in cfg.warnings())
    with pytest.raises(InvalidConfigError, match=r"inter\.broker\.protocol\.version"):
        BrokerConfig.load(overrides={"inter.broker.protocol.version": "2.1"}).validate()
    assert not FetcherSettings.from_config(BrokerConfig.load(overrides={"inter.broker.protocol.version": "2.6-IV0"})
                                           ).truncate_on_fetch
