"""Site search: a source list may name a site's address; the crawl finds the site's feeds.

**Site or feed** is told by what the address serves, never by how it is spelt: every address
of ``WHITTLE_SOURCES`` is fetched as a source; when a source that never gave a feed answers
an HTML page (its first answer, as a rule: the feed parser reads no RSS, Atom, JSON Feed or
sitemap in it, and it starts like HTML, whatever its Content-Type says), the address is a
site's, and it is searched (with ``WHITTLE_SITE_SEARCH``, on by default):

1. its page's ``<link rel="alternate">`` feeds and its response's ``Link`` headers
   (:mod:`scrapy_whittle.feeds.finder`, comments feeds left out);
2. its robots.txt's ``Sitemap:`` lines, each fetched and taken if it serves a news sitemap
   or a feed (most list the site's archive);
3. when the page and headers name no feed, the well-known feed paths, one after another until
   one serves a feed; when robots.txt gave no news sitemap, the usual news-sitemap paths, the
   same way. A guess counts only if its answer reads as a feed (sites answer unknown paths with
   their home page).

Every fetch goes through Scrapy (the project's middlewares, robots.txt, retries, download
slots); but for the page (the source's own crawl), as a request of the crawl's own: served
first, outside the budget. The feeds found
join the crawl as sources, each on its own (a site's sections stay separate sources; a story
two of them list is counted once, as any story two feeds list), on the source list in the
site's place; the site's address leaves the crawl. What was found is kept
(:mod:`scrapy_whittle.service.sources.site_table`, ``JOBDIR/whittle-sites.sqlite``): a restart, or
the list read again, puts the feeds in the site's place without fetching it.

A site is **searched again** when all its feeds have died (retired, or merged into another
source), at most once per ``WHITTLE_RETIRE_PROBE`` seconds: a redesign moves the feeds; the
feeds it names now join, those it names no more leave. A feed that moves with a permanent
redirect keeps its place without a search (:meth:`RecrawlService.moved`).

A site without feeds is named in one WARNING line; its address leaves the crawl, kept as a
site without feeds, and is searched again once ``WHITTLE_RETIRE_PROBE`` seconds have
passed, when the list is read again or the crawl starts again. Stats:
``whittle/site_search/sites`` (sites searched), ``.../feeds_found``,
``.../sites_without_feeds``, ``.../searched_again``, ``.../requests`` and ``.../errors``
(the search's fetches that failed: the search goes on without them).

A cluster crawl does not search sites: there a page at a source is the error
``not_a_feed``, as without this setting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urljoin

from scrapy import Request
from scrapy.spidermiddlewares.httperror import HttpError

from scrapy_whittle.feeds.finder import (
    FEED_PATHS,
    SITEMAP_PATHS,
    FoundFeed,
    header_feeds,
    is_news_sitemap,
    is_sitemap,
    page_feeds,
    robots_sitemaps,
    serves_feed,
    well_known_urls,
)
from scrapy_whittle.scrapy.meta import META_OUTSIDE, META_SEARCH
from scrapy_whittle.service.sources.registry import SourceSpec

if TYPE_CHECKING:
    from scrapy.http import Response

    from scrapy_whittle.service.recrawl import Crawl, RecrawlService
    from scrapy_whittle.service.sources.site_table import SiteTable
    from scrapy_whittle.service.types import Stats

logger = logging.getLogger(__name__)



def _header_values(response: Response, name: str) -> list[str]:
    return [v.decode("latin-1") for v in response.headers.getlist(name)]


class Search:
    """The search of one site, from its page's answer to its list of feeds.

    ``site`` is the site's address as listed (what the search is kept under); the page's URL
    after redirects (``base``) is where robots.txt and the usual paths are looked for.
    ``send`` hands a request to Scrapy; ``done(search)`` is called once, when every step has
    answered (or failed); ``found`` then holds the feeds, page's and headers' first, then the
    sitemaps, then what a guess found. ``now()`` and ``max_bytes`` are for reading a guess's
    answer as a feed; ``on_error(cause)`` hears each fetch that failed."""

    def __init__(self, site: str, send: Callable[[Request], object],
                 done: Callable[[Search], object], *, now: Callable[[], float],
                 max_bytes: int, on_error: Callable[[str], object] | None = None) -> None:
        self.site = site
        self.base = site
        self.send = send
        self.done = done
        self.now = now
        self.max_bytes = max_bytes
        self.on_error = on_error
        self.found: list[FoundFeed] = []
        self._named = False              # the page or its headers named a feed
        self._sitemaps = False           # a news sitemap was found
        self._planned = False            # the usual paths are planned (or not needed)
        #: the addresses to try in turn: (URL, "robots" (a Sitemap line), "feed" | "sitemap"
        #: (a usual path of a feed, of a news sitemap))
        self._guesses: list[tuple[str, str]] = []
        self.requests = 0

    # -- the steps ----------------------------------------------------------------------------
    def start(self, response: Response) -> None:
        """The site's page answered ``response``: read it, then ask for robots.txt."""
        self.base = response.url
        self.found = page_feeds(response.body, response.url)
        seen = {f.url for f in self.found}
        self.found += [f for f in header_feeds(_header_values(response, "Link"), response.url)
                       if f.url not in seen]
        self._named = bool(self.found)
        self._request(urljoin(self.base, "/robots.txt"), self._robots)

    def _robots(self, response: Response) -> None:
        seen = {f.url for f in self.found}
        text = response.body.decode("utf-8", "replace")
        self._guesses = [(f.url, "robots") for f in robots_sitemaps(text, self.base)
                         if f.url not in seen]
        self._next_guess()

    def _robots_failed(self, cause: str) -> None:
        self._next_guess()

    def _next_guess(self) -> None:
        if not self._guesses and not self._planned:     # robots.txt's sitemaps are read
            self._planned = True
            if not self._named:
                self._guesses += [(u, "feed") for u in well_known_urls(self.base, FEED_PATHS)]
            if not self._sitemaps:
                self._guesses += [(u, "sitemap")
                                  for u in well_known_urls(self.base, SITEMAP_PATHS)]
        if not self._guesses:
            self.done(self)
            return
        url, _ = self._guesses[0]
        self._request(url, self._guessed)

    def _guessed(self, response: Response) -> None:
        _, kind = self._guesses.pop(0)
        if self._serves(response, kind):
            if response.url not in {f.url for f in self.found}:
                self.found.append(FoundFeed(response.url))
            self._sitemaps = self._sitemaps or kind != "feed"
            if kind != "robots":
                # the first guess that serves is enough: the others are often the same feed
                # in another format
                self._guesses = [g for g in self._guesses if g[1] != kind]
        self._next_guess()

    def _serves(self, response: Response, kind: str) -> bool:
        """Whether a Sitemap line or a guess serves what it should: a news sitemap (a site's
        other sitemaps list its archive, not its news), or a feed (the sitemap protocol
        allows RSS and Atom as sitemaps), but for a news sitemap's guess."""
        ctype = response.headers.get("Content-Type")
        if not serves_feed(response.body, response.url,
                           ctype.decode("latin-1") if ctype else None, now=self.now(),
                           max_bytes=self.max_bytes):
            return False
        if is_sitemap(response.body):
            return is_news_sitemap(response.body, response.url)
        return kind != "sitemap"

    def _guess_failed(self, cause: str) -> None:
        self._guesses.pop(0)
        self._next_guess()

    # -- requests ---------------------------------------------------------------------------
    def _request(self, url: str, callback: Callable[[Response], None]) -> None:
        failed = self._robots_failed if callback == self._robots else self._guess_failed

        def answered(response: Response) -> list:
            callback(response)
            return []

        def errback(failure) -> None:
            cause = f"{url}: {failure.type.__name__}: {failure.value}"
            # an HTTP error is an answer (a guess's 404, no robots.txt); others failed
            if self.on_error is not None and not failure.check(HttpError):
                self.on_error(cause)
            failed(cause)

        self.requests += 1
        self.send(Request(url, callback=answered, errback=errback, dont_filter=True,
                          meta={META_SEARCH: self.site, META_OUTSIDE: True,
                                "download_maxsize": self.max_bytes, "download_warnsize": 0}))


