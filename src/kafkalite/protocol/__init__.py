"""Kafka's wire protocol, sans I/O: request/response frames to plain dicts and back.

Body dicts use the snake_case of the field names in Kafka's JSON message schemas; arrays of
structs are lists of dicts; records are memoryviews of the frame on decode and bytes-like objects,
FileRegions or lists of them on encode. Missing keys encode as the schema default. Each message is
declared once (`messages/`, in the DSL of `schema`) and compiled per version (`compiler`).
"""

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.codec import (
    SUPPORTED_VERSIONS,
    PreEncoded,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_body,
    read_request_header,
    warm_up,
)
from kafkalite.protocol.error_codes import ErrorCode
from kafkalite.protocol.exceptions import ProtocolDecodeError, ProtocolError, UnsupportedVersionError
from kafkalite.protocol.primitives import FileRegion

__all__ = [
    "SUPPORTED_VERSIONS",
    "ApiKey",
    "ErrorCode",
    "FileRegion",
    "PreEncoded",
    "ProtocolDecodeError",
    "ProtocolError",
    "RequestHeader",
    "UnsupportedVersionError",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_body",
    "read_request_header",
    "warm_up",
]
