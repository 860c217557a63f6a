"""The WhittleScheduler driven the way Scrapy's own tests drive a scheduler
(``tests/test_scheduler.py`` of Scrapy): built from a crawler that was never started
(``get_crawler``, ``build_from_crawler``) whose engine is a stand-in holding a downloader
(the default priority queue reads its slots), opened, given and asked for requests, closed,
with no crawl running. Scrapy's scheduler interface: ``open``, ``close``,
``enqueue_request``, ``next_request``, ``has_pending_requests``, ``__len__``; the requests
that are not the crawl's own pass through Scrapy's scheduler, JOBDIR queues included."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import pytest_twisted
from scrapy import Request, Spider
from scrapy.core.downloader import Downloader
from scrapy.core.scheduler import Scheduler
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from scrapy_whittle import WhittleScheduler

FEEDS = [f"http://feeds{i}.example/news.xml" for i in range(4)]
PAGES = [f"http://site.example/{i}" for i in range(3)]


class _Spider(Spider):
    name = "contract"


def _crawler(**settings):
    crawler = get_crawler(_Spider, {
        "ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_BUDGET": 2, "WHITTLE_SOURCES": FEEDS,
        "WHITTLE_LOGSTATS_INTERVAL": 0, "LOG_LEVEL": "INFO", **settings})
    crawler.engine = SimpleNamespace(downloader=Downloader(crawler))    # as Scrapy's MockEngine
    return crawler, _Spider.from_crawler(crawler)


def _drain(scheduler) -> list[str]:
    urls = []
    while (request := scheduler.next_request()) is not None:
        urls.append(request.url)
    return urls


def _scrapy_order(**settings) -> list[str]:
    """The order Scrapy's own scheduler gives ``PAGES`` in, with the same settings."""
    crawler, spider = _crawler(**settings)
    scheduler = build_from_crawler(Scheduler, crawler)
    scheduler.open(spider)
    for url in PAGES:
        scheduler.enqueue_request(Request(url))
    out = _drain(scheduler)
    scheduler.close("finished")
    return out


@pytest.mark.parametrize("jobdir", [False, True])
@pytest.mark.parametrize("extensions", [True, False])
@pytest_twisted.ensureDeferred
async def test_a_scheduler_built_opened_and_closed_outside_a_crawl(tmp_path, jobdir,
                                                                  extensions):
    settings = {"JOBDIR": str(tmp_path / "job")} if jobdir else {}
    crawler, spider = _crawler(**settings)
    if not extensions:                 # a crawler whose extensions were never built
        crawler.extensions = None
    scheduler = build_from_crawler(WhittleScheduler, crawler)
    scheduler.open(spider)
    assert scheduler.has_pending_requests()          # the epoch's plan, made when asked
    feeds = _drain(scheduler)
    assert len(feeds) == 2 and set(feeds) <= set(FEEDS)   # the budget, then nothing due
    # nothing queued now, and still pending: a re-crawl has the next epoch's crawls to come
    # (the engine keeps the crawl open, WHITTLE_MAX_EPOCHS or a close ends it)
    assert len(scheduler) == 0 and scheduler.has_pending_requests()
    for url in PAGES:                  # any other request passes through Scrapy's scheduler
        assert scheduler.enqueue_request(Request(url))
    assert scheduler.has_pending_requests() and len(scheduler) == len(PAGES)
    assert _drain(scheduler) == _scrapy_order(**({"JOBDIR": str(tmp_path / "scrapy")}
                                                 if jobdir else {}))
    await (scheduler.close("finished"))


@pytest_twisted.ensureDeferred
async def test_requests_passed_through_are_in_jobdir_s_queue_after_a_restart(tmp_path):
    """Requests not yet handed out when the crawl stopped are kept in JOBDIR's queue, as by
    Scrapy's scheduler, and come out after a restart; the crawl's own feeds come from its
    state, not from that queue."""
    settings = {"JOBDIR": str(tmp_path / "job")}
    crawler, spider = _crawler(**settings)
    scheduler = build_from_crawler(WhittleScheduler, crawler)
    scheduler.open(spider)
    scheduler.enqueue_request(Request("http://site.example/kept"))
    await (scheduler.close("shutdown"))
    crawler, spider = _crawler(**settings)
    again = build_from_crawler(WhittleScheduler, crawler)
    again.open(spider)
    urls = _drain(again)
    assert urls.count("http://site.example/kept") == 1
    assert all(url in FEEDS for url in urls if url != "http://site.example/kept")
    await (again.close("finished"))


def test_the_middlewares_are_built_from_a_crawler_that_never_started():
    from scrapy_whittle import DeliveryMiddleware, FeedObserverMiddleware
    from scrapy_whittle.scrapy.middleware import RetryAfterMiddleware, service_of

    crawler, _ = _crawler()
    for cls in (FeedObserverMiddleware, DeliveryMiddleware, RetryAfterMiddleware):
        assert isinstance(build_from_crawler(cls, crawler), cls)
    crawler.engine = None                        # no engine at all: no service to report to
    assert service_of(crawler) is None
