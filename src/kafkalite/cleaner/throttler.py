"""The cleaner's I/O throttle (Kafka's Throttler): `log.cleaner.io.max.bytes.per.second` over all threads.

Every cleaner thread reports the bytes it reads and writes; whenever a measuring period of 300 ms has
passed and the rate over it exceeds the limit, the reporting thread sleeps long enough to bring the
period's rate down to the limit. With the default (no limit) reporting is a single comparison.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class Throttler:
    def __init__(self, max_bytes_per_second: float = math.inf, check_interval_ms: int = 300,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.max_bytes_per_second = max_bytes_per_second
        self.check_interval_s = check_interval_ms / 1000
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = time.monotonic()
        self._observed = 0.0
        self.throttled_seconds = 0.0

    def maybe_throttle(self, observed: float) -> None:
        if self.max_bytes_per_second == math.inf:
            return
        with self._lock:
            self._observed += observed
            now = time.monotonic()
            elapsed = now - self._period_start
            if elapsed <= self.check_interval_s:
                return
            rate = self._observed / elapsed
            pause = 0.0
            if rate > self.max_bytes_per_second:
                pause = self._observed / self.max_bytes_per_second - elapsed
            self._period_start = now
            self._observed = 0.0
        if pause > 0:
            self.throttled_seconds += pause
            self._sleep(pause)
