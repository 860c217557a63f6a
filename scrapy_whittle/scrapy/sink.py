"""The crawl's sink and site search, published on its crawler by ``WhittleScheduler`` when it is
built: the middlewares, spider helpers and extensions find them here, whatever the mode of
the crawl (one process or a cluster's), without reaching into the engine.

* :func:`whittle_sink`: the :class:`~scrapy_whittle.service.sink.CrawlSink` the crawl's fetches
  are reported to (None: no ``WhittleScheduler`` was built for this crawler);
* :func:`whittle_service`: the :class:`~scrapy_whittle.service.recrawl.RecrawlService` behind
  the sink of a crawl in one process (its epochs' origin, configuration, policy, sources), None
  in a cluster's process;
* :func:`site_search_of`: its :class:`~scrapy_whittle.scrapy.site_search.SiteSearch`, or None
  (``WHITTLE_SITE_SEARCH`` off, a cluster crawl).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, NamedTuple

from scrapy_whittle.service.sink import LocalSink

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_whittle.scrapy.site_search import SiteSearch
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sink import CrawlSink


class Published(NamedTuple):
    sink: CrawlSink
    site_search: SiteSearch | None


# weak: the crawler owns what it published, and goes with it
_published: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def publish(crawler: Crawler, sink: CrawlSink, site_search: SiteSearch | None = None) -> None:
    """``crawler``'s crawl reports to ``sink`` (a scheduler built again for the same crawler
    replaces what the previous one published)."""
    _published[crawler] = Published(sink, site_search)


def whittle_sink(crawler: Crawler | None) -> CrawlSink | None:
    """What ``crawler``'s crawl hands out crawls from and reports fetches to: a local
    service's :class:`~scrapy_whittle.service.sink.LocalSink`, or a cluster process's node.
    None without a ``WhittleScheduler``."""
    found = _published.get(crawler) if crawler is not None else None
    return found.sink if found is not None else None


def whittle_service(crawler: Crawler | None) -> RecrawlService | None:
    """The re-crawl service of ``crawler``'s crawl when it runs in this process (what a
    spider or an extension may read of it: ``origin``, ``config``, ``policy``, ``sources``...);
    None in a cluster's process (its planner's service may run in another) or without a
    ``WhittleScheduler``."""
    sink = whittle_sink(crawler)
    return sink.service if isinstance(sink, LocalSink) else None


def site_search_of(crawler: Crawler | None) -> SiteSearch | None:
    """The site search of ``crawler``'s crawl (:mod:`scrapy_whittle.scrapy.site_search`), or
    None (``WHITTLE_SITE_SEARCH`` off, a cluster crawl, no ``WhittleScheduler``)."""
    found = _published.get(crawler) if crawler is not None else None
    return found.site_search if found is not None else None
