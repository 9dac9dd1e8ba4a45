"""A broker's membership of its cluster: registration in the cluster store, the lost and restored session, its
Controller (active only where elected) and controlled shutdown (Kafka's KafkaServer start-up and
controlledShutdown in ZooKeeper mode).

At start-up (after the listeners are up, so the controller can reach this broker) the broker loads the ACLs,
checks that its data dirs belong to the store's cluster, follows config changes, loads SCRAM credentials,
connects to its own inter-broker listener as other brokers will (refusing to start when only configuration can
fix what fails), registers (its broker epoch is the registration's creation id) and starts its Controller. After a lost
ZooKeeper session it registers again (a new broker epoch) and re-runs the election. A single broker is a
cluster of one over cluster/local_store.py and runs the same code, waiting at start-up for its own
controller's first LeaderAndIsr so the first client finds every partition led.

What the controller then sends is applied by ReplicaManager (become_leader_or_follower, stop_replicas,
update_metadata); the client APIs are answered by the areas broker/apis.py lists.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kafkalite.broker.acl_apis import AclApis
from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.config_changes import ConfigChangeListener
from kafkalite.broker.metadata_apis import cluster_id
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.broker.scram_admin import ScramAdmin
from kafkalite.cluster import znodes as z
from kafkalite.cluster.channel import request_once
from kafkalite.cluster.controller import Controller, ControllerSettings
from kafkalite.cluster.controller_events import Marker
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.cluster.store import ClusterStore
from kafkalite.errors import KafkaliteError, SaslAuthenticationError
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.security.connect_failures import operator_fix
from kafkalite.security.transport import ClientSecurity, open_connection

log = logging.getLogger("kafkalite.broker.cluster")
PROBE_TIMEOUT_S = 15.0  # the start-up connection to this broker's own inter-broker listener


def _operations_settings(config: BrokerConfig) -> dict[str, Any]:
    return {"auto_leader_rebalance": config.get("auto.leader.rebalance.enable"),
            "imbalance_check_interval_s": float(config.get("leader.imbalance.check.interval.seconds")),
            "imbalance_percentage": config.get("leader.imbalance.per.broker.percentage")}


class ClusterNode:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, store: ClusterStore, cache: MetadataCache,
                 *, acls: AclApis, scram: ScramAdmin, config_changes: ConfigChangeListener) -> None:
        """`store`: ZooKeeper (zookeeper.connect set) or, for a single broker, cluster/local_store.py."""
        self.config = config
        self.replicas = replicas
        self.node_id = config.node_id
        self.store = store
        self.cache = cache
        self.acls = acls
        self.scram = scram
        self.config_changes = config_changes
        self.single = not config.get("zookeeper.connect")
        # Other brokers are reached on the inter-broker listener; clients are told the endpoints of the
        # listener their request arrived on (session.listener), as Kafka does.
        self.listener = config.inter_broker_listener().name
        self.security = ClientSecurity.for_inter_broker(config)
        self.registration = z.BrokerRegistration(
            self.node_id, tuple(z.Endpoint(li.name, li.host, li.port, config.security_protocol(li.name))
                                for li in config.advertised()),
            config.get("broker.rack") or None)
        control = config.control_plane_listener().name  # KIP-291: the controller's requests apart from replication
        self.controller = Controller(self.store, self.node_id,
                                     ControllerSettings(config.get("unclean.leader.election.enable"),
                                                        self.listener, control_listener=control,
                                                        security=ClientSecurity.for_inter_broker(config, control),
                                                        **_operations_settings(config)),
                                     topic_unclean=self._topic_unclean, initial_epoch=self._initial_epoch)
        self.broker_epoch = -1
        self._reregistering: asyncio.Task[None] | None = None

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.store.close()  # a half-made start (e.g. a broker id in use) leaves no session behind
            raise

    async def _start(self) -> None:
        # Roles come from the controller's LeaderAndIsr, not from holding a log.
        self.replicas.partitions.clear()
        await self.store.start()
        await self.acls.start()  # before any request is authorized (other controllers' requests come early)
        local = cluster_id(self.config, self.replicas.logs)
        stored = await self.store.get_or_create_cluster_id(local)
        if stored != local:
            raise KafkaliteError(f"The cluster id {stored} in ZooKeeper ({self.store.connect}/cluster/id) does "
                                 f"not match the cluster id {local} of this broker's data directories "
                                 "(meta.properties): this broker belongs to another cluster")
        if self.single:
            await self._register_local_topics()
        await self.config_changes.start()
        await self.scram.load()  # before the probe: a SCRAM login to this broker waits for the credentials
        await self._probe_own_listeners()
        self.broker_epoch = await self.store.register_broker(self.registration)
        log.info("Registered broker %d in %s with broker epoch %d", self.node_id, self.store.connect,
                 self.broker_epoch)
        self.store.on_session_lost = self._session_lost
        self.store.on_session_restored = self._session_restored
        self.controller.start()
        self.replicas.start_isr_expiration()  # the leader side of replication: ISR shrinks
        if self.single:
            await self._wait_for_own_controller()

    async def _probe_own_listeners(self) -> None:
        """Connect to this broker's own inter-broker (and control-plane) listener as the controller and the other
        brokers will, before registering: a certificate its truststore does not trust, a certificate that does not
        name the advertised host, a SASL login it refuses would otherwise leave the broker registered and
        unreachable, its clients waiting without a word. Those refuse the start, in one line naming the fix;
        anything retrying may cure (a timeout) is logged and the start goes on."""
        listeners = {self.listener, self.config.control_plane_listener().name}
        for name in sorted(listeners):
            security = ClientSecurity.for_inter_broker(self.config, name)
            endpoint = next((e for e in self.registration.endpoints if e.listener == name), None)
            if security.protocol == "PLAINTEXT" or endpoint is None:
                continue
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    _reader, writer = await open_connection(endpoint.host, endpoint.port, security)
                writer.close()
            except (OSError, TimeoutError, SaslAuthenticationError) as exc:
                fix = operator_fix(exc, "the broker", endpoint.host)
                where = (f"broker {self.node_id} cannot reach itself over {security.protocol} at "
                         f"{endpoint.host}:{endpoint.port} (listener {name})")
                if fix is not None:
                    raise KafkaliteError(f"{where}: {fix}") from None
                log.warning("%s: %s; starting anyway", where, exc or type(exc).__name__)

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
        await self.replicas.stop_replication()
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
        self.replicas.shutting_down = True
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
