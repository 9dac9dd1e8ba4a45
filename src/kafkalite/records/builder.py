"""Encoding of v2 record batches (what MemoryRecordsBuilder produces).

Used by producers of data inside kafkalite (tests, the demo, the cleaner's rewritten batches,
the Spark sink). Builds the records section once, compresses it once, and computes the CRC once.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from crc32c import crc32c

from kafkalite.records.batch import (
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    TimestampType,
)
from kafkalite.records.compression import CompressionType, compress
from kafkalite.records.record import Header
from kafkalite.records.varint import encode_varint, encode_varlong

_PREFIX = struct.Struct(">qiib")  # base offset, length, leader epoch, magic
_BODY_HEADER = struct.Struct(">hiqqqhii")  # attributes .. records count (CRC-covered)
_CRC = struct.Struct(">I")
_NULL = encode_varint(-1)


class SimpleRecord(NamedTuple):
    """A record to be written: key, value, timestamp (-1 = none) and headers."""

    key: bytes | None
    value: bytes | None
    timestamp: int = NO_TIMESTAMP
    headers: Sequence[Header] = ()


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[Header] = ()) -> bytes:
    """One record with its length prefix."""
    parts = [b"\x00", encode_varlong(timestamp_delta), encode_varint(offset_delta)]
    if key is None:
        parts.append(_NULL)
    else:
        parts += (encode_varint(len(key)), key)
    if value is None:
        parts.append(_NULL)
    else:
        parts += (encode_varint(len(value)), value)
    parts.append(encode_varint(len(headers)))
    for hkey, hval in headers:
        hk = hkey.encode()
        parts += (encode_varint(len(hk)), hk)
        if hval is None:
            parts.append(_NULL)
        else:
            parts += (encode_varint(len(hval)), hval)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _as_record(r: SimpleRecord | tuple) -> SimpleRecord:
    return r if isinstance(r, SimpleRecord) else SimpleRecord(*r)


def build_batch(
    records: Iterable[SimpleRecord | tuple],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
) -> bytearray:
    """Encode a v2 batch. Returns a bytearray so callers can patch it in place.

    `offset_deltas` lets the cleaner keep the original offsets of surviving records, and
    `last_offset_delta` lets it keep the batch's last offset when trailing records were removed.
    With a delete horizon the base timestamp holds the horizon and record deltas are relative to it.
    """
    recs = [_as_record(r) for r in records]
    if offset_deltas is None:
        offset_deltas = range(len(recs))
    elif len(offset_deltas) != len(recs):
        raise ValueError("offset_deltas must have one entry per record")
    first_ts = recs[0].timestamp if recs else NO_TIMESTAMP
    base_ts = first_ts if delete_horizon_ms is None else delete_horizon_ms
    max_ts = max((r.timestamp for r in recs), default=NO_TIMESTAMP)
    body = b"".join(
        encode_record(d, r.timestamp - base_ts, r.key, r.value, r.headers)
        for d, r in zip(offset_deltas, recs, strict=True)
    )
    payload = compress(compression, body) if compression != CompressionType.NONE else body
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
        if log_append_time is not None:
            max_ts = log_append_time
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    if last_offset_delta is None:
        last_offset_delta = offset_deltas[-1] if recs else 0
    return _assemble(base_offset, partition_leader_epoch, attributes, last_offset_delta, base_ts, max_ts,
                     producer_id, producer_epoch, base_sequence, len(recs), payload)


def _assemble(base_offset: int, leader_epoch: int, attributes: int, last_offset_delta: int, base_ts: int,
              max_ts: int, producer_id: int, producer_epoch: int, base_sequence: int, count: int,
              payload: bytes) -> bytearray:
    covered = _BODY_HEADER.pack(attributes, last_offset_delta, base_ts, max_ts, producer_id, producer_epoch,
                                base_sequence, count)
    crc = crc32c(payload, crc32c(covered))
    length = RECORD_BATCH_OVERHEAD - 12 + len(payload)
    out = bytearray(_PREFIX.pack(base_offset, length, leader_epoch, MAGIC_V2))
    out += _CRC.pack(crc)
    out += covered
    out += payload
    return out


def build_empty_batch(
    *,
    base_offset: int,
    last_offset: int,
    timestamp: int,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytearray:
    """A 61-byte batch with no records, as the cleaner keeps to preserve producer state."""
    attributes = 0
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    return _assemble(base_offset, partition_leader_epoch, attributes, last_offset - base_offset, NO_TIMESTAMP,
                     timestamp, producer_id, producer_epoch, base_sequence, 0, b"")


def single(value: bytes | None = b"test", key: bytes | None = None, ts: int = NO_TIMESTAMP, **kw: Any) -> bytearray:
    """A one-record batch: 72 bytes for b"test" with a null key, 76 with a 4-byte key."""
    return build_batch([SimpleRecord(key, value, ts)], **kw)
