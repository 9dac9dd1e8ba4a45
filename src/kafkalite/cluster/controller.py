"""The controller (Kafka's KafkaController in ZooKeeper mode): one broker, elected through the store, decides
every partition's leader and ISR and tells the brokers with LeaderAndIsr, UpdateMetadata and StopReplica.

Every broker runs this object; only the elected one is active. All of its work runs on one asyncio task
that takes events from one queue (Kafka's ControllerEventManager): store watches only enqueue. Each write
the active controller makes is fenced by its lease (the controller epoch's version): if another broker has
been elected meanwhile, the write fails with NotControllerError and this broker resigns, so a paused
"zombie" controller cannot change anything once it wakes up.

Rules (Kafka's PartitionLeaderElectionAlgorithms and ReplicaStateMachine): a new partition's leader is its
first live replica in assignment order, its ISR the live replicas, leader epoch 0; when a leader dies the new
one is the first live ISR member in assignment order (the first live replica when
unclean.leader.election.enable allows it); dead replicas leave the ISR except the last member, and every such
change bumps the leader epoch. Brokers whose registration was replaced by a newer one (a larger epoch) are
handled as a failure followed by a start-up.

Topic deletion (Kafka's TopicDeletionManager): a topic marked in /admin/delete_topics leaves the
controller's context for its `_deleting` table at once (no more elections or LeaderAndIsr; UpdateMetadata
tells every broker it is gone), every replica on a live broker gets StopReplica(delete), and only when each
replica has answered it without error are the topic's znodes and the marker removed. Replicas on dead brokers
keep the deletion waiting until their broker comes back and is sent its StopReplica(delete).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from kafkalite.cluster import controller_events as ev
from kafkalite.cluster import elections
from kafkalite.cluster import znodes as z
from kafkalite.cluster.channel import ControllerChannels
from kafkalite.cluster.reassignment import ReplicaSets, invalid_target
from kafkalite.cluster.store import ClusterStore, ControllerLease
from kafkalite.cluster.znodes import BrokerRegistration, PartitionState, TopicAssignment
from kafkalite.errors import BrokerNotAvailableError, KafkaliteError, NotControllerError, StaleBrokerEpochError
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.security.transport import PLAINTEXT_CLIENT, ClientSecurity

log = logging.getLogger("kafkalite.cluster.controller")

LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
NO_LEADER = -1
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}  # Kafka's SecurityProtocol ids
LEADER_DURING_DELETE = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete: UpdateMetadata's "partition removed"
EPOCH_DURING_DELETE = -2


@dataclass(frozen=True)
class ControllerSettings:
    unclean_leader_election: bool = False
    listener: str = "PLAINTEXT"
    auto_leader_rebalance: bool = True  # auto.leader.rebalance.enable
    imbalance_check_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    imbalance_percentage: int = 10  # leader.imbalance.per.broker.percentage
    security: ClientSecurity = PLAINTEXT_CLIENT  # how the controller's channels connect (on `control_listener`)
    control_listener: str = ""  # where the controller's requests go (control.plane.listener.name); "": `listener`


TopicPartition = tuple[str, int]
T = TypeVar("T")
PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types
FIRST_REBALANCE_DELAY_S = 5.0  # Kafka's first auto-rebalance check after a failover
ElectionResult = tuple[int, str | None, int]  # error code, message, the leader elected
Outcome = tuple[int, str | None]  # error code, message


_NO_ASSIGNMENT = TopicAssignment("", uuid.UUID(int=0), {})


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
        self.channels = ControllerChannels(self.settings.security, self_id=broker_id)
        self._queue: asyncio.Queue[ev.ControllerEvent] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._watching = False
        self._watched_topics: set[str] = set()
        self._deleting: dict[str, _Deletion] = {}
        self._isr_notes: list[str] = []  # the last /isr_change_notification children seen
        self.shutting_down: set[int] = set()  # brokers in controlled shutdown: live, but never elected
        self._rebalance_timer: asyncio.Task[None] | None = None
        self.elections = 0  # times this broker became controller (tests, logs)

    @property
    def active(self) -> bool:
        return self.lease is not None

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="controller-events")
        self.store.watch_data(z.CONTROLLER, lambda _data: self.enqueue(ev.ControllerChange(self._on_controller_change)))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait([self._task], timeout=10)
            if not done:
                log.error("The controller's event task did not stop within 10 s; going on with the shutdown")
        await self._resign("the broker is stopping")

    def enqueue(self, event: ev.ControllerEvent) -> None:
        self._queue.put_nowait(event)

    def reelect(self) -> None:
        """After a lost session (the broker re-registered): resign and run the election again."""
        async def event() -> None:
            await self._resign("its ZooKeeper session was lost")
            await self._elect()
        self.enqueue(ev.Reelect(event))

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await event.run()
            except NotControllerError as exc:
                await self._resign(str(exc))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Controller event %s failed", event)

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
        self._stop_operations()
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
            self.store.watch_children(z.BROKER_IDS, lambda _c: self.enqueue(ev.BrokerChange(self._on_broker_change)))
            self.store.watch_children(z.BROKER_TOPICS, lambda _c: self.enqueue(ev.TopicChange(self._on_topic_change)))
            self.store.watch_children(z.DELETE_TOPICS,
                                      lambda _c: self.enqueue(ev.TopicDeletion(self._on_topic_deletion)))
            self.store.watch_children(z.ISR_CHANGE, self._isr_change_watch)
        self.live = await self.store.brokers()
        for reg in self.live.values():
            self._connect(reg)
        marked = set(await self.store.topics_to_delete())
        for topic in await self.store.topics():
            if topic not in marked:  # taken up by the deletion below, not elected for
                await self._load_topic(topic)
        if self._isr_notes:  # left while another broker was controller: the states above are fresh, drop them
            await self._on_isr_change(self._isr_notes)
        self._update_metadata(self.live, self._all_partitions())
        sent, live = dict(self.states), dict(self.live)
        # Kafka's replica state machine start-up: replicas on brokers that are not live go offline and leave
        # the ISR (leaders among them are replaced), also those of brokers that died while nobody was
        # controller, e.g. the previous controller itself.
        offline = {b for tp in self._all_partitions() for b in self._replicas(tp) if b not in self.live}
        if offline:
            await self._on_broker_failure(offline)
        await self._elect_offline(self._all_partitions(), fresh=True)
        self._leader_and_isr(self._all_partitions())
        # Kafka follows every LeaderAndIsr with UpdateMetadata for its partitions; here only for those whose
        # state changed since the UpdateMetadata above (states are replaced, never changed in place): the rest
        # would repeat it, and with 10,000 partitions a repeat costs every broker ~0.1 s of its start.
        changed = self._all_partitions() if self.live != live else \
            [tp for tp in self._all_partitions() if self.states.get(tp) is not sent.get(tp)]
        if changed:
            self._update_metadata(self.live, changed)
        await self._on_topic_deletion()
        for tp in self._moving():  # reassignments a previous controller started (their sets are in the znodes)
            await self._maybe_complete_reassignment(tp)
        self._start_operations()

    # --- context ---------------------------------------------------------------------------------------

    def _connect(self, reg: BrokerRegistration) -> None:
        control = self.settings.control_listener or self.settings.listener
        ep = next((e for e in reg.endpoints if e.listener == control), reg.endpoint())
        self.channels.add(reg.broker_id, ep.host, ep.port)

    async def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read a topic's assignment and states; returns partitions that have no state yet (new)."""
        assignment = await self.store.topic_assignment(topic)
        if assignment is None:
            return []
        if assignment.topic_id.int == 0:  # written without a topic id (an old tool): give it one
            topic_id = uuid.uuid4()
            assignment = await self.store.update_topic_assignment(
                self._require(), topic, lambda a: a if a.topic_id.int else replace(a, topic_id=topic_id))
            if assignment is None:
                return []
        self.assignments[topic] = assignment
        if topic not in self._watched_topics:
            self._watched_topics.add(topic)
            self.store.watch_data(z.topic_path(topic), self._partition_watch(topic))
        unknown = [p for p in sorted(assignment.partitions) if (topic, p) not in self.states]
        read = await self.store.partition_states(topic, unknown) if unknown else {}
        new = []
        for p, state in read.items():
            if state is None:
                new.append((topic, p))
            else:
                self.states[(topic, p)] = state
        return new

    def _partition_watch(self, topic: str) -> Callable[[bytes | None], None]:
        def changed(_data: bytes | None) -> None:
            self.enqueue(ev.PartitionModifications(functools.partial(self._on_partition_change, topic), topic))
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
            self.shutting_down.discard(b)
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
            if state is None or (state.leader != NO_LEADER and not dead & set(self._replicas(tp))):
                continue
            for _attempt in range(3):  # a leader's own ISR write can race ours: retry on the re-read state
                # as Kafka, from the store: a leader may have changed the ISR
                state = await self._fresh(tp) or self.states.get(tp)
                if state is None:
                    break
                if state.leader in dead or state.leader == NO_LEADER:
                    done = await self._elect_one(tp, state)
                elif dead & set(state.isr) and len(state.isr) > 1:
                    isr = tuple(b for b in state.isr if b not in dead) or state.isr[-1:]
                    done = await self._write(tp, replace(state, isr=isr, leader_epoch=state.leader_epoch + 1))
                else:
                    break
                if done:
                    changed.append(tp)
                    break
                if self.states.get(tp) == state:  # nothing to do, or nothing new to retry with
                    break
        self._leader_and_isr(changed)
        self._update_metadata(self.live, changed)

    async def _on_broker_startup(self, new: set[int]) -> None:
        others = {b: r for b, r in self.live.items() if b not in new}
        self._update_metadata(others, [])
        self._update_metadata({b: self.live[b] for b in new}, self._all_partitions())
        theirs = [tp for tp in self._all_partitions() if new & set(self._replicas(tp))]
        self._leader_and_isr(theirs, only=new)
        await self._elect_offline(self._all_partitions())
        for topic, d in list(self._deleting.items()):  # replicas that waited for their broker (TopicDeletionManager)
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
            self.enqueue(ev.TopicDeletionStopReplicaResponseReceived(event, f"{topic} from broker {broker_id}"))
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

    # --- ISR changes made by partition leaders (Kafka's IsrChangeNotification handling) ------------------

    def _isr_change_watch(self, children: list[str]) -> None:
        names = self._isr_notes = sorted(children)
        if names:
            self.enqueue(ev.IsrChangeNotification(functools.partial(self._on_isr_change, names)))

    async def _on_isr_change(self, names: list[str]) -> None:
        """Leaders wrote new ISRs themselves (a compare-and-set on the zkVersion) and left notifications: re-read
        those partitions' states into the context, tell every live broker with UpdateMetadata, and delete the
        notifications."""
        if not self.active:
            return
        lease = self._require()
        changed: set[TopicPartition] = set()
        for name in names:
            path = f"{z.ISR_CHANGE}/{name}"
            data = await self.store.read(path)
            if data is None:
                continue
            try:
                changed.update(z.decode_isr_change(path, data))
            except z.ZnodeFormatError as exc:
                log.error("Ignoring a malformed ISR change notification: %s", exc)
        tps = [tp for tp in sorted(changed) if tp in self.states]
        for tp in tps:
            state = await self.store.partition_state(*tp)
            if state is not None:
                self.states[tp] = state
        if tps:
            log.info("ISR changed by leaders: %s", [f"{t}-{p} {list(self.states[(t, p)].isr)}" for t, p in tps
                                                    if (t, p) in self.states])
            self._update_metadata(self.live, tps)
        for tp in tps:
            if self._sets(tp).moving:  # a target replica may have joined the ISR
                await self._maybe_complete_reassignment(tp)
        await self.store.delete_isr_change_notifications(lease, names)

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
        """Offline election (Kafka's OfflinePartitionLeaderElectionStrategy); a changed state is written, True if
        it was. Without a replica that can lead, the partition is offline: no leader, the ISR kept as it was
        (its live members, or its last one) so that the replica with every committed record is known."""
        replicas, electable = self._replicas(tp), self._electable_now()
        unclean = False
        if not elections.in_sync_candidates(replicas, state.isr, electable) and any(b in electable for b in replicas):
            unclean = await self._unclean_allowed(tp[0])  # a store read: asked only when it decides
        choice = elections.offline(replicas, state.isr, electable, unclean, stay_in_sync=self.live)
        if choice is None:
            target = replace(state, leader=NO_LEADER, isr=tuple(b for b in state.isr if b in self.live)
                             or state.isr[-1:])
            if (target.leader, target.isr) != (state.leader, state.isr):
                log.warning("Partition %s-%d has no live in-sync replica (ISR %s): it is offline until one "
                            "returns", *tp, list(state.isr))
        else:
            self._warn_if_unclean(f"{tp[0]}-{tp[1]}", choice, state)
            target = replace(state, leader=choice[0], isr=choice[1])
        if (target.leader, target.isr) == (state.leader, state.isr):
            return False
        return await self._write(tp, replace(target, leader_epoch=state.leader_epoch + 1))

    @staticmethod
    def _warn_if_unclean(what: str, choice: elections.Choice, state: PartitionState) -> None:
        if choice[0] not in state.isr:
            log.warning("Unclean leader election for %s: broker %d was not in the ISR %s; records only the old leader "
                        "had are lost", what, choice[0], list(state.isr))

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

    # --- operations: controlled shutdown, ElectLeaders, auto preferred-leader rebalance --------------------
    # Kafka's KafkaController.doControlledShutdown, processReplicaLeaderElection and
    # checkAndTriggerAutoLeaderRebalance (ZK mode, 2.8). Each runs as an event on the controller's queue; an
    # election reads the partition's state from the store first (as Kafka's doElectLeaderForPartitions does),
    # so an ISR a leader changed in the store since the controller last read it is the one elected from.

    def _electable(self, b: int) -> bool:
        """Live and not in controlled shutdown (Kafka's isReplicaOnline without shutting-down brokers)."""
        return b in self.live and b not in self.shutting_down

    def _electable_now(self) -> set[int]:
        """The brokers that may lead now (`_electable`), as the set `elections` takes."""
        return {b for b in self.live if b not in self.shutting_down}

    async def _call(self, api: str, fn: Callable[[], Awaitable[T]], timeout_s: float) -> T:
        """Run `fn` as an event on the controller's queue and wait for its result (a request handler's way
        in); NotControllerError if this broker is not the controller, now or when the event runs."""
        self._require()
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        done.add_done_callback(lambda f: f.cancelled() or f.exception())  # an answer nobody waits for any more

        async def event() -> None:
            try:
                result = await fn()
            except BaseException as exc:
                if not done.done():
                    done.set_exception(exc)
                if isinstance(exc, KafkaliteError) and not isinstance(exc, NotControllerError):
                    return  # the request's error, answered to it; the controller goes on
                raise
            if not done.done():
                done.set_result(result)
        self.enqueue(ev.ApiCall(event, api))
        return await asyncio.wait_for(asyncio.shield(done), timeout_s)

    async def _fresh(self, tp: TopicPartition) -> PartitionState | None:
        """The partition's state as the store has it now (into the context); a state written by a newer
        controller means this one has been replaced."""
        lease = self._require()
        state = await self.store.partition_state(*tp)
        if state is None:
            return None
        if state.controller_epoch > lease.epoch:
            raise NotControllerError(f"{tp[0]}-{tp[1]} was written by a newer controller "
                                     f"(epoch {state.controller_epoch})")
        self.states[tp] = state
        return state

    async def _elect_with(self, tp: TopicPartition,
                          choose: Callable[[PartitionState, list[int]], elections.Choice | None]
                          ) -> bool:
        """Elect with `choose(state, replicas) -> (leader, isr)` (None: no candidate) from the current state,
        leader epoch + 1, written conditionally; a write that lost a race is retried on the newer state."""
        for _attempt in range(3):
            state = await self._fresh(tp)
            if state is None:
                return False
            picked = choose(state, self._replicas(tp))
            if picked is None:
                return False
            leader, isr = picked
            if await self._write(tp, replace(state, leader=leader, isr=isr, leader_epoch=state.leader_epoch + 1)):
                return True
        return False

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int, timeout_s: float = 30.0
                                  ) -> list[TopicPartition]:
        """The ControlledShutdown request: the partitions `broker_id` still leads once leadership has moved
        where it could. Raises NotControllerError, StaleBrokerEpochError or BrokerNotAvailableError."""
        return await self._call("ControlledShutdown", functools.partial(self._do_controlled_shutdown, broker_id,
                                                                        broker_epoch), timeout_s)

    async def _do_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        self._require()
        reg = self.live.get(broker_id)
        if reg is None:
            raise BrokerNotAvailableError(f"Broker id {broker_id} does not exist.")
        if broker_epoch != -1 and broker_epoch < reg.epoch:
            raise StaleBrokerEpochError(f"Received controlled shutdown request from an old broker epoch "
                                        f"{broker_epoch} for broker {broker_id}. Current broker epoch is {reg.epoch}.")
        log.info("Shutting down broker %d", broker_id)
        self.shutting_down.add(broker_id)
        led: list[TopicPartition] = []
        followed: list[TopicPartition] = []
        for tp in self._all_partitions():
            replicas = self._replicas(tp)
            if len(replicas) > 1 and broker_id in replicas and tp in self.states:
                (led if self.states[tp].leader == broker_id else followed).append(tp)

        def away(state: PartitionState, replicas: list[int]) -> elections.Choice | None:
            return elections.controlled_shutdown(replicas, state.leader, state.isr, broker_id, self._electable_now(),
                                                 self.shutting_down)
        moved = [tp for tp in led if await self._elect_with(tp, away)]
        self._leader_and_isr(moved)
        self._update_metadata(self.live, moved)
        if followed:
            self._stop_replica(broker_id, followed, delete=False)

        def without(state: PartitionState, _replicas: list[int]) -> elections.Choice | None:
            # Kafka's OfflineReplica transition: out of the ISR, unless it is the last member
            if broker_id not in state.isr or len(state.isr) <= 1:
                return None
            return state.leader, tuple(b for b in state.isr if b != broker_id)
        shrunk = [tp for tp in followed if await self._elect_with(tp, without)]
        self._leader_and_isr(shrunk, only=set(self.live) - {broker_id})
        self._update_metadata(self.live, shrunk)
        remaining = [tp for tp in self._all_partitions() if tp in self.states and self.states[tp].leader == broker_id]
        log.info("Controlled shutdown of broker %d: moved %d leaders, %d still led by it%s", broker_id, len(moved),
                 len(remaining), f" ({remaining[:10]})" if remaining else "")
        return remaining

    async def elect_leaders(self, election_type: int, partitions: Iterable[TopicPartition], timeout_s: float = 60.0
                            ) -> dict[TopicPartition, ElectionResult]:
        """The ElectLeaders request (Kafka's processReplicaLeaderElection): per partition (error code, message,
        the elected leader). NotControllerError if this broker is not the controller."""
        wanted = list(dict.fromkeys(partitions))
        return await self._call("ElectLeaders", functools.partial(self._elect_leaders, election_type, wanted),
                                timeout_s)

    async def _elect_leaders(self, election_type: int, partitions: list[TopicPartition]
                             ) -> dict[TopicPartition, ElectionResult]:
        self._require()
        out: dict[TopicPartition, ElectionResult] = {}
        electable: list[TopicPartition] = []
        for tp in partitions:
            if tp[0] in self._deleting:
                out[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted", NO_LEADER)
            elif tp[1] not in self.assignments.get(tp[0], _NO_ASSIGNMENT).partitions:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.", NO_LEADER)
            elif tp in self.states and not self._needs_election(election_type, tp, self.states[tp]):
                out[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None, NO_LEADER)
            else:  # (a partition without a state never got a leader: no live replica when it was created)
                electable.append(tp)
        elected = []
        for tp in electable:
            if election_type == PREFERRED:
                ok = await self._elect_with(tp, self._preferred)
                code, strategy = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, "PreferredReplicaPartitionLeaderElection"
            else:
                ok = await self._elect_with(tp, self._unclean)
                code, strategy = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "OfflinePartitionLeaderElection"
            if ok:
                elected.append(tp)
                out[tp] = (ErrorCode.NONE, None, self.states[tp].leader)
            else:
                why = f"Failed to elect leader for partition {tp[0]}-{tp[1]} under strategy {strategy}Strategy"
                preferred = next(iter(self._replicas(tp)), None) if election_type == PREFERRED else None
                if preferred is not None and self._electable(preferred) and not self.channels.reachable(preferred):
                    why += (f": the controller's connection to broker {preferred} failed, so it is probably gone "
                            "(it stays registered until its ZooKeeper session expires); try again once it is back")
                out[tp] = (code, why, NO_LEADER)
        if elected:
            log.info("%s leader election for %s", "Preferred" if election_type == PREFERRED else "Unclean",
                     [f"{t}-{p}" for t, p in elected])
        self._leader_and_isr(elected)
        self._update_metadata(self.live, elected)
        return out

    def _needs_election(self, election_type: int, tp: TopicPartition, state: PartitionState) -> bool:
        """PREFERRED: the leader is not the first assigned replica; UNCLEAN: there is no live leader."""
        if election_type == PREFERRED:
            return state.leader != self._replicas(tp)[0]
        return not self._electable(state.leader)

    def _preferred(self, state: PartitionState, replicas: list[int]) -> elections.Choice | None:
        """Kafka's preferredReplicaPartitionLeaderElection: the first assigned replica, if live and in the ISR;
        and, unlike Kafka, only if the controller's connection to it shows no sign of its death. A preferred
        election is optional (the current leader is live), and a broker killed a moment ago is still registered
        until its ZooKeeper session expires: elected then, it would leave the partition without a leader for
        that long. Kafka's ZooKeeper controller has that window; its KRaft controller avoids it with fencing."""
        choice = elections.preferred(replicas, state.leader, state.isr, self._electable_now())
        if choice is None:
            return None
        first = choice[0]
        if not self.channels.reachable(first):
            log.debug("Broker %d is not elected preferred leader: the controller's connection to it failed, so it "
                      "is probably gone (its registration ends with its ZooKeeper session)", first)
            return None
        return choice

    def _unclean(self, state: PartitionState, replicas: list[int]) -> elections.Choice | None:
        """An ElectLeaders UNCLEAN election, only for a partition without a live leader: the offline strategy
        with unclean election allowed (a live ISR member first, else the first live replica, alone in the ISR)."""
        if self._electable(state.leader):
            return None
        choice = elections.offline(replicas, state.isr, self._electable_now(), unclean_allowed=True)
        if choice is not None:
            self._warn_if_unclean(f"the partition with replicas {replicas}", choice, state)
        return choice

    def _start_operations(self) -> None:
        """After a failover: the auto-rebalance timer (first check after 5 s, as Kafka)."""
        if self.settings.auto_leader_rebalance and self._rebalance_timer is None:
            self._rebalance_timer = asyncio.get_running_loop().create_task(self._rebalance_ticks(),
                                                                            name="controller-auto-rebalance")

    def _stop_operations(self) -> None:
        self.shutting_down.clear()
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None

    async def _rebalance_ticks(self) -> None:
        await asyncio.sleep(FIRST_REBALANCE_DELAY_S)
        while True:
            self.enqueue(ev.AutoPreferredReplicaLeaderElection(self._auto_rebalance))
            await asyncio.sleep(self.settings.imbalance_check_interval_s)

    async def _auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: for each preferred broker whose share of partitions led
        elsewhere is above leader.imbalance.per.broker.percentage, preferred elections for those partitions
        (the election itself checks that the preferred replica is in the ISR)."""
        if not self.active:
            return
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in self._all_partitions():
            replicas = self._replicas(tp)
            if replicas and tp in self.states and not self._sets(tp).moving:  # as Kafka: not while reassigned
                by_preferred.setdefault(replicas[0], []).append(tp)
        elected: list[TopicPartition] = []
        for b, tps in sorted(by_preferred.items()):
            elsewhere = [tp for tp in tps if self.states[tp].leader != b]
            ratio = len(elsewhere) / len(tps)
            if ratio <= self.settings.imbalance_percentage / 100 or not self._electable(b):
                continue
            if not self.channels.reachable(b):
                log.info("Leader imbalance of broker %d is %.0f%%, but the controller's connection to it failed: no "
                         "preferred leader election for it until it answers again", b, ratio * 100)
                continue
            log.info("Leader imbalance of broker %d is %.0f%%: preferred leader election for %d partitions", b,
                     ratio * 100, len(elsewhere))
            elected += [tp for tp in elsewhere if await self._elect_with(tp, self._preferred)]
        self._leader_and_isr(elected)
        self._update_metadata(self.live, elected)

    # --- partition reassignment (KIP-455; Kafka's onPartitionReassignment, ZooKeeper mode) ------------------
    # A move adds the target's new replicas to the assignment (RS = TRS + ORS), bumps the leader epoch and sends
    # LeaderAndIsr to all of them: the new ones create their logs and fetch from the leader, which takes them into
    # the ISR once caught up. When every target replica is in the ISR (checked at each ISR change), the leader
    # moves if it is not in the target, the ISR loses the removed replicas, the assignment becomes the target and
    # the removed replicas get StopReplica(delete). The sets live in the topic's znode (reassignment.py).

    def _sets(self, tp: TopicPartition) -> ReplicaSets:
        a = self.assignments.get(tp[0], _NO_ASSIGNMENT)
        return ReplicaSets(tuple(a.partitions.get(tp[1], ())), tuple(a.adding.get(tp[1], ())),
                           tuple(a.removing.get(tp[1], ())))

    def _moving(self) -> list[TopicPartition]:
        """The partitions being reassigned, from the topics' adding/removing sets (not a look at every partition:
        a failover runs this over all of them)."""
        return [(t, p) for t, a in sorted(self.assignments.items()) for p in sorted({*a.adding, *a.removing})]

    async def _write_sets(self, topic: str, sets: Mapping[int, ReplicaSets]) -> None:
        """The topic's znode with these partitions' replica sets (one write for all of them), changed as the store
        has it: partitions a CreatePartitions added since the controller last read the znode (or adds while this
        write is under way: the write is conditional on the version it changed) stay, and are taken up here."""
        def change(a: TopicAssignment) -> TopicAssignment:
            partitions, adding, removing = dict(a.partitions), dict(a.adding), dict(a.removing)
            for p, rs in sets.items():
                partitions[p] = list(rs.replicas)
                for field, got in ((adding, rs.adding), (removing, rs.removing)):
                    if got:
                        field[p] = list(got)
                    else:
                        field.pop(p, None)
            return replace(a, partitions=partitions, adding=adding, removing=removing)
        new = await self.store.update_topic_assignment(self._require(), topic, change)
        if new is None:
            return  # deleted meanwhile: the deletion's event cleans up
        added = new.partitions.keys() - self.assignments[topic].partitions.keys()
        self.assignments[topic] = new
        if added:
            await self._init_partitions(await self._load_topic(topic))

    async def alter_reassignments(self, wanted: Mapping[TopicPartition, list[int] | None], timeout_s: float = 60.0
                                  ) -> dict[TopicPartition, Outcome]:
        """The AlterPartitionReassignments request: per partition its new replicas, or None to cancel its move
        (back to the original replicas). Answers once each move has started, not finished (as Kafka)."""
        wanted = dict(wanted)
        return await self._call("AlterPartitionReassignments", functools.partial(self._alter_reassignments, wanted),
                                timeout_s)

    async def _alter_reassignments(self, wanted: dict[TopicPartition, list[int] | None]
                                   ) -> dict[TopicPartition, Outcome]:
        self._require()
        out: dict[TopicPartition, Outcome] = {}
        moves: dict[str, dict[int, tuple[ReplicaSets, ReplicaSets]]] = {}
        live = set(self.live)  # as Kafka: live or shutting down
        for tp, target in sorted(wanted.items()):
            if tp[0] in self._deleting or tp[1] not in self.assignments.get(tp[0], _NO_ASSIGNMENT).partitions:
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            old = self._sets(tp)
            if target is None and not old.moving:
                out[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                           f"Unable to find an ongoing reassignment for {tp[0]}-{tp[1]}.")
                continue
            why = invalid_target(target, live)
            if why is not None:
                out[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, why)
                continue
            new = old.reassign_to(old.original if target is None else target)
            state = self.states.get(tp)
            if state is not None and state.leader != NO_LEADER and state.leader not in new.replicas and \
                    self._leader_after(new, state) is None:
                out[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                           f"No replica of {list(new.replicas)} is in the ISR {list(state.isr)} of {tp[0]}-{tp[1]} "
                           f"to take over from its leader {state.leader}, which the new assignment leaves out.")
                continue
            moves.setdefault(tp[0], {})[tp[1]] = (old, new)
            out[tp] = (ErrorCode.NONE, None)
        for topic, parts in moves.items():
            await self._write_sets(topic, {p: new for p, (_old, new) in parts.items()})
            for p, (old, new) in parts.items():
                log.info("Reassignment of %s-%d: replicas %s -> %s%s", topic, p, list(old.original), list(new.target),
                         " (cancelled)" if wanted[(topic, p)] is None else "")
                await self._start_reassignment((topic, p), old, new)
        return out

    def _leader_after(self, sets: ReplicaSets, state: PartitionState) -> int | None:
        """Who leads once `sets` apply: the leader if it stays, else the first live target replica in the ISR
        (Kafka's ReassignPartitionLeaderElectionStrategy)."""
        return elections.reassignment_leader(sets.target, state.leader, state.isr, self._electable_now())

    async def _start_reassignment(self, tp: TopicPartition, old: ReplicaSets, new: ReplicaSets) -> None:
        """Tell the replicas of the new sets (a new epoch: the leader learns its new followers, new replicas create
        their logs); replicas an earlier target had added and this one drops are deleted. Without a live leader
        nothing is bumped: the next election sends the new replicas their LeaderAndIsr."""
        def bump(state: PartitionState, _replicas: list[int]) -> elections.Choice | None:
            if state.leader == NO_LEADER or not self._electable(state.leader):
                return None
            leader = state.leader if state.leader in new.replicas else self._leader_after(new, state)
            isr = tuple(b for b in state.isr if b in new.replicas)
            return (leader, isr) if leader is not None and isr else None
        if await self._elect_with(tp, bump):
            self._leader_and_isr([tp])
        self._delete_replicas(tp, [b for b in old.replicas if b not in new.replicas])
        self._update_metadata(self.live, [tp])
        await self._maybe_complete_reassignment(tp)

    async def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        """Finish a move whose target replicas are all in the ISR: leader, ISR, then the assignment, then the
        removed replicas deleted (Kafka's order); otherwise wait for the next ISR change."""
        sets = self._sets(tp)
        if not sets.moving:
            return

        def finish(state: PartitionState, _replicas: list[int]) -> elections.Choice | None:
            leader = self._leader_after(sets, state)
            if leader is None or not all(b in state.isr for b in sets.target):
                return None
            return leader, tuple(b for b in state.isr if b in sets.target)
        if not await self._elect_with(tp, finish):
            return
        await self._write_sets(tp[0], {tp[1]: sets.done()})
        self._leader_and_isr([tp])
        self._delete_replicas(tp, sets.removing)
        self._update_metadata(self.live, [tp])
        log.info("Reassignment of %s-%d done: replicas %s, leader %d%s", *tp, list(sets.target),
                 self.states[tp].leader, f", removed {list(sets.removing)}" if sets.removing else "")

    def _delete_replicas(self, tp: TopicPartition, brokers: Iterable[int]) -> None:
        """StopReplica(delete) to those of `brokers` that are live (a dead one deletes its copy when it returns:
        ReplicaManager._strays)."""
        for b in brokers:
            if b in self.live:
                self._stop_replica(b, [tp], delete=True)

    async def list_reassignments(self, partitions: Iterable[TopicPartition] | None, timeout_s: float = 60.0
                                 ) -> dict[TopicPartition, ReplicaSets]:
        """ListPartitionReassignments: the moving partitions (of `partitions`, or all) and their sets. An event
        like the others, so a controller just elected answers after its failover has read the assignments."""
        wanted = None if partitions is None else list(partitions)

        async def listed() -> dict[TopicPartition, ReplicaSets]:
            self._require()
            moving = self._moving() if wanted is None else [tp for tp in wanted if self._sets(tp).moving]
            return {tp: self._sets(tp) for tp in moving}
        return await self._call("ListPartitionReassignments", listed, timeout_s)

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
        reg = self.live[b]
        ep = next((e for e in reg.endpoints if e.listener == self.settings.listener), reg.endpoint())
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
                                            "security_protocol": PROTOCOL_IDS.get(e.security_protocol, 0)}
                                           for e in r.endpoints], "rack": r.rack}
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
