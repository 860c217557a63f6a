"""``WhittleScheduler``: Scrapy's scheduler, with the re-crawl of feeds chosen by a policy.

It is the Scrapy side of the re-crawl service (:mod:`scrapy_whittle.service.recrawl`), which decides
which feed to fetch when, learns from what the feeds show and keeps the crawl's state. The
scheduler only moves requests:

* **source requests** (feeds) come from ``service.next_crawl()`` when the downloader asks for
  a request; they are never queued. When nothing may be fetched now the scheduler still
  reports pending requests (the spider stays open) and wakes the engine at
  ``service.wake_at``, through ``engine.crawl()`` of the request then due (Scrapy's public
  way of handing the engine a request), so a crawl never waits for the engine's 5 s
  heartbeat and nothing polls in between.
* **every other request** goes to a wrapped ``scrapy.core.scheduler.Scheduler`` (dupefilter,
  priority queues, JOBDIR disk queues unchanged). Redirects and retries of a source request
  (they carry ``meta["whittle_crawl"]``) are served first and cost no budget. A request with
  ``meta["whittle_source"] = True`` registers its URL as a new source (it is not downloaded
  now; the policy decides when) and becomes the template of that source's requests
  (callback, headers, cb_kwargs). A request of the crawl's own with
  ``meta["whittle_outside"]`` (WebSub: a subscription request to a hub, a delivery to hand
  to the spider: :mod:`scrapy_whittle.scrapy.websub`) is served first too, at no budget.
* **article requests** (``WHITTLE_ARTICLES``) wait in an
  :class:`~scrapy_whittle.scrapy.articles.ArticleQueue` and go after the feeds due, within
  their hosts' allowances, at no budget (:mod:`scrapy_whittle.scrapy.articles`).

Politeness: a host's delay (``DOWNLOAD_DELAY``, its ``DOWNLOAD_SLOTS`` delay, robots.txt
Crawl-delay: the longest) is its allowance in the plan, floor(T / d) crawls per epoch
(:mod:`~scrapy_whittle.service.hosts.host_allowances`); the hosts whose download slot is saturated
are passed to the service, which passes over their sources for others fetchable now. Costs:
C_i = max(1, d_i M / T), d_i the source's minimum interval.

State: with ``JOBDIR`` the service keeps its state in ``JOBDIR/whittle.sqlite``, checkpointed
every ``WHITTLE_CHECKPOINT_INTERVAL`` seconds (written in a thread, off the reactor) and at
close.

Cluster: with ``WHITTLE_REDIS_URL`` (or ``REDIS_URL``) the crawls come from the process's
:class:`~scrapy_whittle.cluster.node.ClusterNode` (the tasks it took from the Redis stream)
instead of a local service; both are a :class:`~scrapy_whittle.service.sink.CrawlSink` (the
local one a :class:`~scrapy_whittle.service.sink.LocalSink`), published on the crawler
(:func:`~scrapy_whittle.scrapy.sink.whittle_sink`), so the requests, redirects and retries,
the wake-ups and the middlewares' reports work the same.
A source a spider registers is told to the cluster's planner; its template is kept by URL
until the planner gives it an id. The source list and the state in JOBDIR are the local
service's (a cluster keeps its state in Redis). What another worker found and did not deliver
(killed) the node reclaims from Redis mid-crawl; the scheduler hands it out as replay
requests (``sink.take_replay()``) before the next source.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.core.scheduler import BaseScheduler, Scheduler
from scrapy.utils.asyncio import call_later, create_looping_call
from scrapy.utils.defer import deferred_from_coro, deferred_to_future, maybe_deferred_to_future
from scrapy.utils.job import job_dir
from twisted.internet.threads import deferToThread

from scrapy_whittle.scrapy.articles import ArticleQueue
from scrapy_whittle.scrapy.delivery import flush_feed_exports, replay_request
from scrapy_whittle.scrapy.meta import (
    META_ARTICLE,
    META_CRAWL,
    META_ENTRIES,
    META_ERRBACK,
    META_ERROR,
    META_OUTSIDE,
    META_PLAIN,
    META_REGISTER,
    META_REPLAY,
    META_SOURCE_ID,
    META_SOURCE_URL,
    META_VALUES,
)
from scrapy_whittle.scrapy.sink import publish
from scrapy_whittle.scrapy.site_search import SiteSearch
from scrapy_whittle.scrapy.source_list import SourceListReader
from scrapy_whittle.scrapy.startup import crawl_start, forget_sources, refuse_to_start
from scrapy_whittle.scrapy.stats import WhittleStats
from scrapy_whittle.service.clock import SystemClock
from scrapy_whittle.service.config import WhittleConfig, download_slot_delays
from scrapy_whittle.service.recrawl import Crawl, RecrawlService
from scrapy_whittle.service.sink import CrawlSink, LocalSink
from scrapy_whittle.service.sources.registry import SourceSpec, is_plain_url, load_sources
from scrapy_whittle.service.sources.site_table import SiteTable
from scrapy_whittle.service.state.gc_pause import freeze_startup_heap
from scrapy_whittle.service.state.store import SqliteStateStore

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

    from scrapy_whittle.cluster.node import ClusterNode

logger = logging.getLogger(__name__)

LEGACY_STATE_FILE = "whittle.state.pickle"


def _installed(components: dict, name: str) -> bool:
    """Whether a component whose class is called ``name`` is enabled in ``components`` (a
    ``*_MIDDLEWARES`` dict of paths or classes to orders)."""
    return any(str(getattr(k, "__name__", k)).endswith(name) and v is not None
               for k, v in components.items())


class DownloadSlots:
    """The downloader's slots as the service's ``HostLoad``: a host is saturated when its
    slot has as many requests active as it may, or a delay and requests waiting."""

    def __init__(self, crawler: Crawler | None) -> None:
        self.crawler = crawler

    def _slots(self) -> dict:
        try:
            return self.crawler.engine.downloader.slots
        except (AttributeError, RuntimeError):
            return {}

    @staticmethod
    def _full(slot) -> bool:
        return len(slot.active) >= slot.concurrency or bool(slot.delay and slot.queue)

    def saturated(self, host: str) -> bool:
        slot = self._slots().get(host)
        return slot is not None and self._full(slot)

    def all_saturated(self) -> list[str]:
        return [key for key, slot in self._slots().items() if self._full(slot)]


class WhittleScheduler(BaseScheduler):
    """See the module docstring; settings in ``scrapy_whittle.service.config`` / docs/scrapy.md."""

    def __init__(self, inner: Scheduler | Any, service: RecrawlService | None, *,
                 node: ClusterNode | None = None, config: WhittleConfig | None = None,
                 sources: list[SourceSpec] | None = None, crawler: Crawler | None = None,
                 jobdir: str | None = None) -> None:
        self.inner = inner
        self.service = service         # the local service; None in a cluster process
        self.node = node               # the cluster process's node; None in a local crawl
        #: what hands out the crawls and what the middlewares report fetches to
        self.sink: CrawlSink = node if node is not None else LocalSink(service)
        self.config: WhittleConfig = service.config if service is not None else config
        self.crawler = crawler
        self.jobdir = jobdir
        self._initial = list(sources or [])
        self.followups: deque[Request] = deque()
        self.templates: dict[int, Request] = {}
        self._templates_by_url: dict[str, Request] = {}     # sources not given an id yet
        self._wakeup = None
        self._wakeup_at = math.inf
        self._checkpoints = None
        self._writing = None
        self.source_list: SourceListReader | None = None
        self._list_due = math.inf                # when the source list is read again
        self._list_for: RecrawlService | None = None   # the service the list was read for
        self._slots = DownloadSlots(crawler)
        #: the sites of the source list (:mod:`scrapy_whittle.scrapy.site_search`); None in
        #: a cluster process, or with WHITTLE_SITE_SEARCH off
        self.site_search: SiteSearch | None = None
        #: article requests (WHITTLE_ARTICLES), handed out within their hosts' allowances
        self.articles = ArticleQueue(
            admit=self.sink.admit_article, saturated=self._slots.saturated,
            epoch=lambda: int(self.sink.clock.now() // self.config.period),
            host_limit=self.config.articles.host_limit, ended=lambda: self.sink.finished)
        self.polls = 0                        # next_request calls that looked at sources
        self._skipped = 0                     # bad entries of the lists read at start-up

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> WhittleScheduler:
        settings = crawler.settings
        start = crawl_start(crawler)       # validated before the spider opened
        config, sources, oracle = start.config, start.sources, start.oracle
        slot_delays = download_slot_delays(settings)
        retries = settings.getint("RETRY_TIMES") if settings.getbool("RETRY_ENABLED") else 0
        max_flight = settings.getfloat("DOWNLOAD_TIMEOUT") * (retries + 2) + 60.0
        mws = {**settings.getdict("DOWNLOADER_MIDDLEWARES_BASE"),
               **settings.getdict("DOWNLOADER_MIDDLEWARES")}
        if not _installed(mws, "FeedObserverMiddleware"):
            logger.warning("WhittleScheduler without FeedObserverMiddleware in "
                           "DOWNLOADER_MIDDLEWARES: the policy will learn nothing")
        spider_mws = {**settings.getdict("SPIDER_MIDDLEWARES_BASE"),
                      **settings.getdict("SPIDER_MIDDLEWARES")}
        tracked = _installed(spider_mws, "DeliveryMiddleware")
        if not tracked and job_dir(settings) and config.state and not config.redis_url:
            logger.warning("WhittleScheduler with JOBDIR but without "
                           "scrapy_whittle.DeliveryMiddleware in SPIDER_MIDDLEWARES: items in "
                           "the pipelines when the crawl is killed are not handed out again "
                           "(the add-on installs it)")
        stats = WhittleStats(crawler.stats, config.logstats_interval, config.policy,
                             cluster=bool(config.redis_url))
        if config.redis_url:
            node = _cluster_node(crawler, config, stats, sources=sources, oracle=oracle,
                                 slot_delays=slot_delays, max_flight=max_flight)
            node.journal_deliveries = tracked
            obj = cls(Scheduler.from_crawler(crawler), None, node=node, config=config,
                      crawler=crawler)
        else:
            service = RecrawlService(config, oracle=oracle, slot_delays=slot_delays,
                                     max_flight=max_flight, stats=stats,
                                     download_delay=settings.getfloat("DOWNLOAD_DELAY"))
            service.journal_deliveries = tracked
            obj = cls(Scheduler.from_crawler(crawler), service, sources=sources,
                      crawler=crawler, jobdir=job_dir(settings))
            obj._skipped = start.skipped
            if config.site_search:
                state = config.state and job_dir(settings)
                table = SiteTable.in_jobdir(state) if state else SiteTable()
                obj.site_search = SiteSearch(
                    service, table, lambda request: crawler.engine.crawl(request),
                    stats=stats, max_bytes=config.max_feed_size,
                    again_after=config.retire_probe)
        publish(crawler, obj.sink, obj.site_search)
        crawler.signals.connect(obj._spider_idle, signal=signals.spider_idle)
        return obj

    # -- open / close -------------------------------------------------------------------
    def open(self, spider: Spider):
        self.spider = spider
        if self.node is not None:
            return deferred_from_coro(self._open_cluster(spider))
        result = self.inner.open(spider)
        if self.config.state and self.jobdir:
            self._retire_legacy_state()
            self.service.store = SqliteStateStore.in_jobdir(self.jobdir)
        spider_sources = load_sources(getattr(spider, "whittle_sources", None) or None)
        url = self.config.sources_url
        # with a list at a URL, the list is what the fetch finds: nothing leaves before.
        # The start-up check built the policy for the list; a JOBDIR's sources may make it
        # unbuildable still: one ERROR line then too
        specs = self._initial + spider_sources
        if self.site_search is not None:       # the sites searched before: their feeds
            self.site_search.table.load()
            specs = self.site_search.expand(specs)
        with refuse_to_start():
            self.service.open(specs, listed=url is None)
        self._initial = []                 # registered: the list is not kept twice
        # what a killed run had not delivered goes first
        self.followups.extend(replay_request(b) for b in self.service.replays)
        self.service.replays = []
        if self._skipped:                  # bad entries the start-up check left out
            self.service.stats.set("sources/skipped", self._skipped)
        if self.crawler is not None:
            forget_sources(self.crawler)
        freeze_startup_heap()              # see scrapy_whittle.service.state.gc_pause
        self.service.stats.start()
        if self.service.store is not None:
            self._checkpoints = create_looping_call(self._checkpoint)
            self._checkpoints.start(self.config.checkpoint_interval, now=False)
        self._start_source_list(spider_sources)
        return result

    async def _open_cluster(self, spider: Spider) -> None:
        result = self.inner.open(spider)
        if result is not None:
            await maybe_deferred_to_future(result)
        node = self.node
        node.on_tasks = self._wake
        node.on_lead = self._wake          # a new planner reads a source list at once
        config = self.config
        if config.sources_url is not None or config.sources_refresh:
            self.source_list = SourceListReader(
                lambda: node.planner.service, config.sources, [], config.sources_url,
                node.stats)
        await node.start()
        # as one process's (scrapy_whittle.service.state.gc_pause)
        freeze_startup_heap()
        node.stats.start()
        logger.info("cluster crawl %s on %s as %s", node.keys.prefix, node.redis_label,
                    node.consumer)

    def _start_source_list(self, spider_sources: list[SourceSpec]) -> None:
        """Fetch a list at a URL now, and read the list again every
        ``WHITTLE_SOURCES_REFRESH`` seconds of the crawl's clock (a simulated clock included)
        (:mod:`scrapy_whittle.scrapy.source_list`)."""
        url, every = self.config.sources_url, self.config.sources_refresh
        if url is None and not (every and isinstance(self.config.sources, str)):
            return
        self.source_list = SourceListReader(lambda: self.service, self.config.sources,
                                            spider_sources, url, self.service.stats,
                                            on_change=self._sources_changed,
                                            expand=(self.site_search.expand
                                                    if self.site_search is not None else None))
        self._list_for = self.service
        if url is not None:
            self.followups.append(self.source_list.request())
        if every:
            self._list_due = self.service.clock.now() + every

    def _source_list_due(self) -> Request | None:
        """The request that reads a list at a URL again, when due (a file list is read in a
        thread: None). In a cluster, only while this process plans: at once when its planner
        took over (a list at a URL), then every ``WHITTLE_SOURCES_REFRESH`` seconds."""
        reader = self.source_list
        service = reader.target() if reader is not None else None
        if service is None or service.finished:
            self._list_due = math.inf
            if service is None:            # a cluster's worker: a next planner reads anew
                self._list_for = None
            return None
        now = self.sink.clock.now()
        if service is not self._list_for:          # a cluster's planner, new here
            self._list_for = service
            every = self.config.sources_refresh
            self._list_due = now if reader.url is not None else now + every
        if now < self._list_due or reader.pending:
            return None
        every = self.config.sources_refresh
        self._list_due = now + every if every else math.inf
        if reader.url is None:
            reader.read_file()
            return None
        return reader.request()

    def _sources_changed(self) -> None:
        self._cancel_wakeup()
        self._schedule_wakeup(self.sink.clock.now())

    def _retire_legacy_state(self) -> None:
        legacy = Path(self.jobdir) / LEGACY_STATE_FILE
        if legacy.exists():
            aside = legacy.with_name(LEGACY_STATE_FILE + ".ignored")
            legacy.replace(aside)
            logger.warning("%s (state of scrapy-whittle < 0.2) is not loaded: unpickling can "
                           "run arbitrary code. Moved to %s; the crawl's state now lives in "
                           "%s", legacy, aside.name, "whittle.sqlite")

    def close(self, reason: str):
        return deferred_from_coro(self._close(reason))

    async def _close(self, reason: str) -> None:
        self._cancel_wakeup()
        if self._checkpoints is not None and self._checkpoints.running:
            self._checkpoints.stop()
        if self._writing is not None:          # let a checkpoint in progress finish
            await deferred_to_future(self._writing)
        # what the last checkpoint counts as delivered must be in the export files
        flush_feed_exports(self.crawler)
        # crawls taken and not downloaded (a cluster's go back to its other workers)
        unstarted = [r.meta[META_CRAWL] for r in self.followups if META_CRAWL in r.meta]
        self.followups.clear()
        await self.sink.stop(unstarted)
        if self.site_search is not None:
            self.site_search.table.close()
        self.sink.stats.stop()
        result = self.inner.close(reason)
        if result is not None:
            await maybe_deferred_to_future(result)

    def _checkpoint(self) -> None:
        """Prepare the checkpoint on the reactor, write it in a thread."""
        if self._writing is not None:
            return
        # what the checkpoint counts as delivered must be in the export files
        flush_feed_exports(self.crawler)
        cp = self.service.prepare_checkpoint()

        def written(result):
            self.service.checkpoint_written(cp)
            return result

        def done(result):
            self._writing = None
            return result

        def failed(failure):
            logger.error("checkpoint of the crawl state failed: %s", failure.value)

        self._writing = deferToThread(self.service.store.write, cp)
        self._writing.addCallbacks(written, failed)
        self._writing.addBoth(done)

    # -- the scheduler interface --------------------------------------------------------
    def has_pending_requests(self) -> bool:
        sources = self.sink.has_crawls()
        waiting = self.source_list is not None and self.source_list.pending
        return (sources or waiting or bool(self.followups) or bool(self.articles)
                or self.inner.has_pending_requests())

    def __len__(self) -> int:
        return len(self.followups) + self.sink.queued() + len(self.articles) + len(self.inner)

    def enqueue_request(self, request: Request) -> bool:
        if META_CRAWL in request.meta or META_REPLAY in request.meta \
                or META_OUTSIDE in request.meta:
            # a due source, a redirect / retry of one, a replay of undelivered entries, a
            # request of the crawl's own (WebSub: to a hub, a delivery to hand out)
            if request.meta.get(META_PLAIN) and not is_plain_url(request.url):
                # redirected to a URL that needs Scrapy's escaping: made again without
                # ``verbatim_url`` (set by _request for the plain URL it started from)
                meta = {k: v for k, v in request.meta.items()
                        if k not in ("verbatim_url", META_PLAIN)}
                request = request.replace(meta=meta)
            self.followups.append(request)
            return True
        if META_ARTICLE in request.meta:
            self.articles.push(request)
            return True
        if request.meta.get(META_REGISTER):
            template = request.replace(dont_filter=True, meta={
                k: v for k, v in request.meta.items() if k != META_REGISTER})
            sid = self.sink.add_source(SourceSpec(url=request.url))
            if sid is None:                # told to a cluster's planner: no id yet
                self._templates_by_url[request.url] = template
                return True
            self.templates[sid] = template
            logger.debug("registered source %d: %s", sid, request.url)
            self._schedule_wakeup(self.sink.clock.now())
            return True
        return self.inner.enqueue_request(request)

    def next_request(self) -> Request | None:
        if self.followups:
            return self.followups.popleft()
        request = self._next_source_request()
        if request is not None:
            return request
        request = self.articles.pop()
        if request is not None:
            return request
        return self.inner.next_request()

    # -- source requests ----------------------------------------------------------------
    def _next_source_request(self) -> Request | None:
        listing = self._source_list_due()
        if listing is not None:
            return listing
        batch = self.sink.take_replay()    # entries a killed worker had not delivered
        if batch is not None:
            return replay_request(batch)
        service = self.service
        if service is not None and not len(service.sources):
            # nothing to crawl yet: wait for the list (the clock must not run ahead of it)
            if math.isfinite(self._list_due) and not self.source_list.pending:
                self._schedule_wakeup(self._list_due)
            return None
        self.polls += 1
        sink = self.sink
        crawl = sink.next_crawl(self._slots)
        if crawl is None:
            self._schedule_wakeup(min(sink.wake_at, self._list_due))
            return None
        return self._request(crawl)

    def _request(self, crawl: Crawl) -> Request:
        """The request of a crawl. It carries Scrapy's own size limits at
        ``WHITTLE_MAX_FEED_SIZE`` (``download_maxsize``, enforced on the wire and while
        HttpCompressionMiddleware inflates the body, so a gzip bomb is cut there;
        ``download_warnsize`` off: the limit is an error already, and Scrapy would warn about
        every large feed) and the errback that reports the failures the
        middleware cannot see (:meth:`_source_failed`)."""
        limit = self.config.max_feed_size
        meta = {META_CRAWL: crawl, META_SOURCE_ID: crawl.source,
                META_SOURCE_URL: crawl.url, "dont_cache": True,
                "download_maxsize": limit, "download_warnsize": 0}
        template = self.templates.get(crawl.source)
        if template is None and self._templates_by_url:
            template = self._templates_by_url.get(crawl.url)
            if template is not None:
                self.templates[crawl.source] = template
        if template is None:
            if is_plain_url(crawl.url):
                # already what Scrapy's escaping makes of it: Scrapy's documented
                # ``verbatim_url`` skips that work (a large part of what the scheduler
                # spends on a crawl); a redirect elsewhere is escaped again (enqueue_request)
                meta["verbatim_url"] = meta[META_PLAIN] = True
            return Request(crawl.url, dont_filter=True, meta=meta,
                           headers=crawl.headers or None, errback=self._source_failed)
        request = template.replace(meta={**template.meta, **meta})
        for key, value in crawl.headers.items():
            request.headers[key] = value
        if request.errback is not None:
            request.meta[META_ERRBACK] = request.errback
        request.errback = self._source_failed
        return request

    async def _source_failed(self, failure):
        """Errback of source requests. A failure raised by a downloader middleware's
        ``process_response`` (RedirectMiddleware's "max redirections reached",
        HttpCompressionMiddleware's size limit while inflating) reaches no middleware's
        ``process_exception``, only this: it is reported to the service here, once; what the
        middleware already reported (``whittle_error`` or ``whittle_entries`` set) is not.
        Then the template's own errback, if it had one."""
        request = getattr(failure, "request", None)
        meta = request.meta if request is not None else {}
        crawl = meta.get(META_CRAWL)
        if crawl is not None and META_ERROR not in meta and META_ENTRIES not in meta:
            from scrapy_whittle.scrapy.errors import describe, exception_kind

            kind = exception_kind(failure.value)
            await self.sink.crawl_failed(crawl, kind, describe(failure.value))
            meta.update({META_ERROR: kind, META_ENTRIES: [], META_VALUES: []})
        errback = meta.get(META_ERRBACK)
        if errback is not None:
            return errback(failure)
        return None

    # -- waking the engine --------------------------------------------------------------
    def _schedule_wakeup(self, at: float) -> None:
        if not math.isfinite(at) or at >= self._wakeup_at - 1e-4:
            return
        idle = self._downloader_idle()
        delay = self.sink.clock.wait(at, idle)
        if delay is None:                  # a simulated clock: woken by the next download
            return
        self._cancel_wakeup()
        self._wakeup_at = at
        self._wakeup = call_later(delay, self._wake)

    def _downloader_idle(self) -> bool:
        """Nothing is being downloaded, and no crawl handed out waits for its report: a
        failure only the errback sees (:meth:`_source_failed`) reaches it through the
        scraper, after the downloader let it go, and a simulated clock must not jump past
        it (the source would be due again before its failure backed it off)."""
        try:
            if self.crawler.engine.downloader.active:
                return False
        except (AttributeError, RuntimeError):
            return True
        return not self.sink.reports_pending()

    def _cancel_wakeup(self) -> None:
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup, self._wakeup_at = None, math.inf

    def _wake(self) -> None:
        """Hand the engine the request now due, if any (``engine.crawl`` also makes it poll
        this scheduler for more); else wait for the next due time."""
        self._wakeup, self._wakeup_at = None, math.inf
        engine = getattr(self.crawler, "engine", None)
        if engine is None or getattr(engine, "spider", None) is None:
            return
        request = self._next_source_request()
        if request is not None:
            engine.crawl(request)

    def _spider_idle(self, spider=None) -> None:
        # has_pending_requests() is True while there are sources, so the engine does not
        # call this then; kept for spiders that send only registration requests late.
        if self.sink.has_crawls():
            from scrapy.exceptions import DontCloseSpider

            raise DontCloseSpider


def _cluster_node(crawler: Crawler, config: WhittleConfig, stats: WhittleStats, *, sources,
                  oracle, slot_delays, max_flight: float) -> ClusterNode:
    """This process's node of a cluster crawl, with the downloader's concurrency and delays
    (the planner keeps every host polite across the cluster with them)."""
    # here, not at the top: the Redis client is an optional dependency (extra "cluster")
    from scrapy_whittle.cluster.node import ClusterNode

    settings = crawler.settings
    spider = getattr(crawler, "spidercls", None)
    prefix = config.redis_prefix.format(spider=getattr(spider, "name", "crawl"))
    return ClusterNode(
        config, redis_url=config.redis_url, prefix=prefix, specs=sources, stats=stats,
        clock=config.clock or SystemClock(), oracle=oracle, slot_delays=slot_delays,
        lease=config.redis_lease or max_flight, lock_ttl=config.redis_lock_ttl,
        backlog=config.redis_backlog, capacity=settings.getint("CONCURRENT_REQUESTS"),
        host_concurrency=settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN"),
        download_delay=settings.getfloat("DOWNLOAD_DELAY"), wait=config.redis_wait,
        standby=config.redis_standby)
