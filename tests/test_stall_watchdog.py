"""The loop-stall watchdog (broker/stall_watchdog.py): a real event loop blocked by a real call, and the log it
leaves. A loop that keeps running, however busy, must leave nothing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from kafkalite.broker.stall_watchdog import LoopStallWatchdog, thread_stacks


def _blocks_the_loop_for(seconds: float) -> None:
    time.sleep(seconds)


@pytest.mark.slow
def test_a_stalled_loop_is_reported_once_with_every_threads_stack_and_its_recovery(caplog):
    async def main() -> None:
        dog = LoopStallWatchdog(asyncio.get_running_loop(), stall_s=0.4, beat_s=0.1)
        dog.start()
        try:
            await asyncio.sleep(0.3)
            _blocks_the_loop_for(1.5)  # on the loop's thread, as a blocking call by mistake would
            await asyncio.sleep(0.5)
        finally:
            dog.stop()

    with caplog.at_level(logging.WARNING, logger="kafkalite.broker"):
        asyncio.run(main())
    stalls = [r.getMessage() for r in caplog.records if "has not run for" in r.getMessage()]
    assert len(stalls) == 1, stalls  # once per stall, not once a beat
    assert "--- thread MainThread" in stalls[0] and "in _blocks_the_loop_for" in stalls[0], stalls[0]
    again = [r.getMessage() for r in caplog.records if "runs again" in r.getMessage()]
    assert len(again) == 1 and 1.2 < float(again[0].split("stall of ")[1].split(" s")[0]) < 3, again


@pytest.mark.slow
def test_a_busy_loop_that_keeps_yielding_is_not_reported(caplog):
    async def main() -> None:
        dog = LoopStallWatchdog(asyncio.get_running_loop(), stall_s=0.4, beat_s=0.1)
        dog.start()
        try:
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                _blocks_the_loop_for(0.05)  # busy, but never 0.4 s without yielding
                await asyncio.sleep(0)
        finally:
            dog.stop()

    with caplog.at_level(logging.WARNING, logger="kafkalite.broker"):
        asyncio.run(main())
    assert not [r for r in caplog.records if "event loop" in r.getMessage()]


def test_thread_stacks_names_every_live_thread():
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="waiting-worker")
    t.start()
    try:
        out = thread_stacks()
    finally:
        release.set()
        t.join()
    assert out.startswith("--- thread MainThread") and "--- thread waiting-worker" in out and "in wait" in out, out
