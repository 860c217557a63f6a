"""The re-crawl service's host allowances: each epoch's selection within them, and each
crawl's answer heard by its host.

:class:`~scrapy_whittle.service.host_allowances.HostAllowances` holds the rule (limits from
``WHITTLE_HOST_LIMITS``, AIMD throttling); :class:`HostThrottle` wires it in:

* :meth:`HostThrottle.select`: while any host has a finite allowance (a limit, a delay, a
  throttle) the policy's choice goes through
  :func:`~scrapy_whittle.core.selection.select_within_hosts` with each host's cap of the
  epoch, less what the epoch's first fetches and probes of the host will take; while none
  has, it is the policy's own selection, at no extra cost.
* :meth:`HostThrottle.admit`: a first fetch (``WHITTLE_DISCOVERY``) or a retired source's
  probe spends a crawl of its host's allowance, or waits for a later epoch when none is
  left (or the host is stopped or held).
* :meth:`HostThrottle.heard`: a good answer (a feed, a 304) counts towards the host's recovery
  at the epoch's end; a 429 or 503 (``http_429``, ``http_503``) or a burst of 403s cuts its
  allowance. A host without an allowance gets one at its first overload, from the crawls it
  took this epoch, so its fifty feeds do not each find the limit. A host cut this epoch gets
  nothing more of it (``stopped``), and with Retry-After nothing before then either.
* The overload must be the host's, not one feed's. A rate limit refuses every request past
  its threshold: a host of several sources is cut only once two of its sources answered
  429/503 with no good answer from the host in between (403: ``FORBIDDEN_BURST`` distinct
  sources), each of them a source that answered well before and fails for the first time
  in a row. A feed that answers 503 to everything (a broken one, or one with a limit of its
  own) backs off alone, as any failing source does, and does not starve the other feeds of
  its host; on a crawl's first visits, before any source of a host has answered, refusals
  are each source's own (a host's limit is learnt from the second epoch it objects in).

Stats: ``hosts/throttled`` (hosts below their limit now), ``hosts/decreases`` (cuts so far).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from scrapy_whittle.core.selection import select_within_hosts
from scrapy_whittle.service.epochs import Timeline
from scrapy_whittle.service.host_allowances import FORBIDDEN_BURST, HostAllowances
from scrapy_whittle.service.source_state import SourceState
from scrapy_whittle.service.source_table import SourceTable
from scrapy_whittle.service.types import Crawl, Stats

#: the error kinds a host says it is overloaded with
OVERLOAD = frozenset({"http_429", "http_503"})
FORBIDDEN = "http_403"


class HostThrottle:
    """See the module docstring. ``allowances``: the hosts' allowances; ``stopped``: ids of
    the hosts that get no more crawls this epoch; ``held``: host id -> time before which it
    gets none (its Retry-After)."""

    def __init__(self, limits: dict[str, float] | None, *, sources: SourceTable,
                 state: SourceState, timeline: Timeline, stats: Stats,
                 slot_delays: dict[str, float] | None = None, default_delay: float = 0.0
                 ) -> None:
        self.allowances = HostAllowances(limits, period=timeline.period,
                                         slot_delays=slot_delays, default_delay=default_delay)
        self.sources = sources
        self.state = state
        self.timeline = timeline
        self.stats = stats
        self.stopped: set[int] = set()
        self.held: dict[int, float] = {}
        #: host id -> the sources that answered 429/503 (or 403) since its last good answer
        self.overloads: dict[int, set[int]] = {}
        self.forbids: dict[int, set[int]] = {}

    def limited(self) -> bool:
        """Whether any host has a finite allowance (or is held by a Retry-After)."""
        return bool(self.held) or self.allowances.limited()

    def set_crawl_delay(self, host: str, delay: float) -> bool:
        """A robots.txt ``Crawl-delay`` of ``host``: its allowance from now on. Returns
        whether it changed anything."""
        return self.allowances.set_crawl_delay(host, delay)

    # -- the selection ------------------------------------------------------------------
    def select(self, select: Callable, epoch: int, budget: float, cost: np.ndarray,
               eligible: np.ndarray | None, now: float,
               reserved: Callable[[], np.ndarray] | None = None) -> np.ndarray:
        """Epoch ``epoch``'s choice (``select(budget, eligible)``: the policy's, best first),
        each host within its allowance. ``reserved()``: the sources to be fetched this epoch
        outside the plan (first fetches, probes): as much of their hosts' allowances as
        they take is kept for them (:meth:`admit`)."""
        self.allowances.start_epoch(epoch)
        self.stopped.clear()
        self.overloads.clear()
        self.forbids.clear()
        self.held = {h: until for h, until in self.held.items() if until > now}
        if not self.limited():
            return select(budget, eligible)
        src, allowances = self.sources, self.allowances
        caps = np.full(len(src.host_names), allowances.default_cap)
        for name in allowances.hosts:
            hid = src.hosts.get(name)
            if hid is not None:
                caps[hid] = allowances.caps((name,))[0]
        for hid in self.held:            # a Retry-After not over yet: nothing this epoch
            caps[hid] = 0.0
        n = cost.shape[0]
        host = src.host[:n]
        plan_caps = caps
        if reserved is not None:
            outside = np.asarray(reserved(), dtype=np.int64)
            if outside.shape[0]:
                plan_caps = np.maximum(caps - np.bincount(host[outside],
                                                          minlength=caps.shape[0]), 0.0)
        chosen = np.asarray(select_within_hosts(select, host, plan_caps, budget, cost,
                                                eligible), dtype=np.int64)
        if chosen.shape[0]:
            counts = np.bincount(host[chosen], minlength=caps.shape[0])
            for hid in np.flatnonzero(np.isfinite(caps) & (counts > 0)).tolist():
                allowances.planned(src.host_names[hid], int(counts[hid]))
        return chosen

    def admit(self, sid: int) -> bool:
        """Whether source ``sid`` may be fetched now outside the plan (a first fetch, a
        probe): its host is not stopped or held, and its allowance of this epoch has a
        crawl left, which it spends."""
        hid = self.sources.host.item(sid)
        if hid in self.stopped or hid in self.held:
            return False
        return self.allowances.admit(self.sources.host_names[hid])

    # -- what hosts answered ------------------------------------------------------------
    def heard(self, crawl: Crawl, kind: str | None = None, now: float = 0.0,
              retry_after: float | None = None) -> None:
        """A crawl's answer at ``now``: good (``kind`` None) or a failure of ``kind``, the
        server asking for ``retry_after`` seconds (as capped by ``WHITTLE_HINTS_MAX_DELAY``)."""
        allowances = self.allowances
        if kind is None:
            if self.overloads or self.forbids:     # a good answer ends its host's run
                hid = self.sources.host.item(crawl.source)
                self.overloads.pop(hid, None)
                self.forbids.pop(hid, None)
            # only hosts with an entry count good answers: an unlimited host's are read
            # from the sources' book-keeping at its first overload (_observed), so the
            # plain path costs nothing here
            if allowances.hosts:
                name = self.sources.host_names[self.sources.host.item(crawl.source)]
                if name in allowances.hosts:
                    allowances.answered(name)
            return
        overload = kind in OVERLOAD
        if not overload and kind != FORBIDDEN:
            return
        hid = self.sources.host.item(crawl.source)
        name = self.sources.host_names[hid]
        if self.sources.failures.item(crawl.source) > 1 \
                or not math.isfinite(self.state.last_ok.item(crawl.source)):
            # failing again, or never answered well: its own back-off, not its host's
            return
        seen = (self.overloads if overload else self.forbids).setdefault(hid, set())
        if crawl.source in seen:
            return                       # one source's answers say nothing more of its host
        seen.add(crawl.source)
        if not self._the_host_s(hid, len(seen), 2 if overload else FORBIDDEN_BURST):
            return
        cut = allowances.overloaded(name, self._observed(crawl, hid, name))
        if cut:
            self.stopped.add(hid)
            self.stats.inc("hosts/decreases")
            self.stats.set("hosts/throttled", len(allowances.throttled()))
        if overload and retry_after is not None and retry_after > 0:
            # the host's own Retry-After (one source's holds that source alone: its back-off)
            self.held[hid] = max(self.held.get(hid, 0.0), now + float(retry_after))
            self.stopped.add(hid)

    def _the_host_s(self, hid: int, sources: int, needed: int) -> bool:
        """Whether ``sources`` distinct sources answering so speak for host ``hid``: as many
        as ``needed``, or every source the host has (a host of one feed is that feed)."""
        if sources >= needed:
            return True
        n = len(self.sources)
        return sources >= int(np.count_nonzero(self.sources.host[:n] == hid))

    def _observed(self, crawl: Crawl, hid: int, name: str) -> float | None:
        """What a host without a finite allowance took in ``crawl``'s epoch: its crawls
        answered since the epoch began (this one among them); its good answers are handed
        to the allowances first, what it bore. None for a host with a finite allowance (its
        cut starts from that)."""
        allowances = self.allowances
        h = allowances.hosts.get(name)
        if h is not None and (math.isfinite(h.allowance) or h.cut_in == allowances.epoch):
            return None
        src, n = self.sources, len(self.sources)
        since = self.timeline.origin + crawl.epoch * self.timeline.period
        mine = src.host[:n] == hid
        taken = int(np.count_nonzero(mine & (src.last_crawl[:n] >= since)))
        ok = int(np.count_nonzero(mine & (self.state.last_ok[:n] >= since)))
        ok -= 0 if h is None else h.ok
        if ok > 0:
            allowances.answered(name, ok)
        return float(max(taken, 1))

    # -- persistence ---------------------------------------------------------------------
    def rows(self) -> list[tuple[str, float, float, int]]:
        return self.allowances.rows()

    def load_rows(self, rows) -> None:
        self.allowances.load_rows(rows)
        self.stats.set("hosts/throttled", len(self.allowances.throttled()))
