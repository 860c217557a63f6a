"""The re-crawl service: one crawl of a set of feeds, with no Scrapy in it.

It owns the sources (:class:`~scrapy_whittle.source_table.SourceTable`), the entries already
seen (:class:`~scrapy_whittle.entry_memory.EntryMemory`), the conditional-GET validators, the
epoch clock, the policy and the state store, behind a narrow API that Scrapy's scheduler and
middleware, the simulator and the benchmarks all drive:

* ``open(specs)`` / ``close()``; ``add_sources(specs)``; ``set_crawl_delay(host, s)``;
* ``next_crawl(hosts)`` -> a :class:`Crawl` (URL, conditional-GET headers, epoch) or None,
  and then ``wake_at``: when to ask again (``hosts``: which hosts are saturated, a
  :class:`HostLoad`);
* what a crawl showed: ``feed_fetched(crawl, entries, etag=, last_modified=, hints=)``
  (returns the new entries and their values), ``not_modified(...)``,
  ``crawl_failed(crawl, kind, cause, retry_after=)``; ``hints`` and ``retry_after``: what the
  server and the feed asked about the next visit (:mod:`scrapy_whittle.hints`);
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
(:mod:`scrapy_whittle.sanitize`: values, publication times, bursts of unseen entries); before
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
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from collections.abc import Iterable
from itertools import chain
from typing import Any, NamedTuple, Protocol

import numpy as np

from scrapy_whittle import sanitize
from scrapy_whittle.bulk import gc_paused
from scrapy_whittle.clock import SystemClock
from scrapy_whittle.columns import Col, PerSourceArrays, StringColumn, dtype_from_descr
from scrapy_whittle.entry_memory import EntryMemory
from scrapy_whittle.estimators import RateEstimator
from scrapy_whittle.estimators._base import segment_rows
from scrapy_whittle.feeds import FeedEntry
from scrapy_whittle.hints import ServerHints
from scrapy_whittle.httpdates import http_date, unix_seconds
from scrapy_whittle.observation import Observation
from scrapy_whittle.periodic import PeriodicArrivals, arrivals_from_bins
from scrapy_whittle.policies import Policy, make_policy, policy_class
from scrapy_whittle.problem import Problem, SourceParams
from scrapy_whittle.settings import InvalidSetting, WhittleConfig
from scrapy_whittle.source_table import SourceTable
from scrapy_whittle.sources import SourceSpec
from scrapy_whittle.state_codec import StateDecodeError, decode, encode
from scrapy_whittle.store import Checkpoint, SavedState, StateStore, StoreError

logger = logging.getLogger(__name__)

FLUSH_AFTER = 0.25          # seconds a crawl result may wait before the policy learns it


class Stats(Protocol):
    def inc(self, key: str, count: float = 1) -> None: ...

    def set(self, key: str, value: Any) -> None: ...

    def get(self, key: str, default: Any = 0) -> Any: ...


class HostLoad(Protocol):
    """Which hosts cannot take another request now (Scrapy: a saturated download slot)."""

    def saturated(self, host: str) -> bool: ...

    def all_saturated(self) -> Iterable[str]: ...


class NoLoad:
    """Every host can take a request (the service without a downloader)."""

    def saturated(self, host: str) -> bool:
        return False

    def all_saturated(self) -> Iterable[str]:
        return ()


NO_LOAD = NoLoad()


class DictStats:
    """Stats in a plain dict (the service without Scrapy)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def inc(self, key: str, count: float = 1) -> None:
        self.values[key] = self.values.get(key, 0) + count

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value

    def get(self, key: str, default: Any = 0) -> Any:
        return self.values.get(key, default)


class PrefixedStats:
    """Stats under a prefix of another sink's (a cluster's planner beside its worker)."""

    def __init__(self, stats: Stats, prefix: str) -> None:
        self.stats, self.prefix = stats, prefix

    def inc(self, key: str, count: float = 1) -> None:
        self.stats.inc(self.prefix + key, count)

    def set(self, key: str, value: Any) -> None:
        self.stats.set(self.prefix + key, value)

    def get(self, key: str, default: Any = 0) -> Any:
        return self.stats.get(self.prefix + key, default)


