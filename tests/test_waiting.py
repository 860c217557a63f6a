"""tests/waiting.py: the polling helper of the tests that wait on other processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.waiting import wait_for


def test_returns_the_first_true_value_of_the_predicate():
    calls = []

    def third_time():
        calls.append(1)
        return len(calls) >= 3 and "ready"

    assert wait_for(third_time, interval=0, what="three calls") == "ready"
    assert len(calls) == 3


def test_a_condition_that_never_holds_fails_naming_it():
    with pytest.raises(AssertionError, match=r"waited 0 s for the moon, in vain"):
        wait_for(lambda: False, timeout=0, what="the moon")


def test_a_process_that_exited_ends_the_wait_at_once():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait(60)
    with pytest.raises(AssertionError, match=rf"process {proc.pid} exited with 3 before a log"):
        wait_for(lambda: False, timeout=3600, what="a log line", alive=proc)
