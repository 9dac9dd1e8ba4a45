"""Partition reassignment's replica sets (Kafka's ReplicaAssignment, KIP-455), kept in the topic's znode.

While a partition moves from its original replicas (ORS) to a target set (TRS), its assignment lists every
replica of both, target first (RS = TRS + (ORS - TRS)), and names the replicas being added (TRS - ORS) and
removed (ORS - TRS). The topic znode's `adding_replicas` and `removing_replicas` hold them, so a new controller
resumes a reassignment its predecessor started. Everything here is pure: the controller does the I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ReplicaSets:
    """One partition's assignment: `replicas` (RS, in order), `adding` and `removing` (empty when not moving)."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def moving(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        """TRS: the replicas once the move is done (RS without those being removed), in the target's order."""
        return tuple(b for b in self.replicas if b not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """ORS: the replicas before the move (RS without those being added)."""
        return tuple(b for b in self.replicas if b not in self.adding)

    def reassign_to(self, target: Sequence[int]) -> ReplicaSets:
        """The sets for a move to `target` from this partition's original replicas: a new target for a partition
        already moving replaces the old one (Kafka's ReplicaAssignment.reassignTo); the originals stay the
        reference, so replicas only the old target added are not kept."""
        original = self.original
        full = tuple(dict.fromkeys([*target, *original]))
        adding = tuple(b for b in target if b not in original)
        removing = tuple(b for b in original if b not in target)
        return ReplicaSets(full, adding, removing)

    def done(self) -> ReplicaSets:
        """The sets once the move completed: the target alone."""
        return ReplicaSets(self.target)


def invalid_target(target: Sequence[int] | None, live: set[int]) -> str | None:
    """Why `target` cannot be a partition's new replicas (Kafka's INVALID_REPLICA_ASSIGNMENT messages), or None."""
    if target is None:
        return None
    if not target:
        return "The replica list is empty."
    if len(set(target)) != len(target):
        return f"The replica list {list(target)} contains duplicate brokers."
    if any(b < 0 for b in target):
        return f"The replica list {list(target)} contains negative broker ids."
    dead = sorted(b for b in target if b not in live)
    if dead:
        return f"Replica assignment has brokers that are not alive. Replica list: {list(target)}, live broker list: " \
               f"{sorted(live)}"
    return None
