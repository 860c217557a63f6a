"""The re-crawl service: one crawl of a set of feeds, with no Scrapy in it.

It owns the sources (:class:`~scrapy_whittle.service.source_table.SourceTable`), the entries already
seen (:class:`~scrapy_whittle.service.entry_memory.EntryMemory`), the conditional-GET validators, the
epoch clock, the policy and the state store, behind a narrow API that Scrapy's scheduler and
middleware, the simulator and the benchmarks all drive:

* ``open(specs)`` / ``close()``; ``add_sources(specs)``; ``set_crawl_delay(host, s)``;
* ``next_crawl(hosts)`` -> a :class:`Crawl` (URL, conditional-GET headers, epoch) or None,
  and then ``wake_at``: when to ask again (``hosts``: which hosts are saturated, a
  :class:`HostLoad`);
* what a crawl showed: ``feed_fetched(crawl, entries, etag=, last_modified=, hints=)``
  (returns the new entries and their values), ``not_modified(...)``,
  ``crawl_failed(crawl, kind, cause, retry_after=)``; ``hints`` and ``retry_after``: what the
  server and the feed asked about the next visit (:mod:`scrapy_whittle.feeds.hints`);
* ``report_value(...)``: feedback from a pipeline; ``checkpoint()``.

Time. Epoch k is [origin + k T, origin + (k + 1) T), T = ``WHITTLE_PERIOD``; the origin is
the first run's start (kept by the store), so a resumed crawl continues its epochs. At the
first ``next_crawl`` of an epoch the policy picks sources of total cost at most M =
``WHITTLE_BUDGET`` among those that may be fetched now (not in flight, not backing off, past
their minimum interval, host not saturated); they are handed out as the downloader takes them
(or spread evenly over the epoch with ``WHITTLE_SPREAD``); what an epoch does not use is lost.

Learning. What crawls showed is buffered and given to the policy in batches (one
``Observation`` per epoch of dispatch): before each selection, before feedback or a
checkpoint, and whenever the oldest buffered crawl is ``FLUSH_AFTER`` seconds old. The policy
time unit is the second, counted from the origin.

Hostile input. What a fetch teaches is kept within plausible ranges first
(:mod:`scrapy_whittle.core.sanitize`: values, publication times, bursts of unseen entries); before
each selection the policy checks the sources it learned of since the previous one and resets
those whose state went bad (``Policy.repair``), after a restore it checks them all, and a
selection that still raises on the policy's state is retried once after a full check.

Persistence (with a store): a checkpoint every ``WHITTLE_CHECKPOINT_INTERVAL`` seconds (the
caller decides when: ``checkpoint_due``) and at close writes what changed since the previous
one: the sources registered, the rows of the sources crawled or otherwise touched (book-
keeping, validators, counters, the policy's per-source state, the entries seen), the policy's
global state and the epochs' aggregates. After a crash the crawl restarts from the last
checkpoint: an entry handed out before it is never handed out again; entries first seen in
the last checkpoint interval before the crash are handed out a second time (at least once).

The class is written in three modules: this one (construction, sources, time, handing out
crawls), :mod:`scrapy_whittle.service.outcomes` (what crawls showed, the batched learning)
and :mod:`scrapy_whittle.service.persistence` (checkpoints, restore); the types it shares
with its callers are in :mod:`scrapy_whittle.service.types` and importable from here.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict, deque
from collections.abc import Iterable

import numpy as np

from scrapy_whittle.core.columns import Col, PerSourceArrays, StringColumn
from scrapy_whittle.core.estimators import RateEstimator
from scrapy_whittle.core.periodic import PeriodicArrivals, arrivals_from_bins
from scrapy_whittle.core.policies import Policy, policy_class
from scrapy_whittle.core.problem import Problem, SourceParams
from scrapy_whittle.feeds.httpdates import http_date
from scrapy_whittle.service.clock import SystemClock
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from scrapy_whittle.service.entry_memory import EntryMemory
from scrapy_whittle.service.gc_pause import gc_paused
from scrapy_whittle.service.outcomes import CrawlOutcomes
from scrapy_whittle.service.persistence import StatePersistence
from scrapy_whittle.service.policy_options import build_policy
from scrapy_whittle.service.source_table import SourceTable
from scrapy_whittle.service.sources import SourceSpec
from scrapy_whittle.service.store import SavedState, StateStore, StoreError
from scrapy_whittle.service.types import (  # noqa: F401  (the service's public types)
    FLUSH_AFTER,
    NO_LOAD,
    Crawl,
    DictStats,
    FetchResult,
    HostLoad,
    NoLoad,
    PrefixedStats,
    Stats,
    entry_values,
    valued,
)

logger = logging.getLogger(__name__)

class _SourceState(PerSourceArrays):
    """Per-source validators and counters kept by the service (Last-Modified as unix
    seconds, 0 = none; the ETags packed in a StringColumn). ``last_ok`` (when the last
    successful fetch was sent) and ``peak`` (most new entries one fetch taught) bound what
    a fetch may teach (:mod:`scrapy_whittle.core.sanitize`); they are not stored: after a restart
    a source's next fetch is treated as its first."""

    per_source = {"modified": Col(0, np.uint32),
                  "crawls": Col(0, np.uint32), "errors": Col(0, np.uint32),
                  "new_items": Col(0, np.uint32), "utility": Col(0.0, np.float32),
                  "last_ok": Col(np.nan, np.float64), "peak": Col(0, np.uint32),
                  # changed since the last checkpoint (a mask: bounded whatever the interval)
                  "dirty": Col(False, np.bool_, persist=False)}

    def __init__(self) -> None:
        self.etag = StringColumn()
        self._init_arrays(0)

    def grow(self, k: int) -> None:
        self.grow_arrays(k)
        self.etag.grow_arrays(k)


