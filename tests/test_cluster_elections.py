"""Leader election rules as tables: `cluster/elections.py`, the one home of each rule the controller applies."""

from __future__ import annotations

import pytest

from kafkalite.cluster import elections

ALL = {1, 2, 3}


@pytest.mark.parametrize(("replicas", "isr", "electable", "unclean", "choice"), [
    ([1, 2, 3], [1, 2, 3], ALL, False, (1, (1, 2, 3))),          # the first assigned in-sync replica
    ([1, 2, 3], [3, 2], ALL, False, (2, (3, 2))),                # assignment order, not ISR order
    ([1, 2, 3], [1, 2, 3], {2, 3}, False, (2, (2, 3))),          # the dead one leaves the ISR
    ([1, 2, 3], [1], {2, 3}, False, None),                       # no in-sync replica: offline
    ([1, 2, 3], [1], {2, 3}, True, (2, (2,))),                   # unclean: the first live replica, alone
    ([1, 2, 3], [1], set(), True, None),                         # nothing can lead
    ([3, 1], [1, 3], {1}, False, (1, (1,))),
], ids=["first-in-sync", "assignment-order", "dead-leaves-isr", "offline", "unclean", "none-live", "two-replicas"])
def test_offline_election(replicas, isr, electable, unclean, choice):
    assert elections.offline(replicas, isr, electable, unclean) == choice


def test_a_broker_in_controlled_shutdown_can_stay_in_sync_but_never_leads():
    """Broker 2 is shutting down (registered, not electable): the controller's offline election keeps it in the
    ISR (every registered broker stays), ElectLeaders' drops it."""
    assert elections.offline([2, 1, 3], [2, 1], {1, 3}, False, stay_in_sync={1, 2, 3}) == (1, (2, 1))
    assert elections.offline([2, 1, 3], [2, 1], {1, 3}, False) == (1, (1,))


@pytest.mark.parametrize(("replicas", "leader", "isr", "electable", "choice"), [
    ([1, 2, 3], 2, [1, 2, 3], ALL, (1, (1, 2, 3))),              # back to the first assigned replica
    ([1, 2, 3], 1, [1, 2, 3], ALL, None),                        # it leads already
    ([1, 2, 3], 2, [2, 3], ALL, None),                           # not in sync yet
    ([1, 2, 3], 2, [1, 2, 3], {2, 3}, None),                     # not live (or shutting down)
    ([], -1, [], ALL, None),
], ids=["moves-back", "already", "out-of-sync", "not-electable", "no-replicas"])
def test_preferred_election(replicas, leader, isr, electable, choice):
    assert elections.preferred(replicas, leader, isr, electable) == choice


@pytest.mark.parametrize(("leader", "isr", "electable", "shutting", "choice"), [
    (1, [1, 2, 3], {2, 3}, {1}, (2, (2, 3))),                     # moves away, the stopping broker leaves the ISR
    (2, [1, 2, 3], {2, 3}, {1}, None),                            # it does not lead this one (any more)
    (1, [1], {2, 3}, {1}, None),                                  # no in-sync replica to take over: it keeps it
    (1, [1, 2, 3], {3}, {1, 2}, (3, (3,))),                       # two brokers stopping at once
], ids=["moves", "not-its-own", "nobody-in-sync", "two-stopping"])
def test_controlled_shutdown_election(leader, isr, electable, shutting, choice):
    assert elections.controlled_shutdown([1, 2, 3], leader, isr, 1, electable, shutting) == choice


@pytest.mark.parametrize(("target", "leader", "isr", "electable", "chosen"), [
    ([1, 4], 1, [1, 2, 4], {1, 2, 4}, 1),                         # the leader stays a replica: it keeps leading
    ([4, 5], 1, [1, 4, 5], {1, 4, 5}, 4),                         # it leaves: the first in-sync target replica
    ([4, 5], 1, [1, 5], {1, 4, 5}, 5),
    ([4, 5], 1, [1], {1, 4, 5}, None),                            # no target replica in sync yet
    ([1, 4], 1, [1, 4], {4}, 4),                                  # the leader stays but cannot lead
], ids=["stays", "moves", "first-in-sync", "none-yet", "stays-dead"])
def test_reassignment_leader(target, leader, isr, electable, chosen):
    assert elections.reassignment_leader(target, leader, isr, electable) == chosen
