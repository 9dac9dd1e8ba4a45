"""The broker's Purgatory (parked fetches and acks=all produces): a waiter cancelled in the same loop step
as its wake-up must end cancelled. On Python 3.11 `asyncio.wait_for` returned the wake's result instead and
the cancellation was lost, so a broker stopping under acks=all load waited for each produce's whole timeout
(30 s with librdkafka's default) before it could close its connections."""

from __future__ import annotations

import asyncio

import pytest

from kafkalite.broker.purgatory import Purgatory


def test_a_cancel_that_meets_a_wake_is_not_lost() -> None:
    async def main() -> None:
        p = Purgatory()
        waiter = asyncio.create_task(p.wait([("t", 0)], 30))
        await asyncio.sleep(0)  # parked
        p.wake(("t", 0))
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert len(p) == 0
    asyncio.run(asyncio.wait_for(main(), 5))


def test_wake_and_timeout() -> None:
    async def main() -> None:
        p = Purgatory()
        waiter = asyncio.create_task(p.wait([("t", 0), ("t", 1)], 30))
        await asyncio.sleep(0)
        p.wake(("t", 1))
        assert await waiter is True
        assert await p.wait([("t", 0)], 0.01) is False
        assert len(p) == 0
    asyncio.run(asyncio.wait_for(main(), 5))
