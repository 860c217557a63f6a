"""The re-crawl service: one crawl of a set of feeds, with no Scrapy in it.

It owns the sources (:class:`~scrapy_whittle.service.sources.source_table.SourceTable`), the entries
already seen (:class:`~scrapy_whittle.service.memory.entry_memory.EntryMemory`), the conditional-GET
validators, the epoch clock, the policy and the state store, behind a narrow API that
Scrapy's scheduler and middleware (through :class:`~scrapy_whittle.service.sink.LocalSink`), the
simulator and the benchmarks all drive:

* ``open(specs)`` / ``close()``; ``add_sources(specs)``; ``set_crawl_delay(host, s)``;
* ``next_crawl(hosts)`` -> a :class:`Crawl` (URL, conditional-GET headers, epoch) or None,
  and then ``wake_at``: when to ask again (``hosts``: which hosts are saturated, a
  :class:`HostLoad`);
* what a crawl showed: ``feed_fetched(crawl, entries, etag=, last_modified=, hints=,
  listing=)`` (returns the new entries and their values; ``listing``: a sitemap index's
  children, :class:`~scrapy_whittle.service.sources.index_children.Listing`), ``not_modified(...)``,
  ``crawl_failed(crawl, kind, cause, retry_after=)``; ``hints`` and ``retry_after``: what the
  server and the feed asked about the next visit (:mod:`scrapy_whittle.feeds.hints`);
* ``moved(crawl, url)``: the source answered at ``url`` after permanent redirects;
* ``index_listed(crawl, urls, complete=)``: the source is a sitemap index listing those
  child sitemaps (:class:`~scrapy_whittle.service.sources.index_children.IndexChildren`: a child it
  lists no more retires, one listed again comes back);
* ``report_value(...)``: feedback from a pipeline; ``checkpoint()``.

It is the composition root of parts that each own their state and get what they use at
construction:

* :class:`~scrapy_whittle.service.decisions.epochs.Timeline`: epoch k is
  [origin + k T, origin + (k + 1) T), T = ``WHITTLE_PERIOD``; the origin is the first run's
  start (kept by the store), so a resumed crawl continues its epochs. The policy's time unit
  is the second from the origin.
* :class:`~scrapy_whittle.service.decisions.planning.EpochPlanner`: each epoch's plan and
  budget.
* :class:`~scrapy_whittle.service.decisions.outcomes.CrawlOutcomes`: what crawls showed,
  learnt by the policy in batches, within the plausible ranges of
  :mod:`scrapy_whittle.core.sanitize`.
* :class:`~scrapy_whittle.service.decisions.policy_keeper.PolicyKeeper`: the policy, the
  sources it has not grown by or checked yet (``Policy.repair``: one source's bad state never
  stops a crawl).
* :class:`~scrapy_whittle.service.state.persistence.StatePersistence`: with a store, a checkpoint
  every ``WHITTLE_CHECKPOINT_INTERVAL`` seconds (the caller decides when: ``checkpoint_due``)
  and at close; the restore after a restart.
* :class:`~scrapy_whittle.service.decisions.epochs.EpochLedger`: the epochs' totals for the store.
* :class:`~scrapy_whittle.service.policy_factory.PolicyFactory`: the policy the settings ask
  for, told what an oracle (``WHITTLE_ORACLE_PARAMS``) knows.
* :class:`~scrapy_whittle.service.source_roster.SourceRoster`: the sources coming and going
  (registered, leaving and rejoining the source list, a site's address giving way to its
  feeds, moved or merged by permanent redirects), the other parts told.

Its callers use those parts for what is theirs alone (``service.roster.sync_sources``,
``service.planner.next_crawls``, ``service.timeline.epoch_of``, ...); the service itself
keeps the narrow API above: what is due, what a response showed, the state, the stats.

The types it shares with its callers are in :mod:`scrapy_whittle.service.types` and
importable from here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np

from scrapy_whittle.core.policies import Policy
from scrapy_whittle.feeds.hints import ServerHints
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.feeds.story import DROP_PARAMS, ParamFilter
from scrapy_whittle.service.clock import SystemClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.decisions.epochs import EpochLedger, Timeline
from scrapy_whittle.service.decisions.outcomes import CrawlOutcomes
from scrapy_whittle.service.decisions.planning import EpochPlanner
from scrapy_whittle.service.decisions.policy_keeper import PolicyKeeper
from scrapy_whittle.service.delivery_recovery import recover_deliveries
from scrapy_whittle.service.hosts.host_throttle import HostThrottle
from scrapy_whittle.service.memory.article_stories import ArticleStories
from scrapy_whittle.service.memory.entry_memory import EntryMemory
from scrapy_whittle.service.memory.story_memory import StoryMemory
from scrapy_whittle.service.once_log import OnceLog
from scrapy_whittle.service.policy_factory import PolicyFactory
from scrapy_whittle.service.source_roster import SourceRoster
from scrapy_whittle.service.sources.index_children import IndexChildren, Listing
from scrapy_whittle.service.sources.registry import SourceSpec, url_host
from scrapy_whittle.service.sources.retirement import Retirement
from scrapy_whittle.service.sources.source_state import SourceState
from scrapy_whittle.service.sources.source_table import SourceTable
from scrapy_whittle.service.sources.websub import Subscriptions
from scrapy_whittle.service.state.deliveries import DIRECTORY, Batch, DeliveryJournal
from scrapy_whittle.service.state.gc_pause import gc_paused
from scrapy_whittle.service.state.persistence import StatePersistence
from scrapy_whittle.service.state.storage import Checkpoint, SavedState, StateStore, StoreError
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
    valued,
)

logger = logging.getLogger(__name__)


def story_memory(config: WhittleConfig, memory: EntryMemory) -> StoryMemory | None:
    """The cross-source story memory ``WHITTLE_DEDUP`` asks for, bounded by ``memory``'s."""
    if config.dedup != "link":
        return None
    drop = DROP_PARAMS if config.dedup_drop_params is None else config.dedup_drop_params
    return StoryMemory(ParamFilter(drop), lambda: memory.live)


