"""Kafka's error codes for the group APIs, and the exception that carries one through the coordinator.

The coordinator answers with codes inside response bodies rather than failing requests, so most paths
return an `Errors` member; `CoordinatorError` is for the few places where a check deep inside (member
validation, an append to `__consumer_offsets`) must abort the whole operation. It derives from
KafkaliteError like every other kafkalite error, so `error_code` means the same everywhere.
"""

from __future__ import annotations

from kafkalite.errors import (
    KafkaliteError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from kafkalite.protocol.error_codes import ErrorCode

Errors = ErrorCode  # the protocol layer's table of Kafka's error codes, under the coordinator's old name


class CoordinatorError(KafkaliteError):
    """A group operation refused with one of Kafka's codes."""

    def __init__(self, error: Errors, message: str = "") -> None:
        super().__init__(message or error.name)
        self.error = error
        self.error_code = int(error)


def append_error(exc: BaseException) -> Errors:
    """What a failed append to `__consumer_offsets` becomes in a group response (Kafka maps storage
    failures and lost leadership to NOT_COORDINATOR so clients look the coordinator up again, a missing
    partition to COORDINATOR_NOT_AVAILABLE, and size limits to a server error, since no client action can
    fix them: GroupMetadataManager's appendForGroup)."""
    if isinstance(exc, KafkaStorageError | OSError | NotLeaderOrFollowerError):
        return Errors.NOT_COORDINATOR
    if isinstance(exc, UnknownTopicOrPartitionError):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if isinstance(exc, RecordTooLargeError | RecordBatchTooLargeError):
        return Errors.UNKNOWN_SERVER_ERROR
    if isinstance(exc, CoordinatorError):
        return exc.error
    code = getattr(exc, "error_code", -1)
    try:
        return Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR
