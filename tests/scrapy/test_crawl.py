"""End-to-end crawls against the simulated web: budget, wake-ups, items, registration,
conditional GET with and without the HTTP cache, JOBDIR state."""

import json

import pytest
import pytest_twisted
import scrapy
from scrapy import signals

from scrapy_whittle.scheduler import STATE_FILE
from tests.scrapy.conftest import Server, make_crawler, run, whittle


def feeds(server, n, start=0):
    return [f"{server.url}/feed/{i}.xml" for i in range(start, start + n)]


def keep_scheduler(crawler):
    box = {}

    def opened(spider):
        box["scheduler"] = crawler.engine.scheduler

    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
    return box


@pytest.fixture(scope="module")
def big_server():
    server = Server("--scenario", "news-mix", "--n", "100", "--speed", "3600", "--seed", "1")
    yield server
    server.stop()


@pytest.mark.parametrize("policy", ["round_robin", "whittle"])
@pytest_twisted.ensureDeferred
async def test_achieved_rate_within_2_percent_of_budget(big_server, policy):
    # 40 crawls/s: well within what feedparser + Scrapy manage on 2 cores (~100/s)
    crawler = make_crawler(WHITTLE_SOURCES=feeds(big_server, 100), WHITTLE_POLICY=policy,
                           WHITTLE_BUDGET=20, WHITTLE_PERIOD=0.5, CLOSESPIDER_TIMEOUT=4.2,
                           CONCURRENT_REQUESTS=32, CONCURRENT_REQUESTS_PER_DOMAIN=32)
    w = whittle(await run(crawler))
    assert 0.98 <= w["budget_used"] <= 1.0 + 1e-9, sorted(w.items())
    assert w["crawls"] >= 0.98 * 20 * 8


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
async def test_feed_spider_items_and_utility(sim_server, tmp_path):
    out = tmp_path / "items.jsonl"
    crawler = make_crawler(WHITTLE_SOURCES=feeds(sim_server, 6), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=3, WHITTLE_PERIOD=0.25, CLOSESPIDER_TIMEOUT=2,
                           WHITTLE_ENGAGEMENT_SCALE=1000,
                           FEEDS={str(out): {"format": "jsonlines"}})
    w = whittle(await run(crawler))
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(items) == w["new_items"] > 0
    first = items[0]
    assert set(first) == {"source", "source_id", "entry_id", "title", "link", "published",
                          "discovered_at", "delay", "value"}
    assert first["source"].startswith(sim_server.url + "/feed/")
    assert len({(i["source"], i["entry_id"]) for i in items}) == len(items)
    assert sum(i["value"] for i in items) == pytest.approx(w["utility"])
    assert all(i["delay"] is None or i["delay"] > -2 for i in items)


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
async def test_spider_registers_sources_with_meta(sim_server):
    RegisteringSpider.feeds = feeds(sim_server, 4, start=10)
    RegisteringSpider.got = []
    crawler = make_crawler(RegisteringSpider, WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=4,
                           WHITTLE_PERIOD=0.3, CLOSESPIDER_TIMEOUT=1.5)
    w = whittle(await run(crawler))
    assert w["sources"] == 4 and w["crawls"] >= 8
    assert {sid for sid, _, _ in RegisteringSpider.got} == {0, 1, 2, 3}
    assert all(tag == "mine" for _, tag, _ in RegisteringSpider.got)


@pytest.mark.parametrize("cache", [False, True])
@pytest_twisted.ensureDeferred
async def test_conditional_get_with_and_without_http_cache(sim_server, tmp_path, cache):
    crawler = make_crawler(WHITTLE_SOURCES=feeds(sim_server, 4), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=4, WHITTLE_PERIOD=0.1, CLOSESPIDER_TIMEOUT=1.5,
                           HTTPCACHE_ENABLED=cache, HTTPCACHE_DIR=str(tmp_path / "cache"))
    stats = await run(crawler)
    w = whittle(stats)
    assert w["not_modified"] > 0 and w["new_items"] > 0
    assert not any(k.startswith("errors/") for k in w), w
    assert w["fetched"] == w["crawls"] or w["crawls"] - w["fetched"] <= 4  # in flight at close
    if cache:
        assert stats.get("httpcache/hit", 0) == 0      # feeds bypass the cache


@pytest_twisted.ensureDeferred
async def test_jobdir_state_is_saved_and_restored(sim_server, tmp_path, caplog):
    settings = dict(WHITTLE_SOURCES=feeds(sim_server, 5), WHITTLE_POLICY="round_robin",
                    WHITTLE_BUDGET=2, WHITTLE_PERIOD=0.3, CLOSESPIDER_TIMEOUT=1,
                    JOBDIR=str(tmp_path / "job"))
    box = keep_scheduler(first := make_crawler(**settings))
    await run(first)
    assert (tmp_path / "job" / STATE_FILE).exists()
    rr_next = box["scheduler"].policy.next_source
    validators = dict(box["scheduler"].validators)
    box = keep_scheduler(second := make_crawler(**settings))
    caplog.set_level("INFO")
    second.signals.connect(lambda spider: box.setdefault(
        "at_open", (second.engine.scheduler.policy.next_source,
                    dict(second.engine.scheduler.validators))), signal=signals.spider_opened,
        weak=False)
    await run(second)
    assert box["at_open"] == (rr_next, validators)
    assert "restored state of 5 sources" in caplog.text
