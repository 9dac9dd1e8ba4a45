"""Recovering partitions in worker processes after an unclean shutdown (issue 17).

Recovery after kill -9 is CPU-bound Python (validating every unflushed batch, rebuilding the indexes and the
producer state), and threads share one core for it. With thousands of partitions to recover the manager starts
`python -m kafkalite.manager.recovery_workers` processes (one per core but the broker's) and recovers a share
itself (`broker_share`). Each worker gets a share of the partition directories (a partition's recovery needs only
its own directory), recovers each one exactly as the in-process loader does (`Log(..., clean_shutdown=False)`), and
closes it without a flush and without writing a producer snapshot: indexes trimmed as a clean close leaves them,
and the broker's open (`closed_without_snapshot`) replays the batches after the newest snapshot the recovery left,
as the worker did. It answers one line per partition, so the broker then opens the directory cheaply, as cleanly
shut down, while the workers go on with the rest; the recovery point and log start offset the worker found are
handed back and applied, so the broker ends with the same state as after recovering in-process (the recovery point
stays the checkpointed one, as in Kafka: recovered data is not flushed).

The workers act for the broker, which holds the data dir's exclusive lock for as long as they run and opens
none of their partitions until they answered: they take no lock of their own (`DelegatedLock`).

Protocol: the parent writes one pickle to the worker's stdin, (default LogConfig, {topic: LogConfig},
[(partition dir, log start offset checkpoint, recovery point checkpoint)], logging level); the worker
writes one JSON line per partition to stdout, in order: {"dir", "log_start_offset", "recovery_point"} or
{"dir", "errno", "error"} for an OSError (the broker takes the dir offline, as for an in-process failure) or
{"dir", "fatal"} for any other error (the broker refuses to start, naming the partition). Log messages go to
stderr, which is the broker's. A worker that exits without answering for all its partitions (killed, out of
memory, or not started at all) costs only time: the broker recovers those partitions in its own threads.
"""

from __future__ import annotations

import gc
import json
import logging
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kafkalite.storage.log_config import LogConfig

# Below this many partitions to recover, starting the processes (~0.3 s of imports each) costs more than it
# saves: the manager recovers in its threads as before.
MIN_PARTITIONS_FOR_PROCESSES = 300
THREADS_PER_WORKER = 4
# CPU of opening a partition that a worker recovered, and of a worker recovering one (closing it included),
# relative to recovering it in the broker's threads (measured with one small segment a partition): what the
# broker's own share of the recovery is sized by, so that it ends with the workers (`broker_share`)
REOPEN_COST = 0.33
WORKER_COST = 1.1


@dataclass(frozen=True, slots=True)
class RecoveryJob:
    directory: Path
    log_start_offset: int
    recovery_point: int


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What a worker answered for one partition directory: offsets, or the error that stopped it."""

    directory: Path
    log_start_offset: int = 0
    recovery_point: int = 0
    errno: int | None = None
    error: str | None = None
    fatal: bool = False
    retry: bool = False  # the worker died (or never started) before answering: recover it in the broker instead

    def exception(self) -> BaseException | None:
        if self.errno is not None:
            return OSError(self.errno, f"{self.error} (recovering {self.directory} in a worker process)")
        if self.error is not None and not self.retry:
            return RuntimeError(f"recovering {self.directory} in a worker process failed: {self.error}")
        return None


def broker_share(processes: int) -> float:
    """The fraction of the partitions to recover that the broker recovers itself, in its threads, while
    `processes` workers recover the rest (and the broker opens what they recovered): the broker's work
    (share x 1 + rest x REOPEN_COST) equals each worker's (rest x WORKER_COST / processes). With one worker on
    two cores that is ~0.43; with many workers the broker only opens what they recovered."""
    per_worker = WORKER_COST / processes
    return max(0.0, (per_worker - REOPEN_COST) / (1 - REOPEN_COST + per_worker))


def default_processes() -> int:
    """One worker per core this process may run on, less the broker's own: it recovers a share too."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


