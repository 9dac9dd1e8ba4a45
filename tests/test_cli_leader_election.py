"""`kafkalite leader-election`'s JSON file (kafka-leader-election.sh's --path-to-json-file) and option rules;
the elections themselves are in tests/test_cluster_operations.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.cli.common import UsageError
from kafkalite.cli.leader_election import parse_election_json
from kafkalite.cli.main import main

partitions = st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), min_size=1,
                      max_size=20, unique=True)


@pytest.mark.slow
@given(partitions)
def test_valid_files_give_their_partitions(tps):
    doc = {"partitions": [{"topic": t, "partition": p} for t, p in tps]}
    assert parse_election_json(json.dumps(doc), "f.json") == tps


@given(st.one_of(st.text(max_size=200), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["partitions", "topic", "partition",
                                                                                 "x"]), inner, max_size=4),
    max_leaves=12).map(json.dumps)))
def test_anything_else_is_refused_naming_the_file(text):
    try:
        out = parse_election_json(text, "f.json")
    except UsageError as exc:
        assert str(exc).startswith("f.json: ")
    else:
        assert out and all(isinstance(t, str) and isinstance(p, int) for t, p in out)


@pytest.mark.parametrize(("doc", "message"), [
    ({}, 'Replica election data is missing "partitions" field'),
    ({"partitions": []}, "Replica election data is empty"),
    ({"partitions": [{"topic": "a", "partition": 1}, {"topic": "a", "partition": 1}]},
     "Replica election data contains duplicate partitions: a-1"),
    ({"partitions": [{"topic": "a", "partition": "1"}]}, 'partitions[0] needs "topic" (string) and "partition"'),
])
def test_kafka_messages(doc, message):
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        parse_election_json(json.dumps(doc), "f.json")


@pytest.mark.parametrize("args", [
    ["--election-type", "preferred"],
    ["--election-type", "preferred", "--all-topic-partitions", "--topic", "t", "--partition", "0"],
    ["--election-type", "preferred", "--topic", "t"],
    ["--election-type", "preferred", "--all-topic-partitions", "--partition", "0"],
])
def test_exactly_one_selection_and_partition_with_topic(args, capsys):
    assert main(["leader-election", "--bootstrap-server", "127.0.0.1:1", *args]) == 2
    assert capsys.readouterr().err.startswith("Error: ")
