"""Waiting on a condition, not on the clock: tests that need another process to reach a state
(a key in Redis, a row in the store, a line in a log, a file of some size) poll for it with a
deadline instead of sleeping a fixed time, so that they take as long as the condition needs
and, when it never holds, fail saying what they waited for."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], *, timeout: float = 60.0, interval: float = 0.05,
             what: str = "a condition", alive: subprocess.Popen | None = None) -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns a true value, and
    return that value. Raise ``AssertionError`` naming ``what`` once ``timeout`` seconds have
    passed, or as soon as the process ``alive`` (when given) has exited: a condition that
    process was to bring about will not come any more."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"process {alive.pid} exited with {alive.returncode} "
                                 f"before {what}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}, in vain")
        time.sleep(interval)
