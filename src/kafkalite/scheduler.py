"""Background tasks (Kafka's KafkaScheduler / MockScheduler): retention, flushes, async deletes.

Production runs tasks on daemon threads; tests use `MockScheduler`, which runs a task only when the
test moves the mock clock past its due time, so "delete after file.delete.delay.ms" is exact.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from kafkalite.clock import SYSTEM_CLOCK, Clock, MockClock

log = logging.getLogger("kafkalite.scheduler")


@dataclass(order=True)
class ScheduledTask:
    due_ms: int
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False)
    period_ms: int | None = field(compare=False, default=None)
    cancelled: bool = field(compare=False, default=False)

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler(Protocol):
    def schedule(self, name: str, fn: Callable[[], object], delay_ms: int = 0,
                 period_ms: int | None = None) -> ScheduledTask: ...

    def startup(self) -> None: ...

    def shutdown(self) -> None: ...


def _run(task: ScheduledTask) -> Exception | None:
    try:
        task.fn()
        return None
    except Exception as exc:  # a failing task must not stop the others (KafkaScheduler logs and goes on)
        log.exception("Uncaught exception in scheduled task '%s'", task.name)
        return exc


class MockScheduler:
    """Runs due tasks when the test advances time; deterministic and single-threaded."""

    def __init__(self, clock: MockClock) -> None:
        self.clock = clock
        self._heap: list[ScheduledTask] = []
        self._seq = itertools.count()
        self.last_exception: Exception | None = None

    def schedule(self, name: str, fn: Callable[[], object], delay_ms: int = 0,
                 period_ms: int | None = None) -> ScheduledTask:
        task = ScheduledTask(self.clock.milliseconds() + delay_ms, next(self._seq), name, fn, period_ms)
        heapq.heappush(self._heap, task)
        return task

    def startup(self) -> None:
        pass

    def shutdown(self) -> None:
        self._heap.clear()

    def pending(self) -> list[tuple[str, int]]:
        return [(t.name, t.due_ms) for t in sorted(self._heap) if not t.cancelled]

    def run_due(self) -> None:
        now = self.clock.milliseconds()
        while self._heap and self._heap[0].due_ms <= now:
            task = heapq.heappop(self._heap)
            if task.cancelled:
                continue
            exc = _run(task)
            if exc is not None:
                self.last_exception = exc
            if task.period_ms is not None and not task.cancelled:
                task.due_ms += task.period_ms
                task.seq = next(self._seq)
                heapq.heappush(self._heap, task)

    def advance(self, ms: int) -> None:
        """Move time forward, running every task in due order at its own due time."""
        target = self.clock.milliseconds() + ms
        while self._heap and self._heap[0].due_ms <= target:
            step = self._heap[0].due_ms - self.clock.milliseconds()
            if step > 0:
                self.clock.sleep(step)
            self.run_due()
        remaining = target - self.clock.milliseconds()
        if remaining > 0:
            self.clock.sleep(remaining)
        self.run_due()


class ThreadScheduler:
    """Daemon threads running tasks from a time-ordered heap."""

    def __init__(self, num_threads: int = 1, thread_name_prefix: str = "kafka-scheduler-",
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self.num_threads = num_threads
        self.prefix = thread_name_prefix
        self._heap: list[ScheduledTask] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._running = False

    def startup(self) -> None:
        with self._cond:
            if self._running:
                return
            self._running = True
        for i in range(self.num_threads):
            t = threading.Thread(target=self._work, name=f"{self.prefix}{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def schedule(self, name: str, fn: Callable[[], object], delay_ms: int = 0,
                 period_ms: int | None = None) -> ScheduledTask:
        task = ScheduledTask(self.clock.milliseconds() + delay_ms, next(self._seq), name, fn, period_ms)
        with self._cond:
            heapq.heappush(self._heap, task)
            self._cond.notify()
        return task

    def _work(self) -> None:
        while True:
            with self._cond:
                while self._running:
                    if self._heap and self._heap[0].due_ms <= self.clock.milliseconds():
                        task = heapq.heappop(self._heap)
                        break
                    timeout = (self._heap[0].due_ms - self.clock.milliseconds()) / 1000 if self._heap else None
                    self._cond.wait(timeout)
                else:
                    return
            if task.cancelled:
                continue
            _run(task)
            if task.period_ms is not None and not task.cancelled:
                with self._cond:
                    task.due_ms = self.clock.milliseconds() + task.period_ms
                    task.seq = next(self._seq)
                    heapq.heappush(self._heap, task)
                    self._cond.notify()

    def shutdown(self) -> None:
        """Stop taking tasks, drop pending ones, wait for running ones."""
        with self._cond:
            self._running = False
            self._heap.clear()
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        self._threads.clear()
