"""The group coordinator a broker embeds: Kafka's group APIs over `__consumer_offsets`.

One instance per broker. The broker decodes a request, calls `handle(api_key, api_version, body, ...)`
with the body as a dict keyed by the snake_case of Kafka's schema field names, and encodes the dict it
gets back (fields a version does not have are ignored by the encoder). FindCoordinator stays with the
broker (single-broker mode: one broker coordinates every group; a cluster: see below);
`coordinator_key_partition` tells it which `__consumer_offsets` partition a group lives in.

Lifecycle: construct, `await load()` (reads every `__consumer_offsets` partition and rebuilds groups and
offsets; requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS, which clients retry), serve, `close()`
(parked JoinGroup/SyncGroup requests get NOT_COORDINATOR, so clients look the coordinator up again).
`load_offline()` gives tools the same state without timers or a running broker.

In a cluster the coordinator of a group is the leader of its `__consumer_offsets` partition, and group
state follows that leadership (Kafka's GroupCoordinator.onElection / onResignation): `load(lead_all=False)`
starts with no partition; `on_election(p, epoch)` loads partition p's groups and offsets in the
background (their requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS); `on_resignation(p, epoch)`
forgets them (parked requests and later ones get NOT_COORDINATOR, so clients find the new coordinator).

Version differences follow Kafka's request/response classes: JoinGroup v0 uses the session timeout as
rebalance timeout, v4+ has the MEMBER_ID_REQUIRED round trip, v5+ static membership, v7+ nullable
protocol names, v9 skip_assignment; LeaveGroup v3+ batches members (v0-2 fold member errors into the
top-level error); OffsetCommit v1 per-partition commit timestamps, v2-4 retention time, v9+
GROUP_ID_NOT_FOUND; OffsetFetch v2+ top-level error and null topics = all, v8+ many groups;
DescribeGroups v6+ GROUP_ID_NOT_FOUND for unknown groups.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.coordinator.config import OFFSETS_TOPIC, CoordinatorConfig
from kafkalite.coordinator.consumer_protocol import decode_assignment
from kafkalite.coordinator.errors import (
    CoordinatorError,
    append_error,
    group_store_error,
    offset_commit_error,
)
from kafkalite.coordinator.group import ClassicGroup, GroupState
from kafkalite.coordinator.lag import Owner, PartitionLag, compute_lag
from kafkalite.coordinator.loader import Replayer
from kafkalite.coordinator.membership import GroupMembership, JoinRequest, SyncRequest, join_error, sync_response
from kafkalite.coordinator.offsets import OffsetAndMetadata, OffsetStore
from kafkalite.coordinator.offsets_topic import (
    CommitWaiter,
    LoadedRecord,
    OffsetsTopic,
    OffsetsWriter,
    PendingWrite,
    TxnMarker,
)
from kafkalite.coordinator.records import (
    NO_TIMESTAMP,
    GroupMetadataKey,
    OffsetCommitKey,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from kafkalite.coordinator.timer import KeyedTimer
from kafkalite.error_codes import ErrorCode
from kafkalite.errors import CorruptRecordError
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol.api_keys import ApiKey

log = logging.getLogger("kafkalite.coordinator")

Body = dict[str, Any]
RecordKV = tuple[bytes, bytes | None]

GROUP_API_KEYS = frozenset({
    ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
    ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE,
})
# What an AclOperation bit set holds for a group when there is no authorizer: READ, DELETE, DESCRIBE.
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_UNKNOWN_OPERATIONS = -(1 << 31)
_EXPIRY_KEY = "expire-group-metadata"


class _Phase(enum.Enum):
    NEW = "new"
    LOADING = "loading"
    ACTIVE = "active"
    CLOSED = "closed"


def _client_host(host: str) -> str:
    """Kafka records a member's host as Java's InetAddress.toString() of the peer: "/127.0.0.1"."""
    return host if host.startswith("/") else "/" + host


class GroupCoordinator:
    """Classic consumer groups and committed offsets for one broker (see the module docstring)."""

    def __init__(
        self,
        log_manager: LogManager,
        config: Mapping[str, object] | CoordinatorConfig | Any = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        partition_exists: Callable[[str, int], bool] | None = None,
        writer: OffsetsWriter | None = None,
        replicas: CommitWaiter | None = None,
    ) -> None:
        """`config` takes Kafka's broker property names (offsets.topic.num.partitions,
        group.initial.rebalance.delay.ms, ...), as a dict or an object with a `props` dict (the broker's
        BrokerConfig). `partition_exists` lets OffsetCommit answer UNKNOWN_TOPIC_OR_PARTITION as Kafka
        does; without it every partition is accepted. `writer` appends the coordinator's batches (the
        broker's ReplicaManager.append_for_coordinator, like an acks=all produce) and `replicas` (that
        ReplicaManager) is what commits and group writes wait on before they are answered; they come
        together, and without both this process leads `__consumer_offsets` alone."""
        if not isinstance(config, CoordinatorConfig):
            props = getattr(config, "props", config)
            config = CoordinatorConfig.from_props(props if isinstance(props, Mapping) else None)
        self.config = config
        self.clock = clock
        self.partition_exists = partition_exists
        self.topic = OffsetsTopic(log_manager, self.config, clock, writer, replicas)
        self.offsets = OffsetStore()
        self.timer = KeyedTimer()
        self.membership = GroupMembership(self.config, clock, self.timer, self._persist, self._when_committed)
        self._waits: set[asyncio.Task[None]] = set()  # group writes waiting for their replicas
        # (group, topic, partition) -> the __consumer_offsets offset of the commit applied last: commits
        # acknowledged out of order by the replicas must not let an older one win (Kafka's olderThan).
        self._commit_order: dict[tuple[str, str, int], int] = {}
        self._phase = _Phase.NEW
        # None: this broker coordinates every group (single-broker mode); else the partitions it leads.
        self._owned: set[int] | None = None
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._epochs: dict[int, int] = {}  # the latest leader epoch seen per partition (election or resignation)
        self._handlers: dict[int, Callable[[int, Body, str, str], Awaitable[Body]]] = {
            ApiKey.JOIN_GROUP: self._join_group, ApiKey.SYNC_GROUP: self._sync_group,
            ApiKey.HEARTBEAT: self._heartbeat, ApiKey.LEAVE_GROUP: self._leave_group,
            ApiKey.OFFSET_COMMIT: self._offset_commit, ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.LIST_GROUPS: self._list_groups, ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.DELETE_GROUPS: self._delete_groups, ApiKey.OFFSET_DELETE: self._offset_delete,
        }

    # --- what the broker needs besides handle() ------------------------------------------------

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.membership.groups

    @property
    def num_partitions(self) -> int:
        """Partitions of `__consumer_offsets` (the existing topic's count wins over the config)."""
        return self.topic.num_partitions

    @property
    def is_active(self) -> bool:
        return self._phase is _Phase.ACTIVE

    def coordinator_key_partition(self, group_id: str) -> int:
        """Kafka's partitionFor: abs(Java String.hashCode(group_id)) % offsets.topic.num.partitions."""
        return self.topic.partition_for(group_id)

    def offsets_topic_configs(self) -> dict[str, object]:
        return self.config.offsets_topic_configs()

    def ensure_offsets_topic(self) -> None:
        """Create all `__consumer_offsets` partitions (Kafka does so on the first FindCoordinator)."""
        self.topic.ensure_created()

    # --- lifecycle -----------------------------------------------------------------------------

    async def load(self, *, lead_all: bool = True) -> None:
        """Rebuild groups and offsets from `__consumer_offsets`, then start the timers; idempotent.
        With `lead_all` False (a cluster broker) nothing is loaded: partitions come with `on_election`."""
        if self._phase is not _Phase.NEW:
            return
        self._phase = _Phase.LOADING
        self.timer.bind(asyncio.get_running_loop())
        if not lead_all:
            self._owned = set()
            self._phase = _Phase.ACTIVE
            self._schedule_expiry()
            return
        try:
            items = await asyncio.to_thread(self._read_all)
            self._replay(items)
        except BaseException:
            self._phase = _Phase.NEW
            raise
        self.membership.on_loaded()
        self._phase = _Phase.ACTIVE
        self._schedule_expiry()

    def load_offline(self) -> None:
        """Load without a running loop or timers: a read-only view for tools (`kafkalite groups`)."""
        if self._phase is _Phase.NEW:
            self._replay(self._read_all())
            self._phase = _Phase.ACTIVE

    def _read_all(self) -> list[LoadedRecord | TxnMarker]:
        items: list[LoadedRecord | TxnMarker] = []
        for p in self.topic.existing_partitions():
            items.extend(self.topic.read(p))
        return items

    def _replay(self, items: list[LoadedRecord | TxnMarker]) -> None:
        replayer = Replayer(self.groups, self.offsets, self.clock)
        for item in items:
            replayer.apply(item)
        log.info("Loaded %d groups and %d committed offsets from %d %s records (%d skipped)", len(self.groups),
                 len(self.offsets), replayer.records, OFFSETS_TOPIC, replayer.skipped)

    def close(self) -> None:
        """Stop serving: parked requests get NOT_COORDINATOR, timers stop; the data stays on disk."""
        if self._phase is _Phase.CLOSED:
            return
        self._phase = _Phase.CLOSED
        for task in [*self._loading.values(), *self._waits]:
            task.cancel()
        self._loading.clear()
        self.membership.shutdown(ErrorCode.NOT_COORDINATOR)

    async def start(self, *, lead_all: bool = True) -> None:
        """Same as `load()` (the broker's lifecycle name)."""
        await self.load(lead_all=lead_all)

    # --- leadership of __consumer_offsets partitions (cluster mode) -----------------------------

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    def owns(self, partition: int) -> bool:
        """True when this coordinator serves the groups of `partition` (loaded, not loading)."""
        return self._owned is None or partition in self._owned

    def _stale(self, partition: int, epoch: int) -> bool:
        """An event older than one already seen for the partition (Kafka's coordinator epoch check)."""
        return epoch >= 0 and epoch < self._epochs.get(partition, -1)

    def on_election(self, partition: int, epoch: int = -1) -> None:
        """This broker now leads `__consumer_offsets` partition `partition`: load its groups and offsets in
        the background; until done their requests get COORDINATOR_LOAD_IN_PROGRESS."""
        if self._phase is not _Phase.ACTIVE or self._owned is None or self._stale(partition, epoch):
            return
        self._epochs[partition] = max(epoch, self._epochs.get(partition, -1))
        if partition in self._owned or partition in self._loading:
            return  # a new epoch of a leadership already held: the state in memory is current
        task = asyncio.get_running_loop().create_task(self._load_partition(partition))
        self._loading[partition] = task

    def on_resignation(self, partition: int, epoch: int = -1) -> None:
        """This broker no longer leads `partition`: forget its groups and offsets (they stay on disk);
        members get NOT_COORDINATOR and look the coordinator up again."""
        if self._owned is None or self._stale(partition, epoch):
            return
        self._epochs[partition] = max(epoch, self._epochs.get(partition, -1))
        task = self._loading.pop(partition, None)
        if task is not None:
            task.cancel()
        if partition not in self._owned:
            return
        self._owned.discard(partition)
        gone = [gid for gid in self.groups if self.topic.partition_for(gid) == partition]
        for gid in self.offsets.groups():
            if self.topic.partition_for(gid) == partition:
                for (t, p) in self.offsets.group_offsets(gid):
                    self.offsets.replay(gid, t, p, None)
                    self._commit_order.pop((gid, t, p), None)
        self.membership.unload(gone, ErrorCode.NOT_COORDINATOR)
        log.info("Unloaded %d groups of %s-%d: this broker no longer leads it", len(gone), OFFSETS_TOPIC, partition)

    async def _load_partition(self, partition: int) -> None:
        try:
            items = await asyncio.to_thread(lambda: list(self.topic.read(partition)))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Loading the groups of %s-%d failed", OFFSETS_TOPIC, partition)
            self._loading.pop(partition, None)
            return
        if self._loading.get(partition) is not asyncio.current_task() or self._owned is None:
            return  # resigned (or closed) while reading
        del self._loading[partition]
        before = set(self.groups)
        replayer = Replayer(self.groups, self.offsets, self.clock)
        for item in items:
            replayer.apply(item)
        loaded = [g for gid, g in self.groups.items() if gid not in before]
        self._owned.add(partition)
        self.membership.on_loaded(loaded)
        log.info("Loaded %d groups from %d records of %s-%d (%d skipped): this broker leads it", len(loaded),
                 replayer.records, OFFSETS_TOPIC, partition, replayer.skipped)

    async def stop(self) -> None:
        """Same as `close()` (the broker's lifecycle name)."""
        self.close()

    # --- persistence ---------------------------------------------------------------------------

    def _persist(self, group_id: str, records: list[RecordKV]) -> PendingWrite:
        try:
            return self._append(self.topic.partition_for(group_id), records)
        except CoordinatorError as exc:
            raise CoordinatorError(group_store_error(exc.error), str(exc)) from exc

    def _append(self, partition: int, records: list[RecordKV]) -> PendingWrite:
        """Append one batch as leader; CoordinatorError with the append's own code (callers map it as
        Kafka's storeOffsets or storeGroup does)."""
        try:
            return self.topic.write(partition, records)
        except Exception as exc:
            error = append_error(exc)
            log.warning("Append to %s-%d failed (%s): %s", OFFSETS_TOPIC, partition, error.name, exc)
            if isinstance(exc, OSError):
                report = getattr(self.topic.log_manager, "handle_log_dir_failure", None)
                if report is not None:
                    report(OFFSETS_TOPIC, partition, exc)
            raise CoordinatorError(error, str(exc)) from exc

    def _when_committed(self, write: PendingWrite, done: Callable[[ErrorCode], None]) -> None:
        """Call `done` with NONE once the replicas hold `write` (at once when the HW covers it already),
        else with storeGroup's error for why not."""
        if self.topic.committed(write):
            done(ErrorCode.NONE)
            return

        async def wait() -> None:
            done(group_store_error(await self.topic.wait_committed(write)))

        task = asyncio.get_running_loop().create_task(wait())
        self._waits.add(task)
        task.add_done_callback(self._waits.discard)

    # --- dispatch ------------------------------------------------------------------------------

    async def handle(self, api_key: int, api_version: int, body: Body, client_id: str | None,
                     client_host: str) -> Body:
        """Answer one group API request; the result uses the same snake_case keys as the request."""
        handler = self._handlers.get(api_key)
        if handler is None:
            raise ValueError(f"API key {api_key} is not a group coordinator API")
        if self._phase is not _Phase.ACTIVE:
            if self._phase is _Phase.CLOSED:
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            elif api_key == ApiKey.HEARTBEAT:
                error = ErrorCode.NONE  # Kafka answers heartbeats blindly while the group loads
            else:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            return error_response(api_key, api_version, body, error)
        if self._owned is not None and api_key != ApiKey.LIST_GROUPS:
            refused = self._ownership_error(request_groups(api_key, body))
            if refused is not None:
                if api_key == ApiKey.HEARTBEAT and refused is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    refused = ErrorCode.NONE  # as while the whole coordinator loads
                return error_response(api_key, api_version, body, refused)
        if not self.timer.is_bound:
            self.timer.bind(asyncio.get_running_loop())  # served after load_offline(): timeouts apply from now
        try:
            return await handler(api_version, body, client_id or "", client_host)
        except Exception:
            log.exception("Group API %d v%d failed", api_key, api_version)
            return error_response(api_key, api_version, body, ErrorCode.UNKNOWN_SERVER_ERROR)

    def _ownership_error(self, group_ids: list[str]) -> ErrorCode | None:
        """NOT_COORDINATOR when a group's partition is not led here, COORDINATOR_LOAD_IN_PROGRESS while
        it loads; None when every group is served here. One refusal covers the whole request."""
        for gid in group_ids:
            if gid is None:
                continue
            partition = self.topic.partition_for(gid)
            if partition in self._loading:
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            if not self.owns(partition):
                return ErrorCode.NOT_COORDINATOR
        return None

    # --- JoinGroup / SyncGroup / Heartbeat / LeaveGroup --------------------------------------

    async def _join_group(self, v: int, body: Body, client_id: str, client_host: str) -> Body:
        group_id = body.get("group_id") or ""
        member_id = body.get("member_id") or ""
        session = int(body.get("session_timeout_ms", 0))
        rebalance = int(body.get("rebalance_timeout_ms", -1)) if v >= 1 else -1
        if rebalance < 0:
            rebalance = session  # JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout
        if not group_id:
            return join_response(v, join_error(ErrorCode.INVALID_GROUP_ID, member_id))
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= session <= cfg.group_max_session_timeout_ms:
            return join_response(v, join_error(ErrorCode.INVALID_SESSION_TIMEOUT, member_id))
        request = JoinRequest(
            group_id=group_id, member_id=member_id,
            group_instance_id=body.get("group_instance_id") if v >= 5 else None,
            session_timeout_ms=session, rebalance_timeout_ms=rebalance,
            protocol_type=body.get("protocol_type") or "",
            protocols=[(p["name"], bytes(p.get("metadata") or b"")) for p in body.get("protocols") or []],
            api_version=v, client_id=client_id, client_host=_client_host(client_host), reason=body.get("reason"))
        fut: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        self.membership.join(request, _responder(fut), lambda: fut)
        return join_response(v, await asyncio.shield(fut))

    async def _sync_group(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        group_id = body.get("group_id") or ""
        if not group_id:
            return sync_group_response(sync_response(ErrorCode.INVALID_GROUP_ID))
        request = SyncRequest(
            group_id=group_id, generation_id=int(body.get("generation_id", -1)),
            member_id=body.get("member_id") or "",
            group_instance_id=body.get("group_instance_id") if v >= 3 else None,
            protocol_type=body.get("protocol_type") if v >= 5 else None,
            protocol_name=body.get("protocol_name") if v >= 5 else None,
            assignments={a["member_id"]: bytes(a.get("assignment") or b"") for a in body.get("assignments") or []})
        fut: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        self.membership.sync(request, _responder(fut), lambda: fut)
        return sync_group_response(await asyncio.shield(fut))

    async def _heartbeat(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        group_id = body.get("group_id") or ""
        if not group_id:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_GROUP_ID)}
        error = self.membership.heartbeat(group_id, body.get("member_id") or "",
                                          body.get("group_instance_id") if v >= 3 else None,
                                          int(body.get("generation_id", -1)))
        return {"throttle_time_ms": 0, "error_code": int(error)}

    async def _leave_group(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        group_id = body.get("group_id") or ""
        if v >= 3:
            leaving = [(m.get("member_id") or "", m.get("group_instance_id"), m.get("reason") if v >= 5 else None)
                       for m in body.get("members") or []]
        else:
            leaving = [(body.get("member_id") or "", None, None)]
        if not group_id:
            return leave_response(v, ErrorCode.INVALID_GROUP_ID, [])
        top, members = self.membership.leave(group_id, leaving)
        return leave_response(v, top, members)

    # --- OffsetCommit -------------------------------------------------------------------------

    def _split_unknown(self, topics: list[Body]) -> tuple[dict[tuple[str, int], ErrorCode], list[tuple[str, Body]]]:
        """A request's partitions: UNKNOWN_TOPIC_OR_PARTITION for those `partition_exists` does not know, and the
        (topic, partition body) of the others, in request order (OffsetCommit, OffsetDelete)."""
        unknown: dict[tuple[str, int], ErrorCode] = {}
        known: list[tuple[str, Body]] = []
        for t in topics:
            for p in t.get("partitions") or []:
                tp = (t["name"], int(p["partition_index"]))
                if self.partition_exists is not None and not self.partition_exists(*tp):
                    unknown[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    known.append((t["name"], p))
        return unknown, known

    async def _offset_commit(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        group_id = body.get("group_id") or ""
        topics = body.get("topics") or []
        results, valid = self._split_unknown(topics)
        results.update({(t, int(p["partition_index"])): ErrorCode.NONE for t, p in valid})
        if not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        elif not valid:
            error = ErrorCode.NONE
        else:
            field = "generation_id_or_member_epoch" if "generation_id_or_member_epoch" in body else "generation_id"
            generation = int(body.get(field, -1))
            member_id = body.get("member_id") or ""
            instance_id = body.get("group_instance_id") if v >= 7 else None
            error = self._validate_commit(v, group_id, generation if v >= 1 else -1, member_id if v >= 1 else "",
                                          instance_id)
        if error:
            for tp, _p in [((t, int(p["partition_index"])), p) for t, p in valid]:
                results[tp] = error
        elif valid:
            await self._commit(v, group_id, body, valid, results)
        return offset_commit_response(topics, results)

    def _validate_commit(self, v: int, group_id: str, generation: int, member_id: str,
                         instance_id: str | None) -> ErrorCode:
        """Kafka's validateOffsetCommit for classic groups."""
        group = self.groups.get(group_id)
        if group is None:
            if generation < 0:
                return ErrorCode.NONE  # a "simple" group: created when the commit is replayed
            return ErrorCode.GROUP_ID_NOT_FOUND if v >= 9 else ErrorCode.ILLEGAL_GENERATION
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_in(GroupState.EMPTY):
            return ErrorCode.NONE  # admin clients and consumers without group management
        if generation >= 0 or member_id or instance_id is not None:
            error = group.validate_member(member_id, instance_id)
            if error:
                return error
            if generation != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def _commit(self, v: int, group_id: str, body: Body, valid: list[tuple[str, Body]],
                      results: dict[tuple[str, int], ErrorCode]) -> None:
        """Kafka's storeOffsets: append the commit records, wait until the replicas hold them (acks=all),
        and only then make them visible to OffsetFetch."""
        group = self.groups.get(group_id)
        member_id = body.get("member_id") or ""
        if group is not None and group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE) \
                and member_id in group.members:
            # In the classic protocol a commit also keeps the member's session alive.
            self.membership.reschedule_heartbeat(group, group.members[member_id])
        now = self.clock.milliseconds()
        retention = int(body.get("retention_time_ms", -1)) if 2 <= v <= 4 else -1
        expire = now + retention if retention != -1 else NO_TIMESTAMP
        records: list[RecordKV] = []
        applied: list[tuple[str, int, OffsetAndMetadata]] = []
        for topic, p in valid:
            partition = int(p["partition_index"])
            metadata = p.get("committed_metadata")
            if metadata is not None and len(metadata) > self.config.offset_metadata_max_bytes:
                results[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            commit_ts = int(p.get("commit_timestamp", -1)) if v == 1 else -1
            om = OffsetAndMetadata(int(p["committed_offset"]), metadata or "", now if commit_ts == -1 else commit_ts,
                                   int(p.get("committed_leader_epoch", -1)) if v >= 6 else -1, expire)
            records.append((encode_offset_commit_key(OffsetCommitKey(group_id, topic, partition)),
                            encode_offset_commit_value(om.to_value())))
            applied.append((topic, partition, om))
        if not records:
            return
        group_partition = self.topic.partition_for(group_id)
        try:
            write = self._append(group_partition, records)
            error = ErrorCode.NONE if self.topic.committed(write) else await self.topic.wait_committed(write)
        except CoordinatorError as exc:
            error = exc.error
        if not error and not self.owns(group_partition):
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER  # resigned while the replicas confirmed: the new leader has it
        if error:
            for topic, partition, _om in applied:
                results[(topic, partition)] = offset_commit_error(error)
            return
        if group_id not in self.groups:
            self.groups[group_id] = ClassicGroup(group_id, self.clock)
        for topic, partition, om in applied:
            key = (group_id, topic, partition)
            if self._commit_order.get(key, -1) < write.required_offset:
                self._commit_order[key] = write.required_offset
                self.offsets.replay(group_id, topic, partition, om)

    # --- OffsetFetch --------------------------------------------------------------------------

    async def _offset_fetch(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        if v >= 8:
            groups = [self._fetch_group(g.get("group_id"), g.get("topics")) for g in body.get("groups") or []]
            return {"throttle_time_ms": 0, "groups": groups}
        topics = body.get("topics")
        if v < 2 and topics is None:
            topics = []
        result = self._fetch_group(body.get("group_id"), topics)
        return offset_fetch_single_response(v, result, topics)

    def _fetch_group(self, group_id: str | None, topics: list[Body] | None) -> Body:
        """One OffsetFetchResponseGroup; `topics` None = every committed offset of the group."""
        if group_id is None:
            return {"group_id": group_id, "topics": [], "error_code": int(ErrorCode.INVALID_GROUP_ID)}
        group = self.groups.get(group_id)
        known = group is not None and not group.is_in(GroupState.DEAD)
        out_topics: list[Body] = []
        if topics is None:
            by_topic: dict[str, list[Body]] = {}
            if known:
                for (topic, partition), om in self.offsets.group_offsets(group_id).items():
                    by_topic.setdefault(topic, []).append(_fetched_partition(partition, om))
            out_topics = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
        else:
            for t in topics:
                name = t["name"]
                parts = [_fetched_partition(int(p), self.offsets.get(group_id, name, int(p)) if known else None)
                         for p in t.get("partition_indexes") or []]
                out_topics.append({"name": name, "partitions": parts})
        return {"group_id": group_id, "topics": out_topics, "error_code": 0}

    # --- ListGroups / DescribeGroups / DeleteGroups -------------------------------------------

    async def _list_groups(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        states = {s.lower() for s in body.get("states_filter") or []} if v >= 4 else set()
        types = {s.lower() for s in body.get("types_filter") or []} if v >= 5 else set()
        listed = [g for g in self.list_groups()
                  if (not states or g["group_state"].lower() in states)
                  and (not types or g["group_type"] in types)]
        # Kafka lists the groups loaded so far and says some partitions are still loading
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._loading else ErrorCode.NONE
        return {"throttle_time_ms": 0, "error_code": int(error), "groups": listed}

    async def _describe_groups(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        include_ops = bool(body.get("include_authorized_operations")) and v >= 3
        out = []
        for group_id in body.get("groups") or []:
            d = self._describe(group_id)
            if d is None:
                d = _described(group_id, GroupState.DEAD, "", "", [])
                if v >= 6:
                    d.update(error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), error_message=f"Group {group_id} not found.")
            elif include_ops:
                d["authorized_operations"] = _GROUP_OPERATIONS
            out.append(d)
        return {"throttle_time_ms": 0, "groups": out}

    def _describe(self, group_id: str | None) -> Body | None:
        if group_id is None:
            return {**_described("", GroupState.DEAD, "", "", []), "error_code": int(ErrorCode.INVALID_GROUP_ID)}
        group = self.groups.get(group_id)
        if group is None:
            return None
        stable = group.is_in(GroupState.STABLE)
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                    "member_assignment": m.assignment} for m in group.members.values()]
        return _described(group_id, group.state, group.protocol_type or "",
                          (group.protocol_name or "") if stable else "", members)

    async def _delete_groups(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        names = list(body.get("groups_names") or [])
        return {"throttle_time_ms": 0, "results": self.delete_groups(names)}

    def delete_groups(self, group_ids: list[str]) -> list[Body]:
        """DeleteGroups: Empty groups (and simple ones) go with all their offsets; one result per id."""
        results: dict[int, Body] = {}
        batches: dict[int, list[RecordKV]] = {}
        deleting: dict[int, list[tuple[int, str]]] = {}
        for i, gid in enumerate(group_ids):
            if gid is None:
                results[i] = {"group_id": gid, "error_code": int(ErrorCode.INVALID_GROUP_ID)}
                continue
            group = self.groups.get(gid)
            if group is None or group.is_in(GroupState.DEAD):
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_empty:
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                error = ErrorCode.NONE
                partition = self.topic.partition_for(gid)
                batches.setdefault(partition, []).extend(self._group_tombstones(gid))
                deleting.setdefault(partition, []).append((i, gid))
            results[i] = {"group_id": gid, "error_code": int(error)}
        for partition, records in batches.items():
            try:
                self._append(partition, records)
            except CoordinatorError as exc:
                for i, _gid in deleting[partition]:
                    results[i]["error_code"] = int(group_store_error(exc.error))
                continue
            for _i, gid in deleting[partition]:
                self._forget_group(gid)
                log.info("Group %s was deleted", gid)
        return [results[i] for i in range(len(group_ids))]

    # --- OffsetDelete ---------------------------------------------------------------------------

    async def _offset_delete(self, v: int, body: Body, _client_id: str, _host: str) -> Body:
        topics = body.get("topics") or []
        results, known = self._split_unknown(topics)  # (Kafka's KafkaApis checks this before the coordinator)
        error, deleted = self.delete_offsets(body.get("group_id"), [(t, int(p["partition_index"])) for t, p in known])
        if error:
            return error_response(ApiKey.OFFSET_DELETE, v, body, error)
        # the same shape as OffsetCommit's answer: each partition asked for with its error, in request order
        return {"error_code": 0, **offset_commit_response(topics, {**results, **deleted})}

    def delete_offsets(self, group_id: str | None, partitions: list[tuple[str, int]]
                       ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (Kafka's handleDeleteOffsets): the committed offsets of `partitions` go, with tombstones in
        `__consumer_offsets`. An Empty group (or one only used for commits) loses any of them; a consumer group
        with members only those of topics it is not subscribed to (GROUP_SUBSCRIBED_TO_TOPIC for the others);
        another group with members none (NON_EMPTY_GROUP). Returns the group's error and each partition's."""
        if group_id is None:
            return ErrorCode.INVALID_GROUP_ID, {}
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if not group.is_empty and not group.uses_consumer_protocol():
            return ErrorCode.NON_EMPTY_GROUP, {}
        results: dict[tuple[str, int], ErrorCode] = {}
        eligible = []
        for tp in partitions:
            if group.is_empty or not group.is_subscribed_to_topic(tp[0]):
                eligible.append(tp)
            else:
                results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
        committed = [tp for tp in dict.fromkeys(eligible) if self.offsets.get(group_id, *tp) is not None]
        if committed:
            try:
                self._append(self.topic.partition_for(group_id),
                             [(encode_offset_commit_key(OffsetCommitKey(group_id, t, p)), None) for t, p in committed])
            except CoordinatorError as exc:
                return ErrorCode.NONE, {**results, **{tp: group_store_error(exc.error) for tp in eligible}}
            for t, p in committed:
                self.offsets.replay(group_id, t, p, None)
                self._commit_order.pop((group_id, t, p), None)
            log.info("Deleted the committed offsets of %d partitions of group %s", len(committed), group_id)
        results.update({tp: ErrorCode.NONE for tp in eligible})
        return ErrorCode.NONE, results

    def _group_tombstones(self, group_id: str) -> list[RecordKV]:
        records: list[RecordKV] = [(encode_offset_commit_key(OffsetCommitKey(group_id, t, p)), None)
                                   for (t, p) in self.offsets.group_offsets(group_id)]
        records.append((encode_group_metadata_key(GroupMetadataKey(group_id)), None))
        return records

    def _forget_group(self, group_id: str) -> None:
        for (t, p) in self.offsets.group_offsets(group_id):
            self.offsets.replay(group_id, t, p, None)
            self._commit_order.pop((group_id, t, p), None)
        group = self.groups.pop(group_id, None)
        if group is not None:
            self.membership.cancel_group_timers(group)

    # --- offsets retention --------------------------------------------------------------------

    def _schedule_expiry(self) -> None:
        self.timer.schedule(_EXPIRY_KEY, self.config.offsets_retention_check_interval_ms, self._run_expiry)

    def _run_expiry(self) -> None:
        try:
            self.cleanup_group_metadata()
        finally:
            if self._phase is _Phase.ACTIVE:
                self._schedule_expiry()

    def cleanup_group_metadata(self) -> int:
        """Kafka's periodic cleanup (every offsets.retention.check.interval.ms): tombstone expired
        offsets; drop Empty groups left with none. Returns the number of tombstones written."""
        now = self.clock.milliseconds()
        retention = self.config.offsets_retention_ms
        batches: dict[int, list[RecordKV]] = {}
        expired: dict[int, list[tuple[str, str, int]]] = {}
        dead: dict[int, list[str]] = {}
        for gid, group in list(self.groups.items()):
            partition = self.topic.partition_for(gid)
            offsets = self.offsets.group_offsets(gid)
            base = group.offset_expiration_base()
            if offsets and base is None:
                continue
            all_expired = True
            for (topic, p), om in offsets.items():
                assert base is not None
                if not group.is_subscribed_to_topic(topic) and om.is_expired(now, retention, base):
                    batches.setdefault(partition, []).append(
                        (encode_offset_commit_key(OffsetCommitKey(gid, topic, p)), None))
                    expired.setdefault(partition, []).append((gid, topic, p))
                else:
                    all_expired = False
            if all_expired and group.is_empty:
                batches.setdefault(partition, []).append((encode_group_metadata_key(GroupMetadataKey(gid)), None))
                dead.setdefault(partition, []).append(gid)
        written = 0
        for partition, records in batches.items():
            try:
                self._append(partition, records)
            except CoordinatorError:
                continue  # retried at the next check
            written += len(records)
            for gid, topic, p in expired.get(partition, []):
                self.offsets.replay(gid, topic, p, None)
                self._commit_order.pop((gid, topic, p), None)
            for gid in dead.get(partition, []):
                self._forget_group(gid)
        if written:
            log.info("Removed %d expired offsets and groups from %s", written, OFFSETS_TOPIC)
        return written

    # --- views for tools (kafkalite groups --list / --describe) -------------------------------

    def list_groups(self) -> list[Body]:
        """Every group: group_id, protocol_type ("" for simple groups), group_state, group_type."""
        return [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": str(g.state),
                 "group_type": "classic"} for g in self.groups.values()]

    def describe_group(self, group_id: str) -> Body | None:
        """DescribeGroups data of one group plus each member's assignment decoded (consumer protocol),
        or None when there is no such group."""
        d = self._describe(group_id)
        if d is None:
            return None
        group = self.groups[group_id]
        for m in d["members"]:
            m["assigned_partitions"] = self._assigned(group, group.members[m["member_id"]].assignment)
        d["generation_id"] = group.generation_id
        d["leader"] = group.leader_id
        return d

    @staticmethod
    def _assigned(group: ClassicGroup, assignment: bytes) -> dict[str, list[int]]:
        if not group.uses_consumer_protocol():
            return {}
        try:
            return decode_assignment(assignment)
        except CorruptRecordError:
            return {}

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        return self.offsets.group_offsets(group_id)

    def group_lag(self, group_id: str,
                  log_end_offset: Mapping[tuple[str, int], int] | Callable[[str, int], int | None]
                  ) -> list[PartitionLag]:
        """Lag per partition of a group, given the partitions' log end offsets (see lag.compute_lag)."""
        owners: dict[tuple[str, int], Owner] = {}
        group = self.groups.get(group_id)
        if group is not None:
            for m in group.members.values():
                for topic, parts in self._assigned(group, m.assignment).items():
                    for p in parts:
                        owners[(topic, p)] = Owner(m.member_id, m.client_host, m.client_id)
        committed = {tp: om.offset for tp, om in self.offsets.group_offsets(group_id).items()}
        return compute_lag(group_id, committed, log_end_offset, owners)


# --- response shapes -----------------------------------------------------------------------------


def _responder(fut: asyncio.Future[Body]) -> Callable[[Body], None]:
    def respond(response: Body) -> None:
        if not fut.done():
            fut.set_result(response)
    return respond


def join_response(v: int, data: Body) -> Body:
    protocol_name = data.get("protocol_name")
    if v < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    elif v >= 7 and protocol_name == "":
        protocol_name = None
    return {"throttle_time_ms": 0, "error_code": int(data["error_code"]), "generation_id": data["generation_id"],
            "protocol_type": data.get("protocol_type"), "protocol_name": protocol_name,
            "leader": data.get("leader") or "", "skip_assignment": bool(data.get("skip_assignment")),
            "member_id": data.get("member_id") or "",
            "members": [{"member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
                         "metadata": m["metadata"]} for m in data.get("members") or []]}


def sync_group_response(data: Body) -> Body:
    return {"throttle_time_ms": 0, "error_code": int(data["error_code"]), "protocol_type": data.get("protocol_type"),
            "protocol_name": data.get("protocol_name"), "assignment": data.get("assignment") or b""}


def leave_response(v: int, top: ErrorCode, members: list[Body]) -> Body:
    members = [{**m, "error_code": int(m["error_code"])} for m in members]
    if v <= 2:
        error = top or next((m["error_code"] for m in members if m["error_code"]), ErrorCode.NONE)
        return {"throttle_time_ms": 0, "error_code": int(error), "members": []}
    return {"throttle_time_ms": 0, "error_code": int(top), "members": members}


def offset_commit_response(topics: list[Body], results: Mapping[tuple[str, int], ErrorCode]) -> Body:
    out = []
    for t in topics:
        parts = [{"partition_index": int(p["partition_index"]),
                  "error_code": int(results.get((t["name"], int(p["partition_index"])), ErrorCode.NONE))}
                 for p in t.get("partitions") or []]
        out.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": out}


def _fetched_partition(partition: int, om: OffsetAndMetadata | None, error: ErrorCode = ErrorCode.NONE) -> Body:
    if om is None:
        return {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                "error_code": int(error)}
    return {"partition_index": partition, "committed_offset": om.offset, "committed_leader_epoch": om.leader_epoch,
            "metadata": om.metadata, "error_code": int(error)}


def offset_fetch_single_response(v: int, group: Body, requested: list[Body] | None) -> Body:
    """OffsetFetch v0-7 (one group): v2+ carry a group error at the top; v0-1 only per partition."""
    error = ErrorCode(group["error_code"])
    if error and v < 2:
        topics = [{"name": t["name"], "partitions": [_fetched_partition(int(p), None, error)
                                                     for p in t.get("partition_indexes") or []]}
                  for t in requested or []]
        return {"throttle_time_ms": 0, "topics": topics, "error_code": int(error)}
    return {"throttle_time_ms": 0, "topics": group["topics"], "error_code": int(error)}


def _described(group_id: str, state: GroupState, protocol_type: str, protocol_data: str, members: list[Body]) -> Body:
    return {"error_code": 0, "error_message": None, "group_id": group_id, "group_state": str(state),
            "protocol_type": protocol_type, "protocol_data": protocol_data, "members": members,
            "authorized_operations": _UNKNOWN_OPERATIONS}


def request_groups(api_key: int, body: Body) -> list[str]:
    """The group ids a group API request names (none for ListGroups)."""
    if api_key == ApiKey.LIST_GROUPS:
        return []
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return list(body.get("groups") or [])
    if api_key == ApiKey.DELETE_GROUPS:
        return list(body.get("groups_names") or [])
    if api_key == ApiKey.OFFSET_FETCH and body.get("groups"):
        return [g["group_id"] for g in body["groups"]]
    gid = body.get("group_id")
    return [gid] if gid is not None else []


def error_response(api_key: int, v: int, body: Body, error: ErrorCode) -> Body:
    """The whole request refused with one error, shaped for its API and version."""
    code = int(error)
    if api_key == ApiKey.JOIN_GROUP:
        return join_response(v, join_error(error, body.get("member_id") or ""))
    if api_key == ApiKey.SYNC_GROUP:
        return sync_group_response(sync_response(error))
    if api_key == ApiKey.HEARTBEAT:
        return {"throttle_time_ms": 0, "error_code": code}
    if api_key == ApiKey.LEAVE_GROUP:
        return {"throttle_time_ms": 0, "error_code": code, "members": []}
    if api_key == ApiKey.OFFSET_COMMIT:
        topics = body.get("topics") or []
        return offset_commit_response(topics, {(t["name"], int(p["partition_index"])): error
                                               for t in topics for p in t.get("partitions") or []})
    if api_key == ApiKey.OFFSET_FETCH:
        if v >= 8:
            return {"throttle_time_ms": 0, "groups": [{"group_id": g.get("group_id"), "topics": [], "error_code": code}
                                                      for g in body.get("groups") or []]}
        return offset_fetch_single_response(v, {"topics": [], "error_code": code}, body.get("topics"))
    if api_key == ApiKey.LIST_GROUPS:
        return {"throttle_time_ms": 0, "error_code": code, "groups": []}
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return {"throttle_time_ms": 0, "groups": [{**_described(g, GroupState.DEAD, "", "", []), "group_state": "",
                                                   "error_code": code} for g in body.get("groups") or []]}
    if api_key == ApiKey.DELETE_GROUPS:
        return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": code}
                                                   for g in body.get("groups_names") or []]}
    if api_key == ApiKey.OFFSET_DELETE:
        return {"error_code": code, "throttle_time_ms": 0, "topics": []}
    raise ValueError(f"API key {api_key} is not a group coordinator API")
