"""SASL authentication without I/O: the broker's authenticator (Kafka's SaslServerAuthenticator), the client's
login steps, and JAAS text as Kafka's users write it.

Server states, as Kafka's: a connection on a SASL_* listener first sees ApiVersions (any number) and a
SaslHandshake naming a mechanism; then the mechanism's tokens, carried in SaslAuthenticate requests after a v1
handshake, or as raw size-prefixed frames without a Kafka header after a v0 handshake (old clients). Success
sets the principal `User:<name>`; any failure answers SASL_AUTHENTICATION_FAILED (v1) or nothing (v0) and the
connection is closed. With connections.max.reauth.ms the session has a lifetime (sent as session_lifetime_ms):
a new SaslHandshake on an authenticated connection re-authenticates (same mechanism, same principal), and a
request arriving after the lifetime without that closes the connection.

Mechanisms: PLAIN (users from the listener's PlainLoginModule `user_<name>="<password>"` options) and
SCRAM-SHA-256/512 through `scramp` (credentials from the cluster store, see security/scram.py).
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported on first use below: a broker or client without SCRAM never needs scramp
    from scramp import ScramClient  # type: ignore[import-untyped]

from kafkalite.error_codes import ErrorCode
from kafkalite.security.scram import ScramCredential

PLAIN = "PLAIN"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s";]+)')
_JAAS_HEAD = re.compile(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", re.IGNORECASE)


class JaasError(ValueError):
    """JAAS text that does not parse; the message names the character position."""


@dataclass(frozen=True)
class JaasEntry:
    module: str
    options: dict[str, str]

    @property
    def username(self) -> str:
        return self.options.get("username", "")

    @property
    def password(self) -> str:
        return self.options.get("password", "")

    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's `user_<name>="<password>"` options."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def parse_jaas(text: str, key: str = "sasl.jaas.config") -> JaasEntry:
    """One login module: `<class> required key="value" ...;` (Kafka's sasl.jaas.config syntax)."""
    m = _JAAS_HEAD.match(text)
    if m is None:
        raise JaasError(f"{key}: expected '<LoginModule class> required option=\"value\" ...;', got {text[:60]!r}")
    pos = m.end()
    options: dict[str, str] = {}
    while True:
        rest = text[pos:].lstrip()
        if rest.startswith(";"):
            if rest[1:].strip():
                raise JaasError(f"{key}: only one login module is supported; text after ';' at position "
                                f"{len(text) - len(rest) + 1}")
            break
        if not rest:
            raise JaasError(f"{key}: the login module entry must end with ';'")
        o = _JAAS_OPTION.match(text, pos)
        if o is None:
            raise JaasError(f"{key}: expected option=\"value\" at position {len(text) - len(rest)}")
        value = o.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[o.group(1)] = value
        pos = o.end()
    return JaasEntry(m.group(1), options)


class SaslFailure(Exception):
    """An authentication that failed: the message is what the client is told (Kafka's wording); `detail` is
    for the broker's log only (why scramp refused the token)."""

    detail = ""


# --- server ---------------------------------------------------------------------------------------------------

ScramLookup = Callable[[str, str], ScramCredential | None]


class _Plain:
    """RFC 4616: authzid NUL authcid NUL password, one token; the empty response ends it."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.user = ""

    def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
        if not user:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different "
                              "from username")
        expected = self.users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslFailure("Authentication failed: Invalid username or password")
        self.user = user
        return b"", True


def _unescape(name: str) -> str:
    """SCRAM's saslname: ',' and '=' travel as '=2C' and '=3D'."""
    return name.replace("=2C", ",").replace("=3D", "=")


class _Scram:
    """RFC 5802 with scramp: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: ScramLookup) -> None:
        self.mechanism = mechanism
        self.user = ""

        def auth(name: str) -> tuple[bytes, bytes, bytes, int]:
            self.user = _unescape(name)
            cred = lookup(self.user, mechanism)
            if cred is None:
                raise SaslFailure(f"Authentication failed during authentication due to invalid credentials with "
                                  f"SASL mechanism {mechanism}")
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations
        # alphanumeric, as Kafka's (ScramFormatter.secureRandomString)
        self.s_nonce = secrets.token_hex(16)
        from scramp import ScramMechanism

        self.server = ScramMechanism(mechanism).make_server(auth, s_nonce=self.s_nonce)
        self.stage = 0

    def _accept_librdkafka_nonce(self, client_final: str) -> None:
        """librdkafka before 2.6.1 (kcat, many distributions) sends its client nonce once more in front of the
        combined nonce (librdkafka PR 4895). Kafka 3.8.1 to 3.9 accept a nonce that ends with the server's, as
        here: the server's part is still there (no replay), and the proof is computed over what was sent."""
        sent = next((p[2:] for p in client_final.split(",") if p.startswith("r=")), "")
        expected = str(self.server.nonce or "")
        client_nonce = expected[:len(expected) - len(self.s_nonce)]
        if sent != expected and sent == client_nonce + expected:
            self.server.nonce = type(self.server.nonce)(sent)  # scramp's Nonce

    def step(self, token: bytes) -> tuple[bytes, bool]:
        failed = SaslFailure(f"Authentication failed during authentication due to invalid credentials with SASL "
                             f"mechanism {self.mechanism}")
        try:
            text = token.decode("utf-8")
            if self.stage == 0:
                self.server.set_client_first(text)
                self.stage = 1
                return self.server.get_server_first().encode(), False
            if self.stage == 1:
                self._accept_librdkafka_nonce(text)
                self.server.set_client_final(text)
                self.stage = 2
                return self.server.get_server_final().encode(), True
        except SaslFailure:
            raise
        except Exception as exc:  # scramp's ScramException, or a token scramp could not even parse
            failed.detail = f"{type(exc).__name__}: {exc}"
            raise failed from None
        raise SaslFailure("Invalid SCRAM exchange: unexpected token after the final message")


@dataclass
class Outcome:
    """What the server does with one SASL request: answer `body` (a v1+ response, or raw `token` in v0
    framing), then close when `close` (after a failure), and the principal once authenticated."""

    body: dict[str, Any] | None = None
    token: bytes | None = None
    close: bool = False
    reason: str = ""


class SaslServerAuthenticator:
    """One connection's SASL state. `handshake`/`authenticate` take decoded requests and give the response
    body; `raw_token` takes a v0-framed token. `authenticated`, `principal`, `expired(now)` tell the server
    what the connection may do."""

    def __init__(self, mechanisms: list[str], plain_users: Mapping[str, str], scram: ScramLookup,
                 reauth_ms: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.mechanisms = mechanisms
        self.plain_users = plain_users
        self.scram = scram
        self.reauth_ms = reauth_ms
        self.clock = clock
        self.mechanism = ""  # the mechanism of the current (or last) authentication
        self.principal = ""
        self.authenticated = False
        self.raw_tokens = False  # a v0 handshake: the next frames are raw SASL tokens
        self._exchange: _Plain | _Scram | None = None
        self._expires_at: float | None = None

    @property
    def in_progress(self) -> bool:
        return self._exchange is not None

    def expired(self) -> bool:
        return self._expires_at is not None and self.clock() >= self._expires_at

    def handshake(self, version: int, mechanism: str) -> Outcome:
        """SaslHandshake: start an exchange for `mechanism` (re-authentication when already authenticated)."""
        enabled = {"error_code": ErrorCode.NONE, "mechanisms": list(self.mechanisms)}
        if self._exchange is not None:
            return Outcome({**enabled, "error_code": ErrorCode.ILLEGAL_SASL_STATE}, close=True,
                           reason="SaslHandshake while an authentication is in progress")
        if mechanism not in self.mechanisms:
            return Outcome({**enabled, "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM}, close=True,
                           reason=f"unsupported SASL mechanism {mechanism!r} (enabled: {', '.join(self.mechanisms)})")
        if self.authenticated:
            if version == 0:
                return Outcome({**enabled, "error_code": ErrorCode.ILLEGAL_SASL_STATE}, close=True,
                               reason="re-authentication needs SaslHandshake v1 or later")
            if mechanism != self.mechanism:
                return Outcome({**enabled, "error_code": ErrorCode.ILLEGAL_SASL_STATE}, close=True,
                               reason=f"re-authentication with {mechanism}, not the original {self.mechanism}")
        self.mechanism = mechanism
        self._exchange = _Plain(self.plain_users) if mechanism == PLAIN else _Scram(mechanism, self.scram)
        self.raw_tokens = version == 0
        return Outcome(enabled)

    def _step(self, token: bytes) -> tuple[bytes, bool]:
        assert self._exchange is not None
        response, done = self._exchange.step(token)
        if done:
            principal = f"User:{self._exchange.user}"
            if self.authenticated and principal != self.principal:
                raise SaslFailure(f"Cannot change principals during re-authentication from {self.principal} "
                                  f"to {principal}")
            self.principal = principal
            self.authenticated = True
            self._exchange = None
            self.raw_tokens = False
            self._expires_at = self.clock() + self.reauth_ms / 1000 if self.reauth_ms > 0 else None
        return response, done

    def authenticate(self, version: int, token: bytes) -> Outcome:
        """SaslAuthenticate (v0-v2): one token of the exchange."""
        if self._exchange is None or self.raw_tokens:
            return Outcome({"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                            "error_message": "Unexpected SaslAuthenticate request: no SaslHandshake v1 precedes it",
                            "auth_bytes": b""}, close=True, reason="SaslAuthenticate without a handshake")
        try:
            response, done = self._step(token)
        except SaslFailure as exc:
            self._exchange = None
            return Outcome({"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": str(exc),
                            "auth_bytes": b""}, close=True, reason=_reason(exc))
        lifetime = self.reauth_ms if done and self.reauth_ms > 0 else 0
        return Outcome({"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": response,
                        "session_lifetime_ms": lifetime})

    def raw_token(self, token: bytes) -> Outcome:
        """A token in v0 framing: the answer is a raw token too; a failure just closes (no error in v0)."""
        try:
            response, _ = self._step(token)
        except SaslFailure as exc:
            self._exchange = None
            return Outcome(close=True, reason=_reason(exc))
        return Outcome(token=response)


def _reason(exc: SaslFailure) -> str:
    return f"{exc} ({exc.detail})" if exc.detail else str(exc)


# --- client ---------------------------------------------------------------------------------------------------

class SaslClientExchange:
    """The client's side of one login: `first()` then `step(server_token)` until `done`."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self.done = False
        if mechanism == PLAIN:
            self._token = b"\0" + username.encode() + b"\0" + password.encode()
            self._scram: ScramClient | None = None
        elif mechanism in SCRAM_MECHANISMS:
            escaped = username.replace("=", "=3D").replace(",", "=2C")
            from scramp import ScramClient

            self._scram = ScramClient([mechanism], escaped, password)
        else:
            raise ValueError(f"SASL mechanism {mechanism} is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
        self._stage = 0

    def first(self) -> bytes:
        if self._scram is None:
            return self._token
        return self._scram.get_client_first().encode()

    def step(self, server_token: bytes) -> bytes | None:
        """The next token to send, or None when the exchange is complete (the server is verified for SCRAM)."""
        if self._scram is None:
            self.done = True
            return None
        if self._stage == 0:
            self._scram.set_server_first(server_token.decode())
            self._stage = 1
            return self._scram.get_client_final().encode()
        self._scram.set_server_final(server_token.decode())
        self.done = True
        return None
