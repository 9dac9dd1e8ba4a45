"""Waiting for a condition on a system that is still moving (brokers electing, followers truncating, files being
rewritten). A condition sampled mid-change may raise what a moving system raises: a replica read while it is
truncated to nothing, a connection to a broker that is restarting, a view whose partition list is not filled yet.
Those count as "not yet", never as a failure; on timeout the last value or exception is reported, so a condition
that can never hold still fails, with its reason."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kafkalite.errors import KafkaliteError

# What a condition may raise while the cluster legitimately moves under it.
MOVING = (OSError, ConnectionError, EOFError, KafkaliteError, IndexError, KeyError)


def wait_until(cond: Callable[[], Any], timeout_s: float = 20, what: str = "condition", every_s: float = 0.1) -> Any:
    """Poll `cond` until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = cond()
            if last:
                return last
        except MOVING as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not so within {timeout_s} s (last: {last!r})")
        time.sleep(every_s)
