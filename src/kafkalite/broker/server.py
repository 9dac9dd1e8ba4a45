"""The network side of the broker: asyncio listeners, zero-copy fetch responses, and the bytes of each
connection moved through a `protocol.connection.ServerConnection` (framing, decoding, what to refuse).

Each connection handles one request at a time, in order (Kafka mutes a channel until its response is
sent), so pipelined requests get their responses in sequence and a long-polling fetch holds up only its
own connection. A frame that is too large or does not parse closes that connection and nothing else.
Record bytes of fetch responses go from the segment file to the socket with sendfile(2); on a TLS listener
(where the kernel cannot encrypt) they are read into one buffer per chunk and written through the TLS
transport: one copy per byte in Python before OpenSSL encrypts it.

Bytes arrive through a `broker.channel.Channel` (an asyncio BufferedProtocol): a frame in progress is read by the
kernel straight into the decoder's buffer of exactly its size and handed to the handlers from there.

A TLS listener does its handshake on the accepted connection (`Channel.start_tls`, `loop.start_tls`), so a
failed handshake (no or untrusted client certificate, a plaintext client on the TLS port) is logged once with
the peer and the reason and closes only that connection; a client certificate's subject becomes the session's principal.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import errno
import functools
import gc
import logging
import os
import socket
import ssl
import time
from typing import Any, Literal

from kafkalite.broker.apis import KafkaApis
from kafkalite.broker.assembly import assemble
from kafkalite.broker.channel import Channel
from kafkalite.broker.cluster_node import ClusterNode
from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.frame_buffers import FrameBuffers
from kafkalite.broker.metadata import MetadataStore, halt_on_metadata_dir_failure
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.broker.scram_admin import ScramAdmin
from kafkalite.broker.topic_admin import TopicAdmin
from kafkalite.cleaner.config import CleanerConfig
from kafkalite.cluster.local_store import LocalStore
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.cluster.store import ClusterStore
from kafkalite.cluster.zk_store import ZkStore
from kafkalite.config.listeners import TLS_PROTOCOLS
from kafkalite.coordinator import GroupCoordinator
from kafkalite.coordinator.config import OFFSETS_TOPIC
from kafkalite.errors import KafkaliteError
from kafkalite.manager.log_manager import LogManager
from kafkalite.protocol import FileRegion
from kafkalite.protocol.api_keys import ApiKey, api_name
from kafkalite.protocol.codec import RequestHeader
from kafkalite.protocol.connection import CloseConnection, InvalidReceiveError, RefusedRequest, Reply, ServerConnection
from kafkalite.security.sasl import JaasError, SaslServerAuthenticator, parse_jaas
from kafkalite.security.scram import ScramCredential
from kafkalite.security.session import Session
from kafkalite.security.tls import TlsSettings, peer_principal, server_context

log = logging.getLogger("kafkalite.broker")
TLS_HANDSHAKE_TIMEOUT_S = 30.0
CLOSE_WAIT_S = 2.0  # for a closed connection to finish closing (TLS: the close_notify exchange), then aborted
TLS_COPY_CHUNK = 1 << 20  # record bytes read per write on a TLS connection (bounds the buffer, not the copy count)

class _SaslState(SaslServerAuthenticator):
    """The authenticator plus what the server decided: `closing` says why the connection ends after the
    response just sent (a failed or refused SASL step)."""

    closing = ""


class Broker:
    """One kafkalite broker: a LogManager behind Kafka's wire protocol."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.logs: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self._registry: MetadataStore | None = None  # read before the logs load (their configs), then kept
        self.admin: TopicAdmin | None = None
        self.apis: KafkaApis | None = None
        self.coordinator: GroupCoordinator | None = None
        self.cluster: ClusterNode | None = None  # the broker's part in its cluster (of one, by default)
        self.scram_admin: ScramAdmin | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: dict[asyncio.Task[None], Channel] = {}
        self._last_active: dict[asyncio.Task[None], float] = {}
        self._stop = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self._started = False
        self.max_request_bytes = config.get("socket.request.max.bytes")
        # request frames of 128 KiB to 8 MiB are received into a few buffers shared by all connections (one loop)
        self._request_buffers = FrameBuffers(keep=4, min_size=128 * 1024, max_size=8 << 20)
        self.idle_timeout_s = config.get("connections.max.idle.ms") / 1000
        self.sasl_max_receive = config.get("sasl.server.max.receive.size")
        self._plain_users = _plain_users(config)
        self._sasl_listener: dict[str, tuple[list[str], int]] = {}

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the listeners, open the data dirs, then serve. Each failure raises a KafkaliteError whose one
        line says which: the address in use, the data dir that is not a directory or is locked, the config.

        No cyclic collection runs during start-up: everything it builds (logs, segments, partitions, the
        controller's first round) lives as long as the broker, and each collection would walk all of it again.
        With 10,000 partitions loaded, decoding the first LeaderAndIsr took 0.4 s instead of 0.04 s. Garbage
        made before start-up is collected first (~15 ms in a fresh process), so none of it is frozen with the
        logs, which leave the collector's sight (`gc.freeze`) as soon as they are loaded; what the rest of
        start-up built is collected and frozen at its end."""
        gc.collect()
        collecting = gc.isenabled()
        gc.disable()
        try:
            await self._start()
        finally:
            if collecting:
                gc.enable()

    async def _start(self) -> None:
        started = time.perf_counter()
        cfg = self.config
        # Bound first (not yet listening, so clients see nothing): a port in use then fails before any
        # data dir is locked, recovered or marked.
        contexts = {li.name: listener_tls_context(cfg, li.name) for li in cfg.listeners()}
        for li in cfg.listeners():
            factory = functools.partial(self._channel, li.name, cfg.security_protocol(li.name), contexts[li.name])
            self._servers.append(await _bind(factory, li.host, li.port))
        _check_data_dirs(cfg)
        try:
            self.logs = await asyncio.to_thread(
                LogManager, cfg.log_dirs, cfg.log_config(), cfg.manager_config(),
                topic_configs=self._saved_configs(), cleaner_config=CleanerConfig.from_broker_props(cfg.props))
        except OSError as exc:
            where = exc.filename or ", ".join(str(d) for d in cfg.log_dirs)
            raise KafkaliteError(f"cannot open the data directory (log.dirs) {where}: {exc.strerror or exc}") \
                from None
        # the loaded logs out of the collector's sight at once: the collection at the end of start-up then walks
        # only what was built after them (with 10,000 partitions a full collection took 0.3 s)
        gc.freeze()
        # kafkalite-metadata.json is the single broker's cluster store (LocalStore): the registry of hosted
        # topics is then only this broker's view of it; with ZooKeeper it is this broker's own file.
        registry = self._registry or MetadataStore(self.logs.dirs[0].path, persist=self._persists_registry())
        cache = MetadataCache(cfg.inter_broker_listener().name)  # what the controller's UpdateMetadata says
        store = cluster_store(cfg)
        self.replicas = ReplicaManager(cfg, self.logs, registry, cache=cache, store=store)
        self.admin = self.replicas.admin
        self.admin.adopt_logs()
        if any(li.port == 0 for li in cfg.advertised()):
            # Listening on ephemeral ports (tests): advertise the ports the OS picked, listener by listener.
            bound = dict(zip([li.name for li in cfg.listeners()], [s.sockets[0].getsockname()[1]
                                                                   for s in self._servers], strict=True))
            adv = ",".join(f"{li.name}://{li.host}:{li.port or bound.get(li.name, 0)}" for li in cfg.advertised())
            cfg = self.config = BrokerConfig.load(None, {**cfg.props, "advertised.listeners": adv})
        self.coordinator = await self._start_coordinator(cache)
        parts = assemble(cfg, self.replicas, self.coordinator, store, cache)
        self.cluster, self.apis, self.scram_admin = parts.cluster, parts.apis, parts.scram
        self.logs.startup()
        for server in self._servers:
            await server.start_serving()
        # Registered only once listening, so the controller (perhaps this broker) can connect (docs/cluster.md).
        await self.cluster.start()
        self.apis.ready.set()
        self._background.append(asyncio.create_task(self.replicas.run_checkpoints(self._stop)))
        self._background.append(asyncio.create_task(self._close_idle_connections()))
        # What start-up built (logs, segments, indexes, compiled protocol codecs) lives as long as the
        # broker; leaving it to the cyclic collector made every full collection walk it, a ~10 ms pause
        # in the middle of whatever requests were being served. Reference counting still frees it.
        gc.collect()
        gc.freeze()
        _release_free_memory()
        self._started = True
        log.info("kafkalite broker %d started in %.1f s: listening on %s, data in %s, %d partitions",
                    cfg.node_id, time.perf_counter() - started,
                    ", ".join(f"{h}:{p}" for h, p in self.addresses()),
                    ", ".join(str(d) for d in cfg.log_dirs), len(self.logs.logs))

    def _persists_registry(self) -> bool:
        return bool(self.config.get("zookeeper.connect"))

    def _saved_configs(self) -> dict[str, dict[str, object]]:
        """Topic overrides must be known before the logs load, so their configs apply from the start. The
        registry read for them is the broker's (the file is read once: with 10,000 partitions it is ~3 MB)."""
        self._registry = None
        try:
            store = self._registry = MetadataStore(self.config.log_dirs[0], persist=self._persists_registry())
        except Exception:  # the store reports a malformed file again, with advice, once the dir is locked
            return {}
        return {name: dict(t.configs) for name, t in store.topics.items() if t.configs}

    async def _start_coordinator(self, cache: MetadataCache) -> GroupCoordinator:
        replicas = self.replicas
        assert replicas is not None
        # the coordinator appends like an acks=all produce and waits through the same ReplicaManager
        write_offsets = functools.partial(replicas.append_for_coordinator, OFFSETS_TOPIC)
        # commits name partitions of the whole cluster, not only those with a log here
        coordinator = GroupCoordinator(replicas.logs, self.config, writer=write_offsets, replicas=replicas,
                                       partition_exists=lambda t, p: cache.partition(t, p) is not None)
        # the coordinator loads a partition's groups when it becomes its leader (LeaderAndIsr)
        await coordinator.start(lead_all=False)
        return coordinator

    def addresses(self) -> list[tuple[str, int]]:
        out = []
        for s in self._servers:
            for sock in s.sockets:
                host, port = sock.getsockname()[:2]
                out.append((host, port))
        return out

    @property
    def port(self) -> int:
        return self.addresses()[0][1]

    async def serve_until_stopped(self) -> None:
        await self._stop.wait()

    def request_stop(self) -> None:
        self._stop.set()

    async def stop(self) -> None:
        """Clean shutdown: stop accepting, finish nothing new, then flush, checkpoint and mark clean. After a
        failed start only what was opened is closed, without announcing a shutdown of a broker that never ran."""
        self._stop.set()
        if self._started and self.cluster is not None:  # still serving: leadership moves away first
            try:
                await self.cluster.controlled_shutdown()
            except Exception:
                log.exception("Controlled shutdown failed; stopping anyway")
        if self._started:
            log.info("Shutting down: flushing logs, writing checkpoints and the clean-shutdown marker")
        for s in self._servers:
            s.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for s in self._servers:
            with contextlib.suppress(Exception):
                await s.wait_closed()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                await self.cluster.stop()
            self.cluster = None
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.coordinator is not None:
            with contextlib.suppress(Exception):
                await self.coordinator.stop()
        if self.replicas is not None:
            self.replicas.purgatory.wake_all()
            await asyncio.to_thread(self.replicas.checkpoint_high_watermarks)
        if self.logs is not None:
            await asyncio.to_thread(self.logs.shutdown)
            if self._started:
                log.info("kafkalite broker %d shut down cleanly", self.config.node_id)
            self.logs = None
        self._started = False

    # --- connections ------------------------------------------------------------------------------

    async def _close_idle_connections(self) -> None:
        """connections.max.idle.ms, checked by one sweeper rather than a timer per read (cheaper per request)."""
        period = max(0.05, min(self.idle_timeout_s / 4, 30.0))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for task, last in list(self._last_active.items()):
                if now - last > self.idle_timeout_s:
                    writer = self._writers.get(task)
                    if writer is not None:
                        log.info("Closing connection from %s: idle for more than connections.max.idle.ms",
                                 writer.get_extra_info("peername"))
                        writer.close()
                    self._last_active.pop(task, None)

    def _channel(self, listener: str, protocol: str, tls: ssl.SSLContext | None) -> Channel:
        """The protocol of an accepted connection; its serving task starts once the transport is made."""
        def made(channel: Channel) -> None:
            asyncio.get_running_loop().create_task(self._on_connection(listener, protocol, tls, channel))
        return Channel(tls=tls is not None, on_made=made)

    async def _on_connection(self, listener: str, protocol: str, tls: ssl.SSLContext | None,
                             writer: Channel) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers[task] = writer
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else "?"
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            session = Session(host=host, listener=listener, protocol=protocol)
            if tls is not None:
                # No await before this point: the client's first TLS bytes must reach the TLS protocol.
                principal = await _handshake(writer, tls, peer, listener)
                if principal is False:
                    return
                if principal is not None:
                    session.principal = principal
            await self._serve(writer, session)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("Unexpected error serving %s; closing the connection", peer)
        finally:
            self._connections.discard(task)
            self._writers.pop(task, None)
            self._last_active.pop(task, None)
            writer.close()
            try:  # a TLS peer that never answers close_notify must not hold the broker (or its stop) for long
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await writer.wait_closed()
            except Exception:
                writer.transport.abort()

    async def _serve(self, writer: Channel, session: Session) -> None:
        """Requests one at a time: the channel reads the next frame into the connection's decoder (into a buffer
        of its own, or one of the shared `_request_buffers` no view of an earlier request still holds: no copy),
        answer, repeat; the channel is muted while a request is handled. On a SASL_* listener frames are bounded
        by sasl.server.max.receive.size until the client has authenticated."""
        assert self.apis is not None
        task = asyncio.current_task()
        sasl = self._authenticator(session)
        limit = self.max_request_bytes if sasl is None else self.sasl_max_receive
        conn = ServerConnection(limit, self.apis.handles, self._request_buffers)
        writer.decoder = conn.frames
        writer.read_ahead = sasl is None
        while True:
            self._last_active[task] = time.monotonic()  # type: ignore[index]
            try:
                frames = [await writer.next_frame()]
            except InvalidReceiveError as exc:
                what = ("socket.request.max.bytes" if conn.frames.max_size == self.max_request_bytes
                        else "sasl.server.max.receive.size, before authentication")
                log.warning("Closing connection from %s: %s (%s)", session.host, exc, what)
                return
            for frame in frames:
                response: list[Any] | Literal[False] | None
                if sasl is not None and sasl.raw_tokens:
                    response = await self._raw_sasl_token(sasl, frame, session)
                else:
                    response = await self._handle_frame(conn, frame, session, sasl)
                if response is None:
                    continue
                if response is False:
                    return
                await self._send(writer, response)
                if sasl is not None and sasl.closing:
                    log.info("Closing connection from %s (listener %s): %s", session.host, session.listener,
                             sasl.closing)
                    return
            if sasl is not None:
                conn.frames.max_size = self.max_request_bytes if sasl.authenticated else self.sasl_max_receive
                writer.read_ahead = sasl.authenticated

    def _authenticator(self, session: Session) -> _SaslState | None:
        """The SASL authenticator of a connection on a SASL_* listener (None on the others)."""
        if not session.protocol.startswith("SASL_"):
            return None
        plain = self._plain_users.get(session.listener, {})
        mechanisms, reauth_ms = self._sasl_listener.get(session.listener) or self._sasl_settings(session.listener)
        return _SaslState(mechanisms, plain, self._scram_credential, reauth_ms)

    def _sasl_settings(self, listener: str) -> tuple[list[str], int]:
        """A listener's mechanisms and connections.max.reauth.ms (both per listener, as Kafka's), read once."""
        out = (self.config.sasl_mechanisms(listener),
               self.config.listener_prop(listener, "connections.max.reauth.ms"))
        self._sasl_listener[listener] = out
        return out

    async def _scram_loaded(self) -> None:
        """During start-up a SCRAM login waits until the cluster part has read the credentials (not for the
        whole start-up: the broker's own controller may log in with SCRAM before the broker is ready)."""
        while self.scram_admin is None:
            await asyncio.sleep(0.02)
        await self.scram_admin.loaded.wait()

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return None if self.scram_admin is None else self.scram_admin.credentials.get(user, mechanism)

    async def _raw_sasl_token(self, sasl: _SaslState, frame: memoryview, session: Session
                              ) -> list[Any] | Literal[False]:
        """A token in SaslHandshake v0 framing: answered by a raw size-prefixed token, or the connection closed."""
        if sasl.mechanism != "PLAIN":
            await self._scram_loaded()
        outcome = sasl.raw_token(bytes(frame))
        if outcome.close:
            log.info("Closing connection from %s (listener %s): SASL authentication failed: %s", session.host,
                     session.listener, outcome.reason)
            return False
        self._authenticated(sasl, session)
        token = outcome.token or b""
        return [len(token).to_bytes(4, "big") + token]

    @staticmethod
    def _authenticated(sasl: _SaslState, session: Session) -> None:
        if sasl.authenticated and session.principal != sasl.principal:
            session.principal = sasl.principal
            log.debug("Authenticated %s from %s on listener %s with %s", sasl.principal, session.host,
                     session.listener, sasl.mechanism)

    async def _handle_frame(self, conn: ServerConnection, frame: memoryview, session: Session,
                            sasl: _SaslState | None = None) -> list[Any] | Literal[False] | None:
        """The response parts, None when there is nothing to send, False to close the connection."""
        assert self.apis is not None
        try:
            request = conn.decode(frame)
        except RefusedRequest as exc:
            log.warning("Closing connection from %s: %s", session.host, exc)
            return False
        if isinstance(request, Reply):
            return request.parts
        header = request.header
        if sasl is not None:
            if header.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
                return await self._sasl_request(conn, request.header, request.body, sasl, session)
            if not sasl.authenticated:
                if header.api_key != ApiKey.API_VERSIONS:
                    log.warning("Closing connection from %s (listener %s): %s request before SASL authentication "
                                "(only ApiVersions, SaslHandshake and SaslAuthenticate are served then)",
                                session.host, session.listener, api_name(header.api_key))
                    return False
            elif sasl.expired():
                log.info("Closing connection from %s (listener %s): the SASL session of %s expired "
                         "(connections.max.reauth.ms) without re-authentication", session.host, session.listener,
                         session.principal)
                return False
        try:
            body_out = await self.apis.handle(request.header, request.body, session)
        except CloseConnection as exc:
            log.info("Closing connection from %s: %s", session.host, exc)
            return False
        if body_out is None:
            return None
        return conn.encode(request.header, body_out)

    async def _sasl_request(self, conn: ServerConnection, header: RequestHeader, body: dict[str, Any],
                            sasl: _SaslState, session: Session) -> list[Any]:
        """SaslHandshake / SaslAuthenticate on a SASL_* listener, answered by the connection's authenticator;
        a failure is answered, then the connection closes (`sasl.closing`)."""
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            outcome = sasl.handshake(header.api_version, str(body.get("mechanism", "")))
        else:
            if sasl.mechanism != "PLAIN":
                await self._scram_loaded()
            outcome = sasl.authenticate(header.api_version, bytes(body.get("auth_bytes") or b""))
        if outcome.close:
            sasl.closing = f"SASL authentication failed: {outcome.reason}"
        else:
            self._authenticated(sasl, session)
        assert outcome.body is not None
        return conn.encode(header, outcome.body)

    async def _send(self, writer: Channel | asyncio.StreamWriter, parts: list[Any]) -> None:
        """A response's parts in order. With file regions on a plaintext channel, the channel writes them to
        the socket itself (`Channel.send_parts`: sendfile per region, no selector churn between them)."""
        loop = asyncio.get_running_loop()
        i = 0
        try:
            if isinstance(writer, Channel) and writer.sends_directly:
                regions = sum(p.size for p in parts if isinstance(p, FileRegion))
                if regions:
                    sent = await writer.send_parts(parts)
                    if sent != regions:  # a file shrank under us: the frame can't be completed
                        raise ConnectionError(f"sent {sent} of {regions} record bytes")
                    return
            while i < len(parts):
                part = parts[i]
                i += 1
                if isinstance(part, FileRegion):
                    with open(part.fd, "rb", buffering=0, closefd=True) as f:  # owns (and closes) the dup'd fd
                        await writer.drain()
                        if writer.get_extra_info("sslcontext") is not None:  # TLS: no sendfile
                            sent = await _write_region_copied(writer, f.fileno(), part.position, part.size)
                        else:
                            sent = await loop.sendfile(writer.transport, f, part.position, part.size)
                    if sent != part.size:  # the file shrank under us: the frame can't be completed
                        raise ConnectionError(f"sent {sent} of {part.size} record bytes")
                else:
                    writer.write(part)
            await writer.drain()
        finally:
            for part in parts[i:]:
                if isinstance(part, FileRegion):
                    os.close(part.fd)


def listener_tls_context(cfg: BrokerConfig, listener: str) -> ssl.SSLContext | None:
    """The server context of an SSL / SASL_SSL listener from its ssl.* settings (per-listener overrides
    first); None for the others. A bad setting raises InvalidConfigError naming the listener and key."""
    protocol = cfg.security_protocol(listener)
    if protocol not in TLS_PROTOCOLS:
        return None
    settings = TlsSettings.read(functools.partial(cfg.listener_prop, listener), where=f"listener {listener}")
    if protocol == "SASL_SSL" and f"listener.name.{listener.lower()}.ssl.client.auth" not in cfg.props:
        # KIP-684: on SASL_SSL listeners SASL authenticates; ssl.client.auth applies only listener-prefixed
        settings = dataclasses.replace(settings, client_auth="none")
    return server_context(settings)


async def _handshake(writer: Channel | asyncio.StreamWriter, tls: ssl.SSLContext, peer: Any, listener: str
                     ) -> str | Literal[False] | None:
    """The server side of the TLS handshake: the client certificate's principal (None without one), or False
    when the handshake failed, logged once with the peer and OpenSSL's reason."""
    try:
        await writer.start_tls(tls, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
    except (ssl.SSLError, OSError, TimeoutError, EOFError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "verify_message", None) or str(exc) or \
            type(exc).__name__
        if isinstance(exc, ssl.SSLCertVerificationError):
            reason = f"client certificate refused: {exc.verify_message}"
        if isinstance(exc, ssl.SSLError | TimeoutError):
            log.warning("TLS handshake with %s on listener %s failed, closing the connection: %s", peer, listener,
                        reason)
        else:  # the peer went away first (a port probe, a client giving up): not a TLS failure
            log.info("Connection from %s on listener %s closed before the TLS handshake completed: %s", peer,
                     listener, reason)
        return False
    return peer_principal(writer.get_extra_info("ssl_object"))


async def _write_region_copied(writer: Channel | asyncio.StreamWriter, fd: int, position: int, size: int) -> int:
    """Record bytes through a TLS transport: each chunk read once into a new buffer (the transport may keep a
    reference until OpenSSL has taken it) and written; returns the bytes sent (less if the file shrank)."""
    sent = 0
    while sent < size:
        buf = bytearray(min(size - sent, TLS_COPY_CHUNK))
        got = os.preadv(fd, [buf], position + sent)
        if got <= 0:
            break
        writer.write(memoryview(buf)[:got] if got < len(buf) else buf)
        sent += got
        await writer.drain()
    return sent


def cluster_store(cfg: BrokerConfig) -> ClusterStore:
    """ZooKeeper when zookeeper.connect is set; otherwise the single broker's own file-backed store, with the
    same znodes, in kafkalite-metadata.json of the first log dir (a failed metadata dir halts, as in Kafka)."""
    if cfg.get("zookeeper.connect"):
        return ZkStore(cfg.get("zookeeper.connect"), cfg.get("zookeeper.session.timeout.ms"),
                       cfg.get("zookeeper.connection.timeout.ms"))
    return LocalStore(cfg.log_dirs[0], cfg.node_id, on_fatal=halt_on_metadata_dir_failure)


async def _bind(factory: Any, host: str, port: int) -> asyncio.base_events.Server:
    """A bound socket, not yet accepting; an address in use or not local says so with host:port."""
    try:
        return await asyncio.get_running_loop().create_server(factory, host or None, port, reuse_address=True,
                                                              start_serving=False)
    except OSError as exc:
        addr = f"[{host}]:{port}" if ":" in host else f"{host or '0.0.0.0'}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise KafkaliteError(f"cannot listen on {addr} (listeners): the address is already in use, "
                                 "perhaps by another broker") from None
        raise KafkaliteError(f"cannot listen on {addr} (listeners): {exc.strerror or exc}") from None


def _plain_users(cfg: BrokerConfig) -> dict[str, dict[str, str]]:
    """listener -> PLAIN users (`user_<name>="<password>"` of its PlainLoginModule JAAS text). A SASL listener
    offering PLAIN without JAAS text, or with text that does not parse, stops the broker naming the key."""
    out: dict[str, dict[str, str]] = {}
    for li in cfg.listeners():
        if not cfg.security_protocol(li.name).startswith("SASL_") or "PLAIN" not in cfg.sasl_mechanisms(li.name):
            continue
        key = f"listener.name.{li.name.lower()}.plain.sasl.jaas.config"
        text = cfg.sasl_jaas_config(li.name, "PLAIN")
        if not text.strip():
            raise KafkaliteError(f"listener {li.name} offers SASL mechanism PLAIN but {key} (or sasl.jaas.config) "
                                 "is not set: give PlainLoginModule with user_<name>=\"<password>\" entries")
        try:
            entry = parse_jaas(text, key)
        except JaasError as exc:
            raise KafkaliteError(str(exc)) from None
        if not entry.module.endswith("PlainLoginModule"):
            raise KafkaliteError(f"{key}: login module {entry.module} is not supported for PLAIN (use "
                                 "org.apache.kafka.common.security.plain.PlainLoginModule)")
        out[li.name] = entry.plain_users()
    return out


def _check_data_dirs(cfg: BrokerConfig) -> None:
    """Each entry of log.dirs must be a directory or creatable as one: a file in its place is named here,
    before the manager would report it as something else."""
    for d in cfg.log_dirs:
        for p in (d, *d.parents):
            if p.exists():
                if not p.is_dir():
                    what = "is" if p == d else f"is inside {p}, which is"
                    raise KafkaliteError(f"the data directory {d} (log.dirs) {what} not a directory")
                break


def _release_free_memory() -> None:
    """Hand the C allocator's free pages back to the system once start-up is over (glibc's malloc_trim).
    Recovering thousands of partitions after kill -9 frees its read buffers all over the allocator's heaps;
    without this they stayed resident for as long as the broker ran (10,000 partitions, bench scale: idle RSS
    after kill -9 restarts 12.4 -> 12.0 KiB a partition)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to hand back this way
        return
    trim(0)
