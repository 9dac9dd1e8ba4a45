"""Named one-shot timers on the event loop (the coordinator runtime's timer in Kafka).

Every deadline of the rebalance protocol has a key (`heartbeat-<group>-<member>`, `join-<group>`,
`sync-<group>`); scheduling a key again replaces its deadline, which is how a heartbeat pushes the
session expiry forward. Callbacks run on the loop, so the group state they touch needs no lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger("kafkalite.coordinator")


class KeyedTimer:
    def __init__(self) -> None:
        self._handles: dict[str, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def is_bound(self) -> bool:
        return self._loop is not None

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        """Run `fn` after `delay_ms` unless the key is rescheduled or cancelled first."""
        if self._loop is None:
            return  # not started (offline use): nothing times out
        self.cancel(key)

        def fire() -> None:
            if self._handles.get(key) is handle:
                del self._handles[key]
            try:
                fn()
            except Exception:  # one failing expiry must not stop the others
                log.exception("Coordinator timer %s failed", key)

        handle = self._loop.call_later(max(delay_ms, 0) / 1000, fire)
        self._handles[key] = handle

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, key: str) -> bool:
        return key in self._handles

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def __len__(self) -> int:
        return len(self._handles)
