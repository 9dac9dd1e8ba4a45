"""Kafka's ZooKeeper JSON: round trips of every znode document, and documents as Kafka writes them."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.cluster import znodes as z

ids = st.integers(0, 2**31 - 1)
names = st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True)
hosts = st.sampled_from(["127.0.0.1", "broker-1.example", "::1", "localhost"])
endpoints = st.builds(z.Endpoint, st.sampled_from(["PLAINTEXT", "INTERNAL"]), hosts, st.integers(1, 65535),
                      st.just("PLAINTEXT"))


@pytest.mark.slow
@given(ids, st.lists(endpoints, min_size=1, max_size=3, unique_by=lambda e: e.listener),
       st.none() | st.text(min_size=1, max_size=10), st.integers(0, 2**62))
def test_broker_registration_round_trip(broker_id, eps, rack, czxid):
    reg = z.BrokerRegistration(broker_id, tuple(eps), rack)
    back = z.BrokerRegistration.decode(broker_id, reg.encode(), czxid)
    assert back == z.BrokerRegistration(broker_id, tuple(eps), rack, czxid)


def test_broker_registration_is_kafka_v5():
    doc = json.loads(z.BrokerRegistration(3, (z.Endpoint("PLAINTEXT", "h", 9092),), "r1").encode())
    assert doc["version"] == 5 and doc["host"] == "h" and doc["port"] == 9092 and doc["jmx_port"] == -1
    assert doc["endpoints"] == ["PLAINTEXT://h:9092"] and doc["rack"] == "r1" and doc["features"] == {}
    assert doc["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert isinstance(doc["timestamp"], str)
    assert "rack" not in json.loads(z.BrokerRegistration(3, (z.Endpoint("PLAINTEXT", "h", 1),)).encode())


def test_reads_a_registration_written_by_kafka():
    kafka = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
             b'"endpoints":["PLAINTEXT://kafka-0:9092"],"jmx_port":-1,"port":9092,"host":"kafka-0",'
             b'"version":5,"timestamp":"1700000000000","extra":1}')
    reg = z.BrokerRegistration.decode(0, kafka, 42)
    assert reg.endpoint() == z.Endpoint("PLAINTEXT", "kafka-0", 9092) and reg.epoch == 42 and reg.rack is None


@pytest.mark.slow
@given(names, st.uuids(), st.dictionaries(st.integers(0, 1000), st.lists(ids, min_size=1, max_size=5),
                                          min_size=1, max_size=20))
def test_topic_assignment_round_trip(topic, topic_id, parts):
    a = z.TopicAssignment(topic, topic_id, parts)
    assert z.TopicAssignment.decode(topic, a.encode()) == a


def test_topic_ids_are_kafka_base64():
    u = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    text = z.topic_id_to_str(u)
    assert len(text) == 22 and "=" not in text and z.topic_id_from_str(text) == u
    doc = json.loads(z.TopicAssignment("t", u, {0: [1, 2], 1: [2, 1]}).encode())
    assert doc == {"version": 3, "partitions": {"0": [1, 2], "1": [2, 1]}, "adding_replicas": {},
                   "removing_replicas": {}, "topic_id": text}


def test_assignment_without_topic_id_reads_as_zero_id():
    a = z.TopicAssignment.decode("t", b'{"version":1,"partitions":{"0":[1]}}')
    assert a.topic_id == uuid.UUID(int=0) and a.partitions == {0: [1]}


@given(st.integers(-1, 100), st.integers(0, 2**31 - 1), st.lists(ids, max_size=5), st.integers(0, 1000),
       st.integers(0, 1000))
def test_partition_state_round_trip(leader, epoch, isr, cepoch, version):
    s = z.PartitionState(leader, epoch, tuple(isr), cepoch, version)
    assert z.PartitionState.decode("/p", s.encode(), version) == s
    assert json.loads(s.encode())["version"] == 1


@given(ids)
def test_controller_and_epoch_round_trip(broker_id):
    assert z.decode_controller(z.encode_controller(broker_id)) == broker_id
    assert z.decode_controller_epoch(z.encode_controller_epoch(broker_id)) == broker_id
    assert z.encode_controller_epoch(7) == b"7"  # plain text, not JSON


@pytest.mark.slow
@given(names, st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=20), max_size=5))
def test_topic_config_and_change_round_trip(topic, cfg):
    assert z.decode_topic_config(topic, z.encode_topic_config(cfg)) == cfg
    assert z.decode_config_change("/c", z.encode_config_change(topic)) == ("topics", topic)


@given(ids, st.integers(0, 2**60))
def test_producer_id_block_round_trip(broker_id, start):
    b = z.ProducerIdBlock(broker_id, start, start + 999)
    assert z.ProducerIdBlock.decode(b.encode()) == b
    doc = json.loads(b.encode())
    assert doc["block_start"] == str(start) and doc["version"] == 1
    assert b.next(5) == z.ProducerIdBlock(5, start + 1000, start + 1999)


def test_cluster_id_round_trip():
    cid = z.new_cluster_id()
    assert len(cid) == 22 and z.decode_cluster_id(z.encode_cluster_id(cid)) == cid
    assert json.loads(z.encode_cluster_id(cid))["version"] == "1"


@pytest.mark.parametrize("data", [b"", b"not json", b"[1]", b'{"leader":"x"}', b"\xff"])
def test_malformed_documents_name_the_path(data):
    with pytest.raises(z.ZnodeFormatError, match="/brokers/topics/t/partitions/0/state"):
        z.PartitionState.decode(z.partition_state_path("t", 0), data)
    with pytest.raises(z.ZnodeFormatError, match="/brokers/ids/4"):
        z.BrokerRegistration.decode(4, data)


def test_paths():
    assert z.partition_state_path("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert z.broker_path(1) == "/brokers/ids/1" and z.delete_topic_path("t") == "/admin/delete_topics/t"
    assert z.topic_config_path("t") == "/config/topics/t"
