"""What a stuck broker is doing: every thread's stack, and a watchdog thread that logs them when the event loop stops.

Everything a broker serves runs on one event loop, so a loop that stops turning (a call that blocks, a loop of
Python that never yields) stops every connection at once, and SIGQUIT cannot help: asyncio runs its handler on
that same loop. A JVM answers `kill -3` from a thread of its own; here a small daemon thread watches a heartbeat
the loop sets every second and, when it is older than `stall_s`, logs every thread's stack once (and once more
when the loop runs again). The stacks are read with `sys._current_frames()` from an ordinary thread, which is
safe, unlike dumping running threads from a signal handler (faulthandler), which crashed a broker in CI.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("kafkalite.broker")

STALL_S = 10.0
"""How long the loop may go without running before the stacks are logged: far beyond any callback the broker
means to run (every blocking step runs on a thread), short enough to be caught before a client's request
timeout (30 s) and a ZooKeeper session (18 s) run out."""


def thread_stacks(limit: int = 30) -> str:
    """Every live thread's name and innermost `limit` frames, main thread first."""
    frames = sys._current_frames()
    threads = sorted(threading.enumerate(), key=lambda t: (t is not threading.main_thread(), t.name))
    out = []
    for t in threads:
        frame = frames.get(t.ident) if t.ident is not None else None
        if frame is None:
            continue
        stack = "".join(traceback.format_stack(frame, limit=limit))
        out.append(f"--- thread {t.name}{' (daemon)' if t.daemon else ''}\n{stack}")
    return "".join(out)


class LoopStallWatchdog:
    """Logs every thread's stack when `loop` has not run for `stall_s` seconds (see the module's docstring).
    The loop's side is one timer callback a second; the thread wakes once a second and takes the GIL briefly."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stall_s: float = STALL_S, beat_s: float = 1.0) -> None:
        self._loop = loop
        self._stall_s = stall_s
        self._beat_s = beat_s
        self._last = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-stall-watchdog", daemon=True)

    def start(self) -> None:
        """Called on the loop's thread."""
        self._beat()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self._beat_s)

    def _beat(self) -> None:
        self._last = time.monotonic()
        self._timer = self._loop.call_later(self._beat_s, self._beat)

    def _watch(self) -> None:
        stalled_since: float | None = None
        while not self._stopped.wait(self._beat_s / 2):
            last = self._last
            idle = time.monotonic() - last
            if stalled_since is None and idle >= self._stall_s:
                stalled_since = last
                log.warning("The event loop has not run for %.1f s: no request is served and no timer fires until "
                            "it does. The stack of every thread follows; MainThread's shows what holds the loop "
                            "(include this in a bug report).\n%s", idle, thread_stacks())
            elif stalled_since is not None and last > stalled_since:
                log.warning("The event loop runs again, after a stall of %.1f s", last - stalled_since)
                stalled_since = None
