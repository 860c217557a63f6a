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
time lies in the 7 days before the check. Publication times come from the observation's item
times; when it carries none (deterministic simulator), the ``new_items`` entries are spread
evenly over the time since the previous check (or over the last week at the first check).

Units. Minutes are converted to the problem's time unit with ``time_unit_hours`` (hours per time
unit; default 1: one epoch of the ``news-mix`` scenario is one hour). The entry times of
observations are read in the time frame of ``obs.time``.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.observation import Observation
from scrapy_whittle.policies.base import BasePolicy
from scrapy_whittle.problem import Problem
from scrapy_whittle.selection import select_top

MINUTES_PER_WEEK = 7 * 24 * 60


def entry_frequency_interval(weekly_count, min_minutes: float = 5.0,
                             max_minutes: float = 1440.0, factor: float = 1.0) -> np.ndarray:
    """Miniflux's next-check interval in minutes from the weekly entry count."""
    weekly = np.asarray(weekly_count, dtype=np.float64)
    with np.errstate(divide="ignore"):
        minutes = np.round(MINUTES_PER_WEEK / (weekly * factor))
    minutes = np.clip(minutes, min_minutes, max_minutes)
    return np.where(weekly > 0, minutes, max_minutes)


class MinifluxPolicy(BasePolicy):
    """Miniflux entry_frequency scheduler (see module doc). Learns from observations only.

    min_interval_minutes, max_interval_minutes, factor: Miniflux's
        SCHEDULER_ENTRY_FREQUENCY_MIN_INTERVAL (5), _MAX_INTERVAL (1440) and _FACTOR (1).
    time_unit_hours: hours in one time unit of the problem.
    """

    name = "miniflux"
    per_source = {"next_check": 0.0, "last_check": np.nan, "weekly_count": 0}

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
        self._week = MINUTES_PER_WEEK / 60.0 / self.time_unit_hours   # 7 days in time units
        self._entries: dict[int, np.ndarray] = {}   # publication times seen in the last week

    def select(self, epoch: int, budget: float) -> np.ndarray:
        if self.n == 0 or budget <= 0:
            return np.zeros(0, dtype=np.int64)
        overdue = epoch * self.problem.period - self.next_check
        return select_top(overdue, self.problem.cost, budget, eligible=overdue >= 0)

    def _entry_times(self, obs: Observation, j: int, i: int) -> np.ndarray:
        if obs.item_offsets is not None:
            return obs.items_of(j)[0]
        n_new = int(obs.new_items[j])
        if n_new <= 0:
            return np.zeros(0)
        now = float(obs.time[j])
        prev = self.last_check[i]
        prev = now - self._week if np.isnan(prev) else min(prev, now)
        return prev + (now - prev) * (np.arange(n_new) + 0.5) / n_new

    def observe(self, obs: Observation) -> None:
        ids = obs.sources
        if ids.size == 0:
            return
        for j in np.flatnonzero(obs.ok):
            i = int(ids[j])
            now = float(obs.time[j])
            times = np.concatenate([self._entries.get(i, np.zeros(0)),
                                    self._entry_times(obs, int(j), i)])
            times = times[times > now - self._week]
            self._entries[i] = times
            self.weekly_count[i] = int(np.count_nonzero(times <= now))
            self.last_check[i] = now
        ok_ids = ids[obs.ok]
        minutes = entry_frequency_interval(self.weekly_count[ok_ids], self.min_interval_minutes,
                                           self.max_interval_minutes, self.factor)
        interval = minutes / 60.0 / self.time_unit_hours
        self.next_check[ok_ids] = obs.epoch * self.problem.period + interval

    def interval(self, ids=None) -> np.ndarray:
        """The current next-check interval (time units) of ``ids`` (default all)."""
        ids = np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)
        minutes = entry_frequency_interval(self.weekly_count[ids], self.min_interval_minutes,
                                           self.max_interval_minutes, self.factor)
        return minutes / 60.0 / self.time_unit_hours

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["entries"] = {int(k): v.copy() for k, v in self._entries.items()}
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._entries = {int(k): np.asarray(v, dtype=np.float64)
                         for k, v in state.get("entries", {}).items()}
