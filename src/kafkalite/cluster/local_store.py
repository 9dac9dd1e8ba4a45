"""The cluster store of a single broker: the same znodes and the same store code as ZooKeeper mode, kept in
process and saved in `kafkalite-metadata.json` (the single-broker metadata file, read compatibly).

`LocalStore` is ZkStore with `LocalClient` in place of kazoo's client: a tree of znodes with ZooKeeper's
rules (versions, creation ids, ephemeral nodes owned by a session, sequential children, multi-ops that apply
all or nothing, data and children watches that re-arm), so the controller and the brokers' code run
unchanged over it. Persistent znodes are written to the file after every change (atomically); ephemeral
ones (registrations, /controller) live as long as the session that made them, i.e. the process.

File format: the version-1 document of broker/metadata.py (`topics` with name, id, partition count and
configs; `next_producer_id_block`), which older kafkalite versions read, plus `znodes`, the persistent tree
itself. A file without `znodes` (written by MetadataStore) is read as topics whose partitions all have
this broker as their only replica.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError
from kazoo.protocol.states import ZnodeStat

from kafkalite.cluster import znodes as z
from kafkalite.cluster.store import ControllerLease
from kafkalite.cluster.zk_store import ZkStore
from kafkalite.cluster.znodes import PartitionState
from kafkalite.errors import KafkaliteError, KafkaStorageError, metadata_write_error
from kafkalite.storage.checkpoint import atomic_write

METADATA_FILE = "kafkalite-metadata.json"
FatalCallback = Callable[[Path, OSError], None]
_on_loop = threading.local()  # `reads_only` is set while a store operation runs on the event loop


class _WouldWrite(Exception):
    """A store operation run on the event loop reached a write: it is run again on a worker thread."""


@dataclass(frozen=True, slots=True)
class _Node:
    data: bytes
    version: int
    czxid: int
    mzxid: int
    owner: int  # session id of an ephemeral node's creator, 0 for persistent nodes
    next_seq: int = 0  # the next sequential child's number


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _stat(n: _Node, children: int = 0) -> ZnodeStat:
    return ZnodeStat(n.czxid, n.mzxid, 0, 0, n.version, 0, 0, n.owner, len(n.data), children, n.mzxid)


def _document_text(doc: dict[str, Any]) -> bytes:
    """The file's text: readable (one znode a line) and made by json's C encoder, which `indent` turns off.
    With 10,000 partitions the file is 3 MB, written on every change: 0.16 s indented, 0.05 s like this."""
    head = json.dumps({k: v for k, v in doc.items() if k != "znodes"}, indent=1)
    # entries are flat objects of names and numbers, and a quote inside a string is escaped: `}, "` occurs only
    # between two entries
    znodes = json.dumps(doc["znodes"])[1:-1].replace('}, "', '},\n  "')
    return f'{head[:-2]},\n "znodes": {{\n  {znodes}\n }}\n}}\n'.encode()


class LocalTree:
    """The znodes of one metadata file, shared by every LocalClient of the process that opens it."""

    _open: ClassVar[dict[Path, LocalTree]] = {}
    _open_lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def of(cls, path: Path, broker_id: int, on_fatal: FatalCallback | None = None) -> LocalTree:
        path = path.resolve()
        with cls._open_lock:
            tree = cls._open.get(path)
            if tree is None:
                tree = cls._open[path] = LocalTree(path, broker_id, on_fatal)
            return tree

    def __init__(self, path: Path, broker_id: int, on_fatal: FatalCallback | None = None) -> None:
        self.path = path
        self.on_fatal = on_fatal  # a failed metadata dir (not a full disk): the broker halts, as Kafka's does
        self.lock = threading.RLock()
        self.nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, 0, 0)}
        self.zxid = 0
        self.sessions = itertools.count(1)
        self.live: set[int] = set()  # sessions of open clients; the tree is forgotten when the last ends
        self.data_watches: dict[str, list[Callable[..., Any]]] = {}
        self.child_watches: dict[str, list[Callable[..., Any]]] = {}
        self._children: tuple[dict[str, _Node], dict[str, list[str]]] | None = None  # see `children`
        self._load(broker_id)

    # --- persistence --------------------------------------------------------------------------------

    def _load(self, broker_id: int) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            if "znodes" in doc:
                self.zxid = int(doc.get("zxid", 0))
                for p, entry in doc["znodes"].items():
                    self.nodes[p] = _Node(base64.b64decode(entry["data"]), int(entry["version"]),
                                          int(entry["czxid"]), int(entry["mzxid"]), 0, int(entry.get("seq", 0)))
                return
            # a single-broker file (broker/metadata.py): its topics, all led by this broker
            for t in doc.get("topics", []):
                name = str(t["name"])
                topic_id = uuid.UUID(t["id"])
                count = int(t["partitions"])
                assignment = z.TopicAssignment(name, topic_id, {p: [broker_id] for p in range(count)})
                self._put(z.topic_config_path(name), z.encode_topic_config(
                    {str(k): str(v) for k, v in t.get("configs", {}).items()}))
                self._put(z.topic_path(name), assignment.encode())
            limit = int(doc.get("next_producer_id_block", 0))
            if limit:
                start = max(0, limit - z.PRODUCER_ID_BLOCK_SIZE)
                self._put(z.LATEST_PRODUCER_ID_BLOCK, z.ProducerIdBlock(broker_id, start, limit - 1).encode())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KafkaliteError(f"{self.path} is malformed ({exc}); fix or remove it") from None

    def _put(self, path: str, data: bytes) -> None:
        for i, _ in enumerate(path):
            if path[i] == "/" and i > 0 and path[:i] not in self.nodes:
                self._put(path[:i], b"")
        self.zxid += 1
        self.nodes[path] = _Node(data, 0, self.zxid, self.zxid, 0)

    def save(self, nodes: dict[str, _Node] | None = None, zxid: int | None = None) -> None:
        """Write `nodes` (the tree by default). A full disk or descriptor exhaustion fails only the change
        (KafkaStorageError, the tree unchanged); any other error means the metadata dir is lost: `on_fatal`."""
        try:
            self._write(self.nodes if nodes is None else nodes, self.zxid if zxid is None else zxid)
        except OSError as exc:
            retriable = metadata_write_error(self.path, exc)
            if retriable is not None:
                raise retriable from exc
            if self.on_fatal is not None:
                self.on_fatal(self.path, exc)
            raise KafkaStorageError(f"the metadata dir {self.path.parent} failed: {exc}") from exc

    def _write(self, nodes: dict[str, _Node], zxid: int) -> None:
        persistent = {p: n for p, n in nodes.items() if n.owner == 0 and p != "/"}
        topics = []
        for p, n in sorted(persistent.items()):
            if _parent(p) == z.BROKER_TOPICS:
                a = z.TopicAssignment.decode(p.rsplit("/", 1)[1], n.data)
                cfg = persistent.get(z.topic_config_path(a.topic))
                topics.append({"name": a.topic, "id": str(a.topic_id), "partitions": len(a.partitions),
                               "configs": z.decode_topic_config(a.topic, cfg.data) if cfg else {}})
        block = persistent.get(z.LATEST_PRODUCER_ID_BLOCK)
        doc = {
            "version": 1,
            "topics": topics,
            "next_producer_id_block": z.ProducerIdBlock.decode(block.data).end + 1 if block and block.data else 0,
            "zxid": zxid,
            "znodes": {p: {"data": base64.b64encode(n.data).decode("ascii"), "version": n.version,
                           "czxid": n.czxid, "mzxid": n.mzxid, "seq": n.next_seq}
                       for p, n in sorted(persistent.items())},
        }
        atomic_write(self.path, _document_text(doc))

    # --- operations (under the lock; return the watches to fire) ---------------------------------------

    def children(self, nodes: dict[str, _Node], path: str) -> list[str]:
        """`nodes` is the tree (`self.nodes`, never changed once published: its children are indexed once, as a
        scan of 20,000 znodes per call made a start-up's reads of a few parents cost 0.1 s) or `apply`'s working
        copy (changing under it: scanned)."""
        prefix = path.rstrip("/") + "/"
        if nodes is not self.nodes:
            return sorted(p[len(prefix):] for p in nodes if p.startswith(prefix) and "/" not in p[len(prefix):])
        indexed = self._children
        if indexed is None or indexed[0] is not nodes:
            by_parent: dict[str, list[str]] = {}
            for p in nodes:
                if p != "/":
                    parent, _, name = p.rpartition("/")
                    by_parent.setdefault(parent + "/", []).append(name)
            indexed = self._children = (nodes, by_parent)
        return sorted(indexed[1].get(prefix, ()))

    # over the complexity limit: still to split (issue 34)
    def apply(self, ops: list[tuple[Any, ...]], session: int) -> list[Any]:  # noqa: C901
        """Run ops all or nothing; results as kazoo's transaction gives them (exceptions in the list)."""
        if getattr(_on_loop, "reads_only", False):
            raise _WouldWrite  # before any change: the operation is run again, whole, on a worker thread
        with self.lock:
            nodes = dict(self.nodes)
            zxid = self.zxid
            results: list[Any] = []
            touched: set[str] = set()
            for op in ops:
                try:
                    kind, path = op[0], op[1]
                    if kind == "create":
                        _, _, data, ephemeral, sequence = op
                        parent = _parent(path)
                        if parent not in nodes:
                            raise NoNodeError(path)
                        if nodes[parent].owner:
                            raise NoNodeError(f"{parent} is ephemeral")
                        if sequence:
                            seq = nodes[parent].next_seq
                            nodes[parent] = replace(nodes[parent], next_seq=seq + 1)
                            path = f"{path}{seq:010d}"
                        if path in nodes:
                            raise NodeExistsError(path)
                        zxid += 1
                        nodes[path] = _Node(data, 0, zxid, zxid, session if ephemeral else 0)
                        results.append(path)
                    elif kind == "set":
                        _, _, data, version = op
                        n = nodes.get(path)
                        if n is None:
                            raise NoNodeError(path)
                        if version not in (-1, n.version):
                            raise BadVersionError(path)
                        zxid += 1
                        nodes[path] = replace(n, data=data, version=n.version + 1, mzxid=zxid)
                        results.append(_stat(nodes[path]))
                    elif kind == "check":
                        n = nodes.get(path)
                        if n is None:
                            raise NoNodeError(path)
                        if op[2] != n.version:
                            raise BadVersionError(path)
                        results.append(True)
                        continue
                    elif kind == "delete":
                        n = nodes.get(path)
                        if n is None:
                            raise NoNodeError(path)
                        if op[2] not in (-1, n.version):
                            raise BadVersionError(path)
                        if self.children(nodes, path):
                            raise NotEmptyError(path)
                        del nodes[path]
                        zxid += 1
                        results.append(True)
                    touched.add(path)
                except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError) as exc:
                    failed = [RolledBackError() for _ in results] + [exc]
                    failed += [RolledBackError() for _ in ops[len(failed):]]
                    return failed
            before = self.nodes
            persistent = any((p in before and before[p].owner == 0) or (p in nodes and nodes[p].owner == 0)
                             for p in touched)
            if persistent:
                self.save(nodes, zxid)  # first: a failed write leaves the tree as the file still is
            self.nodes, self.zxid = nodes, zxid
        self._fire(touched)
        return results

    def _fire(self, touched: set[str]) -> None:
        """Data watches of the touched nodes, and children watches of their parents (once per parent, as
        ZooKeeper coalesces): a multi-op creating thousands of partitions must not list a parent per node."""
        calls: list[tuple[str, Callable[..., Any], tuple[Any, ...], str]] = []
        with self.lock:
            parents: set[str] = set()
            for path in sorted(touched):
                fns = self.data_watches.get(path)
                if fns:
                    n = self.nodes.get(path)
                    data = (n.data, _stat(n)) if n is not None else (None, None)
                    calls += [("data", fn, data, path) for fn in fns]
                parent = _parent(path)
                if parent not in parents and self.child_watches.get(parent):
                    parents.add(parent)
                    kids = self.children(self.nodes, parent)
                    calls += [("children", fn, (kids,), parent) for fn in self.child_watches[parent]]
        for kind, fn, args, path in calls:
            if fn(*args) is False:
                watches = self.data_watches if kind == "data" else self.child_watches
                with self.lock, contextlib.suppress(ValueError):
                    watches[path].remove(fn)

    def end_session(self, session: int) -> None:
        with self.lock:
            mine = sorted((p for p, n in self.nodes.items() if n.owner == session), reverse=True)
        for p in mine:
            self.apply([("delete", p, -1)], session)
        with LocalTree._open_lock:
            self.live.discard(session)
            if not self.live and LocalTree._open.get(self.path) is self:
                del LocalTree._open[self.path]  # opened again, it is read from the file


