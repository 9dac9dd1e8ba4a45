"""The controller (Kafka's KafkaController in ZooKeeper mode): one broker, elected through the store, decides
every partition's leader and ISR and tells the brokers with LeaderAndIsr, UpdateMetadata and StopReplica.

Every broker runs this object; only the elected one is active. All of its work runs on one asyncio task
that takes events from one queue (Kafka's ControllerEventManager): store watches only enqueue. Each write
the active controller makes is fenced by its lease (the controller epoch's version): if another broker has
been elected meanwhile, the write fails with NotControllerError and this broker resigns, so a paused
"zombie" controller cannot change anything once it wakes up.

Rules (reference §2): a new partition's leader is its first live replica in assignment order, its ISR the
live replicas, leader epoch 0; when a leader dies the new one is the first live ISR member in assignment
order (the first live replica when unclean.leader.election.enable allows it); dead replicas leave the ISR
except the last member, and every such change bumps the leader epoch. Brokers whose registration was
replaced by a newer one (a larger epoch) are handled as a failure followed by a start-up.

Topic deletion (Kafka's TopicDeletionManager, reference §1.3): a topic marked in /admin/delete_topics leaves the
controller's context for its `_deleting` table at once (no more elections or LeaderAndIsr; UpdateMetadata
tells every broker it is gone), every replica on a live broker gets StopReplica(delete), and only when each
replica has answered it without error are the topic's znodes and the marker removed. Replicas on dead brokers
keep the deletion waiting until their broker comes back and is sent its StopReplica(delete).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kafkalite.cluster import znodes as z
from kafkalite.cluster.channel import ControllerChannels
from kafkalite.cluster.store import ClusterStore, ControllerLease
from kafkalite.cluster.znodes import BrokerRegistration, PartitionState, TopicAssignment
from kafkalite.errors import NotControllerError
from kafkalite.protocol import ApiKey, ErrorCode

log = logging.getLogger("kafkalite.cluster.controller")

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
NO_LEADER = -1
LEADER_DURING_DELETE = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete: UpdateMetadata's "partition removed"
EPOCH_DURING_DELETE = -2


@dataclass(frozen=True)
class ControllerSettings:
    unclean_leader_election: bool = False
    listener: str = "PLAINTEXT"


TopicPartition = tuple[str, int]
Event = Callable[[], Awaitable[None]]


@dataclass
class _Deletion:
    """A topic being deleted: its assignment and the (broker, partition) replicas not yet deleted."""

    assignment: TopicAssignment
    pending: set[tuple[int, int]]


class Controller:
    def __init__(self, store: ClusterStore, broker_id: int, settings: ControllerSettings | None = None,
                 topic_unclean: Callable[[str], Awaitable[bool | None]] | None = None,
                 initial_epoch: Callable[[TopicPartition], int] | None = None) -> None:
        self.store = store
        # the leader epoch a partition's first state starts at: 0, or past what a replica's log already
        # recorded (a single broker's data dir from before it ran the controller; see _init_partitions)
        self._initial_epoch = initial_epoch
        self.broker_id = broker_id
        self.settings = settings or ControllerSettings()
        self._topic_unclean = topic_unclean
        self.lease: ControllerLease | None = None
        self.controller_id: int | None = None
        self.live: dict[int, BrokerRegistration] = {}
        self.assignments: dict[str, TopicAssignment] = {}
        self.states: dict[TopicPartition, PartitionState] = {}
        self.channels = ControllerChannels()
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._watching = False
        self._watched_topics: set[str] = set()
        self._deleting: dict[str, _Deletion] = {}
        self.elections = 0  # times this broker became controller (tests, logs)

    @property
    def active(self) -> bool:
        return self.lease is not None

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller-events")
        self.store.watch_data(z.CONTROLLER, lambda _data: self.enqueue(self._on_controller_change))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait([self._task], timeout=10)
            if not done:
                log.error("The controller's event task did not stop within 10 s; going on with the shutdown")
        await self._resign("the broker is stopping")

    def enqueue(self, event: Event) -> None:
        self._queue.put_nowait(event)

    def reelect(self) -> None:
        """After a lost session (the broker re-registered): resign and run the election again."""
        async def event() -> None:
            await self._resign("its ZooKeeper session was lost")
            await self._elect()
        self.enqueue(event)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await event()
            except NotControllerError as exc:
                await self._resign(str(exc))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Controller event %s failed", getattr(event, "__name__", event))

    # --- election ------------------------------------------------------------------------------------

    async def _on_controller_change(self) -> None:
        current = await self.store.controller_id()
        self.controller_id = current
        if self.active and current != self.broker_id:
            await self._resign(f"broker {current} is now the controller")
        if current is None:
            await self._elect()

    async def _elect(self) -> None:
        lease = await self.store.elect_controller(self.broker_id)
        if lease is None:
            self.controller_id = await self.store.controller_id()
            return
        self.lease = lease
        self.controller_id = self.broker_id
        self.elections += 1
        log.info("Broker %d is the controller (controller epoch %d)", self.broker_id, lease.epoch)
        try:
            await self._failover()
        except NotControllerError:
            raise
        except Exception:
            log.exception("Controller failover failed; resigning")
            await self._resign("its failover failed")
            raise

    async def _resign(self, why: str) -> None:
        if self.lease is None:
            return
        log.warning("Broker %d resigns as controller: %s", self.broker_id, why)
        self.lease = None
        self.live.clear()
        self.assignments.clear()
        self.states.clear()
        self._deleting.clear()
        await self.channels.close()

    def _require(self) -> ControllerLease:
        if self.lease is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
        return self.lease

    async def _failover(self) -> None:
        """Kafka's onControllerFailover: watches, context from the store, UpdateMetadata to all, then leaders
        for partitions that need them, LeaderAndIsr to every live replica, and pending deletions."""
        if not self._watching:
            self._watching = True
            self.store.watch_children(z.BROKER_IDS, lambda _c: self.enqueue(self._on_broker_change))
            self.store.watch_children(z.BROKER_TOPICS, lambda _c: self.enqueue(self._on_topic_change))
            self.store.watch_children(z.DELETE_TOPICS, lambda _c: self.enqueue(self._on_topic_deletion))
        self.live = await self.store.brokers()
        for reg in self.live.values():
            self._connect(reg)
        marked = set(await self.store.topics_to_delete())
        for topic in await self.store.topics():
            if topic not in marked:  # taken up by the deletion below, not elected for
                await self._load_topic(topic)
        self._update_metadata(self.live, self._all_partitions())
        await self._elect_offline(self._all_partitions(), fresh=True)
        self._leader_and_isr(self._all_partitions())
        self._update_metadata(self.live, self._all_partitions())
        await self._on_topic_deletion()

    # --- context ---------------------------------------------------------------------------------------

    def _connect(self, reg: BrokerRegistration) -> None:
        ep = next((e for e in reg.endpoints if e.listener == self.settings.listener), reg.endpoint())
        self.channels.add(reg.broker_id, ep.host, ep.port)

    async def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read a topic's assignment and states; returns partitions that have no state yet (new)."""
        assignment = await self.store.topic_assignment(topic)
        if assignment is None:
            return []
        if assignment.topic_id.int == 0:  # written without a topic id (an old tool): give it one
            assignment = replace(assignment, topic_id=uuid.uuid4())
            await self.store.set_topic_id(self._require(), assignment)
        self.assignments[topic] = assignment
        if topic not in self._watched_topics:
            self._watched_topics.add(topic)
            self.store.watch_data(z.topic_path(topic), self._partition_watch(topic))
        new = []
        for p in sorted(assignment.partitions):
            if (topic, p) in self.states:
                continue
            state = await self.store.partition_state(topic, p)
            if state is None:
                new.append((topic, p))
            else:
                self.states[(topic, p)] = state
        return new

    def _partition_watch(self, topic: str) -> Callable[[bytes | None], None]:
        def changed(_data: bytes | None) -> None:
            self.enqueue(lambda: self._on_partition_change(topic))
        return changed

    def _all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, a in sorted(self.assignments.items()) for p in sorted(a.partitions)]

    def _replicas(self, tp: TopicPartition) -> list[int]:
        a = self.assignments.get(tp[0])
        return list(a.partitions.get(tp[1], [])) if a else []

    # --- events -------------------------------------------------------------------------------------

    async def _on_broker_change(self) -> None:
        if not self.active:
            return
        current = await self.store.brokers()
        new = {b: r for b, r in current.items() if b not in self.live}
        dead = [b for b in self.live if b not in current]
        bounced = [b for b, r in current.items() if b in self.live and r.epoch > self.live[b].epoch]
        if not (new or dead or bounced):
            return
        log.info("Brokers changed: new %s, dead %s, bounced %s", sorted(new), sorted(dead), sorted(bounced))
        for b in dead + bounced:
            self.live.pop(b, None)
            await self.channels.remove(b)
        if dead or bounced:
            await self._on_broker_failure(set(dead) | set(bounced))
        for b in [*new, *bounced]:
            self.live[b] = current[b]
            self._connect(current[b])
        if new or bounced:
            await self._on_broker_startup(set(new) | set(bounced))

    async def _on_broker_failure(self, dead: set[int]) -> None:
        """Leaders on dead brokers are replaced; dead replicas leave the ISR (keeping the last member)."""
        changed: list[TopicPartition] = []
        for tp in self._all_partitions():
            state = self.states.get(tp)
            if state is None:
                continue
            if state.leader in dead or state.leader == NO_LEADER:
                if await self._elect_one(tp, state):
                    changed.append(tp)
            elif dead & set(state.isr) and len(state.isr) > 1:
                isr = tuple(b for b in state.isr if b not in dead) or state.isr[-1:]
                if await self._write(tp, replace(state, isr=isr, leader_epoch=state.leader_epoch + 1)):
                    changed.append(tp)
        self._leader_and_isr(changed)
        self._update_metadata(self.live, changed)

    async def _on_broker_startup(self, new: set[int]) -> None:
        others = {b: r for b, r in self.live.items() if b not in new}
        self._update_metadata(others, [])
        self._update_metadata({b: self.live[b] for b in new}, self._all_partitions())
        theirs = [tp for tp in self._all_partitions() if new & set(self._replicas(tp))]
        self._leader_and_isr(theirs, only=new)
        await self._elect_offline(self._all_partitions())
        for topic, d in list(self._deleting.items()):  # replicas that waited for their broker (§1.3)
            self._stop_replicas_for_deletion(topic, d, only=new)

    async def _on_topic_change(self) -> None:
        if not self.active:
            return
        topics = set(await self.store.topics())
        created = [t for t in sorted(topics) if t not in self.assignments and t not in self._deleting]
        new: list[TopicPartition] = []
        for t in created:
            new += await self._load_topic(t)
        if created:
            log.info("New topics %s", created)
        await self._init_partitions(new)

    async def _on_partition_change(self, topic: str) -> None:
        if not self.active or topic not in self.assignments:
            return
        assignment = await self.store.topic_assignment(topic)
        if assignment is None or assignment.partitions.keys() == self.assignments[topic].partitions.keys():
            return
        new = await self._load_topic(topic)
        log.info("Partitions added to %s: %s", topic, [p for _t, p in new])
        await self._init_partitions(new)

    async def _init_partitions(self, new: list[TopicPartition]) -> None:
        """Kafka's initializeLeaderAndIsrForPartitions: leader = first live replica, ISR = live replicas."""
        lease = self._require()
        states = {}
        for tp in new:
            live = [b for b in self._replicas(tp) if b in self.live]
            if not live:
                log.warning("Partition %s-%d has no live replica (replicas %s): it stays without a leader", *tp,
                            self._replicas(tp))
                continue
            epoch = self._initial_epoch(tp) if self._initial_epoch is not None else 0
            states[tp] = PartitionState(live[0], epoch, tuple(live), lease.epoch)
        if not states:
            return
        written = await self.store.create_partition_states(lease, states)
        self.states.update(written)
        self._leader_and_isr(list(written), is_new=True)
        self._update_metadata(self.live, list(written))

    async def _on_topic_deletion(self) -> None:
        """Start the deletion of newly marked topics; a marker of a topic that does not exist is removed."""
        if not self.active:
            return
        lease = self._require()
        for topic in await self.store.topics_to_delete():
            if topic in self._deleting:
                continue
            assignment = self.assignments.pop(topic, None) or await self.store.topic_assignment(topic)
            if assignment is None:
                await self.store.delete_topic(lease, topic)
                continue
            parts = [(topic, p) for p in sorted(assignment.partitions)]
            for tp in parts:
                self.states.pop(tp, None)
            d = _Deletion(assignment, {(b, p) for p, rs in assignment.partitions.items() for b in rs})
            self._deleting[topic] = d
            log.info("Deleting topic %s", topic)
            self._update_metadata(self.live, parts, deleted=True)
            self._stop_replicas_for_deletion(topic, d)
            await self._complete_deletion(topic)

    def _stop_replicas_for_deletion(self, topic: str, d: _Deletion, only: set[int] | None = None) -> None:
        """StopReplica(delete) to each live broker holding pending replicas (those in `only` if given)."""
        for b in sorted({b for b, _p in d.pending if b in self.live and (only is None or b in only)}):
            mine = sorted(p for pb, p in d.pending if pb == b)
            self._stop_replica(b, [(topic, p) for p in mine], delete=True, on_response=self._deletion_answer(topic))

    def _deletion_answer(self, topic: str) -> Callable[[int, dict[str, Any]], None]:
        def answered(broker_id: int, body: dict[str, Any]) -> None:
            self._check_response(broker_id, body)
            done = [] if body.get("error_code", 0) != ErrorCode.NONE else [
                e["partition_index"] for e in body.get("partition_errors", [])
                if e.get("topic_name") == topic and e.get("error_code", 0) == ErrorCode.NONE]
            failed = [e for e in body.get("partition_errors", []) if e.get("error_code", 0) != ErrorCode.NONE]
            if failed:
                log.warning("Broker %d could not delete replicas of %s: %s (retried when it restarts)", broker_id,
                            topic, failed)

            async def event() -> None:
                d = self._deleting.get(topic)
                if d is None or not self.active:
                    return
                d.pending -= {(broker_id, p) for p in done}
                await self._complete_deletion(topic)
            self.enqueue(event)
        return answered

    async def _complete_deletion(self, topic: str) -> None:
        """Remove the topic's znodes and marker once every replica is deleted (Kafka's completeDeleteTopic)."""
        d = self._deleting.get(topic)
        if d is None or d.pending:
            if d is not None:
                log.info("Deletion of %s waits for replicas %s", topic, sorted(d.pending))
            return
        await self.store.delete_topic(self._require(), topic)
        del self._deleting[topic]
        log.info("Deleted topic %s", topic)

    # --- elections ----------------------------------------------------------------------------------

    async def _elect_offline(self, partitions: Iterable[TopicPartition], fresh: bool = False) -> None:
        """Leaders for partitions whose leader is not live; with `fresh` (a failover), also initialise
        partitions that never got a state (the previous controller died before it wrote them)."""
        changed: list[TopicPartition] = []
        new: list[TopicPartition] = []
        for tp in partitions:
            state = self.states.get(tp)
            if state is None:
                if fresh:
                    new.append(tp)
                continue
            if state.leader not in self.live and await self._elect_one(tp, state):
                changed.append(tp)
        self._leader_and_isr(changed)
        self._update_metadata(self.live, changed)
        if new:
            await self._init_partitions(new)

    async def _elect_one(self, tp: TopicPartition, state: PartitionState) -> bool:
        """Offline election (§2.3); a changed state is written, True if it was."""
        replicas = self._replicas(tp)
        live_isr = [b for b in replicas if b in self.live and b in state.isr]
        if live_isr:
            target = replace(state, leader=live_isr[0], isr=tuple(b for b in state.isr if b in self.live))
        else:
            live = [b for b in replicas if b in self.live]
            if live and await self._unclean_allowed(tp[0]):
                log.warning("Unclean leader election for %s-%d: broker %d was not in the ISR %s; records only "
                            "the old leader had are lost", *tp, live[0], list(state.isr))
                target = replace(state, leader=live[0], isr=(live[0],))
            else:
                isr = tuple(b for b in state.isr if b in self.live) or state.isr[-1:]
                target = replace(state, leader=NO_LEADER, isr=isr)
                if (target.leader, target.isr) == (state.leader, state.isr):
                    return False
                log.warning("Partition %s-%d has no live in-sync replica (ISR %s): it is offline until one "
                            "returns", *tp, list(state.isr))
        if (target.leader, target.isr) == (state.leader, state.isr):
            return False
        return await self._write(tp, replace(target, leader_epoch=state.leader_epoch + 1))

    async def _unclean_allowed(self, topic: str) -> bool:
        if self._topic_unclean is not None:
            override = await self._topic_unclean(topic)
            if override is not None:
                return override
        return self.settings.unclean_leader_election

    async def _write(self, tp: TopicPartition, state: PartitionState) -> bool:
        lease = self._require()
        state = replace(state, controller_epoch=lease.epoch)
        written = await self.store.update_partition_state(lease, tp[0], tp[1], state)
        if written is None:  # changed under us (compare-and-set failed): re-read; the next event retries
            current = await self.store.partition_state(*tp)
            if current is not None:
                if current.controller_epoch > lease.epoch:
                    raise NotControllerError(f"{tp[0]}-{tp[1]} was written by a newer controller "
                                             f"(epoch {current.controller_epoch})")
                self.states[tp] = current
            return False
        self.states[tp] = written
        return True

    # --- requests to brokers -----------------------------------------------------------------------

    def _partition_state(self, tp: TopicPartition, lease: ControllerLease) -> dict[str, Any]:
        s = self.states[tp]
        return {"partition_index": tp[1], "controller_epoch": s.controller_epoch, "leader": s.leader,
                "leader_epoch": s.leader_epoch, "isr": list(s.isr), "replicas": self._replicas(tp)}

    def _leader_and_isr(self, partitions: Iterable[TopicPartition], is_new: bool = False,
                        only: set[int] | None = None) -> None:
        lease = self.lease
        if lease is None:
            return
        by_broker: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for tp in partitions:
            if tp not in self.states:
                continue
            for b in self._replicas(tp):
                if b in self.live and (only is None or b in only):
                    st = self._partition_state(tp, lease)
                    st.update(partition_epoch=self.states[tp].zk_version, is_new=is_new)
                    by_broker.setdefault(b, {}).setdefault(tp[0], []).append(st)
        for b, topics in by_broker.items():
            leaders = {self.states[(t, p["partition_index"])].leader for t, ps in topics.items() for p in ps}
            body = {"controller_id": self.broker_id, "controller_epoch": lease.epoch,
                    "broker_epoch": self.live[b].epoch, "type": 0,
                    "topic_states": [{"topic_name": t, "topic_id": self.assignments[t].topic_id,
                                      "partition_states": ps} for t, ps in sorted(topics.items())],
                    "live_leaders": [self._live_leader(lb) for lb in sorted(leaders) if lb in self.live]}
            self.channels.send(b, ApiKey.LEADER_AND_ISR, LEADER_AND_ISR_VERSION, body, self._check_response)

    def _live_leader(self, b: int) -> dict[str, Any]:
        ep = self.live[b].endpoint()
        return {"broker_id": b, "host_name": ep.host, "port": ep.port}

    def _update_metadata(self, targets: Mapping[int, BrokerRegistration], partitions: Iterable[TopicPartition],
                         deleted: bool = False) -> None:
        lease = self.lease
        if lease is None or not targets:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        ids: dict[str, uuid.UUID] = {}
        for tp in partitions:
            if deleted:
                st = {"partition_index": tp[1], "controller_epoch": lease.epoch, "leader": LEADER_DURING_DELETE,
                      "leader_epoch": EPOCH_DURING_DELETE, "isr": [], "zk_version": 0, "replicas": [],
                      "offline_replicas": []}
            elif tp in self.states:
                st = self._partition_state(tp, lease)
                st.update(zk_version=self.states[tp].zk_version,
                          offline_replicas=[b for b in self._replicas(tp) if b not in self.live])
            else:
                replicas = self._replicas(tp)
                st = {"partition_index": tp[1], "controller_epoch": lease.epoch, "leader": NO_LEADER,
                      "leader_epoch": -1, "isr": [], "zk_version": -1, "replicas": replicas,
                      "offline_replicas": [b for b in replicas if b not in self.live]}
            topics.setdefault(tp[0], []).append(st)
            d = self._deleting.get(tp[0])
            a = self.assignments.get(tp[0]) or (d.assignment if d else None)
            ids[tp[0]] = a.topic_id if a else uuid.UUID(int=0)
        brokers = [{"id": b, "endpoints": [{"port": e.port, "host": e.host, "listener": e.listener,
                                            "security_protocol": 0} for e in r.endpoints], "rack": r.rack}
                   for b, r in sorted(self.live.items())]
        for b, reg in targets.items():
            body = {"controller_id": self.broker_id, "controller_epoch": lease.epoch, "broker_epoch": reg.epoch,
                    "topic_states": [{"topic_name": t, "topic_id": ids[t], "partition_states": ps}
                                     for t, ps in sorted(topics.items())],
                    "live_brokers": brokers}
            self.channels.send(b, ApiKey.UPDATE_METADATA, UPDATE_METADATA_VERSION, body, self._check_response)

    def _stop_replica(self, b: int, partitions: list[TopicPartition], delete: bool,
                      on_response: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        lease = self.lease
        if lease is None or b not in self.live:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append({"partition_index": p, "leader_epoch": EPOCH_DURING_DELETE if delete
                                             else -1, "delete_partition": delete})
        body = {"controller_id": self.broker_id, "controller_epoch": lease.epoch, "broker_epoch": self.live[b].epoch,
                "topic_states": [{"topic_name": t, "partition_states": ps} for t, ps in sorted(topics.items())]}
        self.channels.send(b, ApiKey.STOP_REPLICA, STOP_REPLICA_VERSION, body, on_response or self._check_response)

    def _check_response(self, broker_id: int, body: dict[str, Any]) -> None:
        code = body.get("error_code", 0)
        if code != ErrorCode.NONE:
            log.warning("Broker %d refused a controller request: %s", broker_id, ErrorCode(code).name)
