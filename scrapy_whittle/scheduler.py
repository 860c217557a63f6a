"""``WhittleScheduler``: Scrapy's scheduler, with the re-crawl of feeds chosen by a policy.

Two kinds of requests pass through it:

* **source requests** (feeds): never queued. Time is cut into epochs of ``WHITTLE_PERIOD``
  seconds (T); at the first poll of epoch k the policy picks sources of total cost at most
  ``WHITTLE_BUDGET`` (M) with ``policy.select(k, M)``, and these are handed out as soon as
  the downloader takes them (or spread evenly over the epoch with ``WHITTLE_SPREAD``). What
  an epoch does not use is lost, so crawls in any epoch never cost more than M. When nothing
  may be crawled the scheduler still reports pending requests (the spider stays open) and
  wakes the engine itself at the next due time (``engine._slot.nextcall.schedule()``), so a
  crawl never waits for the engine's 5 s heartbeat and nothing polls in between.
* **every other request** goes to a wrapped ``scrapy.core.scheduler.Scheduler`` (dupefilter,
  priority queues, JOBDIR disk queues unchanged). Redirects and retries of a source request
  (they carry ``meta["whittle_source_id"]``) are served first and cost no budget. A request
  with ``meta["whittle_source"] = True`` registers its URL as a new source (it is not
  downloaded now; the policy decides when) and becomes the template of that source's requests
  (callback, headers, cb_kwargs).

Politeness: a planned source whose download slot is saturated is passed over for planned
sources fetchable now; a source in flight, backing off after errors or crawled less than its
minimum interval ago is masked out of the choice (``select_top(eligible=...)``) for policies
that expose ``priority()``. Costs: C_i = max(1, d_i M / T) where d_i is the source's minimum
interval or its slot's download delay (``DOWNLOAD_SLOTS``), whichever is larger.

State (policy, entry memory, validators, source registry, epoch origin) is pickled to
``JOBDIR/whittle.state.pickle`` on close and loaded on open.
"""

from __future__ import annotations

import inspect
import logging
import math
import pickle
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from scrapy import Request, signals
from scrapy.core.scheduler import BaseScheduler, Scheduler
from scrapy.exceptions import NotConfigured
from scrapy.utils.asyncio import call_later
from scrapy.utils.job import job_dir

from scrapy_whittle.settings import WhittleConfig
from scrapy_whittle.source_table import SourceTable
from scrapy_whittle.sources import (
    SourceListError,
    SourceSpec,
    load_oracle,
    load_sources,
)
from scrapy_whittle.stats import WhittleStats

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

logger = logging.getLogger(__name__)

META_ID = "whittle_source_id"
META_REGISTER = "whittle_source"


STATE_FILE = "whittle.state.pickle"


def _load_state(jobdir: str) -> dict | None:
    path = Path(jobdir) / STATE_FILE
    if not path.exists():
        return None
    with path.open("rb") as f:
        state = pickle.load(f)
    if state.get("version") != 1:
        logger.warning("ignoring %s: unknown state version %r", path, state.get("version"))
        return None
    return state


