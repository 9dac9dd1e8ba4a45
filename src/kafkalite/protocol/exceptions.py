"""Why a frame could not be decoded: the broker answers these two cases differently.

An unknown API key or version gets an UNSUPPORTED_VERSION answer (or, for ApiVersions, the v0
fallback body), so that error carries the parsed header; malformed bytes mean the peer is broken or
hostile and Kafka closes the connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkalite.error_codes import ErrorCode
from kafkalite.errors import KafkaliteError

if TYPE_CHECKING:
    from kafkalite.protocol.codec import RequestHeader


class ProtocolError(KafkaliteError):
    """Base of the codec's decode failures; `header` is the request header when it was parsed."""

    def __init__(self, message: str, header: RequestHeader | None = None) -> None:
        super().__init__(message)
        self.header = header


class UnsupportedVersionError(ProtocolError):
    """The API key is unknown or its version is outside what our schemas cover (UNSUPPORTED_VERSION)."""

    error_code = ErrorCode.UNSUPPORTED_VERSION


class ProtocolDecodeError(ProtocolError):
    """Truncated or malformed bytes: short reads, negative or oversized lengths, bad UTF-8 (INVALID_REQUEST)."""

    error_code = ErrorCode.INVALID_REQUEST
