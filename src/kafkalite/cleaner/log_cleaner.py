"""The log cleaner service (Kafka's LogCleaner): background threads that keep compacted logs compact.

Each thread loops: take the filthiest compacted log, clean it, record the new first dirty offset in
`cleaner-offset-checkpoint`, then apply retention to every compacted log (LogManager's retention
task skips them, so `compact,delete` topics are trimmed here); with nothing to clean it sleeps
`log.cleaner.backoff.ms`. A failure marks the partition uncleanable (it is skipped until restart),
an I/O error is handed to the owner (LogManager takes the log dir offline).

Besides the threads, callers can clean one partition now (`clean_now`, in the calling thread) and
wait for a cleaning to pass an offset (`await_cleaned`), as Kafka's tests and tools do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from kafkalite.cleaner.cleaner import Cleaner, LogCleaningAbortedError, LogToClean, ThreadShutdownError
from kafkalite.cleaner.config import CleanerConfig
from kafkalite.cleaner.filter import CleanerStats
from kafkalite.cleaner.manager import LogCleanerManager, PreCleanStats
from kafkalite.cleaner.offset_map import OffsetMap
from kafkalite.cleaner.throttler import Throttler
from kafkalite.clock import SYSTEM_CLOCK, Clock
from kafkalite.errors import KafkaStorageError
from kafkalite.storage.log import Log

log = logging.getLogger("kafkalite.cleaner")

TopicPartition = tuple[str, int]
MiB = 1024 * 1024


def format_stats(cleaner_id: int, name: str, start: int, end: int, s: CleanerStats) -> str:
    """The report Kafka's cleaner logs after each cleaning, line for line."""
    elapsed, index_secs = s.elapsed_secs, s.elapsed_index_secs
    clean_secs = max(elapsed - index_secs, 1e-9)
    read_mb, map_mb, written_mb = s.bytes_read / MiB, s.map_bytes_read / MiB, s.bytes_written / MiB
    return (
        f"\n\tLog cleaner thread {cleaner_id} cleaned log {name} (dirty section = [{start}, {end}])\n"
        f"\t{read_mb:,.1f} MB of log processed in {elapsed:,.1f} seconds ({read_mb / elapsed:,.1f} MB/sec).\n"
        f"\tIndexed {map_mb:,.1f} MB in {index_secs:.1f} seconds ({map_mb / index_secs:,.1f} Mb/sec, "
        f"{100 * index_secs / elapsed:.1f}% of total time)\n"
        f"\tBuffer utilization: {100 * s.buffer_utilization:.1f}%\n"
        f"\tCleaned {read_mb:,.1f} MB in {clean_secs:.1f} seconds ({read_mb / clean_secs:,.1f} Mb/sec, "
        f"{100 * clean_secs / elapsed:.1f}% of total time)\n"
        f"\tStart size: {read_mb:,.1f} MB ({s.messages_read:,d} messages)\n"
        f"\tEnd size: {written_mb:,.1f} MB ({s.messages_written:,d} messages)\n"
        f"\t{100 * (1 - s.bytes_written / max(s.bytes_read, 1)):.1f}% size reduction "
        f"({100 * (1 - s.messages_written / max(s.messages_read, 1)):.1f}% fewer messages)\n"
    )


