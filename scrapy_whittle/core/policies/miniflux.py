"""Miniflux's entry-frequency polling scheduler, as a crawl policy (a feed reader's baseline).

With ``POLLING_SCHEDULER=entry_frequency``, Miniflux (``Feed.ScheduleNextCheck`` in
internal/model/feed.go) schedules a feed's next check after each refresh from
``weekly_count``, the number of the feed's entries published in the last 7 days:

* weekly_count = 0:  interval = SCHEDULER_ENTRY_FREQUENCY_MAX_INTERVAL (default 1440 min);
* otherwise:         interval = round(7 * 24 * 60 / (weekly_count * FACTOR)) minutes
  (SCHEDULER_ENTRY_FREQUENCY_FACTOR, default 1), clamped to
  [SCHEDULER_ENTRY_FREQUENCY_MIN_INTERVAL (default 5 min), MAX_INTERVAL];

and the next check is at refresh time + interval. The background scheduler refreshes the feeds
that are due (next check <= now); here the most overdue first within the budget, and budget that
no due feed needs is left unused.

weekly_count counts every entry the policy has seen (from any earlier check) whose publication
time lies in the 7 days before the check, kept as counts of the last eight days (36 bytes a
source; :mod:`~scrapy_whittle.core.policies.entry_window`: exact to the day, the oldest day
counted in part). Without item times (deterministic simulator), a check's ``new_items`` entries
are spread evenly over the time since the previous check (over the last week at the first).

Units. Minutes are converted to the problem's time unit with ``time_unit_hours`` (hours per time
unit; default 1: one epoch of the ``news-mix`` scenario is one hour). The entry times of
observations are read in the time frame of ``obs.time``.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.columns import Col
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import select_due
from scrapy_whittle.core.policies.entry_window import entry_times, slide_and_count
from scrapy_whittle.core.problem import Problem

MINUTES_PER_WEEK = 7 * 24 * 60


def entry_frequency_interval(weekly_count, min_minutes: float = 5.0,
                             max_minutes: float = 1440.0, factor: float = 1.0) -> np.ndarray:
    """Miniflux's next-check interval in minutes from the weekly entry count."""
    weekly = np.asarray(weekly_count, dtype=np.float64)
    with np.errstate(divide="ignore"):
        minutes = np.round(MINUTES_PER_WEEK / (weekly * factor))
    minutes = np.clip(minutes, min_minutes, max_minutes)
    return np.where(weekly > 0, minutes, max_minutes)


class MinifluxPolicy(Policy):
    """Miniflux entry_frequency scheduler (see module doc). Learns from observations only.

    min_interval_minutes, max_interval_minutes, factor: Miniflux's
        SCHEDULER_ENTRY_FREQUENCY_MIN_INTERVAL (5), _MAX_INTERVAL (1440) and _FACTOR (1).
    time_unit_hours: hours in one time unit of the problem.
    """

    name = "miniflux"
    per_source = {"next_check": 0.0, "last_check": np.nan, "weekly_count": 0,
                  "day_counts": Col(0, np.uint32, width=8),     # entries per day, oldest first
                  "newest_day": Col(np.iinfo(np.int32).min, np.int32)}

    def __init__(self, problem: Problem, rng=None, min_interval_minutes: float = 5.0,
                 max_interval_minutes: float = 1440.0, factor: float = 1.0,
                 time_unit_hours: float = 1.0) -> None:
        super().__init__(problem, rng)
        if not 0 < min_interval_minutes <= max_interval_minutes:
            raise ValueError(f"need 0 < min_interval_minutes ({min_interval_minutes!r}) <= "
                             f"max_interval_minutes ({max_interval_minutes!r})")
        if not (factor > 0 and time_unit_hours > 0):
            raise ValueError("factor and time_unit_hours must be > 0")
        self.min_interval_minutes = float(min_interval_minutes)
        self.max_interval_minutes = float(max_interval_minutes)
        self.factor = float(factor)
        self.time_unit_hours = float(time_unit_hours)
        self._day = 24.0 / self.time_unit_hours                        # one day in time units
        self._week = 7 * self._day

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        return select_due(self.next_check, epoch * self.problem.period, self.problem.cost,
                          budget, eligible)

    def observe(self, obs: Observation) -> None:
        ids = obs.sources
        if ids.size == 0:
            return
        # a source checked twice in the batch: its checks one pass each, in time order
        for batch in one_per_source(ids, obs.time, obs.ok):
            self._count(obs, batch)
        ok_ids = ids[obs.ok]
        minutes = entry_frequency_interval(self.weekly_count[ok_ids], self.min_interval_minutes,
                                           self.max_interval_minutes, self.factor)
        interval = minutes / 60.0 / self.time_unit_hours
        self.next_check[ok_ids] = obs.epoch * self.problem.period + interval

    def _count(self, obs: Observation, crawls: np.ndarray) -> None:
        """Add the new entries of ``crawls`` (bool mask, each of a different source) to their
        sources' day counts, and set their weekly counts at the time of the check."""
        sel = np.flatnonzero(crawls)
        src, now = obs.sources[sel], obs.time[sel]
        off, times = entry_times(obs, sel, self.last_check[src], self._week)
        counts, newest, weekly = slide_and_count(self.day_counts[src], self.newest_day[src],
                                                 now, off, times, self._day)
        self.weekly_count[src] = np.round(weekly)
        self.day_counts[src] = counts
        self.newest_day[src] = newest
        self.last_check[src] = now

    def interval(self, ids=None) -> np.ndarray:
        """The current next-check interval (time units) of ``ids`` (default all)."""
        ids = np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)
        minutes = entry_frequency_interval(self.weekly_count[ids], self.min_interval_minutes,
                                           self.max_interval_minutes, self.factor)
        return minutes / 60.0 / self.time_unit_hours
