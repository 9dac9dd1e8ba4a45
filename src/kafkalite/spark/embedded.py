"""The embedded backend: Kafka data dirs read in place, with no broker.

`path` names one or more data dirs (Kafka's `log.dirs`); each holds `<topic>-<partition>`
directories. Reading never takes a dir's `.lock` and never changes a file, so it is safe next to
a live writer, and it only returns what that writer has made safe:

- while a writer holds the dir (a broker or a `LogManager`; seen in /proc/locks), a partition
  is read up to its high watermark from `replication-offset-checkpoint` if the writer keeps one
  (a broker), else up to its recovery point from `recovery-point-offset-checkpoint` (data known
  flushed). Both lag the log end by the writer's checkpoint interval;
- with no writer, up to the end of the last complete batch that passes its CRC, so a tail torn
  by a crash is left out exactly where recovery would cut it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kafkalite.errors import LogError
from kafkalite.spark import segments as seg
from kafkalite.spark.arrow_decode import RawChunk
from kafkalite.spark.backend import OffsetBounds, TopicPartition
from kafkalite.spark.errors import OptionError, UnknownTopicError
from kafkalite.storage import names
from kafkalite.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    OffsetCheckpointFile,
    has_clean_shutdown_marker,
)
from kafkalite.storage.log import Log

log = logging.getLogger("kafkalite.spark")

LOCK_FILE = ".lock"


def writer_is_live(data_dir: Path) -> bool:
    """Whether some process holds the dir's `.lock` (a broker or LogManager owns the dir).

    Asked of /proc/locks, which lists every flock with its file's device and inode, so the lock is
    observed without being taken: even a shared lock taken for a moment would make a broker that
    starts at that instant fail. Without /proc, a missing clean-shutdown marker counts as live.
    """
    lock = data_dir / LOCK_FILE
    try:
        st = os.stat(lock)
    except FileNotFoundError:
        return False
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return not has_clean_shutdown_marker(data_dir)
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(want in line.split() for line in table.splitlines())


@dataclass(slots=True)
class _DirState:
    """What one data dir says about its partitions' safe bounds, read once per planning call."""

    live: bool
    clean: bool  # no writer, and the last one shut down cleanly: every complete batch is meant to be there
    high_watermarks: dict[TopicPartition, int] | None
    recovery_points: dict[TopicPartition, int]
    log_starts: dict[TopicPartition, int]

    @classmethod
    def read(cls, data_dir: Path) -> _DirState:
        live = writer_is_live(data_dir)
        clean = not live and has_clean_shutdown_marker(data_dir)
        hw_file = data_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
        hws = OffsetCheckpointFile(hw_file).read_or_empty() if live and hw_file.exists() else None
        rps = OffsetCheckpointFile(data_dir / RECOVERY_POINT_CHECKPOINT_FILE).read_or_empty() if live else {}
        starts = OffsetCheckpointFile(data_dir / LOG_START_OFFSET_CHECKPOINT_FILE).read_or_empty()
        return cls(live, clean, hws, rps, starts)

    def writer_bound(self, tp: TopicPartition) -> int | None:
        """The offset a live writer has made safe, or None when no writer is live."""
        if not self.live:
            return None
        if self.high_watermarks is not None:
            return self.high_watermarks.get(tp, 0)
        return self.recovery_points.get(tp, 0)


