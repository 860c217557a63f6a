"""A cluster's worker judges a fetched feed with the local service's code: the same new
entries, values and full windows on the same feeds; and the results message survives Redis."""

from __future__ import annotations

import asyncio

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.cluster.tasks import (
    FETCHED,
    CrawlResult,
    read_result,
    result_fields,
)
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sink import LocalSink
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.types import Crawl, DictStats
from tests.cluster.conftest import RedisServer
from tests.cluster.harness import take

START = 1_700_000_000.0
SETTINGS = {"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 600.0, "WHITTLE_POLICY": "round_robin",
            "WHITTLE_ITEM_VALUE": 2.0, "WHITTLE_ENGAGEMENT_SCALE": 10.0,
            "WHITTLE_MAX_ENTRIES_PER_SOURCE": 6}


def entry(key, published=None, engagement=None):
    return FeedEntry(key=key, title=None, link=None, published=published,
                     engagement=engagement)


# the feeds one source shows on successive fetches: a first fetch, some new, a full window
# (every entry new after a gap), a duplicate key, nothing new, more entries than remembered
FETCHES = [
    [entry("a", START - 50), entry("b", START - 90, engagement=4.0)],
    [entry("c", START + 10), entry("a", START - 50), entry("b", START - 90)],
    [entry("f"), entry("e", START + 20, engagement=30.0), entry("d")],
    [entry("g"), entry("g"), entry("f")],
    [entry("g"), entry("f")],
    [entry(f"x{j}", START + j) for j in range(9)],
]


@pytest_twisted.ensureDeferred
async def test_the_node_and_the_service_judge_the_same_feeds_alike(tmp_path):
    config = WhittleConfig.from_settings(SETTINGS)
    clock = SimulatedClock(start=START)
    service = RecrawlService(config, clock=clock)
    service.open([SourceSpec(url="https://s.example/feed.xml", weight=1.5)])
    sink = LocalSink(service)                    # both through the one sink interface
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        local = []
        for entries in FETCHES:
            crawl = sink.next_crawl()
            local.append(await sink.feed_fetched(crawl, entries))
            clock.advance_to(clock.now() + config.period)
        # the node's Redis client runs on the reactor's asyncio loop
        remote, results = await Deferred.fromFuture(asyncio.ensure_future(
            _node_fetches(config, server.url, clock)))
    finally:
        server.stop()
    assert [r.window_full for r in local] == [False, False, True, False, False, True]
    for mine, theirs in zip(local, remote, strict=True):
        assert [e.key for e in theirs.entries] == [e.key for e in mine.entries]
        assert theirs.values == mine.values
        assert theirs.window_full == mine.window_full
    # what the planner is told is what the service counted
    assert [r.new_items for r in results] == [len(r.entries) for r in local]
    assert [r.reward for r in results] == [float(sum(r.values)) for r in local]
    assert [r.window_full for r in results] == [r.window_full for r in local]
    assert results[2].published == [None, START + 20, None]


@pytest_twisted.ensureDeferred
async def test_a_cluster_crawl_s_scheduler_publishes_its_node_as_the_sink(redis_server):
    """The middlewares of a cluster crawl report to the process's node, found on the crawler
    as a local crawl's service is (tests/scrapy/test_scheduler_contract.py)."""
    from scrapy import Spider
    from scrapy.utils.misc import build_from_crawler
    from scrapy.utils.test import get_crawler

    from scrapy_whittle import WhittleScheduler
    from scrapy_whittle.scrapy.sink import site_search_of, whittle_service, whittle_sink

    crawler = get_crawler(Spider, {"WHITTLE_REDIS_URL": redis_server.url, "WHITTLE_BUDGET": 2,
                                   "WHITTLE_SOURCES": ["https://s.example/feed.xml"],
                                   "WHITTLE_LOGSTATS_INTERVAL": 0})
    scheduler = build_from_crawler(WhittleScheduler, crawler)
    node = whittle_sink(crawler)
    try:
        assert isinstance(node, ClusterNode) and node is scheduler.sink
        assert site_search_of(crawler) is None
        assert whittle_service(crawler) is None      # the planner's may run elsewhere
    finally:
        await Deferred.fromFuture(asyncio.ensure_future(node.redis.aclose()))
        node.sync_redis.close()


