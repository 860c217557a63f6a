"""What crawls showed: a feed fetched, a 304, a failure, a parser's warnings, a pipeline's
feedback; and what a hub pushed (WebSub deliveries, learned as ``Policy.observe_push``).
The policy learns them in batches (one ``Observation`` per epoch of dispatch, at
:meth:`CrawlOutcomes.flush`): before each selection, before feedback or a checkpoint, and
whenever the oldest buffered crawl is ``FLUSH_AFTER`` seconds old; what it learns is kept
within :mod:`scrapy_whittle.core.sanitize`'s ranges first (values, publication times, bursts
of unseen entries). The users' measures (:mod:`scrapy_whittle.service.decisions.measures`: discovery
delays, entries missed, crawls per entry) are counted at the same flushes, into the stats and
the epochs' ledger; the entries found go to the trace's log
(:mod:`scrapy_whittle.service.state.publications`).

:func:`judge_fetch`, :func:`count_fetch` and :func:`report_warnings` are what a fetched feed
means wherever its entries were told new: here (the service's entry memory) and on a cluster's
worker (:class:`~scrapy_whittle.cluster.node.ClusterNode`, the cluster's entry memory)."""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from itertools import chain
from typing import NamedTuple

import numpy as np

from scrapy_whittle.core import sanitize
from scrapy_whittle.core.distinct import distinct
from scrapy_whittle.core.estimators import RateEstimator
from scrapy_whittle.core.estimators._base import segment_rows
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.feeds.hints import ServerHints
from scrapy_whittle.feeds.httpdates import unix_seconds
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.decisions.epochs import EpochLedger, Timeline
from scrapy_whittle.service.decisions.measures import DelayHistogram, as_times
from scrapy_whittle.service.decisions.policy_keeper import PolicyKeeper
from scrapy_whittle.service.hosts.host_throttle import HostThrottle
from scrapy_whittle.service.memory.entry_memory import EntryMemory
from scrapy_whittle.service.memory.story_memory import StoryMemory
from scrapy_whittle.service.once_log import OnceLog
from scrapy_whittle.service.sources.retirement import Retirement
from scrapy_whittle.service.sources.source_state import SourceState
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.state.publications import PublicationLog
from scrapy_whittle.service.types import FLUSH_AFTER, Crawl, FetchResult, Stats, valued


class FetchRow(NamedTuple):
    """A crawl the policy has not learnt yet: a row of the next ``Observation`` (the rows of
    an epoch, transposed, are its columns: :meth:`CrawlOutcomes.flush`)."""

    epoch: float           # the policy's clock: the decision step of the crawl's dispatch
    source: int
    time: float            # when its answer came, since the origin
    new_items: int
    reward: float          # the new entries' value
    ok: bool
    window_full: bool
    published: list        # the new entries' publication times (unix seconds)
    listed_from: float     # the oldest entry the feed listed, since the origin (nan: unknown)


class PushRow(NamedTuple):
    """A WebSub push the policy has not learnt yet (``Policy.observe_push``)."""

    source: int
    time: float            # since the origin
    new_items: int
    reward: float
    published: list


class Capture(NamedTuple):
    """A re-crawl that found entries, whose discovery delays the next flush measures."""

    epoch: int             # the crawl's epoch (of the ledger)
    at: float              # when it found them
    published: list        # their publication times


def judge_fetch(new: list[FeedEntry], visible: int, had_before: bool, weight: float,
                config: WhittleConfig, stats: Stats, new_in_feed: int | None = None
                ) -> FetchResult:
    """A fetch showed ``visible`` distinct entries, ``new`` of them not seen before, of a
    source that had entries remembered (``had_before``): the new ones valued (values out of
    range clipped, counted under ``clipped/value``), and whether the window was full (every
    entry shown was new to the feed (``new_in_feed``, default ``len(new)``: repeats of
    stories from other feeds count as new to it): older new ones may have been lost; a first
    fetch cannot tell)."""
    new_in_feed = len(new) if new_in_feed is None else new_in_feed
    window_full = had_before and visible > 0 and new_in_feed == visible
    values, clipped = valued(new, weight, config)
    if clipped:
        stats.inc("clipped/value", clipped)
    return FetchResult(new, values, window_full)


def oldest_date(entries: list[FeedEntry]) -> float | None:
    """The publication time of the oldest dated entry of a feed (None: none dated)."""
    dates = [e.published for e in entries if e.published is not None]
    return min(dates) if dates else None


