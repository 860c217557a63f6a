"""Full articles (``WHITTLE_ARTICLES``): each new entry's page fetched through Scrapy, its
article extracted into the entry's item. See docs/articles.md.

The pieces, each where its kind of work is done:

* ``FeedSpider.parse`` yields, for an entry with a link, an *article request*
  (:func:`article_request`) in place of its item: the item rides in its meta
  (:data:`META_ARTICLE`), with the delivery batch it belongs to (:data:`META_ARTICLE_OF`).
  ``DeliveryMiddleware`` counts the request as an item of the batch still to come, so the
  batch, journaled before the feed's response reached the spider, is delivered only once
  the article's item has passed the pipelines: a crawl killed while articles are in flight
  hands the entries out again at its restart, and their articles are fetched again.
* ``WhittleScheduler`` keeps article requests in an :class:`ArticleQueue` and hands one
  out when no feed is due, its host's download slot has room and its host's allowance has
  a request left after the host's feeds (``RecrawlService.admit_article``): feeds and
  articles of one host share its allowance and its download slot (delay, concurrency,
  robots.txt ``Crawl-delay``), and ``WHITTLE_BUDGET`` is spent on feeds only. Scrapy's
  downloader does the rest: robots.txt, retries, redirects, size limits.
* ``FeedObserverMiddleware`` extracts the page (:func:`extract_response`) in the parse
  pool's worker processes and leaves the :class:`~scrapy_whittle.feeds.article.Article`,
  or the failure's kind, in the response's meta (:data:`META_RESULT`).
  The re-crawl service judges whether the article repeats a story known, by its canonical
  URL or its text (``RecrawlService.article_seen``,
  :mod:`~scrapy_whittle.service.memory.article_stories`).
* ``FeedSpider.parse_article`` / ``article_failed`` make the item (:func:`article_item`):
  the entry's fields and ``text``, ``article_title``, ``authors``, ``article_date``,
  ``language``, ``canonical_url``, ``repeat`` (None, ``"canonical"`` or
  ``"near_duplicate"``) and ``article_error`` (None, or why the item has no text). A page
  that cannot be fetched or extracted still yields its item; the failure is counted
  (``whittle/articles/failed/<kind>``) and logged once per kind. So does an article whose
  host has no allowance left when the crawl's last epoch (``WHITTLE_MAX_EPOCHS``) has ended:
  it is not sent beyond the allowance, its item goes without text (``crawl_ended``); and so
  does the oldest of the busiest host's when more than :data:`MAX_WAITING` wait
  (``too_many_waiting``: the feeds bring entries faster than the hosts let pages go).
"""

from __future__ import annotations

import logging
import math
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request

