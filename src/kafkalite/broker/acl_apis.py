"""The broker's ACLs: the authorizer named by `authorizer.class.name`, kept current from the cluster store, and
the DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) handlers.

ACLs live in the store (ZooKeeper's /kafka-acl and /kafka-acl-extended layout, or the single broker's metadata
file), written with conditional (versioned) writes and announced by /kafka-acl-changes and
/kafka-acl-extended-changes notifications. Every broker loads them all at start-up, before serving, and re-reads
the pattern a new notification names, as Kafka's AclAuthorizer does; the broker that made a change applies it
to its own cache at once, so a client sees its own change on that broker immediately.
Without an authorizer the three APIs answer SECURITY_DISABLED, as Kafka does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kafkalite.broker.authz import RequestAuthorizer
from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.handlers import Handler
from kafkalite.cluster import znodes as z
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.cluster.store import ClusterStore
from kafkalite.errors import InvalidRequestError, KafkaliteError
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.acl import (
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
    authorizer_from_config,
)
from kafkalite.security.session import Session

log = logging.getLogger("kafkalite.broker.acls")

Body = dict[str, Any]  # (broker/handlers.py's)
NO_AUTHORIZER = "No Authorizer is configured on the broker"
CHANGE_EXPIRY_MS = 15 * 60 * 1000  # Kafka's changeExpirationMs: older ACL change notifications are deleted
WRITE_ATTEMPTS = 20  # conditional writes retried when another broker changed the same pattern meanwhile


def _enum(cls: Any, value: int, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise InvalidRequestError(f"Unknown {what} code {value}") from None


def _filter(f: Body) -> AclBindingFilter:
    flt = AclBindingFilter(
        _enum(ResourceType, f["resource_type_filter"], "resource type"), f.get("resource_name_filter"),
        _enum(PatternType, f.get("pattern_type_filter", PatternType.LITERAL), "pattern type"),
        f.get("principal_filter"), f.get("host_filter"), _enum(AclOperation, f["operation"], "operation"),
        _enum(AclPermission, f["permission_type"], "permission type"))
    flt.validate()
    return flt


def _without(flt: AclBindingFilter, entries: frozenset[AclEntry]) -> frozenset[AclEntry]:
    return frozenset(e for e in entries if not flt.matches_entry(e))


def _wire(b: AclBinding) -> Body:
    return {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
            "pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal, "host": b.entry.host,
            "operation": int(b.entry.operation), "permission_type": int(b.entry.permission)}


class AclApis:
    """The ACL part of one broker (see the module docstring)."""

    def __init__(self, config: BrokerConfig, store: ClusterStore, cache: MetadataCache | None) -> None:
        """With the broker's metadata `cache`, the request gate (`authz`) too; without (`kafkalite acls
        --authorizer-properties`), only the ACL APIs over the store."""
        self.store = store
        self.authorizer: AclAuthorizer | None = authorizer_from_config(
            config.get("authorizer.class.name"), config.get("super.users"),
            config.get("allow.everyone.if.no.acl.found"))
        self.authz: RequestAuthorizer | None = None
        if self.authorizer is not None and cache is not None:
            self.authz = RequestAuthorizer(
                self.authorizer, auto_create=lambda: bool(config.get("auto.create.topics.enable")),
                topic_exists=lambda name: name in cache.topics, topic_name_of=cache.by_id)
        self._seen: dict[str, set[str]] = {z.ACL_CHANGES: set(), z.ACL_EXTENDED_CHANGES: set()}
        self._primed: set[str] = set()  # change dirs whose first listing (covered by the full load) was seen
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()  # notifications are applied one at a time, in order

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.DESCRIBE_ACLS: self.describe_acls, ApiKey.CREATE_ACLS: self.create_acls,
                ApiKey.DELETE_ACLS: self.delete_acls}

    async def start(self) -> None:
        """Load every ACL before the broker serves; then follow the change notifications."""
        if self.authorizer is None:
            return
        for path in self._seen:
            self.store.watch_children(path, functools.partial(self._on_changes, path))
        await self._reload()

    async def _reload(self) -> None:
        assert self.authorizer is not None
        self.authorizer.load(await self.store.all_acls())
        log.info("Loaded %d ACL resource patterns from %s", len(self.authorizer.acls()), self.store.connect)

    def _on_changes(self, path: str, children: list[str]) -> None:
        seen = self._seen[path]
        new = sorted(c for c in children if c not in seen)
        seen.update(new)
        if path not in self._primed:
            # the first listing comes as the watch is armed, before start() loads every ACL: those
            # notifications are older than the load (Kafka's listener likewise starts from the current ones)
            self._primed.add(path)
            return
        if new:
            task = asyncio.get_running_loop().create_task(self._apply(path, new))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _apply(self, path: str, names: list[str]) -> None:
        assert self.authorizer is not None
        async with self._lock:
            for name in names:
                node = f"{path}/{name}"
                try:
                    data = await self.store.read(node)
                    if data is None:
                        continue
                    pattern = z.decode_acl_change(node, data)
                    entries, _version = await self.store.resource_acls(pattern)
                    self.authorizer.set_resource(pattern, entries)
                except KafkaliteError as exc:
                    log.error("Cannot apply the ACL change %s: %s", node, exc)
            try:
                await self.store.purge_acl_changes(path, CHANGE_EXPIRY_MS)
            except KafkaliteError as exc:
                log.warning("Cannot purge old ACL change notifications under %s: %s", path, exc)

    # --- the APIs ---------------------------------------------------------------------------------------

    async def describe_acls(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        out: Body = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "resources": []}
        if self.authorizer is None:
            return {**out, "error_code": ErrorCode.SECURITY_DISABLED, "error_message": NO_AUTHORIZER}
        try:
            flt = _filter(body)
        except InvalidRequestError as exc:
            return {**out, "error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)}
        by_pattern: dict[ResourcePattern, list[Body]] = {}
        for b in self.authorizer.bindings(flt):
            by_pattern.setdefault(b.pattern, []).append(
                {"principal": b.entry.principal, "host": b.entry.host, "operation": int(b.entry.operation),
                 "permission_type": int(b.entry.permission)})
        out["resources"] = [{"resource_type": int(p.resource_type), "resource_name": p.name,
                             "pattern_type": int(p.pattern_type), "acls": acls} for p, acls in by_pattern.items()]
        return out

    async def _change(self, pattern: ResourcePattern, change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]
                      ) -> frozenset[AclEntry]:
        """Apply `change` to a pattern's ACLs in the store (conditional write, retried); returns the entries
        before the change. The broker's own cache takes the result at once."""
        assert self.authorizer is not None
        for _ in range(WRITE_ATTEMPTS):
            before, version = await self.store.resource_acls(pattern)
            after = change(before)
            if after == before:
                return before
            if await self.store.set_resource_acls(pattern, after, version):
                self.authorizer.set_resource(pattern, after)
                return before
        raise KafkaliteError(f"the ACLs of {pattern} kept changing concurrently; try again")

    async def create_acls(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        creations = body.get("creations") or []
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "results": [{"error_code": ErrorCode.SECURITY_DISABLED,
                                                        "error_message": NO_AUTHORIZER} for _ in creations]}
        results: list[Body] = [{"error_code": ErrorCode.NONE, "error_message": None} for _ in creations]
        wanted: dict[ResourcePattern, list[tuple[int, AclEntry]]] = {}
        for i, c in enumerate(creations):
            try:
                pattern = ResourcePattern(_enum(ResourceType, c["resource_type"], "resource type"), c["resource_name"],
                                          _enum(PatternType, c.get("resource_pattern_type", PatternType.LITERAL),
                                                "pattern type"))
                entry = AclEntry(c["principal"], c["host"], _enum(AclOperation, c["operation"], "operation"),
                                 _enum(AclPermission, c["permission_type"], "permission type"))
                pattern.validate()
                entry.validate()
            except InvalidRequestError as exc:
                results[i] = {"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc)}
                continue
            wanted.setdefault(pattern, []).append((i, entry))
        for pattern, items in wanted.items():
            adding = frozenset(e for _i, e in items)
            try:
                await self._change(pattern, adding.union)
                log.info("ACLs added for %s: %s", pattern, ", ".join(map(str, sorted(adding))))
            except KafkaliteError as exc:
                for i, _e in items:
                    results[i] = {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": str(exc)}
        return {"throttle_time_ms": 0, "results": results}

    async def delete_acls(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        filters = body.get("filters") or []
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": NO_AUTHORIZER, "matching_acls": []}
                for _ in filters]}
        results: list[Body] = []
        for f in filters:
            try:
                flt = _filter(f)
            except InvalidRequestError as exc:
                results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(exc),
                                "matching_acls": []})
                continue
            deleted: list[Body] = []
            try:
                # the patterns the filter names, from the cache; each one re-read and changed conditionally
                for pattern in sorted({b.pattern for b in self.authorizer.bindings(flt)}):
                    before = await self._change(pattern, functools.partial(_without, flt))
                    deleted += [{"error_code": ErrorCode.NONE, "error_message": None, **_wire(AclBinding(pattern, e))}
                                for e in sorted(before) if flt.matches_entry(e)]
                results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": deleted})
            except KafkaliteError as exc:
                results.append({"error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": str(exc),
                                "matching_acls": deleted})
        return {"throttle_time_ms": 0, "filter_results": results}
