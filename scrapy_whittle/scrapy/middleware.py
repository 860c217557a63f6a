"""``FeedObserverMiddleware``: turns every fetched feed into an Observation for the policy.

Install it at order **540**::

    DOWNLOADER_MIDDLEWARES = {"scrapy_whittle.FeedObserverMiddleware": 540}

Responses travel through downloader middlewares from the highest order to the lowest, so at
540 it sees each feed after HttpCacheMiddleware (900), RedirectMiddleware (600),
HttpCompressionMiddleware (590) and RetryMiddleware (550): decompressed, after redirects, and
only once retries have given up. Source requests carry ``dont_cache`` (a cached feed would
hide new entries; conditional GET gives the same savings), so the HTTP cache keeps working
for every other request.

It is an adapter: for a source response it parses the body (``scrapy_whittle.feeds.parse``,
through ``scrapy_whittle.feeds.parse_pool.ParsePool``: small feeds on the reactor thread, large
ones in worker processes; the pool is closed at ``engine_stopped``) and hands what it found
to the re-crawl service (:mod:`scrapy_whittle.service.recrawl`; a cluster's node in a cluster
crawl: the sink the scheduler published, :func:`scrapy_whittle.scrapy.sink.whittle_sink`),
which remembers the
validators for the next conditional GET,
keeps the entries not seen before, values them (engagement / ``WHITTLE_ENGAGEMENT_SCALE``
when the feed gives one, else ``WHITTLE_ITEM_VALUE`` x the source's weight) and lets the
policy learn from them. A 304 is a successful crawl that found nothing new.

A source request that reached its answer through permanent redirects (301, 308; the
``redirect_reasons`` RedirectMiddleware leaves in the request's meta) and got a feed or a 304
tells the service the source moved (``RecrawlService.moved``): it is at the end of the
permanent part of the chain from this crawl on, its old URL kept as an alias. Temporary
redirects (302, 303, 307) move nothing, and neither does a chain ending in an error (a 301
to a 404 is the old URL's failure, not a new home).

Failures (HTTP >= 400, a 3xx left unfollowed, a download error after retries, an unusable
body, a redirect loop: a source request redirected back to a URL of its own chain is dropped
here, before it is sent again) teach the policy nothing; the service logs them once per
source and kind with their cause, counts them under ``whittle/errors/<kind>`` (the kinds of
:mod:`scrapy_whittle.scrapy.errors`), and backs the source off
``min(WHITTLE_BACKOFF_MAX, WHITTLE_BACKOFF_BASE * 2**(k-1))`` seconds after k consecutive
failures, or as long as a 429 / 503's ``Retry-After`` asks if longer. What a response says
about the next visit (``Cache-Control: max-age``, ``Expires``, the feed's ``<ttl>``,
``<skipHours>``, ``<skipDays>``, ``sy:updateFrequency``) goes to the service with it
(:mod:`scrapy_whittle.feeds.hints`). The new entries are in ``response.meta["whittle_entries"]``
(a list of ``FeedEntry``) with their values in ``response.meta["whittle_values"]``; an unusable
response has ``response.meta["whittle_error"]`` set to its kind. A sitemap index names other
sources (its child sitemaps, on its own host, at most ``WHITTLE_MAX_FEED_ENTRIES``): their URLs
are in ``response.meta["whittle_sources"]`` (counted in ``whittle/sources/named``), and
``FeedSpider`` registers them as sources the way a spider registers any
(``meta={"whittle_source": True}``), so they join the discovery sweep; the service is told
what the index lists with the fetch (``feed_fetched(..., listing=)``), so that a child it
lists no more retires (``WHITTLE_SITEMAP_CHILD_MISSES``, ``WHITTLE_SITEMAP_CHILD_MAX_AGE``).
An article page (``WHITTLE_ARTICLES``) is extracted by the same pool
(:mod:`scrapy_whittle.scrapy.articles`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.utils.reactor import is_asyncio_reactor_installed

from scrapy_whittle.feeds.hints import response_hints, retry_after
from scrapy_whittle.scrapy.articles import extract_response, unsent_response
from scrapy_whittle.scrapy.delivery import replay_response
from scrapy_whittle.scrapy.errors import RedirectLoop, describe, exception_kind
from scrapy_whittle.scrapy.meta import (
    META_ARTICLE,
    META_BATCH,
    META_CRAWL,
    META_ENTRIES,
    META_ERROR,
    META_PUSH,
    META_REPLAY,
    META_SOURCES,
    META_TIME,
    META_UNSENT,
    META_VALUES,
)
from scrapy_whittle.scrapy.sink import site_search_of, whittle_sink
from scrapy_whittle.scrapy.startup import crawl_start
from scrapy_whittle.scrapy.websub import push_response
from scrapy_whittle.service.config import WhittleConfig

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_whittle.feeds.parse_pool import ParsePool
    from scrapy_whittle.service.sink import CrawlSink

logger = logging.getLogger(__name__)


class RetryAfterMiddleware:
    """At order 560 (the add-on installs it): a source's 429, and its 503 that carries
    ``Retry-After``, is not retried at once by Scrapy's RetryMiddleware (550), which would
    ignore the header and earn another refusal; it reaches ``FeedObserverMiddleware``, the
    source backs off (at least as long as the server asked) and its host's allowance hears
    it. Other requests are untouched."""

    def process_response(self, request: Request, response: Response) -> Response:
        if META_CRAWL in request.meta and (response.status == 429 or (
                response.status == 503 and response.headers.get("Retry-After"))):
            request.meta["dont_retry"] = True
        return response


#: the redirects that say a resource moved for good (RFC 9110 15.4)
PERMANENT = frozenset({301, 308})


def _latency(request: Request) -> float | None:
    """The seconds the server took to answer ``request`` (Scrapy's ``download_latency``: from
    the request sent to the response's headers, so a feed's size hardly counts), or None."""
    latency = request.meta.get("download_latency")
    return float(latency) if isinstance(latency, int | float) else None


def moved_to(request: Request) -> str | None:
    """Where a redirected request's first URL moved for good: the URL its leading run of
    permanent redirects ends at (None: no permanent redirect first)."""
    reasons = request.meta.get("redirect_reasons") or ()
    urls = [*request.meta.get("redirect_urls", ()), request.url]
    j = 0
    while j < len(reasons) and reasons[j] in PERMANENT:
        j += 1
    return urls[j] if j and len(urls) > j else None


class FeedObserverMiddleware:
    def __init__(self, crawler: Crawler | None, config: WhittleConfig,
                 pool: ParsePool | None = None) -> None:
        self.crawler = crawler
        self.config = config
        # feeds are parsed by this pool: small ones inline, large ones in worker processes
        self.pool = pool if pool is not None else config.parsing.make_pool()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FeedObserverMiddleware:
        # Built with the engine, before the spider opens: without the add-on, the earliest
        # point to stop a crawl with bad WHITTLE_* settings (scrapy_whittle.scrapy.startup).
        config = crawl_start(crawler).config
        pool = config.parsing.make_pool()
        if pool.workers and not is_asyncio_reactor_installed():
            logger.warning("WHITTLE_PARSE_WORKERS (%d) needs the asyncio reactor: feeds are "
                           "parsed on the reactor thread", pool.workers)
            pool.workers = 0
        mw = cls(crawler, config, pool=pool)
        crawler.signals.connect(mw._close_pool, signal=signals.engine_stopped)
        return mw

    async def _close_pool(self) -> None:
        await self.pool.close()

    # -- hooks --------------------------------------------------------------------------
    def process_request(self, request: Request) -> Response | None:
        """A redirect of a source request back to a URL of its own chain is a loop: dropped
        before it is sent (``RedirectLoop``, kind ``redirect_loop``), instead of after
        ``REDIRECT_MAX_TIMES`` requests. A replay of entries a killed crawl had not
        delivered is answered here, without a download (:mod:`scrapy_whittle.scrapy.delivery`)."""
        if META_REPLAY in request.meta:
            return replay_response(request)
        if META_UNSENT in request.meta:
            return unsent_response(request)
        if META_PUSH in request.meta:
            return push_response(request)
        visited = request.meta.get("redirect_urls")
        if visited and META_CRAWL in request.meta and request.url in visited:
            chain = " -> ".join([*visited, request.url][-4:])
            raise RedirectLoop(f"redirect loop: ... {chain}")

    async def process_response(self, request: Request, response: Response) -> Response:
        sink = whittle_sink(self.crawler)
        crawl = request.meta.get(META_CRAWL)
        if sink is None:
            return response
        if META_PUSH in request.meta:
            await self._pushed(sink, request, response)
            return response
        if crawl is None:
            if META_ARTICLE in request.meta:       # an article page (WHITTLE_ARTICLES)
                await extract_response(self.pool, request, response, sink)
                return response
            if response.status == 200 and urlsplit(response.url).path == "/robots.txt":
                self._read_crawl_delay(sink, response)
            return response
        if response.status < 300 or response.status == 304:
            target = moved_to(request)
            if target is not None:
                crawl = sink.moved(crawl, target)
                request.meta[META_CRAWL] = crawl
        if response.status == 304:
            await sink.not_modified(
                crawl, **self._validators(response), latency=_latency(request),
                hints=response_hints(response.headers, sink.clock.now()))
            request.meta.update({META_ENTRIES: [], META_VALUES: [],
                                 META_TIME: sink.clock.now()})
            return response
        if response.status >= 300:
            kind, cause = f"http_{response.status}", f"HTTP {response.status}"
            if 300 <= response.status < 400:
                kind, cause = "redirect", f"HTTP {response.status} not followed"
            wait = None
            if response.status in (429, 503):
                wait = retry_after(response.headers, sink.clock.now())
                if wait is not None:
                    cause += f", Retry-After {wait:.0f} s"
            await self._failure(sink, crawl, request, kind, cause, wait)
            return response
        from scrapy_whittle.feeds.parse import FeedError
        from scrapy_whittle.feeds.sitemap import INDEX as SITEMAP_INDEX
        from scrapy_whittle.service.sources.index_children import Listing

        ctype = response.headers.get("Content-Type")
        try:
            parsed = await self.pool.parse(response.body, url=response.url,
                                           now=sink.clock.now(),
                                           content_type=ctype.decode("latin-1") if ctype
                                           else None)
        except FeedError as exc:
            if exc.kind == "not_a_feed" and self._site_page(crawl, response):
                request.meta.update({META_ENTRIES: [], META_VALUES: []})
                return response
            await self._failure(sink, crawl, request, exc.kind, str(exc))
            return response
        for notice in parsed.notices:           # too_many_entries, field_too_long, ...
            sink.stats.inc(f"warnings/{notice}")
        if parsed.warnings:
            sink.feed_warnings(crawl, parsed.warnings)
        if self.config.websub_callback is not None:
            # before the report: in a cluster the hub goes to the planner with the result
            self._discover_hub(sink, crawl, response)
        now = sink.clock.now()                # the entries are told new at this instant
        # a sitemap index: the children it lists no more retire after a while (in a cluster
        # the listing goes to the planner with the fetch's result)
        listing = Listing(tuple(parsed.sources), not parsed.sources_partial) \
            if parsed.kind == SITEMAP_INDEX else None
        found = await sink.feed_fetched(
            crawl, parsed.entries, **self._validators(response), latency=_latency(request),
            hints=response_hints(response.headers, now, parsed.hints), listing=listing)
        request.meta.update({META_ENTRIES: found.entries, META_VALUES: found.values,
                             META_TIME: now})
        self._reported(crawl)
        if parsed.sources:                    # a sitemap index: its children are sources
            request.meta[META_SOURCES] = list(parsed.sources)
            sink.stats.inc("sources/named", len(parsed.sources))
        if found.batch is not None:
            request.meta[META_BATCH] = found.batch
        return response

    @staticmethod
    def _discover_hub(sink: CrawlSink, crawl, response: Response) -> None:
        """The WebSub hub a fetched feed names, told to the subscriptions (a cluster node's
        ``websub`` keeps it for the fetch's result)."""
        from scrapy_whittle.service.sources.websub import discover

        links = [v.decode("latin-1") for v in response.headers.getlist("Link")]
        found = discover(response.url, response.body, links)
        if found is not None:
            sink.websub.discovered(crawl.source, *found, sink.clock.now())

    async def _pushed(self, sink: CrawlSink, request: Request,
                      response: Response) -> None:
        """A WebSub delivery: parsed by the pool like a fetched feed, handed to
        ``RecrawlService.pushed``; its new entries go to the spider like a fetch's."""
        from scrapy_whittle.feeds.parse import FeedError

        push = request.meta[META_PUSH]
        try:
            parsed = await self.pool.parse(response.body, url=response.url,
                                           now=push.received_at,
                                           content_type=push.content_type)
        except FeedError as exc:
            sink.stats.inc(f"errors/push_{exc.kind}")
            logger.info("WebSub delivery for %s unusable: %s", response.url, exc)
            request.meta.update({META_ERROR: f"push_{exc.kind}", META_ENTRIES: [],
                                 META_VALUES: []})
            return
        found = await sink.pushed(push.source, parsed.entries, now=push.received_at)
        request.meta.update({META_ENTRIES: found.entries, META_VALUES: found.values,
                             META_TIME: push.received_at})
        if found.batch is not None:
            request.meta[META_BATCH] = found.batch

    async def process_exception(self, request: Request, exception: BaseException) -> None:
        sink = whittle_sink(self.crawler)
        crawl = request.meta.get(META_CRAWL)
        if sink is not None and crawl is not None:
            await self._failure(sink, crawl, request, exception_kind(exception),
                                describe(exception))
        return None

    async def _failure(self, sink: CrawlSink, crawl, request: Request, kind: str,
                       cause: str, retry_after: float | None = None) -> None:
        await sink.crawl_failed(crawl, kind, cause, retry_after)
        request.meta.update({META_ERROR: kind, META_ENTRIES: [], META_VALUES: []})
        self._reported(crawl)

    def _site_page(self, crawl, response: Response) -> bool:
        """Whether the HTML page a source answered is a site's, searched now
        (:mod:`scrapy_whittle.scrapy.site_search`)."""
        from scrapy_whittle.feeds.parsers.prepare import looks_like_html

        search = site_search_of(self.crawler)
        return search is not None and looks_like_html(response.body) \
            and search.page(crawl, response)

    def _reported(self, crawl) -> None:
        """A feed found on a site may have died with this crawl: its site may be searched
        again."""
        search = site_search_of(self.crawler)
        if search is not None and search.table.sites:
            search.reported(crawl)

    @staticmethod
    def _validators(response: Response) -> dict[str, Any]:
        def header(name: str) -> Any:
            value = response.headers.get(name)
            return value.decode("latin-1") if value else None

        return {"etag": header("ETag"), "last_modified": header("Last-Modified")}

    def _read_crawl_delay(self, sink: CrawlSink, response: Response) -> None:
        """Scrapy obeys robots.txt rules but not ``Crawl-delay``: it paces the host's download
        slot here and enters the cost of the host's sources in the service."""
        from protego import Protego  # a dependency of Scrapy's own robots.txt support

        settings = self.crawler.settings
        agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        try:
            delay = Protego.parse(response.body.decode("utf-8", "replace")).crawl_delay(agent)
        except Exception as exc:  # an unparsable robots.txt only loses the delay
            logger.info("robots.txt at %s: Crawl-delay unreadable (%s)", response.url, exc)
            return
        if not delay:
            return
        host = urlsplit(response.url).hostname or ""
        if not sink.set_crawl_delay(host, float(delay)):
            return
        logger.info("robots.txt of %s asks for Crawl-delay %g s: pacing its slot, cost of its "
                    "sources raised accordingly", host, delay)
        slot = self.crawler.engine.downloader.slots.get(host)
        if slot is not None and slot.delay < delay:
            slot.delay = delay
