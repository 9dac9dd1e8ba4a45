"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup over ClassicGroups.

This follows Kafka's GroupMetadataManager for classic groups step by step, because clients depend on its
exact sequencing: which request parks and which answers at once, when a rebalance starts, who waits for
whom, and which error tells a client to rejoin. In short:

- A JoinGroup parks until the join phase completes: when every known member has rejoined, or the
  rebalance timeout (the largest of the members') runs out and the stragglers are dropped. The first
  rebalance of an Empty group waits `group.initial.rebalance.delay.ms`, extended while new members keep
  arriving, so a group of consumers starting together settles in one generation.
- A dynamic member joining with JoinGroup v4+ and no member id first gets MEMBER_ID_REQUIRED with its
  id, and joins for real with that id (KIP-394).
- The leader's SyncGroup carries the assignment; it is written to `__consumer_offsets` and then handed
  to every parked SyncGroup, and the group is Stable.
- A member is dropped when no heartbeat (or commit, or join) arrives within its session timeout; a
  member that never syncs after a join is dropped after the rebalance timeout.
- Static members (KIP-345, `group.instance.id`) keep their place across restarts: a rejoin with the
  same instance id replaces the old member id, fences it, and in a Stable group does not rebalance.

Everything runs on the event loop; the parked requests are futures that the handler awaits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafkalite.clock import Clock
from kafkalite.coordinator.config import CoordinatorConfig
from kafkalite.coordinator.errors import CoordinatorError
from kafkalite.coordinator.group import ClassicGroup, GroupState, Member, Protocols, Response
from kafkalite.coordinator.offsets_topic import PendingWrite
from kafkalite.coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from kafkalite.coordinator.timer import KeyedTimer
from kafkalite.error_codes import ErrorCode

log = logging.getLogger("kafkalite.coordinator")

RecordKV = tuple[bytes, bytes | None]
Persist = Callable[[str, list[RecordKV]], PendingWrite]
"""Appends records for a group to its `__consumer_offsets` partition; raises CoordinatorError on failure."""

WhenCommitted = Callable[[PendingWrite, Callable[[ErrorCode], None]], None]
"""Calls back with NONE once a write is committed (the HW covers it), or with the group error it failed with."""

FutureFactory = Callable[[], "asyncio.Future[Response]"]
"""Makes the future a request parks on (the handler awaits it; the protocol completes it)."""

UNKNOWN_MEMBER = ""


@dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    api_version: int
    client_id: str
    client_host: str
    reason: str | None = None


@dataclass(slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes] = field(default_factory=dict)


def join_error(error: ErrorCode, member_id: str = UNKNOWN_MEMBER) -> Response:
    return {"error_code": error, "member_id": member_id, "generation_id": -1, "protocol_type": None,
            "protocol_name": None, "leader": "", "skip_assignment": False, "members": []}


def sync_response(error: ErrorCode, assignment: bytes = b"", protocol_type: str | None = None,
                  protocol_name: str | None = None) -> Response:
    return {"error_code": error, "assignment": assignment, "protocol_type": protocol_type,
            "protocol_name": protocol_name}


def group_metadata_record(group: ClassicGroup, assignment: dict[str, bytes]) -> RecordKV:
    """The GroupMetadataValue of a group and its assignment (Kafka's newGroupMetadataRecord)."""
    members = [
        MemberMetadata(m.member_id, m.client_id, m.client_host, m.session_timeout_ms, m.rebalance_timeout_ms,
                       m.metadata(group.protocol_name), assignment.get(m.member_id, b""), m.group_instance_id)
        for m in group.members.values()
    ]
    value = GroupMetadataValue(group.protocol_type or "", group.generation_id, group.protocol_name, group.leader_id,
                               group.current_state_timestamp if group.current_state_timestamp is not None else -1,
                               members)
    return encode_group_metadata_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value)


