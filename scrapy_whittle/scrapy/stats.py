"""The ``whittle/*`` stats and a periodic progress line (like Scrapy's LogStats).

Keys (all under ``whittle/``):

* ``crawls``: source requests handed to the downloader (budget spent, in crawls);
  ``crawls/cost``: the same in cost units; ``fetched``: source responses observed;
* ``new_items``, ``utility`` (value captured, see docs/scrapy.md), ``missed_items`` (entries
  lost to full feed windows, estimated from each source's publishing rate between the oldest
  visible entry and the previous crawl), ``window_full`` (crawls that found every visible
  entry new);
* the users' measures (computed by the service, :mod:`scrapy_whittle.service.decisions.measures`):
  ``delay/mean_s``, ``delay/median_s``, ``delay/p90_s`` (seconds from an entry's publication
  to its capture, over the dated entries re-crawls found), ``crawls_per_item`` (crawls per
  new entry);
* ``not_modified`` (HTTP 304), ``errors/<kind>`` (the kinds of ``scrapy_whittle.scrapy.errors``:
  ``http_404``, ``timeout``, ``malformed``...), ``warnings`` and ``warnings/<notice>``
  (usable feeds with defects: ``no_dates``, ``duplicate_ids``, ``too_many_entries``...),
  ``skipped`` (planned crawls dropped at the end of their epoch: slot busy, source in flight);
* what was kept within plausible ranges (``scrapy_whittle.core.sanitize``): ``clipped/value``,
  ``clipped/published``, ``bursts`` (fetches that taught only part of their unseen entries),
  ``state_resets`` (sources whose learned state went bad, reset to their prior);
* ``site_search/*``: sites' addresses searched for their feeds, the feeds found, the sites
  without feeds (:mod:`scrapy_whittle.scrapy.site_search`);
* ``sources``, ``sources/skipped`` (bad entries left out of the latest read of the source
  list), ``epochs``, ``decision/<policy>/seconds`` and ``decision/<policy>/calls``
  (time spent choosing sources), ``decision/<policy>/us_per_crawl`` at close.

In a cluster process (``cluster``) ``crawls`` and the counts of fetches are this process's
(what its downloader fetched), the planner's under ``planner/`` when the process is the
planner, and ``cluster/crawls`` and ``cluster/sources`` the whole cluster's (read from Redis
every second). Its progress line shows both: what this process did, what the cluster did.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from scrapy.utils.asyncio import create_looping_call

logger = logging.getLogger(__name__)

PREFIX = "whittle/"


class WhittleStats:
    """The re-crawl service's stats (``scrapy_whittle.service.recrawl.Stats``) and the periodic log
    line. The counts are kept here, in a plain dict, and copied into Scrapy's stats collector
    (under ``whittle/``) every ``SYNC_EVERY`` seconds and when the crawl closes: each crawl
    updates several of them, and Scrapy's collector costs microseconds per call."""

    SYNC_EVERY = 1.0

    def __init__(self, stats: Any, interval: float = 60.0, policy: str = "",
                 cluster: bool = False) -> None:
        self.stats = stats
        self.cluster = cluster
        self.interval = interval
        self.policy = policy
        self.values: dict[str, Any] = {}
        self._task = None
        self._sync_task = None
        self._prev: tuple[float, float, float, float] | None = None

    def inc(self, key: str, count: float = 1) -> None:
        values = self.values
        values[key] = values.get(key, 0) + count

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value

    def get(self, key: str, default: Any = 0) -> Any:
        return self.values.get(key, default)

    def sync(self) -> None:
        """Copy the counts into Scrapy's stats collector."""
        if self.stats is not None:
            for key, value in self.values.items():
                self.stats.set_value(PREFIX + key, value)

    # -- periodic line ------------------------------------------------------------------
    def start(self) -> None:
        if self._sync_task is None:
            self._sync_task = create_looping_call(self.sync)
            self._sync_task.start(self.SYNC_EVERY, now=False)
        if self.interval > 0 and self._task is None:
            self._prev = (time.monotonic(), self.get("crawls"), self.get("utility", 0.0),
                          self.get("cluster/crawls"))
            self._task = create_looping_call(self.log)
            self._task.start(self.interval, now=False)

    def log(self) -> None:
        now = time.monotonic()
        crawls, utility = self.get("crawls"), self.get("utility", 0.0)
        everyone = self.get("cluster/crawls")
        t_prev, c_prev, u_prev, e_prev = self._prev or (now, 0, 0.0, 0)
        minutes = max(now - t_prev, 1e-9) / 60.0
        errors = sum(v for k, v in self.values.items() if k.startswith("errors/"))
        self._prev = (now, crawls, utility, everyone)
        if self.cluster:
            logger.info(
                "Whittle (%s): this process %d crawls (at %.1f/min), %d new items, utility "
                "%.4g (at %.4g/min), %d not modified, %d errors; the cluster %d crawls (at "
                "%.1f/min), %d sources",
                self.policy, crawls, (crawls - c_prev) / minutes, self.get("new_items"),
                utility, (utility - u_prev) / minutes, self.get("not_modified"), errors,
                everyone, (everyone - e_prev) / minutes, self.get("cluster/sources"))
            return
        logger.info(
            "Whittle (%s): %d crawls (at %.1f/min), %d new items, utility %.4g "
            "(at %.4g/min), %d not modified, %d errors, %d sources",
            self.policy, crawls, (crawls - c_prev) / minutes, self.get("new_items"), utility,
            (utility - u_prev) / minutes, self.get("not_modified"), errors, self.get("sources"))

    def stop(self) -> None:
        for task in (self._task, self._sync_task):
            if task is not None and task.running:
                task.stop()
        self._task = self._sync_task = None
        crawls = self.get("crawls")
        seconds = self.get(f"decision/{self.policy}/seconds", 0.0)
        if crawls and not self.cluster:     # a cluster's decisions are its planner's
            self.set(f"decision/{self.policy}/us_per_crawl", 1e6 * seconds / crawls)
        self.sync()
        logger.info("Whittle summary:\n  %s", "\n  ".join(summary_lines(self.values)))


def summary_lines(values: dict[str, Any]) -> list[str]:
    """What a crawl did, in a news reader's terms, from its ``whittle/`` stats (without the
    prefix): what every crawl logs when it closes."""
    get = values.get
    errors = sum(v for k, v in values.items() if k.startswith("errors/"))
    first = (f"crawls {get('crawls', 0)}, new stories {get('new_items', 0)}, utility "
             f"captured {get('utility', 0.0):.1f}, not modified {get('not_modified', 0)}, "
             f"errors {errors}")
    if get("budget_used") is not None:
        first += f", budget used {get('budget_used'):.1%}"
    outside = get("discovery/crawls", 0) + get("probes/crawls", 0)
    if outside:                          # first fetches and probes: beyond the budget
        first += f", {outside} crawls outside the budget (first fetches, probes)"
    lines = [first]
    if get("delay/mean_s") is not None:
        lines.append(f"discovery delay of the stories re-crawls found (publication to "
                     f"capture; a feed's first look finds its backlog): mean "
                     f"{_duration(get('delay/mean_s'))}, median "
                     f"{_duration(get('delay/median_s'))}, p90 {_duration(get('delay/p90_s'))}")
    if get("missed_items") is not None:
        lines.append(f"stories lost to full feed windows since the first looks: about "
                     f"{get('missed_items'):.0f} (an estimate: the entries the learned "
                     "publishing rates say a feed pushed out of its window between two crawls)")
    return lines


def _duration(seconds: float) -> str:
    """Seconds as a reader says them: 45 s, 12.5 min, 3.2 h."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
