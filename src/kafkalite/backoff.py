"""Retry pacing, in one place: waits that double from a first delay up to a cap, optionally within a deadline
(Kafka's ExponentialBackoff, without its jitter: kafkalite's retries are few and their timing is tested).

Pure: it says how long to wait and leaves the waiting (time.sleep, asyncio.sleep) to the caller, so blocking
clients and the broker's event loop share it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

MIN_STEP_S = 0.01  # a first delay of 0 still grows


class Backoff:
    def __init__(self, initial_s: float, max_s: float = 1.0, timeout_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        """Progress was made: the next failure waits the first delay again, with a fresh deadline."""
        self.delay_s = self.initial_s
        self.deadline = None if self.timeout_s is None else self.clock() + self.timeout_s

    def next_delay(self) -> float | None:
        """How long to wait before the next attempt, and the one after grows; None (nothing changes) when
        waiting would pass the deadline: give up."""
        delay = self.delay_s
        if self.deadline is not None and self.clock() + delay > self.deadline:
            return None
        self.delay_s = min(max(delay, MIN_STEP_S) * 2, self.max_s)
        return delay

    def step(self) -> float:
        """The next delay of a backoff without a deadline (it never gives up)."""
        assert self.timeout_s is None, "a backoff with a deadline can give up: use next_delay"
        delay = self.next_delay()
        assert delay is not None
        return delay
