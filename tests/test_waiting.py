"""tests/support/waiting.py, the one way the suite waits for a moving cluster: what a moving system raises while
a condition is sampled counts as not yet; a condition that never holds fails, naming its last outcome."""

from __future__ import annotations

import pytest

from kafkalite.errors import LogError
from tests.support.waiting import wait_until


def test_a_condition_that_raises_while_things_move_is_retried_until_it_holds() -> None:
    outcomes = iter([LogError("it holds no segment"), ConnectionResetError(), IndexError(), None, "done"])

    def cond() -> object:
        got = next(outcomes)
        if isinstance(got, BaseException):
            raise got
        return got

    assert wait_until(cond, timeout_s=5, every_s=0.001) == "done"


def test_a_condition_that_never_holds_fails_with_its_last_exception() -> None:
    def cond() -> None:
        raise LogError("cannot open x read-only: it holds no segment")

    with pytest.raises(AssertionError, match=r"replica caught up: not so within 0\.05 s .*holds no segment"):
        wait_until(cond, timeout_s=0.05, what="replica caught up", every_s=0.01)


def test_a_bug_in_the_condition_is_not_taken_for_movement() -> None:
    with pytest.raises(TypeError):
        wait_until(lambda: None + 1, timeout_s=5)  # type: ignore[operator]
