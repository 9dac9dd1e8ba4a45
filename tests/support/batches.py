"""Small builders shared by storage tests (Kafka's singletonRecords and friends)."""

from __future__ import annotations

from kafkalite.records import RecordBatch, SimpleRecord, build_batch
from kafkalite.records.compression import CompressionType


def batch_at(base: int, n: int = 1, ts: int = -1, value: bytes = b"test", key: bytes | None = None,
             epoch: int = -1, codec: CompressionType = CompressionType.NONE) -> bytearray:
    """A batch of n records at offsets base..base+n-1."""
    return build_batch([SimpleRecord(key, value, ts)] * n, base_offset=base, partition_leader_epoch=epoch,
                       compression=codec)


def offsets_batch(offsets: list[int], ts: int = -1, epoch: int = -1) -> bytearray:
    """One batch holding records at the given (possibly sparse) offsets."""
    base = offsets[0]
    return build_batch([SimpleRecord(None, b"v%d" % o, ts) for o in offsets], base_offset=base,
                       offset_deltas=[o - base for o in offsets], partition_leader_epoch=epoch)


def append_batch(segment, buf: bytearray) -> RecordBatch:
    """Append one batch to a segment the way the log does: largest offset, max ts and its offset."""
    b = RecordBatch(buf)
    segment.append(b.last_offset, b.max_timestamp, b.last_offset, buf)
    return b
