"""The processes a benchmark runs its crawls in: the simulated web's server (``python -m
sim.serve`` on a free port) and a child of the benchmark (``python -m sim.bench NAME ...``)
whose last line of output is its result as one JSON object.

Both run from the repository root with it on ``PYTHONPATH``: ``sim`` is not installed, and a
crawl measured in a process of its own is measured without the parent's imports and memory.
Only the standard library here: a measured child imports this module too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    """This process's environment with the repository root first on ``PYTHONPATH``."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


def start_web(*serve_args: str) -> tuple[subprocess.Popen, int]:
    """``python -m sim.serve SERVE_ARGS`` on a free port: the process (its stdout a pipe the
    caller closes) and the port, once the server listens."""
    proc = subprocess.Popen([sys.executable, "-m", "sim.serve", "--port", "0", *serve_args],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("PORT "):
            return proc, int(line.split()[1])
    raise RuntimeError("sim.serve did not start")


def run_child(*bench_args: str, what: str = "the child", timeout: float | None = None) -> dict:
    """Run ``python -m sim.bench BENCH_ARGS`` to its end; its result, the JSON object its last
    line of output holds. A failure raises with the tail of the child's stderr."""
    out = subprocess.run([sys.executable, "-m", "sim.bench", *bench_args], cwd=ROOT, env=env(),
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
