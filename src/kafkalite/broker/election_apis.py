"""ControlledShutdown and ElectLeaders: requests the controller answers (Kafka's handleControlledShutdownRequest
and handleElectLeaders in ZooKeeper mode). The controller elects (cluster/elections.py); a broker that is not
the controller answers NOT_CONTROLLER. An election is answered once this broker's metadata shows its new leader
(Kafka's DelayedElectLeader), or REQUEST_TIMED_OUT after the request's timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kafkalite.broker.handlers import Body, Handler
from kafkalite.broker.topic_apis import wait_for
from kafkalite.cluster.controller import Controller, TopicPartition
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.errors import KafkaliteError
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.session import Session

log = logging.getLogger("kafkalite.broker.cluster")

Results = dict[TopicPartition, tuple[int, str | None, int]]  # (error code, message, elected leader)


class ElectionApis:
    def __init__(self, controller: Controller, cache: MetadataCache) -> None:
        self.controller = controller
        self.cache = cache

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.CONTROLLED_SHUTDOWN: self.controlled_shutdown, ApiKey.ELECT_LEADERS: self.elect_leaders}

    async def controlled_shutdown(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        """A broker asks the controller to move its leaderships away; others answer NOT_CONTROLLER."""
        try:
            remaining = await self.controller.controlled_shutdown(body["broker_id"], body.get("broker_epoch", -1))
        except KafkaliteError as exc:
            log.info("ControlledShutdown of broker %d refused: %s", body["broker_id"], exc)
            return {"error_code": exc.error_code, "remaining_partitions": []}
        except TimeoutError:
            return {"error_code": ErrorCode.REQUEST_TIMED_OUT, "remaining_partitions": []}
        return {"error_code": ErrorCode.NONE,
                "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}

    async def elect_leaders(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        """Null partitions = all partitions, and then those that needed no election are left out."""
        election_type = body.get("election_type", 0) if h.api_version >= 1 else 0
        requested = body.get("topic_partitions")
        if requested is None:
            wanted = [(t, p) for t, c in sorted(self.cache.topics.items()) for p in sorted(c.partitions)]
        else:
            wanted = [(t["topic"], p) for t in requested for p in t["partitions"]]
        timeout_s = max(body.get("timeout_ms", 60000), 0) / 1000
        results = await self._elect(election_type, wanted, timeout_s)
        await self._await_leaders(results, timeout_s)
        if requested is None:
            results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.ELECTION_NOT_NEEDED}
        by_topic: dict[str, list[Body]] = {}
        for (t, p), (code, message, _leader) in results.items():
            by_topic.setdefault(t, []).append({"partition_id": p, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
                "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}

    async def _elect(self, election_type: int, wanted: list[TopicPartition], timeout_s: float) -> Results:
        if election_type not in (0, 1):
            return {tp: (ErrorCode.INVALID_REQUEST, f"unknown election type {election_type}", -1) for tp in wanted}
        try:
            return await self.controller.elect_leaders(election_type, wanted, timeout_s)
        except KafkaliteError as exc:
            return {tp: (exc.error_code, None, -1) for tp in wanted}
        except TimeoutError:
            return {tp: (ErrorCode.REQUEST_TIMED_OUT, None, -1) for tp in wanted}

    async def _await_leaders(self, results: Results, timeout_s: float) -> None:
        """Kafka's DelayedElectLeader: wait until the metadata cache shows each elected leader."""
        pending = {tp: r[2] for tp, r in results.items() if r[0] == ErrorCode.NONE}
        await wait_for(lambda: all(self.cache.leader(*tp) == b for tp, b in pending.items()), int(timeout_s * 1000))
        for tp, b in pending.items():
            if self.cache.leader(*tp) != b:
                results[tp] = (ErrorCode.REQUEST_TIMED_OUT, "the new leader was not known to this broker in time",
                               -1)
