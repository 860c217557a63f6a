"""The source list (``WHITTLE_SOURCES``) read again while the crawl runs, and from a URL.

A list at an http(s) URL (OPML, JSON or text, told apart by its content type and content) is
fetched **through Scrapy** like any other request: the project's middlewares, robots.txt,
retries, proxies and download slots apply, and it is counted in Scrapy's stats. It is
fetched when the crawl starts (the crawl waits for it; the sources a JOBDIR already holds
keep being crawled meanwhile) and every ``WHITTLE_SOURCES_REFRESH`` seconds if set; a file
list is read again on the same interval (in a thread: a million lines take seconds).

Each read is handed to :meth:`SourceRoster.sync_sources`: new sources join, sources of
the previous list that are missing leave (not crawled, their learned state kept should they
return). A read that fails (HTTP error, unreadable document) or finds **no** source at all
changes nothing: an empty list is far more often a broken export or a login page than a wish
to stop crawling everything. The failure is logged once at ERROR with its cause (again at
INFO) and counted under ``whittle/errors/sources_list``.

In a cluster the list is the planner's: the process whose node holds the planner's lock reads
it (through its own Scrapy, as above) into the planner's service, at once when it takes over
and then every ``WHITTLE_SOURCES_REFRESH`` seconds; the workers get the sources' crawls through
Redis. ``target`` gives the service a read goes to: None while this process does not plan (a
read that ends after the lock was lost is dropped; the next planner reads the list again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy import Request
from twisted.internet.threads import deferToThread

from scrapy_whittle.scrapy.meta import META_LIST
from scrapy_whittle.scrapy.startup import skipped_message
from scrapy_whittle.service.sources.registry import SourceListError, load_sources, parse_source_list

if TYPE_CHECKING:
    from scrapy.http import Response

    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sources.registry import SourceSpec

logger = logging.getLogger(__name__)



class SourceListReader:
    """Reads ``config.sources`` (a URL or a file) for the service ``target()`` gives;
    ``extra``: sources that belong to the list too (the spider's ``whittle_sources``);
    ``stats``: where failures are counted; ``expand``: what puts the sites searched before in
    their feeds' place (:meth:`scrapy_whittle.scrapy.site_search.SiteSearch.expand`)."""

    def __init__(self, target: Callable[[], RecrawlService | None], value: Any,
                 extra: list[SourceSpec], url: str | None, stats, on_change=None,
                 expand: Callable[[list[SourceSpec]], list[SourceSpec]] | None = None
                 ) -> None:
        self.target = target
        self.expand = expand           # the sites searched before in their feeds' place
        self.stats = stats
        self.on_change = on_change
        self.value = value
        self.extra = list(extra)
        self.url = url
        self.pending = False           # a fetch of the URL is under way
        self.reads = 0
        self._failed_before = False

    # -- the URL, through Scrapy -------------------------------------------------------------
    def request(self) -> Request:
        self.pending = True
        return Request(self.url, callback=self._loaded, errback=self._fetch_failed,
                       dont_filter=True, priority=1000,
                       meta={META_LIST: True, "handle_httpstatus_all": True})

    def _loaded(self, response: Response) -> list:
        self.pending = False
        if response.status != 200:           # handle_httpstatus_all: the status is ours to read
            self._failed(f"HTTP {response.status}")
            return []
        ctype = response.headers.get("Content-Type")
        try:
            specs = parse_source_list(response.body, response.url,
                                      content_type=ctype.decode("latin-1") if ctype else None,
                                      url=response.url)
        except SourceListError as exc:
            self._failed(str(exc))
            return []
        self.apply(specs)
        return []

    def _fetch_failed(self, failure) -> None:
        self.pending = False
        self._failed(f"{failure.type.__name__}: {failure.value}")

    # -- a file, in a thread -----------------------------------------------------------------
    def read_file(self):
        """A Deferred that reads the file again and applies it."""
        d = deferToThread(load_sources, self.value)
        d.addCallbacks(self.apply, lambda f: self._failed(str(f.value)))
        return d

    # -- both ----------------------------------------------------------------------------------
    def apply(self, specs: list[SourceSpec]) -> None:
        self.reads += 1
        service = self.target()
        if service is None:            # the cluster's planner is another process now
            return
        skipped = getattr(specs, "skipped", [])
        self.stats.set("sources/skipped", len(skipped))   # those of the latest read
        if skipped:
            logger.warning("source list %s: %s", self.url or self.value,
                           skipped_message(specs))
        if not specs:
            self._failed("the list has no source (the known sources are kept)")
            return
        listed = list(specs) + self.extra
        if self.expand is not None:
            listed = self.expand(listed)
        joined, left = service.roster.sync_sources(listed)
        self._failed_before = False
        if (joined or left) and self.on_change is not None:
            self.on_change()
        if joined or left:
            logger.info("source list %s: %d sources joined, %d left (%d in all)",
                        self.url or self.value, joined, left,
                        len(service.sources) - service.sources.n_left)

    def _failed(self, cause: str) -> None:
        self.stats.inc("errors/sources_list")
        level = logging.INFO if self._failed_before else logging.ERROR
        self._failed_before = True
        service = self.target()
        known = len(service.sources) - service.sources.n_left if service is not None else 0
        logger.log(level, "source list %s cannot be used: %s; the crawl goes on with the %d "
                   "sources it knows", self.url or self.value, cause, known)
