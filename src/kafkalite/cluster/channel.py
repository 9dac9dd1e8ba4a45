"""The controller's connections to the brokers (Kafka's ControllerChannelManager): one sender task and one
queue per broker, so each broker gets the controller's requests in the order they were made.

A request that cannot be delivered (connection refused or dropped) is retried, with a short backoff, until it
is answered or the broker leaves the cluster: a broker that is alive in ZooKeeper must eventually hear every
decision about its partitions. The target's broker epoch is put into each request when it is queued.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkalite.backoff import Backoff
from kafkalite.errors import SaslAuthenticationError
from kafkalite.protocol import ApiKey
from kafkalite.protocol.connection import ClientConnection, CorrelationError, InvalidReceiveError
from kafkalite.security.connect_failures import FailureLog
from kafkalite.security.transport import PLAINTEXT_CLIENT, ClientSecurity, open_connection

log = logging.getLogger("kafkalite.cluster.channel")
FAILURES = FailureLog(log)  # the controller's connections: a misconfiguration is said once per broker and cause

CLIENT_ID = "kafkalite-controller"
# The client id of the controller's requests to its own broker: random per process, so only this process can
# send it. The broker's authorizer lets these through (docs/security-acl.md): a broker is its own controller
# whatever its inter-broker principal, and a single broker on PLAINTEXT has no principal of its own.
SELF_CLIENT_ID = f"{CLIENT_ID}-self-{secrets.token_hex(16)}"
RETRY_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
REQUEST_TIMEOUT_S = 30.0
# The largest answer a broker's controller requests get: Kafka's socket.request.max.bytes default. Their answers
# are small; a size prefix past this is a broken stream, not a frame to wait for.
MAX_RESPONSE_BYTES = 100 * 1024 * 1024
# What ends an exchange with a broker so that it is sent again on a new connection
LOST = (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError, CorrelationError, InvalidReceiveError)

ResponseCallback = Callable[[int, dict[str, Any]], None]


@dataclass
class _Pending:
    api_key: ApiKey
    version: int
    body: dict[str, Any]
    on_response: ResponseCallback | None


class BrokerChannel:
    """The queue and sender task for one broker."""

    def __init__(self, broker_id: int, host: str, port: int, security: ClientSecurity = PLAINTEXT_CLIENT,
                 client_id: str = CLIENT_ID) -> None:
        self.security = security
        self.client_id = client_id
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self.task = asyncio.create_task(self._run(), name=f"controller-sender-{broker_id}")
        self._conn = ClientConnection(client_id, MAX_RESPONSE_BYTES)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._connected_once = False
        self._failing = False  # the last connection attempt or exchange failed, and none succeeded since

    @property
    def reachable(self) -> bool:
        """False once a broker the controller has talked to is known to be gone: a failed exchange or connection
        attempt and no success since, or the broker closed the idle connection (a killed process: the kernel
        closes its sockets). Before the first connection nothing says so: a broker registers once it listens."""
        if not self._connected_once:
            return True
        if self._failing:
            return False
        reader, writer = self._reader, self._writer
        return reader is None or writer is None or not (reader.at_eof() or writer.is_closing())

    async def _connect(self) -> None:
        backoff = Backoff(RETRY_BACKOFF_S, MAX_BACKOFF_S)
        while True:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):  # (3.11's wait_for can swallow a cancellation)
                    self._reader, self._writer = await open_connection(self.host, self.port, self.security)
                self._conn = ClientConnection(self.client_id, MAX_RESPONSE_BYTES)
                self._connected_once, self._failing = True, False
                FAILURES.reached(self._peer_key)
                return
            except (OSError, TimeoutError, SaslAuthenticationError) as exc:
                self._failing = True
                itself = self.client_id != CLIENT_ID  # the controller's channel to its own broker
                what = (f"The controller cannot reach {'its own broker' if itself else 'broker'} {self.broker_id} "
                        f"over {self.security.protocol} at {self.host}:{self.port}")
                if not FAILURES.failed(self._peer_key, what, exc, "the broker" if itself else f"broker "
                                       f"{self.broker_id}", self.host):
                    log.debug("Controller cannot reach broker %d at %s:%d (%s); retrying", self.broker_id,
                              self.host, self.port, exc)
                await asyncio.sleep(backoff.step())

    @property
    def _peer_key(self) -> str:
        return f"{self.broker_id}@{self.host}:{self.port}"

    def _disconnect(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def _exchange(self, item: _Pending) -> dict[str, Any]:
        assert self._reader is not None and self._writer is not None
        return await exchange(self._reader, self._writer, self._conn, item.api_key, item.version, item.body)

    async def _run(self) -> None:
        backoff = Backoff(RETRY_BACKOFF_S, MAX_BACKOFF_S)
        while True:
            item = await self.queue.get()
            while True:
                if self._writer is None:
                    await self._connect()
                try:
                    async with asyncio.timeout(REQUEST_TIMEOUT_S):
                        body = await self._exchange(item)
                    backoff.reset()
                    break
                except LOST as exc:
                    self._failing = True
                    log.info("Resending %s to broker %d after %s", item.api_key.name, self.broker_id,
                             type(exc).__name__)
                    self._disconnect()
                    await asyncio.sleep(backoff.step())
            if item.on_response is not None:
                try:
                    item.on_response(self.broker_id, body)
                except Exception:
                    log.exception("Handling the %s response of broker %d failed", item.api_key.name,
                                  self.broker_id)

    def send(self, api_key: ApiKey, version: int, body: dict[str, Any], on_response: ResponseCallback | None) -> None:
        self.queue.put_nowait(_Pending(api_key, version, body, on_response))

    def abort(self) -> None:
        """Stop at once, dropping what is queued (the broker registered a new address)."""
        self.task.cancel()
        self._disconnect()

    async def close(self) -> None:
        """Stop the sender. Waiting for it must not swallow a cancellation of the caller (the controller's
        event task being stopped), or that task would go on waiting for events that never come."""
        self.task.cancel()
        done, _ = await asyncio.wait([self.task], timeout=5)
        if not done:
            log.error("The controller's sender to broker %d did not stop within 5 s", self.broker_id)
        self._disconnect()


class ControllerChannels:
    """Senders to every live broker, added and removed as brokers join and leave."""

    def __init__(self, security: ClientSecurity = PLAINTEXT_CLIENT, self_id: int = -1) -> None:
        self.channels: dict[int, BrokerChannel] = {}
        self.security = security
        self.self_id = self_id  # the controller's own broker: its requests carry SELF_CLIENT_ID

    def add(self, broker_id: int, host: str, port: int) -> None:
        old = self.channels.get(broker_id)
        if old is not None and (old.host, old.port) == (host, port):
            return
        if old is not None:
            old.abort()
        self.channels[broker_id] = BrokerChannel(broker_id, host, port, self.security,
                                                 SELF_CLIENT_ID if broker_id == self.self_id else CLIENT_ID)

    async def remove(self, broker_id: int) -> None:
        ch = self.channels.pop(broker_id, None)
        if ch is not None:
            await ch.close()

    def reachable(self, broker_id: int) -> bool:
        """Whether the controller has no sign that `broker_id` is gone (BrokerChannel.reachable); a broker
        without a channel has none."""
        ch = self.channels.get(broker_id)
        return ch is None or ch.reachable

    def send(self, broker_id: int, api_key: ApiKey, version: int, body: dict[str, Any],
             on_response: ResponseCallback | None = None) -> None:
        ch = self.channels.get(broker_id)
        if ch is not None:
            ch.send(api_key, version, body, on_response)

    async def close(self) -> None:
        channels, self.channels = list(self.channels.values()), {}
        await asyncio.gather(*(ch.close() for ch in channels))


async def request_once(host: str, port: int, api_key: ApiKey, version: int, body: dict[str, Any],
                       timeout_s: float = REQUEST_TIMEOUT_S, client_id: str = CLIENT_ID,
                       security: ClientSecurity = PLAINTEXT_CLIENT) -> dict[str, Any]:
    """One request on a connection of its own, answered within `timeout_s` (a broker's ControlledShutdown to
    the controller: sent once at shutdown, so no channel is kept). Raises OSError, TimeoutError or
    asyncio.IncompleteReadError when the broker cannot be reached or does not answer."""
    async with asyncio.timeout(timeout_s):
        reader, writer = await open_connection(host, port, security)
        try:
            return await exchange(reader, writer, ClientConnection(client_id, MAX_RESPONSE_BYTES), api_key, version,
                                  body)
        finally:
            writer.close()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: ClientConnection,
                   api_key: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
    """Send one request and read its answer through the sans-IO framing every speaker uses (size limit,
    correlation check). A connection closed before the answer raises asyncio.IncompleteReadError."""
    _, frame = conn.send_request(api_key, version, body)
    writer.write(frame)
    await writer.drain()
    while True:
        data = await reader.read(65536)
        if not data:
            raise asyncio.IncompleteReadError(b"", None)
        answers = conn.feed(data)
        if answers:
            return answers[0][1]
