"""Kafka's error codes for the group APIs, and the exception that carries one through the coordinator.

The coordinator answers with codes inside response bodies rather than failing requests, so most paths
return an `ErrorCode` member; `CoordinatorError` is for the few places where a check deep inside (member
validation, an append to `__consumer_offsets`) must abort the whole operation. It derives from
KafkaliteError like every other kafkalite error, so `error_code` means the same everywhere.
"""

from __future__ import annotations

from kafkalite.errors import KafkaliteError
from kafkalite.protocol.error_codes import ErrorCode


class CoordinatorError(KafkaliteError):
    """A group operation refused with one of Kafka's codes."""

    def __init__(self, error: ErrorCode, message: str = "") -> None:
        super().__init__(message or error.name)
        self.error = error
        self.error_code = int(error)


def append_error(exc: BaseException) -> ErrorCode:
    """The code of a failed append to `__consumer_offsets`, before the per-operation mapping below."""
    if isinstance(exc, CoordinatorError):
        return exc.error
    if isinstance(exc, OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    code = getattr(exc, "error_code", -1)
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


# What Kafka's GroupMetadataManager answers when the write of a commit or of group metadata fails, in the
# append or while waiting for the replicas (it appends with acks=-1): lost leadership and storage failures
# send clients to look the coordinator up again, a missing partition or too few replicas make it
# unavailable (retriable), size limits cannot be fixed by retrying.
_STORE_COMMON = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}
_TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE)


def offset_commit_error(code: int) -> ErrorCode:
    """storeOffsets' mapping; REQUEST_TIMED_OUT (the replicas did not confirm in offsets.commit.timeout.ms)
    passes through: Kafka's clients then look the coordinator up again and retry."""
    error = ErrorCode(code)
    if error in _TOO_LARGE:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return _STORE_COMMON.get(error, error)


def group_store_error(code: int) -> ErrorCode:
    """storeGroup's mapping (group metadata at SyncGroup and on joins); a timeout becomes
    REBALANCE_IN_PROGRESS so the members rejoin."""
    error = ErrorCode(code)
    if error in _TOO_LARGE:
        return ErrorCode.UNKNOWN_SERVER_ERROR
    if error is ErrorCode.REQUEST_TIMED_OUT:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return _STORE_COMMON.get(error, error)
