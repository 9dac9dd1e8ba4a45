"""Requests parked until something happens to a partition (Kafka's DelayedOperationPurgatory, for asyncio).

A long-polling Fetch watches the partitions it reads; an append (or a high-watermark move, or a deletion)
to one of them wakes it to re-check its condition. Everything runs on the event loop, so no locking.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[asyncio.Future[None]]] = {}

    def watch(self, keys: Iterable[Hashable]) -> asyncio.Future[None]:
        """A future that completes at the next `wake` of any key."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for k in keys:
            self._watchers.setdefault(k, set()).add(fut)
        fut.add_done_callback(lambda f: self._forget(f, keys))
        return fut

    def _forget(self, fut: asyncio.Future[None], keys: list[Hashable]) -> None:
        for k in keys:
            waiting = self._watchers.get(k)
            if waiting is not None:
                waiting.discard(fut)
                if not waiting:
                    del self._watchers[k]

    def wake(self, key: Hashable) -> None:
        for fut in list(self._watchers.get(key, ())):
            if not fut.done():
                fut.set_result(None)

    def wake_all(self) -> None:
        for key in list(self._watchers):
            self.wake(key)

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> bool:
        """Wait for a wake of any key or the timeout; True when woken."""
        fut = self.watch(keys)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns the result of a future woken in the same
            # loop step as its task's cancellation and drops the cancellation, so a stopping broker's
            # waiting produce (acks=all) went on waiting for its whole timeout.
            async with asyncio.timeout(timeout_s):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            fut.cancel()

    def __len__(self) -> int:
        return len({f for s in self._watchers.values() for f in s})
