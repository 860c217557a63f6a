"""End-to-end crawls against the simulated web: budget, wake-ups, items, registration,
conditional GET with and without the HTTP cache, JOBDIR state.

Most run on the simulated clock (``VirtualWeb``): hours of crawl in a second, the same
trajectory on a loaded machine. Two check the wall-clock wake-ups themselves."""

import json

import pytest
import pytest_twisted
import scrapy
from scrapy import signals

from scrapy_whittle.scrapy.sink import whittle_service
from scrapy_whittle.service.state.store import FILE_NAME
from tests.scrapy.conftest import VirtualWeb, make_crawler, run, whittle


def feeds(server, n, start=0):
    return [f"{server.url}/feed/{i}.xml" for i in range(start, start + n)]


def keep_scheduler(crawler):
    box = {}

    def opened(spider):
        box["scheduler"] = crawler.engine.scheduler

    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
    return box


def on_clock(web: VirtualWeb, **settings):
    return make_crawler(WHITTLE_CLOCK=web.clock, **settings)


@pytest.mark.parametrize("policy", ["round_robin", "whittle"])
@pytest_twisted.ensureDeferred
async def test_the_budget_is_spent_exactly_every_epoch(policy):
    web = VirtualWeb(n=100, seed=1)
    try:
        crawler = on_clock(web, WHITTLE_SOURCES=web.feeds(100), WHITTLE_POLICY=policy,
                           WHITTLE_BUDGET=20, WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=8,
                           CONCURRENT_REQUESTS=32, CONCURRENT_REQUESTS_PER_DOMAIN=32)
        box = keep_scheduler(crawler)
        stats = await run(crawler)
    finally:
        await web.stop()
    w = whittle(stats)
    assert stats["finish_reason"] == "finished"
    assert w["crawls"] == w["fetched"] == 20 * 8, sorted(w.items())
    assert w["budget_used"] == pytest.approx(1.0)
    assert w["epochs"] == 8
    assert web.clock.now() - box["scheduler"].service.origin == pytest.approx(8 * 3600)


@pytest_twisted.ensureDeferred
async def test_engine_woken_at_epoch_start_without_busy_polling(sim_server):
    crawler = make_crawler(WHITTLE_SOURCES=feeds(sim_server, 3), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=1, WHITTLE_PERIOD=0.3, CLOSESPIDER_TIMEOUT=2.05)
    box = keep_scheduler(crawler)
    stats = await run(crawler)
    w = whittle(stats)
    # 7 epochs start in 2.05 s; waiting for the 5 s heartbeat would allow one crawl
    assert w["crawls"] >= 6, w
    assert box["scheduler"].polls < 100
    assert stats["finish_reason"] == "closespider_timeout"


@pytest_twisted.ensureDeferred
async def test_spider_stays_open_when_budget_allows_nothing(sim_server):
    crawler = make_crawler(WHITTLE_SOURCES=feeds(sim_server, 3), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=1, WHITTLE_PERIOD=60, CLOSESPIDER_TIMEOUT=1.5)
    box = keep_scheduler(crawler)
    stats = await run(crawler)
    assert stats["finish_reason"] == "closespider_timeout"
    assert whittle(stats)["crawls"] == 1
    assert box["scheduler"].polls < 20     # woken by events, not polling


@pytest_twisted.ensureDeferred
async def test_feed_spider_items_and_utility(tmp_path):
    web = VirtualWeb(n=6, seed=2)
    out = tmp_path / "items.jsonl"
    try:
        crawler = on_clock(web, WHITTLE_SOURCES=web.feeds(6), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=3, WHITTLE_PERIOD=900, WHITTLE_MAX_EPOCHS=16,
                           WHITTLE_ENGAGEMENT_SCALE=1000,
                           FEEDS={str(out): {"format": "jsonlines"}})
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(items) == w["new_items"] > 10
    first = items[0]
    assert set(first) == {"source", "source_id", "entry_id", "title", "link", "published",
                          "discovered_at", "delay", "value"}
    assert first["source"].startswith(web.url + "/feed/")
    # the web is served from 127.0.0.1, whose links the default parser's guard blanks
    assert web.url.startswith("http://127.0.0.1:")
    assert all(i["link"].startswith(web.url + "/item/") for i in items)
    assert len({(i["source"], i["entry_id"]) for i in items}) == len(items)
    assert sum(i["value"] for i in items) == pytest.approx(w["utility"])
    # feed dates carry whole seconds: a delay is never more than 1 s below zero
    assert all(i["delay"] is None or i["delay"] > -1.0 for i in items)
    assert web.server.web.totals()["captured"] == pytest.approx(w["utility"], rel=0.01)


class RegisteringSpider(scrapy.Spider):
    name = "registering"
    feeds: list[str] = []
    got: list = []

    async def start(self):
        for url in self.feeds:
            yield scrapy.Request(url, meta={"whittle_source": True}, callback=self.parse_feed,
                                 cb_kwargs={"tag": "mine"})

    def parse_feed(self, response, tag):
        self.got.append((response.meta["whittle_source_id"], tag,
                         len(response.meta["whittle_entries"])))


