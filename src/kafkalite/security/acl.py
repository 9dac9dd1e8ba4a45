"""Kafka's ACL model and kafkalite's authorizer (Kafka's AclAuthorizer rules, decided from an in-memory cache).

An ACL binds a resource pattern (type, name, LITERAL or PREFIXED) to an entry: principal ("User:alice", or
"User:*" for everyone), host (an address, or "*"), operation and ALLOW/DENY. A request is allowed when the
principal is a super user, or no DENY entry matches it, and an ALLOW entry does (an operation implies others:
READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL implies every one).
A resource without any ACL is allowed only with `allow.everyone.if.no.acl.found=true`.

The ACLs themselves live in the cluster store (ZooKeeper's /kafka-acl layout, or the single broker's metadata
file); the broker keeps this cache current from the store's change notifications. Decisions are memoized per
(principal, host, operation, resource) until the next ACL change, so the hot path (one check per topic of a
produce or fetch request, never per record) is one dict lookup.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafkalite.config.registry import AUTHORIZER_CLASSES, AUTHORIZER_OWN_CLASS
from kafkalite.errors import InvalidRequestError
from kafkalite.security.session import Session

CLUSTER_NAME = "kafka-cluster"  # the only name a CLUSTER resource has
WILDCARD = "*"  # a resource name, principal name or host that matches all
WILDCARD_PRINCIPAL = "User:*"
_DECISIONS_KEPT = 100_000  # memoized decisions before the memo is emptied (bounds memory with many clients)


class ResourceType(enum.IntEnum):
    """org.apache.kafka.common.resource.ResourceType codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def title(self) -> str:
        """Kafka's SecurityUtils.resourceTypeName: "Topic", "TransactionalId" (znode paths, kafka-acls output)."""
        return "".join(w.capitalize() for w in self.name.split("_"))


class PatternType(enum.IntEnum):
    """org.apache.kafka.common.resource.PatternType codes; ANY and MATCH exist only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


# The `*_authorized_operations` of Metadata, DescribeCluster and DescribeGroups when the client did not ask for
# them (Kafka's MetadataResponse.AUTHORIZED_OPERATIONS_OMITTED: Integer.MIN_VALUE)
AUTHORIZED_OPS_OMITTED = -2147483648


class AclOperation(enum.IntEnum):
    """org.apache.kafka.common.acl.AclOperation codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @property
    def title(self) -> str:
        """Kafka's SecurityUtils.operationName: "Read", "ClusterAction", "DescribeConfigs"."""
        return "".join(w.capitalize() for w in self.name.split("_"))


class AclPermission(enum.IntEnum):
    """org.apache.kafka.common.acl.AclPermissionType codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3

    @property
    def title(self) -> str:
        return self.name.capitalize()


def _by_title(enum_cls: type[enum.IntEnum], text: str, what: str) -> int:
    """Parse Kafka's spellings: "Read", "READ", "read", "ClusterAction", "cluster_action", "Cluster-Action"."""
    key = text.strip().replace("-", "").replace("_", "").upper()
    for m in enum_cls:
        if m.name.replace("_", "") == key:
            return int(m)
    raise InvalidRequestError(f"Unknown {what} {text!r}: one of "
                              f"{', '.join(m.name for m in enum_cls if m.name not in ('UNKNOWN', 'ANY'))}")


def parse_resource_type(text: str) -> ResourceType:
    return ResourceType(_by_title(ResourceType, text, "resource type"))


def parse_pattern_type(text: str) -> PatternType:
    return PatternType(_by_title(PatternType, text, "pattern type"))


def parse_operation(text: str) -> AclOperation:
    return AclOperation(_by_title(AclOperation, text, "operation"))


def parse_permission(text: str) -> AclPermission:
    return AclPermission(_by_title(AclPermission, text, "permission type"))


