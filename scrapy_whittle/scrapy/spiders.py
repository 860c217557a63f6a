"""``FeedSpider``: a ready spider that yields one item per new feed entry.

Sources come from ``WHITTLE_SOURCES`` (or a ``whittle_sources`` class attribute: a list of
URLs or a file name); the scheduler decides when each is fetched, and
``FeedObserverMiddleware`` has already found the new entries, so ``parse`` only formats them.
Subclass it and override ``parse_entry`` to enrich items, or ``start`` to register sources
with ``scrapy.Request(url, meta={"whittle_source": True})``. The child sitemaps a sitemap index
names (``response.meta["whittle_sources"]``) are registered that way by ``parse``.

Item fields: ``source`` (feed URL), ``source_id``, ``entry_id``, ``title``, ``link``,
``published`` (unix seconds, None when the feed gives no usable date), ``discovered_at``
(unix seconds the response arrived), ``delay`` (discovered_at - published, seconds, None
without a date), ``value`` (the entry's value at capture, as counted in ``whittle/utility``).
With ``WHITTLE_ARTICLES`` an entry's item waits for its page and carries its article too:
``text``, ``article_title``, ``authors``, ``article_date``, ``language``, ``canonical_url``,
``repeat``, ``article_error`` (:mod:`scrapy_whittle.scrapy.articles`, docs/articles.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import scrapy

from scrapy_whittle.scrapy.articles import (
    article_item,
    article_request,
    item_from_failure,
    item_from_response,
)
from scrapy_whittle.scrapy.meta import (
    META_BATCH,
    META_ENTRIES,
    META_REGISTER,
    META_SOURCE_ID,
    META_SOURCE_URL,
    META_SOURCES,
    META_TIME,
    META_VALUES,
)

if TYPE_CHECKING:
    from scrapy_whittle.service.config import ArticlesConfig


class FeedSpider(scrapy.Spider):
    name = "feeds"
    #: optional sources of this spider, added to WHITTLE_SOURCES (list of URLs or file name)
    whittle_sources: list[str] | str | None = None

    async def start(self) -> AsyncIterator[Any]:
        # Nothing to start: WhittleScheduler hands out the feeds when the policy says so.
        return
        yield  # pragma: no cover  (makes this an async generator)

    def parse(self, response, **kwargs: Any) -> Iterator[dict[str, Any] | scrapy.Request]:
        meta = response.meta
        entries = meta.get(META_ENTRIES) or []
        values = meta.get(META_VALUES) or [None] * len(entries)
        articles = self._articles()
        for entry, value in zip(entries, values, strict=True):
            item = self.parse_entry(response, entry, value)
            if articles is None:
                yield item
            elif entry.link:
                # the item waits for its page (scrapy_whittle.scrapy.articles)
                yield article_request(item, entry.link, meta.get(META_BATCH), articles,
                                      callback=self.parse_article,
                                      errback=self.article_failed,
                                      source=meta.get(META_SOURCE_ID), value=value)
            else:                       # no page to fetch: the item's fields all the same
                yield article_item(item, ("no_link", "the entry has no link"))
        for url in meta.get(META_SOURCES) or ():     # a sitemap index's children
            yield scrapy.Request(url, meta={META_REGISTER: True})

    def _articles(self) -> ArticlesConfig | None:
        """``WHITTLE_ARTICLES``' settings when on, else None."""
        crawler = getattr(self, "crawler", None)
        if crawler is None:
            return None
        from scrapy_whittle.scrapy.startup import crawl_start

        config = crawl_start(crawler).config.articles
        return config if config.enabled else None

    def parse_article(self, response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """The item of an entry whose page was fetched: its fields and the article's."""
        yield item_from_response(self.crawler, response)

    def article_failed(self, failure) -> Iterator[dict[str, Any]]:
        """The item of an entry whose page could not be fetched: without its article."""
        item = item_from_failure(self.crawler, failure)
        if item is not None:
            yield item

    def parse_entry(self, response, entry, value: float | None) -> dict[str, Any]:
        meta = response.meta
        discovered = meta.get(META_TIME)
        published = entry.published
        return {
            "source": meta.get(META_SOURCE_URL, response.url),
            "source_id": meta.get(META_SOURCE_ID),
            "entry_id": entry.key,
            "title": entry.title,
            "link": entry.link,
            "published": published,
            "discovered_at": discovered,
            "delay": (discovered - published if published is not None and discovered
                      else None),
            "value": value,
        }
