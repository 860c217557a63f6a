"""Dead and silent sources: when a source retires, its probes, and its return.

A source retires

* at once when its feed answers 410 Gone;
* when it has answered 404 ``NOT_FOUND_RUN`` times in a row and has had no new entry for
  ``WHITTLE_RETIRE_404_AFTER`` seconds (one 404 is often a glitch of a site's deployment);
* when its feed answers but has had no new entry for ``WHITTLE_RETIRE_AFTER`` seconds;
* when it is a child sitemap that its sitemap index no longer lists
  (:mod:`scrapy_whittle.service.sources.index_children`; stat ``sources/unlisted``); listed again,
  it comes back at once (``sources/relisted``).

The time without a new entry counts from the source's last new entry, or from its first
fetch if it never had one. A retired source is left out of the policy's choice (it costs no
budget) and probed once every ``WHITTLE_RETIRE_PROBE`` seconds, outside the budget (stat
``probes/crawls``) but within its host's allowance (a probe its host has no crawl left for
this epoch waits for the next), as a feed reader keeps polling a dead feed rarely; a probe
that finds new entries brings it back (stat ``sources/revived``), anything else waits for the
next probe. Each retirement is counted (``sources/retired``) and logged once per source with
its cause.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Callable

from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.once_log import OnceLog
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.types import Crawl, HostLoad, Stats

#: consecutive 404s before a source may retire for them
NOT_FOUND_RUN = 3
#: the consecutive 404s a source's flags can count
NOT_FOUND_CAP = 255


class Retirement:
    """Which sources retire and when the retired ones are probed: ``probes``, a heap of
    (due time, source id), rebuilt from the retired sources' ``retry_at`` at a restore."""

    def __init__(self, config: WhittleConfig, *, sources: SourceTable, stats: Stats,
                 log_once: OnceLog) -> None:
        self.config = config
        self.sources = sources
        self.stats = stats
        self.log_once = log_once
        self.probes: list[tuple[float, int]] = []

    # -- what a crawl showed -------------------------------------------------------------
    def fetched(self, crawl: Crawl, new_items: int, now: float) -> None:
        """A fetch answered (a feed, or 304): ``new_items`` entries were new."""
        src, sid = self.sources, crawl.source
        if src.not_found.item(sid):
            src.not_found[sid] = 0
        if new_items:
            src.alive_at[sid] = now
            if src.retired.item(sid):
                src.set_retired(sid, False)
                self.stats.inc("sources/revived")
                self.log_once(sid, "revived", crawl.url,
                              f"back from retirement: {new_items} new entries",
                              logging.INFO)
            return
        silent = self._silent_for(sid, now)
        after = self.config.retire_after
        if after and silent >= after and not src.retired.item(sid):
            self.retire(crawl, f"no new entry for {silent / 86400.0:.3g} days", now)
        self._next_probe(sid, now)

    def failed(self, crawl: Crawl, kind: str, now: float) -> str | None:
        """A fetch failed with ``kind`` (the stats key under ``errors/``). Returns why the
        source retired, if it did now (the failure's own log line says it: one line)."""
        src, sid = self.sources, crawl.source
        silent = self._silent_for(sid, now)
        cause = None
        if kind == "http_404":
            src.not_found[sid] = min(src.not_found.item(sid) + 1, NOT_FOUND_CAP)
            after = self.config.retire_404_after
            if (after and src.not_found.item(sid) >= NOT_FOUND_RUN and silent >= after
                    and not src.retired.item(sid)):
                cause = (f"{src.not_found.item(sid)} times 404 Not Found, no new entry for "
                         f"{silent / 86400.0:.3g} days")
        elif kind == "http_410" and not src.retired.item(sid):
            cause = "410 Gone"
        if cause is not None:
            self.retire(crawl, cause, now, log=False)
        self._next_probe(sid, now)
        return cause

    def _silent_for(self, sid: int, now: float) -> float:
        """Seconds since the source's last new entry (or its first fetch, which this is when
        it has none)."""
        alive = self.sources.alive_at.item(sid)
        if math.isnan(alive):
            self.sources.alive_at[sid] = alive = now
        return max(now - alive, 0.0)

    def retire(self, crawl: Crawl, cause: str, now: float, log: bool = True) -> None:
        self.sources.set_retired(crawl.source, True)
        self.stats.inc("sources/retired")
        if log:
            self.log_once(crawl.source, "retired", crawl.url, f"retired ({cause}): "
                          f"{self.probing()}")

    def unlisted(self, sid: int, url: str, cause: str, now: float) -> bool:
        """Child sitemap ``sid`` is no longer listed by its index (``cause``): it retires,
        unless retired already. Returns whether it retired now."""
        self.stats.inc("sources/unlisted")
        if self.sources.retired.item(sid):
            return False
        self.sources.set_retired(sid, True)
        self.stats.inc("sources/retired")
        self.log_once(sid, "retired", url, f"retired ({cause}): {self.probing()}")
        self._next_probe(sid, now)
        return True

    def alive(self, sid: int, url: str, now: float) -> bool:
        """Source ``sid`` showed news that is not an entry (a sitemap index naming a new
        child): it is not silent, and back if retired. Returns whether it was retired."""
        src = self.sources
        src.alive_at[sid] = now
        if not src.retired.item(sid):
            return False
        src.set_retired(sid, False)
        self.stats.inc("sources/revived")
        self.log_once(sid, "revived", url, "back from retirement: it names a new child",
                      logging.INFO)
        return True

    def relisted(self, sid: int, url: str, now: float) -> bool:
        """Child sitemap ``sid``, retired for not being listed, is listed again: it is back
        (its next crawl is the policy's to choose). Returns whether it was retired."""
        src = self.sources
        if not src.retired.item(sid):
            return False
        src.set_retired(sid, False)
        src.retry_at[sid] = min(src.retry_at.item(sid), now)
        self.stats.inc("sources/relisted")
        self.log_once(sid, "relisted", url, "listed again by its sitemap index: back from "
                      "retirement", logging.INFO)
        return True

    def probing(self) -> str:
        return (f"probed every {self.config.retire_probe:g} s, outside the budget, until it "
                "has new entries again")

    def _next_probe(self, sid: int, now: float) -> None:
        """A retired source is fetched again (probed) one probe interval later, whatever
        its back-off said."""
        if self.sources.retired.item(sid):
            due = now + self.config.retire_probe
            self.sources.retry_at[sid] = due
            heapq.heappush(self.probes, (due, sid))

    # -- the probes ----------------------------------------------------------------------
    def restore(self, now: float) -> None:
        """The probes of the retired sources, as stored (a restore)."""
        src = self.sources
        self.probes = [(max(src.retry_at.item(sid), now), sid)
                       for sid in src.retired.nonzero()[0].tolist()]
        heapq.heapify(self.probes)

    def next_due(self) -> float:
        return self.probes[0][0] if self.probes else math.inf

    def due_by(self, when: float) -> list[int]:
        """The sources whose probe is due before ``when``."""
        return [sid for due, sid in self.probes if due < when]

    def take(self, now: float, hosts: HostLoad, admit: Callable[[int], bool] | None = None,
             epoch_end: float = math.inf) -> int | None:
        """A retired source whose probe is due now and whose host can take a request, or
        None. A probe whose host is saturated waits at the head of the heap (probes are
        rare: the others wait behind it until the host's download ends); one whose host's
        allowance is spent (``admit(sid)`` false) waits until ``epoch_end``."""
        src, probes = self.sources, self.probes
        while probes and probes[0][0] <= now + 1e-9:
            due, sid = probes[0]
            if not src.retired.item(sid) or src.left.item(sid) or sid in src.in_flight \
                    or src.retry_at.item(sid) > due + 1e-6:
                heapq.heappop(probes)          # back, gone, or due later (pushed again)
                continue
            if hosts.saturated(src.host_names[src.host.item(sid)]):
                return None
            heapq.heappop(probes)
            if admit is not None and not admit(sid):
                src.retry_at[sid] = max(src.retry_at.item(sid), epoch_end)
                heapq.heappush(probes, (epoch_end, sid))
                continue
            return sid
        return None
