"""The broker backend's writing side: tasks produce their batches to each partition's leader.

Spark's Kafka sink is at-least-once and so is this one: write tasks send Produce requests as they
encode rows (acks=all unless `kafka.acks` says otherwise), and the driver's commit has nothing left
to do. What a failed job's successful tasks produced stays in the topics, and a retried task or a
replayed micro-batch produces its rows again; readers that need exactly-once deduplicate (by key,
or by an id in the value or the headers).

Rows are encoded and routed by the shared sink code (`sink._Encoder`: the `partition` column, else
murmur2 of the key, else sticky chunks), so a row lands in the same partition in either mode.
Batches of one leader are gathered into requests (one batch per partition, as Kafka requires, up to
`kafka.max.request.size`); one request per leader is in flight while the task encodes the next
rows, and its answer is checked before the next is sent, so a partition's batches keep their order
even when one is retried.

A topic that does not exist is created with CreateTopics (numPartitions, topicConfig.*), as the
embedded sink creates it at commit; a task that finds another task created it first uses its
partition count.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from kafkalite.client import BrokerConnection, produce_request
from kafkalite.error_codes import error_name
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.spark.backend import StagedBatches, StagedFile, TopicPartition
from kafkalite.spark.broker_cluster import RETRIABLE, Cluster, RetriableError
from kafkalite.spark.broker_settings import BrokerSettings
from kafkalite.spark.errors import SinkError, UnknownTopicError

log = logging.getLogger("kafkalite.spark")


class BrokerSink:
    """SinkBackend over `kafka.bootstrap.servers`."""

    def __init__(self, settings: BrokerSettings, topic_configs: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.topic_configs = dict(topic_configs or {})
        self._cluster: Cluster | None = None

    @property
    def cluster(self) -> Cluster:
        """Connected on first use: the driver's commit and abort need no connection at all."""
        if self._cluster is None:
            self._cluster = Cluster(self.settings)
        return self._cluster

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()

    def partition_count(self, topic: str) -> int | None:
        def attempt() -> int | None:
            info = self.cluster.metadata([topic]).get(topic)
            if info is None or info.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                return None
            if info.error in RETRIABLE or (info.error == ErrorCode.NONE and not info.leaders):
                raise RetriableError(f"metadata of {topic}: {error_name(info.error)}")
            if info.error:
                raise SinkError(f"cannot write to topic {topic}: {error_name(info.error)}")
            return len(info.leaders)

        return self.cluster.retrying(f"looking up topic {topic} (Metadata)", attempt)

    def create_topic(self, topic: str, partitions: int) -> int:
        body = {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": -1, "assignments": [],
                            "configs": [{"name": k, "value": v} for k, v in sorted(self.topic_configs.items())]}],
                "timeout_ms": self.settings.request_timeout_ms}

        def attempt() -> dict:
            res = self.cluster.controller().request(ApiKey.CREATE_TOPICS, body)["topics"][0]
            if res["error_code"] in RETRIABLE:  # NOT_CONTROLLER after a controller move, say
                raise RetriableError(f"CreateTopics: {error_name(res['error_code'])}")
            return res

        res = self.cluster.retrying(f"creating topic {topic} (CreateTopics)", attempt)
        code = res["error_code"]
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise SinkError(f"cannot create topic {topic} with {partitions} partition(s) on the broker(s) at "
                            f"{self.settings.bootstrap_servers}: {error_name(code)}: {res.get('error_message') or ''}"
                            " (create it beforehand, or check numPartitions and topicConfig.*)")
        count = self.partition_count(topic)  # retried until the broker lists the new partitions
        if count is None:
            raise SinkError(f"topic {topic} was created but the broker(s) at {self.settings.bootstrap_servers} "
                            "do not list it")
        return count

    def open_stage(self, job_id: str) -> ProducingStage:
        return ProducingStage(self.cluster, self.settings)

    def commit(self, job_id: str, staged: Sequence[StagedFile], *, sink_id: str | None = None,
               batch_id: int | None = None) -> int:
        """Nothing to do: the tasks produced everything already (at-least-once)."""
        return sum(f.records for f in staged)

    def abort(self, job_id: str, staged: Sequence[StagedFile | None], *, sink_id: str | None = None) -> None:
        """Produced records cannot be taken back; say how many stay."""
        written = sum(f.records for f in staged if f is not None)
        if written:
            log.warning("write job %s failed after its successful tasks produced %d record(s) to the broker(s) at "
                        "%s; they stay (at-least-once, as Spark's Kafka sink)", job_id, written,
                        self.settings.bootstrap_servers)


