"""`Backoff`, the one retry pacing of the clients, the Spark connector and the controller's channels."""

from __future__ import annotations

import pytest

from kafkalite.backoff import Backoff


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_delays_double_up_to_the_cap():
    b = Backoff(0.1, 1.0)
    assert [round(b.step(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.step() == 0.1


def test_a_first_delay_of_zero_still_grows():
    b = Backoff(0.0, 1.0)
    assert [b.step() for _ in range(3)] == [0.0, 0.02, 0.04]


def test_the_deadline_ends_the_retries_and_progress_renews_it():
    clock = FakeClock()
    b = Backoff(0.5, 1.0, timeout_s=2.0, clock=clock)
    assert b.next_delay() == 0.5
    clock.now += 0.5
    assert b.next_delay() == 1.0
    clock.now += 1.0
    assert b.next_delay() is None  # 1 s more would pass the deadline (2 s after the start)
    b.reset()
    assert b.next_delay() == 0.5


def test_a_backoff_with_a_deadline_is_not_stepped_blindly():
    with pytest.raises(AssertionError):
        Backoff(0.1, 1.0, timeout_s=1.0).step()