class SiteSearch:
    """The sites of one crawl: which source is a site (:meth:`page`), its search, its feeds
    joining the crawl in its place, the search again when they all died
    (:meth:`reported`). ``send`` hands a request to Scrapy; ``again_after``: the seconds
    before a site may be searched again."""

    def __init__(self, service: RecrawlService, table: SiteTable,
                 send: Callable[[Request], object], *, stats: Stats, max_bytes: int,
                 again_after: float) -> None:
        self.service = service
        self.table = table
        self.send = send
        self.stats = stats
        self.max_bytes = max_bytes
        self.again_after = again_after
        #: site -> (its search, None while its page is asked for again; whether listed)
        self.searching: dict[str, tuple[Search | None, bool]] = {}

    def expand(self, specs: list[SourceSpec]) -> list[SourceSpec]:
        """A source list with each site searched before in its feeds' place (a site found
        without feeds: left out until it is due to be searched again), and without the sites
        under a first search (a list read meanwhile does not bring them back)."""
        if self.searching:
            first = self.searching.keys() - self.table.sites.keys()
            specs = [s for s in specs if s.url not in first]
        return self.table.expand(specs, self.service.clock.now() - self.again_after)

    def page(self, crawl: Crawl, response: Response) -> bool:
        """The source of ``crawl`` answered an HTML page: True when it is a site, searched now
        (its fetch is then reported); False when it is a feed that serves a page (a feed a
        site named, or one that gave a feed before), a failure for the caller to report."""
        if self.table.site_of(crawl.url) is not None:
            return False
        listed = self.service.roster.site_page(crawl)
        if listed is None:
            return False
        # kept under the address the list names, where a redirect may have led elsewhere
        site = self.service.sources.registry.registered_url(crawl.source)
        if site not in self.searching:         # not a second search of a list read again
            self.stats.inc("site_search/sites")
            self._search(site, response, listed)
        return True

    def _search(self, site: str, response: Response, listed: bool) -> None:
        search = Search(site, self._send, self._finished, now=self.service.clock.now,
                        max_bytes=self.max_bytes, on_error=self._failed_fetch)
        self.searching[site] = (search, listed)
        search.start(response)

    def _send(self, request: Request) -> None:
        self.stats.inc("site_search/requests")
        self.send(request)

    def _failed_fetch(self, cause: str) -> None:
        self.stats.inc("site_search/errors")
        logger.debug("site search: %s", cause)

    def _finished(self, search: Search) -> None:
        site = search.site
        _, listed = self.searching.pop(site)
        feeds = search.found
        if not feeds:
            self.stats.inc("site_search/sites_without_feeds")
            before = self.table.get(site)
            kept = list(before.feeds) if before is not None else []
            # its dead feeds stay, probed; either way not searched again before its time
            self.table.record(site, kept, self.service.clock.now())
            self.service.roster.site_feeds([], [site], listed=listed)
            logger.warning("site search: %s names no feed (no <link rel=\"alternate\"> feed, no "
                           "Link header, no Sitemap in robots.txt, none at the %d usual paths)"
                           "%s; searched again in %g s at the earliest", site,
                           len(FEED_PATHS) + len(SITEMAP_PATHS),
                           "; its feeds found before are kept" if kept else "", self.again_after)
            return
        dropped = self.table.record(site, feeds, self.service.clock.now())
        self.service.roster.site_feeds([SourceSpec(url=f.url, title=f.title) for f in feeds],
                                [*dropped, site], listed=listed)
        self.stats.inc("site_search/feeds_found", len(feeds))
        logger.info("site search: %s names %d feeds: %s%s", site, len(feeds),
                    ", ".join(f.url for f in feeds[:5]), ", ..." if len(feeds) > 5 else "")

    # -- searched again ---------------------------------------------------------------------
    def reported(self, crawl: Crawl) -> None:
        """A crawl of a source was reported: when it is a feed found on a site and all that
        site's feeds are dead now, the site is searched again (at most once per
        ``again_after`` seconds)."""
        site = self.table.site_of(crawl.url)
        if site is None or site in self.searching:
            return
        record = self.table.get(site)
        now = self.service.clock.now()
        if now - record.searched_at < self.again_after:
            return
        dead, listed = self.service.roster.sources_dead([f.url for f in record.feeds])
        if not dead:
            return
        self.stats.inc("site_search/searched_again")
        logger.info("site search: every feed of %s is dead: searching it again", site)
        # the page's request: its answer starts the search
        self.searching[site] = (None, listed)

        def answered(response: Response) -> list:
            self._search(site, response, listed)
            return []

        def errback(failure) -> None:
            self._failed_fetch(f"{site}: {failure.type.__name__}: {failure.value}")
            self.searching.pop(site, None)
            self.table.record(site, list(record.feeds), now)   # not again before its time

        self._send(Request(site, callback=answered, errback=errback, dont_filter=True,
                           meta={META_SEARCH: site, META_OUTSIDE: True,
                                 "download_maxsize": self.max_bytes,
                                 "download_warnsize": 0}))
