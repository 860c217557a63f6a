"""CommaFeed's empirical refresh interval, as a crawl policy (a feed reader's baseline).

CommaFeed (Athou/commafeed, ``FeedRefreshIntervalCalculator.onFetchSuccess`` /
``computeEmpiricalRefreshInterval``, with ``commafeed.feed-refresh.interval-empirical``, default
true) refreshes a feed next after

* MAX if the feed has no dated entry, or fewer than two entries (no mean gap);
* MAX, MAX / 2 or MAX / 4 if its newest entry is 30, 14 or 7 whole days old or more;
* otherwise half the mean gap between the entries of the fetched document (``FeedParser.
  averageTimeBetweenEntries``: the mean of the gaps between consecutive entries), clamped to
  [INTERVAL, MAX / 4];

the result clamped to [INTERVAL, MAX] (``constrainToBounds``). INTERVAL is
``commafeed.feed-refresh.interval`` (default 5 min), MAX ``commafeed.feed-refresh.max-interval``
(default 4 h; CommaFeedConfiguration.FeedRefresh). A 304 keeps the feed's last mean gap and
newest date. CommaFeed's refresh engine takes the feeds whose ``disabledUntil`` has passed; here
the most overdue first within the budget, and budget no due feed needs is left unused.

The document's entries are the newest ``feed_window`` entries the policy has seen (default 20,
the window of the simulated web's served feeds, sim.web.feedweb), kept per source in time order
(8 bytes each); their mean consecutive gap is (newest - oldest) / (count - 1). Entry times come
from the observation's item times; without them (deterministic simulator), a crawl's
``new_items`` are spread evenly since the previous check (the last week at the first). Failed
crawls leave the schedule as it is (CommaFeed's error back-off is not modelled).

Units. Minutes are converted to the problem's time unit with ``time_unit_hours`` (hours per time
unit; default 1, the unit of the ``news-mix`` scenario).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.columns import Col
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import select_due
from scrapy_whittle.core.policies.entry_window import entry_times
from scrapy_whittle.core.problem import Problem


def commafeed_minutes(mean_gap_minutes, days_since_newest, interval_minutes: float = 5.0,
                      max_interval_minutes: float = 240.0) -> np.ndarray:
    """CommaFeed's empirical refresh interval in minutes; NaN ``mean_gap_minutes``: fewer than
    two entries, NaN ``days_since_newest``: no dated entry."""
    gap = np.asarray(mean_gap_minutes, dtype=np.float64)
    days = np.trunc(np.asarray(days_since_newest, dtype=np.float64))   # ChronoUnit.DAYS
    top = max_interval_minutes
    half_gap = np.clip(gap / 2, interval_minutes, top / 4)
    empirical = np.where(days >= 30, top, np.where(days >= 14, top / 2, np.where(
        days >= 7, top / 4, np.where(np.isnan(gap), top, half_gap))))
    empirical = np.where(np.isnan(days), top, empirical)
    return np.clip(empirical, interval_minutes, top)


class CommaFeedPolicy(Policy):
    """CommaFeed empirical refresh (see module doc). Learns from observations only.

    interval_minutes, max_interval_minutes: CommaFeed's feed-refresh.interval (5) and
        feed-refresh.max-interval (240).
    feed_window: entries in a feed's document (20).
    time_unit_hours: hours in one time unit of the problem.
    """

    name = "commafeed"
    per_source = {"next_refresh": 0.0, "last_check": np.nan}

    def __init__(self, problem: Problem, rng=None, interval_minutes: float = 5.0,
                 max_interval_minutes: float = 240.0, feed_window: int = 20,
                 time_unit_hours: float = 1.0) -> None:
        if not 0 < interval_minutes <= max_interval_minutes / 4:
            raise ValueError(f"need 0 < interval_minutes ({interval_minutes!r}) <= "
                             f"max_interval_minutes / 4 ({max_interval_minutes!r} / 4)")
        if int(feed_window) != feed_window or feed_window < 2:
            raise ValueError(f"feed_window ({feed_window!r}) must be an integer >= 2")
        if not time_unit_hours > 0:
            raise ValueError(f"time_unit_hours ({time_unit_hours!r}) must be > 0")
        self.interval_minutes = float(interval_minutes)
        self.max_interval_minutes = float(max_interval_minutes)
        self.feed_window = int(feed_window)
        self.time_unit_hours = float(time_unit_hours)
        self._minute = 1.0 / 60.0 / self.time_unit_hours                # one minute in units
        super().__init__(problem, rng)

    def _columns(self) -> dict[str, Col]:
        # the entries of each feed's document, oldest first, NaN where it has fewer
        return {**super()._columns(),
                "entries": Col(np.nan, np.float64, width=self.feed_window)}

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        return select_due(self.next_refresh, epoch * self.problem.period, self.problem.cost,
                          budget, eligible)

    def observe(self, obs: Observation) -> None:
        if obs.sources.size == 0:
            return
        for batch in one_per_source(obs.sources, obs.time, obs.ok):
            self._add_entries(obs, batch)
        ids = obs.sources[obs.ok]
        minutes = self.minutes(ids, obs.time[obs.ok])
        self.next_refresh[ids] = obs.epoch * self.problem.period + minutes * self._minute

    def minutes(self, ids, now) -> np.ndarray:
        """The refresh interval (minutes) of sources ``ids`` checked at times ``now``."""
        ids = np.asarray(ids, dtype=np.int64)
        entries = self.entries[ids]
        count = np.sum(~np.isnan(entries), axis=1)
        newest = entries[:, -1]
        oldest = entries[np.arange(ids.size), np.clip(self.feed_window - count, 0,
                                                         self.feed_window - 1)]
        with np.errstate(divide="ignore", invalid="ignore"):
            gap = np.where(count >= 2, (newest - oldest) / (count - 1), np.nan)
        days = (np.asarray(now, dtype=np.float64) - newest) * self.time_unit_hours / 24.0
        return commafeed_minutes(gap / self._minute, days, self.interval_minutes,
                                 self.max_interval_minutes)

    def _add_entries(self, obs: Observation, crawls: np.ndarray) -> None:
        """Put the new entries of ``crawls`` (bool mask, each of a different source) into
        their sources' documents, which keep their newest ``feed_window`` entries."""
        sel = np.flatnonzero(crawls)
        src, now = obs.sources[sel], obs.time[sel]
        off, times = entry_times(obs, sel, self.last_check[src], 7 * 24 / self.time_unit_hours)
        self.last_check[src] = now
        counts = np.diff(off)
        if not counts.any():
            return
        w = self.feed_window
        crawl = np.repeat(np.arange(sel.size), counts)
        times = times[np.lexsort((times, crawl))]           # each crawl's entries, oldest first
        rank = np.arange(off[-1]) - off[crawl]
        keep = rank >= counts[crawl] - w                    # its newest w at most
        new = np.full((sel.size, w), -np.inf)
        new[crawl[keep], (rank - counts[crawl] + w)[keep]] = times[keep]
        old = np.nan_to_num(self.entries[src], nan=-np.inf)
        document = np.sort(np.concatenate([old, new], axis=1), axis=1)[:, -w:]
        self.entries[src] = np.where(np.isinf(document), np.nan, document)
