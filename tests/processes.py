"""Child processes a test starts (crawls it kills, planners it stops): started with their
stderr in a log file, and killed when the test ends if it left them running, so that a test
that fails halfway leaves nothing behind (``tests/conftest.py`` calls :func:`kill_leftovers`
after every test)."""

from __future__ import annotations

import subprocess
from pathlib import Path

_RUNNING: list[subprocess.Popen] = []


def spawn(args: list[str], *, log: Path, cwd: Path,
          env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``args`` in ``cwd`` (with ``env``, default this process's environment), stderr to
    the file ``log``, stdout discarded."""
    with open(log, "w") as err:                  # the child keeps its own descriptor
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    _RUNNING.append(proc)
    return proc


def kill_leftovers() -> None:
    while _RUNNING:
        proc = _RUNNING.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
