"""A broker's part in a cluster (zookeeper.connect set): registration, the controller, the controller's
requests, and the client APIs whose answers depend on the whole cluster.

At start-up (after the listeners are up, so the controller can reach us) the broker registers in ZooKeeper
(its broker epoch is the registration's creation id), starts its Controller (active only if elected) and
replaces the handlers of KafkaApis that a single broker answers alone:
- Metadata and DescribeCluster come from the MetadataCache that UpdateMetadata fills, so every broker
  answers alike;
- CreateTopics, DeleteTopics and CreatePartitions write ZooKeeper (Kafka's admin paths) and any broker takes
  them; the controller does the rest;
- produce, fetch and list-offsets for a partition this broker does not lead get NOT_LEADER_OR_FOLLOWER;
- InitProducerId takes ids from blocks reserved in /latest_producer_id_block, unique in the cluster;
- LeaderAndIsr, StopReplica and UpdateMetadata are checked against the controller and broker epochs (the
  `controller_epoch` and `broker_epoch` fields of Kafka's request schemas) and then applied to the local logs
  and the cache.
After a lost ZooKeeper session the broker registers again (a new broker epoch) and re-runs the election.

Followers fetch from their leaders through broker/replica_fetcher.py: LeaderAndIsr adds a partition this
broker follows to the fetcher of its leader (at the leader's inter-broker listener) and removes one it leads;
StopReplica removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from kafkalite.broker.acl_apis import AclApis
from kafkalite.broker.apis import KafkaApis
from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.metadata import INTERNAL_TOPICS, ensure_log_topic_id, validate_topic_name
from kafkalite.broker.reassignment_apis import ReassignmentApis
from kafkalite.broker.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from kafkalite.broker.replica_manager import ReplicaManager, error_code_of
from kafkalite.broker.scram_admin import ScramAdmin
from kafkalite.broker.topic_admin import MAX_PARTITIONS_PER_REQUEST
from kafkalite.cluster import znodes as z
from kafkalite.cluster.assignment import assign_replicas
from kafkalite.cluster.channel import request_once
from kafkalite.cluster.controller import LEADER_DURING_DELETE, Controller, ControllerSettings, TopicPartition
from kafkalite.cluster.controller_events import Marker
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.cluster.store import ClusterStore
from kafkalite.coordinator.config import OFFSETS_TOPIC, coordinator_key_partition
from kafkalite.coordinator.coordinator import GROUP_API_KEYS, error_response, request_groups
from kafkalite.errors import (
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaliteError,
    KafkaStorageError,
    PolicyViolationError,
    StaleBrokerEpochError,
    StaleControllerEpochError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkalite.protocol import ApiKey, ErrorCode, PreEncoded, RequestHeader, encode_response_body
from kafkalite.protocol.config_resources import ConfigOp, ConfigResourceType
from kafkalite.protocol.connection import CloseConnection
from kafkalite.replication.partition import Partition
from kafkalite.security.acl import AUTHORIZED_OPS_OMITTED
from kafkalite.security.session import Session
from kafkalite.security.transport import ClientSecurity

log = logging.getLogger("kafkalite.broker.cluster")

Handler = Callable[[RequestHeader, dict[str, Any], Session], Awaitable[dict[str, Any] | None]]
WAIT_STEP_S = 0.05
METADATA_ANSWERS_KEPT = 256  # distinct Metadata questions whose encoded answers are kept
AUTO_CREATE_WAIT_MS = 1000  # how long a Metadata request that auto-creates a topic waits for its leaders
OFFSETS_TOPIC_WAIT_MS = 5000  # how long the FindCoordinator that creates __consumer_offsets waits for it


class OffsetsLeadership(Protocol):
    """What hears that this broker leads, or no longer leads, a `__consumer_offsets` partition: the
    group coordinator (Kafka's GroupCoordinator.onElection / onResignation)."""

    def on_election(self, partition: int, epoch: int = -1) -> None: ...

    def on_resignation(self, partition: int, epoch: int = -1) -> None: ...


def _operations_settings(config: BrokerConfig) -> dict[str, Any]:
    return {"auto_leader_rebalance": config.get("auto.leader.rebalance.enable"),
            "imbalance_check_interval_s": float(config.get("leader.imbalance.check.interval.seconds")),
            "imbalance_percentage": config.get("leader.imbalance.per.broker.percentage")}


class ClusterNode:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, apis: KafkaApis, store: ClusterStore) -> None:
        self.config = config
        self.replicas = replicas
        self.apis = apis
        self.offsets_leadership: OffsetsLeadership | None = apis.coordinator
        self.node_id = config.node_id
        # ZooKeeper (zookeeper.connect set) or, for a single broker, cluster/local_store.py: the same code runs
        self.store = store
        self.scram_admin = ScramAdmin(store)
        self.scram = self.scram_admin.credentials  # SCRAM users, read by the SASL authenticator (server.py)
        self.single = not config.get("zookeeper.connect")
        self.acls = AclApis(config, store, apis)  # authorizer.class.name: the ACL cache and the ACL APIs
        self.local_failures: dict[tuple[str, int], tuple[int, str]] = {}  # partitions LeaderAndIsr could not host
        # Other brokers are reached on the inter-broker listener; clients are told the endpoints of the
        # listener their request arrived on (session.listener), as Kafka does.
        self.listener = config.inter_broker_listener().name
        self.security = ClientSecurity.for_inter_broker(config)
        self.registration = z.BrokerRegistration(
            self.node_id, tuple(z.Endpoint(li.name, li.host, li.port, config.security_protocol(li.name))
                                for li in config.advertised()),
            config.get("broker.rack") or None)
        self.cache = MetadataCache(self.listener)
        control = config.control_plane_listener().name  # KIP-291: the controller's requests apart from replication
        self.controller = Controller(self.store, self.node_id,
                                     ControllerSettings(config.get("unclean.leader.election.enable"),
                                                        self.listener, control_listener=control,
                                                        security=ClientSecurity.for_inter_broker(config, control),
                                                        **_operations_settings(config)),
                                     topic_unclean=self._topic_unclean, initial_epoch=self._initial_epoch)
        self.reassignments = ReassignmentApis(self.controller)
        self.broker_epoch = -1
        self._pid_block: z.ProducerIdBlock | None = None
        self._next_pid = 0
        self._pid_lock = asyncio.Lock()
        self._reregistering: asyncio.Task[None] | None = None
        self._metadata_answers: dict[Any, PreEncoded] = {}
        self._metadata_seen = -1
        self._auto_created = False
        self._seen_changes: set[str] = set()
        self._changes_primed = False
        self._config_tasks: set[asyncio.Task[None]] = set()
        self.fetchers = ReplicaFetcherManager(replace(FetcherSettings.from_config(config), security=self.security),
                                              lambda t, p: replicas.partitions.get((t, p)),
                                              replicas.io_failed)
        self._stopping = asyncio.Event()
        self._isr_expiration: asyncio.Task[None] | None = None
        self._shutting_down = False  # controlled shutdown asked for: no follower of ours starts fetching

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.store.close()  # a half-made start (e.g. a broker id in use) leaves no session behind
            raise

    async def _start(self) -> None:
        # Roles come from the controller's LeaderAndIsr, not from holding a log (single-broker mode's rule).
        self.replicas.leads_all_local_logs = False
        self.replicas.partitions.clear()
        self._install()  # first: client requests wait for the broker's start-up (KafkaApis.ready), not longer
        await self.store.start()
        await self.acls.start()  # before any request is authorized (other controllers' requests come early)
        local = self.apis.cluster_id()
        cluster_id = await self.store.get_or_create_cluster_id(local)
        if cluster_id != local:
            raise KafkaliteError(f"The cluster id {cluster_id} in ZooKeeper ({self.store.connect}/cluster/id) does "
                                 f"not match the cluster id {local} of this broker's data directories "
                                 "(meta.properties): this broker belongs to another cluster")
        if self.single:
            await self._register_local_topics()
        self.broker_epoch = await self.store.register_broker(self.registration)
        log.info("Registered broker %d in %s with broker epoch %d", self.node_id, self.store.connect,
                 self.broker_epoch)
        self.store.on_session_lost = self._session_lost
        self.store.on_session_restored = self._session_restored
        self.controller.start()
        # leader side of replication: ISR changes are committed to the store; DeleteRecords waits for live replicas
        self.replicas.isr_store = self.store
        self.replicas.broker_alive = lambda b: b in self.cache.brokers
        self._isr_expiration = asyncio.get_running_loop().create_task(
            self.replicas.run_isr_expiration(self._stopping), name="isr-expiration")
        self.store.watch_children(z.CONFIG_CHANGES, self._on_config_changes)
        await self._sync_local_configs()
        await self.scram_admin.load()
        if self.single:
            await self._wait_for_own_controller()

    async def _register_local_topics(self) -> None:
        """Single-broker mode: topics found only in the data dirs (adopted at start-up from another writer,
        or partitions beyond the registered count) are registered in the store, led by this broker."""
        for name, info in sorted(self.replicas.metadata.topics.items()):
            a = await self.store.topic_assignment(name)
            if a is None:
                await self.store.create_topic(z.TopicAssignment(
                    name, info.topic_id, {p: [self.node_id] for p in range(info.partitions)}), info.configs)
            elif len(a.partitions) < info.partitions:
                grown = {p: [self.node_id] for p in range(len(a.partitions), info.partitions)}
                await self.store.add_partitions(z.TopicAssignment(name, a.topic_id, {**a.partitions, **grown}),
                                                len(a.partitions))

    def _initial_epoch(self, tp: tuple[str, int]) -> int:
        """A partition's first leader epoch: past what its local log recorded (a data dir from before this
        broker ran the controller, whose logs carry the epochs they were led at), else 0."""
        lg = self.replicas.logs.get_log(*tp)
        latest = lg.latest_epoch if lg is not None else None
        return latest if latest is not None and latest > 0 else 0

    async def _wait_for_own_controller(self, timeout_s: float = 300.0) -> None:
        """Single-broker mode: this broker is its own controller; start-up ends once the failover's
        LeaderAndIsr and UpdateMetadata were applied, so the first client finds every partition led. A
        request queued behind them on the controller's channel to this broker tells when."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.controller.active:
            if loop.time() > deadline:
                raise KafkaliteError(f"broker {self.node_id} did not become its own controller within "
                                     f"{timeout_s:g} s")
            await asyncio.sleep(0.01)
        done: asyncio.Future[None] = loop.create_future()

        def answered(_broker: int, _body: dict[str, Any]) -> None:
            if not done.done():
                done.set_result(None)

        async def marker() -> None:  # runs after the failover's event: its requests are queued before ours
            self.controller.channels.send(self.node_id, ApiKey.API_VERSIONS, 0, {}, answered)
        self.controller.enqueue(Marker(marker, "the starting broker waits for its controller's requests"))
        try:
            await asyncio.wait_for(done, max(0.0, deadline - loop.time()))
        except TimeoutError:
            log.warning("Broker %d: its controller's requests were not applied within %g s; serving anyway",
                        self.node_id, timeout_s)

    async def stop(self) -> None:
        self._stopping.set()
        if self._isr_expiration is not None:
            await self._isr_expiration
        await self.fetchers.stop()
        await self.controller.stop()
        await self.store.close()

    def _session_lost(self) -> None:
        log.warning("Broker %d lost its ZooKeeper session: it re-registers when ZooKeeper is reachable again",
                    self.node_id)

    def _session_restored(self) -> None:
        async def again() -> None:
            try:
                self.broker_epoch = await self.store.register_broker(self.registration)
                log.info("Broker %d registered again with broker epoch %d", self.node_id, self.broker_epoch)
                self.controller.reelect()
            except KafkaliteError as exc:
                log.error("Broker %d could not register again: %s", self.node_id, exc)
        self._reregistering = asyncio.get_running_loop().create_task(again())

    async def _topic_unclean(self, topic: str) -> bool | None:
        raw = (await self.store.topic_config(topic)).get("unclean.leader.election.enable")
        return None if raw is None else raw.strip().lower() == "true"

    def _install(self) -> None:
        h = self.apis._handlers
        self._produce, self._fetch, self._list_offsets = h[ApiKey.PRODUCE], h[ApiKey.FETCH], h[ApiKey.LIST_OFFSETS]
        h.update({
            ApiKey.METADATA: self.metadata, ApiKey.DESCRIBE_CLUSTER: self.describe_cluster,
            ApiKey.CREATE_TOPICS: self.create_topics, ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.create_partitions, ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.PRODUCE: self.produce, ApiKey.FETCH: self.fetch, ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.LEADER_AND_ISR: self.leader_and_isr, ApiKey.STOP_REPLICA: self.stop_replica,
            ApiKey.UPDATE_METADATA: self.update_metadata,
            ApiKey.CONTROLLED_SHUTDOWN: self.controlled_shutdown_request, ApiKey.ELECT_LEADERS: self.elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.reassignments.alter,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.reassignments.list,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.scram_admin.describe,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.scram_admin.alter,
        })
        self._describe_configs, self._alter_configs = h[ApiKey.DESCRIBE_CONFIGS], h[ApiKey.ALTER_CONFIGS]
        self._incremental_alter_configs = h[ApiKey.INCREMENTAL_ALTER_CONFIGS]
        h.update({ApiKey.DESCRIBE_CONFIGS: self.describe_configs, ApiKey.ALTER_CONFIGS: self.alter_configs,
                  ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs})
        if self.apis.coordinator is not None:
            self._group = h[ApiKey.JOIN_GROUP]
            h[ApiKey.FIND_COORDINATOR] = self.find_coordinator
            # commits name partitions of the whole cluster, not only those with a log here
            self.apis.coordinator.partition_exists = lambda t, p: self.cache.partition(t, p) is not None
            for key in GROUP_API_KEYS:
                h[key] = self.group_request
        self.acls.install(h)
        if self.acls.authz is not None:
            self.acls.authz.topic_exists = lambda name: name in self.cache.topics
            self.acls.authz.topic_name_of = self.cache.by_id

    # --- controller requests ----------------------------------------------------------------------

    def _check_epochs(self, body: dict[str, Any]) -> None:
        """Kafka's isBrokerEpochStale and controller-epoch check (-1 = an old request version without one)."""
        broker_epoch = body.get("broker_epoch", -1)
        if broker_epoch != -1 and broker_epoch < self.broker_epoch:
            raise StaleBrokerEpochError(f"request for broker epoch {broker_epoch}, this broker's is "
                                        f"{self.broker_epoch}")
        if body["controller_epoch"] < self.cache.controller_epoch:
            raise StaleControllerEpochError(f"controller epoch {body['controller_epoch']} is older than "
                                            f"{self.cache.controller_epoch}")

    async def update_metadata(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        try:
            self._check_epochs(body)
        except KafkaliteError as exc:
            log.warning("Refused UpdateMetadata from controller %d: %s", body["controller_id"], exc)
            return {"error_code": exc.error_code}
        self.cache.apply(body)
        for topic, p in self._strays(body):
            log.warning("Deleting the replica of %s-%d: the cluster's assignment of that partition no longer "
                        "includes broker %d (it was moved away while this broker was down, so no StopReplica "
                        "reached it)", topic, p, self.node_id)
            await self._stop(topic, p, -1, delete=True)
        return {"error_code": ErrorCode.NONE}

    def _strays(self, body: dict[str, Any]) -> list[TopicPartition]:
        """Local replicas of partitions whose replicas, as this UpdateMetadata says, leave this broker out: a
        reassignment removed them while the broker was down. Kafka's ZooKeeper mode leaves such logs on disk for
        ever (its KRaft mode deletes them); here they go as the missed StopReplica(delete) would have. A topic
        being deleted (no replicas) is the deletion's business."""
        out = []
        for t in body.get("topic_states", []):
            for s in t["partition_states"]:
                if not s["replicas"] or self.node_id in s["replicas"] or s["leader"] == LEADER_DURING_DELETE:
                    continue
                tp = (t["topic_name"], s["partition_index"])
                if tp in self.replicas.partitions or self.replicas.logs.get_log(*tp) is not None:
                    out.append(tp)
        return out

    async def leader_and_isr(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        try:
            self._check_epochs(body)
        except KafkaliteError as exc:
            log.warning("Refused LeaderAndIsr from controller %d: %s", body["controller_id"], exc)
            return {"error_code": exc.error_code, "partition_errors": [], "topics": []}
        self.cache.controller_epoch = max(self.cache.controller_epoch, body["controller_epoch"])
        self.fetchers.learn_leaders(body.get("live_leaders", []))
        grouped = [(t["topic_name"], t.get("topic_id"), t["partition_states"]) for t in body.get("topic_states", [])]
        for s in body.get("ungrouped_partition_states", []):
            grouped.append((s["topic_name"], None, [s]))
        await self._create_missing_logs(grouped)
        topics_out = []
        flat_out = []
        for name, topic_id, states in grouped:
            codes = await self._become(name, topic_id, states)
            errors = [{"topic_name": name, "partition_index": s["partition_index"], "error_code": code}
                      for s, code in zip(states, codes, strict=True)]
            flat_out += errors
            topics_out.append({"topic_id": topic_id or uuid.UUID(int=0), "partition_errors": errors})
        return {"error_code": ErrorCode.NONE, "partition_errors": flat_out, "topics": topics_out}

    async def _create_missing_logs(self, grouped: list[tuple[str, Any, list[dict[str, Any]]]]) -> None:
        """New partitions of a LeaderAndIsr (a topic creation: thousands, perhaps) get their logs in chunks on
        worker threads (TopicAdmin.create_logs), keeping the event loop serving; _become then finds them."""
        wanted: list[tuple[str, int, dict[str, str], uuid.UUID | None]] = []
        configs: dict[str, dict[str, str]] = {}
        for name, topic_id, states in grouped:
            for s in states:
                p = s["partition_index"]
                if self.node_id in s["replicas"] and self.replicas.logs.get_log(name, p) is None:
                    if name not in configs:
                        configs[name] = await self.store.topic_config(name)
                    wanted.append((name, p, configs[name], topic_id if topic_id is not None and topic_id.int
                                   else None))
        if wanted:
            await self.apis.admin.create_logs(wanted)

    def _local_epoch(self, topic: str, p: int) -> int:
        part = self.replicas.partitions.get((topic, p))
        return part.leader_epoch if part is not None else -1

    async def _become(self, topic: str, topic_id: uuid.UUID | None, states: list[dict[str, Any]]) -> list[int]:
        """LeaderAndIsr for one topic's partitions: the checks on the event loop, then every accepted
        partition's _ensure_local, in order, in one worker-thread call (a thread hop per partition made a
        start-up with thousands of partitions half a second slower), then the leadership callbacks."""
        codes: list[int] = []
        accepted: list[int] = []  # indexes into states
        for i, s in enumerate(states):
            code = self._check_become(topic, topic_id, s)
            codes.append(ErrorCode.NONE if code is None else code)
            if code is None:
                accepted.append(i)
        if not accepted:
            return codes
        outcomes: list[Partition | BaseException]
        for i in accepted:  # before the role changes (Kafka's order): no follower append races them
            self.fetchers.remove_partition(topic, states[i]["partition_index"])
        try:
            configs = await self.store.topic_config(topic)
            outcomes = await asyncio.to_thread(self._ensure_each, topic, topic_id, configs,
                                               [states[i] for i in accepted])
        except KafkaliteError as exc:
            outcomes = [exc] * len(accepted)
        for i, got in zip(accepted, outcomes, strict=True):
            s = states[i]
            if isinstance(got, BaseException):
                codes[i] = self._became(topic, s, got)
                continue
            self._apply_role(got, s)  # on the loop (see there)
            self.replicas.purgatory.wake((topic, s["partition_index"]))  # waiting produces see the new role
            if s["leader"] != self.node_id and not self._shutting_down:
                self.fetchers.add_partition(got)
            codes[i] = self._became(topic, s, None)
        return codes

    def _check_become(self, topic: str, topic_id: uuid.UUID | None, s: dict[str, Any]) -> int | None:
        """The error of a partition state this broker must not apply, None to apply it."""
        p = s["partition_index"]
        if self.node_id not in s["replicas"]:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if s["leader_epoch"] <= self._local_epoch(topic, p):
            return ErrorCode.STALE_CONTROLLER_EPOCH
        info = self.replicas.metadata.get(topic)
        if info is not None and topic_id is not None and topic_id.int and info.topic_id != topic_id:
            if not any(t == topic for t, _p in self.replicas.partitions) and \
                    not any(lg.topic == topic for lg in self.replicas.logs.all_logs()):
                self.replicas.metadata.remove(topic)  # a stale registration without logs: a recreated topic
            else:
                return ErrorCode.INCONSISTENT_TOPIC_ID
        return None

    def _ensure_each(self, topic: str, topic_id: uuid.UUID | None, configs: dict[str, str],
                     states: list[dict[str, Any]]) -> list[Partition | BaseException]:
        """_ensure_local for each state in order (on a worker thread); each one's Partition or failure."""
        out: list[Partition | BaseException] = []
        for s in states:
            try:
                out.append(self._ensure_local(topic, topic_id, s["partition_index"], configs))
            except (KafkaliteError, OSError) as exc:
                out.append(exc)
        return out

    def _became(self, topic: str, s: dict[str, Any], failed: BaseException | None) -> int:
        p = s["partition_index"]
        if failed is not None:
            log.error("Cannot host %s-%d: %s", topic, p, failed)
            code = error_code_of(failed) if isinstance(failed, KafkaliteError) else ErrorCode.KAFKA_STORAGE_ERROR
            self.local_failures[(topic, p)] = (code, f"{topic}-{p}: {failed}")
            if topic == OFFSETS_TOPIC and self.offsets_leadership is not None:
                self.offsets_leadership.on_resignation(p, s["leader_epoch"])
            return code
        self.local_failures.pop((topic, p), None)
        if topic == OFFSETS_TOPIC and self.offsets_leadership is not None:
            if s["leader"] == self.node_id:
                self.offsets_leadership.on_election(p, s["leader_epoch"])
            else:
                self.offsets_leadership.on_resignation(p, s["leader_epoch"])
        return ErrorCode.NONE

    def _ensure_local(self, topic: str, topic_id: uuid.UUID | None, p: int, configs: dict[str, str]
                      ) -> Partition:
        """The local log and Partition of a partition this broker replicates (in a worker thread: creating
        a log touches the disk)."""
        md = self.replicas.metadata
        info = md.get(topic)
        if info is None:
            info = md.add(topic, p + 1, configs, topic_id if topic_id is not None and topic_id.int else None)
            if configs:
                self.replicas.logs.update_topic_config(topic, configs)
        elif info.partitions <= p:
            md.set_partitions(topic, p + 1)
        if self.replicas.logs.is_offline(topic, p):
            raise KafkaStorageError(f"the log dir of {topic}-{p} is offline")
        lg = self.replicas.logs.get_log(topic, p) or self.replicas.logs.get_or_create_log(topic, p, configs or None)
        ensure_log_topic_id(lg, info.topic_id)
        part = self.replicas.partitions.get((topic, p))
        if part is None or part.log is not lg:
            part = self.replicas.partitions[(topic, p)] = self.replicas.new_partition(lg)
        return part

    def _apply_role(self, part: Partition, s: dict[str, Any]) -> None:
        """Leader or follower as the controller says (Kafka's makeLeader / makeFollower), on the event loop:
        an append in between must not be stamped with the old epoch after the new epoch's start was recorded
        (Kafka holds its leaderIsrUpdateLock for the same reason)."""
        replicas, isr = list(s["replicas"]), list(s["isr"])
        if s["leader"] == self.node_id:
            part.make_leader(s["leader_epoch"], isr, replicas, s.get("partition_epoch", 0),
                             controller_epoch=s.get("controller_epoch", -1))
        else:
            part.make_follower(s["leader"], s["leader_epoch"], isr, replicas, s.get("partition_epoch", 0))

    async def stop_replica(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        try:
            self._check_epochs(body)
        except KafkaliteError as exc:
            log.warning("Refused StopReplica from controller %d: %s", body["controller_id"], exc)
            return {"error_code": exc.error_code, "partition_errors": []}
        self.cache.controller_epoch = max(self.cache.controller_epoch, body["controller_epoch"])
        wanted: list[tuple[str, int, int, bool]] = []
        for t in body.get("topic_states", []):
            for s in t["partition_states"]:
                wanted.append((t["topic_name"], s["partition_index"], s.get("leader_epoch", -1),
                               s["delete_partition"]))
        for t in body.get("topics", []):
            wanted += [(t["name"], p, -1, body.get("delete_partitions", False)) for p in t["partition_indexes"]]
        for s in body.get("ungrouped_partitions", []):
            wanted.append((s["topic_name"], s["partition_index"], -1, body.get("delete_partitions", False)))
        errors = []
        for topic, p, epoch, delete in wanted:
            ours = self._local_epoch(topic, p)
            if epoch >= 0 and epoch <= ours:
                errors.append({"topic_name": topic, "partition_index": p, "error_code": ErrorCode.FENCED_LEADER_EPOCH})
                continue
            await self._stop(topic, p, epoch, delete)
            errors.append({"topic_name": topic, "partition_index": p, "error_code": ErrorCode.NONE})
        return {"error_code": ErrorCode.NONE, "partition_errors": errors}

    async def _stop(self, topic: str, p: int, epoch: int, delete: bool) -> None:
        """Stop replicating a partition here (no more fetching, no more serving) and, with `delete`, remove it."""
        self.fetchers.remove_partition(topic, p)
        if delete:
            await asyncio.to_thread(self._delete_local, topic, p)
        else:  # no longer served here: clients are sent back to the metadata
            part = self.replicas.partitions.get((topic, p))
            if part is not None:
                part.make_follower(-1, max(self._local_epoch(topic, p), epoch), part.isr, part.replicas,
                                   part.partition_epoch)
        self.replicas.purgatory.wake((topic, p))
        if topic == OFFSETS_TOPIC and self.offsets_leadership is not None:
            self.offsets_leadership.on_resignation(p, epoch)

    # --- operations: controlled shutdown and leader elections (the controller does the work) -------------

    async def controlled_shutdown_request(self, h: RequestHeader, body: dict[str, Any], _session: Session
                                          ) -> dict[str, Any]:
        """A broker asks the controller to move its leaderships away; others answer NOT_CONTROLLER."""
        try:
            remaining = await self.controller.controlled_shutdown(body["broker_id"], body.get("broker_epoch", -1))
        except KafkaliteError as exc:
            log.info("ControlledShutdown of broker %d refused: %s", body["broker_id"], exc)
            return {"error_code": exc.error_code, "remaining_partitions": []}
        except TimeoutError:
            return {"error_code": ErrorCode.REQUEST_TIMED_OUT, "remaining_partitions": []}
        return {"error_code": ErrorCode.NONE,
                "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}

    async def elect_leaders(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        """ElectLeaders (Kafka's handleElectReplicaLeader in ZK mode): the controller elects; a successful
        election is answered once this broker's metadata shows the new leader, or REQUEST_TIMED_OUT after
        timeout_ms. Null partitions = all partitions, and then those that needed no election are left out.
        On a broker that is not the controller every partition gets NOT_CONTROLLER."""
        election_type = body.get("election_type", 0) if h.api_version >= 1 else 0
        requested = body.get("topic_partitions")
        if requested is None:
            wanted = [(t, p) for t, c in sorted(self.cache.topics.items()) for p in sorted(c.partitions)]
        else:
            wanted = [(t["topic"], p) for t in requested for p in t["partitions"]]
        timeout_s = max(body.get("timeout_ms", 60000), 0) / 1000
        results: dict[TopicPartition, tuple[int, str | None, int]]
        if election_type not in (0, 1):
            results = {tp: (ErrorCode.INVALID_REQUEST, f"unknown election type {election_type}", -1) for tp in wanted}
        else:
            try:
                results = await self.controller.elect_leaders(election_type, wanted, timeout_s)
            except KafkaliteError as exc:
                results = {tp: (exc.error_code, None, -1) for tp in wanted}
            except TimeoutError:
                results = {tp: (ErrorCode.REQUEST_TIMED_OUT, None, -1) for tp in wanted}
        await self._await_leaders(results, timeout_s)
        if requested is None:
            results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), (code, message, _leader) in results.items():
            by_topic.setdefault(t, []).append({"partition_id": p, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}

    async def _await_leaders(self, results: dict[TopicPartition, tuple[int, str | None, int]],
                             timeout_s: float) -> None:
        """Kafka's DelayedElectLeader: wait until the metadata cache shows each elected leader."""
        pending = {tp: r[2] for tp, r in results.items() if r[0] == ErrorCode.NONE}
        deadline = time.monotonic() + timeout_s
        while pending:
            pending = {tp: b for tp, b in pending.items() if self.cache.leader(*tp) != b}
            if not pending or time.monotonic() >= deadline:
                break
            await asyncio.sleep(WAIT_STEP_S)
        for tp in pending:
            results[tp] = (ErrorCode.REQUEST_TIMED_OUT, "the new leader was not known to this broker in time", -1)

    async def controlled_shutdown(self) -> None:
        """Kafka's KafkaServer.controlledShutdown, run when the broker is asked to stop (SIGTERM): while still
        serving, ask the current controller to move this broker's leaderships to other in-sync replicas, up to
        controlled.shutdown.max.retries times, controlled.shutdown.retry.backoff.ms apart, until it says none
        remain; then the normal shutdown goes on whatever the answer."""
        if self.single or not self.config.get("controlled.shutdown.enable"):
            return  # a cluster of one has nobody to hand its partitions to
        # The partitions handed away make this broker their follower (the controller sends it their LeaderAndIsr,
        # as Kafka's does); fetching then would put it back in their ISRs a moment before it stops, and acks=all
        # would wait for a dead member until the controller drops it (a controller failover when this broker was
        # the controller). Kafka's ZooKeeper mode has that window; KRaft closes it (KIP-841: a broker shutting
        # down is not ISR-eligible); here the broker does not start those fetchers.
        self._shutting_down = True
        log.info("Starting controlled shutdown")
        retries = self.config.get("controlled.shutdown.max.retries")
        backoff_s = self.config.get("controlled.shutdown.retry.backoff.ms") / 1000
        succeeded = False
        while not succeeded and retries > 0:
            retries -= 1
            started = time.monotonic()
            controller = self.cache.brokers.get(self.cache.controller_id)
            if controller is None:
                log.info("Controlled shutdown: no controller known (controller id %d)", self.cache.controller_id)
            else:
                try:
                    answer = await request_once(controller.host, controller.port, ApiKey.CONTROLLED_SHUTDOWN, 3,
                                                {"broker_id": self.node_id, "broker_epoch": self.broker_epoch},
                                                security=self.security)
                    took_ms = (time.monotonic() - started) * 1000
                    remaining = [f"{r['topic_name']}-{r['partition_index']}" for r in answer["remaining_partitions"]]
                    if answer["error_code"] != ErrorCode.NONE:
                        log.info("Controlled shutdown request returned after %.0f ms with error %s", took_ms,
                                 ErrorCode(answer["error_code"]).name)
                    elif not remaining:
                        succeeded = True
                        log.info("Controlled shutdown request returned successfully after %.0f ms", took_ms)
                    else:
                        log.info("Controlled shutdown request returned after %.0f ms with partitions remaining to "
                                 "move: %s", took_ms, ", ".join(remaining))
                except (OSError, TimeoutError, EOFError, asyncio.IncompleteReadError, KafkaliteError) as exc:
                    log.warning("Error during controlled shutdown (controller %d at %s:%d): %s", controller.broker_id,
                                controller.host, controller.port, exc or type(exc).__name__)
            if not succeeded and retries > 0:
                await asyncio.sleep(backoff_s)
                log.info("Retrying controlled shutdown (%d retries remaining)", retries)
        if not succeeded:
            log.warning("Proceeding to do an unclean shutdown as all the controlled shutdown attempts failed")

    def _delete_local(self, topic: str, p: int) -> None:
        self.replicas.remove_partition(topic, p)
        if not any(lg.topic == topic for lg in self.replicas.logs.all_logs()):
            self.replicas.metadata.remove(topic)

    # --- metadata ----------------------------------------------------------------------------------

    async def metadata(self, h: RequestHeader, body: dict[str, Any], session: Session) -> Any:
        """Answered from the cache; the encoded answer is kept until the next UpdateMetadata, since the same
        questions come again and again (every client refreshes its metadata periodically)."""
        if self.apis.authz is not None:  # the answer depends on the principal: not kept
            return await self._metadata(h, body, session.listener)
        requested = body.get("topics")
        names = None if requested is None else tuple((t.get("name"), t.get("topic_id")) for t in requested)
        key = (h.api_version, names, bool(body.get("allow_auto_topic_creation", True)), session.listener)
        if self._metadata_seen != self.cache.updates:
            self._metadata_answers.clear()
            self._metadata_seen = self.cache.updates
        hit = self._metadata_answers.get(key)
        if hit is not None:
            return hit
        out = await self._metadata(h, body, session.listener)
        if self._metadata_seen == self.cache.updates and not self._auto_created and \
                all(t["error_code"] == ErrorCode.NONE for t in out["topics"]):
            if len(self._metadata_answers) >= METADATA_ANSWERS_KEPT:
                self._metadata_answers.clear()
            self._metadata_answers[key] = encode_response_body(ApiKey.METADATA, h.api_version, out)
        return out

    async def _metadata(self, h: RequestHeader, body: dict[str, Any], listener: str) -> dict[str, Any]:
        v = h.api_version
        requested = body.get("topics")
        self._auto_created = False
        cache = self.cache
        if requested is None or (v == 0 and not requested):
            wanted: list[tuple[str | None, Any]] = [(n, None) for n in sorted(cache.topics)]
        else:
            wanted = [(t.get("name"), t.get("topic_id")) for t in requested]
        auto = self.config.get("auto.create.topics.enable") and body.get("allow_auto_topic_creation", True) \
            and requested is not None
        topics = []
        for name, topic_id in wanted:
            if name is None:
                name = cache.by_id(topic_id) if topic_id else None
                if name is None:
                    topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id,
                                   "partitions": []})
                    continue
            topics.append(await self._topic_metadata(name, auto))
        return {"throttle_time_ms": 0, "cluster_id": self.apis.cluster_id(), "controller_id": cache.controller_id,
                "brokers": [{"node_id": b, "host": host, "port": port, "rack": rack}
                            for b, host, port, rack in self._brokers_on(listener)],
                "topics": topics, "cluster_authorized_operations": AUTHORIZED_OPS_OMITTED, "error_code": ErrorCode.NONE}

    async def _topic_metadata(self, name: str, auto_create: bool) -> dict[str, Any]:
        cached = self.cache.topics.get(name)
        empty = {"name": name, "topic_id": uuid.UUID(int=0), "is_internal": name in INTERNAL_TOPICS, "partitions": []}
        if cached is None:
            if not auto_create:
                return {**empty, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            self._auto_created = True
            try:
                validate_topic_name(name)
                await self._create(name, self.config.get("num.partitions"),
                                   self.config.get("default.replication.factor"), None, {})
            except TopicAlreadyExistsError:
                pass
            except KafkaliteError as exc:
                return {**empty, "error_code": error_code_of(exc)}
            # Kafka answers LEADER_NOT_AVAILABLE at once (so does a cluster here); a single broker, its own
            # controller, waits a moment for the leaders so its first Metadata shows the topic, as it always did
            if not await self._wait_for(lambda: name in self.cache.topics, AUTO_CREATE_WAIT_MS if self.single else 0):
                return {**empty, "error_code": ErrorCode.LEADER_NOT_AVAILABLE}
            return await self._topic_metadata(name, False)
        parts = []
        for p, s in sorted(cached.partitions.items()):
            leader = self.cache.leader(name, p)
            parts.append({"error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                          "partition_index": p,
                          "leader_id": leader, "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                          "isr_nodes": list(s.isr),
                          "offline_replicas": [b for b in s.replicas if b not in self.cache.brokers]})
        return {"error_code": ErrorCode.NONE, "name": name, "topic_id": cached.topic_id,
                "is_internal": name in INTERNAL_TOPICS, "partitions": parts,
                "topic_authorized_operations": AUTHORIZED_OPS_OMITTED}

    def _brokers_on(self, listener: str) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of each live broker on `listener`; brokers without it are left out (Kafka)."""
        out = []
        for b in sorted(self.cache.brokers.values(), key=lambda b: b.broker_id):
            addr = b.address(listener)
            if addr is not None:
                out.append((b.broker_id, addr[0], addr[1], b.rack))
        return out

    async def describe_cluster(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:
        out = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "endpoint_type": 1,
               "cluster_id": self.apis.cluster_id(), "controller_id": self.cache.controller_id,
               "brokers": [{"broker_id": b, "host": host, "port": port, "rack": rack}
                           for b, host, port, rack in self._brokers_on(session.listener)],
               "cluster_authorized_operations": AUTHORIZED_OPS_OMITTED}
        if body.get("endpoint_type", 1) != 1:
            out.update(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE, brokers=[],
                       error_message="kafkalite has no separate controller endpoints")
        return out

    # --- topic administration through ZooKeeper -----------------------------------------------------

    async def _live_brokers(self) -> dict[int, str | None]:
        return {b: r.rack for b, r in (await self.store.brokers()).items()}

    async def _create(self, name: str, partitions: int, rf: int, manual: dict[int, list[int]] | None,
                      configs: dict[str, str], validate_only: bool = False, *, also_local: int = 0
                      ) -> z.TopicAssignment:
        if name in self.cache.topics or await self.store.topic_assignment(name) is not None:
            if await self.store.read(z.delete_topic_path(name)) is not None:  # Kafka's wording for this case
                raise TopicAlreadyExistsError(f"Topic '{name}' is marked for deletion.")
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        key = name.replace(".", "_")
        for other in await self.store.topics():
            if other != name and other.replace(".", "_") == key:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
        self.apis.admin.validate_topic_configs(configs)
        live = await self._live_brokers()
        if manual is not None:
            parts = manual
            sizes = {len(r) for r in parts.values()}
            if sorted(parts) != list(range(len(parts))):
                raise InvalidReplicationAssignmentError("Partitions should be a consecutive 0-based integer "
                                                        "sequence")
            if len(sizes) != 1:
                raise InvalidReplicationAssignmentError("All partitions should have the same number of replicas")
            for p, r in parts.items():
                if len(set(r)) != len(r):
                    raise InvalidReplicationAssignmentError(f"Duplicate brokers not allowed in replica assignment "
                                                            f"{r} of partition {p}")
                unknown = sorted(set(r) - set(live))
                if unknown:
                    raise InvalidReplicationAssignmentError(f"Unknown broker(s) {unknown} in the assignment of "
                                                            f"partition {p}")
        else:
            if partitions <= 0:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            parts = assign_replicas(partitions, rf, sorted(live), live)
        # this broker's open-file limit must hold its new replicas, with `also_local` of the same request
        self.apis.admin.check_new_partitions(also_local + sum(1 for r in parts.values() if self.node_id in r))
        assignment = z.TopicAssignment(name, uuid.uuid4(), parts)
        if not validate_only:
            await self.store.create_topic(assignment, configs)
        return assignment

    async def _wait_for(self, ready: Callable[[], bool], timeout_ms: int) -> bool:
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while not ready():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(WAIT_STEP_S)
        return True

    # over the complexity limit: still to split (issue 34)
    async def create_topics(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:  # noqa: C901
        validate_only = body.get("validate_only", False)
        timeout_ms = body.get("timeout_ms", 60000)
        requested = body.get("topics", [])
        names = [t["name"] for t in requested]
        results = []
        created: list[z.TopicAssignment] = []
        # Kafka checks the whole request first (validateTotalNumberOfPartitions): too many partitions fail
        # every topic of it with POLICY_VIOLATION, before anything is created.
        total = 0
        for t in requested:
            n = len(t.get("assignments") or []) or t.get("num_partitions", -1)
            total += self.config.get("num.partitions") if n == -1 else max(0, n)
        if total > MAX_PARTITIONS_PER_REQUEST:
            exc = _too_many(total)
            return {"throttle_time_ms": 0, "topics": [
                {"name": t["name"], "topic_id": uuid.UUID(int=0), "error_code": exc.error_code,
                 "error_message": str(exc), "num_partitions": -1, "replication_factor": -1, "configs": []}
                for t in requested]}
        local = 0  # new replicas on this broker so far in this request
        for t in requested:
            name = t["name"]
            res: dict[str, Any] = {"name": name, "topic_id": uuid.UUID(int=0), "error_code": ErrorCode.NONE,
                                   "error_message": None, "num_partitions": -1, "replication_factor": -1,
                                   "configs": []}
            try:
                if names.count(name) > 1:
                    raise InvalidRequestError(f"Create topics request from client contains a duplicate topic: {name}")
                validate_topic_name(name)
                partitions = t.get("num_partitions", -1)
                rf = t.get("replication_factor", -1)
                manual = {a["partition_index"]: list(a["broker_ids"]) for a in t.get("assignments") or []} or None
                if manual is not None and (partitions != -1 or rf != -1):
                    raise InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignments "
                                              "were set. Both cannot be used at the same time.")
                if partitions == -1:
                    partitions = self.config.get("num.partitions")
                if rf == -1:
                    rf = self.config.get("default.replication.factor")
                configs = {c["name"]: c["value"] for c in t.get("configs", []) if c.get("value") is not None}
                a = await self._create(name, partitions, rf, manual, configs, validate_only, also_local=local)
                local += sum(1 for r in a.partitions.values() if self.node_id in r)
                res.update(topic_id=a.topic_id if not validate_only else uuid.UUID(int=0),
                           num_partitions=len(a.partitions), replication_factor=len(next(iter(a.partitions.values()))))
                if not validate_only:
                    created.append(a)
                    res["configs"] = [{k: c[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                                      for c in self.apis._topic_config_entries(name, configs)]
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            results.append(res)
        if created:
            # Kafka's handler answers once the metadata shows leaders, or at the request's timeout.
            def ready() -> bool:
                return all(a.topic in self.cache.topics and len(self.cache.topics[a.topic].partitions) ==
                           len(a.partitions) and self.cache.topics[a.topic].topic_id == a.topic_id for a in created)
            if not await self._wait_for(ready, timeout_ms):
                for res in results:
                    if any(a.topic == res["name"] for a in created) and res["name"] not in self.cache.topics:
                        res.update(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message="The topic was created in "
                                   "the cluster store but its leaders were not known within timeout_ms")
            self._report_local_failures(results, {a.topic: range(len(a.partitions)) for a in created})
        # A topic another request is creating exists (TOPIC_ALREADY_EXISTS) before this broker's metadata
        # lists it; answering once it does spares the client a Metadata that says UNKNOWN_TOPIC_OR_PARTITION
        # (several writers of a Spark job create their topic at once).
        pending = [r["name"] for r in results if r["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
                   and r["name"] not in self.cache.topics]
        if pending:
            await self._wait_for(lambda: all(n in self.cache.topics for n in pending), timeout_ms)
        return {"throttle_time_ms": 0, "topics": results}

    def _report_local_failures(self, results: list[dict[str, Any]], partitions: dict[str, range]) -> None:
        """A new partition this broker could not host (a full disk, an offline log dir) fails the request
        that made it, as a single broker always did; the topic stays, that partition without a leader here."""
        for res in results:
            name = res["name"]
            if res["error_code"] != ErrorCode.NONE or name not in partitions:
                continue
            failed = [self.local_failures[(name, p)] for p in partitions[name] if (name, p) in self.local_failures]
            if failed:
                res.update(error_code=failed[0][0], error_message=f"{len(failed)} of the new partitions could not "
                           f"be created on broker {self.node_id}: {failed[0][1]}")

    async def delete_topics(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        if h.api_version >= 6:
            wanted = [(t.get("name"), t.get("topic_id")) for t in body.get("topics", [])]
        else:
            wanted = [(n, None) for n in body.get("topic_names", [])]
        results = []
        deleting = []
        for name, topic_id in wanted:
            res: dict[str, Any] = {"name": name, "topic_id": topic_id or uuid.UUID(int=0), "error_code": ErrorCode.NONE,
                                   "error_message": None}
            try:
                if not self.config.get("delete.topic.enable"):
                    res.update(error_code=ErrorCode.TOPIC_DELETION_DISABLED,
                               error_message="Topic deletion is disabled.")
                    results.append(res)
                    continue
                if name is None:
                    name = self.cache.by_id(topic_id) if topic_id else None
                    if name is None:
                        res.update(error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                                   error_message="This server does not host this topic ID.")
                        results.append(res)
                        continue
                    res["name"] = name
                if name in INTERNAL_TOPICS:
                    raise InvalidTopicError(f"Topic {name} is an internal topic and cannot be deleted")
                a = await self.store.topic_assignment(name)
                if a is None:
                    raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
                res["topic_id"] = a.topic_id
                await self.store.request_topic_deletion(name)
                deleting.append(name)
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            results.append(res)
        if deleting and not await self._wait_for(lambda: not any(n in self.cache.topics for n in deleting),
                                                 body.get("timeout_ms", 30000)):
            for res in results:
                if res["name"] in deleting and res["name"] in self.cache.topics:
                    res.update(error_code=ErrorCode.REQUEST_TIMED_OUT,
                               error_message="Deletion was requested but not yet completed within timeout_ms")
        return {"throttle_time_ms": 0, "responses": results}

    async def create_partitions(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        validate_only = body.get("validate_only", False)
        results = []
        waiting: dict[str, int] = {}
        total = 0
        for t in body.get("topics", []):
            cached = self.cache.topics.get(t["name"])
            total += max(0, t["count"] - (len(cached.partitions) if cached is not None else 0))
        if total > MAX_PARTITIONS_PER_REQUEST:  # each topic still checks the open-file limit for itself
            exc = _too_many(total)
            return {"throttle_time_ms": 0, "results": [
                {"name": t["name"], "error_code": exc.error_code, "error_message": str(exc)}
                for t in body.get("topics", [])]}
        for t in body.get("topics", []):
            name, count = t["name"], t["count"]
            res: dict[str, Any] = {"name": name, "error_code": ErrorCode.NONE, "error_message": None}
            try:
                a = await self.store.topic_assignment(name)
                if a is None:
                    raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
                old = len(a.partitions)
                if count <= old:
                    raise InvalidPartitionsError(f"Topic currently has {old} partitions, which is higher than or "
                                                 f"equal to the requested {count}.")
                live = await self._live_brokers()
                if t.get("assignments"):
                    new = {old + i: list(x["broker_ids"]) for i, x in enumerate(t["assignments"])}
                    if len(new) != count - old:
                        raise InvalidReplicationAssignmentError(f"Increasing the number of partitions by "
                                                                f"{count - old} but {len(new)} assignments provided.")
                else:
                    rf = len(a.partitions[0])
                    new = assign_replicas(count - old, rf, sorted(live), live, start_partition=old)
                self.apis.admin.check_new_partitions(sum(1 for r in new.values() if self.node_id in r))
                if not validate_only:
                    await self.store.add_partitions(z.TopicAssignment(name, a.topic_id, {**a.partitions, **new}),
                                                    old)
                    waiting[name] = count
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            except Exception as exc:  # BadVersion: changed concurrently
                res.update(error_code=ErrorCode.INVALID_PARTITIONS, error_message=f"the topic changed meanwhile: {exc}")
            results.append(res)
        if waiting:
            await self._wait_for(lambda: all(n in self.cache.topics and len(self.cache.topics[n].partitions) >= c
                                             for n, c in waiting.items()), body.get("timeout_ms", 30000))
            self._report_local_failures(results, {n: range(c) for n, c in waiting.items()})
        return {"throttle_time_ms": 0, "results": results}

    # --- topic configs: /config/topics/<t>, announced by /config/changes/config_change_<seq> --------------

    async def _sync_local_configs(self) -> None:
        """Topics this broker hosts take their configs from ZooKeeper (changed while it was down)."""
        for name, info in list(self.replicas.metadata.topics.items()):
            if await self.store.topic_assignment(name) is None:
                continue
            configs = await self.store.topic_config(name)
            if configs != info.configs:
                self._apply_local_config(name, configs)

    def _apply_local_config(self, name: str, configs: dict[str, str]) -> None:
        try:
            self.apis.admin.alter_topic_configs(name, configs)
        except KafkaliteError as exc:
            log.error("Cannot apply the configs of topic %s from ZooKeeper %s: %s", name, configs, exc)

    def _on_config_changes(self, children: list[str]) -> None:
        new = sorted(c for c in children if c not in self._seen_changes)
        self._seen_changes.update(children)
        if self._changes_primed and new:
            self._config_tasks.add(asyncio.get_running_loop().create_task(self._process_changes(new)))
        self._changes_primed = True  # changes made before start-up were synced by _sync_local_configs

    async def _process_changes(self, names: list[str]) -> None:
        for child in names:
            path = f"{z.CONFIG_CHANGES}/{child}"
            try:
                data = await self.store.read(path)
                if data is None:
                    continue
                kind, name = z.decode_config_change(path, data)
                if kind == "topics" and name in self.replicas.metadata.topics:
                    self._apply_local_config(name, await self.store.topic_config(name))
                elif kind == "users":
                    await self.scram_admin.refresh(name)
            except KafkaliteError as exc:
                log.error("Cannot process the config change %s: %s", path, exc)
        task = asyncio.current_task()
        if task is not None:
            self._config_tasks.discard(task)

    async def _topic_exists(self, name: str) -> bool:
        return name in self.cache.topics or await self.store.topic_assignment(name) is not None

    async def describe_configs(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:
        out = await self._describe_configs(h, body, session)
        assert out is not None
        for res, r in zip(out["results"], body.get("resources", []), strict=True):
            if r["resource_type"] != ConfigResourceType.TOPIC:
                continue
            name = r["resource_name"]
            if await self._topic_exists(name):
                entries = self.apis._topic_config_entries(name, await self.store.topic_config(name))
                keys = r.get("configuration_keys")
                res.update(error_code=ErrorCode.NONE, error_message=None,
                           configs=[c for c in entries if keys is None or c["name"] in keys])
            else:
                res.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           error_message=f"The topic '{name}' does not exist.", configs=[])
        return out

    async def _alter_topics(self, h: RequestHeader, body: dict[str, Any], session: Session, incremental: bool,
                            original: Handler) -> dict[str, Any]:
        """Topic resources are changed in ZooKeeper (every broker applies them from the change notification);
        the others go to the single-broker handler, which refuses dynamic broker configs."""
        resources = body.get("resources", [])
        others = [r for r in resources if r["resource_type"] != ConfigResourceType.TOPIC]
        answered: dict[tuple[int, str], dict[str, Any]] = {}
        if others:
            out = await original(h, {**body, "resources": others}, session)
            assert out is not None
            for done in out["responses"]:
                answered[(done["resource_type"], done["resource_name"])] = done
        validate_only = body.get("validate_only", False)
        responses = []
        for r in resources:
            rtype, name = r["resource_type"], r["resource_name"]
            if rtype != ConfigResourceType.TOPIC:
                responses.append(answered[(rtype, name)])
                continue
            res: dict[str, Any] = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": rtype,
                                   "resource_name": name}
            try:
                if not await self._topic_exists(name):
                    raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
                names = [c["name"] for c in r.get("configs", [])]
                if len(set(names)) != len(names):
                    raise InvalidRequestError(f"Duplicate config keys in the request for {name}: {names}")
                configs = await self.store.topic_config(name) if incremental else {}
                for c in r.get("configs", []):
                    op = c["config_operation"] if incremental else (ConfigOp.SET if c.get("value") is not None
                                                                     else ConfigOp.DELETE)
                    configs = self.apis._apply_config_op(configs, c["name"], op, c.get("value"))
                self.apis.admin.validate_topic_configs(configs)
                if not validate_only:
                    await self.store.set_topic_config(name, configs)
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            responses.append(res)
        return {"throttle_time_ms": 0, "responses": responses}

    async def alter_configs(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:
        return await self._alter_topics(h, body, session, False, self._alter_configs)

    async def incremental_alter_configs(self, h: RequestHeader, body: dict[str, Any], session: Session
                                        ) -> dict[str, Any]:
        return await self._alter_topics(h, body, session, True, self._incremental_alter_configs)

    # --- consumer groups: the coordinator of a group is the leader of its __consumer_offsets partition ---

    async def _offsets_partitions(self) -> int | None:
        """The partition count of __consumer_offsets, creating the topic (as Kafka does on the first
        FindCoordinator) with offsets.topic.replication.factor; None while it has no leaders yet."""
        cached = self.cache.topics.get(OFFSETS_TOPIC)
        if cached is None:
            coord = self.apis.coordinator
            assert coord is not None
            configs = {k: str(v) for k, v in coord.offsets_topic_configs().items()}
            rf = self.config.get("offsets.topic.replication.factor")
            if self.single:  # a cluster of one holds one replica; Kafka's default of 3 would never be met
                rf = min(rf, 1)
            with contextlib.suppress(TopicAlreadyExistsError):
                await self._create(OFFSETS_TOPIC, self.config.get("offsets.topic.num.partitions"), rf, None, configs)
            # Kafka answers COORDINATOR_NOT_AVAILABLE at once; some clients (kafka-python's admin) fail on it
            # rather than retry, and a single broker always answered its first FindCoordinator with itself
            if not await self._wait_for(lambda: OFFSETS_TOPIC in self.cache.topics, OFFSETS_TOPIC_WAIT_MS):
                return None
            cached = self.cache.topics[OFFSETS_TOPIC]
        n = len(cached.partitions)
        assert self.apis.coordinator is not None
        self.apis.coordinator.topic.num_partitions = n  # the cluster's count decides where each group lives
        return n

    async def find_coordinator(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:
        if body.get("key_type", 0) != 0:
            return await KafkaApis.find_coordinator(self.apis, h, body, session)
        keys = body.get("coordinator_keys", []) if h.api_version >= 4 else [body.get("key", "")]
        try:
            n = await self._offsets_partitions()
            why = None if n is not None else f"{OFFSETS_TOPIC} is being created"
        except KafkaliteError as exc:
            n, why = None, f"{OFFSETS_TOPIC} cannot be created: {exc}"
            log.warning("FindCoordinator: %s", why)
        out = []
        for key in keys:
            leader = self.cache.leader(OFFSETS_TOPIC, coordinator_key_partition(key, n)) if n else -1
            b = self.cache.brokers.get(leader)
            addr = b.address(session.listener) if b is not None else None
            if b is None or addr is None:
                out.append({"key": key, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "",
                            "port": -1, "error_message": why or "the group's coordinator partition has no leader"})
            else:
                out.append({"key": key, "error_code": ErrorCode.NONE, "node_id": b.broker_id, "host": addr[0],
                            "port": addr[1], "error_message": None})
        if h.api_version >= 4:
            return {"throttle_time_ms": 0, "coordinators": out}
        return {"throttle_time_ms": 0, **out[0]}

    async def group_request(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any] | None:
        """Group requests are served by the leader of the group's __consumer_offsets partition; elsewhere
        NOT_COORDINATOR sends the client back to FindCoordinator, as Kafka's brokers do."""
        if h.api_key != ApiKey.LIST_GROUPS:
            cached = self.cache.topics.get(OFFSETS_TOPIC)
            n = len(cached.partitions) if cached is not None else 0
            for gid in request_groups(h.api_key, body):
                if not n or self.cache.leader(OFFSETS_TOPIC, coordinator_key_partition(gid, n)) != self.node_id:
                    return error_response(h.api_key, h.api_version, body, ErrorCode.NOT_COORDINATOR)
            if n and self.apis.coordinator is not None:
                self.apis.coordinator.topic.num_partitions = n
        return await self._group(h, body, session)

    # --- producer ids --------------------------------------------------------------------------------

    async def init_producer_id(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:
        if body.get("transactional_id") is not None:
            return await KafkaApis.init_producer_id(self.apis, h, body, session)
        async with self._pid_lock:
            if self._pid_block is None or self._next_pid > self._pid_block.end:
                self._pid_block = await self.store.next_producer_id_block(self.node_id)
                self._next_pid = self._pid_block.start
            pid = self._next_pid
            self._next_pid += 1
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": pid, "producer_epoch": 0}

    # --- routing: requests for partitions led elsewhere ------------------------------------------------

    def _not_here(self, topic: str, p: int) -> int | None:
        """None for a partition this broker holds (its Partition decides: leader, follower, epochs); for
        one it does not, NOT_LEADER_OR_FOLLOWER if the cluster has it (as Kafka's getPartitionOrError),
        else UNKNOWN_TOPIC_OR_PARTITION."""
        if (topic, p) in self.replicas.partitions:
            return None
        if self.cache.partition(topic, p) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    async def produce(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any] | None:
        refused: dict[str, list[dict[str, Any]]] = {}
        kept = []
        for t in body.get("topic_data", []):
            mine = []
            for pd in t.get("partition_data", []):
                code = self._not_here(t["name"], pd["index"])
                if code is None:
                    mine.append(pd)
                else:
                    refused.setdefault(t["name"], []).append({"index": pd["index"], "error_code": code,
                                                              "base_offset": -1})
            if mine:
                kept.append({**t, "partition_data": mine})
        if not refused:
            return await self._produce(h, body, session)
        if body.get("acks", -1) == 0:
            raise CloseConnection("an acks=0 produce request was sent to a broker that does not lead its partition")
        out: dict[str, Any] | None = await self._produce(h, {**body, "topic_data": kept}, session) if kept else \
            {"responses": [], "throttle_time_ms": 0}
        assert out is not None
        by_name = {r["name"]: r for r in out["responses"]}
        for name, entries in refused.items():
            if name in by_name:
                by_name[name]["partition_responses"] += entries
            else:
                out["responses"].append({"name": name, "partition_responses": entries})
        return out

    async def fetch(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any] | None:
        if body.get("replica_id", -1) >= 0:
            return await self._fetch(h, body, session)
        refused: dict[str, list[dict[str, Any]]] = {}
        kept = []
        for t in body.get("topics", []):
            mine = []
            for p in t.get("partitions", []):
                code = self._not_here(t["topic"], p["partition"])
                if code is None:
                    mine.append(p)
                else:
                    refused.setdefault(t["topic"], []).append({
                        "partition_index": p["partition"], "error_code": code, "high_watermark": -1,
                        "last_stable_offset": -1, "log_start_offset": -1, "preferred_read_replica": -1,
                        "records": b""})
            if mine:
                kept.append({**t, "partitions": mine})
        if not refused:
            return await self._fetch(h, body, session)
        out: dict[str, Any] | None = await self._fetch(h, {**body, "topics": kept, "max_wait_ms": 0}, session) \
            if kept else {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": []}
        assert out is not None
        by_name = {r["topic"]: r for r in out["responses"]}
        for name, entries in refused.items():
            if name in by_name:
                by_name[name]["partitions"] += entries
            else:
                out["responses"].append({"topic": name, "partitions": entries})
        return out

    async def list_offsets(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any] | None:
        if body.get("replica_id", -1) >= 0:
            return await self._list_offsets(h, body, session)
        refused: dict[str, list[dict[str, Any]]] = {}
        kept = []
        for t in body.get("topics", []):
            mine = []
            for p in t.get("partitions", []):
                code = self._not_here(t["name"], p["partition_index"])
                if code is None:
                    mine.append(p)
                else:
                    refused.setdefault(t["name"], []).append({"partition_index": p["partition_index"],
                                                              "error_code": code, "timestamp": -1, "offset": -1,
                                                              "leader_epoch": -1})
            if mine:
                kept.append({**t, "partitions": mine})
        if not refused:
            return await self._list_offsets(h, body, session)
        out: dict[str, Any] | None = await self._list_offsets(h, {**body, "topics": kept}, session) if kept else \
            {"throttle_time_ms": 0, "topics": []}
        assert out is not None
        by_name = {r["name"]: r for r in out["topics"]}
        for name, entries in refused.items():
            if name in by_name:
                by_name[name]["partitions"] += entries
            else:
                out["topics"].append({"name": name, "partitions": entries})
        return out


def _too_many(total: int) -> PolicyViolationError:
    return PolicyViolationError(f"Excessively large number of partitions per request: {total} new partitions "
                                f"requested, at most {MAX_PARTITIONS_PER_REQUEST} may be created by one request "
                                "(Kafka's limit); split it into several requests")
