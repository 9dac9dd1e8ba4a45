"""The APIs of a connection rather than of the cluster: ApiVersions (KIP-35, KIP-511) and the SASL requests
that reach a handler on a listener without SASL (a SASL_* listener's authenticator in broker/server.py answers
them there)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from kafkalite.broker.handlers import Body, Handler
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.security.session import Session

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


class ConnectionApis:
    """`advertised` is the broker's request table's (api key -> (min, max) version): only what has a handler."""

    def __init__(self, advertised: Callable[[], dict[int, tuple[int, int]]]) -> None:
        self.advertised = advertised

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.API_VERSIONS: self.api_versions, ApiKey.SASL_HANDSHAKE: self.sasl_outside_sasl_listener,
                ApiKey.SASL_AUTHENTICATE: self.sasl_outside_sasl_listener}

    async def api_versions(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in self.advertised().items()]
        if h.api_version >= 3:  # KIP-511: the client's name and version must be well formed
            name = body.get("client_software_name") or ""
            version = body.get("client_software_version") or ""
            if not (_SOFTWARE.match(name) and _SOFTWARE.match(version)):
                return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": keys, "throttle_time_ms": 0}
        return {"error_code": ErrorCode.NONE, "api_keys": keys, "throttle_time_ms": 0}

    async def sasl_outside_sasl_listener(self, h: RequestHeader, body: Body, session: Session) -> Body:
        """Kafka answers ILLEGAL_SASL_STATE."""
        if h.api_key == ApiKey.SASL_HANDSHAKE:
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
                "error_message": f"SASL is not enabled on listener {session.listener} ({session.protocol})"}