def count_fetch(stats: Stats, new_items: int, reward: float, window_full: bool) -> None:
    """The stats of a successful fetch that found ``new_items`` entries worth ``reward``."""
    inc = stats.inc
    inc("fetched")
    inc("new_items", new_items)
    inc("utility", reward)
    if window_full:
        inc("window_full")


def report_warnings(stats: Stats, log_once: OnceLog, crawl: Crawl, warnings: list[str]) -> None:
    """A usable feed had problems (a parser's complaints): counted, logged once."""
    stats.inc("warnings")
    log_once(crawl.source, "warning", crawl.url, "; ".join(warnings), logging.INFO)


class CrawlOutcomes:
    """What crawls showed, learnt by the policy in batches. ``buffer`` holds the crawls the
    policy has not learnt yet (rows of ``Observation``), ``buffer_since`` when the oldest
    arrived; ``declared`` the publishing rates feeds declared since the last flush;
    ``captures`` the (epoch, time, publication times) of the re-crawls that found entries,
    whose delays the next flush measures into ``delays`` (this run's) and the ledger's."""

    def __init__(self, config: WhittleConfig, *, clock, timeline: Timeline,
                 sources: SourceTable, memory: EntryMemory, state: SourceState, stats: Stats,
                 keeper: PolicyKeeper, ledger: EpochLedger, log_once: OnceLog,
                 retirement: Retirement, throttle: HostThrottle,
                 stories: StoryMemory | None = None) -> None:
        self.config = config
        #: each answer is its host's too (allowances, throttling)
        self.throttle = throttle
        self.retirement = retirement
        #: the stories seen across sources (``WHITTLE_DEDUP = "link"``; None: per feed)
        self.stories = stories
        self.clock = clock
        self.timeline = timeline
        self.sources = sources
        self.memory = memory
        self.state = state
        self.stats = stats
        self.keeper = keeper
        self.ledger = ledger
        self.log_once = log_once
        self.buffer: list[FetchRow] = []
        self.pushes: list[PushRow] = []
        self.buffer_since = math.inf
        self.declared: dict[int, float] = {}      # source -> rate its feed declares (/s)
        #: source -> (entries, value) found repeats after their crawl was learnt: taken
        #: from the source's next crawl (:meth:`late_repeat`)
        self.repeats_due: dict[int, tuple[int, float]] = {}
        # for a policy without rate estimates: the service's own, for ``missed_items``
        self.own_rates: RateEstimator | None = None
        self.captures: list[Capture] = []
        self.delays = DelayHistogram()
        self.publications = PublicationLog()

    def start(self, n: int) -> None:
        """The policy is built (for ``n`` sources): estimate rates here if it does not."""
        if self.own_rates is None and self.keeper.policy.rate_estimator() is None:
            self.own_rates = RateEstimator(n, prior_rate=1 / self.config.period,
                                           prior_exposure=self.config.period)

    def grow(self, k: int) -> None:
        if self.own_rates is not None:
            self.own_rates.grow(k)

    # -- what a crawl showed -------------------------------------------------------------
    def feed_fetched(self, crawl: Crawl, entries: list[FeedEntry], *,
                     etag: str | None = None, last_modified: str | None = None,
                     hints: ServerHints | None = None, latency: float | None = None
                     ) -> FetchResult:
        sid, memory = crawl.source, self.memory
        had_before = memory.size.item(sid) > 0
        new = memory.new_entries(sid, entries)
        visible, new_in_feed = memory.last_visible, len(new)
        if new and self.stories is not None:
            # a story another feed brought first is no item, and teaches the policy nothing
            # new about this feed
            new, repeats = self.stories.split(sid, new)
            if repeats:
                self.stats.inc("dedup/repeats", repeats)
                if not new:
                    # all the feed showed anew repeats stories known already: what it lost
                    # before its window most likely did too, so the policy learns "nothing
                    # new since the last crawl" (a full window of no new item would teach it
                    # nothing at all, and a feed that only repeats would keep its prior)
                    new_in_feed = 0
        found = judge_fetch(new, visible, had_before, self.sources.weight.item(sid),
                            self.config, self.stats, new_in_feed)
        self.record_fetch(crawl, len(new), float(sum(found.values)), found.window_full,
                          [e.published for e in new], etag=etag,
                          last_modified=last_modified, now=self.clock.now(), hints=hints,
                          latency=latency, listed_from=oldest_date(entries))
        if new and self.publications.enabled:
            self.publications.add(sid, new, found.values)
        return found

    def record_fetch(self, crawl: Crawl, new_items: int, reward: float, window_full: bool,
                     published: list[float | None], *, etag: str | None = None,
                     last_modified: str | None = None, now: float | None = None,
                     hints: ServerHints | None = None, latency: float | None = None,
                     listed_from: float | None = None) -> None:
        """A fetch's outcome; ``listed_from``: the publication time of the oldest entry the
        feed listed, new or known (None: unknown), how far back it showed what a hub lost."""
        sid = crawl.source
        now = self.clock.now() if now is None else now
        if new_items and published.__class__ is list \
                and math.isfinite(self.state.last_ok.item(sid)):    # a re-crawl
            self.captures.append(Capture(crawl.epoch, now, published))
        new_items, reward, learned = self._learnable(crawl, new_items, reward, published, now,
                                                     window_full)
        if etag or last_modified:
            self._remember_validators(sid, etag, last_modified)
        listed = listed_from if listed_from is not None and listed_from <= now else math.nan
        self._observe(crawl, now, True, *learned, listed_from=listed)
        self.throttle.heard(crawl, latency=latency)
        if hints is not None:
            self._apply_hints(sid, hints, now)
        self.retirement.fetched(crawl, new_items, now)
        count_fetch(self.stats, new_items, reward, window_full)
        totals = self.ledger.totals[crawl.epoch]
        totals.new_items += new_items
        totals.utility += reward
        state = self.state
        if new_items:
            state.new_items[sid] += new_items
        if reward:
            state.utility[sid] += reward

    def _learnable(self, crawl: Crawl, new_items, reward, published, now: float,
                   window_full: bool) -> tuple[int, float, tuple[int, float, bool, list[float]]]:
        """(new entries, their value, what the policy learns: (count, value, window full,
        publication times)) of a fetch, within the plausible ranges
        (:mod:`scrapy_whittle.core.sanitize`). A burst teaches a plain count (no window
        censoring: the entries it leaves out were not lost)."""
        sid = crawl.source
        new_items, reward, published = self._told(new_items, reward, published)
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
                self.log_once(sid, "burst", crawl.url,
                              f"{new_items} unseen entries at once: the policy learns from "
                              f"{learned_n} of them only", logging.INFO)
        if learned_n > peak:
            state.peak[sid] = learned_n
        return new_items, reward, (learned_n, learned_value, bool(window_full), times)

    def not_modified(self, crawl: Crawl, *, etag: str | None = None,
                     last_modified: str | None = None, hints: ServerHints | None = None,
                     latency: float | None = None) -> None:
        self._remember_validators(crawl.source, etag, last_modified)
        self.state.last_ok[crawl.source] = crawl.sent_at
        self.stats.inc("not_modified")
        self.ledger.totals[crawl.epoch].not_modified += 1
        now = self.clock.now()
        self._observe(crawl, now, True, 0, 0.0, False, [])
        self.throttle.heard(crawl, latency=latency)
        self._apply_hints(crawl.source, hints, now)
        self.retirement.fetched(crawl, 0, now)
        self.stats.inc("fetched")

    def crawl_failed(self, crawl: Crawl, kind: str, cause: str,
                     retry_after: float | None = None) -> float:
        now = self.clock.now()
        at_least = 0.0
        if retry_after is not None and self.config.hints and retry_after > 0:
            at_least = min(float(retry_after), self.config.hints_max_delay)
            self.stats.inc("hints/retry_after")
        backoff = self._observe(crawl, now, False, 0, 0.0, False, [], at_least)
        self.throttle.heard(crawl, kind, now, at_least or None)
        self.stats.inc(f"errors/{kind}")
        self.ledger.totals[crawl.epoch].errors += 1
        self.ledger.errors[crawl.epoch, kind] += 1
        self.state.errors[crawl.source] += 1
        why = self.retirement.failed(crawl, kind, now)
        if self.sources.retired.item(crawl.source):
            backoff = self.sources.retry_at.item(crawl.source) - now
            self.log_once(crawl.source, kind, crawl.url, f"{cause}; retired ({why}): "
                          f"{self.retirement.probing()}" if why else
                          f"{cause}; retired, next probe in {backoff:.3g} s")
            return backoff
        self.log_once(crawl.source, kind, crawl.url, f"{cause}; backing off {backoff:.3g} s")
        return backoff

    def not_a_feed(self, crawl: Crawl) -> None:
        """The fetch found a site's page (``SourceRoster.site_page``): a crawl that taught
        nothing, without an error (the source leaves: it backs off nobody)."""
        self._observe(crawl, self.clock.now(), False, 0, 0.0, False, [])
        self.throttle.heard(crawl)            # its host answered, as hosts do

    def feed_warnings(self, crawl: Crawl, warnings: list[str]) -> None:
        report_warnings(self.stats, self.log_once, crawl, warnings)

    def late_repeat(self, sid: int, value: float) -> None:
        """An entry of ``sid`` counted new at its crawl repeats a story known (its
        article's canonical URL or text: :mod:`~scrapy_whittle.service.memory.article_stories`):
        counted in ``dedup/repeats``, and taken back from what the policy learns of the
        source, from its buffered crawl if the policy has not learnt it yet, else from its
        next crawl that brings entries."""
        self.stats.inc("dedup/repeats")
        self.state.utility[sid] = max(0.0, self.state.utility.item(sid) - value)
        for k in range(len(self.buffer) - 1, -1, -1):
            row = self.buffer[k]
            if row.source == sid and row.new_items > 0:
                self.buffer[k] = row._replace(new_items=row.new_items - 1,
                                              reward=max(0.0, row.reward - value),
                                              published=row.published[:-1])
                return
        n, v = self.repeats_due.get(sid, (0, 0.0))
        self.repeats_due[sid] = (n + 1, v + value)

    def _observe(self, crawl: Crawl, now: float, ok: bool, new_items: int, reward: float,
                 window_full: bool, published: list[float], at_least: float = 0.0,
                 listed_from: float = math.nan) -> float:
        sid = crawl.source
        if new_items and self.repeats_due and sid in self.repeats_due:
            n, v = self.repeats_due.pop(sid)
            taken = min(n, new_items)
            new_items, reward = new_items - taken, max(0.0, reward - v)
            published = published[:len(published) - taken]
        if not self.buffer:
            self.buffer_since = now
        timeline = self.timeline
        # the policy's clock: the decision step of the crawl's dispatch, in epochs
        self.buffer.append(FetchRow(timeline.policy_epoch(timeline.step_of(crawl.sent_at)),
                                    sid, now - timeline.origin, new_items, reward, ok,
                                    window_full, published, listed_from - timeline.origin))
        self.state.touch(sid)
        backoff = self.sources.crawl_done(sid, when=crawl.sent_at, ok=ok, now=now,
                                          at_least=at_least)
        if now - self.buffer_since >= FLUSH_AFTER:
            self.flush()
        return backoff

    def _apply_hints(self, sid: int, hints: ServerHints | None, now: float) -> None:
        """What a successful fetch's server and feed asked about the next visit (the module
        docstring of :mod:`scrapy_whittle.feeds.hints`): "not before"s capped, skip masks, the
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
                self.declared[sid] = feed.update_rate
                self.stats.inc("hints/update_period")
        if until > now:
            self.sources.not_before_hint(sid, until)

    def _remember_validators(self, sid: int, etag: str | None, last_modified: str | None
                             ) -> None:
        if etag:
            self.state.etag.set(sid, etag)
        if last_modified:
            when = unix_seconds(last_modified)
            if when:                      # unreadable: no If-Modified-Since, ETag still works
                self.state.modified[sid] = when

    # -- learning ------------------------------------------------------------------------
    # -- what a hub pushed ------------------------------------------------------------------
    def pushed(self, sid: int, entries: list[FeedEntry], now: float) -> FetchResult:
        """A hub delivered ``entries`` of source ``sid`` at ``now``: the new ones, told by the
        entry memory (and the story memory) as a fetch's are and valued the same way, are
        returned. No crawl was made: no budget is spent, and the source's crawl book-keeping
        (last fetch, back-off, host) is left alone. The policy learns the push at the next
        flush (``Policy.observe_push``; a push that brought nothing new teaches it too)."""
        new = self.memory.pushed(sid, entries)
        if new and self.stories is not None:
            new, repeats = self.stories.split(sid, new)
            if repeats:
                self.stats.inc("dedup/repeats", repeats)
        values, clipped = valued(new, self.sources.weight.item(sid), self.config)
        if clipped:
            self.stats.inc("clipped/value", clipped)
        self._push_learnt(sid, len(new), float(sum(values)), [e.published for e in new], now)
        if new and self.publications.enabled:
            self.publications.add(sid, new, values)
        self._flush_due(now)
        return FetchResult(new, values, False)

    def record_push(self, sid: int, new_items: int, reward: float,
                    published: list[float | None], now: float) -> None:
        """A hub's delivery of source ``sid`` at ``now`` whose entries were told new elsewhere
        (a cluster's worker): ``new_items`` new, worth ``reward`` in all, published at
        ``published``; learnt and counted as :meth:`pushed` does, within
        :mod:`scrapy_whittle.core.sanitize`'s ranges."""
        new_items, reward, published = self._told(new_items, reward, published)
        self._push_learnt(sid, new_items, reward, published, now)
        self._flush_due(now)

    def _told(self, new_items, reward, published) -> tuple[int, float, list[float | None]]:
        """What a worker told through Redis of a fetch or a push (new entries, their value
        in all, their publication times), within the plausible ranges: a count from 0 to
        ``max_per_source``, a value from 0 to the count's most (else clipped, counted under
        ``clipped/value``), a publication time (or None) per new entry."""
        if new_items.__class__ is not int or reward.__class__ is not float:
            try:
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
        return new_items, reward, published

    def _push_learnt(self, sid: int, new_items: int, reward: float,
                     published: list[float | None], now: float) -> None:
        """A push of ``new_items`` new entries worth ``reward``: buffered for the policy,
        counted in the stats, the source's and the epoch's totals."""
        times, changed = sanitize.learnable_times(published, now, None)
        if True in changed:
            self.stats.inc("clipped/published", sum(changed))
        if not self.buffer and not self.pushes:
            self.buffer_since = now
        self.pushes.append(PushRow(sid, now - self.timeline.origin, new_items, reward, times))
        self.state.touch(sid)
        stats = self.stats
        stats.inc("push/deliveries")
        stats.inc("push/new_items", new_items)
        stats.inc("push/utility", reward)
        if not new_items:
            stats.inc("push/empty")
        totals = self.ledger.totals[self.timeline.epoch_of(now)]
        totals.new_items += new_items
        totals.utility += reward
        if new_items:
            self.state.new_items[sid] += new_items
            self.state.utility[sid] += reward

    def _flush_due(self, now: float) -> None:
        if now - self.buffer_since >= FLUSH_AFTER:
            self.flush()

    def _observe_pushes(self, policy, pushes: list[PushRow]) -> None:
        """The buffered pushes, one ``observe_push`` batch."""
        cols = PushRow(*zip(*pushes, strict=True))       # the rows' columns, by name
        offsets = np.zeros(len(cols.source) + 1, dtype=np.int64)
        np.cumsum(cols.new_items, out=offsets[1:])
        item_published = np.fromiter(chain.from_iterable(cols.published), dtype=np.float64,
                                     count=int(offsets[-1]))
        item_published -= self.timeline.origin
        timeline = self.timeline
        epoch = timeline.policy_epoch(timeline.step_of(timeline.origin + max(cols.time)))
        policy.observe_push(Observation(epoch=epoch, sources=cols.source, time=cols.time,
                                        new_items=cols.new_items, reward=cols.reward,
                                        item_offsets=offsets, item_published=item_published))

    def flush_if_due(self, now: float) -> None:
        if (self.buffer or self.pushes) and now - self.buffer_since >= FLUSH_AFTER:
            self.flush()

    def flush(self) -> None:
        """Give the buffered crawl results to the policy (one Observation per epoch)."""
        if self.captures:
            self._measure_delays()
        keeper = self.keeper
        if not (self.buffer or self.pushes) or keeper.policy is None:
            return
        buffered, self.buffer, self.buffer_since = self.buffer, [], math.inf
        pushes, self.pushes = self.pushes, []
        keeper.grow()
        policy = keeper.policy
        if self.declared:
            declared, self.declared = self.declared, {}
            policy.set_prior_rate(list(declared), list(declared.values()))
        keeper.unchecked.update(row.source for row in buffered)
        by_epoch: dict[float, list[FetchRow]] = defaultdict(list)
        for row in buffered:
            by_epoch[row.epoch].append(row)
        origin = self.timeline.origin
        t = time.perf_counter()
        for epoch in sorted(by_epoch):
            cols = FetchRow(*zip(*by_epoch[epoch], strict=True))   # the columns, by name
            offsets = np.zeros(len(cols.source) + 1, dtype=np.int64)
            np.cumsum(list(map(len, cols.published)), out=offsets[1:])
            item_published = np.fromiter(chain.from_iterable(cols.published),
                                         dtype=np.float64, count=int(offsets[-1]))
            item_published -= origin
            obs = Observation(epoch=epoch, sources=cols.source, time=cols.time,
                              new_items=cols.new_items, reward=cols.reward, ok=cols.ok,
                              window_full=cols.window_full, item_offsets=offsets,
                              item_published=item_published, listed_from=cols.listed_from)
            self._observe_missed(policy, obs)
        if pushes:
            keeper.unchecked.update(row.source for row in pushes)
            self._observe_pushes(policy, pushes)
        keeper.decision_time(time.perf_counter() - t, calls=0)
        keeper.touched = True
        self.publish_measures()

    def _measure_delays(self) -> None:
        """The discovery delays of the entries re-crawls captured since the last flush."""
        captures, self.captures = self.captures, []
        cols = Capture(*zip(*captures, strict=True))
        lengths = np.fromiter(map(len, cols.published), dtype=np.int64, count=len(captures))
        times = as_times(chain.from_iterable(cols.published))
        known = np.isfinite(times)
        if not known.any():
            return
        delays = np.maximum(np.repeat(cols.at, lengths)[known] - times[known], 0.0)
        epoch = np.repeat(cols.epoch, lengths)[known]
        self.delays.add(delays)
        first, last = int(epoch.min()), int(epoch.max())
        if first == last:
            self.ledger.delays[first].add(delays)
            return
        for k in np.unique(epoch).tolist():
            self.ledger.delays[k].add(delays[epoch == k])

    def publish_measures(self) -> None:
        """The users' measures of this run into the stats: ``delay/mean_s``,
        ``delay/median_s``, ``delay/p90_s`` (once an entry's delay was measured) and
        ``crawls_per_item`` (once an entry was captured: every request, the discovery
        sweep's and the probes' too)."""
        stats = self.stats
        if self.delays.n:
            for key, value in self.delays.summary().items():
                stats.set(f"delay/{key}", value)
        captured = stats.get("new_items")
        if captured:
            requests = (stats.get("crawls") + stats.get("discovery/crawls")
                        + stats.get("probes/crawls"))
            stats.set("crawls_per_item", requests / captured)

    def _observe_missed(self, policy, obs: Observation) -> None:
        """``policy.observe``, and the ``missed_items`` stat: entries lost to full windows,
        from the policy's rate estimates (or the service's own, for a policy without)."""
        rates = policy.rate_estimator()
        if rates is not None:
            ids = distinct(obs.sources[obs.ok])
            before = float(rates.missed[ids].sum(dtype=np.float64))
            policy.observe(obs)
            missed = float(rates.missed[ids].sum(dtype=np.float64)) - before
        else:
            policy.observe(obs)
            missed = self._own_missed(obs)
        if missed > 0:
            self.stats.inc("missed_items", missed)
            self.ledger.missed[math.floor(obs.epoch)] += missed      # (its epoch's row)

    def _own_missed(self, obs: Observation) -> float:
        rates, total = self.own_rates, 0.0
        # one crawl per source per call: later crawls of a source in later passes
        for batch in one_per_source(obs.sources, obs.time, obs.ok):
            off, idx = segment_rows(obs.item_offsets, batch)
            _, missed = rates.observe_crawls(obs.sources[batch], obs.time[batch], off,
                                             obs.item_published[idx], obs.window_full[batch])
            total += float(missed.sum())
        return total

    def report_value(self, source: str | int, value: float, *, published: float,
                     at: float | None = None, base_value: float | None = None) -> bool:
        sid = self.sources.id_of(source) if isinstance(source, str) else source
        at = self.clock.now() if at is None else at
        keeper = self.keeper
        usable = (isinstance(sid, int | np.integer) and 0 <= sid < len(self.sources)
                  and keeper.policy is not None)
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
            keeper.grow()
            accepted = bool(keeper.policy.report_value(int(sid), *checked, base_value))
        if accepted:
            self.state.touch(int(sid))
            keeper.unchecked.add(int(sid))
            keeper.touched = True
        self.stats.inc("feedback/accepted" if accepted else "feedback/refused")
        return accepted
