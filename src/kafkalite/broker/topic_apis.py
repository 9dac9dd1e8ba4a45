"""CreateTopics, DeleteTopics and CreatePartitions through the cluster store (Kafka's ZooKeeper-mode admin
paths): any broker takes them, writes the assignment (or the deletion request) to the store and answers once
its metadata shows the outcome; the controller does the rest. A single broker is a cluster of one over
cluster/local_store.py, so the same code runs.

Checks are Kafka's, made before anything is written: names (collisions of `.` and `_` too), assignments,
configs, Kafka's partitions-per-request limit and this broker's open-file limit (broker/topic_admin.py).
Metadata's auto-creation and FindCoordinator's `__consumer_offsets` create through `create` here.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.config_apis import topic_config_entries
from kafkalite.broker.handlers import Body, Handler
from kafkalite.broker.metadata import INTERNAL_TOPICS, validate_topic_name
from kafkalite.broker.replica_manager import ReplicaManager, error_code_of
from kafkalite.broker.topic_admin import MAX_PARTITIONS_PER_REQUEST
from kafkalite.cluster import znodes as z
from kafkalite.cluster.assignment import assign_replicas
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.cluster.store import ClusterStore
from kafkalite.errors import (
    InvalidPartitionsError,
    InvalidReplicationAssignmentError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaliteError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.session import Session

WAIT_STEP_S = 0.05


async def wait_for(ready: Callable[[], bool], timeout_ms: int) -> bool:
    """Poll `ready` until it holds or `timeout_ms` passes (what Kafka's delayed admin operations wait for:
    the metadata to show an outcome); whether it held."""
    deadline = time.monotonic() + max(0, timeout_ms) / 1000
    while not ready():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(WAIT_STEP_S)
    return True


def _too_many(total: int) -> PolicyViolationError:
    return PolicyViolationError(f"Excessively large number of partitions per request: {total} new partitions "
                                f"requested, at most {MAX_PARTITIONS_PER_REQUEST} may be created by one request "
                                "(Kafka's limit); split it into several requests")


def _check_manual(parts: dict[int, list[int]], live: dict[int, str | None]) -> None:
    """A replica assignment given in the request, checked as Kafka's validateReplicaAssignment."""
    if sorted(parts) != list(range(len(parts))):
        raise InvalidReplicationAssignmentError("Partitions should be a consecutive 0-based integer sequence")
    if len({len(r) for r in parts.values()}) != 1:
        raise InvalidReplicationAssignmentError("All partitions should have the same number of replicas")
    for p, r in parts.items():
        if len(set(r)) != len(r):
            raise InvalidReplicationAssignmentError(f"Duplicate brokers not allowed in replica assignment "
                                                    f"{r} of partition {p}")
        unknown = sorted(set(r) - set(live))
        if unknown:
            raise InvalidReplicationAssignmentError(f"Unknown broker(s) {unknown} in the assignment of "
                                                    f"partition {p}")


