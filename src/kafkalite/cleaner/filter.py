"""The cleaner's filter over one chunk of a segment (Kafka's MemoryRecords.filterTo with the
LogCleaner's RecordFilter), deciding batch by batch and record by record what survives.

Batch level (producer state and transactions, in Python per batch):
* RETAIN_EMPTY: the last data batch of an active producer (or its last marker), and the batch
  that ends the cleaning round, survive even with no record left, as a 61-byte header;
* DELETE: aborted data and expired markers go whole;
* DELETE_EMPTY: everything else goes only if no record survives.

Record level (numpy over the whole chunk): a record survives if it lies beyond the map, or it is
the latest for its key and either has a value or is a tombstone still inside its delete horizon.
A batch whose records all survive is copied byte for byte; otherwise it is re-encoded around its
survivors, keeping its base offset, last offset, producer fields and leader epoch, as Kafka does.
The first cleaning that keeps a tombstone (or an empty transaction's marker) stamps the batch's
delete horizon (attribute bit 6, base timestamp = now + delete.retention.ms).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

import numpy as np
from crc32c import crc32c

from kafkalite.cleaner.chunk import Batch, Decoded, decode, frame
from kafkalite.cleaner.offset_map import OffsetMap
from kafkalite.cleaner.transactions import CleanedTransactionMetadata
from kafkalite.cleaner.vector import PaddedBuffer, encode_survivors
from kafkalite.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatch,
)
from kafkalite.records.compression import CompressionType, compress

_PREFIX = struct.Struct(">qiib")
_COVERED = struct.Struct(">hiqqqhii")
_CRC = struct.Struct(">I")
_KEPT_ATTRIBUTES = COMPRESSION_CODEC_MASK | TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK


class BatchRetention(enum.Enum):
    DELETE = 0
    DELETE_EMPTY = 1
    RETAIN_EMPTY = 2


@dataclass(slots=True)
class CleanerStats:
    """What one cleaning did (Kafka's CleanerStats); times are the monotonic clock's, in seconds."""

    start_time: float = 0.0
    map_complete_time: float = -1.0
    end_time: float = -1.0
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    invalid_messages_read: int = 0
    messages_written: int = 0
    buffer_utilization: float = 0.0

    @property
    def elapsed_secs(self) -> float:
        return max(self.end_time - self.start_time, 1e-9)

    @property
    def elapsed_index_secs(self) -> float:
        return max(self.map_complete_time - self.start_time, 1e-9)


@dataclass(slots=True)
class FilterContext:
    """Everything the filter needs that stays fixed over one cleaning round."""

    offset_map: OffsetMap
    txn: CleanedTransactionMetadata
    last_records_of_producers: dict[int, tuple[int | None, int]]  # pid -> (last data offset, epoch)
    upper_bound_offset: int  # next offset of the round's last batch: that batch always survives
    now: int
    delete_retention_ms: int
    stats: CleanerStats = field(default_factory=CleanerStats)


@dataclass(slots=True)
class FilterResult:
    bytes_read: int  # whole batches consumed from the chunk
    output: bytes
    max_offset: int = -1
    max_timestamp: int = -1
    shallow_offset_of_max_timestamp: int = -1


@dataclass(slots=True)
class _Plan:
    retention: BatchRetention
    discard_records: bool
    marker_for_empty_txn: bool
    horizon: int | None = None  # the delete horizon of a rewritten batch
    base_timestamp: int = -1  # the base timestamp of a rewritten batch
    keep_all: bool = False


def filter_chunk(buf: PaddedBuffer, ctx: FilterContext) -> FilterResult:
    batches, consumed = frame(buf)
    stats = ctx.stats
    plans = [_plan(b, buf, ctx) for b in batches]
    opened = [i for i, p in enumerate(plans) if p.retention is not BatchRetention.DELETE and not p.discard_records]
    groups = decode(buf, batches, opened) if opened else []
    bodies: dict[int, tuple[memoryview | bytes, int, int]] = {}  # batch -> (records, count, max timestamp)
    for decoded in groups:
        bodies.update(_survivors(decoded, batches, plans, ctx))
    out: list[bytes | memoryview] = []
    result = FilterResult(consumed, b"")
    raw = memoryview(buf.raw)
    for i, (b, plan) in enumerate(zip(batches, plans, strict=True)):
        stats.bytes_read += b.size
        if plan.retention is BatchRetention.DELETE:
            continue
        stats.messages_read += b.count
        found = bodies.get(i)
        if found is not None:
            body, count, max_ts = found
            stats.messages_written += count
            if body is _WHOLE:
                piece: bytes | memoryview = raw[b.pos : b.pos + b.size]
            else:
                piece = _encode(b, plan, body, count, max_ts)
        elif plan.retention is BatchRetention.RETAIN_EMPTY:
            piece, max_ts = _empty(b), b.max_timestamp
        else:
            continue
        out.append(piece)
        stats.bytes_written += len(piece)
        result.max_offset = b.last_offset
        if max_ts > result.max_timestamp:
            result.max_timestamp, result.shallow_offset_of_max_timestamp = max_ts, b.last_offset
    result.output = b"".join(out) if out else b""
    return result


_WHOLE = b"whole batch"


def _survivors(d: Decoded, batches: list[Batch], plans: list[_Plan], ctx: FilterContext) -> dict:
    """For each batch of a decoded group with a survivor: its new records section (or _WHOLE when it is
    copied as it is), survivor count and max timestamp. Survivors of all rewritten batches are
    re-encoded together."""
    r = d.records
    keep = _record_decisions(d, batches, plans, ctx)
    nb = len(d.batches)
    kept_per_batch = np.bincount(r.batch[keep], minlength=nb).tolist()
    tomb_per_batch = np.bincount(r.batch[keep & (r.value_len < 0)], minlength=nb).tolist()
    out: dict = {}
    rewrite: list[int] = []  # slots
    for slot, i in enumerate(d.batches):
        kept = kept_per_batch[slot]
        if not kept:
            continue
        b, plan = batches[i], plans[i]
        has_horizon = b.attributes & DELETE_HORIZON_FLAG_MASK
        needs_horizon = (tomb_per_batch[slot] > 0 or plan.marker_for_empty_txn) and not has_horizon
        if kept == b.count and not needs_horizon:
            out[i] = (_WHOLE, kept, b.max_timestamp)
            continue
        plan.horizon = ctx.now + ctx.delete_retention_ms if needs_horizon else (
            b.base_timestamp if has_horizon else None)
        rewrite.append(slot)
    if not rewrite:
        return out
    chosen = np.zeros(nb, dtype=bool)
    chosen[rewrite] = True
    sel = np.flatnonzero(keep & chosen[r.batch])
    sel_batch = r.batch[sel]
    ts = d.timestamps[sel]
    firsts = np.flatnonzero(np.concatenate(([True], sel_batch[1:] != sel_batch[:-1])))
    horizon = np.array([-1 if plans[d.batches[s]].horizon is None else plans[d.batches[s]].horizon
                        for s in rewrite], dtype=np.int64)
    has = np.array([plans[d.batches[s]].horizon is not None for s in rewrite], dtype=bool)
    base = np.where(has, horizon, ts[firsts])  # Kafka's builder: the horizon, else the first survivor's time
    counts = np.diff(np.append(firsts, len(sel)))
    data, bounds = encode_survivors(d.buf, r, sel, ts - np.repeat(base, counts))
    max_ts = np.maximum.reduceat(ts, firsts).tolist()
    mv = data.data  # the array's own memoryview
    lo = bounds[firsts].tolist()
    hi = bounds[np.append(firsts[1:], len(sel))].tolist()
    for k, slot in enumerate(rewrite):
        i = d.batches[slot]
        b = batches[i]
        batch_max = b.max_timestamp if b.attributes & TIMESTAMP_TYPE_MASK else max(max_ts[k], -1)
        plans[i].base_timestamp = int(base[k])
        out[i] = (mv[lo[k] : hi[k]], int(counts[k]), batch_max)
    return out


def _plan(b: Batch, buf: PaddedBuffer, ctx: FilterContext) -> _Plan:
    """checkBatchRetention: transaction state first (it must see every batch), then the outcome."""
    control = b.attributes & CONTROL_FLAG_MASK
    last = b.last_offset
    if control:
        key = _control_key(b, buf) if b.count > 0 else None
        can_discard = ctx.txn.on_control_batch_read(last, b.producer_id, key)
        discard = can_discard and bool(b.attributes & DELETE_HORIZON_FLAG_MASK) and b.base_timestamp <= ctx.now
    else:
        can_discard = ctx.txn.on_batch_read(last, b.producer_id, bool(b.attributes & TRANSACTIONAL_FLAG_MASK))
        discard = can_discard
    if (b.producer_id >= 0 and _is_last_of_producer(b, ctx)) or last + 1 == ctx.upper_bound_offset:
        retention = BatchRetention.RETAIN_EMPTY
    elif discard:
        retention = BatchRetention.DELETE
    else:
        retention = BatchRetention.DELETE_EMPTY
    return _Plan(retention, discard, bool(can_discard and control), keep_all=bool(control))


def _is_last_of_producer(b: Batch, ctx: FilterContext) -> bool:
    last = ctx.last_records_of_producers.get(b.producer_id)
    if last is None:
        return False
    last_data_offset, epoch = last
    if last_data_offset is not None:
        return b.last_offset == last_data_offset
    return bool(b.attributes & CONTROL_FLAG_MASK) and b.producer_epoch == epoch


def _control_key(b: Batch, buf: PaddedBuffer) -> bytes | None:
    records = RecordBatch(bytes(buf.raw[b.pos : b.pos + b.size])).records()
    return records[0].key if records else None


def _record_decisions(d: Decoded, batches: list[Batch], plans: list[_Plan], ctx: FilterContext) -> np.ndarray:
    """Which records of a decoded group survive (shouldRetainRecord, vectorised)."""
    r = d.records
    n = len(r)
    if n == 0:
        return np.zeros(0, dtype=bool)
    sel = [batches[i] for i in d.batches]
    keep_all = np.fromiter((plans[i].keep_all for i in d.batches), dtype=bool, count=len(sel))
    retain_deletes = np.fromiter(
        (not b.attributes & DELETE_HORIZON_FLAG_MASK or ctx.now < b.base_timestamp for b in sel),
        dtype=bool, count=len(sel))
    offset_map = ctx.offset_map
    offsets = d.offsets
    has_key = r.key_len >= 0
    past = offsets > offset_map.latest_offset
    forced = keep_all[r.batch]
    lookup = np.flatnonzero(has_key & ~past & ~forced)
    latest = np.full(n, -1, dtype=np.int64)
    if len(lookup):
        h1, h2 = d.key_hashes(lookup)
        latest[lookup] = offset_map.get_many(h1, h2)
    keep = past | forced | (has_key & (offsets >= latest) & ((r.value_len >= 0) | retain_deletes[r.batch]))
    ctx.stats.invalid_messages_read += int((~has_key & ~past & ~forced).sum())
    return keep


def _encode(b: Batch, plan: _Plan, records: memoryview | bytes, count: int, max_ts: int) -> bytes:
    """A batch re-encoded around its survivors, as Kafka's MemoryRecordsBuilder writes it: same base
    offset, last offset, producer fields, leader epoch and codec; base timestamp = the delete horizon
    when one is set, else the first survivor's timestamp (the survivors' deltas were rebased to it)."""
    codec = b.attributes & COMPRESSION_CODEC_MASK
    payload = compress(CompressionType.from_id(codec), bytes(records)) if codec else records
    attributes = b.attributes & _KEPT_ATTRIBUTES
    if plan.horizon is not None:
        attributes |= DELETE_HORIZON_FLAG_MASK
    return _assemble(b, attributes, plan.base_timestamp, max_ts, count, payload)


def _empty(b: Batch) -> bytes:
    """Kafka's writeEmptyHeader: no records, base timestamp -1, the original max timestamp."""
    attributes = b.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    return _assemble(b, attributes, -1, b.max_timestamp, 0, b"")


def _assemble(b: Batch, attributes: int, base_ts: int, max_ts: int, count: int,
              payload: bytes | memoryview) -> bytes:
    covered = _COVERED.pack(attributes, b.last_offset_delta, base_ts, max_ts, b.producer_id, b.producer_epoch,
                            b.base_sequence, count)
    crc = crc32c(payload, crc32c(covered))
    prefix = _PREFIX.pack(b.base_offset, RECORD_BATCH_OVERHEAD - 12 + len(payload), b.epoch, MAGIC_V2)
    return b"".join((prefix, _CRC.pack(crc), covered, payload))
