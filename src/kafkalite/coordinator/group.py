"""A classic consumer group and its members (Kafka's ClassicGroup / ClassicGroupMember).

The group holds the state the rebalance protocol moves through, the members with their supported
protocols, the parked JoinGroup/SyncGroup responses (asyncio futures), and the derived facts Kafka keeps
(the static instance-id map, pending members, members yet to sync, subscribed topics). It makes no
decisions about timing or persistence; `rebalance.py` drives it.

States and their allowed predecessors are Kafka's:

    Empty <- PreparingRebalance
    PreparingRebalance <- Stable, CompletingRebalance, Empty
    CompletingRebalance <- PreparingRebalance
    Stable <- CompletingRebalance
    Dead <- any
"""

from __future__ import annotations

import asyncio
import enum
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkalite.clock import Clock
from kafkalite.coordinator.consumer_protocol import PROTOCOL_TYPE, decode_subscription_topics
from kafkalite.coordinator.offsets import OffsetAndMetadata
from kafkalite.error_codes import ErrorCode
from kafkalite.errors import CorruptRecordError

log = logging.getLogger("kafkalite.coordinator")

Protocols = list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
Response = dict[str, Any]


def superseded_join(member_id: str) -> Response:
    return {"error_code": ErrorCode.REBALANCE_IN_PROGRESS, "member_id": member_id, "generation_id": -1,
            "protocol_type": None, "protocol_name": None, "leader": "", "skip_assignment": False, "members": []}


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                               GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    awaiting_join: asyncio.Future[Response] | None = None
    awaiting_sync: asyncio.Future[Response] | None = None
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of the candidate protocols {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """A new member can time out while it waits to join; others waiting on a rebalance count as alive."""
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    clock: Clock
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    current_state_timestamp: int | None = None
    previous_state: GroupState = GroupState.DEAD
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_join_members: set[str] = field(default_factory=set)  # got MEMBER_ID_REQUIRED, not back yet
    pending_sync_members: set[str] = field(default_factory=set)
    subscribed_topics: set[str] | None = None
    new_member_added: bool = False

    def __post_init__(self) -> None:
        if self.current_state_timestamp is None:
            self.current_state_timestamp = self.clock.milliseconds()

    # --- state ----------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise RuntimeError(f"group {self.group_id} cannot move from {self.state} to {target}")
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp = self.clock.milliseconds()

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    @property
    def is_empty(self) -> bool:
        return self.state is GroupState.EMPTY

    def is_simple(self) -> bool:
        """A group only ever used for commits (no protocol type, no members)."""
        return self.protocol_type is None and not self.members and not self.pending_join_members

    # --- members --------------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    def add(self, member: Member, future: asyncio.Future[Response] | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in group {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.awaiting_join = future
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """A static member rejoined with a new member id: fence the old id's parked requests and move
        everything it had (protocols, assignment, leadership) to the new id."""
        old = self.members.pop(old_member_id)
        self.complete_join(old, {"error_code": ErrorCode.FENCED_INSTANCE_ID, "member_id": old_member_id, "members": [],
                                 "protocol_name": None, "protocol_type": None, "leader": "",
                                 "skip_assignment": False})
        self.complete_sync(old, {"error_code": ErrorCode.FENCED_INSTANCE_ID, "assignment": b"", "protocol_name": None,
                                 "protocol_type": None})
        new = Member(new_member_id, old.group_instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                     old.session_timeout_ms, old.protocol_type, list(old.protocols), old.assignment)
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return new

    def update_member(self, member: Member, protocols: Protocols, rebalance_timeout_ms: int, session_timeout_ms: int,
                      future: asyncio.Future[Response] | None) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        replaced = member.awaiting_join
        if replaced is not None and replaced is not future and not replaced.done():
            # A client sends one JoinGroup at a time: an older parked one was given up; let it go.
            replaced.set_result(superseded_join(member.member_id))
        member.awaiting_join = future

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """NONE when the (member id, instance id) pair is a current member; FENCED_INSTANCE_ID for an
        instance id now held by another member id (a zombie of a restarted static member)."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                log.info("Member %s of static instance %s in group %s is fenced by member %s", member_id,
                         group_instance_id, self.group_id, existing)
                return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count() and not self.pending_join_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else hand leadership to a member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for m in self.members.values():
            if m.awaiting_join is not None:
                log.info("Group %s leader %s did not rejoin in time; %s is the new leader", self.group_id,
                         self.leader_id, m.member_id)
                self.leader_id = m.member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # --- protocols -----------------------------------------------------------------------------

    def _candidate_protocols(self) -> set[str]:
        sets = [m.protocol_names() for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """An Empty group takes any non-empty protocol type and list; otherwise both must fit the group."""
        if self.is_in(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(names & self._candidate_protocols())

    def select_protocol(self) -> str:
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=lambda k: votes[k])

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, when the group speaks the consumer protocol and they parse."""
        if not self.uses_consumer_protocol():
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(decode_subscription_topics(m.metadata(self.protocol_name)))
        except (CorruptRecordError, KeyError) as exc:
            log.warning("Group %s: cannot read the consumer protocol subscriptions (%s); its subscribed topics "
                        "stay unknown", self.group_id, exc)
            return None
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed_topics

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    # --- parked responses ----------------------------------------------------------------------

    @staticmethod
    def complete_join(member: Member, response: Response) -> bool:
        fut = member.awaiting_join
        if fut is None:
            return False
        member.awaiting_join = None
        if not fut.done():
            fut.set_result(response)
        return True

    @staticmethod
    def complete_sync(member: Member, response: Response) -> bool:
        fut = member.awaiting_sync
        if fut is None:
            return False
        member.awaiting_sync = None
        if not fut.done():
            fut.set_result(response)
        return True

    def join_members_view(self) -> list[Response]:
        """The member list the leader gets in its JoinGroup response."""
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(self.protocol_name)} for m in self.members.values()]

    def assignments(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}

    # --- offsets retention ---------------------------------------------------------------------

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        """From when an offset's retention counts, or None when this group's offsets must not expire now
        (Kafka's ClassicGroup.offsetExpirationCondition, KIP-211)."""
        if self.protocol_type:
            if self.is_in(GroupState.EMPTY):
                ts = self.current_state_timestamp
                return (lambda om: om.commit_timestamp) if ts is None or ts < 0 else (lambda _om: ts)
            if self.uses_consumer_protocol() and self.subscribed_topics is not None and self.is_in(GroupState.STABLE):
                return lambda om: om.commit_timestamp
            return None
        return lambda om: om.commit_timestamp
