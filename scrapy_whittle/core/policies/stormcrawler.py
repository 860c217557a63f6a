"""StormCrawler's AdaptiveScheduler as configured by Common Crawl's news crawler, as a policy.

StormCrawler (``AdaptiveScheduler.schedule``, org.apache.stormcrawler.persistence) keeps a
fetch interval per URL, in whole minutes, and after each successful fetch (HTTP 200 or 304):

* first fetch (no earlier signature to compare with): the interval is the default one
  (``DefaultScheduler``'s custom interval for the URL, else ``fetchInterval.default``), not
  adapted;
* changed (signature differs):  interval <- (int) ((1 - DEC) * interval + DEC * MIN)
  (``scheduler.adaptive.fetchInterval.rate.decr``): it shrinks towards MIN, more slowly close
  to it;
* unchanged (or 304):           interval <- min((int) (interval * (1 + INC)), MAX)
  (``scheduler.adaptive.fetchInterval.rate.incr``);

and the URL is due again at fetch time + interval. Defaults here are those of Common Crawl's
news crawler (commoncrawl/news-crawl, conf/crawler-conf.yaml) for feeds: MIN 90 min
(``scheduler.adaptive.fetchInterval.min``), MAX 129600 min = 90 days
(``...fetchInterval.max``), INC 0.5, DEC 0.2, first interval 720 min
(``fetchInterval.FETCHED.isFeed=true``). StormCrawler's own defaults (AdaptiveScheduler's
fields, crawler-default.yaml) are MIN 60, MAX 20160 (2 weeks), INC 0.5, DEC 0.5, first interval
1440 (``fetchInterval.default``).

"Changed" is what a feed crawl shows: at least one new entry (``obs.new_items > 0``); the
feed's signature changes when its entries do. Failed crawls leave the schedule as it is (the
source stays due). The sources that are due are crawled, the most overdue first within the
budget; budget that no due source needs is left unused.

Units. Intervals are kept in minutes, as StormCrawler does (its integer truncations included),
and converted to the problem's time unit with ``time_unit_hours`` (hours per time unit;
default 1, the unit of the ``news-mix`` scenario).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import select_due
from scrapy_whittle.core.problem import Problem


def adaptive_interval(interval_minutes, changed, min_minutes: float = 90.0,
                      max_minutes: float = 129_600.0, inc_rate: float = 0.5,
                      dec_rate: float = 0.2) -> np.ndarray:
    """StormCrawler's next interval (minutes) after a fetch that showed ``changed``."""
    interval = np.asarray(interval_minutes, dtype=np.float64)
    shrunk = np.trunc((1.0 - dec_rate) * interval + dec_rate * min_minutes)
    grown = np.minimum(np.trunc(interval * (1.0 + inc_rate)), max_minutes)
    return np.where(changed, shrunk, grown)


class StormCrawlerPolicy(Policy):
    """StormCrawler AdaptiveScheduler, news-crawl's settings (see module doc). Learns from
    observations only.

    initial_interval_minutes: the first interval, after a source's first fetch (720).
    min_interval_minutes, max_interval_minutes: MIN (90) and MAX (129600).
    inc_rate, dec_rate: INC (0.5) and DEC (0.2).
    time_unit_hours: hours in one time unit of the problem.
    """

    name = "stormcrawler"
    per_source = {"interval_minutes": np.nan, "next_fetch": 0.0}

    def __init__(self, problem: Problem, rng=None, initial_interval_minutes: float = 720.0,
                 min_interval_minutes: float = 90.0, max_interval_minutes: float = 129_600.0,
                 inc_rate: float = 0.5, dec_rate: float = 0.2,
                 time_unit_hours: float = 1.0) -> None:
        super().__init__(problem, rng)
        if not 0 < min_interval_minutes <= max_interval_minutes:
            raise ValueError(f"need 0 < min_interval_minutes ({min_interval_minutes!r}) <= "
                             f"max_interval_minutes ({max_interval_minutes!r})")
        if not (initial_interval_minutes > 0 and time_unit_hours > 0):
            raise ValueError("initial_interval_minutes and time_unit_hours must be > 0")
        if not (0 < dec_rate <= 1 and 0 < inc_rate <= 1):
            raise ValueError(f"need 0 < inc_rate ({inc_rate!r}), dec_rate ({dec_rate!r}) <= 1")
        self.initial_interval_minutes = float(initial_interval_minutes)
        self.min_interval_minutes = float(min_interval_minutes)
        self.max_interval_minutes = float(max_interval_minutes)
        self.inc_rate = float(inc_rate)
        self.dec_rate = float(dec_rate)
        self.time_unit_hours = float(time_unit_hours)

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        return select_due(self.next_fetch, epoch * self.problem.period, self.problem.cost,
                          budget, eligible)

    def observe(self, obs: Observation) -> None:
        ok = obs.ok
        ids = obs.sources[ok]
        if ids.size == 0:
            return
        previous = self.interval_minutes[ids]
        first = np.isnan(previous)
        adapted = adaptive_interval(np.where(first, 0.0, previous), obs.new_items[ok] > 0,
                                    self.min_interval_minutes, self.max_interval_minutes,
                                    self.inc_rate, self.dec_rate)
        minutes = np.where(first, self.initial_interval_minutes, adapted)
        self.interval_minutes[ids] = minutes
        self.next_fetch[ids] = (obs.epoch * self.problem.period
                                + minutes / 60.0 / self.time_unit_hours)
