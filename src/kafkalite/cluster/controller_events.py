"""The controller's events: each a small named type, as Kafka's ControllerEvent classes (KafkaController.scala)
are, so the log says which one failed ("Controller event BrokerChange failed") and a queue metric can count
them by name. An event is the work (`run`), run alone on the controller's queue, and an optional detail (the
topic, the API) for the log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class ControllerEvent:
    run: Callable[[], Awaitable[None]]
    detail: str = ""
    name: ClassVar[str] = "ControllerEvent"

    def __str__(self) -> str:
        return f"{self.name}({self.detail})" if self.detail else self.name


class ControllerChange(ControllerEvent):
    """/controller changed: this broker may have to resign, or run for controller."""

    name = "ControllerChange"


class Reelect(ControllerEvent):
    """The broker's ZooKeeper session was lost and restored: resign, then run again."""

    name = "Reelect"


class BrokerChange(ControllerEvent):
    """/brokers/ids changed: brokers came or went."""

    name = "BrokerChange"


class TopicChange(ControllerEvent):
    """/brokers/topics changed: topics created or deleted."""

    name = "TopicChange"


class TopicDeletion(ControllerEvent):
    """/admin/delete_topics changed: topics to delete."""

    name = "TopicDeletion"


class TopicDeletionStopReplicaResponseReceived(ControllerEvent):
    """A broker answered the StopReplica(delete) of a topic being deleted."""

    name = "TopicDeletionStopReplicaResponseReceived"


class PartitionModifications(ControllerEvent):
    """A topic's assignment changed (partitions added, a reassignment written to its znode)."""

    name = "PartitionModifications"


class IsrChangeNotification(ControllerEvent):
    """Leaders changed ISRs (/isr_change_notification): tell every broker's metadata."""

    name = "IsrChangeNotification"


class AutoPreferredReplicaLeaderElection(ControllerEvent):
    """The periodic check of auto.leader.rebalance.enable."""

    name = "AutoPreferredReplicaLeaderElection"


class ApiCall(ControllerEvent):
    """A request a broker handler hands the controller (ControlledShutdown, ElectLeaders, reassignments), by API."""

    name = "ApiCall"


class Marker(ControllerEvent):
    """Work queued behind whatever is queued now (a starting broker waits for its own failover's requests)."""

    name = "Marker"
