"""A small blocking Kafka client over kafkalite's protocol codec, for the CLI and tools.

It speaks to any Kafka broker (version negotiation through ApiVersions picks the highest version both
sides know), so `kafkalite topics` works against Apache Kafka too. It is deliberately simple: one
connection to the bootstrap broker, requests one at a time. Real applications should use a full client
(librdkafka, the Java client); this one exists so kafkalite's own tools need no extra dependency.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable, Iterator
from typing import Any

from kafkalite.errors import KafkaliteError
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, ErrorCode, decode_response, encode_request
from kafkalite.records.batch import RecordBatch, iter_batches

_SIZE = struct.Struct(">i")



class KafkaClientError(KafkaliteError):
    def __init__(self, error_code: int, message: str) -> None:
        try:
            name = ErrorCode(error_code).name
        except ValueError:
            name = f"error {error_code}"
        super().__init__(f"{name}: {message}")
        self.error_code = error_code


def parse_bootstrap(servers: str) -> tuple[str, int]:
    first = servers.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bootstrap server {servers!r} is not host:port")
    return host.strip("[]"), int(port)


class KafkaClient:
    def __init__(self, bootstrap: str, client_id: str = "kafkalite-cli", timeout_s: float = 30.0) -> None:
        self.host, self.port = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self.versions: dict[int, int] = {}
        self._negotiate()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ------------------------------------------------------------------------------

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError(f"the broker at {self.host}:{self.port} closed the connection")
            got += k
        return bytes(buf)

    def request(self, api: int, body: dict[str, Any], version: int | None = None,
                expect_response: bool = True) -> dict[str, Any]:
        v = self.versions.get(api, 0) if version is None else version
        self._correlation += 1
        self._sock.sendall(encode_request(api, v, self._correlation, self.client_id, body))
        if not expect_response:
            return {}
        size = _SIZE.unpack(self._recv_exact(4))[0]
        correlation, out = decode_response(api, v, self._recv_exact(size))
        if correlation != self._correlation:
            raise ConnectionError(f"response correlation id {correlation} != request {self._correlation}")
        return out

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

    def metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False}
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

    # --- data -----------------------------------------------------------------------------------

    def produce(self, topic: str, partition: int, batch: bytes, acks: int = -1) -> dict[str, Any]:
        body = {"acks": acks, "timeout_ms": int(self.timeout_s * 1000),
                "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
        if acks == 0:
            self.request(ApiKey.PRODUCE, body, expect_response=False)
            return {}
        res = self.request(ApiKey.PRODUCE, body)["responses"][0]["partition_responses"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], res.get("error_message") or f"{topic}-{partition}")
        return res

    def list_offset(self, topic: str, partition: int, timestamp: int) -> int:
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                                           "current_leader_epoch": -1}]}]}
        res = self.request(ApiKey.LIST_OFFSETS, body)["topics"][0]["partitions"][0]
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], f"{topic}-{partition}")
        return res["offset"]

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20, max_wait_ms: int = 500
              ) -> tuple[dict[str, Any], bytes]:
        body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": offset,
                                                            "partition_max_bytes": max_bytes,
                                                            "current_leader_epoch": -1,
                                                            "log_start_offset": -1}]}],
                "forgotten_topics_data": [], "rack_id": ""}
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