class LogCleaner:
    def __init__(
        self,
        config: CleanerConfig,
        log_dirs: list[Path],
        logs: Mapping[TopicPartition, Log],
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_io_error: Callable[[Log, OSError], None] | None = None,
    ) -> None:
        self.config = config
        self.manager = LogCleanerManager([Path(d) for d in log_dirs], logs)
        self.throttler = Throttler(config.max_io_bytes_per_second)
        self.clock = clock
        self.on_io_error = on_io_error
        self._threads: list[_CleanerThread] = []
        self._inline: Cleaner | None = None
        self._inline_lock = threading.Lock()
        self.last_stats: CleanerStats | None = None

    def new_cleaner(self, cleaner_id: int, is_running: Callable[[], bool] = lambda: True) -> Cleaner:
        cfg = self.config

        def check_done(tp: TopicPartition) -> None:
            if not is_running():
                raise ThreadShutdownError()
            self.manager.check_cleaning_aborted(tp)

        return Cleaner(cleaner_id, OffsetMap(cfg.dedupe_buffer_per_thread), io_buffer_size=cfg.io_buffer_per_thread,
                       max_io_buffer_size=cfg.max_message_size, load_factor=cfg.dedupe_buffer_load_factor,
                       throttler=self.throttler, clock=self.clock, check_done=check_done)

    # --- lifecycle ---------------------------------------------------------------------------------

    def startup(self) -> None:
        log.info("Starting the log cleaner")
        for i in range(self.config.threads):
            t = _CleanerThread(self, i)
            self._threads.append(t)
            t.start()

    def shutdown(self) -> None:
        log.info("Shutting down the log cleaner.")
        for t in self._threads:
            t.stop()
        for t in self._threads:
            t.join()
        self._threads.clear()

    @property
    def running_threads(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    def wakeup(self) -> None:
        """Make idle threads look for work now rather than after log.cleaner.backoff.ms."""
        for t in self._threads:
            t.wake.set()

    # --- one iteration ------------------------------------------------------------------------------

    def clean_filthiest_log(self, cleaner: Cleaner, only: TopicPartition | None = None,
                            force: bool = False) -> CleanerStats | None:
        """Kafka's cleanFilthiestLog: clean the filthiest log (if any), then retention on compacted logs."""
        pre = PreCleanStats()
        ltc = self.manager.grab_filthiest_compacted_log(self.clock.milliseconds(), pre, only, force)
        stats = None
        if ltc is not None:
            try:
                stats = self._clean_log(cleaner, ltc)
            except (ThreadShutdownError, KafkaStorageError):
                raise
            except Exception:
                log.warning("Unexpected exception thrown when cleaning log %s. Marking its partition (%s) as "
                            "uncleanable", ltc.log.dir.name, ltc.topic_partition, exc_info=True)
                self.manager.mark_partition_uncleanable(ltc.log.dir.parent, ltc.topic_partition)
            if pre.delayed_partitions > 0:
                log.info("\tCleanable partitions: %d, Delayed partitions: %d, max delay: %d",
                         pre.cleanable_partitions, pre.delayed_partitions, pre.max_compaction_delay_ms)
        deletable = self.manager.deletable_logs()
        if only is not None:
            keep = [(tp, lg) for tp, lg in deletable if tp == only]
            self.manager.done_deleting([tp for tp, _ in deletable if tp != only])
            deletable = keep
        try:
            for tp, the_log in deletable:
                try:
                    the_log.delete_old_segments()
                except OSError as exc:
                    self._io_error(the_log, exc)
                except Exception:
                    log.warning("Retention of compacted log %s failed; marking it uncleanable", the_log.dir.name,
                                exc_info=True)
                    self.manager.mark_partition_uncleanable(the_log.dir.parent, tp)
        finally:
            self.manager.done_deleting([tp for tp, _ in deletable])
        return stats

    def _clean_log(self, cleaner: Cleaner, ltc: LogToClean) -> CleanerStats | None:
        start = ltc.first_dirty_offset
        end = start
        stats = None
        try:
            end, stats = cleaner.clean(ltc)
            self.last_stats = stats
            log.info(format_stats(cleaner.id, ltc.log.dir.name, start, end, stats))
            if stats.invalid_messages_read > 0:
                log.warning("\tFound %d invalid messages during compaction.", stats.invalid_messages_read)
        except LogCleaningAbortedError as exc:
            log.info("Cleaning of log %s aborted: %s", ltc.log.dir.name, exc)
        except OSError as exc:
            self._io_error(ltc.log, exc)
        finally:
            self.manager.done_cleaning(ltc.topic_partition, ltc.log.dir.parent, end)
        return stats

    def _io_error(self, the_log: Log, exc: OSError) -> None:
        log.error("Failed to clean up log %s due to an I/O error: %s", the_log.dir.name, exc)
        if self.on_io_error is not None:
            self.on_io_error(the_log, exc)

    # --- callers' controls ------------------------------------------------------------------------------

    def clean_now(self, topic: str, partition: int, timeout_s: float | None = 60.0) -> CleanerStats | None:
        """Clean one compacted partition now, in this thread, whatever its dirty ratio.

        Waits for a cleaner thread working on it to finish first. Returns the statistics, or None
        when there was nothing to clean (or cleaning of the partition is paused).
        """
        tp = (topic, partition)
        with self._inline_lock:
            if not self.manager.wait_until_idle(tp, timeout_s):
                return None
            if self._inline is None:
                self._inline = self.new_cleaner(-1)
            return self.clean_filthiest_log(self._inline, only=tp, force=True)

    def await_cleaned(self, topic: str, partition: int, offset: int, timeout_s: float = 60.0) -> bool:
        """True once the partition's checkpoint reaches `offset` (Kafka's awaitCleaned)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.manager.all_cleaner_checkpoints().get((topic, partition), -1) >= offset:
                return True
            if time.monotonic() >= deadline:
                return False
            self.wakeup()
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def abort_cleaning(self, tp: TopicPartition) -> None:
        self.manager.abort_cleaning(tp)

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        self.manager.abort_and_pause_cleaning(tp)

    def resume_cleaning(self, tps: list[TopicPartition]) -> None:
        self.manager.resume_cleaning(tps)

    def update_checkpoints(self, data_dir: Path, remove: TopicPartition | None = None) -> None:
        self.manager.update_checkpoints(data_dir, remove=remove)

    def maybe_truncate_checkpoint(self, data_dir: Path, tp: TopicPartition, offset: int) -> None:
        self.manager.maybe_truncate_checkpoint(data_dir, tp, offset)

    def handle_log_dir_failure(self, data_dir: Path) -> None:
        self.manager.handle_log_dir_failure(data_dir)


class _CleanerThread(threading.Thread):
    def __init__(self, owner: LogCleaner, thread_id: int) -> None:
        super().__init__(name=f"kafka-log-cleaner-thread-{thread_id}", daemon=True)
        self.owner = owner
        self.running = True
        self.wake = threading.Event()
        self.cleaner = owner.new_cleaner(thread_id, lambda: self.running)

    def stop(self) -> None:
        self.running = False
        self.wake.set()

    def run(self) -> None:
        owner = self.owner
        while self.running:
            try:
                cleaned = owner.clean_filthiest_log(self.cleaner) is not None
            except ThreadShutdownError:
                return
            except Exception:  # a bug must not kill the thread silently (Kafka counts dead threads)
                log.exception("Log cleaner thread %s failed an iteration", self.name)
                cleaned = False
            owner.manager.maintain_uncleanable_partitions()
            if not cleaned and self.running:
                self.wake.wait(owner.config.backoff_ms / 1000)
                self.wake.clear()