@pytest_twisted.ensureDeferred
async def test_spider_registers_sources_with_meta():
    web = VirtualWeb(n=14)
    RegisteringSpider.feeds = web.feeds(4, start=10)
    RegisteringSpider.got = []
    try:
        crawler = make_crawler(RegisteringSpider, WHITTLE_CLOCK=web.clock,
                               WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=4,
                               WHITTLE_PERIOD=1800, WHITTLE_MAX_EPOCHS=3)
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    assert w["sources"] == 4 and w["crawls"] >= 8
    assert {sid for sid, _, _ in RegisteringSpider.got} == {0, 1, 2, 3}
    assert all(tag == "mine" for _, tag, _ in RegisteringSpider.got)


@pytest.mark.parametrize("cache", [False, True])
@pytest_twisted.ensureDeferred
async def test_conditional_get_with_and_without_http_cache(tmp_path, cache):
    web = VirtualWeb(n=4, seed=3)
    try:
        crawler = on_clock(web, WHITTLE_SOURCES=web.feeds(4), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=4, WHITTLE_PERIOD=300, WHITTLE_MAX_EPOCHS=24,
                           HTTPCACHE_ENABLED=cache, HTTPCACHE_DIR=str(tmp_path / "cache"))
        stats = await run(crawler)
    finally:
        await web.stop()
    w = whittle(stats)
    assert w["not_modified"] > 0 and w["new_items"] > 0
    assert not any(k.startswith("errors/") for k in w), w
    assert w["fetched"] == w["crawls"] == 4 * 24
    assert web.server.resource.not_modified == w["not_modified"]
    if cache:
        assert stats.get("httpcache/hit", 0) == 0      # feeds bypass the cache


@pytest_twisted.ensureDeferred
async def test_jobdir_state_is_saved_and_restored(tmp_path, caplog):
    web = VirtualWeb(n=5, seed=4)
    settings = dict(WHITTLE_SOURCES=web.feeds(5), WHITTLE_POLICY="round_robin",
                    WHITTLE_BUDGET=2, WHITTLE_PERIOD=600, WHITTLE_MAX_EPOCHS=5,
                    JOBDIR=str(tmp_path / "job"), WHITTLE_CLOCK=web.clock)
    try:
        box = keep_scheduler(first := make_crawler(**settings))
        w1 = whittle(await run(first))
        assert (tmp_path / "job" / FILE_NAME).exists()
        service = box["scheduler"].service
        before = (service.policy.next_source, service.state.etag.get_many(range(5)),
                  repr(service.state.modified.tolist()), service.memory.export_keys(range(5)))
        box = keep_scheduler(second := make_crawler(**settings))
        caplog.set_level("INFO")

        def opened(spider):
            s = whittle_service(second)
            box["at_open"] = (s.policy.next_source, s.state.etag.get_many(range(5)),
                              repr(s.state.modified.tolist()), s.memory.export_keys(range(5)))

        second.signals.connect(opened, signal=signals.spider_opened, weak=False)
        w2 = whittle(await run(second))
    finally:
        await web.stop()
    assert box["at_open"] == before
    assert "restored 5 sources" in caplog.text
    # epochs continue from the first run's origin; the budget use is this run's own
    assert w1["budget_used"] == pytest.approx(1.0) and w2["budget_used"] == pytest.approx(1.0)
    assert w2["crawls"] == 2 * 5


@pytest_twisted.ensureDeferred
async def test_a_crawl_that_ends_has_delivered_every_item_and_leaves_no_journal(tmp_path):
    from scrapy_whittle.service.state.deliveries import DIRECTORY

    web = VirtualWeb(n=5, seed=4)
    job = tmp_path / "job"
    settings = dict(WHITTLE_SOURCES=web.feeds(5), WHITTLE_BUDGET=2, WHITTLE_PERIOD=600,
                    WHITTLE_MAX_EPOCHS=5, JOBDIR=str(job), WHITTLE_CLOCK=web.clock,
                    SPIDER_MIDDLEWARES={"scrapy_whittle.DeliveryMiddleware": 10})
    try:
        first = make_crawler(**settings)
        stats = await run(first)
        assert stats["item_scraped_count"] > 0
        assert (job / DIRECTORY).is_dir() and list((job / DIRECTORY).iterdir()) == []
        second = await run(make_crawler(**settings))
    finally:
        await web.stop()
    assert "whittle/deliveries/replayed" not in second


class _Boom:
    """Unpickling this object writes a file: a state loader that unpickles runs it."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest_twisted.ensureDeferred
async def test_a_pickled_state_of_an_older_version_is_never_loaded(tmp_path, caplog):
    import pickle

    job = tmp_path / "job"
    job.mkdir()
    marker = tmp_path / "pwned"
    (job / "whittle.state.pickle").write_bytes(pickle.dumps(_Boom(str(marker))))
    web = VirtualWeb(n=2)
    try:
        crawler = on_clock(web, WHITTLE_SOURCES=web.feeds(2), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=2, WHITTLE_PERIOD=600, WHITTLE_MAX_EPOCHS=1,
                           JOBDIR=str(job))
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    assert not marker.exists()
    assert (job / "whittle.state.pickle.ignored").exists()
    assert "is not loaded" in caplog.text and w["crawls"] == 2
