"""`kafkalite acls`: add, list and remove ACLs through a broker, with kafka-acls.sh's options and output.

    kafkalite acls --bootstrap-server HOST:PORT --add --allow-principal User:alice --operation Read --topic t
    kafkalite acls --list [--topic t] [--principal User:alice]
    kafkalite acls --remove --force --allow-principal User:alice --operation Read --topic t
    kafkalite acls --add --allow-principal User:bob --producer --topic t [--transactional-id x] [--idempotent]
    kafkalite acls --add --allow-principal User:bob --consumer --topic t --group g
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from typing import Any

from kafkalite.cli.common import UsageError, add_bootstrap, with_client
from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.errors import InvalidRequestError, KafkaliteError
from kafkalite.protocol import ApiKey, ErrorCode
from kafkalite.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclEntry,
    AclOperation,
    AclPermission,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_operation,
    parse_pattern_type,
)

Op = AclOperation
# kafka-acls' AclCommand.ResourceTypeToValidOperations
VALID_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                   Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.ALL}),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE, Op.ALL}),
    ResourceType.CLUSTER: frozenset({Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                     Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE, Op.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE, Op.ALL}),
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("acls", help="add, list and remove ACLs (like kafka-acls.sh)")
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs (of the resources given, else all)")
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable; '*' = all topics)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable; '*' = all)")
    p.add_argument("--transactional-id", action="append", default=[], help="a transactional id (repeatable)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="literal",
                   help="literal or prefixed (--add); also any or match (--list, --remove); default literal")
    p.add_argument("--allow-principal", action="append", default=[], help="e.g. User:alice (repeatable)")
    p.add_argument("--deny-principal", action="append", default=[], help="e.g. User:mallory (repeatable)")
    p.add_argument("--allow-host", action="append", default=[], help="host of allowed principals (default *)")
    p.add_argument("--deny-host", action="append", default=[], help="host of denied principals (default *)")
    p.add_argument("--operation", action="append", default=[],
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                        "IdempotentWrite, All (repeatable; default All)")
    p.add_argument("--principal", action="append", default=[], help="--list: only the ACLs of these principals")
    p.add_argument("--producer", action="store_true", help="producer rights: WRITE, DESCRIBE, CREATE on the topics")
    p.add_argument("--consumer", action="store_true", help="consumer rights: READ, DESCRIBE on the topics, READ on "
                   "the groups")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    p.add_argument("--force", action="store_true", help="--remove without asking")
    p.add_argument("--authorizer-properties", nargs="+", default=[], metavar="KEY=VALUE",
                   help="zookeeper.connect=HOST:PORT[/chroot]: change the ACLs in ZooKeeper directly, no broker")
    p.set_defaults(func=run)


def pattern_text(p: ResourcePattern) -> str:
    return str(p)


def entry_text(e: AclEntry) -> str:
    return str(e)


def _resources(args: Any, pattern_type: PatternType) -> list[ResourcePattern]:
    out = [ResourcePattern(ResourceType.TOPIC, t, pattern_type) for t in args.topic]
    out += [ResourcePattern(ResourceType.GROUP, g, pattern_type) for g in args.group]
    out += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, pattern_type) for t in args.transactional_id]
    if args.cluster:
        out.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, pattern_type))
    return out


def _entries(principals: list[str], hosts: list[str], ops: Iterable[AclOperation], permission: AclPermission
             ) -> set[AclEntry]:
    return {AclEntry(p, h, op, permission) for p in principals for h in (hosts or [WILDCARD]) for op in ops}


def _checked_principal(p: str) -> str:
    kind, sep, name = p.partition(":")
    if not sep or not kind or not name:
        raise UsageError(f"Invalid principal {p!r}: expected Type:name, e.g. User:alice")
    return p


# over the complexity limit: still to split (issue 34)
def bindings_to_add(args: Any) -> dict[ResourcePattern, set[AclEntry]]:  # noqa: C901
    """The ACLs the options describe, per resource pattern (kafka-acls' getResourceToAcls)."""
    try:
        pattern_type = parse_pattern_type(args.resource_pattern_type)
        ops = {parse_operation(o) for o in args.operation} or {Op.ALL}
    except InvalidRequestError as exc:
        raise UsageError(str(exc)) from None
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not valid when "
                         "adding acls.")
    allow = [_checked_principal(p) for p in args.allow_principal]
    deny = [_checked_principal(p) for p in args.deny_principal]
    if not allow and not deny:
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    out: dict[ResourcePattern, set[AclEntry]] = {}
    if args.producer or args.consumer:
        if not args.topic:
            raise UsageError("With --producer or --consumer you must specify a --topic")
        if args.consumer and not args.group:
            raise UsageError("With --consumer you must specify a --group")
        for t in args.topic:
            r = ResourcePattern(ResourceType.TOPIC, t, pattern_type)
            ops_t = ({Op.WRITE, Op.DESCRIBE, Op.CREATE} if args.producer else set()) | \
                ({Op.READ, Op.DESCRIBE} if args.consumer else set())
            out.setdefault(r, set()).update(_entries(allow, args.allow_host, ops_t, AclPermission.ALLOW))
        if args.consumer:
            for g in args.group:
                out.setdefault(ResourcePattern(ResourceType.GROUP, g, pattern_type), set()).update(
                    _entries(allow, args.allow_host, {Op.READ}, AclPermission.ALLOW))
        if args.producer:
            for tid in args.transactional_id:
                out.setdefault(ResourcePattern(ResourceType.TRANSACTIONAL_ID, tid, pattern_type), set()).update(
                    _entries(allow, args.allow_host, {Op.WRITE, Op.DESCRIBE}, AclPermission.ALLOW))
            if args.idempotent:
                out.setdefault(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL), set()).update(
                    _entries(allow, args.allow_host, {Op.IDEMPOTENT_WRITE}, AclPermission.ALLOW))
        return out
    resources = _resources(args, pattern_type)
    if not resources:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                         "--transactional-id <id>")
    for r in resources:
        bad = sorted(o.title for o in ops if o not in VALID_OPERATIONS[r.resource_type])
        if bad:
            raise UsageError(f"ResourceType {r.resource_type.title} only supports operations "
                             f"{','.join(sorted(o.title for o in VALID_OPERATIONS[r.resource_type]))}, not "
                             f"{','.join(bad)}")
        entries = _entries(allow, args.allow_host, ops, AclPermission.ALLOW) | \
            _entries(deny, args.deny_host, ops, AclPermission.DENY)
        out.setdefault(r, set()).update(entries)
    return out


