"""Builders for cleaner tests: compacted logs, keyed records, transactions, and what a log holds."""

from __future__ import annotations

from collections.abc import Callable

from kafkalite.cleaner.cleaner import Cleaner, LogToClean
from kafkalite.cleaner.filter import CleanerStats
from kafkalite.cleaner.offset_map import ENTRY_SIZE, OffsetMap
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.records.control import ControlRecordType, build_end_txn_marker
from kafkalite.storage.log import Log
from kafkalite.storage.producer_state import AppendOrigin
from tests.support.logs import Env

COMPACT = {"segment.bytes": 1024, "segment.index.bytes": 1024, "cleanup.policy": "compact"}


class FakeOffsetMap(OffsetMap):
    """Upstream's test map: `clear()` keeps the latest offset, so a round with no dirty segment still
    re-filters the log up to the previous round's end (how the two-pass tombstone cases run)."""

    def clear(self) -> None:
        latest = self.latest_offset
        super().clear()
        self.latest_offset = latest


def make_cleaner(env: Env, slots: int = 1024, load_factor: float = 0.75) -> Cleaner:
    """Kafka's test cleaner: a map of `slots` entries filled to 75 %."""
    return Cleaner(0, FakeOffsetMap(slots * ENTRY_SIZE), load_factor=load_factor, clock=env.clock)


def clean(cleaner: Cleaner, lg: Log, first_dirty: int = 0, uncleanable: int | None = None,
          now: int | None = None) -> tuple[int, CleanerStats]:
    bound = lg.active_segment.base_offset if uncleanable is None else uncleanable
    ltc = LogToClean((lg.topic, lg.partition), lg, first_dirty, bound)
    return cleaner.do_clean(ltc, cleaner.clock.milliseconds() if now is None else now)


def record(k: int, v: int | None, ts: int = -1, **kw) -> bytearray:
    return build_batch([SimpleRecord(str(k).encode(), None if v is None else str(v).encode(), ts)], **kw)


def tombstone(k: int, ts: int = -1) -> bytearray:
    return record(k, None, ts)


def keys(lg: Log) -> list[int]:
    """Keys of the non-control records that have a value (Kafka's keysInLog)."""
    return [int(r.key) for b in lg.batches() if not b.is_control for r in b.records()
            if r.key is not None and r.value is not None]


def offsets(lg: Log) -> list[int]:
    """Offsets of every record with a key and a value, control records included (offsetsInLog)."""
    return [r.offset for b in lg.batches() for r in b.records() if r.key is not None and r.value is not None]


def batch_last_offsets(lg: Log) -> list[int]:
    return [b.last_offset for b in lg.batches()]


def transactional_appender(lg: Log, pid: int, epoch: int = 0, ts: int = -1) -> Callable[[list[int]], None]:
    """Kafka's appendTransactionalAsLeader: each call writes one transactional batch of keys."""
    seq = 0

    def append(ks: list[int]) -> None:
        nonlocal seq
        lg.append_as_leader(build_batch([SimpleRecord(str(k).encode(), str(k).encode(), ts) for k in ks],
                                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                        is_transactional=True))
        seq += len(ks)

    return append


def end_txn(lg: Log, kind: ControlRecordType, pid: int, epoch: int = 0, ts: int = 0) -> None:
    lg.append_as_leader(build_end_txn_marker(kind, pid, epoch, timestamp=ts), origin=AppendOrigin.COORDINATOR)


def commit(lg: Log, pid: int, epoch: int = 0, ts: int = 0) -> None:
    end_txn(lg, ControlRecordType.COMMIT, pid, epoch, ts)


def abort(lg: Log, pid: int, epoch: int = 0, ts: int = 0) -> None:
    end_txn(lg, ControlRecordType.ABORT, pid, epoch, ts)
