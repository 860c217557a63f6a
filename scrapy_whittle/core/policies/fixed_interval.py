"""Every feed every ``interval``: the default of many feed readers, as a crawl policy.

Most feed readers poll each subscription on one global interval unless told otherwise
(Tiny Tiny RSS's default update interval, FreshRSS's TTL, CommaFeed with
``commafeed.feed-refresh.interval-empirical=false``, Miniflux's round-robin scheduler): after
each fetch the feed is due again ``interval`` later, whatever the fetch showed. Default one
hour (``interval_minutes=60``). The sources that are due are crawled, the most overdue first
within the budget; budget that no due source needs is left unused.

Units. ``interval_minutes`` is converted to the problem's time unit with ``time_unit_hours``
(hours per time unit; default 1, the unit of the ``news-mix`` scenario).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import select_due
from scrapy_whittle.core.problem import Problem


class FixedIntervalPolicy(Policy):
    """Each source due ``interval_minutes`` after its last successful crawl (see module doc).

    interval_minutes: the polling interval (60).
    time_unit_hours: hours in one time unit of the problem.
    """

    name = "fixed-interval"
    per_source = {"next_fetch": 0.0}

    def __init__(self, problem: Problem, rng=None, interval_minutes: float = 60.0,
                 time_unit_hours: float = 1.0) -> None:
        super().__init__(problem, rng)
        if not (interval_minutes > 0 and time_unit_hours > 0):
            raise ValueError(f"interval_minutes ({interval_minutes!r}) and time_unit_hours "
                             f"({time_unit_hours!r}) must be > 0")
        self.interval_minutes = float(interval_minutes)
        self.time_unit_hours = float(time_unit_hours)

    @property
    def interval(self) -> float:
        """The interval in the problem's time unit."""
        return self.interval_minutes / 60.0 / self.time_unit_hours

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        return select_due(self.next_fetch, epoch * self.problem.period, self.problem.cost,
                          budget, eligible)

    def observe(self, obs: Observation) -> None:
        ids = obs.sources[obs.ok]
        self.next_fetch[ids] = obs.epoch * self.problem.period + self.interval
