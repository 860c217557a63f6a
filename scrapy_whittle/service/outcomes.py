"""What crawls showed, for the re-crawl service (:class:`~scrapy_whittle.service.recrawl.RecrawlService`
mixes this in): a feed fetched, a 304, a failure, feedback; what the policy learns of them is
kept within :mod:`scrapy_whittle.core.sanitize`'s ranges and given to it in batches (``flush``)."""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from itertools import chain

import numpy as np

from scrapy_whittle.core import sanitize
from scrapy_whittle.core.distinct import distinct
from scrapy_whittle.core.estimators._base import segment_rows
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.feeds.hints import ServerHints
from scrapy_whittle.feeds.httpdates import unix_seconds
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.types import FLUSH_AFTER, Crawl, FetchResult, valued


class CrawlOutcomes:
    """The re-crawl service's methods for what crawls showed (state: the service's)."""

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
        What the policy learns is kept within :mod:`scrapy_whittle.core.sanitize`'s ranges."""
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
        (:mod:`scrapy_whittle.core.sanitize`). A burst teaches a plain count (no window
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
            self.state.dirty[sid] = True
        backoff = self.sources.crawl_done(sid, when=crawl.sent_at, ok=ok, now=now,
                                          at_least=at_least)
        if now - self._buffer_since >= FLUSH_AFTER:
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
                self._declared[sid] = feed.update_rate
                self.stats.inc("hints/update_period")
        if until > now:
            self.sources.not_before_hint(sid, until)

    def _touch(self, sid: int) -> None:
        """Source ``sid`` changed: the next checkpoint writes its row."""
        if self.store is not None:
            self.state.dirty[sid] = True

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
            ids = distinct(obs.sources[obs.ok])
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
        # one crawl per source per call: later crawls of a source in later passes
        for batch in one_per_source(obs.sources, obs.time, obs.ok):
            off, idx = segment_rows(obs.item_offsets, batch)
            _, missed = rates.observe_crawls(obs.sources[batch], obs.time[batch], off,
                                             obs.item_published[idx], obs.window_full[batch])
            total += float(missed.sum())
        return total

    def report_value(self, source: str | int, value: float, *, published: float,
                     at: float | None = None, base_value: float | None = None) -> bool:
        """Feedback from the spider: an entry of ``source`` (its URL or id), published at unix
        time ``published``, was worth ``value`` at unix time ``at`` (default now). Garbage
        (unknown source, non-finite or negative value, ``at`` before ``published``, an age
        beyond :data:`scrapy_whittle.core.sanitize.MAX_AGE`) is refused and counted under
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
