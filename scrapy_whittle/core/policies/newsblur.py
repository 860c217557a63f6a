"""NewsBlur's feed fetch scheduling, as a crawl policy (a feed reader's baseline).

NewsBlur (samuelclay/NewsBlur, apps/rss_feeds/models.py; read in its 2024 form) schedules a
feed after each fetch in ``Feed.set_next_scheduled_update`` from the minutes that
``Feed.get_next_scheduled_update`` computes out of ``spd``, stories per day (``stories_last_month
/ 30``, the feed's stories dated in the last 30 days: ``Feed.save_feed_stories_last_month``), and
``subs = active_premium_subscribers + (active_subscribers - active_premium_subscribers) / 10``:

* spd >= 1:      6 min if subs >= 10, 15 if subs > 1, else 45;
* 0 < spd < 1:   60 (1 - spd) if subs > 1, else 360 (1 - spd);
* spd = 0:       360 if subs > 1, 720 if subs = 1, else 1440; times max(1, months since the
  feed's last story) (``last_story_date``; now when the feed has none; a month is 30 days);
* capped at 240 min (4 h) when subs >= 1, at 2880 (48 h) otherwise;

and the next fetch is at now + minutes + a random delay, ``randint(0, int(minutes)) / 4``
(``randint(0, int(minutes))`` when minutes <= 5). NewsBlur's task server queues the feeds that are
due; here the most overdue first within the budget, and budget no due feed needs is left unused.

Subscribers are constructor options, the same for every source: by default one active
subscriber, not premium (subs = 0.1: 45 min for a feed of a story a day or more, 48 h at most).
Not modelled: push (PubSubHubbub) feeds (x 12), feeds with notifications (30 min at most), pro
subscribers (``PRO_MINUTES_BETWEEN_FETCHES``), site-specific minimums (Craigslist, Twitter,
forbidden feeds) and the error back-off (failed crawls leave the schedule as it is: the source
stays due).

stories_last_month counts every entry the policy has seen dated in the 30 days before the
check, kept as counts of the last 31 days (124 bytes a source; see
:mod:`~scrapy_whittle.core.policies.entry_window`); without item times, a check's
``new_items`` entries are spread evenly since the previous check (the last 30 days at the first).

Units. Minutes are converted to the problem's time unit with ``time_unit_hours`` (hours per time
unit; default 1, the unit of the ``news-mix`` scenario). The random delay draws from the
policy's generator (``rng``); ``random_delay=False`` leaves it out.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.columns import Col
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import select_due
from scrapy_whittle.core.policies.entry_window import entry_times, slide_and_count
from scrapy_whittle.core.problem import Problem

DAYS_PER_MONTH = 30


def newsblur_minutes(stories_last_month, months_since_last_story=0.0,
                     active_subscribers: float = 1, premium_subscribers: float = 0
                     ) -> np.ndarray:
    """``Feed.get_next_scheduled_update``: minutes to the next fetch (before the random delay)."""
    spd = np.asarray(stories_last_month, dtype=np.float64) / DAYS_PER_MONTH
    months = np.asarray(months_since_last_story, dtype=np.float64)
    subs = premium_subscribers + (active_subscribers - premium_subscribers) / 10.0
    frequent = 6.0 if subs >= 10 else 15.0 if subs > 1 else 45.0
    some = (60.0 if subs > 1 else 360.0) * (1.0 - spd)
    quiet = (360.0 if subs > 1 else 720.0 if subs == 1 else 1440.0) * np.maximum(1.0, months)
    total = np.where(spd >= 1, frequent, np.where(spd > 0, some, quiet))
    return np.minimum(total, 240.0 if subs >= 1 else 2880.0)


class NewsBlurPolicy(Policy):
    """NewsBlur feed scheduling (see module doc). Learns from observations only.

    active_subscribers, premium_subscribers: NewsBlur's active_subscribers (1) and
        active_premium_subscribers (0), for every source.
    random_delay: add NewsBlur's random delay (True).
    time_unit_hours: hours in one time unit of the problem.
    """

    name = "newsblur"
    per_source = {"next_update": 0.0, "last_check": np.nan, "last_story": np.nan,
                  "stories_last_month": Col(0, np.int32),
                  "day_counts": Col(0, np.uint32, width=DAYS_PER_MONTH + 1),
                  "newest_day": Col(np.iinfo(np.int32).min, np.int32)}

    def __init__(self, problem: Problem, rng=None, active_subscribers: float = 1,
                 premium_subscribers: float = 0, random_delay: bool = True,
                 time_unit_hours: float = 1.0) -> None:
        super().__init__(problem, rng)
        if not 0 <= premium_subscribers <= active_subscribers:
            raise ValueError(f"need 0 <= premium_subscribers ({premium_subscribers!r}) <= "
                             f"active_subscribers ({active_subscribers!r})")
        if not time_unit_hours > 0:
            raise ValueError(f"time_unit_hours ({time_unit_hours!r}) must be > 0")
        self.active_subscribers = float(active_subscribers)
        self.premium_subscribers = float(premium_subscribers)
        self.random_delay = bool(random_delay)
        self.time_unit_hours = float(time_unit_hours)
        self._day = 24.0 / self.time_unit_hours                        # one day in time units

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        return select_due(self.next_update, epoch * self.problem.period, self.problem.cost,
                          budget, eligible)

    def observe(self, obs: Observation) -> None:
        if obs.sources.size == 0:
            return
        for batch in one_per_source(obs.sources, obs.time, obs.ok):
            self._count(obs, batch)
        ids = obs.sources[obs.ok]
        minutes = self.minutes(ids, obs.time[obs.ok])
        if self.random_delay:
            whole = self.rng.integers(0, np.floor(minutes).astype(np.int64) + 1)
            minutes = minutes + np.where(minutes <= 5, whole, whole / 4.0)
        self.next_update[ids] = (obs.epoch * self.problem.period
                                 + minutes / 60.0 / self.time_unit_hours)

    def minutes(self, ids, now) -> np.ndarray:
        """Minutes to the next fetch of sources ``ids`` at times ``now`` (no random delay)."""
        ids = np.asarray(ids, dtype=np.int64)
        now = np.broadcast_to(np.asarray(now, dtype=np.float64), ids.shape)
        last = self.last_story[ids]
        last = np.where(np.isnan(last) | (last > now), now, last)
        months = (now - last) / (DAYS_PER_MONTH * self._day)
        return newsblur_minutes(self.stories_last_month[ids], months, self.active_subscribers,
                                self.premium_subscribers)

    def _count(self, obs: Observation, crawls: np.ndarray) -> None:
        """Count the new entries of ``crawls`` (bool mask, each of a different source) into
        their sources' last 30 days, and note their newest story."""
        sel = np.flatnonzero(crawls)
        src, now = obs.sources[sel], obs.time[sel]
        off, times = entry_times(obs, sel, self.last_check[src], DAYS_PER_MONTH * self._day)
        counts, newest, month = slide_and_count(self.day_counts[src], self.newest_day[src], now,
                                                off, times, self._day)
        self.stories_last_month[src] = np.round(month)
        self.day_counts[src] = counts
        self.newest_day[src] = newest
        self.last_check[src] = now
        has = np.diff(off) > 0
        if has.any():
            latest = np.maximum.reduceat(times, off[:-1][has])
            prev = self.last_story[src[has]]
            self.last_story[src[has]] = np.fmax(prev, latest)
