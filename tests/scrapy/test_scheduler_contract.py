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
from scrapy_whittle.scrapy.sink import site_search_of, whittle_service, whittle_sink

FEEDS = [f"http://feeds{i}.example/news.xml" for i in range(4)]
PAGES = [f"http://site.example/{i}" for i in range(3)]


class _Spider(Spider):
    name = "contract"


def _crawler(**settings):
    crawler = get_crawler(_Spider, {
        "ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_BUDGET": 2, "WHITTLE_SOURCES": FEEDS,
        "WHITTLE_STEP": 3600,           # one plan an epoch: the budget at once, then nothing
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
    from scrapy_whittle.scrapy.middleware import RetryAfterMiddleware

    crawler, _ = _crawler()
    for cls in (FeedObserverMiddleware, DeliveryMiddleware, RetryAfterMiddleware):
        assert isinstance(build_from_crawler(cls, crawler), cls)
    assert whittle_sink(crawler) is None         # no scheduler yet: nothing to report to
    assert whittle_service(crawler) is None


def test_the_scheduler_publishes_its_sink_on_the_crawler():
    """What the middlewares report to is found on the crawler (a cluster's node:
    tests/cluster/test_node_outcomes.py)."""
    from scrapy_whittle.service.sink import LocalSink

    crawler, _ = _crawler(WHITTLE_SITE_SEARCH=True)
    scheduler = build_from_crawler(WhittleScheduler, crawler)
    assert isinstance(whittle_sink(crawler), LocalSink)
    assert whittle_sink(crawler) is scheduler.sink
    assert whittle_service(crawler) is scheduler.service is not None
    assert site_search_of(crawler) is scheduler.site_search is not None


# -- Scrapy's scheduler tests, WhittleScheduler in its place -------------------------------
# What Scrapy's own tests/test_scheduler.py checks of a scheduler, asked of a WhittleScheduler
# with no feed of its own (every request passes through to Scrapy's scheduler): length and
# pending, everything dequeued, priorities honoured, the downloader-aware queue fair across
# download slots; in memory, and with JOBDIR across a close and a new scheduler.

QUEUES = ["scrapy.pqueues.ScrapyPriorityQueue", "scrapy.pqueues.DownloaderAwarePriorityQueue"]
THREE = ["http://foo.example/a", "http://foo.example/b", "http://foo.example/c"]


class _Slots:
    """A downloader stand-in: download slots whose active downloads a test sets."""

    def __init__(self) -> None:
        self.slots: dict[str, SimpleNamespace] = {}

    def get_slot_key(self, request: Request) -> str:
        return request.meta.get(Downloader.DOWNLOAD_SLOT) or request.url.split("/")[2]

    def busy(self, key: str, delta: int) -> None:
        slot = self.slots.setdefault(key, SimpleNamespace(active=[]))
        if delta > 0:
            slot.active.append(object())
        else:
            slot.active.pop()


def _passing(queue: str, jobdir) -> tuple[WhittleScheduler, Spider]:
    crawler = get_crawler(_Spider, {
        "ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_BUDGET": 2,
        "WHITTLE_LOGSTATS_INTERVAL": 0, "LOG_LEVEL": "INFO",
        "SCHEDULER_PRIORITY_QUEUE": queue,
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.LifoMemoryQueue",
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleLifoDiskQueue",
        "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",
        **({"JOBDIR": str(jobdir)} if jobdir else {})})
    crawler.engine = SimpleNamespace(downloader=_Slots())
    spider = _Spider.from_crawler(crawler)
    scheduler = build_from_crawler(WhittleScheduler, crawler)
    scheduler.open(spider)
    return scheduler, spider


async def _given(queue: str, jobdir, requests: list[Request]) -> WhittleScheduler:
    """A scheduler given ``requests``: the same one, or with ``jobdir`` a new one opened on
    the JOBDIR the first left them in."""
    scheduler, _ = _passing(queue, jobdir)
    assert not scheduler.has_pending_requests() and len(scheduler) == 0
    for request in requests:
        assert scheduler.enqueue_request(request)
    if jobdir:
        await scheduler.close("finished")
        scheduler, _ = _passing(queue, jobdir)
    return scheduler


@pytest.mark.parametrize("queue", QUEUES)
@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "jobdir"])
@pytest_twisted.ensureDeferred
async def test_scrapy_s_checks_length_dequeue_and_priorities(tmp_path, queue, on_disk):
    jobdir = tmp_path / "job" if on_disk else None
    scheduler = await _given(queue, jobdir, [Request(url) for url in THREE])
    assert scheduler.has_pending_requests() and len(scheduler) == len(THREE)
    assert sorted(_drain(scheduler)) == THREE and not scheduler.has_pending_requests()
    await scheduler.close("finished")
    priorities = [-2, 1, -1, 0, 2]
    scheduler = await _given(queue, tmp_path / "job2" if on_disk else None,
                             [Request(f"http://foo.example/{i}", priority=p)
                              for i, p in enumerate(priorities)])
    out = []
    while (request := scheduler.next_request()) is not None:
        out.append(request.priority)
    assert out == sorted(priorities, reverse=True)
    await scheduler.close("finished")


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "jobdir"])
@pytest_twisted.ensureDeferred
async def test_scrapy_s_downloader_aware_queue_is_fair_across_slots(tmp_path, on_disk):
    slots = ["a", "a", "b", "b", "c", "c"]
    requests = []
    for i, key in enumerate(slots):
        requests.append(Request(f"http://foo.example/{i}",
                                meta={Downloader.DOWNLOAD_SLOT: key}))
    scheduler = await _given(QUEUES[1], tmp_path / "job" if on_disk else None, requests)
    downloader = scheduler.crawler.engine.downloader
    taken = []
    while (request := scheduler.next_request()) is not None:
        key = downloader.get_slot_key(request)
        downloader.busy(key, +1)              # in flight: the queue prefers idler slots
        taken.append(key)
    # every round hands each slot one request before any gets a second
    assert sorted(taken) == sorted(slots)
    assert all(len(set(taken[i:i + 3])) == 3 for i in range(0, len(taken), 3))
    await scheduler.close("finished")
