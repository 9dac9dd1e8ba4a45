"""Control records: the COMMIT/ABORT markers a transaction coordinator writes, and their key types."""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from kafkalite.errors import InvalidRecordError
from kafkalite.records.batch import NO_PARTITION_LEADER_EPOCH, NO_SEQUENCE, RecordBatch
from kafkalite.records.builder import SimpleRecord, build_batch
from kafkalite.records.record import Record

_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
CURRENT_CONTROL_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


def parse_control_type(key: bytes | None) -> ControlRecordType:
    """Type of a control record from its key; unknown types are UNKNOWN so readers skip them."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(f"invalid control record key of {0 if key is None else len(key)} bytes")
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError(f"invalid control record key version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    kind: ControlRecordType  # COMMIT or ABORT
    coordinator_epoch: int

    @staticmethod
    def from_record(record: Record) -> EndTransactionMarker:
        kind = parse_control_type(record.key)
        if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise InvalidRecordError(f"control record of type {kind.name} is not an end transaction marker")
        value = record.value
        if value is None or len(value) < _MARKER_VALUE.size:
            raise InvalidRecordError("invalid end transaction marker value: fewer than 6 bytes")
        _version, coordinator_epoch = _MARKER_VALUE.unpack_from(value, 0)  # newer versions parse as v0
        return EndTransactionMarker(kind, coordinator_epoch)

    def key_bytes(self) -> bytes:
        return _KEY.pack(CURRENT_CONTROL_KEY_VERSION, self.kind)

    def value_bytes(self) -> bytes:
        return _MARKER_VALUE.pack(CURRENT_END_TXN_MARKER_VERSION, self.coordinator_epoch)


def build_end_txn_marker(
    kind: ControlRecordType,
    producer_id: int,
    producer_epoch: int,
    *,
    coordinator_epoch: int = 0,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytearray:
    """A 78-byte transactional control batch with one COMMIT or ABORT record."""
    marker = EndTransactionMarker(kind, coordinator_epoch)
    return build_batch(
        [SimpleRecord(marker.key_bytes(), marker.value_bytes(), timestamp)],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
    )


def end_txn_marker_of(batch: RecordBatch) -> EndTransactionMarker | None:
    """The marker a control batch carries, or None for other control types (e.g. LEADER_CHANGE)."""
    if not batch.is_control:
        return None
    records = batch.records()
    if not records:
        return None
    kind = parse_control_type(records[0].key)
    if kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        return None
    return EndTransactionMarker.from_record(records[0])
