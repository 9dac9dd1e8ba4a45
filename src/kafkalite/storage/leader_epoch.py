"""The leader epoch cache (Kafka's LeaderEpochFileCache) and its `leader-epoch-checkpoint` file.

Each entry says "from this offset on, records were written by the leader of this epoch". Followers
use `end_offset_for` to find where their log diverges from the new leader's, so the list must stay
strictly increasing in both epoch and start offset: `assign` enforces that by dropping the newest
entries that would break it, exactly as Kafka does, because a follower truncating to a different
offset than Kafka would compute loses or resurrects records.

The cache is rewritten synchronously after every change. Kafka defers the flush after truncation
only to keep an fsync out of its log lock; a stale file after a crash is harmless either way
(recovery truncates the cache again), so the simpler synchronous write keeps the same guarantees.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # runtime import would be circular: checkpoint builds EpochEntry values
    from kafkalite.storage.checkpoint import LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """The first offset written by the leader of `epoch`."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Ordered (epoch, start offset) pairs, optionally persisted to a leader-epoch checkpoint.

    Empty-cache convention: accessors return None (never -1), so "no epoch" cannot be mistaken for
    a real value in arithmetic. Only `end_offset_for` speaks Kafka's (-1, -1) wire answer.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None = None) -> None:
        self._checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        self._lock = threading.RLock()
        self._unsynced = False  # the file holds entries written without fsync (see `assign`)
        if checkpoint is not None:
            # Loading replays the same rule as assign, so a hand-edited non-monotonic file
            # cannot break the ordering invariant; Kafka does the same and does not rewrite.
            for entry in checkpoint.read():
                self._assign_in_memory(entry)

    # --- mutation ------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns whether the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} and start offset {start_offset} must be >= 0")
        with self._lock:
            changed = self._assign_in_memory(EpochEntry(epoch, start_offset))
            if changed:
                # Written at once but not fsynced (Kafka 3.7+ likewise, KAFKA-15046): an assign comes with a
                # leader's first append of its epoch, on the event loop, and two fsyncs there cost ~7 ms per
                # partition (70 s for a first produce to 10,000). The log syncs the file (`sync`) before its
                # recovery point passes the entry; until then a power loss at worst loses an entry that
                # recovery assigns again from the batches above the recovery point, or leaves a damaged
                # file, which is rebuilt from the batches at load.
                self._write(durable=False)
            return changed

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        with self._lock:
            latest = self.latest_entry
            if end_offset < 0 or latest is None or latest.start_offset < end_offset:
                return
            while self._entries and self._entries[-1].start_offset >= end_offset:
                self._entries.pop()
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly before the new log start, keeping the one that covers it.

        The last removed epoch is re-added starting at `start_offset`, because the records from
        there up to the next epoch still belong to it.
        """
        with self._lock:
            earliest = self.earliest_entry
            if start_offset < 0 or earliest is None or earliest.start_offset >= start_offset:
                return
            split = bisect_right([e.start_offset for e in self._entries], start_offset)
            last_removed = self._entries[split - 1]
            self._entries[:split] = [EpochEntry(last_removed.epoch, start_offset)]
            self.flush()

    def clear(self) -> None:
        """Forget every epoch and persist the empty cache."""
        with self._lock:
            self._entries.clear()
            self.flush()

    def flush(self) -> None:
        """Rewrite the checkpoint with the current entries, durably (no-op for an in-memory cache)."""
        self._write(durable=True)

    def sync(self) -> None:
        """Make entries written without fsync durable; nothing to do when there are none."""
        with self._lock:
            if self._unsynced:
                self._write(durable=True)

    def _write(self, durable: bool) -> None:
        with self._lock:
            if self._checkpoint is not None:
                self._checkpoint.write(list(self._entries), durable)
                self._unsynced = not durable

    # --- queries -------------------------------------------------------------------------------

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The newest epoch, or None when the cache is empty."""
        entry = self.latest_entry
        return None if entry is None else entry.epoch

    def epoch_entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        with self._lock:
            return list(self._entries)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) a follower at `requested_epoch` must truncate to (OffsetForLeaderEpoch).

        The end offset of an epoch is the start of the next higher one; for the latest epoch it is
        the log end offset. An epoch above every known one, or UNDEFINED_EPOCH, answers (-1, -1).
        An epoch below the first known one answers itself with the first start offset.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            latest = self.latest_entry
            if latest is not None and latest.epoch == requested_epoch:
                return requested_epoch, log_end_offset
            higher = bisect_right([e.epoch for e in self._entries], requested_epoch)
            if higher == len(self._entries):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            next_start = self._entries[higher].start_offset
            if higher == 0:
                return requested_epoch, next_start
            return self._entries[higher - 1].epoch, next_start

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds `offset`, or None if it precedes every known epoch."""
        with self._lock:
            index = bisect_right([e.start_offset for e in self._entries], offset)
            return self._entries[index - 1].epoch if index else None

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        pairs = ", ".join(f"({e.epoch},{e.start_offset})" for e in self._entries)
        return f"LeaderEpochCache([{pairs}])"

    # --- internals -----------------------------------------------------------------------------

    def _assign_in_memory(self, entry: EpochEntry) -> bool:
        latest = self.latest_entry
        if latest is not None and entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return False  # same epoch seen again later in the log: nothing new to record
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
        self._entries.append(entry)
        return True