from scrapy_whittle.scrapy.meta import (
    META_ARTICLE,
    META_ARTICLE_OF,
    META_ENTRY,
    META_REPEAT,
    META_RESULT,
    META_UNSENT,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_whittle.feeds.article import Article
    from scrapy_whittle.feeds.parse_pool import ParsePool
    from scrapy_whittle.service.config import ArticlesConfig
    from scrapy_whittle.service.sink import CrawlSink

logger = logging.getLogger(__name__)


#: the item fields an article adds, and their value for an item without an article
ARTICLE_FIELDS = {"text": None, "article_title": None, "authors": [], "article_date": None,
                  "language": None, "canonical_url": None, "repeat": None,
                  "article_error": None}

_HTML = ("text/html", "application/xhtml+xml")


def article_request(item: dict[str, Any], link: str, batch: int | None,
                    config: ArticlesConfig, *, callback: Callable, errback: Callable,
                    source: int | None = None, value: float | None = None) -> Request:
    """The request of the article behind ``item``'s entry (``link``), found in source
    ``source`` worth ``value``. Never filtered as a duplicate (each promises one item to
    its batch); Scrapy's ``download_maxsize`` at ``WHITTLE_ARTICLE_MAX_SIZE``."""
    meta = {META_ARTICLE: item, META_ENTRY: (source, value),
            "download_maxsize": config.max_size, "download_warnsize": 0}
    if batch is not None:
        meta[META_ARTICLE_OF] = batch
    return Request(link, callback=callback, errback=errback, dont_filter=True, meta=meta)


def promises_item(x: Any, batch: int) -> bool:
    """Whether ``x``, out of a feed response's callback, is an article request whose item
    belongs to ``batch``."""
    return isinstance(x, Request) and x.meta.get(META_ARTICLE_OF) == batch


# -- extraction (in FeedObserverMiddleware) ------------------------------------------------------
async def extract_response(pool: ParsePool, request: Request, response: Response,
                           service: CrawlSink | None = None) -> None:
    """Extract an article response's page into ``request.meta[META_RESULT]``: the Article,
    or ``(kind, cause)`` of why there is none. Only a 200 is read: another status reaches
    the spider's errback through Scrapy's HttpErrorMiddleware. ``service`` (the re-crawl
    service) judges whether the article repeats a story known (``article_seen``: its
    canonical URL, its text), left in ``request.meta[META_REPEAT]``."""
    from scrapy_whittle.feeds.article import ArticleError
    from scrapy_whittle.feeds.parse import FeedError

    if response.status != 200 or META_RESULT in request.meta:    # (unsent_response's)
        return
    ctype = (response.headers.get("Content-Type") or b"").decode("latin-1").lower()
    if ctype and ctype.split(";")[0].strip() not in _HTML:
        request.meta[META_RESULT] = ("not_html", f"Content-Type {ctype.split(';')[0]}")
        return
    language = response.headers.get("Content-Language")
    try:
        article = await pool.extract(
            response.body, url=response.url,
            content_language=language.decode("latin-1") if language else None,
            content_type=ctype or None)
    except (ArticleError, FeedError) as exc:
        request.meta[META_RESULT] = (exc.kind, str(exc))
        return
    request.meta[META_RESULT] = article
    source, value = request.meta.get(META_ENTRY, (None, None))
    if service is not None and source is not None:
        request.meta[META_REPEAT] = service.article_seen(source, article.canonical,
                                                         article.fingerprint, value)


# -- items (in FeedSpider) ------------------------------------------------------------------------
class ArticleFailures:
    """Counts article failures in the crawl's stats and logs each kind once (then at debug
    level): a site whose pages all fail must not flood the log."""

    _of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, crawler: Crawler | None) -> None:
        self.stats = getattr(crawler, "stats", None)
        self.logged: set[str] = set()

    @classmethod
    def of(cls, crawler: Crawler) -> ArticleFailures:
        found = cls._of.get(crawler)
        if found is None:
            found = cls._of[crawler] = cls(crawler)
        return found

    def inc(self, key: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(f"whittle/articles/{key}")

    def failed(self, kind: str, url: str, cause: str) -> None:
        self.inc(f"failed/{kind}")
        level = logging.DEBUG if kind in self.logged else logging.WARNING
        self.logged.add(kind)
        logger.log(level, "article %s: no text (%s: %s); its item goes without (further "
                   "%r failures at debug level)", url, kind, cause, kind)


def article_item(item: dict[str, Any], result: Article | tuple[str, str] | None,
                 repeat: str | None = None) -> dict[str, Any]:
    """``item`` with the article's fields: from ``result``'s Article (``repeat``: how it
    repeats a story known, if it does), or empty with ``article_error`` set to the kind of
    failure."""
    from scrapy_whittle.feeds.article import Article

    out = {**item, **ARTICLE_FIELDS, "authors": []}
    if isinstance(result, Article):
        out.update(text=result.text, article_title=result.title,
                   authors=list(result.authors), article_date=result.date,
                   language=result.language, canonical_url=result.canonical, repeat=repeat)
    else:
        out["article_error"] = result[0] if result else "no_response"
    return out


def item_from_response(crawler: Crawler, response: Response) -> dict[str, Any]:
    """The item of an article response (``FeedSpider.parse_article``)."""
    result = response.meta.get(META_RESULT)
    failures = ArticleFailures.of(crawler)
    if isinstance(result, tuple):
        failures.failed(result[0], response.url, result[1])
    elif result is not None:
        failures.inc("extracted")
    return article_item(response.meta[META_ARTICLE], result, response.meta.get(META_REPEAT))


def item_from_failure(crawler: Crawler, failure) -> dict[str, Any] | None:
    """The item of an article request that failed (``FeedSpider.article_failed``): an
    HTTP error, a download error after retries, robots.txt's refusal, a page over
    ``WHITTLE_ARTICLE_MAX_SIZE``. None for a request that is no article request."""
    from scrapy_whittle.scrapy.errors import describe, exception_kind

    request = getattr(failure, "request", None)
    if request is None or META_ARTICLE not in request.meta:
        return None
    value = failure.value
    response = getattr(value, "response", None)
    if response is not None and getattr(response, "status", 200) >= 300:
        kind, cause = f"http_{response.status}", f"HTTP {response.status}"
    else:
        kind, cause = exception_kind(value), describe(value)
    ArticleFailures.of(crawler).failed(kind, request.url, cause)
    return article_item(request.meta[META_ARTICLE], (kind, cause))


# -- the queue (in WhittleScheduler) --------------------------------------------------------------
#: article requests kept waiting at most: beyond, the oldest of the host with most waiting
#: goes unsent (its item without text, ``too_many_waiting``), so that feeds bringing entries
#: faster than their pages can be fetched do not fill the memory
MAX_WAITING = 100_000


class ArticleQueue:
    """Article requests waiting for their host, first in first out per host, hosts in
    turn, at most ``max_waiting`` of them. ``admit(host)``: whether the host's allowance
    has a request left (spent if so: the crawl's ``admit_article``); ``saturated(host)``:
    whether its download slot is full (then a feed due there would wait behind the
    article); ``host_limit``:
    ``WHITTLE_ARTICLE_HOST_LIMIT``, requests per host and ``epoch()`` (a period's
    number) at most (None: no limit); ``ended()``: whether the crawl's epochs are over."""

    def __init__(self, *, admit: Callable[[str], bool],
                 saturated: Callable[[str], bool], epoch: Callable[[], int],
                 host_limit: float | None = None,
                 ended: Callable[[], bool] = lambda: False,
                 max_waiting: int = MAX_WAITING) -> None:
        self.admit, self.saturated, self.epoch = admit, saturated, epoch
        self.ended, self.max_waiting = ended, int(max_waiting)
        self.host_limit = math.inf if host_limit is None else float(host_limit)
        self.waiting: dict[str, deque[Request]] = {}
        self.turn: deque[str] = deque()             # hosts with requests, in turn
        self.sent: dict[str, int] = {}              # this epoch's requests per host
        self._epoch: int | None = None
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, request: Request) -> None:
        host = urlsplit(request.url).hostname or ""
        line = self.waiting.get(host)
        if line is None:
            line = self.waiting[host] = deque()
            self.turn.append(host)
        line.append(request)
        self._size += 1

    def pop(self) -> Request | None:
        """The next article request whose host may take it now, or None."""
        if not self._size:
            return None
        if self._size > self.max_waiting:
            host = max(self.waiting, key=lambda h: len(self.waiting[h]))
            return self._unsent(host, "too_many_waiting")
        epoch = self.epoch()
        if epoch != self._epoch:
            self._epoch, self.sent = epoch, {}
        ended = self.ended()
        for _ in range(len(self.turn)):
            host = self.turn[0]
            self.turn.rotate(-1)
            if self.saturated(host):
                continue
            if self.sent.get(host, 0) >= self.host_limit or not self.admit(host):
                if ended:
                    return self._unsent(host, "crawl_ended")
                continue
            line = self.waiting[host]
            request = line.popleft()
            if not line:
                del self.waiting[host]
                self.turn.remove(host)
            self.sent[host] = self.sent.get(host, 0) + 1
            self._size -= 1
            return request
        return None

    def _unsent(self, host: str, why: str) -> Request:
        """The oldest request of ``host``, answered without a download
        (:func:`unsent_response`), its item without text: the crawl's epochs are over
        (``WHITTLE_MAX_EPOCHS``) and the host's last allowance is spent (``crawl_ended``),
        or too many requests wait (``too_many_waiting``)."""
        line = self.waiting[host]
        request = line.popleft()
        if not line:
            del self.waiting[host]
            self.turn.remove(host)
        self._size -= 1
        request.meta[META_UNSENT] = why
        request.meta["dont_obey_robotstxt"] = True
        return request


def unsent_response(request: Request) -> Response:
    """The answer to an article request the crawl ended before sending (in
    ``FeedObserverMiddleware.process_request``, as a replay's)."""
    from scrapy.http import Response

    why = request.meta[META_UNSENT]
    request.meta[META_RESULT] = (why, "the crawl's last epoch ended first" if why == "crawl_ended"
                                 else f"more than {MAX_WAITING} article requests waited")
    return Response(request.url, status=200, request=request, flags=["whittle-unsent"])
