"""A small blocking Kafka client over kafkalite's protocol codec, for the CLI and tools.

It speaks to any Kafka broker (version negotiation through ApiVersions picks the highest version both
sides know), so `kafkalite topics` works against Apache Kafka too. It is deliberately simple: one
connection (to the first reachable address of the bootstrap list), requests answered in order. Real
applications should use a full client (librdkafka, the Java client); this one exists so kafkalite's own
tools and the Spark connector's broker mode need no extra dependency.

Requests can be pipelined (`send` several, then `receive` their answers in the same order, which
Kafka guarantees per connection): the Spark reader asks for the next chunk of a partition while it
decodes the previous one.
"""

from __future__ import annotations

import socket
import struct
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from kafkalite.errors import KafkaliteError
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, ErrorCode, decode_response, encode_request
from kafkalite.records.batch import RecordBatch, iter_batches

_SIZE = struct.Struct(">i")
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
                  min_bytes: int = 1, isolation_level: int = READ_UNCOMMITTED) -> dict[str, Any]:
    """A Fetch body for (topic, partition, offset, partition max bytes) entries, no fetch session."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset, partition_max in partitions:
        topics.setdefault(topic, []).append({"partition": partition, "fetch_offset": offset,
                                             "partition_max_bytes": partition_max, "current_leader_epoch": -1,
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


class KafkaClient:
    """One connection to one broker: the first address of `bootstrap` (a comma-separated list) that
    accepts it. Raises ConnectionError naming every address tried when none does."""

    def __init__(self, bootstrap: str, client_id: str = "kafkalite-cli", timeout_s: float = 30.0,
                 connect_timeout_s: float | None = None) -> None:
        self.client_id = client_id
        self.timeout_s = timeout_s
        failures = []
        for host, port in parse_bootstrap_servers(bootstrap):
            try:
                sock = socket.create_connection((host, port), timeout=connect_timeout_s or timeout_s)
            except OSError as exc:
                failures.append(f"{host}:{port}: {exc.strerror or exc}")
                continue
            self.host, self.port = host, port
            break
        else:
            raise ConnectionError("cannot connect to " + "; ".join(failures))
        sock.settimeout(timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._correlation = 0
        self._inflight: deque[tuple[int, int, int]] = deque()  # (correlation id, api, version) awaiting an answer
        self._broken = ""  # why the byte stream can no longer be trusted, once a send or read was cut short
        self.versions: dict[int, int] = {}
        self._negotiate()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------------

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError(f"the broker at {self.host}:{self.port} closed the connection")
            got += k
        return buf

    def send(self, api: int, body: dict[str, Any], version: int | None = None, expect_response: bool = True) -> int:
        """Send a request without waiting; `receive` returns the answers in the order sent."""
        if self._broken:
            raise ConnectionError(f"the connection to {self.host}:{self.port} is unusable after {self._broken}")
        v = self.versions.get(api, 0) if version is None else version
        self._correlation += 1
        try:
            self._sock.sendall(encode_request(api, v, self._correlation, self.client_id, body))
        except BaseException:
            self._broken = "an interrupted send"
            raise
        if expect_response:
            self._inflight.append((self._correlation, api, v))
        return self._correlation

    @property
    def broken(self) -> bool:
        """True once a send or read was cut short (e.g. by Ctrl-C): no further request can be framed."""
        return bool(self._broken)

    @property
    def pending(self) -> int:
        """Requests sent whose answers were not received yet."""
        return len(self._inflight)

    def receive(self) -> dict[str, Any]:
        """The answer to the oldest request sent and not yet received."""
        correlation, api, v = self._inflight.popleft()
        try:
            size = _SIZE.unpack(self._recv_exact(4))[0]
            frame = self._recv_exact(size)
        except BaseException:  # e.g. Ctrl-C mid-read: the stream position is lost
            self._broken = "an interrupted read"
            raise
        got, out = decode_response(api, v, frame)
        if got != correlation:
            raise ConnectionError(f"response correlation id {got} != request {correlation}")
        return out

    def request(self, api: int, body: dict[str, Any], version: int | None = None,
                expect_response: bool = True) -> dict[str, Any]:
        if self._inflight:
            raise RuntimeError("request() with pipelined requests still unanswered; receive() them first")
        self.send(api, body, version, expect_response)
        return self.receive() if expect_response else {}

    def _negotiate(self) -> None:
        resp = self.request(ApiKey.API_VERSIONS, {}, version=0)
        for k in resp.get("api_keys", []):
            ours = SUPPORTED_VERSIONS.get(k["api_key"])
            if ours is None:
                continue
            hi = min(ours[1], k["max_version"])
            if hi >= max(ours[0], k["min_version"]):
                self.versions[k["api_key"]] = hi

    # --- admin ----------------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None, allow_auto_topic_creation: bool = False) -> dict[str, Any]:
        """Brokers, and topics with their partitions and leaders (all topics when `topics` is None)."""
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": allow_auto_topic_creation}
        return self.request(ApiKey.METADATA, body)

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
        body = {"resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}]}
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
        """DeleteRecords before each partition's offset (-1: the high watermark); each answer as given."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "offset": offset})
        body = {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout_ms": int(self.timeout_s * 1000)}
        res = self.request(ApiKey.DELETE_RECORDS, body)
        return {(t["name"], p["partition_index"]): p for t in res["topics"] for p in t["partitions"]}

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
        v = self.versions.get(ApiKey.FIND_COORDINATOR, 0)
        res = self.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0, "coordinator_keys": [group]})
        if v >= 4:
            res = res["coordinators"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or f"coordinator of {group}")
        return res["host"], res["port"]

    def offset_fetch(self, group: str, partitions: Mapping[str, Sequence[int]] | None = None
                     ) -> dict[tuple[str, int], int]:
        """Committed offsets of `group` (every partition it has one for when `partitions` is None)."""
        topics = None if partitions is None else [{"name": t, "partition_indexes": list(ps)}
                                                   for t, ps in partitions.items()]
        res = self.request(ApiKey.OFFSET_FETCH, {"group_id": group, "topics": topics, "require_stable": False,
                                                 "groups": [{"group_id": group, "topics": topics}]})
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
        res = self.request(ApiKey.OFFSET_COMMIT, body)
        return {(t["name"], p["partition_index"]): p["error_code"] for t in res["topics"] for p in t["partitions"]}

    def describe_group(self, group: str) -> dict[str, Any]:
        g = self.request(ApiKey.DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False})
        g = g["groups"][0]
        if g["error_code"]:
            raise KafkaClientError(g["error_code"], group)
        return g

    def delete_groups(self, groups: Sequence[str]) -> dict[str, int]:
        res = self.request(ApiKey.DELETE_GROUPS, {"groups_names": list(groups)})
        return {r["group_id"]: r["error_code"] for r in res["results"]}

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
        """One Produce request carrying a batch per partition; each partition's answer as the broker gave it."""
        body = produce_request({tp: [b] for tp, b in batches.items()}, acks=acks,
                               timeout_ms=int(self.timeout_s * 1000))
        if acks == 0:
            self.request(ApiKey.PRODUCE, body, expect_response=False)
            return {}
        res = self.request(ApiKey.PRODUCE, body)
        return {(t["name"], p["index"]): p for t in res["responses"] for p in t["partition_responses"]}

    def fetch_many(self, positions: Mapping[tuple[str, int], int], partition_max_bytes: int = 1 << 20,
                   max_wait_ms: int = 500) -> dict[tuple[str, int], tuple[dict[str, Any], bytes]]:
        """One Fetch for many partitions: (partition answer, its record bytes) per partition."""
        body = fetch_request([(t, p, off, partition_max_bytes) for (t, p), off in positions.items()],
                             max_bytes=max(partition_max_bytes * len(positions), 1 << 20), max_wait_ms=max_wait_ms)
        res = self.request(ApiKey.FETCH, body)
        return {(t["topic"], p["partition_index"]): (p, bytes(p.get("records") or b""))
                for t in res["responses"] for p in t["partitions"]}


    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1) -> dict[str, Any]:
        body = produce_request({(topic, partition): [batch]}, acks=acks, timeout_ms=int(self.timeout_s * 1000))
        if acks == 0:
            self.request(ApiKey.PRODUCE, body, expect_response=False)
            return {}
        res = self.request(ApiKey.PRODUCE, body)["responses"][0]["partition_responses"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or f"{topic}-{partition}")
        return res

    def list_offsets(self, queries: Mapping[tuple[str, int], int], isolation_level: int = READ_UNCOMMITTED
                     ) -> dict[tuple[str, int], dict[str, Any]]:
        """ListOffsets for many partitions at once: timestamp (-2 earliest, -1 latest, else the first
        offset at or after it) per partition; each answer as the broker gave it, error code included."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), ts in queries.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "timestamp": ts,
                                                 "current_leader_epoch": -1})
        body = {"replica_id": -1, "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        res = self.request(ApiKey.LIST_OFFSETS, body)
        return {(t["name"], p["partition_index"]): p for t in res["topics"] for p in t["partitions"]}

    def list_offset(self, topic: str, partition: int, timestamp: int) -> int:
        res = self.list_offsets({(topic, partition): timestamp})[(topic, partition)]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], f"{topic}-{partition}")
        return res["offset"]

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20, max_wait_ms: int = 500,
              isolation_level: int = READ_UNCOMMITTED) -> tuple[dict[str, Any], bytes]:
        body = fetch_request([(topic, partition, offset, max_bytes)], max_bytes=max_bytes, max_wait_ms=max_wait_ms,
                             isolation_level=isolation_level)
        res = self.request(ApiKey.FETCH, body)
        part = res["responses"][0]["partitions"][0]
        if part["error_code"]:
            raise KafkaClientError(part["error_code"], f"{topic}-{partition} at offset {offset}")
        return part, bytes(part.get("records") or b"")

    def consume(self, topic: str, partition: int, offset: int, *, until: int | None = None,
                idle_timeout_s: float = 2.0) -> Iterator[tuple[int, RecordBatch]]:
        """(offset, batch) from `offset`: up to `until` (exclusive) or until nothing new for `idle_timeout_s`."""
        idle_since = time.monotonic()
        while until is None or offset < until:
            part, data = self.fetch(topic, partition, offset)
            progressed = False
            for batch in iter_batches(data):
                if batch.last_offset < offset:
                    continue
                progressed = True
                yield offset, batch
                offset = batch.last_offset + 1
            if progressed:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > idle_timeout_s or (until is None and offset >= part["high_watermark"]
                                                                    and idle_timeout_s == 0):
                return


def topics_of(metadata: dict[str, Any]) -> Iterable[dict[str, Any]]:
    return sorted((t for t in metadata.get("topics", []) if t.get("name")), key=lambda t: t["name"])
