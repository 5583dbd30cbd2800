"""The race tests' helper (tests/race.py): what a thread returns or raises reaches the test."""

from __future__ import annotations

import threading
import time

import pytest

from tests.race import concurrently


def test_the_calls_overlap_and_their_results_come_back_in_order():
    inside = threading.Barrier(3, timeout=5)  # passes only if all three calls run at once

    def call(value):
        return lambda: (inside.wait(), value)[1]

    assert concurrently(call("a"), call("b"), call("c")) == ["a", "b", "c"]


def test_the_first_exception_is_raised_in_the_test_with_the_others_noted():
    def fails_first():
        raise ValueError("first")

    def fails_later():
        time.sleep(0.2)
        raise KeyError("later")

    with pytest.raises(ValueError, match="first") as raised:
        concurrently(fails_first, fails_later, lambda: "fine")
    assert raised.value.__notes__ == ["another call of the race raised KeyError('later')"]


def test_a_call_that_never_ends_fails_the_test_instead_of_hanging_it():
    with pytest.raises(AssertionError, match="still running"):
        concurrently(lambda: time.sleep(1), lambda: None, timeout=0.2)