class RecoveryWorkers:
    """Worker processes recovering `jobs`, `on_result` called (from reader threads) as each partition is done."""

    def __init__(self, jobs: Sequence[RecoveryJob], processes: int, default_config: LogConfig,
                 topic_configs: dict[str, LogConfig], on_result: Callable[[RecoveryResult], None]) -> None:
        self.on_result = on_result
        shares = [list(jobs[i::processes]) for i in range(processes)]
        self._threads: list[threading.Thread] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        level = logging.getLogger("kafkalite").getEffectiveLevel()
        for share in shares:
            if not share:
                continue
            topics = {names_topic(j.directory) for j in share}
            payload = pickle.dumps((default_config, {t: c for t, c in topic_configs.items() if t in topics},
                                    [(str(j.directory), j.log_start_offset, j.recovery_point) for j in share], level))
            try:
                proc = subprocess.Popen([sys.executable, "-m", "kafkalite.manager.recovery_workers"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            except OSError as exc:  # no process to be had (limits, memory): the broker recovers the share itself
                for job in share:
                    self.on_result(RecoveryResult(job.directory, error=f"cannot start a recovery worker: {exc}",
                                                  retry=True))
                continue
            self._procs.append(proc)
            t = threading.Thread(target=self._serve, args=(proc, share, payload), name="log-recovery-worker",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, proc: subprocess.Popen[bytes], share: list[RecoveryJob], payload: bytes) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        answered = 0
        try:
            try:
                proc.stdin.write(payload)
                proc.stdin.close()
            except BrokenPipeError:
                pass
            for line in proc.stdout:
                msg = json.loads(line)
                job = share[answered]
                if msg["dir"] != str(job.directory):
                    raise RuntimeError(f"worker answered for {msg['dir']}, expected {job.directory}")
                answered += 1
                if "fatal" in msg:
                    self.on_result(RecoveryResult(job.directory, error=msg["fatal"], fatal=True))
                elif "errno" in msg:
                    self.on_result(RecoveryResult(job.directory, errno=msg["errno"], error=msg["error"]))
                else:
                    self.on_result(RecoveryResult(job.directory, msg["log_start_offset"], msg["recovery_point"]))
            code = proc.wait()
            if answered < len(share):
                raise RuntimeError(f"the recovery worker (pid {proc.pid}) exited with status {code}")
        except Exception as exc:
            # A dead or confused worker (killed, out of memory, never started): the partitions it did not answer
            # for are recovered in the broker, as without workers. Recovery is idempotent: one the worker left
            # half done is recovered again from its files, as after a crash during recovery.
            for job in share[answered:]:
                self.on_result(RecoveryResult(job.directory, error=f"{exc}", retry=True))
        finally:
            proc.stdout.close()

    def join(self) -> None:
        for t in self._threads:
            t.join()
        for p in self._procs:
            p.wait()

    def kill(self) -> None:
        """Stop every worker (the broker gave up loading); a partition half-recovered is recovered again next time."""
        for p in self._procs:
            if p.poll() is None:
                p.kill()
        self.join()


def names_topic(directory: Path) -> str:
    from kafkalite.storage import names

    return names.parse_topic_partition_name(directory.name)[0]


def _recover_one(directory: str, config: LogConfig, log_start: int, recovery_point: int) -> dict[str, object]:
    from kafkalite.storage.dir_lock import DelegatedLock
    from kafkalite.storage.log import Log

    path = Path(directory)
    # the snapshots recovery writes are synced by the broker, with one syncfs of the data dir after the workers end
    lg = Log(path, config, log_start_offset=log_start, recovery_point=recovery_point, clean_shutdown=False,
             dir_lock=DelegatedLock(path.parent), durable_recovery_snapshots=False)
    result = {"dir": directory, "log_start_offset": lg.log_start_offset, "recovery_point": lg.recovery_point}
    # Indexes trimmed, as a clean close leaves them, but no producer snapshot: the broker's open replays the batches
    # after the newest one left (`closed_without_snapshot`), which costs less than writing a file here and deleting
    # the older one there, per partition, on a file system journal that thousands of them keep busy.
    lg.close(flush=False, snapshot=False)
    return result


def main() -> None:
    gc.disable()  # a short-lived process: collections would only walk the logs it opens and closes
    default_config, topic_configs, jobs, level = pickle.load(sys.stdin.buffer)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s [recovery worker] %(message)s"))
    root = logging.getLogger("kafkalite")
    root.addHandler(handler)
    root.setLevel(level)
    out = sys.stdout

    def recover(job: tuple[str, int, int]) -> dict[str, object]:
        directory, log_start, recovery_point = job
        try:
            return _recover_one(directory, topic_configs.get(names_topic(Path(directory)), default_config),
                                log_start, recovery_point)
        except OSError as exc:
            return {"dir": directory, "errno": exc.errno, "error": str(exc)}
        except Exception as exc:  # reported by name; the broker refuses to start, as for an in-process failure
            logging.getLogger("kafkalite.manager").exception("recovering %s failed", directory)
            return {"dir": directory, "fatal": f"{type(exc).__name__}: {exc}"}

    # a few threads: the producer snapshot's fsync and the reads wait on the disk without the GIL
    with ThreadPoolExecutor(THREADS_PER_WORKER) as pool:
        for msg in pool.map(recover, jobs):  # answers in the order given
            out.write(json.dumps(msg) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
