"""A small blocking Kafka client over kafkalite's protocol codec, for the CLI and tools.

It speaks to any Kafka broker (version negotiation through ApiVersions picks the highest version both
sides know), so `kafkalite topics` works against Apache Kafka too, and to a cluster: the bootstrap list
is tried in order, Metadata gives the brokers and each partition's leader and leader epoch, and
partition requests (Produce, Fetch, ListOffsets, DeleteRecords) go to the leader over one connection
per broker, opened on first use; group requests go to the group's coordinator (FindCoordinator).
The errors Kafka's clients retry (a moved leader, an election in progress, a broker restarting, a
dropped connection) are retried with backoff, refreshing metadata, until `retry_timeout_s`. A Produce
whose connection fails after sending, or that times out, may or may not have been written: that is
raised as ProduceOutcomeUnknown and never retried (a retry could write it twice).

Reading across a leader change detects log truncation as Kafka's consumers do (KIP-320): `consume`
remembers the leader epoch of the last batch it returned; when Metadata shows a new leader epoch it
asks the new leader (OffsetsForLeaderEpoch) where that epoch ends, and an end below its position
means the records it returned past that end were discarded (an unclean election, or acks=1 data the
old leader never replicated): LogTruncationError, or with `reset_on_truncation` a warning and a seek to
the divergence point (what Kafka's consumer does when auto.offset.reset is set).

Real applications should use a full client (librdkafka, the Java client); this one exists so
kafkalite's own tools and the Spark connector's broker mode need no extra dependency.

Framing and correlation ids are `kafkalite.protocol.connection`'s; `BrokerConnection` only moves its
bytes. Requests can be pipelined (`send` several, then `receive` their answers in the same order,
which Kafka guarantees per connection): the Spark reader asks for the next chunk of a partition
while it decodes the previous one.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafkalite.backoff import Backoff
from kafkalite.error_codes import INVALID_METADATA
from kafkalite.errors import KafkaliteError
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, ErrorCode
from kafkalite.protocol.api_keys import api_name
from kafkalite.protocol.config_resources import ConfigResourceType
from kafkalite.protocol.connection import ClientConnection
from kafkalite.records.batch import RecordBatch, iter_batches
from kafkalite.security.transport import PLAINTEXT_CLIENT, ClientSecurity, connect

log = logging.getLogger("kafkalite.client")
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class KafkaClientError(KafkaliteError):
    def __init__(self, error_code: int, message: str) -> None:
        try:
            name = ErrorCode(error_code).name
        except ValueError:
            name = f"error {error_code}"
        super().__init__(f"{name}: {message}")
        self.error_code = error_code


class ProduceOutcomeUnknown(KafkaClientError):
    """A Produce was sent but its answer never came (the connection failed, or the request timed out):
    the records may or may not have been written. Not retried, since a retry could write them twice."""


TopicPartition = tuple[str, int]


class LogTruncationError(KafkaClientError):
    """Kafka's LogTruncationException (KIP-320): the log was truncated below a consumer's position, so
    records already returned are not in the leader's history. `divergent` is, per partition, the offset
    where the leader's history leaves the consumer's (the end offset the leader gives for the epoch of
    the last record returned) and that epoch; -1 when the leader does not know the epoch at all."""

    def __init__(self, positions: Mapping[TopicPartition, int], divergent: Mapping[TopicPartition, tuple[int, int]]
                 ) -> None:
        what = "; ".join(f"{t}-{p}: position {positions[(t, p)]}, the leader's log diverges at offset {o}"
                         for (t, p), (o, _e) in sorted(divergent.items()))
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, f"log truncation detected ({what})")
        self.positions = dict(positions)
        self.divergent = dict(divergent)

# Answers after which Kafka's clients refresh metadata and retry (InvalidMetadataException): the partition's
# leader is elsewhere, being elected, not known yet, or its log dir is offline.
REFRESH_AND_RETRY = INVALID_METADATA
# Retried at the same broker after a pause: it is behind us (its LeaderAndIsr has not arrived yet), or busy.
RETRY_SAME_BROKER = frozenset({ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE})
# Produce answers retried (nothing was written); NOT_ENOUGH_REPLICAS_AFTER_APPEND is not: it was written.
PRODUCE_RETRY = REFRESH_AND_RETRY | RETRY_SAME_BROKER | {ErrorCode.NOT_ENOUGH_REPLICAS}
# Group answers after which the coordinator is looked up again, or asked again after a pause.
# REQUEST_TIMED_OUT: a commit the coordinator's replicas did not confirm in time (Kafka's clients also
# mark the coordinator unknown and retry).
COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.REQUEST_TIMED_OUT})
COORDINATOR_RETRY = COORDINATOR_MOVED | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


def parse_bootstrap_servers(servers: str) -> list[tuple[str, int]]:
    """Every `host:port` of a comma-separated list (Kafka's bootstrap.servers), in order.

    Accepts Kafka's listener form (`PLAINTEXT://host:port`) and bracketed IPv6 (`[::1]:9092`).
    """
    out = []
    for item in servers.split(","):
        entry = item.strip()
        if not entry:
            continue
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        host, _, port = entry.rpartition(":")
        host = host.strip()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {item.strip()!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise ValueError(f"bootstrap servers {servers!r} name no host:port")
    return out


def parse_bootstrap(servers: str) -> tuple[str, int]:
    """The first address of a bootstrap list."""
    return parse_bootstrap_servers(servers)[0]


def fetch_request(partitions: Sequence[tuple[str, int, int, int]], *, max_bytes: int, max_wait_ms: int = 500,
                  min_bytes: int = 1, isolation_level: int = READ_UNCOMMITTED,
                  leader_epochs: Mapping[tuple[str, int], int] | None = None) -> dict[str, Any]:
    """A Fetch body for (topic, partition, offset, partition max bytes) entries, no fetch session;
    `leader_epochs` gives current_leader_epoch per partition (-1, no check, for those it lacks)."""
    epochs = leader_epochs or {}
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset, partition_max in partitions:
        topics.setdefault(topic, []).append({"partition": partition, "fetch_offset": offset,
                                             "partition_max_bytes": partition_max,
                                             "current_leader_epoch": epochs.get((topic, partition), -1),
                                             "log_start_offset": -1})
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
            "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""}


def produce_request(batches: Mapping[tuple[str, int], Sequence[bytes | memoryview]], *, acks: int,
                    timeout_ms: int) -> dict[str, Any]:
    """A Produce body carrying each partition's record batches back to back (no transaction)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), data in batches.items():
        topics.setdefault(topic, []).append({"index": partition, "records": list(data)})
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]}


