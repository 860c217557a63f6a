"""What a crawl measured in a process of its own reads of itself and of the processes beside
it: CPU seconds (from ``/proc``, threads and live children included) and the event-loop
callbacks that held the loop long. Only the standard library: it runs inside the measured
process.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from pathlib import Path


def time_callbacks() -> list[tuple[float, float]]:
    """Record (end, duration) of every event-loop callback longer than 20 ms: how long one
    piece of work (a response through the middlewares and the spider) holds the loop, where
    the sampler's lag also counts the callbacks queued before it."""
    longest: list[tuple[float, float]] = []
    run = asyncio.events.Handle._run

    def timed(handle):
        t = time.perf_counter()
        run(handle)
        end = time.perf_counter()
        if end - t > 0.02:
            longest.append((end, end - t))

    asyncio.events.Handle._run = timed
    return longest


def cpu_with_children() -> float:
    """CPU seconds of this process, of its children that ended, and of those still running
    (the parse workers, read from /proc)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = 0.0
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            live += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + live


def process_cpu(pid: int | str = "self") -> float:
    """User + system CPU seconds of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
