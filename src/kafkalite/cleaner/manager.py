"""Which log to clean next, and the cleaning state of every partition (Kafka's LogCleanerManager).

State machine per partition (absent = idle):
  idle -> IN_PROGRESS (a cleaner took it) -> idle (done, checkpoint written)
  IN_PROGRESS -> ABORTED (someone wants it stopped) -> PAUSED(1) (the cleaner noticed and stopped)
  idle -> PAUSED(1); PAUSED(n) <-> PAUSED(n + 1); PAUSED(1) -> idle (resume)
Deleting or truncating a partition pauses its cleaning first (`abort_and_pause_cleaning` waits until
no cleaner touches it), so a cleaner never swaps stale segments into a log that moved on.

The `cleaner-offset-checkpoint` file of each log dir holds, per partition, the first offset not
yet cleaned: the start of the dirty section for the next round.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kafkalite.cleaner.cleaner import LogCleaningAbortedError, LogToClean
from kafkalite.storage.checkpoint import CLEANER_OFFSET_CHECKPOINT_FILE, CheckpointError, OffsetCheckpointFile
from kafkalite.storage.log import Log

log = logging.getLogger("kafkalite.cleaner")

TopicPartition = tuple[str, int]
IN_PROGRESS = "in_progress"
ABORTED = "aborted"
LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class OffsetsToClean:
    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


@dataclass(slots=True)
class PreCleanStats:
    max_compaction_delay_ms: int = 0
    delayed_partitions: int = 0
    cleanable_partitions: int = 0

    def update_max_compaction_delay(self, delay_ms: int) -> None:
        self.max_compaction_delay_ms = max(self.max_compaction_delay_ms, delay_ms)
        if delay_ms > 0:
            self.delayed_partitions += 1


def cleanable_offsets(the_log: Log, last_clean_offset: int | None, now: int) -> OffsetsToClean:
    """[first dirty, first uncleanable): never past the LSO (so the HW), the active segment, or a
    segment younger than min.compaction.lag.ms. A checkpoint outside [log start, LEO] is reset."""
    log_start = the_log.log_start_offset
    checkpoint = log_start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < log_start:
        if not (the_log.config.compact and the_log.config.delete):
            log.warning("Resetting first dirty offset of %s to log start offset %d since the checkpointed offset "
                        "%d is invalid.", the_log.dir.name, log_start, checkpoint)
        first_dirty, force = log_start, True
    elif checkpoint > the_log.log_end_offset:
        log.warning("The last checkpoint dirty offset for partition %s is %d, which is larger than the log end "
                    "offset %d. Resetting to the log start offset %d.", the_log.dir.name, checkpoint,
                    the_log.log_end_offset, log_start)
        first_dirty, force = log_start, True
    else:
        first_dirty = checkpoint
    bounds = [the_log.last_stable_offset, the_log.active_segment.base_offset]
    min_lag = max(the_log.config.min_compaction_lag_ms, 0)
    if min_lag > 0:
        for seg in the_log.non_active_log_segments_from(first_dirty):
            if seg.largest_timestamp > now - min_lag:
                bounds.append(seg.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(bounds)), force)


def max_compaction_delay(the_log: Log, first_dirty_offset: int, now: int) -> int:
    """How long past max.compaction.lag.ms the oldest dirty data is (0: not overdue)."""
    max_lag = max(the_log.config.max_compaction_lag_ms, 0)
    if max_lag >= now:  # the default (Long.MAX): nothing can be overdue; skip reading segment heads
        return 0
    stamps = [t for s in the_log.non_active_log_segments_from(first_dirty_offset)
              if (t := s.first_batch_timestamp()) > 0]
    clean_until = now - max_lag
    earliest = min(stamps, default=LONG_MAX)
    return clean_until - earliest if earliest < clean_until else 0


class LogCleanerManager:
    def __init__(self, log_dirs: list[Path], logs: Mapping[TopicPartition, Log]) -> None:
        self.logs = logs
        self.checkpoints = {Path(d): OffsetCheckpointFile(Path(d) / CLEANER_OFFSET_CHECKPOINT_FILE) for d in log_dirs}
        self._state: dict[TopicPartition, str | int] = {}
        self._uncleanable: dict[Path, set[TopicPartition]] = {}
        self._cond = threading.Condition()
        self.dirtiest_log_cleanable_ratio = 0.0

    # --- checkpoints -------------------------------------------------------------------------------

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        with self._cond:
            out: dict[TopicPartition, int] = {}
            for checkpoint in self.checkpoints.values():
                try:
                    out.update(checkpoint.read_or_empty())
                except (OSError, CheckpointError) as exc:
                    log.error("Failed to access checkpoint file %s: %s", checkpoint.path, exc)
            return out

    def update_checkpoints(self, data_dir: Path, update: tuple[TopicPartition, int] | None = None,
                           remove: TopicPartition | None = None) -> None:
        """Rewrite a dir's checkpoint: drop partitions no longer hosted, then remove/update one entry."""
        with self._cond:
            checkpoint = self.checkpoints.get(Path(data_dir))
            if checkpoint is None:
                return
            try:
                current = {tp: o for tp, o in checkpoint.read_or_empty().items() if tp in self.logs}
                if remove is not None:
                    current.pop(remove, None)
                if update is not None:
                    current[update[0]] = update[1]
                checkpoint.write(current)
            except (OSError, CheckpointError) as exc:
                log.error("Failed to access checkpoint file %s: %s", checkpoint.path, exc)

    def maybe_truncate_checkpoint(self, data_dir: Path, tp: TopicPartition, offset: int) -> None:
        with self._cond:
            the_log = self.logs.get(tp)
            checkpoint = self.checkpoints.get(Path(data_dir))
            if the_log is None or not the_log.config.compact or checkpoint is None:
                return
            existing = checkpoint.read_or_empty()
            if existing.get(tp, 0) > offset:
                existing[tp] = offset
                checkpoint.write(existing)

    def handle_log_dir_failure(self, data_dir: Path) -> None:
        log.warning("Stopping cleaning logs in dir %s", data_dir)
        with self._cond:
            self.checkpoints.pop(Path(data_dir), None)

    # --- choosing ------------------------------------------------------------------------------------

    def grab_filthiest_compacted_log(self, now: int, pre_clean_stats: PreCleanStats | None = None,
                                     only: TopicPartition | None = None, force: bool = False) -> LogToClean | None:
        """The compacted log with the highest dirty ratio above its min.cleanable.dirty.ratio (or overdue
        by max.compaction.lag.ms), marked in progress. `only`/`force` serve `clean_now`: that one
        partition, eligible whenever it has cleanable bytes."""
        stats = pre_clean_stats or PreCleanStats()
        with self._cond:
            last_clean = self.all_cleaner_checkpoints()
            candidates = []
            for tp, the_log in list(self.logs.items()):
                if only is not None and tp != only:
                    continue
                if not the_log.config.compact or tp in self._state or self._is_uncleanable(the_log, tp):
                    continue
                offsets = cleanable_offsets(the_log, last_clean.get(tp), now)
                if offsets.force_update_checkpoint:
                    self.update_checkpoints(the_log.dir.parent, update=(tp, offsets.first_dirty_offset))
                delay = max_compaction_delay(the_log, offsets.first_dirty_offset, now)
                stats.update_max_compaction_delay(delay)
                ltc = LogToClean(tp, the_log, offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset,
                                 delay > 0)
                if ltc.total_bytes > 0:
                    candidates.append(ltc)
            self.dirtiest_log_cleanable_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
            cleanable = [c for c in candidates
                         if (c.need_compaction_now and c.cleanable_bytes > 0)
                         or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
                         or (force and c.cleanable_bytes > 0)]
            if not cleanable:
                return None
            stats.cleanable_partitions = len(cleanable)
            filthiest = max(cleanable, key=lambda c: c.cleanable_ratio)
            self._state[filthiest.topic_partition] = IN_PROGRESS
            return filthiest

    def deletable_logs(self) -> list[tuple[TopicPartition, Log]]:
        """Compacted logs not being cleaned, marked in progress while the cleaner applies retention."""
        with self._cond:
            chosen = [(tp, lg) for tp, lg in list(self.logs.items())
                      if tp not in self._state and lg.config.compact and not self._is_uncleanable(lg, tp)]
            for tp, _ in chosen:
                self._state[tp] = IN_PROGRESS
            return chosen

    def done_deleting(self, tps: list[TopicPartition]) -> None:
        with self._cond:
            for tp in tps:
                self._finish(tp)

    def done_cleaning(self, tp: TopicPartition, data_dir: Path, end_offset: int) -> None:
        """Record the new first dirty offset, unless the cleaning was aborted (then it is paused)."""
        with self._cond:
            if self._state.get(tp) == IN_PROGRESS:
                self.update_checkpoints(data_dir, update=(tp, end_offset))
            self._finish(tp)

    def _finish(self, tp: TopicPartition) -> None:
        state = self._state.get(tp)
        if state == IN_PROGRESS:
            del self._state[tp]
        elif state == ABORTED:
            self._state[tp] = 1
        else:
            raise RuntimeError(f"cleaning state of {tp} should be in progress or aborted, was {state}")
        self._cond.notify_all()

    # --- pausing ---------------------------------------------------------------------------------------

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        """Stop any cleaning of the partition and keep it from starting, until `resume_cleaning`."""
        with self._cond:
            state = self._state.get(tp)
            if state is None:
                self._state[tp] = 1
            elif state == IN_PROGRESS:
                self._state[tp] = ABORTED
            elif isinstance(state, int):
                self._state[tp] = state + 1
            else:
                raise RuntimeError(f"cleaning of {tp} cannot be aborted and paused in state {state}")
            self._cond.wait_for(lambda: isinstance(self._state.get(tp), int))

    def resume_cleaning(self, tps: list[TopicPartition]) -> None:
        with self._cond:
            for tp in tps:
                state = self._state.get(tp)
                if not isinstance(state, int):
                    raise RuntimeError(f"cleaning of {tp} cannot be resumed since it is in state {state}")
                if state == 1:
                    del self._state[tp]
                else:
                    self._state[tp] = state - 1
            self._cond.notify_all()

    def abort_cleaning(self, tp: TopicPartition) -> None:
        with self._cond:
            self.abort_and_pause_cleaning(tp)
            self.resume_cleaning([tp])

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        with self._cond:
            if self._state.get(tp) == ABORTED:
                raise LogCleaningAbortedError(f"cleaning of {tp[0]}-{tp[1]} was aborted")

    def is_cleaning_paused(self, tp: TopicPartition) -> bool:
        with self._cond:
            return isinstance(self._state.get(tp), int)

    def wait_until_idle(self, tp: TopicPartition, timeout_s: float | None = None) -> bool:
        """Wait until no cleaner works on the partition (for `clean_now`); False if paused or timed out."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._state.get(tp) not in (IN_PROGRESS, ABORTED), timeout_s)
            return done and tp not in self._state

    # --- uncleanable partitions ------------------------------------------------------------------------

    def mark_partition_uncleanable(self, data_dir: Path, tp: TopicPartition) -> None:
        with self._cond:
            self._uncleanable.setdefault(Path(data_dir), set()).add(tp)

    def uncleanable_partitions(self, data_dir: Path) -> set[TopicPartition]:
        with self._cond:
            return set(self._uncleanable.get(Path(data_dir), ()))

    def _is_uncleanable(self, the_log: Log, tp: TopicPartition) -> bool:
        return tp in self._uncleanable.get(the_log.dir.parent, ())

    def maintain_uncleanable_partitions(self) -> None:
        with self._cond:
            for d in list(self._uncleanable):
                self._uncleanable[d] = {tp for tp in self._uncleanable[d] if tp in self.logs}
                if not self._uncleanable[d]:
                    del self._uncleanable[d]
