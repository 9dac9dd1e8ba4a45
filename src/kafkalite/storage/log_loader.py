"""Opening a partition directory (Kafka trunk's LogLoader): leftovers, swaps, sanity checks, recovery.

The order matters and follows Kafka, because each step assumes the previous one:
1. delete `.deleted` and `.cleaned` leftovers (and swaps from an interrupted split);
2. finish interrupted swaps (cleaner or split) by deleting what they replace and renaming them;
3. open every segment, deleting orphan indexes; a segment with a missing or corrupt index is
   rebuilt on the spot;
4. after an unclean shutdown, recover every segment from the one holding the recovery point:
   rebuild its indexes, cut it at the first invalid batch, and delete every later segment;
5. make sure a segment exists at the log start, and rebuild producer state to the log end.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkalite.clock import Clock
from kafkalite.errors import (
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
    KafkaliteError,
)
from kafkalite.records.batch import CONTROL_FLAG_MASK, HEADER, RecordBatch
from kafkalite.storage import names
from kafkalite.storage.leader_epoch import LeaderEpochCache
from kafkalite.storage.log_config import LogConfig
from kafkalite.storage.metadata import LogOffsetMetadata
from kafkalite.storage.producer_state import ProducerStateManager
from kafkalite.storage.segment import LogSegment
from kafkalite.storage.segment_map import SegmentMap

log = logging.getLogger("kafkalite.log")

_INDEX_SUFFIXES = (names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX)
PROGRESS_MIN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What loading a partition directory found: the log is built from this, so the loader never
    needs the log itself (and `storage.log` is the only module that knows both)."""

    segments: SegmentMap
    log_start_offset: int
    recovery_point: int
    next_offset_metadata: LogOffsetMetadata


def list_file_names(directory: Path) -> list[str]:
    """Names of the regular files in `directory`, sorted. scandir gives each file's type with the listing, where
    `Path.iterdir` + `is_file` costs a Path and a stat per file: loading lists every partition directory."""
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.is_file())


def _offset_of(path: Path) -> int | None:
    try:
        return names.offset_from_file_name(path.name)
    except ValueError:
        return None


