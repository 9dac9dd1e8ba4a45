"""SCRAM users of the cluster: DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), and each
broker's view of the credentials (security/scram.py's ScramCredentials) kept current without a restart.

The credentials live in the cluster store as Kafka keeps them in ZooKeeper: `/config/users/<user>` with
`{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096"}}`, announced by
a `/config/changes/config_change_<seq>` node naming `users/<user>`. Every broker loads them all at start-up
and re-reads a user when a notification names it, so a user created through one broker logs in on any.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from kafkalite.broker.handlers import Handler
from kafkalite.cluster.store import ClusterStore
from kafkalite.errors import KafkaliteError
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_IDS,
    MECHANISM_NAMES,
    MIN_ITERATIONS,
    ScramCredential,
    ScramCredentials,
)
from kafkalite.security.session import Session

log = logging.getLogger("kafkalite.broker")


class ScramAdmin:
    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self.credentials = ScramCredentials()
        self.loaded = asyncio.Event()  # SCRAM logins wait for it during start-up

    async def load(self) -> None:
        """Every user's credentials, at start-up (changes made while this broker was down included)."""
        for user in await self.store.users():
            await self.refresh(user)
        self.loaded.set()

    async def refresh(self, user: str) -> None:
        """Re-read one user (a change notification named it)."""
        try:
            config = await self.store.user_config(user)
        except KafkaliteError as exc:
            log.error("Cannot read the SCRAM credentials of user %s: %s", user, exc)
            return
        for problem in self.credentials.set_user(user, config):
            log.error("Ignoring a malformed SCRAM credential in the cluster store: %s", problem)

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe, ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter}

    async def describe(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:
        # authorize DESCRIBE on CLUSTER (the ACL helper's hook: Kafka requires it for this API)
        wanted = body.get("users")
        names = [u["name"] for u in wanted] if wanted else await self.store.users()
        results: list[dict[str, Any]] = []
        seen: set[str] = set()
        for name in names:
            if name in seen:
                results.append({"user": name, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                                "error_message": f"Cannot describe SCRAM credentials for the same user twice in a "
                                                 f"single request: {name}", "credential_infos": []})
                continue
            seen.add(name)
            config = await self.store.user_config(name)
            infos = []
            for mech, mid in MECHANISM_IDS.items():
                if mech in config:
                    try:
                        iterations = ScramCredential.from_text(config[mech]).iterations
                    except ValueError:
                        continue
                    infos.append({"mechanism": mid, "iterations": iterations})
            if infos:
                results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None,
                                "credential_infos": infos})
            elif wanted:
                results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                                "error_message": f"Attempt to describe a user credential that does not exist: {name}",
                                "credential_infos": []})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}

    # over the complexity limit: still to split (issue 34)
    async def alter(self, h: RequestHeader, body: dict[str, Any], session: Session) -> dict[str, Any]:  # noqa: C901
        # authorize ALTER on CLUSTER (the ACL helper's hook: Kafka requires it for this API)
        deletions = body.get("deletions") or []
        upsertions = body.get("upsertions") or []
        errors: dict[str, tuple[int, str]] = {}
        counts: defaultdict[tuple[str, int], int] = defaultdict(int)
        for d in (*deletions, *upsertions):
            counts[(d["name"], d["mechanism"])] += 1
        for d in (*deletions, *upsertions):
            name, mid = d["name"], d["mechanism"]
            if name in errors:
                continue
            if not name:
                errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
            elif counts[(name, mid)] > 1:
                errors[name] = (ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same "
                                                      "request")
            elif mid not in MECHANISM_NAMES:
                errors[name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mid}")
        for u in upsertions:
            name = u["name"]
            if name in errors:
                continue
            if not MIN_ITERATIONS <= u["iterations"] <= MAX_ITERATIONS:
                errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Iterations {u['iterations']} must be between "
                                                           f"{MIN_ITERATIONS} and {MAX_ITERATIONS}")
            elif not u.get("salt") or not u.get("salted_password"):
                errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        changes: dict[str, list[tuple[str, ScramCredential | None]]] = defaultdict(list)
        for d in deletions:
            if d["name"] not in errors:
                changes[d["name"]].append((MECHANISM_NAMES[d["mechanism"]], None))
        for u in upsertions:
            if u["name"] not in errors:
                mech = MECHANISM_NAMES[u["mechanism"]]
                cred = ScramCredential.from_salted_password(mech, bytes(u["salt"]), bytes(u["salted_password"]),
                                                            u["iterations"])
                changes[u["name"]].append((mech, cred))
        for name, ops in changes.items():
            try:
                config = await self.store.user_config(name)
                for mech, change in ops:
                    if change is None and mech not in config:
                        raise _NotFound(f"Attempt to delete a user credential that does not exist: {name} {mech}")
                for mech, change in ops:
                    if change is None:
                        config.pop(mech, None)
                    else:
                        config[mech] = change.to_text()
                await self.store.set_user_config(name, config)
                self.credentials.set_user(name, config)  # this broker at once; the others by the notification
                log.info("SCRAM credentials of user %s altered: %s", name,
                         ", ".join(f"{'deleted' if c is None else 'set'} {m}" for m, c in ops))
            except _NotFound as exc:
                errors[name] = (ErrorCode.RESOURCE_NOT_FOUND, str(exc))
            except KafkaliteError as exc:
                errors[name] = (ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        users = list(dict.fromkeys(d["name"] for d in (*deletions, *upsertions)))
        return {"throttle_time_ms": 0, "results": [
            {"user": n, "error_code": errors.get(n, (ErrorCode.NONE, None))[0],
             "error_message": errors.get(n, (0, None))[1]}
            for n in users]}


class _NotFound(Exception):
    pass
