"""The broker's one request table (Kafka's KafkaApis.handle): api key -> handler, built once from the areas
that answer the APIs, then only dispatched through.

A request arrives decoded (protocol/connection.py); `handle` waits for the broker's start-up where it must,
passes the request through its authorization gate (broker/authz.py, when authorizer.class.name is set) and hands
it to its area's handler, whose response body the connection encodes. Bodies use the snake_case names of
Kafka's message schemas; the protocol layer fills defaults for what a handler leaves out and drops what a version
doesn't carry, so handlers describe outcomes, not encodings. A handler returns None only for acks=0 produce
requests, which Kafka never answers.

Where each API is answered:
- broker/connection_apis.py: ApiVersions, SASL outside a SASL listener
- broker/metadata_apis.py: Metadata, DescribeCluster
- broker/replica_apis.py: Produce, Fetch, ListOffsets, DeleteRecords, OffsetForLeaderEpoch, and the controller's
  LeaderAndIsr, StopReplica, UpdateMetadata (over broker/replica_manager.py)
- broker/topic_apis.py: CreateTopics, DeleteTopics, CreatePartitions
- broker/config_apis.py: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
- broker/group_apis.py: FindCoordinator and the consumer-group APIs (coordinator/)
- broker/producer_ids.py: InitProducerId
- broker/election_apis.py: ControlledShutdown, ElectLeaders; broker/reassignment_apis.py: the KIP-455 APIs
- broker/acl_apis.py: the ACL APIs; broker/scram_admin.py: the SCRAM credential APIs
- broker/log_dir_apis.py: DescribeLogDirs
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from kafkalite.broker.authz import RequestAuthorizer
from kafkalite.broker.connection_apis import ConnectionApis
from kafkalite.broker.handlers import ApiArea, Body, Handler
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, RequestHeader
from kafkalite.security.session import Session

log = logging.getLogger("kafkalite.broker.apis")

# Answered while the broker is still starting: the controller's requests (in single-broker mode this broker's
# own controller sends them during start-up) and ApiVersions; every other request waits for `ready`.
STARTUP_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA})


class KafkaApis:
    def __init__(self, areas: Iterable[ApiArea], authz: RequestAuthorizer | None = None) -> None:
        """Two areas claiming one API is a wiring mistake, refused at start-up rather than settled by order."""
        self.authz = authz
        # Set once the broker's cluster part is started and has its first metadata (Kafka enables request
        # processing at the end of its start-up likewise): a client connecting early waits, not misled.
        self.ready = asyncio.Event()
        self._handlers: dict[int, Handler] = {}
        for area in [ConnectionApis(self.advertised), *areas]:
            for key, handler in area.handlers().items():
                if key in self._handlers:
                    first = type(getattr(self._handlers[key], "__self__", None)).__name__
                    raise ValueError(f"{ApiKey(key).name} is answered by two areas: {first} and "
                                     f"{type(area).__name__}")
                self._handlers[key] = handler
        if authz is not None:
            missing = authz.ungated(self._handlers)
            if missing:
                log.error("APIs served without an authorization gate (broker/authz.py): %s",
                          [ApiKey(k).name for k in missing])

    def advertised(self) -> dict[int, tuple[int, int]]:
        """Only what has a handler: clients pick features from this table (the ApiVersions response, KIP-35)."""
        return {k: versions for k, versions in sorted(SUPPORTED_VERSIONS.items()) if k in self._handlers}

    def handles(self, api_key: int) -> bool:
        return api_key in self._handlers

    async def handle(self, header: RequestHeader, body: Body, session: Session) -> Any:
        if not self.ready.is_set() and header.api_key not in STARTUP_APIS:
            await self.ready.wait()
        handler = self._handlers[header.api_key]
        if self.authz is not None:
            return await self.authz.handle(header, body, session, handler)
        return await handler(header, body, session)