def _filter_body(r: ResourcePattern | None, principal: str | None = None, entry: AclEntry | None = None
                 ) -> dict[str, Any]:
    if entry is not None:
        principal = entry.principal
    return {"resource_type_filter": int(r.resource_type) if r else int(ResourceType.ANY),
            "resource_name_filter": r.name if r else None,
            "pattern_type_filter": int(r.pattern_type) if r else int(PatternType.ANY),
            "principal_filter": principal, "host_filter": entry.host if entry else None,
            "operation": int(entry.operation) if entry else int(Op.ANY),
            "permission_type": int(entry.permission) if entry else int(AclPermission.ANY)}


def _check(code: int, message: str | None) -> None:
    if code != ErrorCode.NONE:
        raise KafkaClientError(code, message or ErrorCode(code).name)


def describe(client: KafkaClient, body: dict[str, Any]) -> list[AclBinding]:
    resp = client.request(ApiKey.DESCRIBE_ACLS, body)
    _check(resp["error_code"], resp.get("error_message"))
    return [AclBinding(ResourcePattern(ResourceType(r["resource_type"]), r["resource_name"],
                                       PatternType(r.get("pattern_type", PatternType.LITERAL))),
                       AclEntry(a["principal"], a["host"], AclOperation(a["operation"]),
                                AclPermission(a["permission_type"])))
            for r in resp["resources"] for a in r["acls"]]


def _print_current(bindings: list[AclBinding], only: ResourcePattern | None = None) -> None:
    by_pattern: dict[ResourcePattern, list[AclEntry]] = {}
    for b in bindings:
        if only is None or b.pattern == only:
            by_pattern.setdefault(b.pattern, []).append(b.entry)
    for p in sorted(by_pattern):
        print(f"Current ACLs for resource `{pattern_text(p)}`: ")
        for e in sorted(by_pattern[p]):
            print(f" \t{entry_text(e)} ")
        print()


def _add(client: KafkaClient, args: Any) -> int:
    wanted = bindings_to_add(args)
    for r, entries in sorted(wanted.items()):
        print(f"Adding ACLs for resource `{pattern_text(r)}`: ")
        for e in sorted(entries):
            print(f" \t{entry_text(e)} ")
        print()
        creations = [{"resource_type": int(r.resource_type), "resource_name": r.name,
                      "resource_pattern_type": int(r.pattern_type), "principal": e.principal, "host": e.host,
                      "operation": int(e.operation), "permission_type": int(e.permission)} for e in sorted(entries)]
        resp = client.request(ApiKey.CREATE_ACLS, {"creations": creations})
        for res in resp["results"]:
            _check(res["error_code"], res.get("error_message"))
    for r in sorted(wanted):
        _print_current(describe(client, _filter_body(r)), r)
    return 0


def _pattern_type(args: Any) -> PatternType:
    """--resource-pattern-type, a usage error naming the value when it is not one of Kafka's."""
    try:
        return parse_pattern_type(args.resource_pattern_type)
    except InvalidRequestError as exc:
        raise UsageError(str(exc)) from None


