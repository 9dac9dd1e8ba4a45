"""Many partition logs across several data directories (Kafka's LogManager).

A data directory is what `log.dirs` names: it holds one directory per partition plus the files
that make restarts cheap and safe: `meta.properties` (identity), a `.lock` held while open,
`recovery-point-offset-checkpoint` (what is known flushed, so only the rest is re-validated after a
crash), `log-start-offset-checkpoint`, and `.kafka_cleanshutdown`, written last on a clean stop so
the next start skips recovery entirely.

The manager loads every partition of every dir in parallel (`num.recovery.threads.per.data.dir`
per dir; after an unclean shutdown at least IO_THREADS_PER_DIR, plus worker processes), and runs
Kafka's background tasks by their Kafka names: kafka-log-retention, kafka-log-flusher,
kafka-recovery-point-checkpoint, kafka-log-start-offset-checkpoint, kafka-delete-logs.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from kafkalite.cleaner.config import CleanerConfig
from kafkalite.cleaner.log_cleaner import LogCleaner
from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.config import registry
from kafkalite.config.registry import ALIASES
from kafkalite.errors import DESCRIPTOR_ERRNOS, KafkaStorageError, LogError
from kafkalite.manager import recovery_workers
from kafkalite.scheduler import Scheduler, ThreadScheduler
from kafkalite.storage import names
from kafkalite.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    OffsetCheckpointFile,
    has_clean_shutdown_marker,
    kraft_meta_properties,
    read_meta_properties,
    remove_clean_shutdown_marker,
    sync_file_system,
    write_clean_shutdown_marker,
    write_meta_properties,
)
from kafkalite.storage.dir_lock import DirLock
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig

log = logging.getLogger("kafkalite.manager")

LONG_MAX = (1 << 63) - 1
TopicPartition = tuple[str, int]
# EMFILE/ENFILE say the process (or system) ran out of descriptors, not that a disk failed: taking a dir
# offline for them would turn a too-low `ulimit -n` into lost partitions.
# What one new partition keeps open: its active segment's .log, .index and .timeindex (an upper bound:
# index files that are only mapped hold none).
# At least this many threads per data dir recover logs after an unclean shutdown and close them at shutdown,
# whatever num.recovery.threads.per.data.dir says (it can only raise it): both are mostly waits on the disk (reading
# directories, checkpoints and segment tails; fsyncs and snapshot writes) that release the GIL, so more threads
# than cores overlap them. With 10,000 partitions one thread took 68 s to recover after kill -9 and 8 took 22 s;
# one closing thread took 10-30 s of a broker's stop. Kafka runs exactly num.recovery.threads.per.data.dir.
IO_THREADS_PER_DIR = 8
FDS_PER_PARTITION = 1  # the .log; mapped indexes hold none (index_base.FileMapping), the txn index rarely
REOPEN_HEADROOM = 64  # free descriptors needed before a set-aside log is reopened (and recovered)


def is_descriptor_exhaustion(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DESCRIPTOR_ERRNOS


def descriptor_advice(exc: BaseException) -> str:
    return (f"the broker ran out of file descriptors ({exc}); every partition keeps about {FDS_PER_PARTITION} "
            "open file(s): raise the open file limit (ulimit -n, or LimitNOFILE= for systemd) and restart")


def open_descriptors() -> tuple[int, int]:
    """(descriptors open now, soft RLIMIT_NOFILE): what partition creation checks before it starts."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:  # no procfs: count by probing is too slow; assume nothing open beyond stdio
        used = 3
    return used, (LONG_MAX if soft == resource.RLIM_INFINITY else soft)


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    """Broker-level settings of the manager; names, defaults and rules come from the config registry."""

    num_recovery_threads_per_data_dir: int = registry.default("num.recovery.threads.per.data.dir")
    retention_check_interval_ms: int = registry.default("log.retention.check.interval.ms")
    flush_check_interval_ms: int = registry.default("log.flush.scheduler.interval.ms")
    flush_recovery_offset_checkpoint_interval_ms: int = registry.default("log.flush.offset.checkpoint.interval.ms")
    flush_start_offset_checkpoint_interval_ms: int = registry.default("log.flush.start.offset.checkpoint.interval.ms")
    initial_task_delay_ms: int = registry.default("log.initial.task.delay.ms")
    file_delete_delay_ms: int = registry.default("log.segment.delete.delay.ms")
    node_id: int = registry.default("node.id")
    cluster_id: str = registry.default("cluster.id")
    broker_epoch: int = 0

    _KEYS: ClassVar[dict[str, str]] = {
        "num.recovery.threads.per.data.dir": "num_recovery_threads_per_data_dir",
        "log.retention.check.interval.ms": "retention_check_interval_ms",
        "log.flush.scheduler.interval.ms": "flush_check_interval_ms",
        "log.flush.offset.checkpoint.interval.ms": "flush_recovery_offset_checkpoint_interval_ms",
        "log.flush.start.offset.checkpoint.interval.ms": "flush_start_offset_checkpoint_interval_ms",
        "log.initial.task.delay.ms": "initial_task_delay_ms",
        "log.segment.delete.delay.ms": "file_delete_delay_ms",
        "node.id": "node_id",
        "broker.id": "node_id",
        "cluster.id": "cluster_id",
    }

    @classmethod
    def from_broker_props(cls, props: Mapping[str, object]) -> ManagerConfig:
        """The manager's keys out of broker properties, parsed and checked by the registry."""
        values = {field: registry.parse(ALIASES.get(k, k), props[k]) for k, field in cls._KEYS.items() if k in props}
        return cls(**values)