async def _node_fetches(config, url, clock):
    stats = DictStats()
    node = ClusterNode(config, redis_url=url, prefix="test", specs=[], stats=stats,
                       clock=clock)
    try:
        await node._ensure_groups()
        found = []
        for n, entries in enumerate(FETCHES):
            crawl = Crawl(0, "https://s.example/feed.xml", n, clock.now(), {}, f"c{n}", 1.5)
            await take(node, crawl)
            found.append(await node.feed_fetched(crawl, entries))
        sent = await node.redis.xrange(node.keys.results)
        assert stats.get("fetched") == len(FETCHES)
        assert stats.get("window_full") == 2
        return found, [read_result(fields) for _, fields in sent]
    finally:
        await node.redis.aclose()
        node.sync_redis.close()


def _as_redis(fields: dict) -> dict:
    """A message as Redis returns it: every key and value bytes."""
    return {k.encode(): str(v).encode() for k, v in fields.items()}


@pytest.mark.parametrize("result", [
    CrawlResult(3, "p:7", 12, START + 0.125, START + 1.5, FETCHED, new_items=2,
                reward=0.1 + 0.2, window_full=True, published=[START - 1.25, None],
                etag='"v1"', last_modified="Tue, 14 Nov 2023 22:13:20 GMT",
                hints="max-age", latency=0.25),
    CrawlResult(0, "p:1", 0, START, START, "not_modified"),
    CrawlResult(0, "p:1", 0, START, START, "not_modified", latency=1.0 / 3),
    CrawlResult(5, "p:2", 4, START, START + 3, "http_503", cause="HTTP 503",
                retry_after=120.0),
])
def test_a_result_message_round_trip(result):
    assert read_result(_as_redis(result_fields(result))) == result


def test_a_result_without_a_readable_latency_has_none():
    """A worker of an earlier version sends no latency; garbage is no latency either."""
    fields = _as_redis(result_fields(CrawlResult(1, "p:1", 2, START, START, FETCHED,
                                                 latency=0.5)))
    for value in (None, b"", b"slow", b"-1", b"nan"):
        if value is None:
            del fields[b"lat"]
        else:
            fields[b"lat"] = value
        assert read_result(fields).latency is None


def test_unreadable_counts_make_an_empty_unreadable_result():
    fields = _as_redis(result_fields(CrawlResult(1, "p:1", 2, START, START, FETCHED,
                                                 new_items=3, reward=1.0)))
    fields[b"reward"] = b"lots"
    got = read_result(fields)
    assert (got.new_items, got.reward, got.published, got.readable) == (0, 0.0, [], False)
    del fields[b"cid"]
    with pytest.raises(KeyError):
        read_result(fields)


def test_a_task_handed_out_again_while_its_first_download_runs_is_reported_twice():
    """A task whose lease ran out is handed out again, maybe to the process still
    downloading it: the same crawl id twice in flight. Each download's report takes one of
    its task ids (the first report took the only one it knew: the second failed with a
    KeyError and its task was never acknowledged)."""
    from scrapy_whittle.service.types import Crawl

    config = WhittleConfig.from_settings(SETTINGS)
    node = ClusterNode(config, redis_url="redis://127.0.0.1:1/0", prefix="test", specs=[],
                       stats=DictStats(), clock=SimulatedClock(start=START))
    crawl = Crawl(0, "https://a.example/feed.xml", 0, START, {}, cid="c1")
    node.tasks.queue.extend([(crawl, "1-0"), (crawl, "2-0")])
    assert node.next_crawl() == crawl and node.next_crawl() == crawl
    assert [node.tasks.release(crawl), node.tasks.release(crawl)] == ["1-0", "2-0"]
    assert node.tasks.taken == {}
    node.tasks.queue.append((crawl, "3-0"))
    node.next_crawl()
    node.tasks.requeue(crawl)                      # not downloaded after all: back to the queue
    assert list(node.tasks.queue) == [(crawl, "3-0")] and node.tasks.taken == {}
