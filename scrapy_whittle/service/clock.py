"""Clocks of the re-crawl service: the system's, and a simulated one that jumps when idle.

The service reads the time from a clock (``now()``, seconds, unix-like) and the Scrapy glue
asks it how long to wait before a due time (``wait(until, idle)``, real seconds, or None when
the wait should instead end with the next download). :class:`SystemClock` is the wall clock.
:class:`SimulatedClock` is a discrete-event clock for simulations and tests: time runs at
``speed`` simulated seconds per real second (0: only jumps move it), and when the crawler is
idle (nothing being downloaded) a wait does not sleep: the clock jumps to the due time. A crawl
of 100 simulated hours on a local simulated web then takes as long as its downloads, and with
``speed=0`` its trajectory no longer depends on how fast the machine is.

Other actors on the same simulated time (a simulated WebSub hub that delivers at its own
times, the crawl's WebSub subscriber renewing its leases) register their next time with
:meth:`SimulatedClock.add_horizon`: an idle jump stops there, and while an actor is due and
has not acted, the clock holds and the wait is :data:`HOLD_POLL` real seconds, so the actor
acts at its time and not after a jump past it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

#: real seconds a wait lasts while the clock is held by an actor due now (see above)
HOLD_POLL = 0.002


class Clock(Protocol):
    """What the service and the Scrapy scheduler ask of a clock (``WHITTLE_CLOCK``)."""

    def now(self) -> float: ...

    def wait(self, until: float, idle: bool) -> float | None: ...


class SystemClock:
    """The wall clock (``time.time``)."""

    def now(self) -> float:
        return time.time()

    def wait(self, until: float, idle: bool) -> float | None:
        return max(0.0, until - time.time())

    def __repr__(self) -> str:
        return "SystemClock()"


class SimulatedClock:
    """Simulated time: ``start`` + ``speed`` x real seconds elapsed + the jumps made.

    start: the simulated time when the clock is made (default: the wall clock's).
    speed: simulated seconds per real second between jumps (0: time stands still while the
        crawler is busy, so a download takes no simulated time).
    """

    def __init__(self, start: float | None = None, speed: float = 0.0) -> None:
        if not speed >= 0:
            raise ValueError(f"speed ({speed!r}) must be >= 0")
        self.speed = float(speed)
        self._real0 = time.monotonic()
        self._base = time.time() if start is None else float(start)
        self.jumps = 0
        self._horizons: list[Callable[[], float]] = []

    def add_horizon(self, next_time: Callable[[], float]) -> None:
        """Another actor on this clock: ``next_time()`` is when it acts next (inf: never);
        an idle jump does not go past it (see the module docstring)."""
        self._horizons.append(next_time)

    def remove_horizon(self, next_time: Callable[[], float]) -> None:
        if next_time in self._horizons:
            self._horizons.remove(next_time)

    def horizon(self) -> float:
        """The earliest time an actor acts next (inf: none)."""
        return min((h() for h in self._horizons), default=math.inf)

    def now(self) -> float:
        if not self.speed:
            return self._base
        return self._base + self.speed * (time.monotonic() - self._real0)

    def advance_to(self, t: float) -> None:
        """Jump forward to simulated time ``t`` (never backwards)."""
        now = self.now()
        if t > now:
            self._base += t - now
            self.jumps += 1

    def wait(self, until: float, idle: bool) -> float | None:
        if idle:
            stop = self.horizon()
            if stop < until:
                if stop <= self.now():
                    return HOLD_POLL         # an actor is due: let it act first
                self.advance_to(stop)
                return 0.0
            self.advance_to(until)
            return 0.0
        if self.speed > 0:
            return max(0.0, (until - self.now()) / self.speed)
        return None

    def __copy__(self) -> SimulatedClock:
        return self

    def __deepcopy__(self, memo) -> SimulatedClock:
        # one clock is shared by everything that simulates together (Scrapy deep-copies its
        # settings when it builds a crawler: the copy must be the same clock)
        return self

    def __repr__(self) -> str:
        return f"SimulatedClock(now={self.now():.3f}, speed={self.speed:g})"
