"""The re-crawl service's host allowances: each epoch's selection within them, and each
crawl's answer heard by its host.

:class:`~scrapy_whittle.service.hosts.host_allowances.HostAllowances` holds the rule (limits from
``WHITTLE_HOST_LIMITS``, throttling learned from refusals); :class:`HostThrottle` wires it in:

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
* Slow start: a host that has not answered well yet has one request in flight at a time,
  twice as many after each answer (a feed, a 304, any HTTP answer but a refusal; back to
  one at a 429 or 503), up to ``SLOW_START_MAX`` (then Scrapy's download slot decides): a
  host that rate-limits refuses a few requests, not a burst of them. A resumed crawl's
  hosts that answered before are past it.
* A throttled host's crawls are paced: T / allowance apart (``paced``), since a rate limit
  counts requests in time (a minute, an hour), and an epoch's allowance sent in a burst
  would find it again; one 429 or 503 from a source that answered well before is enough to
  cut a paced host again (its crawls were spread: the rate is too high).
* Rising latency (:mod:`~scrapy_whittle.service.hosts.host_latency`): a good answer's latency,
  when the crawler measured it, is told to the host's :class:`LatencyWatch`; a host whose
  answers slow down well past its usual time, over several of its sources, is cut as by a
  429 (at most once an epoch, paced from then on) and recovers as any throttled host does.
* The overload must be the host's, not one feed's. A rate limit refuses every request past
  its threshold: a host of several sources is cut only once two of its sources answered
  429/503 with no good answer from the host in between (403: ``FORBIDDEN_BURST`` distinct
  sources), each of them a source that answered well before and fails for the first time
  in a row. A feed that answers 503 to everything (a broken one, or one with a limit of its
  own) backs off alone, as any failing source does, and does not starve the other feeds of
  its host. A refusal on a source's first visit is that source's own, but for a 429 from a
  host in its slow start that has answered well: a rate limit answers a crawl's first
  requests and refuses the next, while a host past its slow start has shown it bears the
  crawl, and a feed of it refusing from its first visit is that feed. A host probing
  above its ceiling (:mod:`~scrapy_whittle.service.hosts.host_allowances`) is the
  exception: any 429 or 503 of it, from any source, answers the probe (back to the ceiling).

Stats: ``hosts/throttled`` (hosts below their limit now), ``hosts/decreases`` (cuts so far),
``hosts/slowed`` (the cuts of those for rising latency).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from scrapy_whittle.core.selection import select_within_hosts
from scrapy_whittle.service.decisions.epochs import Timeline
from scrapy_whittle.service.hosts.host_allowances import FORBIDDEN_BURST, HostAllowances
from scrapy_whittle.service.hosts.host_latency import FACTOR, LatencyWatch
from scrapy_whittle.service.sources.source_state import SourceState
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.types import Crawl, HostLoad, Stats

#: requests in flight at once to a host that has not answered well yet; each good answer
#: doubles them (a slow start), and a host allowed SLOW_START_MAX is no longer watched
SLOW_START_MAX = 8

#: the failures that are no answer of the host (nothing to learn of it for the slow start)
NO_ANSWER = frozenset({"connection", "dns", "timeout", "tls", "cancelled", "ignored",
                       "robots", "unsupported_url", "other"})

#: the refusal that names a rate limit
TOO_MANY = "http_429"
#: the error kinds a host says it is overloaded with
OVERLOAD = frozenset({"http_429", "http_503"})
FORBIDDEN = "http_403"


class HostThrottle:
    """See the module docstring. ``allowances``: the hosts' allowances; ``stopped``: ids of
    the hosts that get no more crawls this epoch; ``held``: host id -> time before which it
    gets none (its Retry-After); ``latency_factor``: ``WHITTLE_HOST_LATENCY_FACTOR`` (0: the
    hosts' latencies are not watched)."""

    def __init__(self, limits: dict[str, float] | None, *, sources: SourceTable,
                 state: SourceState, timeline: Timeline, stats: Stats,
                 slot_delays: dict[str, float] | None = None, default_delay: float = 0.0,
                 latency_factor: float = FACTOR) -> None:
        self.allowances = HostAllowances(limits, period=timeline.period,
                                         slot_delays=slot_delays, default_delay=default_delay)
        self.sources = sources
        self.state = state
        self.timeline = timeline
        self.stats = stats
        self.stopped: set[int] = set()
        self.held: dict[int, float] = {}
        #: host id -> when its next crawl may go, for the hosts throttled (their limit is a
        #: rate: their crawls go T / allowance apart rather than in a burst)
        self.paced: dict[int, float] = {}
        #: slow start: the hosts past it (``known``: as many in flight as Scrapy lets go),
        #: the others' requests allowed in flight (``window``, from their first good answer
        #: on; 1 before) and those in flight (host id -> {source id: in flight until})
        self.known: set[int] = set()
        self.window: dict[int, int] = {}
        self.flying: dict[int, dict[int, float]] = {}
        self._known_read = False
        #: host id -> the crawls of it the epoch's plan still holds (set by the planner):
        #: what the crawler wanted of a host, beside what it sent, when it is first cut
        self.queued: Callable[[int], int] = lambda hid: 0
        #: host id -> the sources that answered 429/503 (or 403) since its last good answer
        self.overloads: dict[int, set[int]] = {}
        self.forbids: dict[int, set[int]] = {}
        #: the hosts' latencies (``latency_factor`` 0: not watched)
        self.latency = LatencyWatch(latency_factor)
        self._count_sources = self._sources_of

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
               reserved: Callable[[], np.ndarray] | None = None,
               new_epoch: bool = True) -> np.ndarray:
        """Epoch ``epoch``'s choice (``select(budget, eligible)``: the policy's, best first),
        each host within its allowance. ``reserved()``: the sources to be fetched this epoch
        outside the plan (first fetches, probes): as much of their hosts' allowances as
        they take is kept for them (:meth:`admit`). ``new_epoch`` False: a later decision
        step of the same epoch, whose hosts' allowances are what the epoch's plans left."""
        if not self._known_read:       # a resumed crawl: the hosts that answered before
            n = len(self.sources)
            self.known.update(np.unique(self.sources.host[:n][
                np.isfinite(self.state.last_ok[:n])]).tolist())
            self._known_read = True
        if new_epoch:
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

    def unplanned(self, sids) -> None:
        """Sources ``sids`` of a decision step's plan were never handed out (the next
        step plans again): their hosts get back the allowance the plan took."""
        allowances = self.allowances
        if not allowances.hosts and not math.isfinite(allowances.default):
            return
        src = self.sources
        counts: dict[int, int] = {}
        for sid in sids:
            hid = src.host.item(sid)
            counts[hid] = counts.get(hid, 0) + 1
        for hid, count in counts.items():
            name = src.host_names[hid]
            if name in allowances.hosts:
                allowances.planned(name, -count)

    def admit(self, sid: int) -> bool:
        """Whether source ``sid`` may be fetched now outside the plan (a first fetch, a
        probe): its host is not stopped or held, and its allowance of this epoch has a
        crawl left, which it spends."""
        hid = self.sources.host.item(sid)
        if hid in self.stopped or hid in self.held:
            return False
        if self.paced and self.paced.get(hid, -math.inf) > self.timeline.clock.now() + 1e-6:
            return False
        return self.allowances.admit(self.sources.host_names[hid])

    def admit_article(self, host: str) -> bool:
        """Whether an article request to ``host`` may go now: not while the host is held,
        stopped or paced, else within what its allowance leaves its feeds (spent:
        :meth:`HostAllowances.admit_article`)."""
        hid = self.sources.hosts.get(host)
        timeline = self.timeline
        now = timeline.clock.now()
        if hid is not None:
            if hid in self.stopped or hid in self.held:
                return False
            if self.paced.get(hid, -math.inf) > now + 1e-6:
                return False
        steps = timeline.steps
        # with decision steps the feeds are planned step by step: the articles may take only
        # what the epoch's allowance had accrued when this step began, less what the feeds
        # took, or the first steps' articles would spend what later steps' feeds are owed
        due = 1.0 if steps == 1 else \
            (timeline.step_of(now) - timeline.epoch_of(now) * steps) / steps
        if not self.allowances.admit_article(host, due):
            return False
        if hid is not None and hid in self.paced:       # the next request, feed or article
            allowance = self.allowances.allowance(host)
            self.paced[hid] = now + self.timeline.period / max(allowance, 1e-9)
        return True

    def article_room(self) -> dict[str, int]:
        """Each host with a finite allowance: the article requests it may take now, spent
        (:meth:`HostAllowances.article_room`); none while the host is held, stopped or
        paced."""
        now = self.timeline.clock.now()
        names = self.sources.host_names
        skip = {names[hid] for hid in (*self.stopped, *self.held)}
        skip.update(names[hid] for hid, at in self.paced.items() if at > now + 1e-6)
        return self.allowances.article_room(frozenset(skip))

    # -- pacing and slow start -----------------------------------------------------------
    def dispatched(self, sid: int, now: float, until: float) -> None:
        """Source ``sid`` was handed out at ``now``, in flight until ``until`` at most: a
        host in slow start counts it; a throttled host's next crawl goes T / allowance
        later (a rate limit counts requests in time, not per epoch)."""
        if not self.paced and self.all_known():
            return
        hid = self.sources.host.item(sid)
        if hid not in self.known:
            self.flying.setdefault(hid, {})[sid] = until
        if hid in self.paced:
            allowance = self.allowances.allowance(self.sources.host_names[hid])
            self.paced[hid] = now + self.timeline.period / max(allowance, 1e-9)

    def all_known(self) -> bool:
        """Whether every host is past its slow start."""
        return len(self.known) >= len(self.sources.host_names)

    def gated(self, hid: int, now: float) -> bool:
        """Whether host ``hid``, in slow start, has as many requests in flight as it may."""
        flying = self.flying.get(hid)
        if not flying or hid in self.known:
            return False
        return sum(until > now for until in flying.values()) >= self.window.get(hid, 1)

    def load(self, hosts: HostLoad, now: float) -> HostLoad:
        """``hosts`` (the downloader's load), with the hosts in slow start that may send
        nothing more now saturated too."""
        return hosts if not self.flying else SlowStartLoad(self, hosts, now)

    def _landed(self, hid: int, sid: int, kind: str | None) -> None:
        """A request of host ``hid`` (not known yet) ended: the host answered (``kind``
        None, or an HTTP answer other than a refusal: a 404 or a broken feed is the feed's),
        refused (an overload: back to one request at a time), or did not answer."""
        flying = self.flying.get(hid)
        if flying is not None:
            flying.pop(sid, None)
        if kind in OVERLOAD:
            if hid in self.window:
                self.window[hid] = 1
        elif kind is None or (kind != FORBIDDEN and kind not in NO_ANSWER):
            window = self.window.get(hid, 1) * 2
            if window >= SLOW_START_MAX:
                self.known.add(hid)
                self.window.pop(hid, None)
                self.flying.pop(hid, None)
            else:
                self.window[hid] = window
        if flying is not None and not flying and hid in self.flying:
            del self.flying[hid]

    def _pace(self, hid: int) -> None:
        """Host ``hid`` is throttled: its crawls are paced from now on."""
        self.paced.setdefault(hid, -math.inf)

    # -- what hosts answered ------------------------------------------------------------
    def heard(self, crawl: Crawl, kind: str | None = None, now: float = 0.0,
              retry_after: float | None = None, latency: float | None = None) -> None:
        """A crawl's answer at ``now``: good (``kind`` None) or a failure of ``kind``, the
        server asking for ``retry_after`` seconds (as capped by ``WHITTLE_HINTS_MAX_DELAY``);
        ``latency``: the seconds a good answer took (None: not measured)."""
        self._answer(crawl, kind, now, retry_after)
        if latency is not None and kind is None and self.latency.enabled:
            self._timed(crawl, latency)      # after the answer is counted: what it bore

    def _answer(self, crawl: Crawl, kind: str | None, now: float,
                retry_after: float | None) -> None:
        allowances = self.allowances
        if kind is None and not (self.overloads or self.forbids or allowances.hosts) \
                and self.all_known():
            return                      # the plain path: nothing to tell any host
        hid = self.sources.host.item(crawl.source)
        if hid not in self.known:
            self._landed(hid, crawl.source, kind)
        if kind is None:
            if self.overloads or self.forbids:     # a good answer ends its host's run
                self.overloads.pop(hid, None)
                self.forbids.pop(hid, None)
            # only hosts with an entry count good answers: an unlimited host's are read
            # from the sources' book-keeping at its first overload (_observed), so the
            # plain path costs nothing here
            if allowances.hosts:
                name = self.sources.host_names[hid]
                if name in allowances.hosts:
                    allowances.answered(name)
            return
        overload = kind in OVERLOAD
        if not overload and kind != FORBIDDEN:
            return
        name = self.sources.host_names[hid]
        if not (overload and allowances.probing(name)) and not self._speaks_for_host(
                crawl, hid, kind, overload):
            return
        cut = allowances.overloaded(name, self._observed(crawl, hid, name, overload),
                                    self._share(now))
        if cut:
            self.stopped.add(hid)
            self._pace(hid)
            self.stats.inc("hosts/decreases")
            self.stats.set("hosts/throttled", len(allowances.throttled()))
        if overload and retry_after is not None and retry_after > 0:
            # the host's own Retry-After (one source's holds that source alone: its back-off)
            self.held[hid] = max(self.held.get(hid, 0.0), now + float(retry_after))
            self.stopped.add(hid)

    def _speaks_for_host(self, crawl: Crawl, hid: int, kind: str, overload: bool) -> bool:
        """Whether ``crawl``'s refusal (``kind``), with those before it, is host ``hid``'s
        overload rather than its source's own failure (see the module docstring). A host
        probing above its ceiling is not asked: any refusal of it answers the probe."""
        if self.sources.failures.item(crawl.source) > 1 or not (
                math.isfinite(self.state.last_ok.item(crawl.source))
                or (kind == TOO_MANY and hid in self.window)):
            # failing again, or failing at its first visit (but for a 429 from a host in
            # its slow start that has answered well: the ramp found its rate): its own
            return False
        seen = (self.overloads if overload else self.forbids).setdefault(hid, set())
        if crawl.source in seen:
            return False                 # one source's answers say nothing more of its host
        seen.add(crawl.source)
        # a paced host's requests are spread (so are every host's with decision steps): one
        # refusal says its rate is too high
        spread = hid in self.paced or self.timeline.steps > 1
        needed = (1 if spread else 2) if overload else FORBIDDEN_BURST
        return self._the_host_s(hid, len(seen), needed)

    def _timed(self, crawl: Crawl, latency: float) -> None:
        """``crawl``'s good answer took ``latency`` seconds: its host is cut if it is
        slowing down (as by a 429: once an epoch, then paced)."""
        hid = self.sources.host.item(crawl.source)
        if not self.latency.slowing(hid, crawl.source, latency, self._count_sources):
            return
        name = self.sources.host_names[hid]
        if self.allowances.overloaded(name, self._observed(crawl, hid, name, False),
                                      self._share(self.timeline.clock.now())):
            self.stopped.add(hid)
            self._pace(hid)
            self.stats.inc("hosts/decreases")
            self.stats.inc("hosts/slowed")
            self.stats.set("hosts/throttled", len(self.allowances.throttled()))

    def _sources_of(self, hid: int) -> int:
        n = len(self.sources)
        return int(np.count_nonzero(self.sources.host[:n] == hid))

    def _the_host_s(self, hid: int, sources: int, needed: int) -> bool:
        """Whether ``sources`` distinct sources answering so speak for host ``hid``: as many
        as ``needed``, or every source the host has (a host of one feed is that feed)."""
        return sources >= needed or sources >= self._sources_of(hid)

    def _observed(self, crawl: Crawl, hid: int, name: str, overload: bool) -> float | None:
        """What a host without a finite allowance took in ``crawl``'s epoch: its crawls
        answered since the epoch began (this one among them) and, for an ``overload`` (a
        429, a 503), those the plan still holds for it (held back by the slow start: if
        that is more than it bears, its paced crawls find out at once); its good answers
        are handed to the allowances first, what it bore. None for a host with a finite
        allowance (its cut starts from that)."""
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
        # (a share of the epoch, with decision steps: its crawls so far and the step's plan
        # are that share of the host's rate an epoch)
        share = self._share(self.timeline.clock.now())
        return float(max(taken + (self.queued(hid) if overload else 0), 1)) / share

    def _share(self, now: float) -> float:
        """The share of its epoch that ends with the decision step of ``now`` (1 with one
        step an epoch): what the host took in it, over it, is its rate an epoch."""
        timeline = self.timeline
        steps = timeline.steps
        if steps == 1:
            return 1.0
        return (timeline.step_of(now) - timeline.epoch_of(now) * steps + 1) / steps

    # -- persistence ---------------------------------------------------------------------
    def rows(self) -> list[tuple[str, float, float, int]]:
        return self.allowances.rows()

    def load_rows(self, rows) -> None:
        self.allowances.load_rows(rows)
        for name in self.allowances.throttled():
            hid = self.sources.hosts.get(name)
            if hid is not None:
                self._pace(hid)
        self.stats.set("hosts/throttled", len(self.allowances.throttled()))


class SlowStartLoad:
    """A :class:`HostLoad`: the downloader's, and the hosts in slow start that may send
    nothing more now (asked about as the downloader's saturated hosts are: again when a
    download ends). Not in ``all_saturated``: a host in slow start keeps its place in the
    epoch's plan."""

    def __init__(self, throttle: HostThrottle, hosts: HostLoad, now: float) -> None:
        self.throttle, self.hosts, self.now = throttle, hosts, now

    def saturated(self, host: str) -> bool:
        hid = self.throttle.sources.hosts.get(host)
        return (hid is not None and self.throttle.gated(hid, self.now)) \
            or self.hosts.saturated(host)

    def all_saturated(self):
        return self.hosts.all_saturated()
