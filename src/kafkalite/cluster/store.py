"""The small interface between the cluster's code (controller, brokers) and the store holding its metadata.

Kafka's ZooKeeper mode needs only these operations: register a broker (its epoch is the registration's
creation id), elect a controller (epoch + fencing token), writes fenced by that token, compare-and-set of a
partition's state, topic creation (config first, then assignment), change watches, sequential nodes and
producer-id blocks. `zk_store.ZkStore` implements it over ZooKeeper with Kafka's paths and JSON; another
backend (etcd, or a local file for one broker) implements the same methods.

Every method is a coroutine run on the broker's event loop; a backend does its blocking I/O elsewhere.
Watch callbacks and the session-lost callback are always called on that loop, never on a backend thread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kafkalite.cluster.znodes import BrokerRegistration, PartitionState, ProducerIdBlock, TopicAssignment
from kafkalite.security.acl import AclEntry, ResourcePattern


@dataclass(frozen=True)
class ControllerLease:
    """What a controller holds after winning an election: its epoch, and the version of the epoch record
    that every write it makes is conditional on (Kafka's controller epoch zkVersion)."""

    broker_id: int
    epoch: int
    epoch_version: int


ChildrenCallback = Callable[[list[str]], None]
DataCallback = Callable[[bytes | None], None]


class ClusterStore(ABC):
    """Where the cluster's metadata lives. Controller writes take a ControllerLease and raise
    NotControllerError when another controller has been elected since (the lease is fenced)."""

    connect: str = ""  # where the store is (ZooKeeper's connect string, the local file), for messages
    on_session_lost: Callable[[], None] | None = None
    on_session_restored: Callable[[], None] | None = None

    @abstractmethod
    async def start(self) -> None:
        """Connect and create the persistent paths; raises KafkaliteError naming the store if it can't."""

    @abstractmethod
    async def close(self) -> None: ...

    # --- cluster and brokers -----------------------------------------------------------------------

    @abstractmethod
    async def get_or_create_cluster_id(self, proposed: str) -> str: ...

    @abstractmethod
    async def register_broker(self, registration: BrokerRegistration) -> int:
        """Register this broker for as long as its session lives; returns its broker epoch. Raises
        KafkaliteError when the id is already registered by a live broker."""

    @abstractmethod
    async def brokers(self) -> dict[int, BrokerRegistration]:
        """Live brokers, each with its epoch."""

    # --- controller -------------------------------------------------------------------------------

    @abstractmethod
    async def controller_id(self) -> int | None: ...

    @abstractmethod
    async def elect_controller(self, broker_id: int) -> ControllerLease | None:
        """Become controller if there is none; None when another broker is controller."""

    # --- topics -----------------------------------------------------------------------------------

    @abstractmethod
    async def topics(self) -> list[str]: ...

    @abstractmethod
    async def topic_assignment(self, topic: str) -> TopicAssignment | None: ...

    @abstractmethod
    async def create_topic(self, assignment: TopicAssignment, configs: Mapping[str, str]) -> None:
        """Config first, then the assignment (whose appearance is what the controller acts on); raises
        TopicAlreadyExistsError when the topic exists."""

    @abstractmethod
    async def add_partitions(self, assignment: TopicAssignment, expected_partitions: int) -> None:
        """Replace a topic's assignment by one with more partitions, if it still has `expected_partitions`."""

    @abstractmethod
    async def update_topic_assignment(self, lease: ControllerLease, topic: str,
                                      change: Callable[[TopicAssignment], TopicAssignment]) -> TopicAssignment | None:
        """Read a topic's assignment, write `change(assignment)` in its place (its id given by the controller, a
        reassignment's replica sets), fenced by the controller's lease and conditional on the version read; when
        another writer came between (a CreatePartitions adding partitions), read and change again, so nothing
        written meanwhile is lost. Returns what was written; None when the topic does not exist."""

    @abstractmethod
    async def partition_state(self, topic: str, partition: int) -> PartitionState | None: ...

    @abstractmethod
    async def partition_states(self, topic: str, partitions: Iterable[int]) -> dict[int, PartitionState | None]:
        """Many of a topic's states in one call, the reads pipelined (a controller's failover reads them all)."""

    @abstractmethod
    async def create_partition_states(self, lease: ControllerLease,
                                      states: Mapping[tuple[str, int], PartitionState]
                                      ) -> dict[tuple[str, int], PartitionState]:
        """Create new partitions' states (fenced); returns them with their versions."""

    @abstractmethod
    async def update_partition_state(self, lease: ControllerLease, topic: str, partition: int,
                                     state: PartitionState) -> PartitionState | None:
        """Fenced compare-and-set against `state.zk_version`; the written state with its new version, or
        None when the state changed meanwhile (re-read and retry)."""

    @abstractmethod
    async def update_isr(self, topic: str, partition: int, new_state: PartitionState,
                         expected_zk_version: int) -> PartitionState | None:
        """A leader's ISR change (Kafka's ZK-mode ReplicationUtils.updateLeaderAndIsr): compare-and-set of the
        partition state against `expected_zk_version`, not fenced by a controller lease. The written state
        with its new version, or None when the state changed meanwhile (nothing written). The leader applies
        it at once, then tells the controller (`announce_isr_changes`)."""

    @abstractmethod
    async def announce_isr_changes(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Sequential /isr_change_notification/isr_change_ nodes naming the partitions, for the controller
        (which then sends every broker their new ISRs)."""

    @abstractmethod
    async def delete_isr_change_notifications(self, lease: ControllerLease, names: list[str]) -> None:
        """Remove processed /isr_change_notification children (fenced); missing ones are ignored."""

    @abstractmethod
    async def request_topic_deletion(self, topic: str) -> None: ...

    @abstractmethod
    async def topics_to_delete(self) -> list[str]: ...

    @abstractmethod
    async def delete_topic(self, lease: ControllerLease, topic: str) -> None:
        """Remove the topic's assignment, states, config and deletion marker (fenced)."""

    # --- configs ----------------------------------------------------------------------------------

    @abstractmethod
    async def topic_config(self, topic: str) -> dict[str, str]: ...

    @abstractmethod
    async def set_topic_config(self, topic: str, configs: Mapping[str, str]) -> None:
        """Write the config and a change notification every broker watches."""

    # --- ACLs (Kafka's /kafka-acl and /kafka-acl-extended layout, change notifications beside them) -----------

    @abstractmethod
    async def all_acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        """Every resource pattern's ACLs (a broker's start-up load)."""

    @abstractmethod
    async def resource_acls(self, pattern: ResourcePattern) -> tuple[frozenset[AclEntry], int]:
        """One pattern's ACLs and the version of their record (-1 when it has none)."""

    @abstractmethod
    async def set_resource_acls(self, pattern: ResourcePattern, entries: frozenset[AclEntry],
                                expected_version: int) -> bool:
        """Replace a pattern's ACLs if their record is still at `expected_version` (-1: absent); an empty set
        removes the record. Then a change notification every broker watches. False (nothing written) when the
        record changed meanwhile: re-read and retry."""

    @abstractmethod
    async def purge_acl_changes(self, path: str, older_than_ms: int) -> int:
        """Delete the change notifications under `path` made more than `older_than_ms` ago (Kafka's
        ZkNodeChangeNotificationListener purge); returns how many. A store without creation times (the single
        broker's, where this broker is the only reader) treats every notification as old."""

    @abstractmethod
    async def users(self) -> list[str]:
        """Users with an entity config (/config/users children): their SCRAM credentials."""

    @abstractmethod
    async def user_config(self, user: str) -> dict[str, str]:
        """A user's entity config ({} when none): SCRAM-SHA-256/512 -> Kafka's credential text."""

    @abstractmethod
    async def set_user_config(self, user: str, configs: Mapping[str, str]) -> None:
        """Replace a user's config and write a change notification (`users/<user>`) every broker watches."""

    # --- producer ids ------------------------------------------------------------------------------

    @abstractmethod
    async def next_producer_id_block(self, broker_id: int) -> ProducerIdBlock:
        """A block of producer ids no other broker has been or will be given."""

    # --- watches and sequential nodes -------------------------------------------------------------

    @abstractmethod
    def watch_children(self, path: str, callback: ChildrenCallback) -> None:
        """Call `callback(children)` on the event loop now and after every change, for the store's life."""

    @abstractmethod
    def watch_data(self, path: str, callback: DataCallback) -> None:
        """Call `callback(data or None when absent)` on the event loop now and after every change."""

    @abstractmethod
    async def read(self, path: str) -> bytes | None:
        """A node's data, None if absent (notifications named by a children watch)."""

    @abstractmethod
    async def create_sequential(self, prefix: str, data: bytes) -> str: ...
