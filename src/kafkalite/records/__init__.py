"""Record batch v2 codec: pure functions and views over bytes, no I/O."""

from kafkalite.records.batch import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    TimestampType,
    compute_crc,
    iter_batches,
)
from kafkalite.records.builder import SimpleRecord, build_batch, build_empty_batch, encode_record, single
from kafkalite.records.compression import CompressionType
from kafkalite.records.control import ControlRecordType, EndTransactionMarker, build_end_txn_marker
from kafkalite.records.record import Record, decrement_sequence, increment_sequence

__all__ = [
    "LOG_OVERHEAD",
    "RECORD_BATCH_OVERHEAD",
    "CompressionType",
    "ControlRecordType",
    "EndTransactionMarker",
    "Record",
    "RecordBatch",
    "SimpleRecord",
    "TimestampType",
    "build_batch",
    "build_empty_batch",
    "build_end_txn_marker",
    "compute_crc",
    "decrement_sequence",
    "encode_record",
    "increment_sequence",
    "iter_batches",
    "single",
]