class BrokerConnection:
    """One blocking connection to one broker: a socket moving a ClientConnection's bytes.

    Raises OSError (ConnectionError when the broker closes it) on network failures; after one, or after
    a send or read cut short (e.g. by Ctrl-C), the byte stream cannot be trusted and the connection
    refuses further use (`broken`)."""

    def __init__(self, host: str, port: int, client_id: str | None = "kafkalite-cli", timeout_s: float = 30.0,
                 connect_timeout_s: float | None = None, node_id: int = -1,
                 security: ClientSecurity = PLAINTEXT_CLIENT) -> None:
        self.host, self.port, self.node_id = host, port, node_id
        self.timeout_s = timeout_s
        sock = connect(host, port, security, connect_timeout_s or timeout_s)
        sock.settimeout(timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._conn = ClientConnection(client_id)
        self._broken = ""  # why the byte stream can no longer be trusted
        self.versions: dict[int, int] = {}  # api key -> the version used: the highest both sides have
        self.broker_versions: dict[int, tuple[int, int]] = {}  # api key -> (min, max) the broker announced
        try:
            self._negotiate()
        except BaseException:
            sock.close()
            raise

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def client_id(self) -> str | None:
        return self._conn.client_id

    @property
    def broken(self) -> bool:
        """True once a send or read failed or was cut short: no further request can be framed."""
        return bool(self._broken)

    @property
    def pending(self) -> int:
        """Requests sent whose answers were not received yet."""
        return self._conn.pending

    def fileno(self) -> int:
        """The socket's descriptor, for waiting on several connections' answers at once (select/poll)."""
        return self._sock.fileno()

    def close(self) -> None:
        self._broken = self._broken or "close()"
        self._sock.close()

    def send(self, api: int, body: dict[str, Any], version: int | None = None, expect_response: bool = True) -> int:
        """Send a request without waiting; `receive` returns the answers in the order sent."""
        if self._broken:
            raise ConnectionError(f"the connection to {self.address} is unusable after {self._broken}")
        if not self._conn.pending and self._peer_closed():
            # The broker went away since the last answer (it died, or restarted): say so before sending,
            # so the caller knows nothing was written and may simply reconnect (a produce included).
            self._broken = "the broker closed it"
            self._sock.close()
            raise ConnectionError(f"the broker at {self.address} closed the connection")
        v = self.versions.get(api, 0) if version is None else version
        correlation, frame = self._conn.send_request(api, v, body, expect_response)
        try:
            self._sock.sendall(frame)
        except BaseException as exc:
            self._broken = f"an interrupted send ({exc!r})"
            raise
        return correlation

    def _peer_closed(self) -> bool:
        """True when the idle connection has been closed (or reset) by the broker: with nothing asked,
        anything readable can only be end of stream or an error."""
        try:
            poller = select.poll()  # not select.select: it refuses descriptors >= 1024 (FD_SETSIZE)
            poller.register(self._sock, select.POLLIN)
            if not poller.poll(0):
                return False
            if isinstance(self._sock, ssl.SSLSocket):
                return self._tls_peer_closed(self._sock)
            return self._sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _tls_peer_closed(self, sock: ssl.SSLSocket) -> bool:
        """The readable bytes of an idle TLS connection may be TLS records without data (TLS 1.3 session
        tickets), and a TLS socket cannot peek: read without blocking; data while idle is not expected, so
        it counts as unusable too."""
        timeout = sock.gettimeout()
        sock.setblocking(False)
        try:
            return len(sock.recv(1)) >= 0
        except ssl.SSLWantReadError:
            return False
        finally:
            sock.settimeout(timeout)

    def receive(self) -> dict[str, Any]:
        """The answer to the oldest request sent and not yet received."""
        if self._broken:
            raise ConnectionError(f"the connection to {self.address} is unusable after {self._broken}")
        if not self._conn.pending:
            raise RuntimeError("receive() with no request awaiting an answer")
        try:
            while True:
                n = self._sock.recv_into(self._conn.recv_buffer())
                if n == 0:
                    raise ConnectionError(f"the broker at {self.address} closed the connection")
                done = self._conn.received(n)
                if done is not None:
                    return done[1]
        except BaseException as exc:  # e.g. Ctrl-C mid-read: the stream position is lost
            self._broken = f"an interrupted read ({exc!r})"
            raise

    def request(self, api: int, body: dict[str, Any], version: int | None = None,
                expect_response: bool = True) -> dict[str, Any]:
        if self._conn.pending:
            raise RuntimeError("request() with pipelined requests still unanswered; receive() them first")
        self.send(api, body, version, expect_response)
        return self.receive() if expect_response else {}

    def _negotiate(self) -> None:
        resp = self.request(ApiKey.API_VERSIONS, {}, version=0)
        for k in resp.get("api_keys", []):
            self.broker_versions[k["api_key"]] = (k["min_version"], k["max_version"])
            ours = SUPPORTED_VERSIONS.get(k["api_key"])
            if ours is None:
                continue
            hi = min(ours[1], k["max_version"])
            if hi >= max(ours[0], k["min_version"]):
                self.versions[k["api_key"]] = hi


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as Metadata described it: leader -1 when it has none (LEADER_NOT_AVAILABLE), leader
    epoch -1 when the broker does not say (Metadata before v7)."""

    topic: str
    partition: int
    error_code: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()


@dataclass(slots=True)
class ClusterView:
    """What the latest Metadata answers said: brokers, controller, topics' errors and partitions."""

    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    topic_errors: dict[str, int] = field(default_factory=dict)
    partitions: dict[TopicPartition, PartitionInfo] = field(default_factory=dict)

    def leader(self, tp: TopicPartition) -> int:
        """The leader's node id, -1 when unknown or none."""
        p = self.partitions.get(tp)
        return -1 if p is None or p.leader not in self.brokers else p.leader

    def leader_epoch(self, tp: TopicPartition) -> int:
        p = self.partitions.get(tp)
        return -1 if p is None else p.leader_epoch

    def partitions_of(self, topic: str) -> list[PartitionInfo]:
        return sorted((p for (t, _), p in self.partitions.items() if t == topic), key=lambda p: p.partition)

    def update(self, resp: Mapping[str, Any]) -> None:
        """Take in a Metadata answer: brokers are replaced (it lists all live ones), the topics it
        answered for are replaced, others kept."""
        brokers = {b["node_id"]: BrokerInfo(b["node_id"], b["host"], b["port"], b.get("rack"))
                   for b in resp.get("brokers", [])}
        if brokers:
            self.brokers = brokers
        self.controller_id = resp.get("controller_id", -1)
        self.cluster_id = resp.get("cluster_id", self.cluster_id)
        for t in resp.get("topics", []):
            name = t.get("name")
            if not name:
                continue
            self.topic_errors[name] = t["error_code"]
            for key in [k for k in self.partitions if k[0] == name]:
                del self.partitions[key]
            for p in t.get("partitions", []):
                leader = p["leader_id"] if p["error_code"] in (0, ErrorCode.REPLICA_NOT_AVAILABLE) else -1
                self.partitions[(name, p["partition_index"])] = PartitionInfo(
                    name, p["partition_index"], p["error_code"], leader, p.get("leader_epoch", -1),
                    tuple(p.get("replica_nodes") or ()), tuple(p.get("isr_nodes") or ()),
                    tuple(p.get("offline_replicas") or ()))


class _Retry:
    """Backoff for one operation: waits that double from `retry_backoff_s` up to 1 s, until a deadline."""

    def __init__(self, client: KafkaClient) -> None:
        self.backoff = Backoff(client.retry_backoff_s, 1.0, client.retry_timeout_s)

    def wait(self) -> bool:
        """Sleep before the next attempt; False (without sleeping) when that would pass the deadline."""
        delay = self.backoff.next_delay()
        if delay is None:
            return False
        time.sleep(delay)
        return True


def _error_answer(tp: TopicPartition, code: int, message: str) -> dict[str, Any]:
    """An answer for a partition no broker answered for (no leader known, or its broker unreachable)."""
    return {"partition_index": tp[1], "index": tp[1], "error_code": code, "error_message": message}


class KafkaClient:
    """A Kafka cluster, reached through `bootstrap` (a comma-separated host:port list, tried in order).

    `send`/`receive`/`request`/`versions` talk to the bootstrap connection (any broker; cluster-wide
    requests). The data methods route each partition to its leader and the group methods to the
    group's coordinator, retrying as the module doc says. Raises ConnectionError naming every address
    tried when none accepts a connection."""

    def __init__(self, bootstrap: str, client_id: str = "kafkalite-cli", timeout_s: float = 30.0,
                 connect_timeout_s: float | None = None, retry_timeout_s: float | None = None,
                 retry_backoff_s: float = 0.1, security: ClientSecurity = PLAINTEXT_CLIENT) -> None:
        self.client_id = client_id
        self.security = security  # how every connection of this client is secured (TLS, SASL)
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry_timeout_s = timeout_s if retry_timeout_s is None else retry_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.bootstrap = parse_bootstrap_servers(bootstrap)
        self.cluster = ClusterView()
        self._nodes: dict[int, BrokerConnection] = {}
        self._coordinators: dict[str, int] = {}
        self._any: BrokerConnection = self._connect_any()

    # --- connections ------------------------------------------------------------------------------

    def _open(self, host: str, port: int, node_id: int = -1) -> BrokerConnection:
        return BrokerConnection(host, port, self.client_id, self.timeout_s, self.connect_timeout_s, node_id,
                                security=self.security)

    def _connect_any(self) -> BrokerConnection:
        """The first address that accepts: the bootstrap list, then the brokers Metadata named."""
        failures = []
        known = [(b.host, b.port) for b in self.cluster.brokers.values()]
        for host, port in [*self.bootstrap, *(a for a in known if a not in self.bootstrap)]:
            try:
                return self._open(host, port)
            except OSError as exc:
                failures.append(f"{host}:{port}: {exc.strerror or exc}")
        raise ConnectionError("cannot connect to " + "; ".join(failures))

    def any_broker(self) -> BrokerConnection:
        """A working connection for cluster-wide requests, reconnecting (to any broker) if it broke."""
        if self._any.broken:
            self._any.close()
            self._any = self._connect_any()
        return self._any

    def broker(self, node_id: int) -> BrokerConnection:
        """The connection to one broker by node id (Metadata's), opened on first use. OSError when the
        broker cannot be reached; KeyError when Metadata does not name it."""
        conn = self._nodes.get(node_id)
        if conn is not None and conn.broken:
            self.drop(node_id)
            conn = None
        if conn is None:
            info = self.cluster.brokers[node_id]
            conn = self._nodes[node_id] = self._open(info.host, info.port, node_id)
        return conn

    def connections(self) -> dict[int, BrokerConnection]:
        """The open connections to brokers by node id (not the bootstrap connection)."""
        return dict(self._nodes)

    def drop(self, node_id: int) -> None:
        """Close one broker's connection (broken, or left with answers nobody will read)."""
        conn = self._nodes.pop(node_id, None)
        if conn is not None:
            conn.close()

    @property
    def host(self) -> str:
        return self._any.host

    @property
    def port(self) -> int:
        return self._any.port

    @property
    def address(self) -> str:
        return self._any.address

    @property
    def versions(self) -> dict[int, int]:
        return self._any.versions

    @property
    def broken(self) -> bool:
        return self._any.broken

    @property
    def pending(self) -> int:
        return self._any.pending

    def close_connections(self) -> None:
        """Close every connection; the next request opens what it needs (the bootstrap list first)."""
        for node in list(self._nodes):
            self.drop(node)
        self._any.close()

    def close(self) -> None:
        self.close_connections()

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api: int, body: dict[str, Any], version: int | None = None, expect_response: bool = True) -> int:
        """Send to the bootstrap connection without waiting; `receive` returns the answers in order."""
        return self._any.send(api, body, version, expect_response)

    def receive(self) -> dict[str, Any]:
        return self._any.receive()

    def request(self, api: int, body: dict[str, Any], version: int | None = None,
                expect_response: bool = True) -> dict[str, Any]:
        """One request to any broker, answered (reconnecting first if the connection broke)."""
        return self.any_broker().request(api, body, version, expect_response)

    # --- metadata ---------------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None, allow_auto_topic_creation: bool = False) -> dict[str, Any]:
        """Brokers, and topics with their partitions and leaders (all topics when `topics` is None), as the
        broker answered; the client's view (`cluster`) is updated from it."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow_auto_topic_creation,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
        try:
            resp = self.request(ApiKey.METADATA, body)
        except OSError:
            # The broker behind the cluster-wide connection went away (a killed leader it also was, say): the
            # connection is broken now, so asking again reconnects to another one. Metadata changes nothing,
            # so asking twice is safe, as Kafka's client asks the next node.
            resp = self.request(ApiKey.METADATA, body)
        self.cluster.update(resp)
        return resp

    def refresh_metadata(self, topics: Iterable[str] | None = None) -> ClusterView:
        """Metadata again (from any broker, reconnecting if needed); the updated view."""
        self.metadata(None if topics is None else sorted(set(topics)))
        return self.cluster

    # --- routing ----------------------------------------------------------------------------------

    # over the complexity limit: still to split (issue 34)
    def _routed(self, what: str, items: Mapping[TopicPartition, Any], api: int,  # noqa: C901
                build: Callable[[dict[TopicPartition, Any], int], dict[str, Any]],
                answers: Callable[[dict[str, Any]], Iterable[tuple[TopicPartition, dict[str, Any]]]],
                retry: frozenset[int] = REFRESH_AND_RETRY | RETRY_SAME_BROKER, produce: bool = False,
                expect_response: bool = True) -> dict[TopicPartition, dict[str, Any]]:
        """Send each partition's item to its leader (one request per leader, pipelined across leaders),
        retrying partitions whose answer is in `retry`, or whose leader is unknown or unreachable, until
        retry_timeout_s; then their last answer. `build(items, version)` makes a request body. A Produce
        (`produce`) whose connection fails after the send raises ProduceOutcomeUnknown."""
        todo = dict(items)
        done: dict[TopicPartition, dict[str, Any]] = {}
        last: dict[TopicPartition, dict[str, Any]] = {}
        retry_state = _Retry(self)
        refresh = any(self.cluster.leader(tp) < 0 for tp in todo)
        while True:
            fresh = False
            if refresh:
                try:
                    self.refresh_metadata({t for t, _ in todo})
                    fresh = True
                except OSError as exc:
                    last.update({tp: _error_answer(tp, ErrorCode.BROKER_NOT_AVAILABLE, f"Metadata: {exc}")
                                 for tp in todo})
            refresh = False
            groups: dict[int, dict[TopicPartition, Any]] = {}
            for tp, item in list(todo.items()):
                leader = self.cluster.leader(tp)
                if fresh and self.cluster.topic_errors.get(tp[0]) == 0 and tp not in self.cluster.partitions:
                    # The topic exists and Metadata just listed its partitions: this one is not among them.
                    done[tp] = _error_answer(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                             f"{tp[0]} has no partition {tp[1]}")
                    del todo[tp]
                elif leader < 0:
                    p = self.cluster.partitions.get(tp)
                    code = p.error_code if p is not None and p.error_code else \
                        self.cluster.topic_errors.get(tp[0]) or (ErrorCode.LEADER_NOT_AVAILABLE if p is not None
                                                                 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    last[tp] = _error_answer(tp, code, f"{tp[0]}-{tp[1]} has no known leader")
                    refresh = True
                else:
                    groups.setdefault(leader, {})[tp] = item
            sent: list[tuple[int, dict[TopicPartition, Any]]] = []
            for node, part in groups.items():
                try:
                    conn = self.broker(node)
                    conn.send(api, build(part, conn.versions.get(api, 0)), expect_response=expect_response)
                except OSError as exc:
                    self.drop(node)  # a send cut short leaves the broker an incomplete frame: nothing written
                    last.update({tp: _error_answer(tp, ErrorCode.BROKER_NOT_AVAILABLE,
                                                   f"broker {node}: {exc.strerror or exc}") for tp in part})
                    refresh = True
                    continue
                sent.append((node, part))
            for node, part in sent:
                if not expect_response:
                    done.update({tp: {} for tp in part})
                    todo = {tp: v for tp, v in todo.items() if tp not in part}
                    continue
                try:
                    resp = self._nodes[node].receive()
                except OSError as exc:
                    self.drop(node)
                    if produce:
                        raise ProduceOutcomeUnknown(ErrorCode.NETWORK_EXCEPTION,
                                                    f"{what}: the connection to broker {node} failed after the "
                                                    f"Produce was sent ({exc}); the records of "
                                                    f"{_names(part)} may or may not have been written") from None
                    last.update({tp: _error_answer(tp, ErrorCode.NETWORK_EXCEPTION, f"broker {node}: {exc}")
                                 for tp in part})
                    refresh = True
                    continue
                for tp, ans in answers(resp):
                    if tp not in part:
                        continue
                    code = ans.get("error_code", 0)
                    if code in retry:
                        last[tp] = ans
                        refresh = refresh or code not in RETRY_SAME_BROKER
                    else:
                        done[tp] = ans
                        del todo[tp]
            todo = {tp: v for tp, v in todo.items() if tp not in done}
            if not todo:
                return done
            log.debug("%s: retrying %s", what, {f"{t}-{p}": last.get((t, p), {}).get("error_code") for t, p in todo})
            if not retry_state.wait():
                for tp in todo:
                    done[tp] = last.get(tp) or _error_answer(tp, ErrorCode.REQUEST_TIMED_OUT, what)
                return done

    # --- groups: the coordinator ------------------------------------------------------------------

    def coordinator(self, group: str) -> BrokerConnection:
        """The connection to `group`'s coordinator (FindCoordinator, cached until NOT_COORDINATOR),
        retrying while none is available."""
        node = self._coordinators.get(group)
        if node is not None and node in self.cluster.brokers:
            return self.broker(node)
        retry = _Retry(self)
        while True:
            try:
                res = self._find_coordinator(group)
                code = res["error_code"]
                if code == 0:
                    node = res["node_id"]
                    if node not in self.cluster.brokers or \
                            (self.cluster.brokers[node].host, self.cluster.brokers[node].port) != \
                            (res["host"], res["port"]):
                        self.cluster.brokers[node] = BrokerInfo(node, res["host"], res["port"])
                    conn = self.broker(node)
                    self._coordinators[group] = node
                    return conn
                failure: Exception = KafkaClientError(code, res.get("error_message") or f"coordinator of {group}")
                if code not in COORDINATOR_RETRY:
                    raise failure
            except OSError as exc:
                failure = exc
            if not retry.wait():
                raise failure

    def _find_coordinator(self, group: str) -> dict[str, Any]:
        conn = self.any_broker()
        res = conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0, "coordinator_keys": [group]})
        return res["coordinators"][0] if conn.versions.get(ApiKey.FIND_COORDINATOR, 0) >= 4 else res

    def group_request(self, group: str, api: int, body: dict[str, Any]) -> dict[str, Any]:
        """A group membership request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) sent to the group's
        coordinator, found again and retried on NOT_COORDINATOR and kin, as Kafka's consumer does."""
        return self._group_request(group, api, body, lambda res: int(res.get("error_code", 0)))

    def _group_request(self, group: str, api: int, body: dict[str, Any],
                       code_of: Callable[[dict[str, Any]], int]) -> dict[str, Any]:
        """One request to `group`'s coordinator; on NOT_COORDINATOR (and kin) or a failed connection the
        coordinator is looked up again and the request retried, until retry_timeout_s."""
        retry = _Retry(self)
        while True:
            node = -1
            try:
                conn = self.coordinator(group)
                node = conn.node_id
                res = conn.request(api, body)
                code = code_of(res)
                if code not in COORDINATOR_RETRY:
                    return res
                if code in COORDINATOR_MOVED:
                    self._coordinators.pop(group, None)
                failure: Exception = KafkaClientError(code, f"{api_name(api)} of group {group}")
            except OSError as exc:
                self._coordinators.pop(group, None)
                self.drop(node)
                failure = exc
            if not retry.wait():
                raise failure

    # --- admin ----------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None) -> dict[str, Any]:
        body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
                            "assignments": [], "configs": [{"name": k, "value": v}
                                                           for k, v in (configs or {}).items()]}],
                "timeout_ms": int(self.timeout_s * 1000)}
        res = self.request(ApiKey.CREATE_TOPICS, body)["topics"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or name)
        return res

    def delete_topic(self, name: str) -> None:
        v = self.versions.get(ApiKey.DELETE_TOPICS, 0)
        body: dict[str, Any] = {"timeout_ms": int(self.timeout_s * 1000)}
        if v >= 6:
            body["topics"] = [{"name": name}]
        else:
            body["topic_names"] = [name]
        res = self.request(ApiKey.DELETE_TOPICS, body)["responses"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or name)

    def describe_topic_configs(self, name: str) -> list[dict[str, Any]]:
        body = {"resources": [{"resource_type": ConfigResourceType.TOPIC, "resource_name": name,
                               "configuration_keys": None}]}
        res = self.request(ApiKey.DESCRIBE_CONFIGS, body)["results"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or name)
        return res["configs"]

    def describe_configs(self, resource_type: int, name: str) -> list[dict[str, Any]]:
        """Every config entry of a resource (2 = topic, 4 = broker), as DescribeConfigs answers."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}]}
        res = self.request(ApiKey.DESCRIBE_CONFIGS, body)["results"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or name)
        return res["configs"]

    def incremental_alter_configs(self, resource_type: int, name: str,
                                  ops: Sequence[tuple[str, int, str | None]]) -> None:
        """IncrementalAlterConfigs of one resource: (config name, operation 0 set / 1 delete, value)."""
        body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                               "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
                "validate_only": False}
        res = self.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, body)["responses"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or name)

    def create_partitions(self, topic: str, count: int) -> None:
        """Grow `topic` to `count` partitions (CreatePartitions)."""
        body = {"topics": [{"name": topic, "count": count, "assignments": None}],
                "timeout_ms": int(self.timeout_s * 1000), "validate_only": False}
        res = self.request(ApiKey.CREATE_PARTITIONS, body)["results"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or topic)

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], dict[str, Any]]:
        """DeleteRecords before each partition's offset (-1: the high watermark), at each partition's
        leader; each answer as given."""
        def build(part: dict[TopicPartition, Any], _v: int) -> dict[str, Any]:
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, partition), offset in part.items():
                topics.setdefault(topic, []).append({"partition_index": partition, "offset": offset})
            return {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                    "timeout_ms": int(self.timeout_s * 1000)}

        return self._routed("DeleteRecords", offsets, ApiKey.DELETE_RECORDS, build,
                            lambda res: (((t["name"], p["partition_index"]), p)
                                         for t in res["topics"] for p in t["partitions"]))

    def partition_count(self, topic: str, auto_create: bool = False, wait_s: float = 5.0) -> int:
        """How many partitions `topic` has; with `auto_create`, asks the broker to create it if it may
        (Metadata allow_auto_topic_creation), retrying while its leaders are not elected yet."""
        deadline = time.monotonic() + wait_s
        while True:
            t = next(iter(self.metadata([topic], allow_auto_topic_creation=auto_create)["topics"]))
            code = t["error_code"]
            if code == ErrorCode.NONE and t["partitions"] and not any(p["error_code"] for p in t["partitions"]):
                return len(t["partitions"])
            if code not in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE) or time.monotonic() > deadline:
                raise KafkaClientError(code or ErrorCode.LEADER_NOT_AVAILABLE, topic)
            time.sleep(0.1)

    # --- groups ---------------------------------------------------------------------------------

    def find_coordinator(self, group: str) -> tuple[str, int]:
        """host, port of `group`'s coordinator."""
        conn = self.coordinator(group)
        return conn.host, conn.port

    def offset_fetch(self, group: str, partitions: Mapping[str, Sequence[int]] | None = None
                     ) -> dict[tuple[str, int], int]:
        """Committed offsets of `group` (every partition it has one for when `partitions` is None)."""
        topics = None if partitions is None else [{"name": t, "partition_indexes": list(ps)}
                                                   for t, ps in partitions.items()]
        res = self._group_request(group, ApiKey.OFFSET_FETCH,
                                  {"group_id": group, "topics": topics, "require_stable": False,
                                   "groups": [{"group_id": group, "topics": topics}]},
                                  lambda r: r["groups"][0].get("error_code", 0) if "groups" in r
                                  else r.get("error_code", 0))
        if "groups" in res:
            g = res["groups"][0]
            code, got = g.get("error_code", 0), g.get("topics", [])
        else:
            code, got = res.get("error_code", 0), res.get("topics", [])
        if code:
            raise KafkaClientError(code, f"OffsetFetch of group {group}")
        out = {}
        for t in got:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise KafkaClientError(p["error_code"], f"{t['name']}-{p['partition_index']} of group {group}")
                if p["committed_offset"] >= 0:
                    out[(t["name"], p["partition_index"])] = p["committed_offset"]
        return out

    def offset_commit(self, group: str, offsets: Mapping[tuple[str, int], int], generation: int = -1,
                      member_id: str = "") -> dict[tuple[str, int], int]:
        """Commit offsets for `group`; error code per partition (0 = committed)."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_metadata": ""})
        body = {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        res = self._group_request(group, ApiKey.OFFSET_COMMIT, body, _first_partition_code)
        return {(t["name"], p["partition_index"]): p["error_code"] for t in res["topics"] for p in t["partitions"]}

    def list_groups(self, states: Sequence[str] = (), types: Sequence[str] = ()) -> dict[str, tuple[str, str, str]]:
        """Every group of the cluster (those in `states` / of `types` when given, case-insensitive) with its protocol
        type, state and group type ("" from brokers before ListGroups v4 / v5): ListGroups to each broker (a broker
        lists only the groups it coordinates), as Kafka's Admin.listConsumerGroups does. The filters are applied
        here too, for brokers whose ListGroups version cannot carry them."""
        out: dict[str, tuple[str, str, str]] = {}
        want_states = {s.lower() for s in states}
        want_types = {t.lower() for t in types}
        for node in sorted(self.refresh_metadata([]).brokers):
            res = self.broker(node).request(ApiKey.LIST_GROUPS, {"states_filter": list(states),
                                                                 "types_filter": list(types)})
            if res["error_code"]:
                raise KafkaClientError(res["error_code"], f"ListGroups of broker {node}")
            for g in res["groups"]:
                state, kind = g.get("group_state") or "", g.get("group_type") or ""
                wanted = (not want_states or state.lower() in want_states) and \
                    (not want_types or kind.lower() in want_types)
                if wanted:
                    out[g["group_id"]] = (g.get("protocol_type", ""), state, kind)
        return out

    def describe_group(self, group: str) -> dict[str, Any]:
        g = self._group_request(group, ApiKey.DESCRIBE_GROUPS,
                                {"groups": [group], "include_authorized_operations": False},
                                lambda r: r["groups"][0]["error_code"])["groups"][0]
        if g["error_code"]:
            raise KafkaClientError(g["error_code"], group)
        return g

    def delete_groups(self, groups: Sequence[str]) -> dict[str, int]:
        """DeleteGroups, each group at its coordinator: error code per group (0 = deleted)."""
        out = {}
        for group in groups:
            res = self._group_request(group, ApiKey.DELETE_GROUPS, {"groups_names": [group]},
                                      lambda r: r["results"][0]["error_code"])
            out.update({r["group_id"]: r["error_code"] for r in res["results"]})
        return out

    def delete_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete at the group's coordinator: the group's error code and each partition's (0 = deleted)."""
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, p in partitions:
            topics.setdefault(topic, []).append({"partition_index": p})
        body = {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        res = self._group_request(group, ApiKey.OFFSET_DELETE, body, lambda r: int(r["error_code"]))
        return int(res["error_code"]), {(t["name"], p["partition_index"]): p["error_code"]
                                        for t in res["topics"] for p in t["partitions"]}

    # --- log dirs -------------------------------------------------------------------------------

    def describe_log_dirs(self, topics: Mapping[str, Sequence[int]] | None = None) -> list[dict[str, Any]]:
        """DescribeLogDirs: every log dir with its partitions (all of them when `topics` is None)."""
        body = {"topics": None if topics is None else [{"topic": t, "partitions": list(ps)}
                                                       for t, ps in topics.items()]}
        res = self.request(ApiKey.DESCRIBE_LOG_DIRS, body)
        if res.get("error_code"):
            raise KafkaClientError(res["error_code"], "DescribeLogDirs")
        return res["results"]

    # --- data -----------------------------------------------------------------------------------

    def produce_many(self, batches: Mapping[tuple[str, int], bytes], acks: int = -1
                     ) -> dict[tuple[str, int], dict[str, Any]]:
        """A batch per partition, each sent to its partition's leader (one Produce per leader); each
        partition's answer as the broker gave it. Retries what was certainly not written (see
        PRODUCE_RETRY); raises ProduceOutcomeUnknown when an answer was lost (see the module doc)."""
        timeout_ms = int(self.timeout_s * 1000)

        def build(part: dict[TopicPartition, Any], _v: int) -> dict[str, Any]:
            return produce_request({tp: [b] for tp, b in part.items()}, acks=acks, timeout_ms=timeout_ms)

        res = self._routed("Produce", batches, ApiKey.PRODUCE, build,
                           lambda r: (((t["name"], p["index"]), p) for t in r["responses"]
                                      for p in t["partition_responses"]),
                           retry=PRODUCE_RETRY, produce=True, expect_response=acks != 0)
        return {} if acks == 0 else res

    def fetch_many(self, positions: Mapping[tuple[str, int], int], partition_max_bytes: int = 1 << 20,
                   max_wait_ms: int = 500, isolation_level: int = READ_UNCOMMITTED
                   ) -> dict[tuple[str, int], tuple[dict[str, Any], bytes]]:
        """Fetch many partitions from their leaders (one Fetch per leader, with each partition's leader
        epoch): (partition answer, its record bytes) per partition."""
        def build(part: dict[TopicPartition, Any], _v: int) -> dict[str, Any]:
            return fetch_request([(t, p, off, partition_max_bytes) for (t, p), off in part.items()],
                                 max_bytes=max(partition_max_bytes * len(part), 1 << 20), max_wait_ms=max_wait_ms,
                                 isolation_level=isolation_level, leader_epochs=self.leader_epochs(part))

        res = self._routed("Fetch", positions, ApiKey.FETCH, build,
                           lambda r: (((t["topic"], p["partition_index"]), p) for t in r["responses"]
                                      for p in t["partitions"]))
        return {tp: (p, bytes(p.get("records") or b"")) for tp, p in res.items()}

    def leader_epochs(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """current_leader_epoch per partition, from Metadata (-1, no check, when it did not say)."""
        return {tp: self.cluster.leader_epoch(tp) for tp in tps}

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1) -> dict[str, Any]:
        """One batch to the partition's leader; its answer. KafkaClientError for an error answer,
        ProduceOutcomeUnknown when the outcome cannot be known (REQUEST_TIMED_OUT, lost connection)."""
        res = self.produce_many({(topic, partition): batch}, acks=acks)
        if acks == 0:
            return {}
        part = res[(topic, partition)]
        code = part["error_code"]
        if code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION):
            raise ProduceOutcomeUnknown(code, f"{topic}-{partition}: {part.get('error_message') or 'no answer'}; "
                                              "the records may or may not have been written")
        if code:
            raise KafkaClientError(code, part.get("error_message") or f"{topic}-{partition}")
        return part

    def list_offsets(self, queries: Mapping[tuple[str, int], int], isolation_level: int = READ_UNCOMMITTED
                     ) -> dict[tuple[str, int], dict[str, Any]]:
        """ListOffsets for many partitions at once, each at its leader: timestamp (-2 earliest, -1 latest,
        else the first offset at or after it) per partition; each answer as the broker gave it, error
        code included."""
        def build(part: dict[TopicPartition, Any], _v: int) -> dict[str, Any]:
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, partition), ts in part.items():
                topics.setdefault(topic, []).append({"partition_index": partition, "timestamp": ts,
                                                     "current_leader_epoch": self.cluster.leader_epoch(
                                                         (topic, partition))})
            return {"replica_id": -1, "isolation_level": isolation_level,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

        return self._routed("ListOffsets", queries, ApiKey.LIST_OFFSETS, build,
                            lambda r: (((t["name"], p["partition_index"]), p) for t in r["topics"]
                                       for p in t["partitions"]))

    def list_offset(self, topic: str, partition: int, timestamp: int) -> int:
        res = self.list_offsets({(topic, partition): timestamp})[(topic, partition)]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], f"{topic}-{partition}")
        return res["offset"]

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20, max_wait_ms: int = 500,
              isolation_level: int = READ_UNCOMMITTED) -> tuple[dict[str, Any], bytes]:
        part, data = self.fetch_many({(topic, partition): offset}, partition_max_bytes=max_bytes,
                                     max_wait_ms=max_wait_ms, isolation_level=isolation_level)[(topic, partition)]
        if part["error_code"]:
            raise KafkaClientError(part["error_code"], f"{topic}-{partition} at offset {offset}")
        return part, data

    def end_offsets_for_epochs(self, epochs: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], dict[str, Any]]:
        """OffsetsForLeaderEpoch at each partition's leader (with the current leader epoch, so a stale
        leader answers FENCED_LEADER_EPOCH and is not believed): per partition the answer, whose
        `end_offset` is where `leader_epoch` (the largest epoch <= the one asked) ends in its log."""
        def build(part: dict[TopicPartition, Any], _v: int) -> dict[str, Any]:
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, partition), epoch in part.items():
                topics.setdefault(topic, []).append({"partition": partition, "leader_epoch": epoch,
                                                     "current_leader_epoch": self.cluster.leader_epoch(
                                                         (topic, partition))})
            return {"replica_id": -1, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}

        return self._routed("OffsetsForLeaderEpoch", epochs, ApiKey.OFFSET_FOR_LEADER_EPOCH, build,
                            lambda r: (((t["topic"], p["partition"]), p) for t in r["topics"]
                                       for p in t["partitions"]))

    def find_truncation(self, positions: Mapping[tuple[str, int], tuple[int, int]]
                        ) -> dict[tuple[str, int], tuple[int, int]]:
        """KIP-320 validation of (position, epoch of the record before it) per partition: the partitions
        whose leader's log diverges below the position, each with (divergence offset, its epoch). A
        position without an epoch (-1) cannot be checked and is taken as valid, as Kafka does."""
        asked = {tp: epoch for tp, (_pos, epoch) in positions.items() if epoch >= 0}
        if not asked:
            return {}
        out = {}
        for tp, ans in self.end_offsets_for_epochs(asked).items():
            code = ans.get("error_code", 0)
            if code:
                raise KafkaClientError(code, f"OffsetsForLeaderEpoch of {tp[0]}-{tp[1]}")
            end, epoch = ans["end_offset"], ans.get("leader_epoch", -1)
            if end < 0 or epoch < 0:
                out[tp] = (-1, -1)  # the leader knows no epoch that old: nothing to compare with
            elif end < positions[tp][0]:
                out[tp] = (end, epoch)
        return out

    def consume(self, topic: str, partition: int, offset: int, *, until: int | None = None,
                idle_timeout_s: float = 2.0, leader_epoch: int = -1,
                reset_on_truncation: bool = False) -> Iterator[tuple[int, RecordBatch]]:
        """(offset, batch) from `offset`: up to `until` (exclusive) or until nothing new for `idle_timeout_s`.

        `leader_epoch` is the epoch of the record before `offset` when known (a committed offset's
        committed_leader_epoch). After a leader change the position is validated (see the module doc):
        truncation below it raises LogTruncationError, or with `reset_on_truncation` logs a warning and
        goes on from where the leader's history diverges."""
        tp = (topic, partition)
        idle_since = time.monotonic()
        last_epoch = leader_epoch
        # a position given with its epoch is validated first, as Kafka's consumer does after a seek
        seen_leader_epoch: int | None = None if leader_epoch >= 0 else self.cluster.leader_epoch(tp)
        while until is None or offset < until:
            current = self.cluster.leader_epoch(tp)
            if current != seen_leader_epoch and last_epoch >= 0:
                offset, last_epoch = self._validate_position(tp, offset, last_epoch, reset_on_truncation)
            seen_leader_epoch = self.cluster.leader_epoch(tp)  # validation may have refreshed Metadata
            try:
                part, data = self.fetch(topic, partition, offset)
            except KafkaClientError as exc:
                # a new leader whose log ends below the position: validate (it may be truncation)
                if exc.error_code != ErrorCode.OFFSET_OUT_OF_RANGE or last_epoch < 0 or \
                        self.cluster.leader_epoch(tp) == seen_leader_epoch:
                    raise
                continue
            if self.cluster.leader_epoch(tp) != seen_leader_epoch:
                continue  # the fetch went to a new leader: validate before using its answer
            progressed = False
            for batch in iter_batches(data):
                if batch.last_offset < offset:
                    continue
                progressed = True
                yield offset, batch
                offset = batch.last_offset + 1
                last_epoch = batch.partition_leader_epoch
            if progressed:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > idle_timeout_s or (until is None and offset >= part["high_watermark"]
                                                                    and idle_timeout_s == 0):
                return

    def _validate_position(self, tp: TopicPartition, offset: int, epoch: int, reset: bool) -> tuple[int, int]:
        divergent = self.find_truncation({tp: (offset, epoch)})
        if tp not in divergent:
            return offset, epoch
        at, at_epoch = divergent[tp]
        if not reset:
            raise LogTruncationError({tp: offset}, divergent)
        if at < 0:  # the leader knows no such epoch: start over from its log start (auto.offset.reset)
            at, at_epoch = self.list_offset(tp[0], tp[1], -2), -1
        log.warning("Log truncation of %s-%d detected: position %d, the leader's log diverges at %d; "
                    "going on from there", tp[0], tp[1], offset, at)
        return at, at_epoch


def topics_of(metadata: dict[str, Any]) -> Iterable[dict[str, Any]]:
    return sorted((t for t in metadata.get("topics", []) if t.get("name")), key=lambda t: t["name"])


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def _first_partition_code(res: dict[str, Any]) -> int:
    """The error of an answer whose errors are per partition but alike for a coordinator problem."""
    for t in res.get("topics", []):
        for p in t.get("partitions", []):
            return p.get("error_code", 0)
    return res.get("error_code", 0)