def _save_state(jobdir: str, state: dict) -> None:
    path = Path(jobdir) / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        pickle.dump({"version": 1, **state}, f, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(path)


def _entry_memory(max_per_source: int):
    from scrapy_whittle.entry_memory import EntryMemory

    return EntryMemory(max_per_source=max_per_source)


def _quiet_errback(failure):
    """Errback of source requests: the middleware has logged and counted the failure once."""
    return None


class WhittleScheduler(BaseScheduler):
    """See the module docstring; settings in ``scrapy_whittle.settings`` / docs/scrapy.md."""

    def __init__(self, inner: Scheduler | Any, config: WhittleConfig, *,
                 sources: list[SourceSpec] | None = None, oracle: dict | None = None,
                 crawler: Crawler | None = None, stats: Any = None, jobdir: str | None = None,
                 slot_delays: dict[str, float] | None = None, max_flight: float = 600.0,
                 clock=time.time) -> None:
        self.inner = inner
        self.config = config
        self.crawler = crawler
        self.jobdir = jobdir
        self.clock = clock
        self.max_flight = max_flight
        self.oracle = oracle
        self.stats = WhittleStats(stats, config.logstats_interval, config.policy)
        self.sources = SourceTable(config, slot_delays)
        self._initial = list(sources or [])
        self.policy = None
        self.memory = None
        self.t0: float | None = None
        self.epoch = -1
        self.plan: list[int] = []
        self.spent = 0.0
        self.followups: deque[Request] = deque()
        self.templates: dict[int, Request] = {}
        self.validators: dict[int, tuple[str | None, str | None]] = {}
        self._wakeup = None
        self._wakeup_at = math.inf
        self._pending_grow: list[int] = []
        self.polls = 0                        # next_request calls that looked at sources

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> WhittleScheduler:
        settings = crawler.settings
        config = WhittleConfig.from_settings(settings)
        try:
            sources = load_sources(config.sources)
        except SourceListError as exc:
            raise NotConfigured(f"WHITTLE_SOURCES ({config.sources!r}): {exc}") from None
        oracle = None
        if config.policy == "oracle":
            oracle = load_oracle(config.oracle_params)
        slots = settings.getdict("DOWNLOAD_SLOTS")
        slot_delays = {k: float(v.get("delay", 0.0)) for k, v in slots.items()
                       if isinstance(v, dict)}
        retries = settings.getint("RETRY_TIMES") if settings.getbool("RETRY_ENABLED") else 0
        max_flight = settings.getfloat("DOWNLOAD_TIMEOUT") * (retries + 2) + 60.0
        mws = {**settings.getdict("DOWNLOADER_MIDDLEWARES_BASE"),
               **settings.getdict("DOWNLOADER_MIDDLEWARES")}
        if not any(str(k).endswith("FeedObserverMiddleware") and v is not None
                   for k, v in mws.items()):
            logger.warning("WhittleScheduler without FeedObserverMiddleware in "
                           "DOWNLOADER_MIDDLEWARES: the policy will learn nothing")
        inner = Scheduler.from_crawler(crawler)
        obj = cls(inner, config, sources=sources, oracle=oracle, crawler=crawler,
                  stats=crawler.stats, jobdir=job_dir(settings), slot_delays=slot_delays,
                  max_flight=max_flight)
        crawler.signals.connect(obj._spider_idle, signal=signals.spider_idle)
        return obj

    def _register(self, spec: SourceSpec, template: Request | None = None) -> int:
        sid = self._register_many([spec])[0]
        if template is not None:
            self.templates[sid] = template
        return sid

    def _register_many(self, specs: list[SourceSpec]) -> list[int]:
        sids, new = self.sources.add(specs)
        if self.policy is not None:
            self._pending_grow.extend(new)
        return sids

    def set_crawl_delay(self, host: str, delay: float) -> None:
        """A robots.txt ``Crawl-delay`` for ``host``: it paces the host's download slot and
        enters the cost C_i of every source on the host (now and when registered later)."""
        changed = self.sources.set_crawl_delay(host, delay)
        if changed is None:
            return
        logger.info("robots.txt of %s asks for Crawl-delay %g s: pacing its slot, cost of its "
                    "sources raised accordingly", host, delay)
        try:
            slot = self.crawler.engine.downloader.slots.get(host)
        except (AttributeError, RuntimeError):
            slot = None
        if slot is not None and slot.delay < delay:
            slot.delay = delay
        if self.policy is not None:
            known = changed[changed < self.policy.problem.n]
            if known.size:
                self.policy.set_cost(known, self.sources.cost[known])

    # -- open / close -------------------------------------------------------------------
    def open(self, spider: Spider):
        self.spider = spider
        result = self.inner.open(spider)
        saved = _load_state(self.jobdir) if (self.config.state and self.jobdir) else None
        if saved is not None:
            self.sources.register_saved(saved)
        self._register_many(self._initial)
        self._register_many(load_sources(getattr(spider, "whittle_sources", None) or None))
        self.policy = self._build_policy(len(self.sources))
        self.memory = _entry_memory(self.config.max_entries_per_source)
        self.t0 = self.clock()
        if saved is not None:
            self._restore(saved)
        self.stats.set("sources", len(self.sources))
        self.stats.start()
        logger.info("WhittleScheduler: %d sources, policy %s, budget %g per %g s",
                    len(self.sources), self.config.policy, self.config.budget,
                    self.config.period)
        return result

    def _build_policy(self, n: int):
        from scrapy_whittle.policies import make_policy, policy_class
        from scrapy_whittle.problem import Problem

        alpha = u = None
        if self.oracle is not None:
            alpha, u = self._oracle_au(range(n))
        problem = Problem(n=n, cost=self.sources.cost[:n].copy(), period=self.config.period,
                          alpha=alpha, u=u)
        options = dict(self.config.policy_options)
        if self.config.half_life is not None and "prior_half_life" not in options and \
                "prior_half_life" in inspect.signature(policy_class(self.config.core_policy)
                                                       ).parameters:
            options["prior_half_life"] = self.sources.half_life_prior
        return make_policy(self.config.core_policy, problem, rng=self.config.seed, **options)

    def _oracle_au(self, sids) -> tuple[np.ndarray, np.ndarray]:
        from scrapy_whittle.problem import SourceParams

        rows = []
        for sid in sids:
            url = self.sources.url(sid)
            if url not in self.oracle:
                raise NotConfigured(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r}) "
                                    f"has no parameters for source {url}")
            rows.append(self.oracle[url])
        arr = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
        p = SourceParams(arr[:, 0], arr[:, 1], arr[:, 2], period=self.config.period)
        return p.alpha, p.u

    def _restore(self, saved: dict) -> None:
        self.t0 = saved["t0"]
        n = len(saved["registry"]["specs"])
        self.sources.load_state_dict(saved)
        self.validators.update(saved["validators"])
        if saved.get("memory") is not None:
            self.memory.load_state_dict(saved["memory"])
        if saved.get("policy_name") == self.config.core_policy:
            self.policy.load_state_dict(saved["policy"])
        else:
            logger.warning("JOBDIR state was learned by policy %r, not %r: policy state "
                           "not restored", saved.get("policy_name"), self.config.core_policy)
        logger.info("WhittleScheduler: restored state of %d sources from %s", n, self.jobdir)

    def close(self, reason: str):
        self._cancel_wakeup()
        if self.t0 is not None and len(self.sources):
            # budget use over the completed epochs: crawls (cost) / (M x epochs)
            done = self.epoch_of(self.clock())
            spent = self.stats.get("crawls/cost", 0.0) - (self.spent if self.epoch == done else 0)
            if done > 0:
                self.stats.set("budget_used", spent / (self.config.budget * done))
        self.stats.stop()
        if self.config.state and self.jobdir and self.policy is not None:
            _save_state(self.jobdir, {
                "t0": self.t0, **self.sources.state_dict(), "validators": self.validators,
                "memory": self.memory.state_dict() if self.memory is not None else None,
                "policy_name": self.config.core_policy, "policy": self.policy.state_dict()})
        return self.inner.close(reason)

    # -- the scheduler interface --------------------------------------------------------
    def has_pending_requests(self) -> bool:
        return (len(self.sources) > 0 or bool(self.followups)
                or self.inner.has_pending_requests())

    def __len__(self) -> int:
        return len(self.followups) + len(self.plan) + len(self.inner)

    def enqueue_request(self, request: Request) -> bool:
        if META_ID in request.meta:        # redirect / retry of a source request
            self.followups.append(request)
            return True
        if request.meta.get(META_REGISTER):
            template = request.replace(dont_filter=True, meta={
                k: v for k, v in request.meta.items() if k != META_REGISTER})
            sid = self._register(SourceSpec(url=request.url), template)
            self.stats.set("sources", len(self.sources))
            logger.debug("registered source %d: %s", sid, request.url)
            self._wake_now()
            return True
        return self.inner.enqueue_request(request)

    def next_request(self) -> Request | None:
        if self.followups:
            return self.followups.popleft()
        request = self._next_source_request()
        if request is not None:
            return request
        return self.inner.next_request()

    # -- source requests ----------------------------------------------------------------
    def _grow(self) -> None:
        if not self._pending_grow:
            return
        sids = self._pending_grow
        self._pending_grow = []
        if self.oracle is not None:
            alpha, u = self._oracle_au(sids)
            self.policy.grow(len(sids), self.sources.cost[sids], alpha=alpha, u=u)
        else:
            self.policy.grow(len(sids), self.sources.cost[sids])
        self.stats.set("sources", len(self.sources))

    def _start_epoch(self, k: int, now: float) -> None:
        if self.plan:
            self.stats.inc("skipped", len(self.plan))
        self.epoch, self.spent = k, 0.0
        self._grow()
        eligible = self.sources.eligible(now, self._saturated_hosts())
        t = time.perf_counter()
        if eligible.all() or not callable(getattr(self.policy, "priority", None)):
            chosen = self.policy.select(k, self.config.budget)
        else:
            from scrapy_whittle.selection import select_top

            chosen = select_top(self.policy.priority(k), self.policy.problem.cost,
                                self.config.budget, eligible)
        self.stats.decision(time.perf_counter() - t)
        self.stats.inc("epochs")
        self.plan = [int(s) for s in chosen]

    def _saturated_hosts(self) -> set[int]:
        try:
            slots = self.crawler.engine.downloader.slots
        except (AttributeError, RuntimeError):
            return set()
        out = set()
        for key, slot in slots.items():
            hid = self.sources.hosts.get(key)
            if hid is not None and (len(slot.active) >= slot.concurrency
                                    or (slot.delay and slot.queue)):
                out.add(hid)
        return out

    def _next_source_request(self) -> Request | None:
        if not len(self.sources):
            return None
        self.polls += 1
        now = self.clock()
        period = self.config.period
        k = math.floor((now - self.t0) / period)
        if k != self.epoch:
            self._start_epoch(k, now)
        epoch_end = self.t0 + (k + 1) * period
        if not self.plan:
            self._schedule_wakeup(epoch_end)
            return None
        busy = self._saturated_hosts()
        later = math.inf
        for j, sid in enumerate(self.plan):
            c = float(self.sources.cost[sid])
            if self.config.spread:
                release = self.t0 + k * period + self.spent * period / self.config.budget
                if release > now + 1e-9:
                    self._schedule_wakeup(release)
                    return None
            not_before = self.sources.not_before(sid)
            if not_before > now + 1e-6:
                later = min(later, not_before)
                continue
            if busy and int(self.sources.host[sid]) in busy:
                continue                   # woken again when a download of the slot ends
            del self.plan[j]
            self.spent += c
            return self._dispatch(sid, now, k)
        self._schedule_wakeup(min(later, epoch_end))
        return None

    def _dispatch(self, sid: int, now: float, epoch: int) -> Request:
        self.sources.busy_until[sid] = now + self.max_flight
        self.stats.inc("crawls")
        self.stats.inc("crawls/cost", float(self.sources.cost[sid]))
        meta = {META_ID: sid, "whittle_source_url": self.sources.url(sid),
                "whittle_crawl_time": now, "whittle_epoch": epoch, "dont_cache": True}
        headers = {}
        etag, modified = self.validators.get(sid, (None, None))
        if self.config.conditional_get:
            if etag:
                headers["If-None-Match"] = etag
            if modified:
                headers["If-Modified-Since"] = modified
        template = self.templates.get(sid)
        if template is None:
            return Request(self.sources.url(sid), dont_filter=True, meta=meta,
                           headers=headers, errback=_quiet_errback)
        request = template.replace(meta={**template.meta, **meta})
        for key, value in headers.items():
            request.headers[key] = value
        if request.errback is None:
            request.errback = _quiet_errback
        return request

    # -- feedback from FeedObserverMiddleware -------------------------------------------
    def source_of(self, request: Request) -> int | None:
        sid = request.meta.get(META_ID)
        return sid if isinstance(sid, int) and 0 <= sid < len(self.sources) else None

    def report_value(self, source: str | int, value: float, *, published: float,
                     at: float | None = None, base_value: float | None = None) -> bool:
        """Feedback from the spider: an entry of ``source`` (its URL or id), published at
        unix time ``published``, was worth ``value`` at unix time ``at`` (default now), e.g.
        its clicks or comments as a pipeline measured them. Policies that learn interest decay
        (``report_value`` of adaptive-whittle) update their estimate; garbage (unknown source,
        non-finite or negative value, ``at`` before ``published``) is refused and counted
        under ``whittle/feedback/refused``. Returns whether the policy used it."""
        sid = self.sources.id_of(source) if isinstance(source, str) else source
        at = self.clock() if at is None else at
        usable = (isinstance(sid, int | np.integer) and 0 <= sid < len(self.sources)
                  and self.policy is not None and hasattr(self.policy, "report_value"))
        try:
            age = float(at) - float(published)
            value = float(value)
        except (TypeError, ValueError):
            usable = False
        usable = usable and math.isfinite(age) and age >= 0 and math.isfinite(value) \
            and value >= 0
        self._grow()
        accepted = bool(usable and self.policy.report_value(int(sid), value, age, base_value))
        self.stats.inc("feedback/accepted" if accepted else "feedback/refused")
        return accepted

    def crawl_done(self, sid: int, *, when: float, ok: bool) -> float:
        """Book-keeping of a finished crawl; returns the back-off (s) now applied, 0 if ok."""
        return self.sources.crawl_done(sid, when=when, ok=ok, now=self.clock())

    def estimate_missed(self, sid: int, when: float, published: np.ndarray,
                        window_full: bool) -> float:
        return self.sources.estimate_missed(sid, when, published, window_full)

    def observe(self, obs) -> None:
        if self.policy is None:
            return
        t = time.perf_counter()
        self.policy.observe(obs)
        self.stats.decision(time.perf_counter() - t, calls=0)

    def epoch_of(self, when: float) -> int:
        return math.floor((when - self.t0) / self.config.period)

    # -- waking the engine --------------------------------------------------------------
    def _schedule_wakeup(self, at: float) -> None:
        if not math.isfinite(at) or at >= self._wakeup_at - 1e-4:
            return
        self._cancel_wakeup()
        self._wakeup_at = at
        self._wakeup = call_later(max(0.0, at - self.clock()), self._wake)

    def _cancel_wakeup(self) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup, self._wakeup_at = None, math.inf

    def _wake(self) -> None:
        self._wakeup, self._wakeup_at = None, math.inf
        self._wake_now()

    def _wake_now(self) -> None:
        try:
            slot = self.crawler.engine._slot
        except (AttributeError, RuntimeError):
            return
        if slot is not None:
            slot.nextcall.schedule()

    def _spider_idle(self, spider=None) -> None:
        # has_pending_requests() is True while there are sources, so the engine does not
        # call this then; kept for spiders that send only registration requests late.
        if len(self.sources):
            from scrapy.exceptions import DontCloseSpider

            raise DontCloseSpider
