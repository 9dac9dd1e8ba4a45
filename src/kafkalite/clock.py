"""Time as a dependency: the system clock in production, a hand-driven one in tests.

Roll timing, retention and async deletion all read the clock; passing it in lets tests move
time by hours in microseconds and makes every time-based rule deterministic.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int: ...

    def nanoseconds(self) -> int: ...

    def sleep(self, ms: int) -> None: ...


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        return time.monotonic_ns()

    def sleep(self, ms: int) -> None:
        time.sleep(ms / 1000)


class MockClock:
    """A clock that moves only when told to (Kafka's MockTime)."""

    def __init__(self, start_ms: int = 1700000000000) -> None:
        self._ms = start_ms
        self._ns = 0

    def milliseconds(self) -> int:
        return self._ms

    def nanoseconds(self) -> int:
        return self._ns + self._ms * 1_000_000

    def sleep(self, ms: int) -> None:
        self._ms += ms


SYSTEM_CLOCK = SystemClock()
