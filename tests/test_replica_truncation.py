"""The follower's truncation decision (KIP-101, KIP-279: Kafka's AbstractFetcherThread), pure: a table of
Kafka's cases and a property over random diverged histories, run through both ways of asking the leader
(the Fetch response's diverging epoch and OffsetsForLeaderEpoch) against real LeaderEpochCaches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.broker.replica_fetcher import truncation_on_fetch_supported
from kafkalite.replication.truncation import truncation_offset
from kafkalite.storage.leader_epoch import LeaderEpochCache


def cache_of(epochs: list[int]) -> LeaderEpochCache:
    """The epoch cache of a log whose offset i was written in epochs[i] (as appends assign it)."""
    c = LeaderEpochCache()
    for offset, e in enumerate(epochs):
        if c.latest_epoch != e:
            c.assign(e, offset)
    return c


def local(epochs: list[int]):
    c = cache_of(epochs)
    return lambda e: c.end_offset_for(e, len(epochs))


def test_worked_example_of_the_reference():
    # A led epoch 1 (offsets 0-12, 10-12 only on A); B leads epoch 2 from 10 and wrote 10-14.
    a = [1] * 13
    leader = cache_of([1] * 10 + [2] * 5)
    epoch, end = leader.end_offset_for(1, 15)
    assert (epoch, end) == (1, 10)
    assert truncation_offset(epoch, end, local(a), 13, 10) == (10, True)


def test_table_of_cases():
    # leader knows no such epoch -> back to the HW
    assert truncation_offset(3, -1, local([1, 1, 1]), 3, 2) == (2, True)
    # pre-KIP-279 answer without an epoch -> its offset, never past our LEO
    assert truncation_offset(-1, 7, local([1, 1, 1]), 3, 0) == (3, True)
    assert truncation_offset(-1, 1, local([1, 1, 1]), 3, 0) == (1, True)
    # all our epochs are older than the answer's: its end offset
    assert truncation_offset(5, 2, local([1, 1, 1]), 3, 0) == (2, True)
    # we never had the leader's epoch 2: end of our largest epoch below it, and ask again
    assert truncation_offset(2, 6, local([1, 1, 3, 3, 3]), 5, 0) == (2, False)
    # same epoch: the smaller end
    assert truncation_offset(3, 4, local([1, 1, 3, 3, 3]), 5, 0) == (4, True)
    assert truncation_offset(3, 9, local([1, 1, 3, 3, 3]), 5, 0) == (5, True)


def test_truncation_on_fetch_follows_the_inter_broker_protocol():
    assert truncation_on_fetch_supported("3.6")
    assert truncation_on_fetch_supported("2.7-IV1")
    assert not truncation_on_fetch_supported("2.6")
    assert not truncation_on_fetch_supported("2.3-IV0")


@st.composite
def diverged(draw):
    """(leader history, follower history, common prefix length): per-offset epochs, non-decreasing; after the
    common prefix each side continues in epochs the other never wrote at those offsets (one leader per epoch:
    the same epoch at the same offset is the same record), and the leader's current epoch is the highest."""
    prefix = sorted(draw(st.lists(st.integers(0, 6), max_size=8)))
    last = prefix[-1] if prefix else 0
    pool = list(range(last, 12))
    own = draw(st.lists(st.sampled_from(pool), max_size=6, unique=True))
    split = draw(st.integers(0, len(own)))
    f_epochs, l_epochs = set(own[:split]), set(own[split:])
    f_suffix = sorted(draw(st.lists(st.sampled_from(sorted(f_epochs)), max_size=6))) if f_epochs else []
    l_suffix = sorted(draw(st.lists(st.sampled_from(sorted(l_epochs)), max_size=6))) if l_epochs else []
    follower = prefix + f_suffix
    leader = prefix + l_suffix
    return leader, follower, len(prefix)


def _leader_answer(leader: list[int], current: int, epoch: int) -> tuple[int, int]:
    c = cache_of(leader)
    c.assign(current, len(leader))  # makeLeader records the current epoch at its log end
    return c.end_offset_for(epoch, len(leader))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(diverged(), st.booleans())
def test_iteration_ends_where_the_histories_agree(case, on_fetch):
    leader, follower, common = case
    current = max(leader + follower + [0]) + 1
    if not follower:
        return
    for _ in range(50):
        fc = cache_of(follower)
        latest = fc.latest_epoch
        assert latest is not None
        epoch, end = _leader_answer(leader, current, latest)
        if on_fetch and epoch == latest and end >= len(follower):
            break  # no diverging epoch: the leader sends records from here
        offset, done = truncation_offset(epoch, end, local(follower), len(follower), 0)
        assert offset <= len(follower)
        follower = follower[:offset]
        if not follower or (done and not on_fetch):
            break
    else:
        raise AssertionError("truncation did not converge")
    assert len(follower) == common
    assert follower == leader[:common]
