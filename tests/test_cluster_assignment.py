"""Kafka's replica assignment: the properties AdminUtils' tests check, and Kafka's own worked example."""

from __future__ import annotations

import collections
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.cluster.assignment import assign_replicas, rack_alternated
from kafkalite.errors import (
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    InvalidReplicationFactorError,
)


def test_kafka_worked_example():
    # AdminUtils' scaladoc: 5 brokers, 10 partitions, RF 3, start index 0 (fixed shift 0)
    got = assign_replicas(10, 3, [0, 1, 2, 3, 4], fixed_start=0)
    assert got == {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                   5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


@given(st.integers(1, 40), st.integers(1, 8), st.data())
def test_unaware_properties(partitions, n_brokers, data):
    brokers = data.draw(st.lists(st.integers(0, 100), min_size=n_brokers, max_size=n_brokers, unique=True))
    rf = data.draw(st.integers(1, n_brokers))
    got = assign_replicas(partitions, rf, brokers, rng=random.Random(data.draw(st.integers(0, 1000))))
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(brokers)
    leaders = collections.Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1  # leaders spread evenly
    counts = collections.Counter(b for r in got.values() for b in r)
    assert max(counts.values()) - min(counts.get(b, 0) for b in brokers) <= rf  # replicas spread too


def test_added_partitions_continue_the_numbering():
    got = assign_replicas(3, 2, [1, 2, 3], start_partition=5, fixed_start=0)
    assert sorted(got) == [5, 6, 7]


@given(st.integers(1, 30), st.data())
def test_rack_aware_uses_distinct_racks_first(partitions, data):
    racks = {b: r for b, r in zip(range(1, 7), "aabbcc", strict=True)}
    rf = data.draw(st.integers(1, 6))
    got = assign_replicas(partitions, rf, list(racks), racks, rng=random.Random(data.draw(st.integers(0, 99))))
    for replicas in got.values():
        assert len(set(replicas)) == rf
        used = [racks[b] for b in replicas]
        assert len(set(used)) == min(rf, 3)  # as many racks as possible
    leaders = collections.Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 1


def test_rack_alternated_order():
    assert rack_alternated({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}) == \
        [0, 3, 1, 5, 4, 2]


def test_refusals():
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 2"):
        assign_replicas(1, 3, [1, 2])
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(1, 0, [1, 2])
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(0, 1, [1, 2])
    with pytest.raises(InvalidReplicationAssignmentError, match=r"brokers \[2\] have no broker.rack"):
        assign_replicas(1, 1, [1, 2], {1: "a", 2: None})
