"""ClusterStore over ZooKeeper 3.8 through kazoo, with Kafka's ZooKeeper-mode paths and JSON (znodes.py).

kazoo is thread-based: its calls block and its watches fire on its own thread. Every blocking call here
runs in a worker thread (`asyncio.to_thread`), and every watch or session event is handed to the event
loop with `call_soon_threadsafe`, so the loop never waits on ZooKeeper and callbacks run where the rest of
the broker runs. Controller writes are ZooKeeper multi-ops opening with a version check of
`/controller_epoch` (Kafka's wrapRequestWithControllerEpochCheck): a controller that has been replaced
gets BADVERSION, the write is not applied, and NotControllerError tells it to resign.

kazoo reconnects with a new session after one is lost, silently dropping this client's ephemeral nodes;
`on_session_lost` / `on_session_restored` let the broker re-register and re-run the election as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError

from kafkalite.cluster import znodes as z
from kafkalite.cluster.store import ChildrenCallback, ClusterStore, ControllerLease, DataCallback
from kafkalite.cluster.znodes import BrokerRegistration, PartitionState, ProducerIdBlock, TopicAssignment
from kafkalite.errors import KafkaliteError, NotControllerError, TopicAlreadyExistsError
from kafkalite.security.acl import AclEntry, PatternType, ResourcePattern, ResourceType

REGISTRATION_POLL_S = 0.2  # how often a restarted broker looks whether its old registration expired
REGISTRATION_MARGIN_S = 5.0
log = logging.getLogger("kafkalite.cluster.zk")

# reads sent to ZooKeeper before the first answer is awaited (`partition_states`); a window, not all at once, keeps
# the client's queue and the server's outstanding requests bounded (ZooKeeper's globalOutstandingLimit is 1,000)
STATE_READ_WINDOW = 500
# partitions named in one /isr_change_notification node (~40 bytes each: far below ZooKeeper's 1 MB znode limit)
ISR_CHANGES_PER_NODE = 1000


def split_connect(connect: str) -> tuple[str, str]:
    """`host:port,host:port/chroot` -> (hosts, chroot or "")."""
    slash = connect.find("/")
    if slash < 0:
        return connect, ""
    chroot = connect[slash:].rstrip("/")
    return connect[:slash], chroot


class ZkStore(ClusterStore):
    def __init__(self, connect: str, session_timeout_ms: int = 18000, connection_timeout_ms: int | None = None
                 ) -> None:
        self.connect = connect
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_s = session_timeout_ms / 1000
        self.connection_timeout_s = (connection_timeout_ms or session_timeout_ms) / 1000
        self.client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lost = threading.Event()
        self._closing = False
        self._inflight = 0  # blocking calls running on worker threads (close() lets them finish)
        self._inflight_lock = threading.Lock()

    # --- plumbing ---------------------------------------------------------------------------------

    @property
    def zk(self) -> KazooClient:
        assert self.client is not None, "ZkStore.start() first"
        return self.client

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed() and not self._closing:
            loop.call_soon_threadsafe(fn, *args)

    def _counted(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._inflight_lock:
            self._inflight += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with self._inflight_lock:
                self._inflight -= 1

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._closing:
            raise KafkaliteError(f"the connection to ZooKeeper {self.connect} is closing")
        try:
            return await asyncio.to_thread(self._counted, fn, *args, **kwargs)
        except (KazooTimeoutError, KazooException) as exc:
            if isinstance(exc, (NodeExistsError, NoNodeError, BadVersionError, NotEmptyError)):
                raise
            raise KafkaliteError(f"ZooKeeper {self.connect} (zookeeper.connect): {type(exc).__name__} {exc}"
                                 ) from exc

    def _state_listener(self, state: str) -> None:
        # kazoo's thread; must not block
        if self._closing:
            return
        if state == KazooState.LOST:
            self._lost.set()
            log.warning("ZooKeeper session lost: this broker's registration is gone until it re-registers")
            if self.on_session_lost is not None:
                self._on_loop(self.on_session_lost)
        elif state == KazooState.CONNECTED and self._lost.is_set():
            self._lost.clear()
            log.info("ZooKeeper reconnected with a new session")
            if self.on_session_restored is not None:
                self._on_loop(self.on_session_restored)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        client = await self._connect()
        client.add_listener(self._state_listener)
        self.client = client
        await self._run(self._ensure_paths)

    async def _connect(self) -> Any:
        """A started client (kazoo's here; local_store.LocalStore gives its in-process one)."""
        if self.chroot:
            await self._run(self._make_chroot)
        client = KazooClient(hosts=self.hosts + self.chroot, timeout=self.session_timeout_s)
        try:
            await asyncio.to_thread(client.start, self.connection_timeout_s)
        except (KazooTimeoutError, KazooException) as exc:
            await asyncio.to_thread(client.close)
            raise KafkaliteError(f"cannot connect to ZooKeeper at {self.connect} (zookeeper.connect) within "
                                 f"{self.connection_timeout_s:g} s (zookeeper.connection.timeout.ms): {exc}; is "
                                 "ZooKeeper running there?") from None
        return client

    def _make_chroot(self) -> None:
        c = KazooClient(hosts=self.hosts, timeout=self.session_timeout_s)
        try:
            c.start(self.connection_timeout_s)
        except KazooTimeoutError:
            raise KafkaliteError(f"cannot connect to ZooKeeper at {self.hosts} (zookeeper.connect) within "
                                 f"{self.connection_timeout_s:g} s (zookeeper.connection.timeout.ms); is ZooKeeper "
                                 "running there?") from None
        try:
            c.ensure_path(self.chroot)
        finally:
            c.stop()
            c.close()

    def _ensure_paths(self) -> None:
        for p in z.PERSISTENT_PATHS:
            self.zk.ensure_path(p)

    async def close(self) -> None:
        """Let calls already on worker threads finish (a kazoo call cut off by stop() would never return and
        hold up the interpreter's exit), then end the session."""
        self._closing = True
        deadline = asyncio.get_running_loop().time() + self.session_timeout_s
        while self._inflight and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        client, self.client = self.client, None
        if client is not None:
            def stop() -> None:
                client.stop()
                client.close()
            # a daemon thread, not the loop's executor: if ZooKeeper never answers, exit is not held up
            done = asyncio.get_running_loop().create_future()

            def finished() -> None:
                if not done.done():
                    done.set_result(None)

            def run() -> None:
                try:
                    stop()
                finally:
                    loop.call_soon_threadsafe(finished)
            loop = asyncio.get_running_loop()
            threading.Thread(target=run, name="zookeeper-close", daemon=True).start()
            try:
                async with asyncio.timeout(self.session_timeout_s):
                    await done
            except TimeoutError:
                log.warning("Closing the ZooKeeper session took longer than %g s; going on", self.session_timeout_s)

    # --- cluster and brokers ---------------------------------------------------------------------

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        def run() -> str:
            try:
                self.zk.create(z.CLUSTER_ID, z.encode_cluster_id(proposed), makepath=True)
                return proposed
            except NodeExistsError:
                data, _ = self.zk.get(z.CLUSTER_ID)
                return z.decode_cluster_id(data)
        return await self._run(run)

    async def register_broker(self, registration: BrokerRegistration) -> int:
        """Register as an ephemeral znode; its creation id is the broker epoch. A registration left by this broker's
        own previous session (the same endpoints: it was killed, e.g. kill -9, and restarted before ZooKeeper
        expired that session) is waited out, at most the session timeout and a margin, rather than refused as
        Kafka refuses it; one held by another live process is refused at once."""
        path = z.broker_path(registration.broker_id)

        def run() -> int | tuple[bytes, int]:
            try:
                _, stat = self.zk.create(path, registration.encode(), ephemeral=True, include_data=True)
                return int(stat.czxid)
            except NodeExistsError:
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:  # expired meanwhile: try again
                    return b"", 0
                if stat.ephemeralOwner == self.zk.client_id[0]:  # ours already (a retried create)
                    return int(stat.czxid)
                return data, int(stat.ephemeralOwner)

        deadline = asyncio.get_running_loop().time() + self.session_timeout_s * 1.5 + REGISTRATION_MARGIN_S
        waited = False
        while True:
            got = await self._run(run)
            if isinstance(got, int):
                if waited:
                    log.info("Broker %d registered: the previous session's registration expired",
                             registration.broker_id)
                return got
            data, owner = got
            if not data:
                continue
            mine = self._same_endpoints(registration, data)
            if not mine or asyncio.get_running_loop().time() > deadline:
                held = "still held" if waited else "held"
                raise KafkaliteError(
                    f"broker.id {registration.broker_id} is already registered ({self.connect}{path}, {held} by "
                    f"ZooKeeper session 0x{owner:x}) by a running broker"
                    + (" with other endpoints" if not mine else "") + "; give each broker its own broker.id")
            if not waited:
                log.warning("broker.id %d is still registered by this broker's previous ZooKeeper session 0x%x (it "
                            "stopped without closing it, e.g. kill -9): waiting up to %.0f s "
                            "(zookeeper.session.timeout.ms and a margin) for ZooKeeper to expire it",
                            registration.broker_id, owner, deadline - asyncio.get_running_loop().time())
                waited = True
            await asyncio.sleep(REGISTRATION_POLL_S)

    @staticmethod
    def _same_endpoints(registration: BrokerRegistration, data: bytes) -> bool:
        try:
            held = BrokerRegistration.decode(registration.broker_id, data)
        except KafkaliteError:
            return False
        return set(held.endpoints) == set(registration.endpoints)

    async def brokers(self) -> dict[int, BrokerRegistration]:
        def run() -> dict[int, BrokerRegistration]:
            out = {}
            for child in self.zk.get_children(z.BROKER_IDS):
                try:
                    data, stat = self.zk.get(f"{z.BROKER_IDS}/{child}")
                except NoNodeError:
                    continue
                bid = int(child)
                out[bid] = BrokerRegistration.decode(bid, data, int(stat.czxid))
            return out
        return await self._run(run)

    # --- controller --------------------------------------------------------------------------------

    async def controller_id(self) -> int | None:
        def run() -> int | None:
            try:
                data, _ = self.zk.get(z.CONTROLLER)
            except NoNodeError:
                return None
            return z.decode_controller(data)
        return await self._run(run)

    async def elect_controller(self, broker_id: int) -> ControllerLease | None:
        """Kafka's registerControllerAndIncrementControllerEpoch: one multi creates the ephemeral /controller
        and bumps /controller_epoch conditionally on its version; a lost race returns None."""
        def run() -> ControllerLease | None:
            try:
                data, _ = self.zk.get(z.CONTROLLER)
                if z.decode_controller(data) != broker_id:
                    return None
            except NoNodeError:
                pass
            try:
                data, stat = self.zk.get(z.CONTROLLER_EPOCH)
                epoch, version = z.decode_controller_epoch(data), stat.version
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.zk.create(z.CONTROLLER_EPOCH, z.encode_controller_epoch(0))
                data, stat = self.zk.get(z.CONTROLLER_EPOCH)
                epoch, version = z.decode_controller_epoch(data), stat.version
            t = self.zk.transaction()
            t.create(z.CONTROLLER, z.encode_controller(broker_id), ephemeral=True)
            t.set_data(z.CONTROLLER_EPOCH, z.encode_controller_epoch(epoch + 1), version=version)
            results = t.commit()
            if not any(isinstance(r, Exception) for r in results):
                return ControllerLease(broker_id, epoch + 1, version + 1)
            # Lost the race, or a lost response: I won if /controller names me and the epoch is mine.
            try:
                cdata, cstat = self.zk.get(z.CONTROLLER)
                edata, estat = self.zk.get(z.CONTROLLER_EPOCH)
            except NoNodeError:
                return None
            if z.decode_controller(cdata) == broker_id and cstat.ephemeralOwner == self.zk.client_id[0] and \
                    z.decode_controller_epoch(edata) == epoch + 1:
                return ControllerLease(broker_id, epoch + 1, estat.version)
            return None
        return await self._run(run)

    def _fenced(self, lease: ControllerLease, ops: Callable[[Any], None]) -> list[Any]:
        """Run `ops(transaction)` after a check of /controller_epoch's version; NotControllerError if fenced."""
        t = self.zk.transaction()
        t.check(z.CONTROLLER_EPOCH, lease.epoch_version)
        ops(t)
        results = t.commit()
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise NotControllerError(f"broker {lease.broker_id} is no longer the controller (epoch {lease.epoch} "
                                     "was superseded): its write was not applied")
        failed = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)),
                      None)
        if failed is not None:
            raise failed
        return results[1:]

    # --- topics ------------------------------------------------------------------------------------

    async def topics(self) -> list[str]:
        return await self._run(self.zk.get_children, z.BROKER_TOPICS)

    async def topic_assignment(self, topic: str) -> TopicAssignment | None:
        def run() -> TopicAssignment | None:
            try:
                data, _ = self.zk.get(z.topic_path(topic))
            except NoNodeError:
                return None
            return TopicAssignment.decode(topic, data)
        return await self._run(run)

    async def create_topic(self, assignment: TopicAssignment, configs: Mapping[str, str]) -> None:
        topic = assignment.topic

        def run() -> None:
            if self.zk.exists(z.topic_path(topic)):
                raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.")
            # Kafka's AdminZkClient: the config is written (or overwritten) first, then the assignment.
            path = z.topic_config_path(topic)
            try:
                self.zk.create(path, z.encode_topic_config(configs))
            except NodeExistsError:
                self.zk.set(path, z.encode_topic_config(configs))
            try:
                self.zk.create(z.topic_path(topic), assignment.encode())
            except NodeExistsError:
                raise TopicAlreadyExistsError(f"Topic '{topic}' already exists.") from None
        await self._run(run)

    async def add_partitions(self, assignment: TopicAssignment, expected_partitions: int) -> None:
        def run() -> None:
            data, stat = self.zk.get(z.topic_path(assignment.topic))
            current = TopicAssignment.decode(assignment.topic, data)
            if len(current.partitions) != expected_partitions:
                raise BadVersionError()
            # only the new partitions are taken from `assignment`: the rest (a reassignment's replica sets
            # included) stays as the store has it, the version check making read and write one step
            added = {p: r for p, r in assignment.partitions.items() if p not in current.partitions}
            merged = replace(current, partitions={**current.partitions, **added})
            self.zk.set(z.topic_path(assignment.topic), merged.encode(), version=stat.version)
        await self._run(run)

    async def update_topic_assignment(self, lease: ControllerLease, topic: str,
                                      change: Callable[[TopicAssignment], TopicAssignment]) -> TopicAssignment | None:
        path = z.topic_path(topic)

        def run() -> TopicAssignment | None:
            while True:
                try:
                    data, stat = self.zk.get(path)
                except NoNodeError:
                    return None
                new = change(TopicAssignment.decode(topic, data))
                try:
                    self._fenced_set(lease, path, new.encode(), stat.version)
                except BadVersionError:
                    continue  # written since the read (a CreatePartitions): change what is there now
                except NoNodeError:
                    return None  # deleted since the read
                return new
        return await self._run(run)

    def _fenced_set(self, lease: ControllerLease, path: str, data: bytes, version: int) -> None:
        """Set `path` if it is still at `version` (BadVersionError otherwise), fenced by the lease."""
        self._fenced(lease, lambda t: t.set_data(path, data, version=version))

    async def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        path = z.partition_state_path(topic, partition)

        def run() -> PartitionState | None:
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return None
            return PartitionState.decode(path, data, stat.version)
        return await self._run(run)

    async def partition_states(self, topic: str, partitions: Iterable[int]) -> dict[int, PartitionState | None]:
        """One worker-thread call whose reads are pipelined (kazoo's `get_async`: STATE_READ_WINDOW requests out
        before the first answer is awaited), as Kafka's controller reads states at failover: one `partition_state`
        each made a failover over a 10,000-partition topic 10,000 sequential ZooKeeper round trips."""
        paths = {p: z.partition_state_path(topic, p) for p in partitions}

        def run() -> dict[int, PartitionState | None]:
            out: dict[int, PartitionState | None] = {}
            todo = list(paths.items())
            for i in range(0, len(todo), STATE_READ_WINDOW):
                window = [(p, path, self.zk.get_async(path)) for p, path in todo[i:i + STATE_READ_WINDOW]]
                for p, path, pending in window:
                    try:
                        data, stat = pending.get()
                    except NoNodeError:
                        out[p] = None
                        continue
                    out[p] = PartitionState.decode(path, data, stat.version)
            return out
        return await self._run(run)

    async def create_partition_states(self, lease: ControllerLease,
                                      states: Mapping[tuple[str, int], PartitionState]
                                      ) -> dict[tuple[str, int], PartitionState]:
        def run() -> dict[tuple[str, int], PartitionState]:
            for topic, p in states:
                self.zk.ensure_path(z.partition_path(topic, p))
            out = {}
            items = list(states.items())
            for i in range(0, len(items), 500):  # keep each multi well under ZooKeeper's 1 MB packet
                chunk = items[i:i + 500]

                def ops(t: Any, chunk: list[tuple[tuple[str, int], PartitionState]] = chunk) -> None:
                    for (topic, p), s in chunk:
                        t.create(z.partition_state_path(topic, p), s.encode())
                self._fenced(lease, ops)
                for key, s in chunk:
                    out[key] = PartitionState(s.leader, s.leader_epoch, s.isr, s.controller_epoch, 0)
            return out
        return await self._run(run)

    async def update_partition_state(self, lease: ControllerLease, topic: str, partition: int,
                                     state: PartitionState) -> PartitionState | None:
        path = z.partition_state_path(topic, partition)

        def run() -> PartitionState | None:
            try:
                results = self._fenced(lease, lambda t: t.set_data(path, state.encode(), version=state.zk_version))
            except BadVersionError:
                return None
            stat = results[0]
            return PartitionState(state.leader, state.leader_epoch, state.isr, state.controller_epoch,
                                  int(stat.version))
        return await self._run(run)

    async def update_isr(self, topic: str, partition: int, new_state: PartitionState,
                         expected_zk_version: int) -> PartitionState | None:
        path = z.partition_state_path(topic, partition)

        def run() -> PartitionState | None:
            try:
                stat = self.zk.set(path, new_state.encode(), version=expected_zk_version)
            except (BadVersionError, NoNodeError):
                return None
            return PartitionState(new_state.leader, new_state.leader_epoch, new_state.isr,
                                  new_state.controller_epoch, int(stat.version))
        return await self._run(run)

    async def announce_isr_changes(self, partitions: Sequence[tuple[str, int]]) -> None:
        def run() -> None:
            for i in range(0, len(partitions), ISR_CHANGES_PER_NODE):
                self.zk.create(f"{z.ISR_CHANGE}/{z.ISR_CHANGE_PREFIX}",
                               z.encode_isr_change(partitions[i:i + ISR_CHANGES_PER_NODE]), sequence=True,
                               makepath=True)
        await self._run(run)

    async def delete_isr_change_notifications(self, lease: ControllerLease, names: list[str]) -> None:
        def run() -> None:
            for i in range(0, len(names), 500):
                chunk = [n for n in names[i:i + 500] if self.zk.exists(f"{z.ISR_CHANGE}/{n}")]
                if chunk:
                    def ops(t: Any, chunk: list[str] = chunk) -> None:
                        for n in chunk:
                            t.delete(f"{z.ISR_CHANGE}/{n}")
                    with contextlib.suppress(NoNodeError):
                        self._fenced(lease, ops)
        await self._run(run)

    async def request_topic_deletion(self, topic: str) -> None:
        def run() -> None:
            with contextlib.suppress(NodeExistsError):
                self.zk.create(z.delete_topic_path(topic))
        await self._run(run)

    async def topics_to_delete(self) -> list[str]:
        return await self._run(self.zk.get_children, z.DELETE_TOPICS)

    async def delete_topic(self, lease: ControllerLease, topic: str) -> None:
        def run() -> None:
            paths: list[str] = []
            parts = z.partitions_path(topic)
            if self.zk.exists(parts):
                for p in self.zk.get_children(parts):
                    base = f"{parts}/{p}"
                    paths += [f"{base}/{c}" for c in self.zk.get_children(base)] + [base]
                paths.append(parts)
            for path in (z.topic_path(topic), z.topic_config_path(topic), z.delete_topic_path(topic)):
                if self.zk.exists(path):
                    paths.append(path)

            def ops(t: Any) -> None:
                for path in paths:
                    t.delete(path)
            self._fenced(lease, ops)
        await self._run(run)

    # --- configs -----------------------------------------------------------------------------------

    async def topic_config(self, topic: str) -> dict[str, str]:
        def run() -> dict[str, str]:
            try:
                data, _ = self.zk.get(z.topic_config_path(topic))
            except NoNodeError:
                return {}
            return z.decode_topic_config(topic, data)
        return await self._run(run)

    async def set_topic_config(self, topic: str, configs: Mapping[str, str]) -> None:
        def run() -> None:
            path = z.topic_config_path(topic)
            try:
                self.zk.set(path, z.encode_topic_config(configs))
            except NoNodeError:
                self.zk.create(path, z.encode_topic_config(configs), makepath=True)
            self.zk.create(f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}", z.encode_config_change(topic),
                           sequence=True)
        await self._run(run)

    # --- ACLs ----------------------------------------------------------------------------------------

    async def all_acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        def run() -> dict[ResourcePattern, frozenset[AclEntry]]:
            out: dict[ResourcePattern, frozenset[AclEntry]] = {}
            for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
                for rtype in ResourceType:
                    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
                        continue
                    parent = z.acl_type_path(pattern_type, rtype)
                    try:
                        names = self.zk.get_children(parent)
                    except NoNodeError:
                        continue
                    for name in names:
                        pattern = ResourcePattern(rtype, name, pattern_type)
                        try:
                            data, _ = self.zk.get(f"{parent}/{name}")
                        except NoNodeError:
                            continue
                        entries = z.decode_acls(f"{parent}/{name}", data)
                        if entries:
                            out[pattern] = entries
            return out
        return await self._run(run)

    async def resource_acls(self, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int]:
        def run() -> tuple[frozenset[AclEntry], int]:
            path = z.acl_path(pattern)
            try:
                data, stat = self.zk.get(path)
            except NoNodeError:
                return frozenset(), -1
            return z.decode_acls(path, data), stat.version
        return await self._run(run)

    async def set_resource_acls(self, pattern: ResourcePattern, entries: frozenset[AclEntry],
                                expected_version: int) -> bool:
        def run() -> bool:
            path = z.acl_path(pattern)
            try:
                if expected_version < 0:
                    if not entries:
                        return True
                    self.zk.create(path, z.encode_acls(sorted(entries)), makepath=True)
                elif entries:
                    self.zk.set(path, z.encode_acls(sorted(entries)), version=expected_version)
                else:
                    self.zk.delete(path, version=expected_version)
            except (NodeExistsError, NoNodeError, BadVersionError):
                return False
            self.zk.create(f"{z.acl_change_dir(pattern.pattern_type)}/{z.ACL_CHANGE_PREFIX}",
                           z.encode_acl_change(pattern), sequence=True, makepath=True)
            return True
        return bool(await self._run(run))

    async def purge_acl_changes(self, path: str, older_than_ms: int) -> int:
        def run() -> int:
            cutoff = time.time() * 1000 - older_than_ms
            purged = 0
            for child in self.zk.get_children(path):
                node = f"{path}/{child}"
                stat = self.zk.exists(node)
                if stat is not None and stat.ctime < cutoff:
                    with contextlib.suppress(NoNodeError):
                        self.zk.delete(node)
                        purged += 1
            return purged
        return int(await self._run(run))

    async def users(self) -> list[str]:
        def run() -> list[str]:
            try:
                return sorted(self.zk.get_children(z.CONFIG_USERS))
            except NoNodeError:
                return []
        return await self._run(run)

    async def user_config(self, user: str) -> dict[str, str]:
        def run() -> dict[str, str]:
            try:
                data, _ = self.zk.get(z.user_config_path(user))
            except NoNodeError:
                return {}
            return z.decode_user_config(user, data) if data else {}
        return await self._run(run)

    async def set_user_config(self, user: str, configs: Mapping[str, str]) -> None:
        def run() -> None:
            path = z.user_config_path(user)
            try:
                self.zk.set(path, z.encode_topic_config(configs))
            except NoNodeError:
                self.zk.create(path, z.encode_topic_config(configs), makepath=True)
            self.zk.create(f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}", z.encode_config_change(user, "users"),
                           sequence=True)
        await self._run(run)

    # --- producer ids ------------------------------------------------------------------------------

    async def next_producer_id_block(self, broker_id: int) -> ProducerIdBlock:
        def run() -> ProducerIdBlock:
            while True:
                data, stat = self.zk.get(z.LATEST_PRODUCER_ID_BLOCK)
                block = (ProducerIdBlock.decode(data).next(broker_id) if data
                         else z.first_producer_id_block(broker_id))
                try:
                    self.zk.set(z.LATEST_PRODUCER_ID_BLOCK, block.encode(), version=stat.version)
                    return block
                except BadVersionError:
                    continue  # another broker took a block meanwhile: take the next one
        return await self._run(run)

    # --- watches -----------------------------------------------------------------------------------

    def watch_children(self, path: str, callback: ChildrenCallback) -> None:
        self.zk.ensure_path(path)  # a quick synchronous call, made once when a watch is set up

        def fire(children: list[str] | None) -> bool:
            if self._closing:
                return False
            self._on_loop(callback, list(children or []))
            return True
        self.zk.ChildrenWatch(path, fire)

    def watch_data(self, path: str, callback: DataCallback) -> None:
        def fire(data: bytes | None, _stat: Any, *_event: Any) -> bool:
            if self._closing:
                return False
            self._on_loop(callback, data)
            return True
        self.zk.DataWatch(path, fire)

    async def read(self, path: str) -> bytes | None:
        def run() -> bytes | None:
            try:
                return self.zk.get(path)[0]
            except NoNodeError:
                return None
        return await self._run(run)

    async def create_sequential(self, prefix: str, data: bytes) -> str:
        return await self._run(self.zk.create, prefix, data, sequence=True, makepath=True)