def empty_group_metadata_record(group: ClassicGroup) -> RecordKV:
    """What Kafka writes when a JoinGroup creates a group: generation 0, no protocol, no members."""
    value = GroupMetadataValue("", 0, None, None,
                               group.current_state_timestamp if group.current_state_timestamp is not None else -1)
    return encode_group_metadata_key(GroupMetadataKey(group.group_id)), encode_group_metadata_value(value)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    """SyncGroup v5 names the protocol type and name it expects; null on either side means no check."""
    return requested is not None and current is not None and requested != current


class GroupMembership:
    """The groups of one coordinator and the rebalance protocol over them."""

    def __init__(self, config: CoordinatorConfig, clock: Clock, timer: KeyedTimer, persist: Persist,
                 when_committed: WhenCommitted | None = None) -> None:
        self.config = config
        self.clock = clock
        self.timer = timer
        self.persist = persist
        self.when_committed: WhenCommitted = when_committed or (lambda _write, done: done(ErrorCode.NONE))
        self.groups: dict[str, ClassicGroup] = {}

    # --- timer keys ----------------------------------------------------------------------------

    @staticmethod
    def _heartbeat_key(group_id: str, member_id: str) -> str:
        return f"heartbeat\x00{group_id}\x00{member_id}"

    @staticmethod
    def _join_key(group_id: str) -> str:
        return f"join\x00{group_id}"

    @staticmethod
    def _sync_key(group_id: str) -> str:
        return f"sync\x00{group_id}"

    def cancel_group_timers(self, group: ClassicGroup) -> None:
        self.timer.cancel(self._join_key(group.group_id))
        self.timer.cancel(self._sync_key(group.group_id))
        for mid in [*group.members, *group.pending_join_members]:
            self.timer.cancel(self._heartbeat_key(group.group_id, mid))

    def reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        gid, mid = group.group_id, member.member_id
        self.timer.schedule(self._heartbeat_key(gid, mid),
                            member.session_timeout_ms if timeout_ms is None else timeout_ms,
                            lambda: self._expire_heartbeat(gid, mid))

    # --- JoinGroup -----------------------------------------------------------------------------

    def join(self, r: JoinRequest, respond: Callable[[Response], None], future_factory: FutureFactory) -> None:
        """Handle one JoinGroup. `respond` answers at once; parking happens through the member's future,
        made by `future_factory` and answered later through `respond` by whoever completes the phase."""
        group = self.groups.get(r.group_id)
        new_group = group is None
        if group is None:
            if r.member_id != UNKNOWN_MEMBER:
                respond(join_error(ErrorCode.UNKNOWN_MEMBER_ID, r.member_id))
                return
            group = ClassicGroup(r.group_id, self.clock)
            self.groups[r.group_id] = group
        if not self._accept_joining_member(group, r.member_id):
            group.remove(r.member_id)
            respond(join_error(ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif r.member_id == UNKNOWN_MEMBER:
            self._join_new_member(group, r, respond, future_factory)
        else:
            self._join_existing_member(group, r, respond, future_factory)
        if new_group:
            try:
                self.persist(group.group_id, [empty_group_metadata_record(group)])
            except CoordinatorError as exc:
                log.warning("Failed to write the metadata of new group %s: %s", group.group_id, exc)
                self.cancel_group_timers(group)
                for m in list(group.members.values()):
                    group.complete_join(m, join_error(exc.error))
                if self.groups.get(group.group_id) is group:
                    del self.groups[group.group_id]
                respond(join_error(exc.error))

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.group_max_size
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            m = group.members.get(member_id)
            return (m is not None and m.awaiting_join is not None) or group.awaiting_join_count() < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(self, group: ClassicGroup, r: JoinRequest, respond: Callable[[Response], None],
                         future_factory: FutureFactory) -> None:
        if group.is_in(GroupState.DEAD):
            respond(join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(r.protocol_type, {name for name, _ in r.protocols}):
            respond(join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_id = group.generate_member_id(r.client_id, r.group_instance_id)
        if r.group_instance_id is not None:
            existing = group.static_member_id(r.group_instance_id)
            if existing is not None:
                log.info("Static member %s of group %s rejoins with a new member id %s (was %s)",
                         r.group_instance_id, group.group_id, new_id, existing)
                self._update_static_member(group, r, existing, new_id, respond, future_factory)
            else:
                self._add_member(group, r, new_id, respond, future_factory)
        elif r.api_version >= 4:
            # KIP-394: hand out the id first; the member becomes real when it comes back with it.
            group.pending_join_members.add(new_id)
            gid = group.group_id
            self.timer.schedule(self._heartbeat_key(gid, new_id), r.session_timeout_ms,
                                lambda: self._expire_heartbeat(gid, new_id))
            respond(join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member(group, r, new_id, respond, future_factory)

    def _join_existing_member(self, group: ClassicGroup, r: JoinRequest, respond: Callable[[Response], None],
                              future_factory: FutureFactory) -> None:
        mid = r.member_id
        if group.is_in(GroupState.DEAD):
            respond(join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, mid))
            return
        if not group.supports_protocols(r.protocol_type, {name for name, _ in r.protocols}):
            respond(join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, mid))
            return
        if mid in group.pending_join_members:
            self._add_member(group, r, mid, respond, future_factory)
            return
        error = group.validate_member(mid, r.group_instance_id)
        if error:
            respond(join_error(error, mid))
            return
        member = group.members[mid]
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member(group, member, r, future_factory, "member joins during PreparingRebalance")
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.matches(r.protocols):
                # Probably lost the JoinGroup response: answer with the current generation again.
                respond(self._join_success(group, member.member_id,
                                           with_members=group.is_leader(mid)))
            else:
                self._update_member(group, member, r, future_factory, "member metadata changed")
        elif group.is_in(GroupState.STABLE):
            if group.is_leader(mid):
                # The leader rejoining is how a client asks for a new assignment (e.g. new partitions).
                self._update_member(group, member, r, future_factory, "leader rejoins")
            elif not member.matches(r.protocols):
                self._update_member(group, member, r, future_factory, "member metadata changed")
            else:
                respond(self._join_success(group, mid, with_members=False))
        else:
            log.warning("Member %s rejoins group %s in unexpected state %s", mid, group.group_id, group.state)
            respond(join_error(ErrorCode.UNKNOWN_MEMBER_ID, mid))

    def _join_success(self, group: ClassicGroup, member_id: str, *, with_members: bool,
                      leader: str | None = None, skip_assignment: bool = False) -> Response:
        return {"error_code": ErrorCode.NONE, "member_id": member_id, "generation_id": group.generation_id,
                "protocol_type": group.protocol_type, "protocol_name": group.protocol_name,
                "leader": group.leader_id if leader is None else leader, "skip_assignment": skip_assignment,
                "members": group.join_members_view() if with_members else []}

    def _add_member(self, group: ClassicGroup, r: JoinRequest, member_id: str, respond: Callable[[Response], None],
                    future_factory: FutureFactory) -> None:
        member = Member(member_id, r.group_instance_id, r.client_id, r.client_host, r.rebalance_timeout_ms,
                        r.session_timeout_ms, r.protocol_type, list(r.protocols), is_new=True)
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member, future_factory())
        # A new member cannot heartbeat while its JoinGroup is parked; bound how long it may stay parked.
        self.reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group, f"adding new member {member_id}")

    def _update_member(self, group: ClassicGroup, member: Member, r: JoinRequest,
                       future_factory: FutureFactory, reason: str) -> None:
        group.update_member(member, list(r.protocols), r.rebalance_timeout_ms, r.session_timeout_ms,
                            future_factory())
        self._maybe_prepare_rebalance_or_complete_join(group, f"{reason} ({member.member_id})")

    def _update_static_member(self, group: ClassicGroup, r: JoinRequest, old_id: str, new_id: str,
                              respond: Callable[[Response], None], future_factory: FutureFactory) -> None:
        instance_id = r.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        self.timer.cancel(self._heartbeat_key(group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        self.reschedule_heartbeat(group, member)
        old_protocols = member.protocols
        old_rebalance, old_session = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(member, list(r.protocols), r.rebalance_timeout_ms, r.session_timeout_ms,
                            future_factory())
        if group.is_in(GroupState.STABLE):
            if group.protocol_name == group.select_protocol():
                # Same protocol: no rebalance; persist the new member id, and the member takes over
                # the old one's assignment at SyncGroup.
                def stored(error: ErrorCode) -> None:
                    if error:
                        log.warning("Failed to persist static member %s of group %s: %s; reverting to member "
                                    "id %s", instance_id, group.group_id, error.name, old_id)
                        if group.members.get(new_id) is not member:
                            return  # it changed meanwhile (left, expired, replaced again)
                        group.update_member(member, old_protocols, old_rebalance, old_session, None)
                        self.timer.cancel(self._heartbeat_key(group.group_id, new_id))
                        old = group.replace_static_member(instance_id, new_id, old_id)
                        self.reschedule_heartbeat(group, old)
                        respond({**join_error(error), "generation_id": group.generation_id,
                                 "protocol_name": group.protocol_name, "protocol_type": group.protocol_type,
                                 "leader": current_leader or ""})
                    elif r.api_version >= 9:
                        is_leader = group.is_leader(new_id)
                        group.complete_join(member, self._join_success(group, new_id, with_members=is_leader,
                                                                       skip_assignment=is_leader))
                    else:
                        # Old clients would run the assignment if told they lead; name the old leader id.
                        group.complete_join(member, self._join_success(group, new_id, with_members=False,
                                                                       leader=current_leader or ""))

                self._store(group.group_id, [group_metadata_record(group, group.assignments())], stored)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {instance_id} rejoined with a change of protocol")
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id: rebalance so the new id gets one.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join_phase(group)
        else:
            raise CoordinatorError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                   f"group {group.group_id} in state {group.state} has static member {instance_id}")

    # --- rebalance phases ----------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            gid = group.group_id
            self.timer.schedule(self._join_key(gid), delay,
                                lambda: self._try_complete_initial_rebalance(gid, delay, remaining))
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info("Preparing to rebalance group %s with old generation %d (reason: %s)", group.group_id,
                 group.generation_id, reason)
        if not initial:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_join(group)
        else:
            gid = group.group_id
            self.timer.schedule(self._join_key(gid), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_by_id(gid))

    def _try_complete_initial_rebalance(self, group_id: str, delay_ms: int, remaining_ms: int) -> None:
        """InitialDelayedJoin: wait another delay (bounded by the rebalance timeout) each time a new
        member arrived during the last one."""
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.config.group_initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self.timer.schedule(self._join_key(group_id), new_delay,
                                lambda: self._try_complete_initial_rebalance(group_id, new_delay, new_remaining))
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if group.previous_state is GroupState.EMPTY:
            return  # the initial rebalance ends with its delay, not with the last join
        if not group.has_all_members_joined():
            return
        self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        gid = group.group_id
        self.timer.cancel(self._join_key(gid))
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        dropped = [m for m in group.not_yet_rejoined() if not m.is_static]
        for m in dropped:
            group.remove(m.member_id)
            self.timer.cancel(self._heartbeat_key(gid, m.member_id))
        if dropped:
            log.info("Group %s removed dynamic members who did not rejoin: %s", gid, [m.member_id for m in dropped])
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait for them (or their session timeouts).
            log.error("Group %s could not complete the rebalance because no member rejoined", gid)
            self.timer.schedule(self._join_key(gid), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_by_id(gid))
            return
        group.init_next_generation()
        if group.is_in(GroupState.EMPTY):
            log.info("Group %s with generation %d is now empty", gid, group.generation_id)
            try:
                self.persist(gid, [group_metadata_record(group, {})])
            except CoordinatorError as exc:
                log.warning("Failed to write the empty metadata of group %s: %s", gid, exc)
            return
        log.info("Stabilized group %s generation %d (%s) with %d members", gid, group.generation_id,
                 group.protocol_name, len(group.members))
        for member in group.members.values():
            group.complete_join(member, self._join_success(group, member.member_id,
                                                           with_members=group.is_leader(member.member_id)))
            self.reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        gid, generation = group.group_id, group.generation_id
        self.timer.schedule(self._sync_key(gid), group.rebalance_timeout_ms(),
                            lambda: self._expire_pending_sync(gid, generation))

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation_id:
            return
        if group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE) and group.pending_sync_members:
            missing = sorted(group.pending_sync_members)
            for mid in missing:
                self._drop_member(group, mid)
            log.info("Group %s removed members who did not send SyncGroup in time: %s", group_id, missing)
            self._prepare_rebalance(group, f"removing {missing} on pending sync request expiration")

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self.timer.cancel(self._sync_key(group.group_id))

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if group.is_in(GroupState.DEAD, GroupState.EMPTY, GroupState.PREPARING_REBALANCE) or \
                not group.pending_sync_members:
            self.timer.cancel(self._sync_key(group.group_id))

    def _drop_member(self, group: ClassicGroup, member_id: str) -> None:
        """Remove a member, answering whatever it still has parked so no handler waits forever."""
        member = group.members.get(member_id)
        if member is not None:
            group.complete_join(member, join_error(ErrorCode.UNKNOWN_MEMBER_ID))
            group.complete_sync(member, sync_response(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)
        self.timer.cancel(self._heartbeat_key(group.group_id, member_id))

    # --- session expiry ------------------------------------------------------------------------

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return
        if member_id in group.pending_join_members:
            log.info("Pending member %s in group %s has been removed after session timeout", member_id, group_id)
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("Member %s in group %s has failed (session timeout), removing it from the group", member_id,
                 group_id)
        self._drop_member(group, member_id)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, f"removing member {member_id} on heartbeat "
                                                                  "expiration")
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    # --- SyncGroup -----------------------------------------------------------------------------

    def sync(self, r: SyncRequest, respond: Callable[[Response], None], future_factory: FutureFactory) -> None:
        group = self.groups.get(r.group_id)
        if group is None or group.is_empty:
            respond(sync_response(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync(group, r)
        if error:
            respond(sync_response(error))
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            respond(sync_response(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            member = group.members[r.member_id]
            group.complete_sync(member, sync_response(ErrorCode.REBALANCE_IN_PROGRESS))  # a given-up older one
            member.awaiting_sync = future_factory()
            self._remove_pending_sync_member(group, r.member_id)
            if group.is_leader(r.member_id):
                self._store_leader_assignment(group, r)
        elif group.is_in(GroupState.STABLE):
            self._remove_pending_sync_member(group, r.member_id)
            member = group.members[r.member_id]
            respond(sync_response(ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol_name))
        else:
            respond(sync_response(ErrorCode.COORDINATOR_NOT_AVAILABLE))

    def _validate_sync(self, group: ClassicGroup, r: SyncRequest) -> ErrorCode:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(r.member_id, r.group_instance_id)
        if error:
            return error
        if r.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if _inconsistent(r.protocol_type, group.protocol_type) or _inconsistent(r.protocol_name, group.protocol_name):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _store_leader_assignment(self, group: ClassicGroup, r: SyncRequest) -> None:
        log.info("Assignment received from leader %s for group %s for generation %d", r.member_id, group.group_id,
                 group.generation_id)
        assignment = {mid: r.assignments.get(mid, b"") for mid in group.members}
        missing = [mid for mid in group.members if mid not in r.assignments]
        if missing:
            log.warning("Setting empty assignments for members %s of group %s for generation %d", missing,
                        group.group_id, group.generation_id)
        generation = r.generation_id

        def stored(error: ErrorCode) -> None:
            if not (group.is_in(GroupState.COMPLETING_REBALANCE) and generation == group.generation_id):
                return  # the group moved on while the write was being replicated
            if error:
                self._reset_and_propagate_assignment(group, error)
                self._maybe_prepare_rebalance_or_complete_join(group, f"error {error.name} when storing the "
                                                                      "group assignment")
                return
            for m in group.members.values():
                m.assignment = assignment.get(m.member_id, b"")
            self._propagate_assignment(group, ErrorCode.NONE)
            group.transition_to(GroupState.STABLE)

        self._store(group.group_id, [group_metadata_record(group, assignment)], stored)

    def _store(self, group_id: str, records: list[RecordKV], done: Callable[[ErrorCode], None]) -> None:
        """Write group metadata with acks=all (Kafka's storeGroup): `done(error)` once the write is
        committed or failed; at once when the append fails or one replica is all there is."""
        try:
            write = self.persist(group_id, records)
        except CoordinatorError as exc:
            done(exc.error)
            return
        self.when_committed(write, done)

    def _reset_and_propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        for m in group.members.values():
            m.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == ErrorCode.NONE
        for m in group.members.values():
            response = sync_response(error, m.assignment, group.protocol_type if ok else None,
                                     group.protocol_name if ok else None)
            if group.complete_sync(m, response):
                # Session timeouts are not enforced while a member waits; restart its clock now.
                self.reschedule_heartbeat(group, m)

    # --- Heartbeat -----------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, group_instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.reschedule_heartbeat(group, group.members[member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # --- LeaveGroup ----------------------------------------------------------------------------

    def leave(self, group_id: str, leaving: list[tuple[str, str | None, str | None]]
              ) -> tuple[ErrorCode, list[Response]]:
        """Remove members given as (member id, group instance id, reason); returns the top-level error and
        one result per member. A member id of "" with an instance id removes that static member (admin)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [
                {"member_id": mid, "group_instance_id": iid, "error_code": ErrorCode.UNKNOWN_MEMBER_ID}
                for mid, iid, _ in leaving]
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results: list[Response] = []
        removed = []
        for mid, iid, reason in leaving:
            error = ErrorCode.NONE
            if mid == UNKNOWN_MEMBER:
                static_id = group.static_member_id(iid) if iid is not None else None
                if static_id is not None:
                    self._drop_member(group, static_id)
                    removed.append(static_id)
                else:
                    error = ErrorCode.UNKNOWN_MEMBER_ID
            elif mid in group.pending_join_members:
                group.remove(mid)
                self.timer.cancel(self._heartbeat_key(group_id, mid))
            else:
                error = group.validate_member(mid, iid)
                if not error:
                    self._drop_member(group, mid)
                    removed.append(mid)
            if not error:
                log.info("Member %s has left group %s through an explicit LeaveGroup request; client reason: %s",
                         mid or iid, group_id, reason or "not provided")
            results.append({"member_id": mid, "group_instance_id": iid, "error_code": error})
        if any(r["error_code"] == ErrorCode.NONE for r in results):
            if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, f"explicit LeaveGroup of {removed}")
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return ErrorCode.NONE, results

    # --- lifecycle -----------------------------------------------------------------------------

    def on_loaded(self, groups: Iterable[ClassicGroup] | None = None) -> None:
        """After loading (every group, or those given): members of loaded groups must heartbeat within
        their session timeout again."""
        for group in list(self.groups.values()) if groups is None else groups:
            for member in group.members.values():
                self.reschedule_heartbeat(group, member)
            if len(group.members) > self.config.group_max_size:
                self._prepare_rebalance(group, "group size above group.max.size after loading")

    def unload(self, group_ids: Iterable[str], error: ErrorCode = ErrorCode.NOT_COORDINATOR) -> None:
        """Forget these groups (their partition moved away): parked requests get `error`, timers stop."""
        for gid in list(group_ids):
            group = self.groups.pop(gid, None)
            if group is None:
                continue
            for member in group.members.values():
                group.complete_join(member, join_error(error, member.member_id))
                group.complete_sync(member, sync_response(error))
            self.cancel_group_timers(group)

    def shutdown(self, error: ErrorCode = ErrorCode.NOT_COORDINATOR) -> None:
        """Answer every parked request (clients then look for the coordinator again) and stop the timers."""
        for group in self.groups.values():
            for member in group.members.values():
                group.complete_join(member, join_error(error, member.member_id))
                group.complete_sync(member, sync_response(error))
        self.timer.cancel_all()