class _Transaction:
    def __init__(self, client: LocalClient) -> None:
        self.client = client
        self.ops: list[tuple[Any, ...]] = []

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False, sequence: bool = False) -> None:
        self.ops.append(("create", path, value, ephemeral, sequence))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(("set", path, value, version))

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", path, version))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(("delete", path, version))

    def commit(self) -> list[Any]:
        return self.client.tree.apply(self.ops, self.client.session)


@dataclass(frozen=True, slots=True)
class _Answered:
    """What kazoo's IAsyncResult gives ZkStore: `get()` returns the value or raises the error."""
    value: Any
    error: Exception | None

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class LocalClient:
    """The part of kazoo's KazooClient that ZkStore uses, over a LocalTree; one session per client."""

    def __init__(self, tree: LocalTree) -> None:
        self.tree = tree
        with LocalTree._open_lock:
            self.session = next(tree.sessions)
            tree.live.add(self.session)
        self.client_id = (self.session, b"")

    def _one(self, op: tuple[Any, ...]) -> Any:
        result = self.tree.apply([op], self.session)[0]
        if isinstance(result, Exception):
            raise result
        return result

    def start(self, timeout: float | None = None) -> None:
        pass

    def stop(self) -> None:
        self.tree.end_session(self.session)

    def close(self) -> None:
        pass

    def add_listener(self, _listener: Callable[[str], None]) -> None:
        pass  # a session in the process never expires

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False, sequence: bool = False,
               makepath: bool = False, include_data: bool = False) -> Any:
        if makepath:
            self.ensure_path(_parent(path))
        created = self._one(("create", path, value, ephemeral, sequence))
        return (created, self.exists(created)) if include_data else created

    def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        nodes = self.tree.nodes  # a snapshot without the lock: apply() replaces the dict, never changes it
        n = nodes.get(path)
        if n is None:
            raise NoNodeError(path)
        # numChildren is left 0: ZkStore never reads it, and counting would scan the whole tree per read
        return n.data, _stat(n)

    def get_async(self, path: str) -> _Answered:
        """kazoo's pipelined read, for ZkStore's batched reads; in memory it is answered at once."""
        try:
            return _Answered(self.get(path), None)
        except NoNodeError as exc:
            return _Answered(None, exc)

    def exists(self, path: str) -> ZnodeStat | None:
        try:
            return self.get(path)[1]
        except NoNodeError:
            return None

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return self._one(("set", path, value, version))

    def delete(self, path: str, version: int = -1) -> None:
        self._one(("delete", path, version))

    def get_children(self, path: str) -> list[str]:
        nodes = self.tree.nodes
        if path not in nodes:
            raise NoNodeError(path)
        return self.tree.children(nodes, path)

    def ensure_path(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if self.exists(sub) is None:
                with contextlib.suppress(NodeExistsError):
                    self._one(("create", sub, b"", False, False))

    def ChildrenWatch(self, path: str, func: Callable[[list[str]], Any]) -> None:
        if func(self.get_children(path)) is not False:
            with self.tree.lock:
                self.tree.child_watches.setdefault(path, []).append(func)

    def DataWatch(self, path: str, func: Callable[..., Any]) -> None:
        try:
            data, stat = self.get(path)
        except NoNodeError:
            data, stat = None, None
        if func(data, stat) is not False:
            with self.tree.lock:
                self.tree.data_watches.setdefault(path, []).append(func)


class LocalStore(ZkStore):
    """The ClusterStore of single-broker mode: ZkStore's code over the in-process LocalClient."""

    def __init__(self, directory: Path, broker_id: int, on_fatal: FatalCallback | None = None) -> None:
        self.file = Path(directory) / METADATA_FILE
        super().__init__(f"local:{self.file}")
        self.hosts, self.chroot = str(self.file), ""
        self.broker_id = broker_id
        self.on_fatal = on_fatal

    async def _connect(self) -> Any:
        return LocalClient(LocalTree.of(self.file, self.broker_id, self.on_fatal))

    async def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Reads of the in-memory tree are answered on the event loop (a thread hop each would dominate a
        start-up reading thousands of partition states); an operation that writes (and so saves the file)
        stops before its first change and runs on a worker thread as ZkStore's do."""
        if self.client is not None and not self._closing:
            _on_loop.reads_only = True
            try:
                return fn(*args, **kwargs)
            except _WouldWrite:
                pass
            finally:
                _on_loop.reads_only = False
        return await super()._run(fn, *args, **kwargs)

    async def create_partition_states(self, lease: ControllerLease,
                                      states: Mapping[tuple[str, int], PartitionState]
                                      ) -> dict[tuple[str, int], PartitionState]:
        """One fenced multi-op for the paths and states of all partitions (ZkStore makes each path alone and
        splits the states into ZooKeeper-sized multis): each change of the local tree rewrites the file, so
        a topic of thousands of partitions is one write here, not thousands."""
        def run() -> dict[tuple[str, int], PartitionState]:
            def ops(t: Any) -> None:
                made: set[str] = set()
                for (topic, p), s in states.items():
                    for path in (_parent(z.partition_path(topic, p)), z.partition_path(topic, p)):
                        if path not in made and self.zk.exists(path) is None:
                            t.create(path, b"")
                            made.add(path)
                    t.create(z.partition_state_path(topic, p), s.encode())
            self._fenced(lease, ops)
            return {key: PartitionState(s.leader, s.leader_epoch, s.isr, s.controller_epoch, 0)
                    for key, s in states.items()}
        return await self._run(run)
