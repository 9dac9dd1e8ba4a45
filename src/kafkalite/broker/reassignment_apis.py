"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455): the controller does the work
(cluster/controller.py, cluster/reassignment.py); a broker that is not the controller answers NOT_CONTROLLER,
as Kafka's does, and clients (the Java AdminClient, `kafkalite reassign-partitions`) send them to the controller
named in Metadata."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafkalite.broker.handlers import Handler
from kafkalite.cluster.controller import Controller
from kafkalite.errors import KafkaliteError
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.session import Session

TopicPartition = tuple[str, int]


def _whole_request_error(code: int, message: str | None, **extra: Any) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, **extra}


class ReassignmentApis:
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.alter, ApiKey.LIST_PARTITION_REASSIGNMENTS: self.list}

    async def alter(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        """Start, change or cancel (null replicas) partitions' reassignments; answered once each has started."""
        wanted: dict[TopicPartition, list[int] | None] = {}
        for t in body.get("topics", []):
            for p in t["partitions"]:
                replicas = p.get("replicas")
                wanted[(t["name"], p["partition_index"])] = None if replicas is None else list(replicas)
        try:
            results = await self.controller.alter_reassignments(wanted, max(body.get("timeout_ms", 60000), 0) / 1000)
        except KafkaliteError as exc:
            return _whole_request_error(exc.error_code, str(exc), responses=[])
        except TimeoutError:
            return _whole_request_error(ErrorCode.REQUEST_TIMED_OUT, "the controller did not answer in time",
                                        responses=[])
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), (code, message) in results.items():
            by_topic.setdefault(t, []).append({"partition_index": p, "error_code": code, "error_message": message})
        return _whole_request_error(ErrorCode.NONE, None, responses=[
            {"name": t, "partitions": ps} for t, ps in sorted(by_topic.items())])

    async def list(self, h: RequestHeader, body: dict[str, Any], _session: Session) -> dict[str, Any]:
        """The partitions being reassigned (of those named, or all): replicas, adding and removing."""
        topics = body.get("topics")
        wanted = None if topics is None else [(t["name"], p) for t in topics for p in t["partition_indexes"]]
        try:
            moving = await self.controller.list_reassignments(wanted, max(body.get("timeout_ms", 60000), 0) / 1000)
        except KafkaliteError as exc:
            return _whole_request_error(exc.error_code, str(exc), topics=[])
        except TimeoutError:
            return _whole_request_error(ErrorCode.REQUEST_TIMED_OUT, "the controller did not answer in time", topics=[])
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), sets in sorted(moving.items()):
            by_topic.setdefault(t, []).append({"partition_index": p, "replicas": list(sets.replicas),
                                               "adding_replicas": list(sets.adding),
                                               "removing_replicas": list(sets.removing)})
        return _whole_request_error(ErrorCode.NONE, None, topics=[{"name": t, "partitions": ps}
                                                          for t, ps in by_topic.items()])