class LogLoader:
    """Loads one partition directory into segments, using (and updating) the log's epoch cache and
    producer state, which the caller creates and keeps."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        new_segment: Callable[..., LogSegment],
        leader_epoch_cache: LeaderEpochCache,
        producer_state: ProducerStateManager,
        clock: Clock,
        log_start_offset_checkpoint: int,
        recovery_point_checkpoint: int,
        clean_shutdown: bool,
        closed_without_snapshot: bool = False,
        rebuild_epoch_cache: bool = False,
        progress: Callable[[int, int], None] | None = None,
        file_names: list[str] | None = None,
    ) -> None:
        self.dir = directory
        self.config = config
        self.new_segment = new_segment  # (base_offset, *, new_file=True) -> LogSegment, with the log's settings
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.clock = clock
        self.log_start_checkpoint = log_start_offset_checkpoint
        self.recovery_point_checkpoint = recovery_point_checkpoint
        self.clean_shutdown = clean_shutdown
        self.closed_without_snapshot = closed_without_snapshot  # see Log: no snapshot means replay, not "none"
        self.rebuild_epoch_cache = rebuild_epoch_cache
        self.progress = progress
        self.segments = SegmentMap()
        self.log_start_offset = log_start_offset_checkpoint
        # base offset -> the last offset a rebuilt offset index had seen in the segment (see `_lost_tail`)
        self._index_claims: dict[int, int] = {}
        # the directory's files as the caller listed them just before; None once a step here changed them
        self._file_names = file_names

    def _listing(self) -> list[str]:
        if self._file_names is None:
            self._file_names = list_file_names(self.dir)
        return self._file_names

    # --- entry point ----------------------------------------------------------------------------

    def load(self) -> LoadedLog:
        swap_files = self._remove_temp_files_and_collect_swaps()
        self._complete_swaps(swap_files)
        self._load_segment_files()
        if self.clean_shutdown:
            self._cut_at_lost_tail()
            next_offset = self._last_next_offset()
        else:
            next_offset = self._recover_log()
        segments = self.segments
        if self.rebuild_epoch_cache:
            self._rebuild_epoch_cache()
        if segments and next_offset < self.log_start_checkpoint:
            log.warning("%s: every segment ends below the checkpointed log start offset %d; deleting them",
                        self.dir.name, self.log_start_checkpoint)
            self._delete_segments(list(segments.keys()))
            self.leader_epoch_cache.clear()
            self.producer_state.truncate_fully_and_start_at(self.log_start_checkpoint)
        if not segments:
            start = self.log_start_checkpoint
            segments[start] = self.new_segment(start)
            next_offset = start
        active = segments.last_segment
        active.preallocate_indexes()  # at first use when not open yet (Kafka's LazyIndex)
        recovery_point = next_offset if self.clean_shutdown else min(self.recovery_point_checkpoint, next_offset)
        self.leader_epoch_cache.truncate_from_end(next_offset)
        log_start = max(self.log_start_checkpoint, segments.peekitem(0)[0])
        self.leader_epoch_cache.truncate_from_start(log_start)
        self.log_start_offset = log_start
        # No snapshot at the end (Kafka writes one): the state is in memory, and a roll or the next clean shutdown
        # writes it. After a clean shutdown one is there already; after a recovery (here or in a worker process)
        # the newest one left describes the log up to its offset, from which a later load replays (see
        # `_recover_segment`).
        snapshot_at_end = self.clean_shutdown and not self.closed_without_snapshot
        self._rebuild_producer_state(next_offset, reload_from_clean_shutdown=snapshot_at_end, snapshot=False)
        return LoadedLog(segments, log_start, recovery_point,
                         LogOffsetMetadata(next_offset, active.base_offset, active.size))

    def _rebuild_producer_state(self, last_offset: int, *, reload_from_clean_shutdown: bool,
                                snapshot: bool = True, keep_later_snapshots: bool = False) -> None:
        rebuild_producer_state(self.producer_state, self.segments, self.log_start_offset, self.clock, last_offset,
                               reload_from_clean_shutdown=reload_from_clean_shutdown, snapshot=snapshot,
                               relist_snapshots=False, keep_later_snapshots=keep_later_snapshots)

    def _rebuild_epoch_cache(self) -> None:
        cache = self.leader_epoch_cache
        try:
            for segment in self.segments.values():
                for h in segment.log.batch_headers(0):
                    latest = cache.latest_epoch
                    if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
                        cache.assign(h.partition_leader_epoch, h.base_offset)
        except KafkaliteError as exc:
            log.warning("%s: stopped rebuilding the leader epoch cache at a bad batch: %s", self.dir.name, exc)

    # --- step 1 and 2: leftovers and swaps -------------------------------------------------------

    def _remove_temp_files_and_collect_swaps(self) -> list[Path]:
        swaps: list[Path] = []
        cleaned: list[Path] = []
        deleted = False
        for name in self._listing():  # a Path only for what is acted on: most dirs hold nothing of this
            if name.endswith(names.DELETED_SUFFIX) and not name.endswith(".checkpoint.deleted"):
                log.info("%s: deleting stray file %s", self.dir.name, name)
                (self.dir / name).unlink(missing_ok=True)
                deleted = True
            elif name.endswith(names.CLEANED_SUFFIX):
                cleaned.append(self.dir / name)
            elif name.endswith(names.SWAP_SUFFIX):
                swaps.append(self.dir / name)
            elif name.endswith(".tmp"):
                log.info("%s: deleting leftover temporary file %s", self.dir.name, name)
                (self.dir / name).unlink(missing_ok=True)
                deleted = True
        if deleted or cleaned or swaps:
            self._file_names = None  # listed again by the next step: this one (or the swaps) changed the files
        min_cleaned = min((o for p in cleaned if (o := _offset_of(p)) is not None), default=None)
        kept = []
        for swap in swaps:
            offset = _offset_of(swap)
            if min_cleaned is not None and offset is not None and offset >= min_cleaned:
                log.info("%s: deleting swap file %s of an interrupted split", self.dir.name, swap.name)
                swap.unlink(missing_ok=True)
            else:
                kept.append(swap)
        for path in cleaned:
            log.info("%s: deleting leftover cleaner file %s", self.dir.name, path.name)
            path.unlink(missing_ok=True)
        return kept

    def _complete_swaps(self, swaps: list[Path]) -> None:
        log_swaps = [p for p in swaps if p.name.endswith(names.LOG_SUFFIX + names.SWAP_SUFFIX)]
        if log_swaps:
            bases, next_offsets = [], []
            for path in log_swaps:
                base = names.offset_from_file_name(path.name)
                seg = LogSegment.open(self.dir, base, file_suffix=names.SWAP_SUFFIX,
                                      max_index_size=self.config.segment_index_bytes)
                bases.append(base)
                next_offsets.append(_next_offset_by_scan(seg))
                seg.close_handlers()
            lo, hi = min(bases), max(next_offsets)
            for path in list(self.dir.iterdir()):
                offset = _offset_of(path)
                if (offset is not None and lo <= offset < hi and not path.name.endswith(names.SWAP_SUFFIX)
                        and path.name.endswith((names.LOG_SUFFIX, *_INDEX_SUFFIXES))):
                    log.info("%s: deleting %s, replaced by an interrupted swap", self.dir.name, path.name)
                    path.unlink(missing_ok=True)
        for path in swaps:
            target = path.with_name(path.name[: -len(names.SWAP_SUFFIX)])
            log.info("%s: completing swap of %s", self.dir.name, target.name)
            os.replace(path, target)

    # --- step 3: segments --------------------------------------------------------------------------

    def _load_segment_files(self) -> None:
        files = set(self._listing())
        logs = {name for name in files if name.endswith(names.LOG_SUFFIX)}
        for name in files:
            if name.endswith(_INDEX_SUFFIXES):
                stem = name.split(".", 1)[0]
                if stem + names.LOG_SUFFIX not in logs:
                    log.warning("%s: deleting index file %s that has no log file", self.dir.name, name)
                    (self.dir / name).unlink(missing_ok=True)
                    self._file_names = None
        bases = sorted(names.offset_from_file_name(name) for name in logs)
        # After an unclean shutdown every segment from the one holding the recovery point on is recovered by
        # `_recover_log` (indexes rebuilt from the `.log`): a damaged index found there is reported as before,
        # but not recovered twice (Kafka does both, which doubles the work of a restart after kill -9).
        below = [b for b in bases if b <= self.recovery_point_checkpoint]
        recovered_from = None if self.clean_shutdown else (below[-1] if below else (bases[0] if bases else None))
        for base in bases:
            recovered_later = recovered_from is not None and base >= recovered_from
            prefix = names.filename_prefix_from_offset(base)
            segment = self.new_segment(base, new_file=False)
            try:
                # a segment recovered below gets its time index rebuilt there (LogSegment.sanity_check says why)
                claimed = segment.sanity_check(prefix + names.TIME_INDEX_SUFFIX in files,
                                               prefix + names.TXN_INDEX_SUFFIX in files,
                                               check_time_index=not recovered_later)
                if claimed is not None:
                    self._index_claims[base] = claimed
            except FileNotFoundError:
                if self.clean_shutdown or base < self.recovery_point_checkpoint:
                    log.error("%s: could not find offset index file of segment %d; rebuilding index files",
                              self.dir.name, base)
                if not recovered_later:
                    self._recover_segment(segment)
            except CorruptIndexError as exc:
                log.warning("%s: found a corrupted index file of segment %d (%s); rebuilding it",
                            self.dir.name, base, exc)
                if not recovered_later:
                    self._recover_segment(segment)
            self.segments[base] = segment

    def _recover_segment(self, segment: LogSegment, *, snapshot: bool = True) -> int:
        """Recover one segment with producer state as of its base, as Kafka's recoverSegment does.

        Unlike Kafka's, snapshots above the base are kept through the recovery (the load deletes those above
        the recovered end, see `ProducerStateManager.truncate_and_reload`), and `snapshot=False` (the last
        segment recovered) writes none at its end: the state is in memory and the next roll or clean shutdown
        writes it, while a second crash recovers this segment again from the snapshot at its base either way.
        Kafka writes one there, so each recovery after kill -9 deleted and created a file per partition.
        """
        self._rebuild_producer_state(segment.base_offset, reload_from_clean_shutdown=False, snapshot=False,
                                     keep_later_snapshots=True)
        try:
            truncated = segment.recover(self.producer_state, self.leader_epoch_cache)
        except (InvalidOffsetError, IndexOffsetOverflowError) as exc:  # not OSError: EMFILE or EIO is no reason
            log.warning("%s: could not recover segment %d (%s); emptying it", self.dir.name, segment.base_offset, exc)
            truncated = segment.log.size
            segment.truncate_to(segment.base_offset)
        if truncated:  # a snapshot above the cut describes records that are gone
            self.producer_state.delete_snapshots_after(self.producer_state.map_end_offset)
        elif snapshot:
            self.producer_state.take_snapshot()
        return truncated

    def _lost_tail(self, segment: LogSegment, next_base: int) -> bool:
        """Whether `segment`'s `.log` lost its tail: its offset index (found pointing past the `.log` and
        rebuilt) had seen an offset the `.log` no longer reaches, and nothing up to the next segment's base
        is left. A `.log` cut at a batch boundary has no invalid batch for recovery to find; keeping the
        later segments would leave a hole in the middle of the log, so it is cut there as at a bad batch.
        (A damaged index alone does not qualify: the `.log` still reaches the next segment's base.)"""
        claimed = self._index_claims.get(segment.base_offset)
        if claimed is None:
            return False
        next_offset = segment.read_next_offset()
        if next_offset > claimed or next_offset >= next_base:
            return False
        log.error("%s: %s ends at offset %d, but its offset index had seen offset %d and the next segment starts at "
                  "%d: the file lost its tail; cutting the log there", self.dir.name, segment.log.path.name,
                  next_offset, claimed, next_base)
        return True

    def _cut_at_lost_tail(self) -> None:
        """After a clean shutdown: drop every segment after one whose `.log` lost its tail (`_lost_tail`)."""
        if not self._index_claims:
            return
        keys = list(self.segments.keys())
        for i, base in enumerate(keys[:-1]):
            if self._lost_tail(self.segments[base], keys[i + 1]):
                self._delete_segments(keys[i + 1:])
                return

    def _delete_segments(self, bases: list[int]) -> None:
        """Drop these segments from the log and delete their files (what follows a cut)."""
        for base in bases:
            doomed = self.segments.pop(base)
            doomed.close_handlers()
            doomed.delete_if_exists()

    # --- step 4: recovery ----------------------------------------------------------------------------

    def _last_next_offset(self) -> int:
        segments = self.segments
        return segments.last_segment.read_next_offset() if segments else self.log_start_checkpoint

    def _recover_log(self) -> int:
        segments = self.segments
        if not segments:
            return self.log_start_checkpoint
        keys = list(segments.keys())
        start_index = max(0, segments.bisect_right(self.recovery_point_checkpoint) - 1)
        to_recover = keys[start_index:]
        total = sum(segments[k].size for k in to_recover)
        bar = _progress_bar(total, f"recovering {self.dir.name}") if total >= PROGRESS_MIN_BYTES else None
        done = 0
        try:
            for i, base in enumerate(to_recover):
                segment = segments[base]
                log.info("%s: recovering unflushed segment %d (%d bytes)", self.dir.name, base, segment.size)
                truncated = self._recover_segment(segment, snapshot=i + 1 < len(to_recover))
                # nothing cut, but a lost tail means what follows does not follow on: cut there all the same
                lost_tail = not truncated and i + 1 < len(to_recover) and self._lost_tail(segment, to_recover[i + 1])
                done += segment.size + truncated
                if bar is not None:
                    bar.update(segment.size + truncated)
                if self.progress is not None:
                    self.progress(done, total)
                if truncated > 0 or lost_tail:
                    later = to_recover[i + 1 :]
                    if later:
                        log.warning("%s: corruption found in segment %d; deleting %d later segment(s) %s",
                                    self.dir.name, base, len(later), later)
                    self._delete_segments(later)
                    break
        finally:
            if bar is not None:
                bar.close()
        return self._last_next_offset()


def _progress_bar(total: int, desc: str) -> Any:  # a tqdm bar (tqdm ships no types)
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, disable=None, leave=False)


