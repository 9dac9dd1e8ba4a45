"""InitProducerId for idempotent producers: ids unique in the cluster, taken from blocks this broker reserves
in the cluster store (/latest_producer_id_block, Kafka's ZooKeeper-mode ProducerIdManager; the single broker's
metadata file likewise). As Kafka's coordinator does for a null transactional id, every request gets a fresh
producer id at epoch 0 (an idempotent producer that must reset its sequences asks again and gets a new id).
A transactional id is refused by name until kafkalite has a transaction coordinator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from kafkalite.broker.handlers import Body, Handler
from kafkalite.broker.unsupported import TRANSACTIONS_UNSUPPORTED
from kafkalite.cluster import znodes as z
from kafkalite.cluster.store import ClusterStore
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.session import Session

log = logging.getLogger("kafkalite.broker.apis")


class ProducerIdManager:
    def __init__(self, store: ClusterStore, node_id: int) -> None:
        self.store = store
        self.node_id = node_id
        self._block: z.ProducerIdBlock | None = None
        self._next = 0
        self._lock = asyncio.Lock()

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.INIT_PRODUCER_ID: self.init_producer_id}

    async def generate(self) -> int:
        """The next producer id, reserving a new block in the store when this one is used up."""
        async with self._lock:
            if self._block is None or self._next > self._block.end:
                self._block = await self.store.next_producer_id_block(self.node_id)
                self._next = self._block.start
            pid = self._next
            self._next += 1
        return pid

    async def init_producer_id(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        if body.get("transactional_id") is not None:
            log.warning("Refused InitProducerId for transactional id %r: %s", body["transactional_id"],
                        TRANSACTIONS_UNSUPPORTED)
            return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": await self.generate(),
                "producer_epoch": 0}