class RecrawlService:
    """See the module docstring. ``config`` holds the validated ``WHITTLE_*`` settings;
    ``store`` may be set until the service opens."""

    def __init__(self, config: WhittleConfig, *, clock=None, store: StateStore | None = None,
                 oracle: dict[str, tuple[float, float, float]] | None = None,
                 slot_delays: dict[str, float] | None = None, max_flight: float = 600.0,
                 stats: Stats | None = None, download_delay: float = 0.0) -> None:
        self.config = config
        clock = clock or config.clock or SystemClock()
        self.max_flight = float(max_flight)
        self.stats: Stats = stats if stats is not None else DictStats()
        self.sources = SourceTable(config)
        self.memory = EntryMemory(max_per_source=config.max_entries_per_source)
        self.stories = story_memory(config, self.memory)
        #: what articles say about their stories (WHITTLE_ARTICLES)
        self.article_stories = ArticleStories(self.stories, config.articles.near_duplicates)
        self.state = SourceState()
        self._log_once = OnceLog(logger)
        self.timeline = Timeline(clock, config.period, config.max_epochs,
                                 config.steps_per_epoch)
        self.ledger = EpochLedger()
        #: the policy as the settings ask for it, told what the oracle knows
        self.policies = PolicyFactory(config, sources=self.sources, timeline=self.timeline,
                                      log_once=self._log_once, oracle=oracle)
        self.keeper = PolicyKeeper(self.sources, self.state, self.stats, self._log_once,
                                   config.policy,
                                   lambda sids: self.policies.grow_extra(sids, self.policy))
        self.retirement = Retirement(config, sources=self.sources, stats=self.stats,
                                     log_once=self._log_once)
        self.children = IndexChildren(config, sources=self.sources,
                                      retirement=self.retirement, stats=self.stats,
                                      touch=self.state.touch)
        #: the hosts' allowances (``WHITTLE_HOST_LIMITS``, the hosts' delays: ``slot_delays``
        #: of ``DOWNLOAD_SLOTS``, ``download_delay`` of every host, robots.txt's
        #: ``Crawl-delay``; throttling): in each epoch's selection, told each crawl's answer
        self.throttle = HostThrottle(config.host_limits, sources=self.sources,
                                     state=self.state, timeline=self.timeline,
                                     stats=self.stats, slot_delays=slot_delays,
                                     default_delay=download_delay,
                                     latency_factor=config.host_latency_factor)
        parts = dict(clock=clock, timeline=self.timeline, sources=self.sources,
                     state=self.state, stats=self.stats, keeper=self.keeper,
                     ledger=self.ledger, throttle=self.throttle)
        self.outcomes = CrawlOutcomes(config, memory=self.memory, log_once=self._log_once,
                                      retirement=self.retirement, stories=self.stories,
                                      **parts)
        del parts["clock"]
        self.planner = EpochPlanner(config, outcomes=self.outcomes,
                                    retirement=self.retirement,
                                    max_flight=self.max_flight, **parts)
        self.persistence = StatePersistence(config, clock=clock, memory=self.memory,
                                            stories=self.stories,
                                            prints=self.article_stories.near,
                                            outcomes=self.outcomes,
                                            rebuild_policy=self.policies.build, **parts)
        self.store = store
        #: the new entries on their way to the pipelines, journaled beside the store when
        #: the caller reports deliveries (``journal_deliveries``, set before ``open``)
        self.journal_deliveries = False
        self.deliveries = DeliveryJournal(None)
        #: the batches a killed run left undelivered, to hand out again (set by ``open``)
        self.replays: list[Batch] = []
        #: the WebSub subscriptions (``WHITTLE_WEBSUB_CALLBACK``; None: off), part of the
        #: crawl's state
        self.websub = (Subscriptions(config.websub_callback, config.websub_lease)
                       if config.websub_callback else None)
        #: the sources coming and going (registered, leaving the list, moved, merged)
        self.roster = SourceRoster(sources=self.sources, state=self.state, memory=self.memory,
                                   outcomes=self.outcomes, keeper=self.keeper,
                                   planner=self.planner, children=self.children,
                                   persistence=self.persistence, timeline=self.timeline,
                                   stats=self.stats, log_once=self._log_once,
                                   websub=self.websub)

    # -- the parts' state, as the service's callers read it -----------------------------
    @property
    def store(self) -> StateStore | None:
        return self.persistence.store

    @store.setter
    def store(self, store: StateStore | None) -> None:
        self.persistence.store = store
        self.state.track_changes = store is not None
        if self.stories is not None:
            self.stories.track_changes = store is not None
        if self.article_stories.near is not None:
            self.article_stories.near.track_changes = store is not None
        self.outcomes.publications.enabled = store is not None and self.config.trace_days > 0

    @property
    def clock(self):
        return self.timeline.clock

    @clock.setter
    def clock(self, clock) -> None:
        """Another clock (a test's, a simulation's) for the service and every part."""
        self.timeline.clock = self.outcomes.clock = self.persistence.clock = clock

    @property
    def policy(self) -> Policy | None:
        return self.keeper.policy

    @property
    def origin(self) -> float | None:
        return self.timeline.origin

    @property
    def epoch(self) -> int:
        """The epoch of the current plan."""
        return self.planner.epoch

    @property
    def wake_at(self) -> float:
        """When ``next_crawl`` may give something again."""
        return self.planner.wake_at

    @property
    def finished(self) -> bool:
        """True once ``WHITTLE_MAX_EPOCHS`` epochs of this run have passed."""
        return self.timeline.finished

    # -- construction -----------------------------------------------------------------------
    def open(self, specs: list[SourceSpec] = (), *, listed: bool = True) -> None:
        """Restore the stored state (if any), register ``specs``, build the policy. With
        ``listed``, ``specs`` (if any) are the source list: sources of the stored list that
        are not among them leave (:meth:`SourceRoster.sync_sources`)."""
        # a million rows of tuples: see scrapy_whittle.service.state.gc_pause
        with gc_paused():
            self._open(specs, listed)

    def _open(self, specs: list[SourceSpec], listed: bool) -> None:
        saved = self.persistence.load()
        self.roster.register_stored(saved)
        ids = self.roster.register(list(specs))
        now = self.clock.now()
        origin = float(saved.meta["origin"]) if saved and "origin" in saved.meta else now
        self.timeline.start(origin, now)
        self.keeper.start(self.policies.build(len(self.sources)))
        if saved is not None:
            self.persistence.restore(saved)
            self.persistence.repair_bookkeeping(now)
            self.retirement.restore(now)
            self.children.load(saved.sitemap_children, saved.sitemap_indexes)
            self.keeper.repair(None, cause="as restored")
            if self.websub is not None:
                self.websub.load(saved.websub)
        self._start(ids, listed, now)

    def _start(self, ids: list[int], listed: bool, now: float) -> None:
        """The end of an opening: the source list (``ids``: its sources), the deliveries a
        killed run left, what the policy and the planner set up for every source."""
        # the children a sitemap index named before the crawl stopped that the spider had not
        # registered yet: the index's next answer may be a 304 that names nobody
        awaiting = [url for url in self.children.awaiting if url_host(url)]
        if awaiting:
            self.roster.register([SourceSpec(url=url) for url in awaiting], discover=False)
            self.keeper.grow()
            logger.info("re-crawl service: %d child sitemaps a sitemap index named before the "
                        "crawl stopped registered now", len(awaiting))
        if listed and ids:
            self.roster.sync_list(ids)
        if self.store is not None and self.journal_deliveries:
            # the delivery journal beside the state: what a killed run left undelivered
            # is handed out again
            self.deliveries = DeliveryJournal(self.store.path.parent / DIRECTORY)
            self.replays = recover_deliveries(
                self.deliveries, sources=self.sources, memory=self.memory,
                stories=self.stories, ledger=self.ledger, timeline=self.timeline,
                stats=self.stats)
        self.keeper.set_half_life_priors(np.arange(len(self.sources)))
        self.outcomes.start(len(self.sources))
        self.planner.discover(np.arange(len(self.sources)), now)
        self.stats.set("sources", len(self.sources) - self.sources.n_left)
        logger.info("re-crawl service: %d sources, policy %s, budget %g per %g s%s",
                    len(self.sources), self.config.policy, self.config.budget,
                    self.config.period, f", state in {self.store.path}" if self.store else "")

    # -- a standby: the stored state kept warm, taken over at once --------------------------
    def open_standby(self) -> bool:
        """Restore the stored state as :meth:`open` does, for a process that may take the
        crawl over (a cluster's standby planner): no source list yet, nothing repaired that
        depends on the time. :meth:`follow` keeps it level with the store's checkpoints,
        :meth:`resume` makes it the crawl's. False (and nothing done) when the store holds
        no crawl yet."""
        with gc_paused():
            saved = self.persistence.load()
            if saved is None or "origin" not in saved.meta:
                return False
            self.roster.register_stored(saved)
            self.timeline.start(float(saved.meta["origin"]), self.clock.now())
            self.keeper.start(self.policies.build(len(self.sources)))
            self.persistence.restore(saved)
            self.keeper.repair(None, cause="as restored")     # (what it resets is dirty)
            if self.websub is not None:
                self.websub.load(saved.websub)
            self.outcomes.start(len(self.sources))
            return True

    def follow(self, saved: SavedState) -> None:
        """What the store's later checkpoints changed, applied to a standby's service (see
        :meth:`open_standby`): ``saved`` holds the sources they registered and those whose
        rows they wrote (its ``id`` column: ascending), the aliases they made, the
        throttled hosts (if they changed), the policy's global state and the blocks they
        wrote. A restore from the store would read the same."""
        with gc_paused():
            cols = saved.sources
            ids = np.asarray(cols["id"], dtype=np.int64)
            n = len(self.sources)
            new = np.flatnonzero(ids >= n)
            if new.size:
                if ids[new].tolist() != list(range(n, n + new.size)):
                    raise StoreError(f"{self.store.path}: source ids are not 0..n-1")
                self.roster.grow_parts(self.sources.add_columns(
                    [cols["url"][j] for j in new.tolist()],
                    [cols["weight"][j] for j in new.tolist()],
                    [cols["min_interval"][j] for j in new.tolist()],
                    [cols["category"][j] or "" for j in new.tolist()])[1])
                self.keeper.grow()
            registry = self.sources.registry
            for url, sid in saved.aliases:
                registry.add_alias(url, sid)
            moved = [(sid, url) for sid, url in zip(ids.tolist(), cols["url"], strict=True)
                     if sid < n and url is not None and url != registry.url(sid)]
            for sid, url in moved:
                registry.move(sid, url)
            self.sources.rehost([sid for sid, _ in moved])
            self.persistence.restore_rows(saved)
            self.state.dirty[ids] = False       # as the store holds them
            self.keeper.touched = False
            self.keeper.repair(ids, cause="as restored")

    def resume(self, specs: list[SourceSpec] = (), *, listed: bool = True) -> None:
        """A standby's service (:meth:`open_standby`, :meth:`follow`) becomes the crawl's, as
        :meth:`open` would have made it now: ``specs`` registered (with ``listed``, the
        source list), the book-keeping repaired as of now, the retired sources' probes,
        every source new to the next selection."""
        with gc_paused():
            ids = self.roster.register(list(specs), discover=False)
            self.keeper.grow()
            now = self.clock.now()
            self.timeline.start(self.timeline.origin, now)
            self.keeper.start(self.keeper.policy)
            self.persistence.repair_bookkeeping(now)
            self.retirement.restore(now)
            self._start(ids, listed, now)

    # -- sources (SourceRoster) -------------------------------------------------------------
    def add_sources(self, specs: list[SourceSpec]) -> list[int]:
        """Register sources (a URL already known keeps its id); the policy learns of new ones
        at the next selection."""
        return self.roster.add_sources(specs)

    def add_source(self, spec: SourceSpec) -> int:
        """Register one source (a spider's request); its id."""
        return self.roster.add_sources([spec])[0]

    def index_listed(self, crawl: Crawl, urls: Iterable[str], *, complete: bool = True,
                     now: float | None = None) -> None:
        """The fetch of ``crawl`` (at ``now``, default: the clock's) was a sitemap index
        listing the child sitemaps ``urls`` (``complete``: read whole): the children it
        lists no more retire after a while, those listed again come back
        (:mod:`scrapy_whittle.service.sources.index_children`)."""
        self.children.listed(crawl.source, urls, self.clock.now() if now is None else now,
                             complete=complete)

    def moved(self, crawl: Crawl, url: str) -> Crawl:
        """The fetch of ``crawl`` was redirected permanently (301, 308) to ``url``: the
        source moves there, or merges into the source already there
        (:meth:`SourceRoster.moved`). Returns the crawl the fetch's outcome is to be reported
        as."""
        return self.roster.moved(crawl, url)

    def url(self, sid: int) -> str:
        return self.sources.url(sid)

    def source_id(self, url: str) -> int | None:
        return self.sources.id_of(url)

    def set_crawl_delay(self, host: str, delay: float) -> bool:
        """A robots.txt ``Crawl-delay`` of ``delay`` seconds for ``host``: the host's
        allowance is at most floor(T / delay) crawls per epoch from the next epoch's plan on
        (:mod:`~scrapy_whittle.service.hosts.host_allowances`). Returns whether it changed
        anything."""
        return self.throttle.set_crawl_delay(host, delay)

    def article_seen(self, source: int, canonical: str | None, fingerprint: int | None,
                     value: float | None) -> str | None:
        """An entry of ``source`` (worth ``value`` at its capture) has its article: whether
        the article repeats a story known (``"canonical"``, ``"near_duplicate"``: the
        entry is taken back from what the source brought) or None
        (:mod:`~scrapy_whittle.service.memory.article_stories`)."""
        if not 0 <= source < len(self.sources):
            return None
        verdict = self.article_stories.judge(source, canonical, fingerprint)
        if verdict is not None:
            self.stats.inc(f"articles/repeats/{verdict}")
            self.outcomes.late_repeat(source, float(value or 0.0))
        return verdict

    def admit_article(self, host: str) -> bool:
        """Whether an article request to ``host`` may go now, within the host's allowance
        after its feeds (spent if so: :meth:`HostThrottle.admit_article`)."""
        return self.throttle.admit_article(host)

    # -- time and handing out crawls ----------------------------------------------------
    def next_crawl(self, hosts: HostLoad = NO_LOAD) -> Crawl | None:
        """The next source to fetch now, or None (then ``wake_at`` says when to ask again).
        ``hosts`` says which hosts cannot take a request now: they are asked about all at an
        epoch's start (to mask their sources out of the choice), and about one source's host
        before it is handed out."""
        return self.planner.next_crawl(hosts)

    def has_crawls(self) -> bool:
        return len(self.sources) > 0 and not self.timeline.finished

    def queued(self) -> int:
        return self.planner.queued()

    def reports_pending(self) -> bool:
        in_flight = self.sources.in_flight
        if not in_flight:
            return False
        now = self.clock.now()
        return any(until > now for until in in_flight.values())

    # -- what crawls showed (CrawlOutcomes) ---------------------------------------------
    def feed_fetched(self, crawl: Crawl, entries: list[FeedEntry], *,
                     etag: str | None = None, last_modified: str | None = None,
                     hints: ServerHints | None = None, latency: float | None = None,
                     listing: Listing | None = None) -> FetchResult:
        """A fetch of ``crawl`` returned a feed with ``entries`` (feed order): the new ones,
        valued, are returned, and the crawl is recorded (:meth:`record_fetch`). ``latency``:
        the seconds the answer took, if measured (its host's slowing down throttles it);
        ``listing``: the feed is a sitemap index, listing those children
        (:meth:`index_listed`)."""
        found = self.outcomes.feed_fetched(crawl, entries, etag=etag,
                                           last_modified=last_modified, hints=hints,
                                           latency=latency)
        if found.entries and self.deliveries.enabled:
            batch = self.deliveries.add(crawl.url, crawl.source, found.entries, found.values,
                                        self.clock.now())
            found = found._replace(batch=batch)
        if listing is not None:
            self.index_listed(crawl, listing.urls, complete=listing.complete)
        return found

    def pushed(self, source: str | int, entries: list[FeedEntry], *,
               now: float | None = None) -> FetchResult:
        """A hub pushed ``entries`` (feed order: the delivered feed document's, the whole feed
        or only its new entries: the entry memory forgets nothing for them,
        :meth:`EntryMemory.pushed`) of ``source`` (its URL or id) at
        ``now`` (default: the clock's): the new ones, valued, are returned (and journaled for
        delivery, as a fetch's are), through the same entry memory and learning as a fetch's,
        at no budget (:meth:`CrawlOutcomes.pushed`). An unknown source is counted
        (``errors/push_unknown_source``) and nothing is kept."""
        sid = self.sources.id_of(source) if isinstance(source, str) else source
        if not (isinstance(sid, int | np.integer) and 0 <= sid < len(self.sources)):
            self.stats.inc("errors/push_unknown_source")
            self._log_once(-1, "push_unknown_source", str(source),
                           "a push for a source this crawl does not know: dropped",
                           logging.WARNING)
            return FetchResult([], [], False)
        sid = int(sid)
        now = self.clock.now() if now is None else float(now)
        found = self.outcomes.pushed(sid, entries, now)
        if found.entries and self.deliveries.enabled:
            batch = self.deliveries.add(self.url(sid), sid, found.entries, found.values, now)
            found = found._replace(batch=batch)
        return found

    def record_push(self, source: int, new_items: int, reward: float,
                    published: list[float | None], *, now: float | None = None) -> None:
        """A hub pushed ``new_items`` new entries worth ``reward`` in all, published at
        ``published``, of source ``source`` at ``now``, the entries told new elsewhere (a
        cluster's workers): learnt as :meth:`pushed`'s, at no budget. An unknown source is
        counted (``errors/push_unknown_source``)."""
        if not 0 <= source < len(self.sources):
            self.stats.inc("errors/push_unknown_source")
            return
        now = self.clock.now() if now is None else float(now)
        self.outcomes.record_push(int(source), new_items, reward, published, now)

    def delivered(self, batch: int) -> None:
        """Every item made of ``batch``'s entries (``FetchResult.batch``) passed the item
        pipelines or was dropped on purpose: the journal may forget it."""
        self.deliveries.delivered(batch)

    def record_fetch(self, crawl: Crawl, new_items: int, reward: float, window_full: bool,
                     published: list[float | None], *, etag: str | None = None,
                     last_modified: str | None = None, now: float | None = None,
                     hints: ServerHints | None = None, latency: float | None = None) -> None:
        """A fetch of ``crawl`` found ``new_items`` new entries worth ``reward`` in all,
        published at ``published`` (unix seconds, None: unknown), the entries told new
        elsewhere (a cluster's workers): the policy learns it, the stats count it, within
        :mod:`scrapy_whittle.core.sanitize`'s ranges."""
        self.outcomes.record_fetch(crawl, new_items, reward, window_full, published,
                                   etag=etag, last_modified=last_modified, now=now,
                                   hints=hints, latency=latency)

    def not_modified(self, crawl: Crawl, *, etag: str | None = None,
                     last_modified: str | None = None, hints: ServerHints | None = None,
                     latency: float | None = None) -> None:
        """The server answered 304 Not Modified: a successful crawl that found nothing new
        (``latency``: as :meth:`feed_fetched`'s)."""
        self.outcomes.not_modified(crawl, etag=etag, last_modified=last_modified, hints=hints,
                                   latency=latency)
        if crawl.source in self.children.by_parent:     # a sitemap index, unchanged
            self.children.unchanged(crawl.source, self.clock.now())

    def crawl_failed(self, crawl: Crawl, kind: str, cause: str,
                     retry_after: float | None = None) -> float:
        """The fetch failed (``kind``: the stats key under ``errors/``); the source backs off,
        at least ``retry_after`` seconds if the server asked (capped by
        ``WHITTLE_HINTS_MAX_DELAY``). Logged once per source and kind. Returns the back-off
        in seconds."""
        return self.outcomes.crawl_failed(crawl, kind, cause, retry_after)

    def feed_warnings(self, crawl: Crawl, warnings: list[str]) -> None:
        """A usable feed had problems (a parser's complaints): counted, logged once."""
        self.outcomes.feed_warnings(crawl, warnings)

    def report_value(self, source: str | int, value: float, *, published: float,
                     at: float | None = None, base_value: float | None = None) -> bool:
        """Feedback from the spider: an entry of ``source`` (its URL or id), published at unix
        time ``published``, was worth ``value`` at unix time ``at`` (default now). Garbage
        (unknown source, non-finite or negative value, ``at`` before ``published``, an age
        beyond :data:`scrapy_whittle.core.sanitize.MAX_AGE`) is refused and counted under
        ``feedback/refused``; a value above ``MAX_ENTRY_VALUE`` is clipped to it. Returns
        whether the policy used it."""
        return self.outcomes.report_value(source, value, published=published, at=at,
                                          base_value=base_value)

    def flush(self) -> None:
        """Give the buffered crawl results to the policy (one Observation per epoch)."""
        self.outcomes.flush()

    # -- checkpoints, closing and stats ---------------------------------------------------
    def checkpoint_due(self) -> bool:
        return self.persistence.checkpoint_due()

    def checkpoint(self) -> None:
        """Write what changed since the previous checkpoint (blocking)."""
        if self.store is not None and self.keeper.policy is not None:
            cp = self.prepare_checkpoint()
            self.store.write(cp)
            self.checkpoint_written(cp)

    def prepare_checkpoint(self) -> Checkpoint:
        """What changed since the previous checkpoint, for ``StateStore.write`` (which may
        run in another thread)."""
        cp = self.persistence.prepare_checkpoint()
        cp.journal_segment = self.deliveries.rotate()
        cp.sitemap_children = self.children.drain()
        cp.sitemap_indexes = self.children.drain_indexes()
        if self.websub is not None and self.websub.changed:
            cp.websub, self.websub.changed = self.websub.rows(), False
        return cp

    def checkpoint_written(self, cp: Checkpoint) -> None:
        """``cp`` is committed: the delivery journal drops what it now holds twice."""
        self.deliveries.committed(cp.journal_segment)

    def budget_used(self) -> float | None:
        """Cost spent over the completed epochs of this run / (M x those epochs)."""
        return self.planner.budget_used(self.clock.now())

    def close(self) -> None:
        """Flush, write the last checkpoint, close the store."""
        used = self.budget_used()
        if used is not None:
            self.stats.set("budget_used", used)
        self.flush()
        self.outcomes.publish_measures()
        if self.store is not None and self.keeper.policy is not None:
            self.checkpoint()
            self.store.close()
        self.deliveries.close()