@dataclass
class EmbeddedSource:
    """SourceBackend over data dirs on a filesystem every Spark executor can read."""

    paths: tuple[str, ...]
    _states: dict[Path, _DirState] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        missing = [p for p in self.paths if not Path(p).is_dir()]
        if missing:
            raise OptionError(f"option path: data dir(s) {', '.join(missing)} do not exist (or are not directories); "
                              "give Kafka data dirs (log.dirs) holding <topic>-<partition> directories")

    # --- discovery --------------------------------------------------------------------------------

    def _partition_dirs(self) -> dict[TopicPartition, Path]:
        found: dict[TopicPartition, Path] = {}
        for root in self.paths:
            for entry in os.scandir(root):
                if not entry.is_dir() or entry.name.endswith(
                        (names.DELETE_DIR_SUFFIX, names.FUTURE_DIR_SUFFIX, names.STRAY_DIR_SUFFIX)):
                    continue
                try:
                    tp = names.parse_topic_partition_name(entry.name)
                except ValueError:
                    continue
                if tp in found:
                    raise UnknownTopicError(f"partition {tp[0]}-{tp[1]} exists in two data dirs: {found[tp].parent} "
                                            f"and {root}; a partition must live in exactly one")
                found[tp] = Path(entry.path)
        return found

    def list_topics(self) -> dict[str, list[int]]:
        topics: dict[str, list[int]] = {}
        for topic, partition in self._partition_dirs():
            topics.setdefault(topic, []).append(partition)
        return {t: sorted(ps) for t, ps in sorted(topics.items())}

    def _dir_of(self, tp: TopicPartition, dirs: Mapping[TopicPartition, Path] | None = None) -> Path:
        dirs = self._partition_dirs() if dirs is None else dirs
        found = dirs.get(tp)
        if found is None:
            raise UnknownTopicError(f"partition {tp[0]}-{tp[1]} does not exist in {', '.join(self.paths)}")
        return found

    def _state(self, partition_dir: Path) -> _DirState:
        root = partition_dir.parent
        state = self._states.get(root)
        if state is None:
            state = self._states[root] = _DirState.read(root)
        return state

    # --- offsets ---------------------------------------------------------------------------------

    def offset_bounds(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetBounds]:
        self._states.clear()  # liveness and checkpoints are re-read on every planning call
        dirs = self._partition_dirs()
        return {tp: self._bounds(tp, self._dir_of(tp, dirs)) for tp in partitions}

    def earliest_offset(self, tp: TopicPartition) -> int:
        partition_dir = self._dir_of(tp)
        return self._earliest(tp, partition_dir, seg.list_segments(partition_dir))

    def _earliest(self, tp: TopicPartition, partition_dir: Path, segments: list[seg.Segment]) -> int:
        first = segments[0].base_offset if segments else 0
        return max(first, self._state(partition_dir).log_starts.get(tp, 0))

    def _bounds(self, tp: TopicPartition, partition_dir: Path) -> OffsetBounds:
        segments = seg.list_segments(partition_dir)
        earliest = self._earliest(tp, partition_dir, segments)
        if not segments:
            return OffsetBounds(earliest, earliest)
        state = self._state(partition_dir)
        end = self._log_end(segments, trust=state.clean)
        bound = state.writer_bound(tp)
        latest = end if bound is None else min(end, bound)
        return OffsetBounds(earliest, max(earliest, latest))

    @staticmethod
    def _log_end(segments: list[seg.Segment], trust: bool) -> int:
        """Offset after the last complete, valid batch; an empty last segment ends at its base offset
        (Kafka rolls to a new segment based at the log end)."""
        last = segments[-1]
        scan = seg.scan_tail(last, seg.index_position(last, 1 << 62), trust_crc_failures=trust)
        if scan.next_offset is None and scan.position > 0:
            scan = seg.scan_tail(last, 0, trust_crc_failures=trust)  # the indexed batch is unreadable
        return last.base_offset if scan.next_offset is None else scan.next_offset

    def offsets_for_timestamps(self, targets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """ListOffsets by time, answered by the storage layer's own lookup (`Log.fetch_offset_by_timestamp`, on
        a read-only Log), as the broker answers it, and bounded the way the broker bounds it: an offset at or
        past what is safely readable (`latest`) is no answer."""
        bounds = self.offset_bounds(targets)
        dirs = self._partition_dirs()
        out: dict[TopicPartition, int | None] = {}
        for tp, ts in targets.items():
            b = bounds[tp]
            out[tp] = None
            if b.latest <= b.earliest:
                continue
            try:
                lg = Log.open_read_only(self._dir_of(tp, dirs), log_start_offset=b.earliest)
            except (LogError, FileNotFoundError):
                continue  # its segments went (retention) since the bounds were read: nothing to find
            with lg:
                found = lg.fetch_offset_by_timestamp(ts)
            if found is not None and b.earliest <= found.offset < b.latest:
                out[tp] = found.offset
        return out

    # --- reading -----------------------------------------------------------------------------------

    def read(self, tp: TopicPartition, start: int, end: int) -> Iterator[tuple[RawChunk, int]]:
        yield from seg.read_range(seg.list_segments(self._dir_of(tp)), start, end)

    def close(self) -> None:
        """Nothing held open between calls."""
