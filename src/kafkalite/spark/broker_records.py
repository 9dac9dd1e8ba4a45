"""Fetch answers made ready for the shared decoder: read_committed's aborted transactions dropped.

A `read_committed` fetch returns every batch below the last stable offset, aborted transactions
included, plus the list of aborted transactions (producer id, first offset) that overlap the
answer; the consumer drops their batches itself. This is Kafka's consumer rule (`CompletedFetch`):
walking the batches in offset order, a listed transaction starts counting as aborted once the
batch being looked at reaches its first offset; a transactional data batch of a producer with an
aborted transaction in progress is dropped; that producer's ABORT marker ends it. The decoder then
drops control batches as it always does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from kafkalite.records.batch import (
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatch,
)
from kafkalite.records.control import ControlRecordType, parse_control_type

_FIELDS = struct.Struct(">qi")  # base offset, length
_LAST_DELTA = struct.Struct(">i")
_ATTRS = struct.Struct(">h")
_PRODUCER = struct.Struct(">q")


def _is_abort_marker(batch: memoryview) -> bool:
    records = RecordBatch(batch).records()
    return bool(records) and parse_control_type(records[0].key) == ControlRecordType.ABORT


def drop_aborted(data: bytes | memoryview, aborted: Iterable[Mapping[str, Any]]) -> bytes | memoryview:
    """`data` (whole batches; a cut-off tail is kept as is) without the batches of aborted transactions.

    `aborted` is the fetch answer's `aborted_transactions` (`producer_id`, `first_offset`). Returns
    `data` itself when nothing is dropped.
    """
    pending = sorted((int(a["first_offset"]), int(a["producer_id"])) for a in aborted)
    if not pending:
        return data
    view = memoryview(data)
    n = len(view)
    ongoing: set[int] = set()
    kept: list[memoryview] = []
    keep_from = 0
    pos = 0
    nxt = 0
    while n - pos >= RECORD_BATCH_OVERHEAD:
        base, length = _FIELDS.unpack_from(view, pos)
        size = length + LOG_OVERHEAD
        if size < RECORD_BATCH_OVERHEAD or pos + size > n:
            break
        producer = _PRODUCER.unpack_from(view, pos + 43)[0]
        if producer >= 0:
            last = base + _LAST_DELTA.unpack_from(view, pos + 23)[0]
            while nxt < len(pending) and pending[nxt][0] <= last:
                ongoing.add(pending[nxt][1])
                nxt += 1
            attrs = _ATTRS.unpack_from(view, pos + 21)[0]
            if attrs & CONTROL_FLAG_MASK:
                if producer in ongoing and _is_abort_marker(view[pos:pos + size]):
                    ongoing.discard(producer)
            elif attrs & TRANSACTIONAL_FLAG_MASK and producer in ongoing:
                if keep_from < pos:
                    kept.append(view[keep_from:pos])
                keep_from = pos + size
        pos += size
    if keep_from == 0:
        return data
    kept.append(view[keep_from:])
    return b"".join(kept)
