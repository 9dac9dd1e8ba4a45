"""The partition APIs: Produce, Fetch, ListOffsets, DeleteRecords and OffsetForLeaderEpoch for clients and
followers, and the controller's LeaderAndIsr, StopReplica and UpdateMetadata (Kafka's handleProduceRequest,
handleFetchRequest, ... in KafkaApis, each a thin layer over ReplicaManager).

Requests are taken apart into per-partition calls on ReplicaManager, which decides each partition's outcome
(a partition this broker neither leads nor follows is NOT_LEADER_OR_FOLLOWER there, in one place), and the
outcomes are put back together in the response's shape. What waits (acks=all, DeleteRecords, a long-polling
fetch) waits in ReplicaManager's purgatory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.handlers import Body, Handler
from kafkalite.broker.replica_manager import LeadershipListener, ReplicaManager
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.protocol.connection import CloseConnection
from kafkalite.security.session import Session
from kafkalite.storage.log import FetchIsolation


class ReplicaApis:
    """`broker_epoch` is this broker's current registration (the controller's requests carry the epoch they
    were meant for); `leadership` hears of `__consumer_offsets` partitions won and lost."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, broker_epoch: Callable[[], int],
                 leadership: LeadershipListener | None) -> None:
        self.config = config
        self.replicas = replicas
        self.broker_epoch = broker_epoch
        self.leadership = leadership

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.PRODUCE: self.produce, ApiKey.FETCH: self.fetch, ApiKey.LIST_OFFSETS: self.list_offsets,
                ApiKey.DELETE_RECORDS: self.delete_records,
                ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
                ApiKey.LEADER_AND_ISR: self.leader_and_isr, ApiKey.STOP_REPLICA: self.stop_replica,
                ApiKey.UPDATE_METADATA: self.update_metadata}

    # --- produce and fetch ------------------------------------------------------------------------

    async def produce(self, h: RequestHeader, body: Body, _session: Session) -> Body | None:
        acks = body.get("acks", -1)
        if h.api_version < 3:
            # Kafka 4 advertises v0-2 for old librdkafka but refuses them
            refuse: int | None = ErrorCode.UNSUPPORTED_VERSION
        elif acks not in (-1, 0, 1):
            refuse = ErrorCode.INVALID_REQUIRED_ACKS
        elif body.get("transactional_id") is not None:
            # transactions are not implemented (docs/design.md)
            refuse = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            refuse = None
        responses = []
        failed = False
        waiting: list[tuple[str, Body]] = []
        for topic in body.get("topic_data", []):
            name = topic.get("name")
            parts = []
            for pd in topic.get("partition_data", []):
                if refuse is not None:
                    entry = {"index": pd["index"], "error_code": refuse, "base_offset": -1}
                else:
                    entry = self.replicas.append(name, pd["index"], pd.get("records"), acks_all=acks == -1)
                    if "_required_offset" in entry:
                        waiting.append((name, entry))
                failed |= entry["error_code"] != ErrorCode.NONE
                parts.append(entry)
            responses.append({"name": name, "partition_responses": parts})
        if waiting:  # acks=all and the followers have yet to replicate (DelayedProduce)
            timeout_ms = body.get("timeout_ms", 30000)
            await asyncio.gather(*(self.replicas.complete_produce(n, e, timeout_ms) for n, e in waiting))
        if acks == 0:
            if failed:  # Kafka closes the connection: the client learns of the failure by reconnecting
                raise CloseConnection("an acks=0 produce request failed")
            return None
        return {"responses": responses, "throttle_time_ms": 0}

    async def fetch(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        if h.api_version >= 7 and body.get("session_epoch", -1) > 0:
            # Never created a session (we answer session_id 0), so an incremental fetch can't be ours.
            return {"throttle_time_ms": 0, "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0,
                    "responses": []}
        isolation = FetchIsolation.TXN_COMMITTED if body.get("isolation_level", 0) == 1 else \
            FetchIsolation.HIGH_WATERMARK
        replica_id = body.get("replica_id", -1)
        if replica_id < 0:
            replica_id = (body.get("replica_state") or {}).get("replica_id", -1)  # v15+ moved it there
        if replica_id >= 0:
            isolation = FetchIsolation.LOG_END
        wanted = []
        for t in body.get("topics", []):
            for p in t.get("partitions", []):
                wanted.append((t["topic"], p["partition"], p["fetch_offset"], p["partition_max_bytes"],
                               p.get("current_leader_epoch", -1), p.get("last_fetched_epoch", -1)))
        max_bytes = body.get("max_bytes", 0x7FFFFFFF)
        max_bytes = min(max_bytes if max_bytes > 0 else 0x7FFFFFFF, self.config.get("fetch.max.bytes"))
        starts = [p.get("log_start_offset", -1) for t in body.get("topics", []) for p in t.get("partitions", [])]
        reads = await self.replicas.fetch(wanted, max_wait_ms=body.get("max_wait_ms", 0),
                                          min_bytes=body.get("min_bytes", 1), max_bytes=max_bytes,
                                          isolation=isolation, replica_id=replica_id,
                                          log_start_offsets=starts if replica_id >= 0 else None)
        responses: list[Body] = []
        for r in reads:
            if not responses or responses[-1]["topic"] != r.topic:
                responses.append({"topic": r.topic, "partitions": []})
            entry: Body = {
                "partition_index": r.partition, "error_code": r.error, "high_watermark": r.high_watermark,
                "last_stable_offset": r.last_stable_offset, "log_start_offset": r.log_start_offset,
                "aborted_transactions": r.aborted, "preferred_read_replica": -1,
                "records": self.replicas.records_for_wire(r.records),
            }
            if r.diverging is not None:
                entry["diverging_epoch"] = {"epoch": r.diverging[0], "end_offset": r.diverging[1]}
            responses[-1]["partitions"].append(entry)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}

    # --- offsets ----------------------------------------------------------------------------------

    async def list_offsets(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        replica = body.get("replica_id", -1) >= 0
        level = body.get("isolation_level", 0)
        isolation = None if replica else (FetchIsolation.TXN_COMMITTED if level == 1 else
                                          FetchIsolation.HIGH_WATERMARK)
        topics = []
        for t in body.get("topics", []):
            parts = [self.replicas.list_offset(t["name"], p["partition_index"], p["timestamp"], isolation=isolation,
                                               current_leader_epoch=p.get("current_leader_epoch", -1))
                     for p in t.get("partitions", [])]
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    async def delete_records(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        topics = []
        waiting = []
        for t in body.get("topics", []):
            parts = [self.replicas.delete_records(t["name"], p["partition_index"], p["offset"])
                     for p in t.get("partitions", [])]
            waiting += [(t["name"], e) for e in parts if "_target" in e]
            topics.append({"name": t["name"], "partitions": parts})
        if waiting:  # followers have yet to move their log start (DelayedDeleteRecords)
            timeout_ms = body.get("timeout_ms", 30000)
            await asyncio.gather(*(self.replicas.complete_delete_records(n, e, timeout_ms) for n, e in waiting))
        return {"throttle_time_ms": 0, "topics": topics}

    async def offset_for_leader_epoch(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        topics = []
        for t in body.get("topics", []):
            parts = [self.replicas.end_offset_for_epoch(t["topic"], p["partition"], p["leader_epoch"],
                                                        p.get("current_leader_epoch", -1))
                     for p in t.get("partitions", [])]
            topics.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # --- the controller's requests ----------------------------------------------------------------

    async def leader_and_isr(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        return await self.replicas.become_leader_or_follower(body, self.broker_epoch(), self.leadership)

    async def stop_replica(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        return await self.replicas.stop_replicas(body, self.broker_epoch(), self.leadership)

    async def update_metadata(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        return await self.replicas.update_metadata(body, self.broker_epoch(), self.leadership)
