"""Kafka's replica assignment for new topics and partitions (AdminUtils.assignReplicasToBrokers, 2.8).

Round-robin from a random start spreads leaders (first replicas) evenly over the brokers; the followers of
each partition are shifted by an amount that grows every time the partition ids wrap around the broker list,
so that the replicas of one broker's partitions are spread too. When every broker has a rack, the broker list
is first arranged to alternate racks and each partition's replicas go to distinct racks while there are
racks left, as Kafka does. The same numbers come out as from Kafka for the same start index and shift.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from kafkalite.errors import (
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    InvalidReplicationFactorError,
)


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _check(partitions: int, replication_factor: int, brokers: int) -> None:
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > brokers:
        raise InvalidReplicationFactorError(f"Replication factor: {replication_factor} larger than available "
                                            f"brokers: {brokers}.")


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn (racks sorted, brokers sorted within a rack): a1, b1, c1, a2, ..."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        q = queues[i]
        if q:
            out.append(q.pop(0))
        i = (i + 1) % len(queues)
    return out


def assign_replicas(partitions: int, replication_factor: int, brokers: Sequence[int],
                    racks: Mapping[int, str | None] | None = None, *, start_partition: int = 0,
                    fixed_start: int = -1, rng: random.Random | None = None) -> dict[int, list[int]]:
    """partition id -> replicas (AR order) for `partitions` new partitions numbered from `start_partition`.

    `fixed_start` >= 0 fixes both Kafka's random start index and its initial follower shift (tests)."""
    _check(partitions, replication_factor, len(brokers))
    rng = rng or random.Random()
    given = {b: (racks or {}).get(b) for b in brokers}
    with_rack = {b: r for b, r in given.items() if r is not None}
    if with_rack and len(with_rack) != len(given):
        missing = sorted(b for b, r in given.items() if r is None)
        raise InvalidReplicationAssignmentError(f"Not all brokers have rack information: brokers {missing} have "
                                                "no broker.rack; set it on every broker or on none")
    if with_rack:
        arranged = rack_alternated(with_rack)
        return _assign(partitions, replication_factor, arranged, with_rack, start_partition, fixed_start, rng)
    return _assign(partitions, replication_factor, sorted(brokers), None, start_partition, fixed_start, rng)


def _assign(partitions: int, rf: int, arranged: list[int], racks: Mapping[int, str] | None, start_partition: int,
            fixed_start: int, rng: random.Random) -> dict[int, list[int]]:
    n = len(arranged)
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    n_racks = len(set(racks.values())) if racks else 0
    out: dict[int, list[int]] = {}
    for pid in range(max(0, start_partition), max(0, start_partition) + partitions):
        if pid > 0 and pid % n == 0:
            shift += 1
        first = (pid + start) % n
        leader = arranged[first]
        replicas = [leader]
        if racks is None:
            replicas += [arranged[_replica_index(first, shift, j, n)] for j in range(rf - 1)]
        else:
            used_racks = {racks[leader]}
            used = {leader}
            k = 0
            for _ in range(rf - 1):
                while True:
                    broker = arranged[_replica_index(first, shift * n_racks, k, n)]
                    rack = racks[broker]
                    k += 1
                    if (rack not in used_racks or len(used_racks) == n_racks) and \
                            (broker not in used or len(used) == n):
                        replicas.append(broker)
                        used_racks.add(rack)
                        used.add(broker)
                        break
        out[pid] = replicas
    return out
