"""``scrapy whittle discover URL... -o feeds.opml``: the feeds of sites, written as OPML.

Each address is fetched through Scrapy (the project's settings: middlewares, robots.txt,
retries, proxies, delays) and told apart by what it serves, as a crawl does
(:mod:`scrapy_whittle.scrapy.site_search`): an address that serves a feed is that feed; one that
serves an HTML page is a site, searched for its feeds the same way a crawl searches it. The
OPML lists every feed found once, in the order of the addresses given, each with the site it
came from as ``htmlUrl``: a ``WHITTLE_SOURCES`` as it is, or a feed reader's import.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any
from xml.sax.saxutils import quoteattr

import scrapy

from scrapy_whittle.feeds.finder import FoundFeed, serves_feed
from scrapy_whittle.feeds.parsers.prepare import looks_like_html
from scrapy_whittle.scrapy.site_search import Search

logger = logging.getLogger(__name__)

#: the largest answer read (a feed, a page): the crawl's default WHITTLE_MAX_FEED_SIZE
MAX_BYTES = 10 * 1024 * 1024


class SiteSearchSpider(scrapy.Spider):
    """Fetches ``addresses`` and fills ``found``: address -> the feeds found there (an empty
    list: none; a feed's own address: itself)."""

    name = "whittle-discover"

    def __init__(self, addresses: list[str], found: dict[str, list[FoundFeed]],
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.addresses = list(addresses)
        self.found = found

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for address in self.addresses:
            self.found[address] = []
            yield scrapy.Request(address, callback=self.answered, errback=self.failed,
                                 dont_filter=True, cb_kwargs={"address": address},
                                 meta={"download_maxsize": MAX_BYTES})

    def answered(self, response, address: str) -> None:
        ctype = response.headers.get("Content-Type")
        if serves_feed(response.body, response.url, ctype.decode("latin-1") if ctype else None,
                       now=time.time(), max_bytes=MAX_BYTES):
            self.found[address] = [FoundFeed(response.url)]
            return
        if not looks_like_html(response.body):
            logger.warning("%s serves neither a feed nor a page", address)
            return
        Search(address, self.crawler.engine.crawl, self._searched, now=time.time,
               max_bytes=MAX_BYTES).start(response)

    def _searched(self, search: Search) -> None:
        self.found[search.site] = list(search.found)

    def failed(self, failure) -> None:
        logger.warning("%s cannot be fetched: %s", failure.request.url, failure.value)


def opml(found: dict[str, list[FoundFeed]]) -> bytes:
    """The feeds found, once each, in the order of their sites, as OPML 2.0."""
    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             '<opml version="2.0"><head><title>Feeds found by scrapy whittle discover</title>'
             "</head><body>"]
    seen: set[str] = set()
    for site, feeds in found.items():
        for feed in feeds:
            if feed.url in seen:
                continue
            seen.add(feed.url)
            title = feed.title or feed.url
            lines.append(f'<outline type="rss" text={quoteattr(title)} '
                         f"title={quoteattr(title)} xmlUrl={quoteattr(feed.url)} "
                         f"htmlUrl={quoteattr(site)}/>")
    lines.append("</body></opml>")
    return "\n".join(lines).encode()


def discover(settings, addresses: list[str]) -> dict[str, list[FoundFeed]]:
    """Run the search of ``addresses`` under the project's ``settings`` (without the
    re-crawl's scheduler and middlewares, which need a crawl's settings)."""
    from scrapy.crawler import CrawlerProcess

    settings = settings.copy()
    for name in ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES"):
        kept = {k: v for k, v in settings.getdict(name).items()
                if not str(getattr(k, "__module__", k)).startswith("scrapy_whittle")}
        settings.set(name, kept, priority="cmdline")
    settings.set("ADDONS", {}, priority="cmdline")
    settings.set("SCHEDULER", "scrapy.core.scheduler.Scheduler", priority="cmdline")
    settings.set("JOBDIR", None, priority="cmdline")
    found: dict[str, list[FoundFeed]] = {}
    process = CrawlerProcess(settings)
    process.crawl(SiteSearchSpider, addresses=addresses, found=found)
    process.start()
    return found


def summary(found: dict[str, list[FoundFeed]]) -> str:
    out = []
    for site, feeds in found.items():
        out.append(f"{site}: {len(feeds)} feed{'s' if len(feeds) != 1 else ''}")
        out += [f"  {f.url}" for f in feeds]
    return "\n".join(out) + "\n"
