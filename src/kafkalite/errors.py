"""Exceptions named after Kafka's, each carrying the wire error code a broker would answer with.

One hierarchy for every layer, so that the broker can turn any storage failure into the right
error code without a translation table, and tests can assert on the exact Kafka condition.
"""

from __future__ import annotations

import errno
from pathlib import Path

from kafkalite.error_codes import ErrorCode

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
DESCRIPTOR_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


class KafkaliteError(Exception):
    """Base of every error kafkalite raises on purpose. `error_code` is Kafka's wire code."""

    error_code: int = ErrorCode.UNKNOWN_SERVER_ERROR


# --- record format -----------------------------------------------------------------------------


class CorruptRecordError(KafkaliteError):
    """A batch fails its CRC, is shorter than its header, or cannot be framed (CORRUPT_MESSAGE)."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class InvalidRecordError(KafkaliteError):
    """A batch is well framed but its content breaks a rule (INVALID_RECORD)."""

    error_code = ErrorCode.INVALID_RECORD


class RecordValidationError(InvalidRecordError):
    """Per-record rejection; `record_errors` lists (batch index, message) like Kafka's RecordError."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.record_errors = record_errors or []


class RecordTooLargeError(KafkaliteError):
    """A batch is larger than max.message.bytes (MESSAGE_TOO_LARGE)."""

    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(KafkaliteError):
    """An append is larger than segment.bytes (RECORD_LIST_TOO_LARGE)."""

    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidTimestampError(KafkaliteError):
    """A record timestamp is outside the allowed window (INVALID_TIMESTAMP)."""

    error_code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedCompressionTypeError(KafkaliteError):
    """Unknown codec id in the attributes (UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


# --- offsets and appends -----------------------------------------------------------------------


class OffsetOutOfRangeError(KafkaliteError):
    """A read or log-start move outside [logStartOffset, LEO] (OFFSET_OUT_OF_RANGE)."""

    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class InvalidOffsetError(KafkaliteError):
    """An index append that would break strict offset order (internal in Kafka)."""


class UnexpectedAppendOffsetError(KafkaliteError):
    """A follower append starting below the LEO; carries the batch's first and last offsets."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


class OffsetsOutOfOrderError(KafkaliteError):
    """Follower data whose batch offsets do not increase."""


class IndexOffsetOverflowError(KafkaliteError):
    """An offset does not fit in an index entry's 32-bit relative offset."""


class LogSegmentOffsetOverflowError(KafkaliteError):
    """An append's offsets do not fit relative to the segment's base offset."""


class CorruptIndexError(KafkaliteError):
    """An index file fails its sanity check; the segment must be rebuilt."""


class IndexFullError(KafkaliteError):
    """An index has no free slot (IllegalArgumentException in Kafka); the segment must roll."""


class KafkaStorageError(KafkaliteError):
    """An I/O failure in a log dir (KAFKA_STORAGE_ERROR)."""

    error_code = ErrorCode.KAFKA_STORAGE_ERROR


def metadata_write_error(path: Path, exc: OSError) -> KafkaStorageError | None:
    """The error for a failed write of a broker's metadata file that only fails the change (a full disk,
    descriptor exhaustion: the operator can fix both and retry), or None when the metadata dir itself is
    lost and the caller must treat it as fatal."""
    if exc.errno in DISK_FULL_ERRNOS:
        return KafkaStorageError(f"cannot write {path}: the disk of the metadata dir {path.parent} is full "
                                 f"({exc.strerror}); free space there and retry")
    if exc.errno in DESCRIPTOR_ERRNOS:
        return KafkaStorageError(f"cannot write {path}: the broker is out of file descriptors ({exc.strerror}); "
                                 "raise its open file limit (ulimit -n)")
    return None


class LogError(KafkaliteError):
    """A log-level invariant is violated (KafkaException in Kafka)."""


class DirectoryLockedError(LogError):
    """A data or partition directory is held by another writer (its `.lock` is taken); carries the lock
    file and what the holder wrote into it (pid, host, command), when it did."""

    def __init__(self, message: str, lock_file: str, holder: str | None) -> None:
        super().__init__(message)
        self.lock_file = lock_file
        self.holder = holder


# --- producer state (idempotence and transactions) ---------------------------------------------


class OutOfOrderSequenceError(KafkaliteError):
    """A producer sequence that does not follow the last one written (OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(KafkaliteError):
    """A retried batch that is no longer among the last five (DUPLICATE_SEQUENCE_NUMBER)."""

    error_code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaliteError):
    """A producer epoch older than the current one (INVALID_PRODUCER_EPOCH)."""

    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(KafkaliteError):
    """A write that contradicts the producer's transaction state (INVALID_TXN_STATE)."""

    error_code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(KafkaliteError):
    """An end marker from an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED)."""

    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class UnknownProducerIdError(KafkaliteError):
    """Producer state for this id is gone (UNKNOWN_PRODUCER_ID)."""

    error_code = ErrorCode.UNKNOWN_PRODUCER_ID


