"""The embedded sink: tasks stage encoded batches, the driver appends them through the storage API.

A data dir has one writer at a time (its `.lock`), and Spark runs several write tasks at once, so
tasks do not append: each writes its encoded batches to a staging file at the root of the first
data dir (a plain file, which Kafka and kafkalite both ignore there: only directories are
partitions), fsyncs it, and returns where its batches are. The commit, on the driver, opens the
dirs with `LogManager` (waiting for the lock up to `lockTimeoutMs`), appends every staged batch
with `Partition.append_records_to_leader` (the broker's leader epoch and commit rule), shuts the manager
down (flush, checkpoints, clean-shutdown marker) and deletes the staging files. A failed job's `abort`
deletes its staging files; nothing reached the logs.

Streaming writes are exactly-once per batch id. A small state file per sink (`sinkId`, by default
derived from the query's checkpoint location), `.kafkalite-spark-sink-<id>.json` in the first data
dir, records the last committed batch id, and, before any append, the batch about to be appended
(its staging files and the log end offset of each partition it writes). If the commit dies half
way, the next commit of that sink first finishes the interrupted one from the same staging files:
per partition it matches the batches already in the log by their CRC32C (which does not cover the
offsets the log assigned) and appends only the rest. A batch id at or below the committed one is
acknowledged without writing, so Spark's replays after a failure never duplicate.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from kafkalite.errors import DirectoryLockedError
from kafkalite.manager.log_manager import LogManager
from kafkalite.replication.partition import Partition
from kafkalite.spark.backend import StagedBatches, StagedFile, TopicPartition
from kafkalite.spark.errors import SinkError
from kafkalite.storage import names
from kafkalite.storage.checkpoint import atomic_write
from kafkalite.storage.log import FetchIsolation, Log

log = logging.getLogger("kafkalite.spark")

STAGING_PREFIX = ".kafkalite-staging-"
STATE_PREFIX = ".kafkalite-spark-sink-"
ORPHAN_AGE_S = 24 * 3600
_CRC_AT = slice(17, 21)


def sink_id_for(checkpoint_location: str) -> str:
    """A stable id for a streaming query's sink: its checkpoint location and the query id Spark keeps
    there (`metadata`), so a new query at the same location, whose batch ids restart at 0, is not
    mistaken for a replay of the old one."""
    location = checkpoint_location
    for scheme in ("file://", "file:"):
        if location.startswith(scheme):
            location = location[len(scheme):]
            break
    query_id = ""
    if "://" not in location:
        location = os.path.abspath(location)
        try:
            query_id = json.loads((Path(location) / "metadata").read_text()).get("id", "")
        except (OSError, ValueError, AttributeError):
            query_id = ""
    return hashlib.sha1(f"{location}|{query_id}".encode()).hexdigest()[:16]


class FileStage:
    """One task's staging file, written batch by batch, fsynced at the end (the commit may come after
    a crash and must find it whole); no file at all when the task had no rows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._pos = 0
        self._locations: dict[TopicPartition, list[tuple[int, int]]] = {}
        self._records: dict[TopicPartition, int] = {}

    def add(self, tp: TopicPartition, batch: bytes, records: int) -> None:
        if self._fd < 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        view = memoryview(batch)
        while view:
            view = view[os.write(self._fd, view):]
        self._locations.setdefault(tp, []).append((self._pos, len(batch)))
        self._records[tp] = self._records.get(tp, 0) + records
        self._pos += len(batch)

    def finish(self, partition_counts: Mapping[str, int]) -> StagedFile:
        counts = tuple(sorted(partition_counts.items()))
        if self._fd < 0:
            return StagedFile("", (), counts)
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1
        staged = tuple(StagedBatches(t, p, tuple(self._locations[(t, p)]), self._records[(t, p)])
                       for t, p in sorted(self._locations))
        return StagedFile(str(self.path), staged, counts)

    def discard(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.path.unlink(missing_ok=True)


class EmbeddedSink:
    """SinkBackend over data dirs; `topic_configs` and the lock timeout come from the write options."""

    def __init__(self, paths: Sequence[str], topic_configs: Mapping[str, str] | None = None,
                 lock_timeout_ms: int = 60_000) -> None:
        self.paths = [Path(p) for p in paths]
        self.root = self.paths[0]
        self.topic_configs = dict(topic_configs or {})
        self.lock_timeout_ms = lock_timeout_ms

    # --- task side -----------------------------------------------------------------------------------

    def partition_count(self, topic: str) -> int | None:
        found = -1
        for root in self.paths:
            if not root.is_dir():
                continue
            for entry in os.scandir(root):
                if entry.is_dir() and entry.name.startswith(topic + "-"):
                    try:
                        t, p = names.parse_topic_partition_name(entry.name)
                    except ValueError:
                        continue
                    if t == topic:
                        found = max(found, p)
        return None if found < 0 else found + 1

    def create_topic(self, topic: str, partitions: int) -> int:
        """Nothing yet: the commit creates the topic with all its partitions, from the staged counts."""
        return partitions

    def open_stage(self, job_id: str) -> FileStage:
        return FileStage(self.root / f"{STAGING_PREFIX}{job_id}-{uuid.uuid4().hex}")

    def close(self) -> None:
        """Nothing held open between calls (the commit opens and shuts its LogManager)."""

    # --- driver side -----------------------------------------------------------------------------------

    def commit(self, job_id: str, staged: Sequence[StagedFile], *, sink_id: str | None = None,
               batch_id: int | None = None) -> int:
        manager = self._open_manager()
        appended = 0
        try:
            if sink_id is None:
                appended = self._append_all(manager, staged)
            else:
                appended = self._commit_once(manager, staged, sink_id, batch_id if batch_id is not None else 0)
        finally:
            manager.shutdown()
        self._delete(staged)
        self._delete_orphans()
        return appended

    def abort(self, job_id: str, staged: Sequence[StagedFile | None], *, sink_id: str | None = None) -> None:
        """Delete the job's staging files, except those an interrupted commit still needs: Spark aborts
        after a failed commit too, and that commit's files are what the next one finishes it from."""
        keep: set[str] = set()
        if sink_id is not None:
            pending = _read_state(self.root / f"{STATE_PREFIX}{sink_id}.json").get("pending")
            if pending is not None:
                keep = {f["file"] for f in pending["files"]}
        self._delete([s for s in staged if s is not None and s.file not in keep])
        prefix = f"{STAGING_PREFIX}{job_id}-"
        for entry in os.scandir(self.root):
            if entry.name.startswith(prefix) and entry.path not in keep:
                Path(entry.path).unlink(missing_ok=True)

    def _commit_once(self, manager: LogManager, staged: Sequence[StagedFile], sink_id: str, batch_id: int) -> int:
        state_path = self.root / f"{STATE_PREFIX}{sink_id}.json"
        state = _read_state(state_path)
        pending = state.get("pending")
        if pending is not None:
            log.warning("sink %s: finishing batch %d, interrupted during its commit", sink_id, pending["batch"])
            files = [_staged_from_json(f) for f in pending["files"]]
            self._roll_forward(manager, files, {(t, int(p)): o for t, ps in pending["starts"].items()
                                                for p, o in ps.items()})
            state = {"sink": sink_id, "committed": pending["batch"], "pending": None}
            _write_state(state_path, state)
            self._delete(files)
        committed = state.get("committed", -1)
        if batch_id <= committed:
            log.info("sink %s: batch %d was already committed (last %d); not writing it again",
                     sink_id, batch_id, committed)
            self._delete_committed_attempts(sink_id, committed)
            return 0
        starts: dict[str, dict[str, int]] = {}
        for tp in sorted({(b.topic, b.partition) for f in staged for b in f.batches}):
            lg = self._log(manager, tp)
            starts.setdefault(tp[0], {})[str(tp[1])] = lg.log_end_offset
        _write_state(state_path, {"sink": sink_id, "committed": committed,
                                  "pending": {"batch": batch_id, "files": [asdict(f) for f in staged],
                                              "starts": starts}})
        appended = self._append_all(manager, staged)
        _write_state(state_path, {"sink": sink_id, "committed": batch_id, "pending": None})
        self._delete_committed_attempts(sink_id, batch_id)
        return appended

    def _delete_committed_attempts(self, sink_id: str, committed: int) -> None:
        """Staging files of other attempts of batches now committed (retried tasks, earlier crashes)."""
        prefix = f"{STAGING_PREFIX}{sink_id}-b"
        for entry in os.scandir(self.root):
            if entry.name.startswith(prefix):
                number = entry.name[len(prefix):].split("-", 1)[0]
                if number.isdigit() and int(number) <= committed:
                    Path(entry.path).unlink(missing_ok=True)

    def _roll_forward(self, manager: LogManager, files: Sequence[StagedFile], starts: Mapping[TopicPartition, int]
                      ) -> None:
        """Append what an interrupted commit did not: per partition, skip the staged batches found in
        the log from the recorded start (same CRC, in order) and append the others."""
        for tp, start in sorted(starts.items()):
            wanted = [(f.file, loc) for f in files for b in f.batches if (b.topic, b.partition) == tp
                      for loc in b.locations]
            lg = self._log(manager, tp)
            landed = 0
            if start < lg.log_end_offset:
                crcs = [self._read_staged(file, loc)[_CRC_AT] for file, loc in wanted]
                for batch in lg.batches(start, FetchIsolation.LOG_END):
                    if landed < len(crcs) and bytes(batch.buffer[_CRC_AT]) == crcs[landed]:
                        landed += 1
                    else:
                        break
            part = Partition.led_alone(lg)  # the broker's own leadership and commit rule: nothing else writes
            for file, loc in wanted[landed:]:
                part.append_records_to_leader(bytearray(self._read_staged(file, loc)))

    def _append_all(self, manager: LogManager, staged: Sequence[StagedFile]) -> int:
        self._create_topics(manager, staged)
        appended = 0
        for f in staged:
            if not f.batches:
                continue
            fd = os.open(f.file, os.O_RDONLY)
            try:
                for b in f.batches:
                    part = Partition.led_alone(self._log(manager, (b.topic, b.partition)))
                    for pos, size in b.locations:
                        part.append_records_to_leader(bytearray(os.pread(fd, size, pos)))
                    appended += b.records
            finally:
                os.close(fd)
        return appended

    def _create_topics(self, manager: LogManager, staged: Sequence[StagedFile]) -> None:
        """A topic the write creates gets all its partitions, as Kafka creates topics (numPartitions)."""
        wanted: dict[str, int] = {}
        for f in staged:
            for topic, count in f.partition_counts:
                wanted[topic] = max(wanted.get(topic, 0), count)
        existing = {t for t, _p in manager.logs}
        for topic, count in sorted(wanted.items()):
            if topic not in existing:
                for partition in range(count):
                    self._log(manager, (topic, partition))

    def _log(self, manager: LogManager, tp: TopicPartition) -> Log:
        return manager.get_or_create_log(tp[0], tp[1], self.topic_configs or None)

    @staticmethod
    def _read_staged(file: str, location: tuple[int, int]) -> bytes:
        try:
            fd = os.open(file, os.O_RDONLY)
        except FileNotFoundError:
            raise SinkError(f"the staged data of an interrupted commit is gone ({file}); its batch cannot be "
                            "completed (delete the sink's state file to give up on it)") from None
        try:
            return os.pread(fd, location[1], location[0])
        finally:
            os.close(fd)

    def _open_manager(self) -> LogManager:
        """LogManager over the dirs, waiting while another writer (a broker, another commit) holds them."""
        deadline = time.monotonic() + self.lock_timeout_ms / 1000
        delay = 0.02
        while True:
            try:
                return LogManager(self.paths)
            except DirectoryLockedError as exc:
                if time.monotonic() >= deadline:
                    raise SinkError(f"{exc}. Waited {self.lock_timeout_ms} ms (option lockTimeoutMs); a running "
                                    "broker owns these dirs: write through it with kafka.bootstrap.servers") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @staticmethod
    def _delete(staged: Sequence[StagedFile]) -> None:
        for f in staged:
            if f.file:
                Path(f.file).unlink(missing_ok=True)

    def _delete_orphans(self) -> None:
        """Staging files of jobs whose driver died before commit or abort, after a day."""
        cutoff = time.time() - ORPHAN_AGE_S
        for entry in os.scandir(self.root):
            if entry.name.startswith(STAGING_PREFIX) and entry.stat().st_mtime < cutoff:
                Path(entry.path).unlink(missing_ok=True)


def _read_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, json.JSONDecodeError) as exc:
        raise SinkError(f"sink state file {path} is unreadable ({exc}); it records which batches were "
                        "committed, so it must not be guessed") from None


def _write_state(path: Path, state: dict) -> None:
    atomic_write(path, (json.dumps(state, sort_keys=True) + "\n").encode())


def _staged_from_json(data: dict) -> StagedFile:
    batches = tuple(StagedBatches(b["topic"], b["partition"], tuple(tuple(loc) for loc in b["locations"]),
                                  b["records"]) for b in data["batches"])
    return StagedFile(data["file"], batches, tuple(tuple(c) for c in data.get("partition_counts", ())))
