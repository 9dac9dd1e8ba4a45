"""SCRAM credentials as Kafka stores them: salted, never the password (RFC 5802 via `scramp`).

Kafka's ScramCredentialUtils writes one credential per mechanism as
`salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>` in the user's entity config
(`/config/users/<user>` in ZooKeeper, key `SCRAM-SHA-256` / `SCRAM-SHA-512`). AlterUserScramCredentials carries
the salt and the *salted* password (PBKDF2 done by the client, as Kafka's tools do), from which the broker derives
the stored and server keys with scramp's own key derivation. `ScramCredentials` is a broker's in-memory view,
filled from the store and refreshed by its change notifications, so a login never waits on ZooKeeper.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

# Kafka's ScramMechanism type ids (DescribeUserScramCredentials / AlterUserScramCredentials)
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_IDS.items()}
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka's limit for AlterUserScramCredentials
DEFAULT_ITERATIONS = 4096


class CredentialFormatError(ValueError):
    """A stored credential that is not Kafka's `salt=...,stored_key=...,server_key=...,iterations=...`."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError, binascii.Error) as exc:
            raise CredentialFormatError(f"not a SCRAM credential ({exc!r}): expected "
                                        "salt=...,stored_key=...,server_key=...,iterations=...") from None

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
                             ) -> ScramCredential:
        """What AlterUserScramCredentials carries, turned into what the broker keeps (scramp's derivation)."""
        from scramp import ScramMechanism  # type: ignore[import-untyped]  # on first use: SCRAM is optional
        from scramp.core import _c_key_stored_key_s_key  # type: ignore[import-untyped]  # scramp: RFC 5802 keys

        hf = ScramMechanism(mechanism).hf
        _, stored_key, server_key = _c_key_stored_key_s_key(hf, salted_password)
        return cls(salt, stored_key, server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SCRAM's Hi(): PBKDF2-HMAC of the password (client side, as Kafka's kafka-configs does)."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def new_salt() -> bytes:
    return os.urandom(32)


def credential_for(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """A fresh credential for a password (tests, tools)."""
    from scramp import ScramMechanism  # imported on first use: a broker without SCRAM users never needs it

    salt, stored_key, server_key, i = ScramMechanism(mechanism).make_auth_info(password, iterations, new_salt())
    return ScramCredential(salt, stored_key, server_key, i)


class ScramCredentials:
    """A broker's view of every user's SCRAM credentials: user -> mechanism -> credential."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def mechanisms(self, user: str) -> dict[str, ScramCredential]:
        return dict(self._users.get(user, {}))

    def users(self) -> list[str]:
        return sorted(u for u, m in self._users.items() if m)

    def set_user(self, user: str, config: Mapping[str, str]) -> list[str]:
        """Replace `user`'s credentials from its entity config (other keys ignored); returns the problems
        (a malformed credential is named and skipped, the others still load)."""
        creds: dict[str, ScramCredential] = {}
        problems = []
        for mechanism in MECHANISM_IDS:
            text = config.get(mechanism)
            if text is None:
                continue
            try:
                creds[mechanism] = ScramCredential.from_text(text)
            except CredentialFormatError as exc:
                problems.append(f"user {user} {mechanism}: {exc}")
        if creds:
            self._users[user] = creds
        else:
            self._users.pop(user, None)
        return problems
