"""At-least-once items: which feed responses' items have passed the item pipelines, the
replay of what a killed crawl had not delivered, and the feed exports flushed at checkpoints.

The service journals every fetch's new entries before the spider sees them
(:mod:`scrapy_whittle.service.state.deliveries`); this module tells it when they are delivered.
``DeliveryMiddleware`` (a spider middleware, installed by the add-on at order
:data:`ORDER`, outside Scrapy's own so that it sees what reaches the pipelines) counts the
items a feed response's callback yields; Scrapy's ``item_scraped``, ``item_dropped`` and
``item_error`` signals count them through. When the callback is done and every item it made
is through, the response's batch is delivered. (An item that fails in a pipeline has been
handed to it: Scrapy logs the error; handing it out again after a restart would fail again.
Items a callback makes from a follow-up request are that request's and are not tracked, but
for an article request (``WHITTLE_ARTICLES``: :mod:`scrapy_whittle.scrapy.articles`): it
counts as an item of the batch to come, and the batch waits for the item its page makes.)

After a restart the scheduler hands out a *replay* request per undelivered batch
(:func:`replay_request`): ``FeedObserverMiddleware`` answers it without downloading anything,
with the batch's entries in ``response.meta`` as at the original fetch, so the spider's
callback makes the same items again.

Scrapy's feed exports (``-o`` / ``FEEDS``) write through a file buffer: an item counted as
scraped may sit in it when the process dies. :func:`flush_feed_exports` runs before every
checkpoint so that what the checkpoint counts as delivered is in the files.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from itemadapter import is_item
from scrapy import Request, signals
from scrapy.http import Response

from scrapy_whittle.scrapy.articles import promises_item
from scrapy_whittle.scrapy.meta import (
    META_ARTICLE_OF,
    META_BATCH,
    META_ENTRIES,
    META_REPLAY,
    META_SOURCE_ID,
    META_SOURCE_URL,
    META_TIME,
    META_VALUES,
)
from scrapy_whittle.scrapy.sink import whittle_sink

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_whittle.service.state.deliveries import Batch

logger = logging.getLogger(__name__)

#: the order of ``DeliveryMiddleware`` in ``SPIDER_MIDDLEWARES``: below every built-in one
#: (StartSpiderMiddleware is 25), so it sees the callback's output after every other
#: middleware has filtered it, as it goes to the pipelines
ORDER = 10



class DeliveryMiddleware:
    """See the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        # batch -> [items yielded, items through the pipelines, callback done]
        self.open: dict[int, list] = {}
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(self._through, signal=signal)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DeliveryMiddleware:
        return cls(crawler)

    def process_spider_output(self, response: Response, result: Iterable[Any]
                              ) -> Iterator[Any]:
        batch = response.meta.get(META_BATCH)
        if batch is None:
            yield from result
            return
        count = self.open.setdefault(batch, [0, 0, False])
        try:
            for x in result:
                if is_item(x) or promises_item(x, batch):
                    count[0] += 1
                yield x
        finally:
            self._callback_done(batch, count)

    async def process_spider_output_async(self, response: Response,
                                          result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        batch = response.meta.get(META_BATCH)
        if batch is None:
            async for x in result:
                yield x
            return
        count = self.open.setdefault(batch, [0, 0, False])
        try:
            async for x in result:
                if is_item(x) or promises_item(x, batch):
                    count[0] += 1
                yield x
        finally:
            self._callback_done(batch, count)

    def _callback_done(self, batch: int, count: list) -> None:
        count[2] = True
        self._settle(batch, count)

    def _through(self, item: Any = None, response: Response | None = None, **_: Any) -> None:
        # an article's item: its response's, or the failure's request's (an errback's)
        meta = response.meta if isinstance(response, Response) else getattr(
            getattr(response, "request", None), "meta", None) or {}
        batch = meta.get(META_BATCH, meta.get(META_ARTICLE_OF))
        count = self.open.get(batch) if batch is not None else None
        if count is not None:
            count[1] += 1
            self._settle(batch, count)

    def _settle(self, batch: int, count: list) -> None:
        if count[2] and count[1] >= count[0]:
            del self.open[batch]
            sink = whittle_sink(self.crawler)      # the re-crawl service, or a cluster's node
            if sink is not None:
                sink.delivered(batch)


def replay_request(batch: Batch) -> Request:
    """The request that hands ``batch`` to the spider again (answered by
    ``FeedObserverMiddleware`` without a download; robots.txt was obeyed by the fetch that
    found the entries)."""
    return Request(batch.url, dont_filter=True, meta={
        META_REPLAY: batch, META_SOURCE_ID: batch.source,
        META_SOURCE_URL: batch.url, "dont_obey_robotstxt": True, "dont_cache": True})


def replay_response(request: Request) -> Response:
    """The response of a replay request: the batch's entries as the fetch found them."""
    batch: Batch = request.meta[META_REPLAY]
    request.meta.update({META_ENTRIES: batch.entries, META_VALUES: batch.values,
                         META_TIME: batch.found_at, META_BATCH: batch.id})
    return Response(batch.url, status=200, request=request, flags=["whittle-replay"])


def flush_feed_exports(crawler: Crawler | None) -> None:
    """Push what Scrapy's feed exports have buffered into their files (local files; a remote
    storage uploads its file at the end of the crawl and cannot be flushed before)."""
    from scrapy.extensions.feedexport import FeedExporter

    try:
        extensions = getattr(crawler, "extensions", None)
    except RuntimeError:          # a crawler not started (Scrapy's own way to test a scheduler)
        return
    for ext in getattr(extensions, "middlewares", ()):
        if not isinstance(ext, FeedExporter):
            continue
        for slot in ext.slots:
            file = getattr(slot, "file", None)
            if file is None or getattr(file, "closed", False):
                continue
            try:
                file.flush()
            except (OSError, ValueError) as exc:     # a closed or failing file
                logger.warning("feed export %s could not be flushed: %s",
                               getattr(slot, "uri", "?"), exc)