class ProducingStage:
    """One write task's Produce requests, one in flight per leader.

    Kafka takes exactly one batch per partition in a Produce request, so a request gathers one
    batch of each partition the leader hosts, up to max.request.size; a second batch for the same
    partition sends the request. Its answer is read before the leader's next request goes out, so
    batches land in the order encoded even when one is retried.
    """

    def __init__(self, cluster: Cluster, settings: BrokerSettings) -> None:
        self.cluster = cluster
        self.settings = settings
        self._gathering: dict[int, dict[TopicPartition, bytes]] = {}
        self._sizes: dict[int, int] = {}
        self._inflight: dict[int, dict[TopicPartition, bytes]] = {}
        self._records: dict[TopicPartition, int] = {}

    def add(self, tp: TopicPartition, batch: bytes, records: int) -> None:
        node = self._leader(tp)
        gathered = self._gathering.get(node)
        if gathered and (tp in gathered or self._sizes[node] + len(batch) > self.settings.max_request_size):
            self._send(node)
        self._gathering.setdefault(node, {})[tp] = batch
        self._sizes[node] = self._sizes.get(node, 0) + len(batch)
        self._records[tp] = self._records.get(tp, 0) + records

    def finish(self, partition_counts: Mapping[str, int]) -> StagedFile:
        for node in list(self._gathering):
            self._send(node)
        while self._inflight:  # a retry may settle several at once
            self._complete(next(iter(self._inflight)))
        batches = tuple(StagedBatches(t, p, (), n) for (t, p), n in sorted(self._records.items()))
        return StagedFile("", batches, tuple(sorted(partition_counts.items())))

    def discard(self) -> None:
        """Nothing to undo (produced records stay); unanswered requests die with the connections."""
        self._gathering.clear()
        self._inflight.clear()

    # --- requests -----------------------------------------------------------------------------------

    def _leader(self, tp: TopicPartition) -> int:
        try:
            return self.cluster.retrying(f"finding the leader of {tp[0]}-{tp[1]}",
                                         lambda: next(iter(self.cluster.leaders([tp]))))
        except UnknownTopicError as exc:
            raise SinkError(f"cannot produce to {tp[0]}-{tp[1]}: {exc}") from None

    def _send(self, node: int) -> None:
        """Send what was gathered for `node`, after the answer to its previous request."""
        batches = self._gathering.pop(node, None)
        self._sizes.pop(node, None)
        if node in self._inflight:
            self._complete(node)
        if not batches:
            return
        try:
            self._request(self.cluster.node(node), batches)
        except (RetriableError, OSError) as exc:
            self._retry({tp: [b] for tp, b in batches.items()}, exc)
            return
        if self.settings.acks != 0:
            self._inflight[node] = batches

    def _request(self, client: BrokerConnection, batches: Mapping[TopicPartition, bytes]) -> None:
        body = produce_request({tp: [b] for tp, b in batches.items()}, acks=self.settings.acks,
                               timeout_ms=self.settings.request_timeout_ms)
        client.send(ApiKey.PRODUCE, body, expect_response=self.settings.acks != 0)

    def _complete(self, node: int) -> None:
        """Check the answer to `node`'s request in flight; retry what failed transiently."""
        batches = self._inflight.pop(node)
        try:
            answer = self.cluster.node(node).receive()
        except (RetriableError, OSError) as exc:
            self._retry({tp: [b] for tp, b in batches.items()}, exc)  # it may have landed anyway: at-least-once
            return
        failed = self._failures(answer, batches)
        if failed:
            self._retry({tp: [batches[tp]] for tp in failed}, RetriableError(f"produce to broker {node}: "
                                                                           + ", ".join(failed.values())))

    def _failures(self, answer: dict, batches: Mapping[TopicPartition, bytes]) -> dict[TopicPartition, str]:
        """Partitions of a request to send again, with their error; SinkError for errors retrying cannot fix."""
        failed: dict[TopicPartition, str] = {}
        for t in answer.get("responses", []):
            for p in t.get("partition_responses", []):
                tp = (t["name"], p["index"])
                code = p["error_code"]
                if code == ErrorCode.NONE or tp not in batches:
                    continue
                if code in RETRIABLE or code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    failed[tp] = f"{tp[0]}-{tp[1]}: {error_name(code)}"
                    continue
                detail = p.get("error_message") or ""
                if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
                    detail += (f" (a batch of {len(batches[tp])} bytes: lower kafka.batch.size or raise the topic's "
                               "max.message.bytes)")
                raise SinkError(f"producing to {tp[0]}-{tp[1]} failed: {error_name(code)} {detail}".rstrip())
        return failed

    def _retry(self, batches: dict[TopicPartition, list[bytes]], exc: BaseException) -> None:
        """Send `batches` again, in order, waiting for each answer, until they land.

        Retrying resets the connections, which loses the answers of the other requests in flight,
        so their batches are sent again too: a record may then land twice, never not at all.
        """
        pending: dict[TopicPartition, list[bytes]] = {}
        for other in self._inflight.values():
            for tp, data in other.items():
                pending.setdefault(tp, []).append(data)
        self._inflight.clear()
        for tp, queued in batches.items():
            pending.setdefault(tp, []).extend(queued)
        backoff = self.cluster.backoff(f"producing to {', '.join(f'{t}-{p}' for t, p in sorted(pending))}")
        error = exc
        while pending:
            backoff.failed(error)
            try:
                while pending:
                    for node, tps in self.cluster.leaders(pending).items():
                        part = {tp: pending[tp][0] for tp in tps}
                        client = self.cluster.node(node)
                        self._request(client, part)
                        failed = {} if self.settings.acks == 0 else self._failures(client.receive(), part)
                        for tp in tps:
                            if tp not in failed:
                                pending[tp].pop(0)
                                if not pending[tp]:
                                    del pending[tp]
                        if failed:
                            raise RetriableError(", ".join(failed.values()))
                    backoff.reset()
            except UnknownTopicError as e:
                raise SinkError(f"cannot produce: {e}") from None
            except (RetriableError, OSError) as e:
                error = e