class Crawl(NamedTuple):
    """One fetch of a source, as handed to the downloader (a tuple: cheap to make). ``cid``
    and ``weight``: a cluster's crawl id and the source's weight, carried with the task."""

    source: int
    url: str
    epoch: int
    sent_at: float
    headers: dict[str, str]
    cid: str = ""
    weight: float = 1.0


class FetchResult(NamedTuple):
    """The new entries a fetch found, their values at capture, and whether every entry
    the feed showed was new (older new ones may have been lost)."""

    entries: list[FeedEntry]
    values: list[float]
    window_full: bool


def entry_values(entries: list[FeedEntry], weight: float, config: WhittleConfig
                 ) -> list[float]:
    """The value of new entries at capture: engagement / ``WHITTLE_ENGAGEMENT_SCALE`` when the
    feed shows one, else ``WHITTLE_ITEM_VALUE`` x the source's weight; each within the
    plausible range of :mod:`scrapy_whittle.sanitize`."""
    return valued(entries, weight, config)[0]


def valued(entries: list[FeedEntry], weight: float, config: WhittleConfig
           ) -> tuple[list[float], int]:
    """(:func:`entry_values`, how many of them were clipped)."""
    return sanitize.entry_values([e.engagement for e in entries], weight * config.item_value,
                                 config.engagement_scale)


class _SourceState(PerSourceArrays):
    """Per-source validators and counters kept by the service (Last-Modified as unix
    seconds, 0 = none; the ETags packed in a StringColumn). ``last_ok`` (when the last
    successful fetch was sent) and ``peak`` (most new entries one fetch taught) bound what
    a fetch may teach (:mod:`scrapy_whittle.sanitize`); they are not stored: after a restart
    a source's next fetch is treated as its first."""

    per_source = {"modified": Col(0, np.uint32),
                  "crawls": Col(0, np.uint32), "errors": Col(0, np.uint32),
                  "new_items": Col(0, np.uint32), "utility": Col(0.0, np.float32),
                  "last_ok": Col(np.nan, np.float64), "peak": Col(0, np.uint32)}

    def __init__(self) -> None:
        self.etag = StringColumn()
        self._init_arrays(0)

    def grow(self, k: int) -> None:
        self.grow_arrays(k)
        self.etag.grow_arrays(k)