def _next_offset_by_scan(segment: LogSegment) -> int:
    next_offset = segment.base_offset
    try:
        for h in segment.log.batch_headers(0):
            next_offset = h.last_offset + 1
    except KafkaliteError:
        pass
    return next_offset


def rebuild_producer_state(psm: ProducerStateManager, segments: SegmentMap, log_start_offset: int, clock: Clock,
                           last_offset: int, *, reload_from_clean_shutdown: bool, snapshot: bool = True,
                           relist_snapshots: bool = True, keep_later_snapshots: bool = False) -> None:
    """Bring producer state to `last_offset`: from the newest usable snapshot plus a replay of the log.

    After a clean shutdown with no snapshot at all (an old log), empty snapshots are written instead
    of replaying everything, as Kafka does. `relist_snapshots=False`: the loader's (see
    `ProducerStateManager.remove_stray_snapshots`); `keep_later_snapshots`: a segment's recovery's (see
    `ProducerStateManager.truncate_and_reload`).
    """
    bases = list(segments.keys())
    psm.note_log_start_offset(log_start_offset)
    psm.remove_stray_snapshots(bases, relist=relist_snapshots)
    if psm.latest_snapshot_offset is None and reload_from_clean_shutdown:
        for offset in sorted({*bases[-2:], last_offset}):
            psm.update_map_end_offset(offset)
            psm.take_snapshot()
        psm.update_map_end_offset(last_offset)
        return
    now = clock.milliseconds()
    psm.truncate_and_reload(log_start_offset, last_offset, now, keep_later_snapshots=keep_later_snapshots)
    start = psm.map_end_offset
    if start < last_offset:
        first = max(0, segments.bisect_right(start) - 1)
        for base in bases[first:]:
            if base >= last_offset:
                break
            segment = segments[base]
            position = segment.scan_position(start) if base <= start else 0
            for pos, size, view in segment.log.iter_views(position, with_body=False):
                header = HEADER.unpack_from(view)
                b_base, last = header[0], header[0] + header[6]
                if last < start:
                    continue
                if b_base >= last_offset:
                    break
                if header[9] >= 0 or header[5] & CONTROL_FLAG_MASK:
                    batch = segment.log.read_batch(pos, size) if header[5] & CONTROL_FLAG_MASK else \
                        RecordBatch(bytes(view[:61]), header_only=True)
                    completed = psm.update_from_recovered_batch(batch)
                    if completed is not None:
                        psm.complete_txn(completed)
                psm.update_map_end_offset(last + 1)
    psm.update_map_end_offset(last_offset)
    if snapshot:
        psm.take_snapshot()