class TopicApis:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, cache: MetadataCache,
                 store: ClusterStore) -> None:
        self.config = config
        self.replicas = replicas
        self.admin = replicas.admin
        self.cache = cache
        self.store = store
        self.node_id = config.node_id

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.CREATE_TOPICS: self.create_topics, ApiKey.DELETE_TOPICS: self.delete_topics,
                ApiKey.CREATE_PARTITIONS: self.create_partitions}

    async def _live_brokers(self) -> dict[int, str | None]:
        return {b: r.rack for b, r in (await self.store.brokers()).items()}

    async def create(self, name: str, partitions: int, rf: int, manual: dict[int, list[int]] | None,
                     configs: dict[str, str], validate_only: bool = False, *, also_local: int = 0
                     ) -> z.TopicAssignment:
        """Check and write a new topic's assignment to the store (unless `validate_only`); `also_local` new
        replicas of the same request on this broker count against its open-file limit too."""
        if name in self.cache.topics or await self.store.topic_assignment(name) is not None:
            if await self.store.read(z.delete_topic_path(name)) is not None:  # Kafka's wording for this case
                raise TopicAlreadyExistsError(f"Topic '{name}' is marked for deletion.")
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        key = name.replace(".", "_")
        for other in await self.store.topics():
            if other != name and other.replace(".", "_") == key:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")
        self.admin.validate_topic_configs(configs)
        live = await self._live_brokers()
        if manual is not None:
            _check_manual(manual, live)
            parts = manual
        else:
            if partitions <= 0:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            parts = assign_replicas(partitions, rf, sorted(live), live)
        self.admin.check_new_partitions(also_local + sum(1 for r in parts.values() if self.node_id in r))
        assignment = z.TopicAssignment(name, uuid.uuid4(), parts)
        if not validate_only:
            await self.store.create_topic(assignment, configs)
        return assignment

    # --- CreateTopics ----------------------------------------------------------------------------------

    def _requested_partitions(self, requested: list[Body]) -> int:
        total = 0
        for t in requested:
            n = len(t.get("assignments") or []) or t.get("num_partitions", -1)
            total += self.config.get("num.partitions") if n == -1 else max(0, n)
        return total

    async def create_topics(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        validate_only = body.get("validate_only", False)
        timeout_ms = body.get("timeout_ms", 60000)
        requested = body.get("topics", [])
        # Kafka checks the whole request first (validateTotalNumberOfPartitions): too many partitions fail
        # every topic of it with POLICY_VIOLATION, before anything is created.
        total = self._requested_partitions(requested)
        if total > MAX_PARTITIONS_PER_REQUEST:
            exc = _too_many(total)
            return {"throttle_time_ms": 0, "topics": [
                {"name": t["name"], "topic_id": uuid.UUID(int=0), "error_code": exc.error_code,
                 "error_message": str(exc), "num_partitions": -1, "replication_factor": -1, "configs": []}
                for t in requested]}
        names = [t["name"] for t in requested]
        results = []
        created: list[z.TopicAssignment] = []
        local = 0  # new replicas on this broker so far in this request
        for t in requested:
            res: Body = {"name": t["name"], "topic_id": uuid.UUID(int=0), "error_code": ErrorCode.NONE,
                         "error_message": None, "num_partitions": -1, "replication_factor": -1, "configs": []}
            try:
                if names.count(t["name"]) > 1:
                    raise InvalidRequestError(f"Create topics request from client contains a duplicate topic: "
                                              f"{t['name']}")
                a = await self._create_one(t, validate_only, local)
                local += sum(1 for r in a.partitions.values() if self.node_id in r)
                res.update(topic_id=a.topic_id if not validate_only else uuid.UUID(int=0),
                           num_partitions=len(a.partitions), replication_factor=len(next(iter(a.partitions.values()))))
                if not validate_only:
                    created.append(a)
                    res["configs"] = [{k: c[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                                      for c in topic_config_entries(self.config, self.replicas.logs.default_config,
                                                                    _configs_of(t))]
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            results.append(res)
        if created:
            await self._await_created(created, results, timeout_ms)
        # A topic another request is creating exists (TOPIC_ALREADY_EXISTS) before this broker's metadata
        # lists it; answering once it does spares the client a Metadata that says UNKNOWN_TOPIC_OR_PARTITION
        # (several writers of a Spark job create their topic at once).
        pending = [r["name"] for r in results if r["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
                   and r["name"] not in self.cache.topics]
        if pending:
            await wait_for(lambda: all(n in self.cache.topics for n in pending), timeout_ms)
        return {"throttle_time_ms": 0, "topics": results}

    async def _create_one(self, t: Body, validate_only: bool, also_local: int) -> z.TopicAssignment:
        name = t["name"]
        validate_topic_name(name)
        partitions = t.get("num_partitions", -1)
        rf = t.get("replication_factor", -1)
        manual = {a["partition_index"]: list(a["broker_ids"]) for a in t.get("assignments") or []} or None
        if manual is not None and (partitions != -1 or rf != -1):
            raise InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignments "
                                      "were set. Both cannot be used at the same time.")
        if partitions == -1:
            partitions = self.config.get("num.partitions")
        if rf == -1:
            rf = self.config.get("default.replication.factor")
        return await self.create(name, partitions, rf, manual, _configs_of(t), validate_only, also_local=also_local)

    async def _await_created(self, created: list[z.TopicAssignment], results: list[Body], timeout_ms: int) -> None:
        """Kafka's handler answers once the metadata shows leaders, or at the request's timeout."""
        def ready() -> bool:
            return all(a.topic in self.cache.topics and len(self.cache.topics[a.topic].partitions) ==
                       len(a.partitions) and self.cache.topics[a.topic].topic_id == a.topic_id for a in created)
        if not await wait_for(ready, timeout_ms):
            for res in results:
                if any(a.topic == res["name"] for a in created) and res["name"] not in self.cache.topics:
                    res.update(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message="The topic was created in "
                               "the cluster store but its leaders were not known within timeout_ms")
        self._report_local_failures(results, {a.topic: range(len(a.partitions)) for a in created})

    def _report_local_failures(self, results: list[Body], partitions: dict[str, range]) -> None:
        """A new partition this broker could not host (a full disk, an offline log dir) fails the request
        that made it, as a single broker always did; the topic stays, that partition without a leader here."""
        failures = self.replicas.local_failures
        for res in results:
            name = res["name"]
            if res["error_code"] != ErrorCode.NONE or name not in partitions:
                continue
            failed = [failures[(name, p)] for p in partitions[name] if (name, p) in failures]
            if failed:
                res.update(error_code=failed[0][0], error_message=f"{len(failed)} of the new partitions could not "
                           f"be created on broker {self.node_id}: {failed[0][1]}")

    # --- DeleteTopics -----------------------------------------------------------------------------------

    async def delete_topics(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        if h.api_version >= 6:
            wanted = [(t.get("name"), t.get("topic_id")) for t in body.get("topics", [])]
        else:
            wanted = [(n, None) for n in body.get("topic_names", [])]
        results = []
        deleting = []
        for name, topic_id in wanted:
            res: Body = {"name": name, "topic_id": topic_id or uuid.UUID(int=0), "error_code": ErrorCode.NONE,
                         "error_message": None}
            try:
                name = self._deletable(name, topic_id, res)
                a = await self.store.topic_assignment(name)
                if a is None:
                    raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
                res["topic_id"] = a.topic_id
                await self.store.request_topic_deletion(name)
                deleting.append(name)
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            results.append(res)
        if deleting and not await wait_for(lambda: not any(n in self.cache.topics for n in deleting),
                                           body.get("timeout_ms", 30000)):
            for res in results:
                if res["name"] in deleting and res["name"] in self.cache.topics:
                    res.update(error_code=ErrorCode.REQUEST_TIMED_OUT,
                               error_message="Deletion was requested but not yet completed within timeout_ms")
        return {"throttle_time_ms": 0, "responses": results}

    def _deletable(self, name: str | None, topic_id: uuid.UUID | None, res: Body) -> str:
        """The name of a topic a DeleteTopics entry may delete (found by id for v6+); raises Kafka's error."""
        if not self.config.get("delete.topic.enable"):
            raise TopicDeletionDisabledError("Topic deletion is disabled.")
        if name is None:
            name = self.cache.by_id(topic_id) if topic_id else None
            if name is None:
                raise UnknownTopicIdError("This server does not host this topic ID.")
            res["name"] = name
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"Topic {name} is an internal topic and cannot be deleted")
        return name

    # --- CreatePartitions -------------------------------------------------------------------------------

    async def create_partitions(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        validate_only = body.get("validate_only", False)
        total = 0
        for t in body.get("topics", []):
            cached = self.cache.topics.get(t["name"])
            total += max(0, t["count"] - (len(cached.partitions) if cached is not None else 0))
        if total > MAX_PARTITIONS_PER_REQUEST:  # each topic still checks the open-file limit for itself
            exc = _too_many(total)
            return {"throttle_time_ms": 0, "results": [
                {"name": t["name"], "error_code": exc.error_code, "error_message": str(exc)}
                for t in body.get("topics", [])]}
        results = []
        waiting: dict[str, int] = {}
        for t in body.get("topics", []):
            res: Body = {"name": t["name"], "error_code": ErrorCode.NONE, "error_message": None}
            try:
                if await self._grow(t, validate_only):
                    waiting[t["name"]] = t["count"]
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            except Exception as exc:  # BadVersion: changed concurrently
                res.update(error_code=ErrorCode.INVALID_PARTITIONS, error_message=f"the topic changed meanwhile: {exc}")
            results.append(res)
        if waiting:
            await wait_for(lambda: all(n in self.cache.topics and len(self.cache.topics[n].partitions) >= c
                                       for n, c in waiting.items()), body.get("timeout_ms", 30000))
            self._report_local_failures(results, {n: range(c) for n, c in waiting.items()})
        return {"throttle_time_ms": 0, "results": results}

    async def _grow(self, t: Body, validate_only: bool) -> bool:
        """One topic of a CreatePartitions: checked, then written unless `validate_only`; whether written."""
        name, count = t["name"], t["count"]
        a = await self.store.topic_assignment(name)
        if a is None:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        old = len(a.partitions)
        if count <= old:
            raise InvalidPartitionsError(f"Topic currently has {old} partitions, which is higher than or "
                                         f"equal to the requested {count}.")
        live = await self._live_brokers()
        if t.get("assignments"):
            new = {old + i: list(x["broker_ids"]) for i, x in enumerate(t["assignments"])}
            if len(new) != count - old:
                raise InvalidReplicationAssignmentError(f"Increasing the number of partitions by "
                                                        f"{count - old} but {len(new)} assignments provided.")
        else:
            new = assign_replicas(count - old, len(a.partitions[0]), sorted(live), live, start_partition=old)
        self.admin.check_new_partitions(sum(1 for r in new.values() if self.node_id in r))
        if validate_only:
            return False
        await self.store.add_partitions(z.TopicAssignment(name, a.topic_id, {**a.partitions, **new}), old)
        return True


def _configs_of(t: Body) -> dict[str, str]:
    return {c["name"]: c["value"] for c in t.get("configs", []) if c.get("value") is not None}