# Operations each operation is implied by (Kafka's AclAuthorizer: DESCRIBE by READ/WRITE/DELETE/ALTER,
# DESCRIBE_CONFIGS by ALTER_CONFIGS); ALL implies every operation and is added at decision time.
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """A resource pattern: LITERAL (the name itself; "*" = every resource of the type) or PREFIXED."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:  # Kafka's ResourcePattern.toString (kafka-acls output, logs)
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
            f"patternType={self.pattern_type.name})"

    def validate(self) -> None:
        """Kafka's checks of a pattern an ACL is created on (INVALID_REQUEST otherwise)."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidRequestError(f"Invalid resource type {self.resource_type.name} for an ACL")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidRequestError(f"Invalid pattern type {self.pattern_type.name} for an ACL: LITERAL or "
                                      "PREFIXED")
        if not self.name:
            raise InvalidRequestError("Resource name must not be empty")
        if "/" in self.name or self.name in (".", ".."):
            # the name is a znode name (/kafka-acl/<type>/<name>): a '/' would nest it (docs/design.md)
            raise InvalidRequestError(f"Resource name {self.name!r} cannot hold an ACL: ACLs are stored under the "
                                      "name as a ZooKeeper node, which cannot contain '/' or be '.' or '..'")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidRequestError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if self.pattern_type == PatternType.PREFIXED and self.name == WILDCARD:
            raise InvalidRequestError("A PREFIXED pattern cannot have the wildcard name '*': use LITERAL '*'")


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    """One ACL of a resource pattern (Kafka's AccessControlEntry)."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def __str__(self) -> str:  # Kafka's AccessControlEntry.toString
        return f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, " \
            f"permissionType={self.permission.name})"

    def validate(self) -> None:
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise InvalidRequestError(f"Invalid operation {self.operation.name} for an ACL")
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            raise InvalidRequestError(f"Invalid permission type {self.permission.name} for an ACL")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidRequestError(f"Invalid principal {self.principal!r}: expected Type:name, e.g. User:alice")
        if not self.host:
            raise InvalidRequestError("Host must not be empty: use '*' for any host")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AclEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls/DeleteAcls filters: None = any value; ANY type/pattern/operation/permission = any;
    pattern MATCH = every pattern that would apply to the named resource (literal, wildcard, prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def validate(self) -> None:
        for value, what in ((self.resource_type, "resource type"), (self.pattern_type, "pattern type"),
                            (self.operation, "operation"), (self.permission, "permission type")):
            if value == 0:
                raise InvalidRequestError(f"Invalid filter: {what} UNKNOWN")

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and p.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if p.pattern_type == PatternType.LITERAL:
                return p.name in (self.name, WILDCARD)
            return self.name.startswith(p.name)
        if self.pattern_type != PatternType.ANY and p.pattern_type != self.pattern_type:
            return False
        return self.name is None or p.name == self.name

    def matches_entry(self, e: AclEntry) -> bool:
        return (self.principal is None or e.principal == self.principal) and \
            (self.host is None or e.host == self.host) and \
            (self.operation == AclOperation.ANY or e.operation == self.operation) and \
            (self.permission == AclPermission.ANY or e.permission == self.permission)


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by semicolons ("User:admin;User:broker")."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class AclAuthorizer:
    """The ACL cache and the decisions made from it (see the module docstring). Not thread-safe: used on the
    broker's event loop only."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acls: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acls = allow_if_no_acls
        self._acls: dict[ResourcePattern, frozenset[AclEntry]] = {}
        # literal ACLs by (type, name) and, per type, prefixed ACLs by prefix with the prefix lengths in use
        self._literal: dict[tuple[ResourceType, str], frozenset[AclEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AclEntry]]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self.version = 0  # bumped on every change: what caches of decisions (Metadata answers) key on

    # --- the cache ---------------------------------------------------------------------------------------

    def load(self, acls: Mapping[ResourcePattern, Iterable[AclEntry]]) -> None:
        """Replace the whole cache (start-up)."""
        self._acls = {p: frozenset(es) for p, es in acls.items() if es}
        self._reindex()

    def set_resource(self, pattern: ResourcePattern, entries: Iterable[AclEntry]) -> None:
        """The ACLs of one resource pattern as the store now holds them (a change notification)."""
        got = frozenset(entries)
        if got:
            self._acls[pattern] = got
        else:
            self._acls.pop(pattern, None)
        self._reindex()

    def _reindex(self) -> None:
        self._literal = {}
        self._prefixed = {}
        for p, es in self._acls.items():
            if p.pattern_type == PatternType.LITERAL:
                self._literal[(p.resource_type, p.name)] = es
            else:
                self._prefixed.setdefault(p.resource_type, {})[p.name] = es
        self._prefix_lengths = {t: tuple(sorted({len(n) for n in d})) for t, d in self._prefixed.items()}
        self._decisions = {}
        self.version += 1

    def acls(self) -> dict[ResourcePattern, frozenset[AclEntry]]:
        return dict(self._acls)

    def bindings(self, flt: AclBindingFilter) -> list[AclBinding]:
        """Every cached binding the filter matches, in a stable order (DescribeAcls)."""
        return [AclBinding(p, e) for p in sorted(self._acls) if flt.matches_pattern(p)
                for e in sorted(self._acls[p]) if flt.matches_entry(e)]

    # --- decisions ---------------------------------------------------------------------------------------

    def _matching(self, rtype: ResourceType, name: str) -> list[frozenset[AclEntry]]:
        """The entry sets of every pattern that applies to the resource: literal, wildcard, prefixes."""
        out = []
        got = self._literal.get((rtype, name))
        if got:
            out.append(got)
        if name != WILDCARD:
            got = self._literal.get((rtype, WILDCARD))
            if got:
                out.append(got)
        prefixed = self._prefixed.get(rtype)
        if prefixed:
            for n in self._prefix_lengths[rtype]:
                if n > len(name):
                    break
                got = prefixed.get(name[:n])
                if got:
                    out.append(got)
        return out

    def authorize(self, session: Session, operation: AclOperation, rtype: ResourceType, name: str) -> bool:
        """May `session` perform `operation` on the resource? Kafka's AclAuthorizer rules, memoized."""
        key = (session.principal, session.host, operation, rtype, name)
        hit = self._decisions.get(key)
        if hit is not None:
            return hit
        decided = self._decide(session.principal, session.host, operation, rtype, name)
        if len(self._decisions) >= _DECISIONS_KEPT:
            self._decisions = {}
        self._decisions[key] = decided
        return decided

    def _decide(self, principal: str, host: str, operation: AclOperation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        sets = self._matching(rtype, name)
        if not sets:
            return self.allow_if_no_acls
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        denying = (operation, AclOperation.ALL)
        for es in sets:  # deny wins
            for e in es:
                if e.permission == AclPermission.DENY and e.operation in denying and e.principal in principals \
                        and e.host in hosts:
                    return False
        allowing = _IMPLIED_BY.get(operation, frozenset({operation})) | {AclOperation.ALL}
        for es in sets:
            for e in es:
                if e.permission == AclPermission.ALLOW and e.operation in allowing and e.principal in principals \
                        and e.host in hosts:
                    return True
        return False

    def authorize_any(self, session: Session, operation: AclOperation, rtype: ResourceType) -> bool:
        """May `session` perform `operation` on at least one resource of the type? (Kafka's
        authorizeByResourceType, used by InitProducerId: WRITE on any topic.) True for a super user, or when
        an ALLOW binding for the principal and host exists that no DENY of the same or a wider pattern
        cancels; with allow.everyone.if.no.acl.found, also when the type has no ACLs at all."""
        if session.principal in self.super_users:
            return True
        principals = (session.principal, WILDCARD_PRINCIPAL)
        hosts = (session.host, WILDCARD)
        allowing = _IMPLIED_BY.get(operation, frozenset({operation})) | {AclOperation.ALL}
        typed = [p for p in self._acls if p.resource_type == rtype]
        if not typed:
            return self.allow_if_no_acls
        for p in typed:
            if not any(e.permission == AclPermission.ALLOW and e.operation in allowing and e.principal in principals
                       and e.host in hosts for e in self._acls[p]):
                continue
            if p.pattern_type == PatternType.LITERAL and p.name != WILDCARD:
                if self._decide(session.principal, session.host, operation, rtype, p.name):
                    return True
            elif not self._denied_wider(principals, hosts, operation, p):
                return True
        return False

    def _denied_wider(self, principals: tuple[str, str], hosts: tuple[str, str], operation: AclOperation,
                      p: ResourcePattern) -> bool:
        """Is every resource of `p` denied by a DENY on the wildcard, or a prefix of p's name?"""
        denying = (operation, AclOperation.ALL)
        for q, es in self._acls.items():
            if q.resource_type != p.resource_type:
                continue
            wider = (q.pattern_type == PatternType.LITERAL and (q.name == WILDCARD or q == p)) or \
                (q.pattern_type == PatternType.PREFIXED and p.name.startswith(q.name))
            if wider and any(e.permission == AclPermission.DENY and e.operation in denying and
                             e.principal in principals and e.host in hosts for e in es):
                return True
        return False


__all__ = ["AUTHORIZER_CLASSES", "AUTHORIZER_OWN_CLASS", "AclAuthorizer", "AclBinding", "AclBindingFilter", "AclEntry",
           "AclOperation", "AclPermission", "PatternType", "ResourcePattern", "ResourceType"]


def authorizer_from_config(class_name: str, super_users: str, allow_if_no_acls: bool) -> AclAuthorizer | None:
    """The authorizer `authorizer.class.name` asks for (None when empty); the registry has refused other
    class names already."""
    if not class_name.strip():
        return None
    return AclAuthorizer(parse_super_users(super_users), allow_if_no_acls)