class InvalidConfigError(KafkaliteError):
    """A configuration value is missing, of the wrong type or out of range (INVALID_CONFIG)."""

    error_code = ErrorCode.INVALID_CONFIG


# --- topics, partitions and requests (broker) --------------------------------------------------


class UnknownTopicOrPartitionError(KafkaliteError):
    """No such topic or partition on this broker (UNKNOWN_TOPIC_OR_PARTITION)."""

    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class NotLeaderOrFollowerError(KafkaliteError):
    """This broker does not host the partition as leader (NOT_LEADER_OR_FOLLOWER)."""

    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class InvalidTopicError(KafkaliteError):
    """A topic name Kafka would refuse, or an operation not allowed on an internal topic (INVALID_TOPIC_EXCEPTION)."""

    error_code = ErrorCode.INVALID_TOPIC_EXCEPTION


class InvalidRequiredAcksError(KafkaliteError):
    """acks other than -1, 0 and 1 (INVALID_REQUIRED_ACKS)."""

    error_code = ErrorCode.INVALID_REQUIRED_ACKS


class TopicAlreadyExistsError(KafkaliteError):
    error_code = ErrorCode.TOPIC_ALREADY_EXISTS


class TopicDeletionDisabledError(KafkaliteError):
    """DeleteTopics with delete.topic.enable=false (TOPIC_DELETION_DISABLED)."""

    error_code = ErrorCode.TOPIC_DELETION_DISABLED


class UnknownTopicIdError(KafkaliteError):
    """A topic id no topic of the cluster has (UNKNOWN_TOPIC_ID)."""

    error_code = ErrorCode.UNKNOWN_TOPIC_ID


class InvalidPartitionsError(KafkaliteError):
    error_code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaliteError):
    error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicationAssignmentError(KafkaliteError):
    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class NotControllerError(KafkaliteError):
    """A controller write was refused because another broker has since become controller (NOT_CONTROLLER)."""

    error_code = ErrorCode.NOT_CONTROLLER


class StaleControllerEpochError(KafkaliteError):
    """A controller request from an older controller epoch than this broker has seen (STALE_CONTROLLER_EPOCH)."""

    error_code = ErrorCode.STALE_CONTROLLER_EPOCH


class BrokerNotAvailableError(KafkaliteError):
    """A request names a broker that is not registered (BROKER_NOT_AVAILABLE)."""

    error_code = ErrorCode.BROKER_NOT_AVAILABLE


class StaleBrokerEpochError(KafkaliteError):
    """A controller request for an older registration of this broker (STALE_BROKER_EPOCH)."""

    error_code = ErrorCode.STALE_BROKER_EPOCH


class InvalidRequestError(KafkaliteError):
    """A request that is well formed but makes no sense (INVALID_REQUEST)."""

    error_code = ErrorCode.INVALID_REQUEST


class PolicyViolationError(KafkaliteError):
    error_code = ErrorCode.POLICY_VIOLATION


class FencedLeaderEpochError(KafkaliteError):
    """The client's leader epoch is older than the partition's (FENCED_LEADER_EPOCH)."""

    error_code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(KafkaliteError):
    """The client's leader epoch is newer than the partition's (UNKNOWN_LEADER_EPOCH)."""

    error_code = ErrorCode.UNKNOWN_LEADER_EPOCH


class NotEnoughReplicasError(KafkaliteError):
    """acks=all with fewer in-sync replicas than the topic's min.insync.replicas: nothing was written
    (NOT_ENOUGH_REPLICAS, retriable)."""

    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(KafkaliteError):
    """acks=all whose records were written and committed while the ISR was smaller than min.insync.replicas
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND): a retry duplicates unless the producer is idempotent."""

    error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class RequestTimedOutError(KafkaliteError):
    """A delayed operation (acks=all produce, DeleteRecords) did not complete within its timeout
    (REQUEST_TIMED_OUT); what it wrote may still commit later."""

    error_code = ErrorCode.REQUEST_TIMED_OUT


class OffsetNotAvailableError(KafkaliteError):
    """A new leader's high watermark is still below its epoch's start offset, so a latest offset could go
    backwards (OFFSET_NOT_AVAILABLE, retriable)."""

    error_code = ErrorCode.OFFSET_NOT_AVAILABLE


class SaslAuthenticationError(KafkaliteError, ConnectionError):
    """A SASL login the broker refused (wrong password, unknown user), or a client-side failure of the exchange
    (the server's SCRAM signature did not verify). A ConnectionError too: code that retries a broker it cannot
    reach (the controller's channels, followers' fetchers) retries this with the same backoff."""

    error_code = ErrorCode.SASL_AUTHENTICATION_FAILED