class RecrawlService:
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
        self.plan: list[int] = []
        self.spent = 0.0
        self.wake_at = math.inf          # when next_crawl may give something again
        self._pending_grow: list[int] = []
        self._grown_since_select: list[int] = []
        self._buffer: list[tuple] = []
        self._buffer_since = math.inf
        self._declared: dict[int, float] = {}      # source -> rate its feed declares (/s)
        self._own_rates: RateEstimator | None = None
        self._logged: set[tuple[int, str]] = set()
        self._dirty: set[int] = set()
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
        with gc_paused():               # a million rows of tuples: see scrapy_whittle.bulk
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
        options = dict(self.config.policy_options)
        if self.oracle is not None and policy_class(self.config.core_policy).needs_rhythms:
            alpha, periodic_u = self._oracle_rhythms(range(n), strict=True)
            options["periodic"] = PeriodicArrivals(alpha, periodic_u, 0)
            u = periodic_u.mean(axis=1)
        problem = Problem(n=n, cost=self.sources.cost[:n].copy(), period=self.config.period,
                          alpha=alpha, u=u)
        return make_policy(self.config.core_policy, problem, rng=self.config.seed, **options)

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
            self._dirty.update(changed.tolist())
        if back.size or leaving.size:
            self.plan = [sid for sid in self.plan if not self.sources.left[sid]]
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
                self._dirty.update(new)
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
            self._dirty.update(self._grown_since_select)
        self._grown_since_select = []
        self.stats.inc("epochs")
        self.plan = [int(s) for s in chosen]

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
            self._dirty.add(sid)
        headers = {}
        if self.config.conditional_get:
            etag = state.etag.get(sid)
            if etag:
                headers["If-None-Match"] = etag
            modified = state.modified.item(sid)
            if modified:
                headers["If-Modified-Since"] = http_date(modified)
        return Crawl(sid, src.url(sid), epoch, now, headers)

    # -- what crawls showed -----------------------------------------------------------------
    def feed_fetched(self, crawl: Crawl, entries: list[FeedEntry], *,
                     etag: str | None = None, last_modified: str | None = None,
                     hints: ServerHints | None = None) -> FetchResult:
        """A fetch of ``crawl`` returned a feed with ``entries`` (feed order): the new ones,
        valued, are returned, and the crawl is recorded (:meth:`record_fetch`)."""
        sid, memory = crawl.source, self.memory
        had_before = memory.size.item(sid) > 0
        new = memory.new_entries(sid, entries)
        visible = memory.last_visible
        window_full = had_before and visible > 0 and len(new) == visible
        values, clipped = valued(new, self.sources.weight.item(sid), self.config)
        if clipped:
            self.stats.inc("clipped/value", clipped)
        self.record_fetch(crawl, len(new), float(sum(values)), window_full,
                          [e.published for e in new], etag=etag,
                          last_modified=last_modified, now=self.clock.now(), hints=hints)
        return FetchResult(new, values, window_full)

    def record_fetch(self, crawl: Crawl, new_items: int, reward: float, window_full: bool,
                     published: list[float | None], *, etag: str | None = None,
                     last_modified: str | None = None, now: float | None = None,
                     hints: ServerHints | None = None) -> None:
        """A fetch of ``crawl`` found ``new_items`` new entries worth ``reward`` in all,
        published at ``published`` (unix seconds, None: unknown): the policy learns it, the
        stats count it. (Where the entries were told new elsewhere: a cluster's workers.)
        What the policy learns is kept within :mod:`scrapy_whittle.sanitize`'s ranges."""
        sid = crawl.source
        now = self.clock.now() if now is None else now
        new_items, reward, learned = self._learnable(crawl, new_items, reward, published, now,
                                                     window_full)
        if etag or last_modified:
            self._remember_validators(sid, etag, last_modified)
        self._observe(crawl, now, True, *learned)
        if hints is not None:
            self._apply_hints(sid, hints, now)
        inc = self.stats.inc
        inc("fetched")
        inc("new_items", new_items)
        inc("utility", reward)
        if window_full:
            inc("window_full")
        agg = self._epochs[crawl.epoch]
        agg[2] += new_items
        agg[3] += reward
        state = self.state
        if new_items:
            state.new_items[sid] += new_items
        if reward:
            state.utility[sid] += reward

    def _learnable(self, crawl: Crawl, new_items, reward, published, now: float,
                   window_full: bool) -> tuple[int, float, tuple[int, float, bool, list[float]]]:
        """(new entries, their value, what the policy learns: (count, value, window full,
        publication times)) of a fetch, within the plausible ranges
        (:mod:`scrapy_whittle.sanitize`). A burst teaches a plain count (no window
        censoring: the entries it leaves out were not lost)."""
        sid = crawl.source
        if new_items.__class__ is not int or reward.__class__ is not float:
            try:                               # from a worker, through Redis
                new_items, reward = int(new_items), float(reward)
            except (TypeError, ValueError, OverflowError):
                new_items, reward = 0, 0.0
        new_items = min(max(new_items, 0), self.memory.max_per_source)
        top = new_items * sanitize.MAX_ENTRY_VALUE
        if not 0.0 <= reward <= top:
            self.stats.inc("clipped/value")
            reward = min(reward, top) if reward > 0 else 0.0
        if published.__class__ is not list or len(published) != new_items:
            published = list(published)[:new_items] if isinstance(published, list | tuple) \
                else []
            published += [None] * (new_items - len(published))
        state = self.state
        since = state.last_ok.item(sid)
        first = not math.isfinite(since)
        times, changed = sanitize.learnable_times(published, now, None if first else since)
        if True in changed:
            self.stats.inc("clipped/published", sum(changed))
        state.last_ok[sid] = crawl.sent_at
        peak = state.peak.item(sid)
        cap = sanitize.burst_cap(peak) if peak > sanitize.BURST_MIN // sanitize.BURST_FACTOR \
            else sanitize.BURST_MIN
        learned_n, learned_value = new_items, reward
        if new_items > cap:
            if not first:       # a sudden burst: only entries dated after the last fetch
                times = [t for t, bad in zip(times, changed, strict=True) if not bad]
            times = sanitize.newest(times, cap)
            learned_n = len(times)
            learned_value = reward * learned_n / new_items
            if not first:
                window_full = False
                self.stats.inc("bursts")
                self._log_once(sid, "burst", crawl.url,
                               f"{new_items} unseen entries at once: the policy learns from "
                               f"{learned_n} of them only", logging.INFO)
        if learned_n > peak:
            state.peak[sid] = learned_n
        return new_items, reward, (learned_n, learned_value, bool(window_full), times)

    def not_modified(self, crawl: Crawl, *, etag: str | None = None,
                     last_modified: str | None = None, hints: ServerHints | None = None
                     ) -> None:
        """The server answered 304 Not Modified: a successful crawl that found nothing new."""
        self._remember_validators(crawl.source, etag, last_modified)
        self.state.last_ok[crawl.source] = crawl.sent_at
        self.stats.inc("not_modified")
        self._epochs[crawl.epoch][5] += 1
        now = self.clock.now()
        self._observe(crawl, now, True, 0, 0.0, False, [])
        self._apply_hints(crawl.source, hints, now)
        self.stats.inc("fetched")

    def crawl_failed(self, crawl: Crawl, kind: str, cause: str,
                     retry_after: float | None = None) -> float:
        """The fetch failed (``kind``: the stats key under ``errors/``); the source backs off,
        at least ``retry_after`` seconds if the server asked (capped by
        ``WHITTLE_HINTS_MAX_DELAY``). Logged once per source and kind. Returns the back-off
        in seconds."""
        now = self.clock.now()
        at_least = 0.0
        if retry_after is not None and self.config.hints and retry_after > 0:
            at_least = min(float(retry_after), self.config.hints_max_delay)
            self.stats.inc("hints/retry_after")
        backoff = self._observe(crawl, now, False, 0, 0.0, False, [], at_least)
        self.stats.inc(f"errors/{kind}")
        self._epochs[crawl.epoch][4] += 1
        self._epoch_errors[crawl.epoch, kind] += 1
        self.state.errors[crawl.source] += 1
        self._log_once(crawl.source, kind, crawl.url, f"{cause}; backing off {backoff:.3g} s")
        return backoff

    def feed_warnings(self, crawl: Crawl, warnings: list[str]) -> None:
        """A usable feed had problems (a parser's complaints): counted, logged once."""
        self.stats.inc("warnings")
        self._log_once(crawl.source, "warning", crawl.url, "; ".join(warnings), logging.INFO)

    def _observe(self, crawl: Crawl, now: float, ok: bool, new_items: int, reward: float,
                 window_full: bool, published: list[float], at_least: float = 0.0) -> float:
        sid = crawl.source
        if not self._buffer:
            self._buffer_since = now
        self._buffer.append((crawl.epoch, sid, now - self.origin, new_items, reward, ok,
                             window_full, published))
        if self.store is not None:
            self._dirty.add(sid)
        backoff = self.sources.crawl_done(sid, when=crawl.sent_at, ok=ok, now=now,
                                          at_least=at_least)
        if now - self._buffer_since >= FLUSH_AFTER:
            self.flush()
        return backoff

    def _apply_hints(self, sid: int, hints: ServerHints | None, now: float) -> None:
        """What a successful fetch's server and feed asked about the next visit (the module
        docstring of :mod:`scrapy_whittle.hints`): "not before"s capped, skip masks, the
        declared publishing rate (a prior, given to the policy at the next flush)."""
        if hints is None or not self.config.hints:
            return
        cap = now + self.config.hints_max_delay
        until = 0.0
        if hints.not_before > now:
            until = min(hints.not_before, cap)
            self.stats.inc(f"hints/{hints.why}")
        feed = hints.feed
        if feed is not None:
            if feed.ttl:
                until = max(until, min(now + feed.ttl, cap))
                self.stats.inc("hints/ttl")
            self.sources.set_skips(sid, feed.skip_hours, feed.skip_days)
            if feed.skip_hours or feed.skip_days:
                self.stats.inc("hints/skip")
            if feed.update_rate:
                self._declared[sid] = feed.update_rate
                self.stats.inc("hints/update_period")
        if until > now:
            self.sources.not_before_hint(sid, until)

    def _touch(self, sid: int) -> None:
        """Source ``sid`` changed: the next checkpoint writes its row."""
        if self.store is not None:
            self._dirty.add(sid)

    def _remember_validators(self, sid: int, etag: str | None, last_modified: str | None
                             ) -> None:
        if etag:
            self.state.etag.set(sid, etag)
        if last_modified:
            when = unix_seconds(last_modified)
            if when:                      # unreadable: no If-Modified-Since, ETag still works
                self.state.modified[sid] = when

    def flush(self) -> None:
        """Give the buffered crawl results to the policy (one Observation per epoch)."""
        if not self._buffer or self.policy is None:
            return
        buffered, self._buffer, self._buffer_since = self._buffer, [], math.inf
        self._grow_policy()
        if self._declared:
            declared, self._declared = self._declared, {}
            self.policy.set_prior_rate(list(declared), list(declared.values()))
        self._unchecked.update(row[1] for row in buffered)
        by_epoch: dict[int, list[tuple]] = defaultdict(list)
        for row in buffered:
            by_epoch[row[0]].append(row)
        t = time.perf_counter()
        for epoch in sorted(by_epoch):
            _, sources, times, new_items, reward, ok, window_full, published = \
                zip(*by_epoch[epoch], strict=True)
            offsets = np.zeros(len(sources) + 1, dtype=np.int64)
            np.cumsum(list(map(len, published)), out=offsets[1:])
            item_published = np.fromiter(chain.from_iterable(published), dtype=np.float64,
                                         count=int(offsets[-1]))
            item_published -= self.origin
            obs = Observation(epoch=epoch, sources=sources, time=times, new_items=new_items,
                              reward=reward, ok=ok, window_full=window_full,
                              item_offsets=offsets, item_published=item_published)
            self._observe_missed(obs)
        self._decision_time(time.perf_counter() - t, calls=0)
        self._policy_touched = True

    def _observe_missed(self, obs: Observation) -> None:
        """``policy.observe``, and the ``missed_items`` stat: entries lost to full windows,
        from the policy's rate estimates (or the service's own, for a policy without)."""
        rates = self.policy.rate_estimator()
        if rates is not None:
            ids = np.unique(obs.sources[obs.ok])
            before = float(rates.missed[ids].sum(dtype=np.float64))
            self.policy.observe(obs)
            missed = float(rates.missed[ids].sum(dtype=np.float64)) - before
        else:
            self.policy.observe(obs)
            missed = self._own_missed(obs)
        if missed > 0:
            self.stats.inc("missed_items", missed)

    def _own_missed(self, obs: Observation) -> float:
        rates, total = self._own_rates, 0.0
        ok = np.flatnonzero(obs.ok)
        # one crawl per source per call: later crawls of a source in later passes
        order = ok[np.lexsort((obs.time[ok], obs.sources[ok]))]
        while order.size:
            _, first = np.unique(obs.sources[order], return_index=True)
            take, order = order[first], np.delete(order, first)
            off, idx = segment_rows(obs.item_offsets, take)
            _, missed = rates.observe_crawls(obs.sources[take], obs.time[take], off,
                                             obs.item_published[idx], obs.window_full[take])
            total += float(missed.sum())
        return total

    def report_value(self, source: str | int, value: float, *, published: float,
                     at: float | None = None, base_value: float | None = None) -> bool:
        """Feedback from the spider: an entry of ``source`` (its URL or id), published at unix
        time ``published``, was worth ``value`` at unix time ``at`` (default now). Garbage
        (unknown source, non-finite or negative value, ``at`` before ``published``, an age
        beyond :data:`scrapy_whittle.sanitize.MAX_AGE`) is refused and counted under
        ``feedback/refused``; a value above ``MAX_ENTRY_VALUE`` is clipped to it. Returns
        whether the policy used it."""
        sid = self.sources.id_of(source) if isinstance(source, str) else source
        at = self.clock.now() if at is None else at
        usable = (isinstance(sid, int | np.integer) and 0 <= sid < len(self.sources)
                  and self.policy is not None)
        try:
            checked = sanitize.feedback(value, float(at) - float(published))
        except (TypeError, ValueError):
            checked = None
        if base_value is not None:
            base = sanitize.feedback(base_value, 0.0)
            checked = None if base is None else checked
            base_value = None if base is None else base[0]
        accepted = False
        if usable and checked is not None:
            self.flush()
            self._grow_policy()
            accepted = bool(self.policy.report_value(int(sid), *checked, base_value))
        if accepted:
            self._touch(int(sid))
            self._unchecked.add(int(sid))
            self._policy_touched = True
        self.stats.inc("feedback/accepted" if accepted else "feedback/refused")
        return accepted

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

    # -- persistence --------------------------------------------------------------------------
    def checkpoint_due(self) -> bool:
        return (self.store is not None and self.policy is not None
                and time.monotonic() - self._last_checkpoint >= self.config.checkpoint_interval)

    def checkpoint(self) -> None:
        """Write what changed since the previous checkpoint (blocking)."""
        if self.store is not None and self.policy is not None:
            self.store.write(self.prepare_checkpoint())

    def prepare_checkpoint(self) -> Checkpoint:
        """What changed since the previous checkpoint, ready for ``StateStore.write``, which
        may run in another thread: this takes copies of the changed rows (vectorised, on the
        caller's thread); the checkpoint turns them into SQL rows when written."""
        self.flush()
        self._grow_policy()
        self._last_checkpoint = time.monotonic()
        cp = Checkpoint(taken_at=self.clock.now(), meta={
            "origin": self.origin, "period": self.config.period, "budget": self.config.budget,
            "policy": self.config.core_policy})
        new, self._new = self._new, []
        cp.n_new = len(new)
        cp.new_sources = lambda: ((sid, spec.url, spec.title, spec.category,
                                   float(spec.weight), float(spec.min_interval))
                                  for sid, spec in new)
        ids = np.fromiter(self._dirty, dtype=np.int64, count=len(self._dirty))
        ids.sort()
        self._dirty = set()
        cp.n_changed = int(ids.shape[0])
        if ids.size:
            cp.source_rows = _SourceRows(self._snapshot(ids))
            for name, (sub, rows) in self.policy.export_blocks(ids).items():
                raw, size = rows.tobytes(), rows.dtype.itemsize
                cp.blocks += [(int(s), name, raw[j * size:(j + 1) * size])
                              for j, s in enumerate(sub.tolist())]
        if self._policy_touched:
            layout = json.dumps(self.policy.row_dtype().descr)
            cp.policy = (self.policy.name, layout, encode(self.policy.global_state()))
            self._policy_touched = False
        # the epochs' aggregates since the last checkpoint: the store adds them up
        cp.epochs = [(k, int(a[0]), float(a[1]), int(a[2]), float(a[3]), int(a[4]), int(a[5]))
                     for k, a in self._epochs.items()]
        cp.epoch_errors = [(k, kind, n) for (k, kind), n in self._epoch_errors.items()]
        self._epochs.clear()
        self._epoch_errors.clear()
        return cp

    def _snapshot(self, ids: np.ndarray) -> dict[str, Any]:
        """Copies of the state of sources ``ids`` that a checkpoint writes."""
        src, st = self.sources, self.state
        summary = self.policy.summary(ids)
        rows = self.policy.export_rows(ids)
        etags = st.etag
        return {"ids": ids, "last_crawl": src.last_crawl[ids], "retry_at": src.retry_at[ids],
                "failures": src.failures[ids], "flags": src.flags(ids),
                "etag": etags.get_many(ids),
                "modified": st.modified[ids], "crawls": st.crawls[ids],
                "errors": st.errors[ids], "new_items": st.new_items[ids],
                "utility": st.utility[ids], "rate": summary.get("rate"),
                "half_life": summary.get("half_life"), "value": summary.get("value"),
                "policy_rows": rows, "entries": self.memory.export_keys(ids)}

    def _restore(self, saved: SavedState) -> None:
        cols, n = saved.sources, saved.n_sources
        ids = np.arange(n)
        src, st = self.sources, self.state

        def array(name, fill, dtype=np.float64):
            values = np.array(cols[name], dtype=np.float64)     # NULL (None) -> NaN
            return np.where(np.isnan(values), fill, values).astype(dtype)

        src.last_crawl[ids] = array("last_crawl", -np.inf)
        src.retry_at[ids] = array("retry_at", 0.0)
        src.failures[ids] = array("failures", 0, np.int64)
        src.set_flags(ids, array("flags", 0, np.int64))
        for sid, etag in enumerate(cols["etag"]):
            if etag:
                st.etag.set(sid, etag)
        st.modified[ids] = array("modified", 0, np.int64)
        for name in ("crawls", "errors", "new_items", "utility"):
            getattr(st, name)[ids] = array(name, 0)
        self.memory.import_keys(ids, cols["entries"])
        self._restore_policy(saved)
        self._policy_touched = False
        logger.info("re-crawl service: restored %d sources from %s (checkpoint %s)",
                    n, self.store.path, saved.meta.get("checkpoint_seq"))

    def _repair_bookkeeping(self, now: float) -> None:
        """Restored book-keeping that would block a source for ever (a back-off or a last
        crawl that is not finite or lies beyond what the settings allow) or poison a stat (a
        counter that is not finite) is brought back into range; counted, logged once."""
        src, st = self.sources, self.state
        n = len(src)
        latest_retry = now + self.config.backoff_max
        bad = ~(src.retry_at[:n] <= latest_retry)
        bad |= np.isnan(src.last_crawl[:n]) | (src.last_crawl[:n] > now)
        bad |= ~np.isfinite(st.utility[:n])
        ids = np.flatnonzero(bad)
        if not ids.size:
            return
        src.retry_at[ids] = np.where(src.retry_at[ids] <= latest_retry, src.retry_at[ids], now)
        last = src.last_crawl[ids]
        src.last_crawl[ids] = np.where(np.isnan(last) | (last > now), -np.inf, last)
        st.utility[ids] = np.where(np.isfinite(st.utility[ids]), st.utility[ids], 0.0)
        self.stats.inc("state_resets", int(ids.size))
        self._dirty.update(ids.tolist())
        logger.warning("re-crawl service: the stored book-keeping of %d sources was out of "
                       "range (back-off, last crawl or utility): repaired", ids.size)

    def _restore_policy(self, saved: SavedState) -> None:
        if saved.policy is None:
            return
        name, layout, blob = saved.policy
        if name != self.policy.name:
            logger.warning("the stored state was learned by policy %r, not %r: the policy "
                           "starts from scratch (the sources, their entries and validators "
                           "are kept)", name, self.policy.name)
            return
        try:
            dtype = dtype_from_descr(json.loads(layout))
            blobs = saved.sources["policy_row"]
            with_rows = [i for i, b in enumerate(blobs) if b is not None]
            if with_rows and dtype.itemsize:
                raw = b"".join(blobs[i] for i in with_rows)
                self.policy.import_rows(with_rows, np.frombuffer(raw, dtype=dtype))
            blocks: dict[str, tuple[list[int], list[bytes]]] = defaultdict(lambda: ([], []))
            for sid, block, data in saved.blocks:
                blocks[block][0].append(sid)
                blocks[block][1].append(data)
            self.policy.import_blocks(self._decode_blocks(blocks))
            self.policy.load_global_state(decode(blob))
        except (ValueError, TypeError, KeyError, StateDecodeError) as exc:
            logger.error("the stored state of policy %r cannot be restored (%s): it starts "
                         "from scratch", name, exc)
            self.policy = self._build_policy(len(self.sources))

    def _decode_blocks(self, blocks) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        dtypes = self.policy.block_dtypes()
        out = {}
        for name, (sids, datas) in blocks.items():
            dtype = dtypes.get(name)
            if dtype is None or any(len(d) != dtype.itemsize for d in datas):
                raise ValueError(f"block {name!r} does not match this policy's layout")
            out[name] = (np.asarray(sids, dtype=np.int64),
                         np.frombuffer(b"".join(datas), dtype=dtype))
        return out


class _SourceRows:
    """The UPDATE rows of a checkpoint (STATE_COLUMNS + id), made from a snapshot when the
    store writes them."""

    def __init__(self, snap: dict[str, Any]) -> None:
        self.snap = snap

    def __call__(self):
        s = self.snap
        n = s["ids"].shape[0]
        rows = s["policy_rows"]
        raw, size = rows.tobytes(), rows.dtype.itemsize
        hour = 3600.0

        def readable(key, scale):
            values = s[key]
            if values is None:
                return [None] * n
            return [v * scale if math.isfinite(v) else None for v in values.tolist()]

        columns = zip(
            [x if math.isfinite(x) else None for x in s["last_crawl"].tolist()],
            s["retry_at"].tolist(), s["failures"].tolist(), s["flags"].tolist(), s["etag"],
            s["modified"].tolist(),
            s["crawls"].tolist(), s["errors"].tolist(), s["new_items"].tolist(),
            s["utility"].tolist(), readable("rate", hour), readable("half_life", 1 / hour),
            readable("value", 1.0),
            [raw[j * size:(j + 1) * size] if size else None for j in range(n)],
            s["entries"], s["ids"].tolist(), strict=True)
        return columns
