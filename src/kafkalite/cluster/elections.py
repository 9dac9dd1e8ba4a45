"""Leader election, as pure functions of a partition's assigned replicas, its ISR and the brokers that can lead
(Kafka's Election.scala and PartitionLeaderElectionAlgorithms). The controller reads the state, asks one of
these, and writes what it answers; each rule is written once here and tested as a table
(tests/test_cluster_elections.py).

`electable` is the set of brokers that may lead: registered (live) and not in controlled shutdown, Kafka's
isReplicaOnline without shutting-down brokers. A choice is (leader, ISR); None means no replica can lead.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

Choice = tuple[int, tuple[int, ...]]


def in_sync_candidates(replicas: Sequence[int], isr: Sequence[int], electable: Container[int]) -> list[int]:
    """The assigned replicas, in assignment order, that can lead and hold every committed record."""
    return [b for b in replicas if b in electable and b in isr]


def offline(replicas: Sequence[int], isr: Sequence[int], electable: Container[int], unclean_allowed: bool,
            stay_in_sync: Container[int] | None = None) -> Choice | None:
    """Kafka's offlinePartitionLeaderElection: the first assigned replica that can lead and is in the ISR, with
    the ISR cut to `stay_in_sync` (default: those that can lead); else, when unclean election is allowed, the
    first assigned replica that can lead, alone in the ISR (what only the old leader had is lost); else None.

    The controller's own offline elections keep a broker in controlled shutdown in the ISR (`stay_in_sync` =
    every registered broker): it is still caught up until it stops, and leaves the ISR then. Kafka drops it
    at once (docs/design.md, deviations)."""
    candidates = in_sync_candidates(replicas, isr, electable)
    if candidates:
        keep = electable if stay_in_sync is None else stay_in_sync
        return candidates[0], tuple(b for b in isr if b in keep)
    if unclean_allowed:
        live = [b for b in replicas if b in electable]
        if live:
            return live[0], (live[0],)
    return None


def preferred(replicas: Sequence[int], leader: int, isr: Sequence[int], electable: Container[int]) -> Choice | None:
    """Kafka's preferredReplicaPartitionLeaderElection: the first assigned replica, when it is not the leader
    already, can lead and is in the ISR; the ISR unchanged."""
    if not replicas or leader == replicas[0]:
        return None
    first = replicas[0]
    if first not in electable or first not in isr:
        return None
    return first, tuple(isr)


def controlled_shutdown(replicas: Sequence[int], leader: int, isr: Sequence[int], stopping: int,
                        electable: Container[int], shutting_down: Container[int]) -> Choice | None:
    """Kafka's controlledShutdownPartitionLeaderElection, for a partition that `stopping` leads: the first
    assigned replica in the ISR that can lead, with the brokers shutting down taken out of the ISR. None when
    the leader moved meanwhile or no in-sync replica can take over."""
    if leader != stopping:
        return None
    candidates = in_sync_candidates(replicas, isr, electable)
    if not candidates:
        return None
    return candidates[0], tuple(b for b in isr if b not in shutting_down)


def reassignment_leader(target: Sequence[int], leader: int, isr: Sequence[int], electable: Container[int]
                        ) -> int | None:
    """Kafka's reassignPartitionLeaderElection: the current leader if it stays a replica and can lead, else the
    first target replica that can lead and is in the ISR; None if there is none yet."""
    if leader in target and leader in electable:
        return leader
    candidates = in_sync_candidates(target, isr, electable)
    return candidates[0] if candidates else None
