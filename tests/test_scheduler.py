"""Schedulers: the deterministic MockScheduler and the threaded production one."""

from __future__ import annotations

import threading
import time

from kafkalite.clock import MockClock
from kafkalite.scheduler import MockScheduler, ThreadScheduler


def test_mock_scheduler_order_period_cancel_and_failures():
    clock = MockClock(0)
    s = MockScheduler(clock)
    ran: list[tuple[str, int]] = []
    s.schedule("b", lambda: ran.append(("b", clock.milliseconds())), delay_ms=20)
    s.schedule("a", lambda: ran.append(("a", clock.milliseconds())), delay_ms=10)
    p = s.schedule("p", lambda: ran.append(("p", clock.milliseconds())), delay_ms=5, period_ms=10)
    s.schedule("boom", lambda: 1 / 0, delay_ms=1)
    s.advance(25)
    assert ran == [("p", 5), ("a", 10), ("p", 15), ("b", 20), ("p", 25)]
    assert isinstance(s.last_exception, ZeroDivisionError)
    p.cancel()
    s.advance(100)
    assert ran[-1] == ("p", 25) and clock.milliseconds() == 125
    assert s.pending() == []


def test_thread_scheduler_runs_and_shuts_down():
    s = ThreadScheduler(num_threads=2, thread_name_prefix="test-scheduler-")
    s.startup()
    done = threading.Event()
    counts = {"periodic": 0}

    def periodic() -> None:
        counts["periodic"] += 1

    s.schedule("boom", lambda: 1 / 0, delay_ms=0)
    s.schedule("once", done.set, delay_ms=20)
    s.schedule("periodic", periodic, delay_ms=0, period_ms=10)
    assert done.wait(2)
    time.sleep(0.1)
    s.shutdown()
    seen = counts["periodic"]
    assert seen >= 3
    time.sleep(0.05)
    assert counts["periodic"] == seen
    assert not [t for t in threading.enumerate() if t.name.startswith("test-scheduler-")]
