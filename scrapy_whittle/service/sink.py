"""What Scrapy's adapters call on whatever hands out the crawls and learns from them: one
interface, :class:`CrawlSink`, two implementations: :class:`LocalSink` (this process's
:class:`~scrapy_whittle.service.recrawl.RecrawlService`) and a cluster process's
:class:`~scrapy_whittle.cluster.node.ClusterNode` (the tasks it took from Redis, its reports
sent there). The scheduler makes the one its settings ask for and publishes it on the
crawler (:func:`scrapy_whittle.scrapy.sink.whittle_sink`), so no adapter asks which it is.

The reports of a fetch (:meth:`CrawlSink.feed_fetched`, :meth:`~CrawlSink.not_modified`,
:meth:`~CrawlSink.crawl_failed`, :meth:`~CrawlSink.pushed`) are coroutines in both: a
cluster's go to Redis, a local one is done when it starts. The rest is synchronous because
its callers are: Scrapy's scheduler interface (``next_request``, ``has_pending_requests``,
``enqueue_request``, ``__len__``), the item signals that confirm deliveries, and the public
``report_value``; a cluster's node queues what it must send of them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from scrapy_whittle.service.types import NO_LOAD

if TYPE_CHECKING:
    from scrapy_whittle.feeds.hints import ServerHints
    from scrapy_whittle.feeds.parse import FeedEntry
    from scrapy_whittle.service.clock import Clock
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sources.index_children import Listing
    from scrapy_whittle.service.sources.registry import SourceSpec
    from scrapy_whittle.service.state.deliveries import Batch
    from scrapy_whittle.service.types import Crawl, FetchResult, HostLoad, Stats


class CrawlSink(ABC):
    """See the module docstring. ``clock``, ``stats``: the crawl's; ``wake_at``: when
    :meth:`next_crawl` may give something again (inf: when told); ``finished``: the crawl
    has run its ``WHITTLE_MAX_EPOCHS``; ``websub``: what a fetched feed's WebSub hub is told
    to (``discovered(source, hub, topic, now)``), None with WebSub off."""

    clock: Clock
    stats: Stats
    wake_at: float
    finished: bool
    websub: Any

    # -- handing out crawls (the scheduler) ------------------------------------------------
    @abstractmethod
    def next_crawl(self, hosts: HostLoad = NO_LOAD) -> Crawl | None:
        """The next crawl to fetch now, or None; ``hosts``: which hosts cannot take a
        request now."""

    @abstractmethod
    def has_crawls(self) -> bool:
        """Whether crawls may still come: the spider must stay open."""

    @abstractmethod
    def queued(self) -> int:
        """Crawls chosen and not handed out yet."""

    @abstractmethod
    def reports_pending(self) -> bool:
        """A crawl handed out waits for its report (a simulated clock must not jump past
        it)."""

    @abstractmethod
    def take_replay(self) -> Batch | None:
        """Entries found and not delivered (a killed crawl's), to hand to the spider again
        now, or None."""

    @abstractmethod
    def add_source(self, spec: SourceSpec) -> int | None:
        """Register a source (a spider's request); its id, where known at once."""

    @abstractmethod
    def admit_article(self, host: str) -> bool:
        """Whether an article request to ``host`` may go now, within its allowance (spent
        if so)."""

    @abstractmethod
    async def stop(self, unstarted: list[Crawl] = ()) -> None:
        """The crawl closes; ``unstarted``: crawls handed out and never downloaded (a
        cluster's go back to its other workers)."""

    # -- what a crawl showed (the middleware) ----------------------------------------------
    @abstractmethod
    async def feed_fetched(self, crawl: Crawl, entries: list[FeedEntry], *,
                           etag: str | None = None, last_modified: str | None = None,
                           hints: ServerHints | None = None, latency: float | None = None,
                           listing: Listing | None = None) -> FetchResult:
        """The fetch of ``crawl`` returned a feed with ``entries``: the new ones, valued.
        ``listing``: the feed is a sitemap index listing those children."""

    @abstractmethod
    async def not_modified(self, crawl: Crawl, *, etag: str | None = None,
                           last_modified: str | None = None,
                           hints: ServerHints | None = None, latency: float | None = None
                           ) -> None:
        """The server answered 304 Not Modified."""

    @abstractmethod
    async def crawl_failed(self, crawl: Crawl, kind: str, cause: str,
                           retry_after: float | None = None) -> float:
        """The fetch failed; the back-off in seconds, where known here (else 0)."""

    @abstractmethod
    async def pushed(self, source: int, entries: list[FeedEntry], *,
                     now: float | None = None) -> FetchResult:
        """A WebSub hub delivered ``entries`` of ``source`` at ``now``: the new ones."""

    @abstractmethod
    def moved(self, crawl: Crawl, url: str) -> Crawl:
        """The fetch of ``crawl`` was redirected permanently to ``url``: the crawl as
        there."""

    @abstractmethod
    def feed_warnings(self, crawl: Crawl, warnings: list[str]) -> None:
        """A usable feed had problems (a parser's complaints)."""

    @abstractmethod
    def set_crawl_delay(self, host: str, delay: float) -> bool:
        """robots.txt asks ``host`` for ``delay`` seconds between requests: whether that
        changed anything."""

    # -- full articles, deliveries, feedback ----------------------------------------------
    @abstractmethod
    def article_seen(self, source: int, canonical: str | None, fingerprint: int | None,
                     value: float | None) -> str | None:
        """An entry's article: how it repeats a story known, or None."""

    @abstractmethod
    def delivered(self, batch: int) -> None:
        """Every item made of ``batch``'s entries passed the item pipelines."""

    @abstractmethod
    def report_value(self, source: str | int, value: float, *, published: float,
                     at: float | None = None, base_value: float | None = None) -> bool:
        """A pipeline's feedback on an entry's value (``scrapy_whittle.report_value``)."""


class LocalSink(CrawlSink):
    """The sink of a crawl in one process: its :class:`RecrawlService`, every call passed
    on (the reports are coroutines that do not wait: the service is done when they start)."""

    def __init__(self, service: RecrawlService) -> None:
        self.service = service
        # the scheduler asks these for every request it hands out: the service's own bound
        # methods in their place, so that no call is added in between
        self.next_crawl = service.next_crawl
        self.has_crawls = service.has_crawls
        self.queued = service.queued
        self.reports_pending = service.reports_pending

    @property
    def clock(self) -> Clock:
        return self.service.clock

    @property
    def stats(self) -> Stats:
        return self.service.stats

    @property
    def wake_at(self) -> float:
        return self.service.wake_at

    @property
    def finished(self) -> bool:
        return self.service.finished

    @property
    def websub(self):
        return self.service.websub

    def next_crawl(self, hosts: HostLoad = NO_LOAD) -> Crawl | None:
        return self.service.next_crawl(hosts)

    def has_crawls(self) -> bool:
        return self.service.has_crawls()

    def queued(self) -> int:
        return self.service.queued()

    def reports_pending(self) -> bool:
        return self.service.reports_pending()

    def take_replay(self) -> Batch | None:
        """A local service's replays are all known when it opens: the scheduler hands them
        out first then (``service.replays``); none comes later."""
        return None

    def add_source(self, spec: SourceSpec) -> int:
        return self.service.add_source(spec)

    def admit_article(self, host: str) -> bool:
        return self.service.admit_article(host)

    async def stop(self, unstarted: list[Crawl] = ()) -> None:
        """The service closes (:meth:`RecrawlService.close`: its last checkpoint)."""
        self.service.close()

    async def feed_fetched(self, crawl: Crawl, entries: list[FeedEntry], *,
                           etag: str | None = None, last_modified: str | None = None,
                           hints: ServerHints | None = None, latency: float | None = None,
                           listing: Listing | None = None) -> FetchResult:
        return self.service.feed_fetched(crawl, entries, etag=etag,
                                         last_modified=last_modified, hints=hints,
                                         latency=latency, listing=listing)

    async def not_modified(self, crawl: Crawl, *, etag: str | None = None,
                           last_modified: str | None = None,
                           hints: ServerHints | None = None, latency: float | None = None
                           ) -> None:
        self.service.not_modified(crawl, etag=etag, last_modified=last_modified, hints=hints,
                                  latency=latency)

    async def crawl_failed(self, crawl: Crawl, kind: str, cause: str,
                           retry_after: float | None = None) -> float:
        return self.service.crawl_failed(crawl, kind, cause, retry_after)

    async def pushed(self, source: int, entries: list[FeedEntry], *,
                     now: float | None = None) -> FetchResult:
        return self.service.pushed(source, entries, now=now)

    def moved(self, crawl: Crawl, url: str) -> Crawl:
        return self.service.moved(crawl, url)

    def feed_warnings(self, crawl: Crawl, warnings: list[str]) -> None:
        self.service.feed_warnings(crawl, warnings)

    def set_crawl_delay(self, host: str, delay: float) -> bool:
        return self.service.set_crawl_delay(host, delay)

    def article_seen(self, source: int, canonical: str | None, fingerprint: int | None,
                     value: float | None) -> str | None:
        return self.service.article_seen(source, canonical, fingerprint, value)

    def delivered(self, batch: int) -> None:
        self.service.delivered(batch)

    def report_value(self, source: str | int, value: float, *, published: float,
                     at: float | None = None, base_value: float | None = None) -> bool:
        return self.service.report_value(source, value, published=published, at=at,
                                         base_value=base_value)
