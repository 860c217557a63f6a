"""Apache Nutch's adaptive re-fetch schedule, as a crawl policy (a practitioners' baseline).

Nutch's ``AdaptiveFetchSchedule`` (org.apache.nutch.crawl, settings in nutch-default.xml) keeps
a re-fetch interval per page and, after each fetch,

* page modified:     interval <- interval * (1 - DEC_RATE)   (db.fetch.schedule.adaptive.dec_rate,
  default 0.2);
* page not modified: interval <- interval * (1 + INC_RATE)   (db.fetch.schedule.adaptive.inc_rate,
  default 0.4);
* optionally (db.fetch.schedule.adaptive.sync_delta, default true in Nutch, off here unless
  ``sync_delta=True``): with delta = fetch time - last modification time, interval <-
  max(interval, delta) and the next fetch counts from fetch time - delta * SYNC_DELTA_RATE
  (db.fetch.schedule.adaptive.sync_delta_rate, default 0.3) instead of the fetch time;
* interval clamped to [MIN_INTERVAL, MAX_INTERVAL] (db.fetch.schedule.adaptive.min_interval,
  60 s; db.fetch.schedule.adaptive.max_interval, 365 days);

and the page is due again at (reference time + interval). Nutch's generator fetches only due
pages (fetch time <= now), best first; here the most overdue first, within the budget, and
budget that no due source needs is left unused, as in Nutch.

"Modified" is what a feed crawl shows: at least one new entry (``obs.new_items > 0``). The last
modification time is the newest new entry's publication time when the observation carries item
times, the fetch time otherwise.

Units. Intervals are in the problem's time unit (epoch = ``problem.period`` units); Nutch's
defaults in seconds are converted with ``time_unit_hours`` (hours per time unit; default 1, the
unit of the ``news-mix`` scenario). ``initial_interval`` defaults not to Nutch's 30 days
(db.fetch.interval.default), which would leave a news crawler idle for a month, but to the cycle
that spends the budget exactly when every source is crawled equally often,
N * mean(C) / budget epochs (fixed at the first ``select``).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import select_due
from scrapy_whittle.core.problem import Problem

SECONDS_PER_DAY = 86_400.0


class NutchAdaptivePolicy(Policy):
    """Nutch AdaptiveFetchSchedule (see module doc). Learns from observations only.

    initial_interval: first re-fetch interval (time units); None: N mean(C) / budget epochs.
    min_interval, max_interval: clamp (time units); None: Nutch's 60 s and 365 days.
    inc_rate, dec_rate: Nutch's INC_RATE (0.4) and DEC_RATE (0.2).
    sync_delta, sync_delta_rate: Nutch's SYNC_DELTA (off here) and SYNC_DELTA_RATE (0.3).
    time_unit_hours: hours in one time unit of the problem, for Nutch's defaults.
    """

    name = "nutch"
    per_source = {"interval": np.nan, "next_fetch": 0.0, "modified": np.nan}
    scalar_state = ("initial_interval",)

    def __init__(self, problem: Problem, rng=None, initial_interval: float | None = None,
                 min_interval: float | None = None, max_interval: float | None = None,
                 inc_rate: float = 0.4, dec_rate: float = 0.2, sync_delta: bool = False,
                 sync_delta_rate: float = 0.3, time_unit_hours: float = 1.0) -> None:
        super().__init__(problem, rng)
        if not time_unit_hours > 0:
            raise ValueError(f"time_unit_hours ({time_unit_hours!r}) must be > 0")
        unit = 3600.0 * time_unit_hours
        self.time_unit_hours = float(time_unit_hours)
        self.min_interval = 60.0 / unit if min_interval is None else float(min_interval)
        self.max_interval = (365 * SECONDS_PER_DAY / unit if max_interval is None
                             else float(max_interval))
        if not 0 < self.min_interval <= self.max_interval:
            raise ValueError(f"need 0 < min_interval ({self.min_interval!r}) <= max_interval "
                             f"({self.max_interval!r})")
        if not (0 <= dec_rate < 1 and inc_rate >= 0):
            raise ValueError(f"need 0 <= dec_rate ({dec_rate!r}) < 1 and inc_rate "
                             f"({inc_rate!r}) >= 0")
        if initial_interval is not None and not initial_interval > 0:
            raise ValueError(f"initial_interval ({initial_interval!r}) must be > 0")
        self.initial_interval = initial_interval
        self.inc_rate = float(inc_rate)
        self.dec_rate = float(dec_rate)
        self.sync_delta = bool(sync_delta)
        self.sync_delta_rate = float(sync_delta_rate)

    def _start_interval(self, budget: float) -> float:
        if self.initial_interval is None:
            cycle = self.n * float(np.mean(self.problem.cost)) / budget
            self.initial_interval = max(1.0, cycle) * self.problem.period
        return float(np.clip(self.initial_interval, self.min_interval, self.max_interval))

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        if self.n == 0 or budget <= 0:
            return np.zeros(0, dtype=np.int64)
        fresh = np.isnan(self.interval)
        if fresh.any():
            self.interval[fresh] = self._start_interval(budget)
        return select_due(self.next_fetch, epoch * self.problem.period, self.problem.cost,
                          budget, eligible)

    def observe(self, obs: Observation) -> None:
        ok = obs.ok
        ids = obs.sources[ok]
        if ids.size == 0:
            return
        start = self.initial_interval if self.initial_interval is not None else 1.0
        interval = np.where(np.isnan(self.interval[ids]), start, self.interval[ids])
        changed = obs.new_items[ok] > 0
        interval = np.where(changed, interval * (1.0 - self.dec_rate),
                            interval * (1.0 + self.inc_rate))
        fetch_time = obs.time[ok]
        modified = self.modified[ids]
        newest = fetch_time.copy()
        if obs.item_offsets is not None and obs.item_published.size:
            off = obs.item_offsets
            has = (np.diff(off) > 0)
            latest = np.full(has.shape[0], np.nan)
            latest[has] = np.maximum.reduceat(obs.item_published, off[:-1][has])
            newest = np.where(np.isnan(latest[ok]), newest, latest[ok])
        modified = np.where(changed, newest, modified)
        self.modified[ids] = modified
        ref = np.full(ids.shape[0], obs.epoch * self.problem.period, dtype=np.float64)
        if self.sync_delta:
            delta = np.where(np.isnan(modified), 0.0, fetch_time - modified)
            interval = np.maximum(interval, delta)
            ref = ref - delta * self.sync_delta_rate
        interval = np.clip(interval, self.min_interval, self.max_interval)
        self.interval[ids] = interval
        self.next_fetch[ids] = ref + interval
