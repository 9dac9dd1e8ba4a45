"""Connections to a Kafka cluster for the broker backends: metadata from any broker, data from leaders.

Kafka serves a partition's reads and writes only on its leader, which Metadata names by node id
(with each node's host and port). One broker is the common case here, but nothing assumes that the
bootstrap address is the leader: a partition is always asked of the node Metadata says leads it,
over one connection per node, opened on first use. The bootstrap list, the metadata view and the
connections are `kafkalite.client.KafkaClient`'s (one routing for the CLI and Spark).

Failures Kafka's clients retry (a leader that moved, a broker restarting, a dropped connection) are
retried with backoff, forgetting connections and leaders in between, until `default.api.timeout.ms`.
A cluster that cannot be reached at all fails at once, naming the bootstrap servers: that is a
configuration mistake far more often than an outage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from kafkalite.backoff import Backoff as PacedRetries
from kafkalite.client import BrokerConnection, KafkaClient
from kafkalite.error_codes import RETRIABLE as KAFKA_RETRIABLE
from kafkalite.error_codes import error_name
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.spark.backend import TopicPartition
from kafkalite.spark.broker_settings import BrokerSettings
from kafkalite.spark.errors import BrokerError, UnknownTopicError

log = logging.getLogger("kafkalite.spark")

T = TypeVar("T")

# Errors retried until kafka.default.api.timeout.ms: Kafka's RetriableException set, less a corrupt answer
# (reported at once: a retry reads the same bytes), plus BROKER_NOT_AVAILABLE, which kafkalite's client answers
# for a broker it cannot reach (a restart, a leader moving).
RETRIABLE = (KAFKA_RETRIABLE - {ErrorCode.CORRUPT_MESSAGE}) | {ErrorCode.BROKER_NOT_AVAILABLE}


class RetriableError(Exception):
    """A transient condition (leader moved, broker starting): `Cluster.retrying` tries again."""


@dataclass(slots=True)
class TopicMetadata:
    error: int
    internal: bool
    leaders: dict[int, int] = field(default_factory=dict)  # partition -> leader node id (-1: none now)


class Cluster:
    """The brokers of one `kafka.bootstrap.servers`, as seen from one Spark process: a KafkaClient (its
    bootstrap list, metadata view and per-broker connections), with the errors Spark reports."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        try:
            self.client = KafkaClient(settings.bootstrap_servers, client_id=settings.client_id,
                                      timeout_s=settings.request_timeout_ms / 1000,
                                      connect_timeout_s=settings.connect_timeout_ms / 1000,
                                      retry_timeout_s=settings.api_timeout_ms / 1000,
                                      retry_backoff_s=settings.retry_backoff_ms / 1000,
                                      security=settings.security())
        except OSError as exc:  # unreachable from the start: a wrong address, or no broker running
            raise BrokerError(f"cannot reach any Kafka broker of kafka.bootstrap.servers={settings.bootstrap_servers} "
                              f"({exc}); check the address and that the broker is running") from None

    # --- connections ------------------------------------------------------------------------------

    def any_broker(self) -> BrokerConnection:
        """A connection for cluster-wide requests (Metadata, CreateTopics)."""
        try:
            return self.client.any_broker()
        except OSError as exc:
            raise RetriableError(f"cannot reach any Kafka broker of kafka.bootstrap.servers="
                                 f"{self.settings.bootstrap_servers} ({exc})") from None

    def controller(self) -> BrokerConnection:
        """Where CreateTopics goes: the controller Metadata names (older Kafka accepts it nowhere else;
        newer brokers forward it), else any broker."""
        view = self.client.cluster
        if view.controller_id not in view.brokers:
            self.metadata([])
        return self.node(view.controller_id) if view.controller_id in view.brokers else self.any_broker()

    def node(self, node_id: int) -> BrokerConnection:
        """The connection to one broker, by the node id Metadata gave."""
        if node_id not in self.client.cluster.brokers:
            raise RetriableError(f"broker {node_id} is not in the cluster's metadata")
        try:
            return self.client.broker(node_id)
        except OSError as exc:
            info = self.client.cluster.brokers[node_id]
            raise RetriableError(f"cannot reach broker {node_id} at {info.host}:{info.port}: {exc}") from None

    def drop(self, node_id: int) -> None:
        """Close one connection (broken, or left with an answer nobody will read)."""
        self.client.drop(node_id)

    def reset(self) -> None:
        """Forget every connection and leader: after an error, everything is looked up again."""
        self.client.close_connections()
        self.forget_leaders()

    def close(self) -> None:
        self.client.close()

    # --- metadata ---------------------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None) -> dict[str, TopicMetadata]:
        """Metadata of some topics (all when None), refreshing the known brokers and leaders."""
        wanted = None if topics is None else sorted(set(topics))
        try:
            resp = self.any_broker().request(ApiKey.METADATA, {
                "topics": None if wanted is None else [{"name": t} for t in wanted],
                "allow_auto_topic_creation": False})
        except OSError as exc:
            raise RetriableError(f"Metadata: {exc}") from None
        self.client.cluster.update(resp)
        out: dict[str, TopicMetadata] = {}
        for t in resp.get("topics", []):
            name = t.get("name")
            if not name:
                continue
            info = TopicMetadata(t["error_code"], bool(t.get("is_internal")))
            for p in self.client.cluster.partitions_of(name):
                info.leaders[p.partition] = p.leader
            out[name] = info
        return out

    def leader_epochs(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """current_leader_epoch for Fetch and ListOffsets, from the latest Metadata."""
        return self.client.leader_epochs(tps)

    def leaders(self, tps: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
        """Partitions grouped by their leader's node id.

        Raises UnknownTopicError for a partition that does not exist, RetriableError for one that
        has no leader right now.
        """
        tps = list(tps)
        view = self.client.cluster
        unknown = sorted({t for t, p in tps if view.leader((t, p)) < 0})
        if unknown:
            found = self.metadata(unknown)
            for topic in unknown:
                info = found.get(topic)
                if info is None or info.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise UnknownTopicError(f"topic {topic} does not exist on the broker(s) at "
                                            f"{self.settings.bootstrap_servers}")
                if info.error and info.error not in RETRIABLE:
                    raise BrokerError(f"metadata of topic {topic}: {error_name(info.error)}")
        groups: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            leader = view.leader(tp)
            if leader < 0:
                known = self.metadata([tp[0]]).get(tp[0])
                if known is not None and tp[1] not in known.leaders and not known.error:
                    raise UnknownTopicError(f"partition {tp[0]}-{tp[1]} does not exist on the broker(s) at "
                                            f"{self.settings.bootstrap_servers} ({tp[0]} has partitions "
                                            f"{sorted(known.leaders)})")
                raise RetriableError(f"{tp[0]}-{tp[1]} has no leader right now")
            groups.setdefault(leader, []).append(tp)
        return groups

    def forget_leaders(self) -> None:
        self.client.cluster.partitions.clear()

    # --- retries ----------------------------------------------------------------------------------

    def backoff(self, what: str) -> Backoff:
        return Backoff(self, what)

    def retrying(self, what: str, attempt: Callable[[], T]) -> T:
        """`attempt()` until it succeeds; transient failures are retried with backoff until
        default.api.timeout.ms, with connections and leaders looked up afresh each time."""
        backoff = self.backoff(what)
        while True:
            try:
                return attempt()
            except (RetriableError, OSError) as exc:
                backoff.failed(exc)


class Backoff:
    """Retry pacing for one operation: waits that double up to 1 s, for at most default.api.timeout.ms
    since the operation last made progress; then a BrokerError saying what kept failing."""

    def __init__(self, cluster: Cluster, what: str) -> None:
        self.cluster = cluster
        self.what = what
        self.reset()

    def reset(self) -> None:
        """Progress was made: the next failure starts a fresh budget."""
        settings = self.cluster.settings
        self.pacing = PacedRetries(settings.retry_backoff_ms / 1000, 1.0, settings.api_timeout_ms / 1000)

    def failed(self, exc: BaseException) -> None:
        """Wait before the next attempt (connections and leaders forgotten), or give up."""
        settings = self.cluster.settings
        delay = self.pacing.next_delay()
        if delay is None:
            raise BrokerError(f"{self.what} failed: {exc} (still failing after {settings.api_timeout_ms} ms of "
                              f"retries; kafka.bootstrap.servers={settings.bootstrap_servers}; "
                              "kafka.default.api.timeout.ms sets how long to retry)") from None
        log.info("%s: %s; retrying in %.0f ms", self.what, exc, delay * 1000)
        self.cluster.reset()
        time.sleep(delay)