def raise_open_file_limit() -> int:
    """Every segment keeps its `.log` open (as in Kafka), so thousands of partitions need thousands of
    descriptors: lift the soft limit to the hard one, as Kafka's operations guide asks of operators."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("Raised the open file limit from %d to %d", soft, target)
            return target
        except (ValueError, OSError) as exc:
            log.warning("Could not raise the open file limit from %d (%s); many partitions may fail to open",
                        soft, exc)
    return soft


class _DataDir:
    """One entry of log.dirs, held open under an exclusive lock."""

    def __init__(self, path: Path, cfg: ManagerConfig) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        # exclusive, with this process named inside; the Logs of this dir are handed it as proof
        self.lock = DirLock.acquire(path, exclusive=True, what="log dir")
        props = read_meta_properties(path)
        if props is None:
            props = kraft_meta_properties(cfg.node_id, cfg.cluster_id, uuid.uuid4())
            write_meta_properties(path, props)
        elif props.get("node.id", props.get("broker.id")) not in (None, str(cfg.node_id)):
            self.release()
            raise LogError(f"{path} belongs to node {props.get('node.id', props.get('broker.id'))}, "
                           f"not node {cfg.node_id} (meta.properties)")
        self.meta = props
        self.had_clean_shutdown = has_clean_shutdown_marker(path)
        self.offline = False
        self.rp: dict[TopicPartition, int] = {}  # checkpointed recovery points, read at load
        self.ls: dict[TopicPartition, int] = {}  # checkpointed log start offsets, read at load
        self.recovery_points = OffsetCheckpointFile(path / RECOVERY_POINT_CHECKPOINT_FILE)
        self.log_starts = OffsetCheckpointFile(path / LOG_START_OFFSET_CHECKPOINT_FILE)

    def release(self) -> None:
        self.lock.release()


@dataclass(frozen=True, slots=True)
class _LoadPlan:
    """Who loads what at start-up: `unclean` partitions need recovery, `in_workers` of them go to `processes`
    worker processes; `threads` load the rest."""

    unclean: list[tuple[_DataDir, Path]]
    in_workers: list[tuple[_DataDir, Path]]
    processes: int
    threads: int


class LogManager:
    def __init__(
        self,
        log_dirs: Iterable[Path | str] | Path | str,
        default_config: LogConfig | None = None,
        config: ManagerConfig | None = None,
        *,
        topic_configs: Mapping[str, Mapping[str, object]] | None = None,
        scheduler: Scheduler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        progress: Callable[[int, int], None] | None = None,
        cleaner_config: CleanerConfig | None = None,
        recovery_processes: int | None = None,
    ) -> None:
        """`recovery_processes`: worker processes recovering partitions after an unclean shutdown
        (`manager.recovery_workers`); None starts one per core when at least MIN_PARTITIONS_FOR_PROCESSES
        partitions need recovery, 0 never starts any, N > 0 always starts N."""
        dirs = [log_dirs] if isinstance(log_dirs, (str, Path)) else list(log_dirs)
        if not dirs:
            raise LogError("log.dirs is empty: give at least one data directory")
        self.config = config or ManagerConfig()
        self.default_config = default_config or LogConfig()
        self.topic_configs: dict[str, dict[str, object]] = {k: dict(v) for k, v in (topic_configs or {}).items()}
        self.clock = clock
        self.scheduler = scheduler or ThreadScheduler(clock=clock)
        self._owns_scheduler = scheduler is None
        self._lock = threading.RLock()
        self.logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, _DataDir] = {}
        self.logs_to_delete: list[tuple[Path, int]] = []  # (dir renamed -delete, when it may be removed)
        # logs closed after running out of descriptors mid-operation, reopened from disk at their next use:
        # (data dir, log start offset, recovery point, high watermark) as they were
        self._set_aside: dict[TopicPartition, tuple[_DataDir, int, int, int]] = {}
        self._pending: dict[TopicPartition, threading.Event] = {}  # partitions being created, outside the lock
        self.dirs: list[_DataDir] = []
        self.cleaner: LogCleaner | None = None
        self.recovery_processes = recovery_processes
        raise_open_file_limit()
        try:
            for dir_name in dirs:
                self.dirs.append(_DataDir(Path(dir_name).resolve(), self.config))
            # No cyclic collections while loading: what is loaded lives as long as the manager, and each full
            # collection walks all of it again (11 % of loading 3,000 partitions, growing with their number).
            # Garbage made meanwhile is collected at the first collection after.
            collecting = gc.isenabled()
            gc.disable()
            try:
                self._load_all(progress)
            finally:
                if collecting:
                    gc.enable()
        except BaseException:
            for d in self.dirs:
                d.release()
            raise
        self._started = False
        cleaner_config = cleaner_config or CleanerConfig()
        # the cleaner sees the live `logs` dict: partitions created or deleted later are picked up
        self.cleaner = LogCleaner(
            cleaner_config, [d.path for d in self.dirs], self.logs, clock=clock,
            on_io_error=self._cleaner_io_error) if cleaner_config.enable else None

    # --- loading ------------------------------------------------------------------------------------

    def _config_for(self, topic: str) -> LogConfig:
        overrides = self.topic_configs.get(topic)
        return LogConfig.from_props(overrides, self.default_config) if overrides else self.default_config

    def _load_all(self, progress: Callable[[int, int], None] | None) -> None:
        """Load every partition of every dir: scan the dirs, plan who recovers what, run the loads."""
        started = time.perf_counter()
        jobs = self._scan_dirs()
        self._check_descriptors(len(jobs))
        plan = self._plan_recovery(jobs)
        bar = None
        if len(jobs) >= 50:
            from tqdm import tqdm

            bar = tqdm(total=len(jobs), desc="loading logs", unit="log", disable=None, leave=False)
        try:
            self._run_loads(jobs, plan, progress, bar)
            self._sync_recovered(plan.unclean)
        finally:
            if bar is not None:
                bar.close()
        log.info("Loaded %d logs from %d data dir(s) in %.0f ms", len(self.logs), len(self.dirs),
                 (time.perf_counter() - started) * 1000)

    def _scan_dirs(self) -> list[tuple[_DataDir, Path]]:
        """The partition directories to load, dir by dir (their checkpoints read); those marked for deletion are
        queued for it, other directories that are no partition are skipped (with a warning for unknown ones)."""
        jobs: list[tuple[_DataDir, Path]] = []
        for d in self.dirs:
            if d.had_clean_shutdown:
                log.info("Found clean shutdown file in %s: skipping recovery of its logs", d.path)
                remove_clean_shutdown_marker(d.path)
            d.rp = d.recovery_points.read_or_empty()
            d.ls = d.log_starts.read_or_empty()
            # scandir gives each entry's type with the listing: no stat per partition directory
            with os.scandir(d.path) as entries:
                dir_names = sorted(e.name for e in entries if e.is_dir())
            for name in dir_names:
                if name.startswith("."):  # hidden dirs belong to tools, not Kafka
                    continue
                child = d.path / name
                if name.endswith(names.DELETE_DIR_SUFFIX):
                    self.logs_to_delete.append((child, self.clock.milliseconds()))
                    continue
                if name.endswith((names.FUTURE_DIR_SUFFIX, names.STRAY_DIR_SUFFIX)) or name.startswith("__cluster"):
                    continue
                try:
                    names.parse_topic_partition_name(name)
                except ValueError:
                    log.warning("Ignoring directory %s in %s: not a topic-partition directory", name, d.path)
                    continue
                jobs.append((d, child))
        return jobs

    @staticmethod
    def _check_descriptors(total: int) -> None:
        """Checked before loading: a recovery that runs out of descriptors half-way must not happen."""
        used, limit = open_descriptors()
        if used + total * FDS_PER_PARTITION > limit:
            raise LogError(f"{total} partition directories need about {total * FDS_PER_PARTITION} open files, but "
                           f"the open file limit (RLIMIT_NOFILE) is {limit} with {used} in use: raise it "
                           "(ulimit -n, or LimitNOFILE= for systemd) and start again")

    def _plan_recovery(self, jobs: list[tuple[_DataDir, Path]]) -> _LoadPlan:
        """Partitions of dirs shut down uncleanly are recovered in worker processes when there are enough of
        them (recovery_workers); the pool then opens each as cleanly shut down as soon as its worker answered.
        The broker recovers a share itself, sized to end with the workers (it also opens what they recovered)."""
        unclean = [(d, child) for d, child in jobs if not d.had_clean_shutdown]
        processes = self.recovery_processes
        if processes is None:
            processes = recovery_workers.default_processes() if \
                len(unclean) >= recovery_workers.MIN_PARTITIONS_FOR_PROCESSES else 0
        in_workers = unclean[int(len(unclean) * recovery_workers.broker_share(processes)):] if processes > 0 else []
        threads = self._io_threads() if unclean else self._load_threads()
        return _LoadPlan(unclean, in_workers, processes, threads)

    def _run_loads(self, jobs: list[tuple[_DataDir, Path]], plan: _LoadPlan,
                   progress: Callable[[int, int], None] | None, bar: Any) -> None:
        """Load (or have the workers recover) every job, taking each log as it is ready; on any failure, stop the
        workers and the pool and close what was loaded."""
        total = len(jobs)
        ready: queue.SimpleQueue[tuple[_DataDir, Path, Future[Log]]] = queue.SimpleQueue()
        workers = None
        with ThreadPoolExecutor(max_workers=plan.threads, thread_name_prefix="log-recovery") as pool:
            try:
                if plan.in_workers:
                    workers = self._start_workers(plan, pool, ready)
                worker_dirs = {child for _d, child in plan.in_workers}
                # One loading thread and nothing else to wait for: each log is loaded here, in turn. Handing
                # each one from a pool thread to this one cost two thread wake-ups and GIL hand-offs per
                # partition: a clean load of 10,000 partitions took 5.1 s that way, 3.9 s here.
                inline = iter(jobs) if plan.threads == 1 and not plan.in_workers else None
                if inline is None:
                    for d, child in jobs:
                        if child not in worker_dirs:
                            ready.put((d, child, pool.submit(self._load_log, d, child)))
                done = 0
                for _ in range(total):
                    load: Callable[[], Log]
                    if inline is not None:
                        d, child = next(inline)
                        load = functools.partial(self._load_log, d, child)  # its failures handled as a pool's
                    else:
                        d, child, fut = ready.get()
                        load = fut.result
                    if self._take_loaded(d, child, load, total, child in worker_dirs):
                        done += 1
                        if bar is not None:
                            bar.update(1)
                        if progress is not None:
                            progress(done, total)
            except BaseException:
                if workers is not None:
                    workers.kill()
                pool.shutdown(wait=True, cancel_futures=True)
                for lg in self.logs.values():
                    lg.close_handlers()
                raise
            if workers is not None:
                workers.join()

    def _start_workers(self, plan: _LoadPlan, pool: ThreadPoolExecutor,
                       ready: queue.SimpleQueue[tuple[_DataDir, Path, Future[Log]]]
                       ) -> recovery_workers.RecoveryWorkers:
        """Recovery worker processes for the plan's share; each answer becomes a load queued on `ready` (a worker
        that failed hands its logs back to the broker)."""
        owner = {child: d for d, child in plan.in_workers}
        fell_back: set[str] = set()

        def recovered(result: recovery_workers.RecoveryResult) -> None:
            d = owner[result.directory]
            exc = result.exception()
            if result.retry:
                if result.error not in fell_back:
                    fell_back.add(result.error or "")
                    log.warning("A log recovery worker process failed (%s); the broker recovers the "
                                "logs it had not answered for itself", result.error)
                ready.put((d, result.directory, pool.submit(self._load_log, d, result.directory)))
            elif exc is None:
                ready.put((d, result.directory, pool.submit(self._load_recovered_log, d, result)))
            else:
                failed: Future[Log] = Future()
                failed.set_exception(exc)
                ready.put((d, result.directory, failed))

        log.info("Recovering %d logs in %d worker process(es)", len(plan.in_workers), plan.processes)
        return recovery_workers.RecoveryWorkers(
            [recovery_workers.RecoveryJob(child, d.ls.get(self._tp_of(child), 0),
                                          d.rp.get(self._tp_of(child), 0)) for d, child in plan.in_workers],
            plan.processes, self.default_config,
            {t: self._config_for(t) for t in self.topic_configs}, recovered)

    def _take_loaded(self, d: _DataDir, child: Path, load: Callable[[], Log], total: int, in_worker: bool) -> bool:
        """Add one loaded log; False when it is not added (its dir went offline). An OSError takes the dir
        offline, except running out of descriptors, which stops the load with the advice."""
        try:
            lg = load()
        except OSError as exc:
            if is_descriptor_exhaustion(exc):
                raise LogError(f"cannot load {child}: {descriptor_advice(exc)} ({total} partition "
                               f"directories need about {total * FDS_PER_PARTITION})") from exc
            self._mark_offline(d, exc)
            return False
        except RuntimeError as exc:
            if in_worker:
                raise LogError(f"cannot load {child}: {exc}") from exc
            raise
        tp = (lg.topic, lg.partition)
        if d.offline:  # failed while this log was loaded: Kafka loads nothing more from it
            lg.close_handlers()
            return False
        if tp in self.logs:
            raise LogError(f"duplicate log directories for {tp[0]}-{tp[1]}: "
                           f"{self._log_dir_of[tp].path} and {d.path}")
        self.logs[tp] = lg
        self._log_dir_of[tp] = d
        return True

    def _sync_recovered(self, unclean: list[tuple[_DataDir, Path]]) -> None:
        """Recovery wrote a producer snapshot in every recovered partition without an fsync each (half of the
        kernel time of recovering 10,000 small partitions); one syncfs per recovered dir makes them durable."""
        for d in {id(d): d for d, _child in unclean}.values():
            if not d.offline:
                try:
                    sync_file_system(d.path)
                except OSError as exc:
                    self._mark_offline(d, exc)

    def _load_threads(self) -> int:
        """Threads loading logs when every dir was shut down cleanly: num.recovery.threads.per.data.dir per dir, as
        in Kafka (default 1). Such a load only reads small files, mostly from the page cache, and is CPU-bound in
        Python: more threads only fight over the GIL and the process's mmap lock. 10,000 empty partitions loaded
        in 4.8 s on one thread, 8.0 s on two, 8.9 s on eight (16 s after dropping the page cache, 7.5 s on one)."""
        return max(1, self.config.num_recovery_threads_per_data_dir) * max(1, len(self.dirs))

    def _io_threads(self) -> int:
        """Threads loading or closing logs: num.recovery.threads.per.data.dir, at least IO_THREADS_PER_DIR, per dir."""
        return max(IO_THREADS_PER_DIR, self.config.num_recovery_threads_per_data_dir) * max(1, len(self.dirs))

    @staticmethod
    def _tp_of(child: Path) -> TopicPartition:
        return names.parse_topic_partition_name(child.name)

    def _load_recovered_log(self, d: _DataDir, result: recovery_workers.RecoveryResult) -> Log:
        """Open a partition a worker process recovered and closed: as cleanly shut down, then with the recovery
        point the in-process recovery would have left (the checkpointed one, or the log end below it)."""
        topic, _partition = self._tp_of(result.directory)
        lg = Log(result.directory, self._config_for(topic), log_start_offset=result.log_start_offset,
                 clean_shutdown=True, closed_without_snapshot=True, scheduler=self.scheduler, clock=self.clock,
                 dir_lock=d.lock)
        lg.recovery_point = min(result.recovery_point, lg.log_end_offset)
        return lg

    def _load_log(self, d: _DataDir, child: Path) -> Log:
        topic, partition = names.parse_topic_partition_name(child.name)
        tp = (topic, partition)
        return Log(child, self._config_for(topic), log_start_offset=d.ls.get(tp, 0),
                   recovery_point=d.rp.get(tp, 0), clean_shutdown=d.had_clean_shutdown, scheduler=self.scheduler,
                   clock=self.clock, dir_lock=d.lock, durable_recovery_snapshots=d.had_clean_shutdown)

    # --- lookups and lifecycle of logs --------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        lg = self.logs.get((topic, partition))
        if lg is None and self._set_aside:
            lg = self._reopen((topic, partition))
        return lg

    def awaiting_reopen(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._set_aside

    def _set_aside_log(self, tp: TopicPartition, d: _DataDir, exc: BaseException) -> None:
        """An append or read that ran out of descriptors may have left the log's memory out of step with its
        files (bytes written, index not): close it, which frees its descriptors too, and reopen it from disk,
        with recovery, at its next use. Its dir stays online: this is no disk failure."""
        lg = self.logs.pop(tp)
        self._log_dir_of.pop(tp)
        self._set_aside[tp] = (d, lg.log_start_offset, lg.recovery_point, lg.high_watermark)
        lg.close_handlers()
        log.error("Closed %s-%d: %s; it is reopened from disk at its next use", tp[0], tp[1], descriptor_advice(exc))

    def _reopen(self, tp: TopicPartition) -> Log | None:
        with self._lock:
            entry = self._set_aside.get(tp)
            if entry is None:
                return self.logs.get(tp)
            d, start, recovery_point, hw = entry
            used, limit = open_descriptors()
            if used + REOPEN_HEADROOM > limit:  # recovery that runs out of descriptors would empty segments
                return None
            try:
                lg = Log(d.path / names.partition_dir_name(*tp), self._config_for(tp[0]), log_start_offset=start,
                         recovery_point=recovery_point, clean_shutdown=False, scheduler=self.scheduler,
                         clock=self.clock, high_watermark=hw, dir_lock=d.lock)
            except OSError as exc:
                if not is_descriptor_exhaustion(exc):
                    self._mark_offline(d, exc)
                return None
            del self._set_aside[tp]
            self.logs[tp] = lg
            self._log_dir_of[tp] = d
            log.info("Reopened %s-%d from %s (log end offset %d)", tp[0], tp[1], d.path, lg.log_end_offset)
            return lg

    def all_logs(self) -> list[Log]:
        return list(self.logs.values())

    def _next_dir(self) -> _DataDir:
        online = [d for d in self.dirs if not d.offline]
        if not online:
            raise KafkaStorageError("every log dir is offline; no partition can be created")
        counts = {id(d): 0 for d in online}
        for d in self._log_dir_of.values():
            if id(d) in counts:
                counts[id(d)] += 1
        return min(online, key=lambda d: counts[id(d)])

    def get_or_create_log(self, topic: str, partition: int, config: Mapping[str, object] | None = None) -> Log:
        """The log of a partition, created in the data dir holding the fewest partitions.

        The files are made outside the manager's lock (a new log costs a few fsyncs), so several threads
        can create partitions at once; a second caller for the same partition waits for the first."""
        tp = (topic, partition)
        while True:
            with self._lock:
                existing = self.logs.get(tp)
                if existing is not None:
                    return existing
                busy = self._pending.get(tp)
                if busy is None:
                    if config:
                        self.topic_configs[topic] = dict(config)
                    d = self._next_dir()
                    path = d.path / names.partition_dir_name(topic, partition)
                    names.parse_topic_partition_name(path.name)  # refuses names Kafka could not read back
                    self._pending[tp] = threading.Event()
                    break
            busy.wait()
        try:
            existed = path.exists()
            try:
                lg = Log(path, self._config_for(topic), scheduler=self.scheduler, clock=self.clock,
                         dir_lock=d.lock)
            except OSError as exc:
                if not existed:  # a half-made new dir would hold nothing but stop the next start-up
                    shutil.rmtree(path, ignore_errors=True)
                if is_descriptor_exhaustion(exc):
                    raise KafkaStorageError(f"cannot create {topic}-{partition}: {descriptor_advice(exc)}") from exc
                self._mark_offline(d, exc)
                raise KafkaStorageError(f"cannot create {topic}-{partition} in {d.path}: {exc}") from exc
            with self._lock:
                if d.offline:  # failed while this log was being made
                    lg.close_handlers()
                    raise KafkaStorageError(f"cannot create {topic}-{partition}: {d.path} went offline")
                self.logs[tp] = lg
                self._log_dir_of[tp] = d
        finally:
            with self._lock:
                self._pending.pop(tp).set()
        log.info("Created log for partition %s-%d in %s", topic, partition, d.path)
        return lg

    def delete_log(self, topic: str, partition: int) -> None:
        """Rename the partition dir to `<tp>.<uuid>-delete`; the kafka-delete-logs task removes it later."""
        with self._lock:
            tp = (topic, partition)
            lg = self.logs.pop(tp, None)
            if lg is None:
                return
            d = self._log_dir_of.pop(tp)
            if self.cleaner is not None:  # no cleaner may still be rewriting its segments
                self.cleaner.abort_cleaning(tp)
                self.cleaner.update_checkpoints(d.path, remove=tp)
            lg.close_handlers()
            target = d.path / names.delete_dir_name(topic, partition)
            os.replace(lg.dir, target)
            self.logs_to_delete.append((target, self.clock.milliseconds() + self.config.file_delete_delay_ms))
            self._checkpoint_dir(d)
            log.info("Log for partition %s-%d is renamed to %s and is scheduled for deletion", topic, partition,
                     target)

    def update_topic_config(self, topic: str, overrides: Mapping[str, object]) -> None:
        with self._lock:
            new = LogConfig.from_props(overrides, self.default_config)
            self.topic_configs[topic] = dict(overrides)
            for (t, _p), lg in self.logs.items():
                if t == topic:
                    lg.update_config(new)

    # --- background tasks -------------------------------------------------------------------------------

    def startup(self) -> None:
        """Schedule Kafka's periodic tasks (and start the scheduler when the manager owns it)."""
        if self._started:
            return
        self._started = True
        if self._owns_scheduler:
            self.scheduler.startup()
        c = self.config
        delay = c.initial_task_delay_ms
        self.scheduler.schedule("kafka-log-retention", self.cleanup_logs, delay, c.retention_check_interval_ms)
        self.scheduler.schedule("kafka-log-flusher", self.flush_dirty_logs, delay, c.flush_check_interval_ms)
        self.scheduler.schedule("kafka-recovery-point-checkpoint", self.checkpoint_recovery_offsets, delay,
                                c.flush_recovery_offset_checkpoint_interval_ms)
        self.scheduler.schedule("kafka-log-start-offset-checkpoint", self.checkpoint_log_start_offsets, delay,
                                c.flush_start_offset_checkpoint_interval_ms)
        self.scheduler.schedule("kafka-delete-logs", self.delete_logs, delay, c.file_delete_delay_ms)
        if self.cleaner is not None:
            self.cleaner.startup()

    def truncate_to(self, topic: str, partition: int, offset: int) -> bool:
        """Truncate a partition (a follower diverging from its leader) with its cleaning paused, as
        Kafka does, and pull its cleaner checkpoint back if it now points past the active segment."""
        tp = (topic, partition)
        lg = self.logs[tp]
        if self.cleaner is None:
            return lg.truncate_to(offset)
        self.cleaner.abort_and_pause_cleaning(tp)
        try:
            truncated = lg.truncate_to(offset)
            if truncated:
                self.cleaner.maybe_truncate_checkpoint(lg.dir.parent, tp, lg.active_segment.base_offset)
            return truncated
        finally:
            self.cleaner.resume_cleaning([tp])

    def _cleaner_io_error(self, lg: Log, exc: OSError) -> None:
        d = self._log_dir_of.get((lg.topic, lg.partition))
        if d is not None:
            self._mark_offline(d, exc)

    def cleanup_logs(self) -> int:
        """kafka-log-retention: retention for every log whose policy includes delete (compaction's own
        retention runs in the cleaner)."""
        total = 0
        for tp, lg in list(self.logs.items()):
            if lg.config.compact:
                continue
            try:
                total += lg.delete_old_segments()
            except OSError as exc:
                self._mark_offline(self._log_dir_of[tp], exc)
        return total

    def flush_dirty_logs(self) -> None:
        """kafka-log-flusher: fsync logs not flushed for flush.ms."""
        now = self.clock.milliseconds()
        for tp, lg in list(self.logs.items()):
            if now - lg.last_flush_time >= lg.config.flush_ms:
                try:
                    lg.flush()
                except OSError as exc:
                    self._mark_offline(self._log_dir_of[tp], exc)

    def checkpoint_recovery_offsets(self) -> None:
        for d in self.dirs:
            self._checkpoint_dir(d, log_start=False)

    def checkpoint_log_start_offsets(self) -> None:
        for d in self.dirs:
            self._checkpoint_dir(d, recovery=False)

    def _checkpoint_dir(self, d: _DataDir, recovery: bool = True, log_start: bool = True) -> None:
        if d.offline:
            return
        # a snapshot: partitions are created on other threads while checkpoints are written
        logs = {tp: lg for tp, lg in list(self.logs.items()) if self._log_dir_of.get(tp) is d}
        try:
            if recovery:
                d.recovery_points.write({tp: lg.recovery_point for tp, lg in logs.items()})
            if log_start:
                d.log_starts.write({tp: lg.log_start_offset for tp, lg in logs.items()
                                    if lg.log_start_offset > lg.segments.peekitem(0)[0]})
        except OSError as exc:
            self._mark_offline(d, exc)

    def delete_logs(self) -> None:
        """kafka-delete-logs: remove `-delete` directories whose delay has passed."""
        now = self.clock.milliseconds()
        keep = []
        for path, due in self.logs_to_delete:
            if due <= now:
                shutil.rmtree(path, ignore_errors=True)
                log.info("Deleted log directory %s", path)
            else:
                keep.append((path, due))
        self.logs_to_delete = keep

    # --- failure and shutdown --------------------------------------------------------------------------

    def _mark_offline(self, d: _DataDir, exc: BaseException) -> None:
        """An I/O error takes its whole dir offline, as Kafka's log dir failure handler does: its
        partitions answer KAFKA_STORAGE_ERROR; other dirs go on; nothing more is written there."""
        if d.offline:
            return
        if is_descriptor_exhaustion(exc):
            log.error("Keeping log dir %s online: %s", d.path, descriptor_advice(exc))
            return
        d.offline = True
        for tp in [tp for tp, entry in self._set_aside.items() if entry[0] is d]:
            del self._set_aside[tp]
        if self.cleaner is not None:
            self.cleaner.handle_log_dir_failure(d.path)
        log.error("Log dir %s is offline after an I/O error (%s); its partitions are unavailable until the "
                  "disk is fixed and the broker restarted", d.path, exc)
        for tp in [tp for tp, owner in self._log_dir_of.items() if owner is d]:
            lg = self.logs.pop(tp)
            self._log_dir_of.pop(tp)
            lg.close_handlers()

    def handle_log_dir_failure(self, topic: str, partition: int, exc: BaseException) -> None:
        """A caller (the broker) hit an I/O error on this partition's files: its whole dir goes offline;
        out of descriptors, only this log is closed and reopened at its next use."""
        with self._lock:
            tp = (topic, partition)
            d = self._log_dir_of.get(tp)
            if d is None:
                return
            if is_descriptor_exhaustion(exc):
                self._set_aside_log(tp, d, exc)
            else:
                self._mark_offline(d, exc)

    def is_offline(self, topic: str, partition: int) -> bool:
        tp = (topic, partition)
        return tp in self._set_aside or (tp not in self.logs and any(d.offline for d in self.dirs))

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean shutdown marker in each dir."""
        if self.cleaner is not None:
            self.cleaner.shutdown()
        if self._owns_scheduler:
            self.scheduler.shutdown()
        by_dir: dict[int, list[Log]] = {}
        for tp, lg in self.logs.items():
            by_dir.setdefault(id(self._log_dir_of[tp]), []).append(lg)
        workers = self._io_threads()
        failed: set[int] = set()
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="log-closing") as pool:
            futures = [(key, pool.submit(lg.close)) for key, logs in by_dir.items() for lg in logs]
            for key, fut in futures:
                try:
                    fut.result()
                except OSError as exc:
                    log.error("Failed to close a log cleanly: %s", exc)
                    failed.add(key)
        for d in self.dirs:
            if not d.offline and id(d) not in failed:
                self._checkpoint_dir(d)
                write_clean_shutdown_marker(d.path, self.config.broker_epoch)
            d.release()
        log.info("Shut down the log manager: %d logs closed", len(self.logs))

    def __enter__(self) -> LogManager:
        self.startup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
