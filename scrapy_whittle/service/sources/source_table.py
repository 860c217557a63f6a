"""What the re-crawl service knows of each source, in arrays indexed by source id.

The registry (URL <-> id), the crawl costs C_i (from the sources' minimum intervals; a
host's delays are its allowance, :mod:`~scrapy_whittle.service.hosts.host_allowances`), the prior
half-life of interest from ``WHITTLE_HALF_LIFE``, the crawl book-keeping (in flight, last
crawl, back-off). It answers *which sources may go now* and *what one costs*; the service
decides *when* to ask the policy.
"""

from __future__ import annotations

import math

import numpy as np

from scrapy_whittle.core.columns import Col, PerSourceArrays
from scrapy_whittle.feeds.hints import skipped
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.sources.registry import SourceRegistry, SourceSpec, url_hosts


class SourceTable(PerSourceArrays):
    per_source = {
        "last_crawl": -np.inf,                     # dispatch time of the last finished crawl
        "retry_at": 0.0,                           # back-off: not before
        "failures": Col(0, np.int32),              # consecutive failures
        "skip_hours": Col(0, np.uint32),           # the feed's <skipHours>: bit h, GMT
        "skip_days": Col(0, np.uint8),             # the feed's <skipDays>: bit d, Monday 0
        "listed": Col(False, np.bool_),            # came from the WHITTLE_SOURCES list
        "left": Col(False, np.bool_),              # was listed, is no longer: not crawled
        "retired": Col(False, np.bool_),           # dead or silent: only probed
        "merged": Col(False, np.bool_),            # moved onto another source: not crawled
        "not_found": Col(0, np.uint8),             # consecutive 404s, capped
        "alive_at": Col(np.nan, np.float64),       # last new entry (or first sight)
        "min_interval": Col(0.0, np.float32, persist=False),   # s between two crawls
        "weight": Col(1.0, np.float32, persist=False),         # value of an entry w/o engagement
        "host": Col(0, np.int32, persist=False),   # host id
        "group": Col(0, np.int32, persist=False),  # pooling group: category, else host
        "half_life": Col(np.nan, np.float32, persist=False),   # WHITTLE_HALF_LIFE prior
        "cost": Col(1.0, persist=False),           # C_i
    }

    def __init__(self, config: WhittleConfig) -> None:
        self.config = config
        self.registry = SourceRegistry()
        self.hosts: dict[str, int] = {}
        self.host_names: list[str] = []
        self.groups: dict[tuple[str, str], int] = {}   # ("category" | "host", name) -> id
        self.in_flight: dict[int, float] = {}      # source id -> in flight until
        self._skips = 0                             # sources with a skip mask
        self.n_left = 0                             # sources that left the list (or merged)
        self.n_retired = 0
        self._init_arrays(0)

    def __len__(self) -> int:
        return len(self.registry)

    def url(self, sid: int) -> str:
        return self.registry.url(sid)

    def id_of(self, url: str) -> int | None:
        return self.registry.get(url)

    # -- registration -------------------------------------------------------------------
    def add(self, specs: list[SourceSpec]) -> tuple[list[int], list[int]]:
        """(ids of ``specs``' URLs, ids of those that were new); arrays grow once a batch."""
        return self.add_columns([s.url for s in specs], [s.weight for s in specs],
                                [s.min_interval for s in specs], [s.category for s in specs])

    def add_columns(self, urls: list[str], weights, min_intervals, categories
                    ) -> tuple[list[int], list[int]]:
        """:meth:`add` for sources given as columns (a restore of a million rows)."""
        if len(urls) > 64:
            sids, new = self.registry.add_many(urls)
        else:
            sids, new = [], []
            for j, url in enumerate(urls):
                sid, is_new = self.registry.add(url)
                sids.append(sid)
                if is_new:
                    new.append(j)
        if not new:
            return sids, []
        ids = self.grow_arrays(len(new))
        every = len(new) == len(urls)

        def pick(values):
            return values if every else [values[j] for j in new]

        new_urls = pick(urls)
        hosts = [h or "" for h in url_hosts(new_urls)]
        for host in dict.fromkeys(hosts):       # new hosts numbered in order of appearance
            self._host_id(host)
        self.host[ids] = list(map(self.hosts.__getitem__, hosts))
        self.group[ids] = [self._group_id(c, h) for c, h in
                           zip(pick(categories), hosts, strict=True)]
        self.min_interval[ids] = np.maximum(np.asarray(pick(min_intervals), dtype=float),
                                            self.config.min_interval)
        self.weight[ids] = pick(weights)
        if self.config.half_life is not None:
            self.half_life[ids] = [self.configured_half_life(u, c) for u, c in
                                   zip(new_urls, pick(categories), strict=True)]
        self.cost[ids] = self.costs(ids)
        return sids, ids.tolist()

    def _host_id(self, host: str) -> int:
        hid = self.hosts.get(host)
        if hid is None:
            hid = self.hosts[host] = len(self.host_names)
            self.host_names.append(host)
        return hid

    def _group_id(self, category: str, host: str) -> int:
        key = ("category", category) if category else ("host", host)
        gid = self.groups.get(key)
        if gid is None:
            gid = self.groups[key] = len(self.groups)
        return gid

    def group_of(self, ids: np.ndarray) -> np.ndarray:
        """The pooling groups of sources ``ids`` for a policy's prior of the sources never
        crawled (its ``groups``): one per OPML category, and per host for the sources
        without one; numbered in order of first appearance."""
        return self.group[ids]

    # -- costs ----------------------------------------------------------------------------
    def costs(self, ids: np.ndarray) -> np.ndarray:
        """C_i = max(1, d M / T) of sources ``ids``: a crawl that must be d seconds apart from
        the next one to its source uses d seconds of a budget of M crawls per T seconds; d is
        the source's minimum interval. (A host's delays are not a cost: they are its
        allowance, shared by its sources.)"""
        d = self.min_interval[ids].astype(np.float64)
        return np.maximum(1.0, d * self.config.budget / self.config.period)

    # -- the interest-decay prior -----------------------------------------------------------
    def configured_half_life(self, url: str, category: str) -> float:
        """WHITTLE_HALF_LIFE for a source: by URL, else by category, else "*"; NaN when the
        setting says nothing (the policy's own prior then applies)."""
        setting = self.config.half_life
        if setting is None:
            return math.nan
        if not isinstance(setting, dict):
            return float(setting)
        for key in (url, category, "*"):
            if key and key in setting:
                return setting[key]
        return math.nan

    # -- crawl book-keeping ---------------------------------------------------------------
    def not_before(self, sid: int, now: float = -math.inf) -> float:
        """Earliest time, from ``now`` on, source ``sid`` may be fetched (in flight, back-off
        or a server's "not before", min interval, the feed's skipHours / skipDays)."""
        t = max(now, self.in_flight.get(sid, 0.0), self.retry_at.item(sid),
                self.last_crawl.item(sid) + self.min_interval.item(sid))
        if not self._skips:
            return t
        hours, days = self.skip_hours.item(sid), self.skip_days.item(sid)
        for _ in range(24 * 7):               # the masks never cover the whole week
            if not skipped(t, hours, days):
                break
            t = (math.floor(t / 3600.0) + 1) * 3600.0
        return t

    def eligible(self, now: float, busy_hosts: set[int], horizon: float | None = None
                 ) -> np.ndarray:
        """bool[N]: sources that may be fetched now; with ``horizon`` (the epoch's end), also
        those whose back-off or server-given "not before" ends before it (they wait in the
        plan until then, rather than lose the whole epoch)."""
        ready = self.retry_at <= now
        if horizon is not None:
            ready |= self.retry_at < horizon - 1e-6
        ok = ready & (self.last_crawl + self.min_interval <= now + 1e-6)
        busy = [sid for sid, until in self.in_flight.items() if until > now]
        if busy:
            ok[busy] = False
        if busy_hosts:
            ok &= ~np.isin(self.host, list(busy_hosts))
        if self.n_left:
            ok &= ~self.left
        if self.n_retired:
            ok &= ~self.retired
        if self.has_skips:
            ok &= ~skipped(now, self.skip_hours, self.skip_days)
        return ok

    @property
    def has_skips(self) -> bool:
        return self._skips > 0

    def set_skips(self, sid: int, hours: int, days: int) -> bool:
        """The feed's skipHours / skipDays masks; returns whether they changed."""
        if int(self.skip_hours[sid]) == hours and int(self.skip_days[sid]) == days:
            return False
        self._skips += bool(hours or days) - bool(self.skip_hours[sid] or self.skip_days[sid])
        self.skip_hours[sid], self.skip_days[sid] = hours, days
        return True

    def count_skips(self) -> None:
        """Recount the sources with skip masks, those that left and those retired (after a
        restore)."""
        self._skips = int(np.count_nonzero(self.skip_hours | self.skip_days))
        self.n_left = int(np.count_nonzero(self.left))
        self.n_retired = int(np.count_nonzero(self.retired))

    # -- the source list ---------------------------------------------------------------------
    def sync_list(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sources ``ids`` make up the source list now: those listed before and not now leave
        (never crawled again, their state kept should they come back), those that had left
        rejoin. Returns the ids (rejoined, left, whose flags changed). Sources never listed
        (registered by a spider as it crawls) are not the list's to remove."""
        now = np.zeros(len(self), dtype=bool)
        now[np.asarray(ids, dtype=np.int64)] = True
        leaving = np.flatnonzero(self.listed & ~now)
        back = np.flatnonzero(now & self.left & ~self.merged)
        changed = np.flatnonzero(self.listed != now)
        self.listed[:] = now
        self.left[leaving] = True
        self.left[back] = False
        self.n_left = int(np.count_nonzero(self.left))
        return back, leaving, changed

    def relist(self, joining: list[int], leaving: list[int], *, listed: bool = True
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One place of the list changes hands (a site's address gives way to its feeds):
        ``joining`` are crawled from now on (on the list with ``listed``), ``leaving`` are not
        (their state kept). Returns the ids (rejoined, left, whose flags changed), as
        :meth:`sync_list` does."""
        join = np.unique(np.asarray(joining, dtype=np.int64))
        leave = np.setdiff1d(np.asarray(leaving, dtype=np.int64), join)
        back = join[self.left[join] & ~self.merged[join]]
        gone = leave[~self.left[leave]]
        changed = np.union1d(join, leave)
        if listed:
            self.listed[join] = True
        self.listed[leave] = False
        self.left[gone] = True
        self.left[back] = False
        self.n_left = int(np.count_nonzero(self.left))
        return back, gone, changed

    def flags(self, ids: np.ndarray) -> np.ndarray:
        """The persisted flags of ``ids``: skipHours bits 0-23, skipDays 24-30, listed 32,
        left 33, retired 34, merged 35, consecutive 404s 40-47."""
        return (self.skip_hours[ids].astype(np.int64) | (self.skip_days[ids].astype(np.int64)
                << 24) | (self.listed[ids].astype(np.int64) << 32)
                | (self.left[ids].astype(np.int64) << 33)
                | (self.retired[ids].astype(np.int64) << 34)
                | (self.merged[ids].astype(np.int64) << 35)
                | (self.not_found[ids].astype(np.int64) << 40))

    def set_flags(self, ids: np.ndarray, flags: np.ndarray) -> None:
        flags = np.asarray(flags, dtype=np.int64)
        self.skip_hours[ids] = flags & 0xFFFFFF
        self.skip_days[ids] = (flags >> 24) & 0x7F
        self.listed[ids] = (flags >> 32) & 1
        self.left[ids] = (flags >> 33) & 1
        self.retired[ids] = (flags >> 34) & 1
        self.merged[ids] = (flags >> 35) & 1
        self.not_found[ids] = (flags >> 40) & 0xFF
        self.count_skips()

    # -- moved and retired sources -------------------------------------------------------
    def move(self, sid: int, url: str) -> int:
        """Source ``sid`` answers at ``url`` now (a permanent redirect): its old URLs stay
        aliases of it. If ``url`` is another source's already, ``sid`` merges into that one:
        its URLs become the other's aliases, it is crawled no more (as a source that left the
        list; its place on the list, if any, goes to the other). Returns the id now at
        ``url``."""
        target = self.registry.move(sid, url)
        if target != sid:
            self.merged[sid] = True
            self.left[sid] = True
            if self.listed[sid]:
                self.listed[sid], self.listed[target] = False, True
            if self.retired[sid]:
                self.set_retired(sid, False)
            self.n_left = int(np.count_nonzero(self.left))
        return target

    def rehost(self, ids: list[int]) -> None:
        """Sources ``ids`` moved (:meth:`move` keeps what they were registered with): their
        host, group (without a category) and configured half-life from the URL they are at
        now, as a restore registers them."""
        if not ids:
            return
        kinds = {gid: key for key, gid in self.groups.items()}
        hosts = [h or "" for h in url_hosts([self.url(sid) for sid in ids])]
        for sid, host in zip(ids, hosts, strict=True):
            self.host[sid] = self._host_id(host)
            kind, name = kinds[int(self.group[sid])]
            category = name if kind == "category" else ""
            if not category:
                self.group[sid] = self._group_id("", host)
            if self.config.half_life is not None:
                self.half_life[sid] = self.configured_half_life(self.url(sid), category)

    def set_retired(self, sid: int, retired: bool) -> None:
        if bool(self.retired[sid]) != retired:
            self.retired[sid] = retired
            self.n_retired += 1 if retired else -1

    def not_before_hint(self, sid: int, until: float) -> None:
        """A server or feed asks that ``sid`` not be fetched before ``until`` (capped by the
        caller): held with the back-off, whichever ends later."""
        self.retry_at[sid] = max(float(self.retry_at[sid]), until)

    def dispatched(self, sid: int, until: float) -> None:
        """Source ``sid`` is being fetched; it may be fetched again after ``until`` at the
        latest (a crawl that never reports back does not block its source for ever)."""
        self.in_flight[sid] = until

    def crawl_done(self, sid: int, *, when: float, ok: bool, now: float,
                   at_least: float = 0.0) -> float:
        """A finished crawl dispatched at ``when``; returns the back-off (s) now applied: the
        exponential one, or ``at_least`` (a server's ``Retry-After``) if longer."""
        self.in_flight.pop(sid, None)
        self.last_crawl[sid] = when
        if ok:
            if self.failures.item(sid):
                self.failures[sid] = 0
            if self.retry_at.item(sid):
                self.retry_at[sid] = 0.0
            return 0.0
        self.failures[sid] += 1
        delay = max(at_least, min(self.config.backoff_max,
                                  self.config.backoff_base * 2.0 ** (int(self.failures[sid]) - 1)))
        self.retry_at[sid] = now + delay
        return delay
