"""Record batch v2 (DefaultRecordBatch): header layout, a zero-copy view, and in-place mutations.

Every byte position of the 61-byte header is declared once here. The broker works on whole
batches: it reads the header with one struct call, checks the CRC over the bytes as they are,
and patches offsets, leader epoch and LogAppendTime in place without touching the records.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator

from crc32c import crc32c

from kafkalite.errors import CorruptRecordError, InvalidRecordError
from kafkalite.records.compression import CompressionType, decompress
from kafkalite.records.record import Record, decode_records, increment_sequence

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

RECORD_BATCH_OVERHEAD = 61
LOG_OVERHEAD = 12  # base offset + length: the part of a batch not counted by its length field
HEADER_SIZE_UP_TO_MAGIC = 17
MAGIC_V2 = 2

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

HEADER = struct.Struct(">qiibIhiqqqhii")  # all 61 header bytes in one call
PREFIX = struct.Struct(">qi")  # base offset + length, enough to frame a batch in a file
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

assert HEADER.size == RECORD_BATCH_OVERHEAD


class TimestampType(enum.IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def display(self) -> str:
        return {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}[self.value]

    @classmethod
    def from_name(cls, name: str) -> TimestampType:
        norm = name.strip().replace("_", "").lower()
        for t in cls:
            if t.display.lower() == norm:
                return t
        raise ValueError(f"unknown timestamp type {name!r}; expected CreateTime or LogAppendTime")


def compute_crc(buf: bytes | bytearray | memoryview) -> int:
    """CRC-32C of a whole batch's covered bytes (attributes to end)."""
    return crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])


class RecordBatch:
    """A view over one v2 batch held in `buffer` (bytes, bytearray or memoryview, exactly one batch).

    The header is decoded once at construction. Mutators write through to the buffer, so they need
    a writable one (bytearray or a memoryview of it) and keep the fields here in step.
    """

    __slots__ = (
        "attributes",
        "base_offset",
        "base_sequence",
        "base_timestamp",
        "buffer",
        "crc",
        "last_offset_delta",
        "length",
        "magic",
        "max_timestamp",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
        "records_count",
    )

    def __init__(self, buffer: bytes | bytearray | memoryview, *, header_only: bool = False) -> None:
        """`header_only` accepts just the first 61 bytes: enough for every header field, e.g. for
        producer state during recovery, without reading the records; `records()` then refuses."""
        if len(buffer) < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch is only {len(buffer)} bytes, smaller than the minimum {RECORD_BATCH_OVERHEAD}"
            )
        (
            self.base_offset,
            self.length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = HEADER.unpack_from(buffer, 0)
        if self.magic != MAGIC_V2:
            raise CorruptRecordError(f"unsupported record batch magic {self.magic} (only v2 is read)")
        if not header_only and self.length + LOG_OVERHEAD != len(buffer):
            raise CorruptRecordError(
                f"record batch length field {self.length} does not match the {len(buffer)} bytes given"
            )
        self.buffer = buffer

    # --- derived fields -------------------------------------------------------------------------

    @property
    def size_in_bytes(self) -> int:
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    # --- integrity ------------------------------------------------------------------------------

    def compute_checksum(self) -> int:
        return compute_crc(self.buffer)

    def is_valid(self) -> bool:
        return self.size_in_bytes >= RECORD_BATCH_OVERHEAD and self.crc == self.compute_checksum()

    def ensure_valid(self) -> None:
        computed = self.compute_checksum()
        if computed != self.crc:
            raise CorruptRecordError(
                f"record batch at offset {self.base_offset} is corrupt "
                f"(stored crc = {self.crc}, computed crc = {computed})"
            )

    # --- records --------------------------------------------------------------------------------

    def records_payload(self) -> bytes:
        """The uncompressed records section, decompressing if needed."""
        if len(self.buffer) != self.length + LOG_OVERHEAD:
            raise InvalidRecordError("this batch view holds only the header; its records were not read")
        raw = memoryview(self.buffer)[RECORDS_OFFSET:]
        codec = self.compression
        if codec == CompressionType.NONE:
            return bytes(raw)
        return decompress(codec, raw)

    def records(self) -> list[Record]:
        """Decode every record. Does not check the CRC (Kafka's iterator does not either)."""
        log_append_time = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        return decode_records(
            self.records_payload(),
            self.records_count,
            self.base_offset,
            self.base_timestamp,
            log_append_time,
            self.base_sequence,
        )

    # --- in-place mutations (writable buffer) -----------------------------------------------------

    def set_last_offset(self, last_offset: int) -> None:
        """Assign offsets by moving the base offset; the CRC does not cover it."""
        base = last_offset - self.last_offset_delta
        _INT64.pack_into(self.buffer, BASE_OFFSET_OFFSET, base)
        self.base_offset = base

    def set_base_offset(self, base_offset: int) -> None:
        _INT64.pack_into(self.buffer, BASE_OFFSET_OFFSET, base_offset)
        self.base_offset = base_offset

    def set_partition_leader_epoch(self, epoch: int) -> None:
        _INT32.pack_into(self.buffer, PARTITION_LEADER_EPOCH_OFFSET, epoch)
        self.partition_leader_epoch = epoch

    def set_max_timestamp(self, timestamp_type: TimestampType, max_timestamp: int) -> None:
        """Rewrite the timestamp type bit and max timestamp; recompute the CRC only if either changed."""
        if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
            raise InvalidRecordError("cannot set the timestamp type of a v2 batch to NoTimestampType")
        if self.timestamp_type == timestamp_type and self.max_timestamp == max_timestamp:
            return
        attributes = self.attributes & ~TIMESTAMP_TYPE_MASK
        if timestamp_type == TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        _INT16.pack_into(self.buffer, ATTRIBUTES_OFFSET, attributes)
        _INT64.pack_into(self.buffer, MAX_TIMESTAMP_OFFSET, max_timestamp)
        self.attributes = attributes
        self.max_timestamp = max_timestamp
        self.crc = compute_crc(self.buffer)
        _UINT32.pack_into(self.buffer, CRC_OFFSET, self.crc)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={self.size_in_bytes}, codec={self.compression.name.lower()}, "
            f"timestamp_type={self.timestamp_type.display}, max_timestamp={self.max_timestamp}, "
            f"producer_id={self.producer_id}, transactional={self.is_transactional}, control={self.is_control})"
        )


def iter_batches(buf: bytes | bytearray | memoryview, *, strict: bool = False) -> Iterator[RecordBatch]:
    """Frame the batches of an in-memory byte run (a produce request's records, a fetched slice).

    Mirrors Kafka's batch iteration: fewer than 17 bytes left or a batch running past the end stops
    quietly (a partial tail), unless `strict`, in which case a partial tail is a CorruptRecordError.
    A length below the 14-byte minimum is always a CorruptRecordError.
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while end - pos >= HEADER_SIZE_UP_TO_MAGIC:
        _, length = PREFIX.unpack_from(view, pos)
        if length < 14:
            raise CorruptRecordError(f"record size {length} at byte {pos} is smaller than the minimum 14")
        size = length + LOG_OVERHEAD
        if pos + size > end:
            break
        yield RecordBatch(view[pos : pos + size])
        pos += size
    if strict and pos != end:
        raise CorruptRecordError(f"{end - pos} trailing bytes at byte {pos} do not form a complete record batch")