class RecrawlService(CrawlOutcomes, StatePersistence):
    """See the module docstring. ``config`` holds the validated ``WHITTLE_*`` settings."""

    def __init__(self, config: WhittleConfig, *, clock=None, store: StateStore | None = None,
                 oracle: dict[str, tuple[float, float, float]] | None = None,
                 slot_delays: dict[str, float] | None = None, max_flight: float = 600.0,
                 stats: Stats | None = None) -> None:
        self.config = config
        self.clock = clock or config.clock or SystemClock()
        self.store = store
        self.oracle = oracle
        self.max_flight = float(max_flight)
        self.stats: Stats = stats if stats is not None else DictStats()
        self.sources = SourceTable(config, slot_delays)
        self.memory = EntryMemory(max_per_source=config.max_entries_per_source)
        self.state = _SourceState()
        self.policy: Policy | None = None
        self.origin: float | None = None
        self.epoch = -1                  # epoch of the current plan
        self.first_epoch: int | None = None
        # the epoch's chosen sources in order; a deque, since most crawls take the first (at
        # a million sources, 10^4 a plan: deleting the head of a list moved the rest each time)
        self.plan: deque[int] = deque()
        self.spent = 0.0
        self.wake_at = math.inf          # when next_crawl may give something again
        self._pending_grow: list[int] = []
        self._grown_since_select: list[int] = []
        self._buffer: list[tuple] = []
        self._buffer_since = math.inf
        self._declared: dict[int, float] = {}      # source -> rate its feed declares (/s)
        self._own_rates: RateEstimator | None = None
        self._logged: set[tuple[int, str]] = set()
        self._new: list[tuple] = []
        self._epochs: dict[int, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0.0, 0, 0])
        self._epoch_errors: dict[tuple[int, str], int] = defaultdict(int)
        self._run_cost = 0.0             # cost dispatched in this run
        self._spent_before: dict[int, float] = {}   # epoch -> cost spent by a previous planner
        self._last_checkpoint = -math.inf
        self._policy_touched = True
        self._unchecked: set[int] = set()   # sources the policy learned of since its check

    # -- construction -----------------------------------------------------------------------
    def open(self, specs: list[SourceSpec] = (), *, listed: bool = True) -> None:
        """Restore the stored state (if any), register ``specs``, build the policy. With
        ``listed``, ``specs`` (if any) are the source list: sources of the stored list that
        are not among them leave (:meth:`sync_sources`)."""
        with gc_paused():               # a million rows of tuples: see scrapy_whittle.service.gc_pause
            self._open(specs, listed)

    def _open(self, specs: list[SourceSpec], listed: bool) -> None:
        saved = self._load()
        if saved is not None:
            cols = saved.sources
            if list(cols["id"]) != list(range(saved.n_sources)):
                raise StoreError(f"{self.store.path}: source ids are not 0..n-1")
            self._grow_parts(self.sources.add_columns(
                list(cols["url"]), cols["weight"], cols["min_interval"],
                [c or "" for c in cols["category"]])[1])
        ids = self._register(list(specs))
        now = self.clock.now()
        self.origin = float(saved.meta["origin"]) if saved and "origin" in saved.meta else now
        self.policy = self._build_policy(len(self.sources))
        self._pending_grow = []
        self._grown_since_select = list(range(len(self.sources)))
        if saved is not None:
            self._restore(saved)
            self._repair_bookkeeping(now)
            self.repair_policy(None, cause="as restored")
        if listed and ids:
            self._sync_list(ids)
        self._set_half_life_priors(np.arange(len(self.sources)))
        if self._own_rates is None and self.policy.rate_estimator() is None:
            self._own_rates = RateEstimator(len(self.sources), prior_rate=1 / self.config.period,
                                            prior_exposure=self.config.period)
        self.first_epoch = self.epoch_of(now)
        self.stats.set("sources", len(self.sources) - self.sources.n_left)
        logger.info("re-crawl service: %d sources, policy %s, budget %g per %g s%s",
                    len(self.sources), self.config.policy, self.config.budget,
                    self.config.period, f", state in {self.store.path}" if self.store else "")

    def _load(self) -> SavedState | None:
        if self.store is None:
            return None
        return self.store.load()

    def _build_policy(self, n: int) -> Policy:
        alpha = u = None
        if self.oracle is not None:
            alpha, u = self._oracle_au(range(n), strict=True)
        supplied = {}
        if self.oracle is not None and policy_class(self.config.core_policy).needs_rhythms:
            alpha, periodic_u = self._oracle_rhythms(range(n), strict=True)
            supplied["periodic"] = PeriodicArrivals(alpha, periodic_u, 0)
            u = periodic_u.mean(axis=1)
        problem = Problem(n=n, cost=self.sources.cost[:n].copy(), period=self.config.period,
                          alpha=alpha, u=u)
        return build_policy(self.config, problem, **supplied)

    def _oracle_rhythms(self, sids, strict: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, u per phase of the day (N, K), column t for epoch t mod K) of sources
        ``sids`` from the oracle's parameters and rhythms (``WHITTLE_ORACLE_PARAMS``); a
        source without a rhythm publishes evenly (with ``strict``: InvalidSetting)."""
        sids = list(sids)
        alpha, _ = self._oracle_au(sids, strict=strict)
        profiles = getattr(self.oracle, "profiles", {})
        rows = [profiles.get(self.sources.url(s)) for s in sids]
        known = [r for r in rows if r is not None]
        if not known or (strict and len(known) < len(rows)):
            raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r}) needs "
                                 f"a daily rhythm (\"profile\") for every source of policy "
                                 f"{self.config.policy!r}")
        flat = ([1.0] * len(known[0][0]), known[0][1], known[0][2])
        groups: dict[tuple, list[int]] = defaultdict(list)
        for j, row in enumerate(rows):
            bins, width, origin = row or flat
            groups[len(bins), width, origin].append(j)
        params = np.array([self.oracle.get(self.sources.url(s), (0.0, 0.0, 0.0))
                           for s in sids], dtype=np.float64).reshape(-1, 3)
        out = None
        for (_, width, origin), idx in groups.items():
            bins = np.array([(rows[j] or flat)[0] for j in idx], dtype=np.float64)
            try:
                arr = arrivals_from_bins(*params[idx].T, bins, width, self.config.period,
                                         origin=origin, start=self.origin)
            except ValueError as exc:
                raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r}):"
                                     f" {exc} (WHITTLE_PERIOD {self.config.period!r})"
                                     ) from None
            if out is None:
                out = np.zeros((len(sids), arr.u.shape[1]))
            if arr.u.shape[1] != out.shape[1]:
                raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r}):"
                                     " the rhythms must all span the same time")
            out[idx] = np.roll(arr.u, -arr.phase0, axis=1)   # phase of epoch 0 made 0
        return alpha, out

    def _oracle_au(self, sids, strict: bool = False) -> tuple[np.ndarray, np.ndarray]:
        rows = []
        for sid in sids:
            url = self.sources.url(sid)
            params = self.oracle.get(url)
            if params is None:
                if strict:
                    raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r})"
                                         f" has no parameters for source {url}")
                self._log_once(sid, "oracle", url, "no oracle parameters: never crawled")
                params = (0.0, 0.0, 0.0)
            rows.append(params)
        arr = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
        p = SourceParams(arr[:, 0], arr[:, 1], arr[:, 2], period=self.config.period)
        return p.alpha, p.u

    def _set_half_life_priors(self, ids: np.ndarray) -> None:
        h = self.sources.half_life[ids]
        ids = ids[~np.isnan(h)]
        if ids.size:
            self.policy.set_prior_half_life(ids, self.sources.half_life[ids].astype(float))

    # -- sources ----------------------------------------------------------------------------
    def add_sources(self, specs: list[SourceSpec]) -> list[int]:
        """Register sources (a URL already known keeps its id); the policy learns of new ones
        at the next selection."""
        sids = self._register(specs)
        self.stats.set("sources", len(self.sources) - self.sources.n_left)
        return sids

    def sync_sources(self, specs: list[SourceSpec]) -> tuple[int, int]:
        """The source list (``WHITTLE_SOURCES``) is now ``specs``: new sources join, those
        listed before and missing now leave (their state is kept, they are not crawled),
        those that had left and are back rejoin. Returns (joined, left) counts."""
        before = len(self.sources)
        ids = self._register(list(specs))
        if self.policy is not None:
            self._grow_policy()
        back, leaving = self._sync_list(ids)
        joined = len(self.sources) - before + len(back)
        self.stats.set("sources", len(self.sources) - self.sources.n_left)
        return joined, len(leaving)

    def _sync_list(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        back, leaving, changed = self.sources.sync_list(ids)
        if self.store is not None:
            self.state.dirty[changed] = True
        if back.size or leaving.size:
            self.plan = deque(sid for sid in self.plan if not self.sources.left[sid])
            logger.info("source list: %d sources rejoined, %d left it (not crawled any more; "
                        "what was learned of them is kept)", back.size, leaving.size)
            self.stats.inc("sources/left", int(leaving.size))
            self.stats.inc("sources/rejoined", int(back.size))
        return back, leaving

    def _register(self, specs: list[SourceSpec]) -> list[int]:
        sids, new = self.sources.add(specs)
        if new:
            self._grow_parts(new)
            if self.store is not None:          # what the next checkpoint must insert
                by_id = dict(zip(sids, specs, strict=True))
                self._new.extend((sid, by_id[sid]) for sid in new)
                self.state.dirty[new] = True
        return sids

    def _grow_parts(self, new: list[int]) -> None:
        """The rest of the service's per-source state follows the source table."""
        if not new:
            return
        self.memory.grow(len(new))
        self.state.grow(len(new))
        if self._own_rates is not None:
            self._own_rates.grow(len(new))
        if self.policy is not None:
            self._pending_grow.extend(new)

    def url(self, sid: int) -> str:
        return self.sources.url(sid)

    def source_id(self, url: str) -> int | None:
        return self.sources.id_of(url)

    def set_crawl_delay(self, host: str, delay: float) -> bool:
        """A robots.txt ``Crawl-delay`` for ``host``: it enters the cost C_i of every source on
        the host (now and when registered later). Returns whether it changed anything."""
        changed = self.sources.set_crawl_delay(host, delay)
        if changed is None:
            return False
        known = changed[changed < self.policy.n] if self.policy is not None else changed[:0]
        if known.size:
            self.policy.set_cost(known, self.sources.cost[known])
        return True

    def _grow_policy(self) -> None:
        if not self._pending_grow:
            return
        sids = np.asarray(self._pending_grow, dtype=np.int64)
        self._pending_grow = []
        extra = {}
        if self.oracle is not None and self.policy.needs_rhythms:
            extra["alpha"], extra["periodic_u"] = self._oracle_rhythms(sids)
        elif self.oracle is not None:
            extra["alpha"], extra["u"] = self._oracle_au(sids)
        self.policy.grow(len(sids), self.sources.cost[sids], **extra)
        self._set_half_life_priors(sids)
        self._grown_since_select.extend(sids.tolist())
        self._policy_touched = True

    # -- time -------------------------------------------------------------------------------
    def epoch_of(self, when: float) -> int:
        return math.floor((when - self.origin) / self.config.period)

    @property
    def finished(self) -> bool:
        """True once ``WHITTLE_MAX_EPOCHS`` epochs of this run have passed."""
        limit = self.config.max_epochs
        return limit is not None and self.epoch_of(self.clock.now()) >= self.first_epoch + limit

    # -- handing out crawls -----------------------------------------------------------------
    def next_crawl(self, hosts: HostLoad = NO_LOAD) -> Crawl | None:
        """The next source to fetch now, or None (then ``wake_at`` says when to ask again).
        ``hosts`` says which hosts cannot take a request now: they are asked about all at an
        epoch's start (to mask their sources out of the choice), and about one source's host
        before it is handed out."""
        if not len(self.sources) or self.finished:
            self.wake_at = math.inf
            return None
        now = self.clock.now()
        if self._buffer and now - self._buffer_since >= FLUSH_AFTER:
            self.flush()
        k = self.epoch_of(now)
        if k != self.epoch:
            busy = {self.sources.hosts[h] for h in hosts.all_saturated()
                    if h in self.sources.hosts}
            self._start_epoch(k, now, busy)
        period = self.config.period
        epoch_end = self.origin + (k + 1) * period
        later = epoch_end
        src = self.sources
        saturated: set[int] = set()        # hosts found saturated in this call
        spread = self.config.spread
        host_of = src.host
        for j, sid in enumerate(self.plan):
            if spread:
                release = self.origin + k * period + self.spent * period / self.config.budget
                if release > now + 1e-9:
                    self.wake_at = release
                    return None
            host = host_of.item(sid)
            if host in saturated:
                continue
            not_before = src.not_before(sid, now)
            if not_before > now + 1e-6:
                later = min(later, not_before)
                continue
            if hosts.saturated(src.host_names[host]):
                saturated.add(host)        # asked again when a download of the slot ends
                continue
            del self.plan[j]
            return self._dispatch(sid, now, k)
        self.wake_at = later
        return None

    def resume_spent(self, spent: dict[int, float]) -> None:
        """Budget already spent in some epochs (by a cluster's previous planner): the plan of
        such an epoch gets only what remains."""
        self._spent_before.update(spent)

    def _start_epoch(self, k: int, now: float, busy: set[int]) -> None:
        self.flush()
        if self.plan:
            self.stats.inc("skipped", len(self.plan))
        self.epoch, self.spent = k, 0.0
        self._grow_policy()
        eligible = self.sources.eligible(now, busy,
                                         horizon=self.origin + (k + 1) * self.config.period)
        budget = self.config.budget - self._spent_before.pop(k, 0.0)
        t = time.perf_counter()
        unchecked, self._unchecked = self._unchecked, set()
        self.repair_policy(unchecked)
        chosen = self._select(k, budget, None if eligible.all() else eligible)
        self._decision_time(time.perf_counter() - t, calls=1)
        self._policy_touched = True
        # a policy may set up the rows of sources added since its last selection
        if self.store is not None:
            self.state.dirty[self._grown_since_select] = True
        self._grown_since_select = []
        self.stats.inc("epochs")
        self.plan = deque(map(int, chosen))

    def _select(self, k: int, budget: float, eligible: np.ndarray | None) -> np.ndarray:
        """``policy.select``; should it fail on its own state, every source is checked and
        repaired (:meth:`repair_policy`) and the selection tried once more: one source's
        state never stops the crawl."""
        try:
            return self.policy.select(k, budget, eligible)
        except (ValueError, FloatingPointError, ZeroDivisionError, OverflowError) as exc:
            if not self.repair_policy(None, cause=f"{type(exc).__name__}: {exc}").size:
                raise
            return self.policy.select(k, budget, eligible)

    def repair_policy(self, ids: Iterable[int] | None, cause: str = "") -> np.ndarray:
        """Have the policy check the learned state of sources ``ids`` (None: all) and reset
        those whose state is unusable to their prior (``Policy.repair``): logged once per
        source, counted under ``whittle/state_resets``. Returns the ids reset."""
        if ids is None:
            self._unchecked.clear()
            reset = self.policy.repair(None)
        else:
            checked = np.fromiter(ids, dtype=np.int64)
            checked = checked[checked < self.policy.n]
            reset = self.policy.repair(checked) if checked.size else checked
        reset = np.asarray(reset, dtype=np.int64)
        if reset.size:
            self.stats.inc("state_resets", int(reset.size))
            why = f" ({cause})" if cause else ""
            for sid in reset.tolist():
                self._log_once(sid, "state_reset", self.sources.url(sid),
                               f"learned state unusable{why}: reset to the prior")
                self._touch(sid)
            self._policy_touched = True
        return reset

    def _dispatch(self, sid: int, now: float, epoch: int) -> Crawl:
        src, state = self.sources, self.state
        src.dispatched(sid, now + self.max_flight)
        cost = src.cost.item(sid)
        self.spent += cost
        stats = self.stats
        stats.inc("crawls")
        stats.inc("crawls/cost", cost)
        agg = self._epochs[epoch]
        agg[0] += 1
        agg[1] += cost
        self._run_cost += cost
        state.crawls[sid] += 1
        if self.store is not None:
            state.dirty[sid] = True
        headers = {}
        if self.config.conditional_get:
            etag = state.etag.get(sid)
            if etag:
                headers["If-None-Match"] = etag
            modified = state.modified.item(sid)
            if modified:
                headers["If-Modified-Since"] = http_date(modified)
        return Crawl(sid, src.url(sid), epoch, now, headers)

    # -- closing and stats ------------------------------------------------------------------
    def budget_used(self) -> float | None:
        """Cost spent over the completed epochs of this run / (M x those epochs)."""
        if self.origin is None or self.first_epoch is None:
            return None
        done = self.epoch_of(self.clock.now())
        n_epochs = done - self.first_epoch
        if n_epochs <= 0:
            return None
        spent = self._run_cost - (self.spent if self.epoch >= done else 0.0)
        return spent / (self.config.budget * n_epochs)

    def close(self) -> None:
        """Flush, write the last checkpoint, close the store."""
        used = self.budget_used()
        if used is not None:
            self.stats.set("budget_used", used)
        self.flush()
        if self.store is not None and self.policy is not None:
            self.store.write(self.prepare_checkpoint())
            self.store.close()

    def _decision_time(self, seconds: float, calls: int) -> None:
        name = self.config.policy
        self.stats.inc(f"decision/{name}/seconds", seconds)
        if calls:
            self.stats.inc(f"decision/{name}/calls", calls)

    def _log_once(self, sid: int, kind: str, url: str, message: str,
                  level: int = logging.WARNING) -> None:
        if (sid, kind) in self._logged:
            logger.debug("source %d (%s): %s", sid, url, message)
            return
        self._logged.add((sid, kind))
        logger.log(level, "source %d (%s): %s", sid, url, message)