def _list(client: KafkaClient, args: Any) -> int:
    pattern_type = _pattern_type(args)
    resources: list[ResourcePattern | None] = [*_resources(args, pattern_type)] or [None]
    principals = args.principal or [None]
    seen: list[AclBinding] = []
    for r in resources:
        for principal in principals:
            body = _filter_body(r, principal)
            if r is None:
                body["pattern_type_filter"] = int(PatternType.ANY)
            seen += [b for b in describe(client, body) if b not in seen]
    _print_current(seen)
    return 0


def _remove(client: KafkaClient, args: Any) -> int:
    pattern_type = _pattern_type(args)
    resources = _resources(args, pattern_type)
    if not resources:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                         "--transactional-id <id>")
    principals = args.allow_principal or args.deny_principal
    filters: list[tuple[ResourcePattern, dict[str, Any]]] = []
    if principals:
        try:
            ops = {parse_operation(o) for o in args.operation} or {Op.ALL}
        except InvalidRequestError as exc:
            raise UsageError(str(exc)) from None
        for r in resources:
            entries = _entries([_checked_principal(p) for p in args.allow_principal], args.allow_host, ops,
                               AclPermission.ALLOW) | _entries([_checked_principal(p) for p in args.deny_principal],
                                                               args.deny_host, ops, AclPermission.DENY)
            filters += [(r, {**_filter_body(r, entry=e), "pattern_type_filter": int(r.pattern_type)})
                        for e in sorted(entries)]
    else:
        filters = [(r, _filter_body(r)) for r in resources]
    for r in resources:
        if not args.force:
            what = "remove ACLs" if principals else "delete all ACLs"
            answer = input(f"Are you sure you want to {what} for resource filter `{pattern_text(r)}`? (y/n)")
            if not answer.strip().lower().startswith("y"):
                return 0
    resp = client.request(ApiKey.DELETE_ACLS, {"filters": [f for _r, f in filters]})
    for res in resp["filter_results"]:
        _check(res["error_code"], res.get("error_message"))
    for r in resources:
        if r.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            _print_current(describe(client, _filter_body(r)), r)
    return 0


class ZooKeeperAcls:
    """Answers the ACL requests from ZooKeeper itself, with a broker's ACL code (broker/acl_apis.py): what
    `--authorizer-properties zookeeper.connect=...` talks to instead of a broker (the KafkaClient calls used)."""

    def __init__(self, props: list[str]) -> None:
        given = {}
        for item in props:
            key, sep, value = item.partition("=")
            if not sep:
                raise UsageError(f"--authorizer-properties: expected KEY=VALUE, got {item!r}")
            given[key.strip()] = value.strip()
        unknown = sorted(set(given) - {"zookeeper.connect"})
        if unknown or not given.get("zookeeper.connect"):
            raise UsageError(f"--authorizer-properties: only zookeeper.connect is supported (got {sorted(given)})")
        self.connect = given["zookeeper.connect"]

    def request(self, api: int, body: dict[str, Any], version: int | None = None) -> dict[str, Any]:
        from kafkalite.broker.acl_apis import AclApis
        from kafkalite.broker.config import BrokerConfig
        from kafkalite.cluster.zk_store import ZkStore
        from kafkalite.config.registry import AUTHORIZER_OWN_CLASS
        from kafkalite.protocol import RequestHeader
        from kafkalite.security.session import internal_session

        async def ask() -> dict[str, Any]:
            store = ZkStore(self.connect)
            await store.start()
            try:
                acls = AclApis(BrokerConfig.load(overrides={"authorizer.class.name": AUTHORIZER_OWN_CLASS}), store,
                               None)
                await acls.start()
                handler = acls.handlers()[ApiKey(api)]
                return await handler(RequestHeader(api, 3, 1, "kafkalite-acls"), body, internal_session())
            finally:
                await store.close()
        return asyncio.run(ask())

    def __enter__(self) -> ZooKeeperAcls:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def run(args: Any) -> int:
    def body(client: Any) -> int:
        if args.add:
            return _add(client, args)
        if args.remove:
            return _remove(client, args)
        return _list(client, args)
    try:
        if args.authorizer_properties:
            try:
                with ZooKeeperAcls(args.authorizer_properties) as zk:
                    return body(zk)
            except UsageError as exc:
                print(f"Error: {exc}", file=sys.stderr)
                return 2
            except KafkaliteError as exc:  # the broker-side errors too (ZooKeeper unreachable)
                print(f"Error: {exc}")
                return 1
        return with_client(args, "kafkalite-acls", body)
    except EOFError:
        print("Error: --remove asks for confirmation on stdin: give --force", file=sys.stderr)
        return 2
