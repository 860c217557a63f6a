"""One story counted once across a cluster (``WHITTLE_DEDUP = "link"``), on a real
redis-server: the nodes tell repeats as one process's service does, two nodes fetching two
feeds that list one story at the same moment emit it once, and the story memory in Redis
stays within its bound, the least recently seen forgotten first."""

from __future__ import annotations

import asyncio

import pytest

from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.cluster.stories import KEPT, PER_KEY, SHARD_MIN, SHARDS, StoryHashes
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.feeds.story import story_key_column
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.types import Crawl, DictStats
from tests.cluster.harness import on_asyncio, take
from tests.cluster.test_node_outcomes import SETTINGS, START

LINK = {**SETTINGS, "WHITTLE_DEDUP": "link"}
PER_FEED = {**SETTINGS, "WHITTLE_DEDUP": "entry"}
URLS = ["https://a.example/front.xml", "https://b.example/wire.xml"]


def story(key, link=None, published=None):
    return FeedEntry(key=key, title=None, link=link, published=published, engagement=None)


# (source, entries) fetched in turn: a front page, a section repeating it (other ids, links
# with tracking parameters and another case of host), a story of the section alone, an id
# that is the story's URL, an entry without a story key, two ids of one story in one feed
FETCHES = [
    (0, [story("a1", "https://news.example/one", START - 10),
         story("a2", "https://news.example/two/", START - 20)]),
    (1, [story("b1", "https://NEWS.example/one?utm_source=x", START - 5),
         story("b2", "http://news.example/three#top", START - 1)]),
    (0, [story("a3", "https://news.example/four"), story("a1", "https://news.example/one"),
         story("a2", "https://news.example/two/")]),
    (1, [story("https://news.example/four"), story("tag:b,3"),
         story("b1", "https://NEWS.example/one?utm_source=x")]),
    (0, [story("a5", "https://news.example/five"), story("a6", "https://news.example/five"),
         story("a3", "https://news.example/four")]),
]


def _node(url: str, clock, settings=LINK) -> ClusterNode:
    return ClusterNode(WhittleConfig.from_settings(settings), redis_url=url, prefix="test",
                       specs=[], stats=DictStats(), clock=clock)


async def _close(*nodes: ClusterNode) -> None:
    for node in nodes:
        await node.redis.aclose()
        node.sync_redis.close()


async def _fetch(node: ClusterNode, n: int, sid: int, entries):
    crawl = Crawl(sid, URLS[sid], n, node.clock.now(), {}, f"c{n}-{id(node)}", 1.0)
    await take(node, crawl)
    return await node.feed_fetched(crawl, entries)


@on_asyncio
async def test_two_nodes_tell_repeats_as_one_service_does(any_redis):
    config = WhittleConfig.from_settings(LINK)
    clock = SimulatedClock(start=START)
    service = RecrawlService(config, clock=clock)
    service.open([SourceSpec(url=u) for u in URLS])
    local = []
    for n, (sid, entries) in enumerate(FETCHES):
        crawl = Crawl(sid, URLS[sid], n, clock.now(), {})
        local.append(service.feed_fetched(crawl, entries))
    # the fetches alternate between two nodes sharing one Redis
    nodes = [_node(any_redis.url, clock), _node(any_redis.url, clock)]
    try:
        remote = [await _fetch(nodes[n % 2], n, sid, entries)
                  for n, (sid, entries) in enumerate(FETCHES)]
        sent = await nodes[0].redis.xrange(nodes[0].keys.results)
    finally:
        await _close(*nodes)
    assert [[e.key for e in r.entries] for r in local] == [
        ["a1", "a2"], ["b2"], ["a3"], ["tag:b,3"], ["a5"]]
    for mine, theirs in zip(local, remote, strict=True):
        assert [e.key for e in theirs.entries] == [e.key for e in mine.entries]
        assert theirs.values == mine.values
        assert theirs.window_full == mine.window_full
    repeats = sum(node.stats.get("dedup/repeats") for node in nodes)
    assert repeats == service.stats.get("dedup/repeats") == 3
    # a repeat is no reward for the policy: the planner is told the new stories' alone
    from scrapy_whittle.cluster.tasks import read_result
    results = [read_result(f) for _, f in sent]
    assert [r.new_items for r in results] == [len(r.entries) for r in local]
    assert [r.reward for r in results] == [float(sum(r.values)) for r in local]


@on_asyncio
async def test_per_feed_identity_leaves_redis_without_stories(redis_server):
    node = _node(redis_server.url, SimulatedClock(start=START), PER_FEED)
    try:
        found = [await _fetch(node, n, sid, entries) for n, (sid, entries) in
                 enumerate(FETCHES)]
        keys = await node.redis.keys("test:stories:*")
    finally:
        await _close(node)
    assert [len(f.entries) for f in found] == [2, 2, 1, 2, 1 + 1]
    assert keys == [] and node.stats.get("dedup/repeats") == 0


@on_asyncio
async def test_two_nodes_at_once_emit_a_shared_story_once(redis_server):
    clock = SimulatedClock(start=START)
    nodes = [_node(redis_server.url, clock), _node(redis_server.url, clock)]
    try:
        for rnd in range(20):
            # the same five stories in both feeds (of 6 entries read at most), under each
            # feed's own ids and links
            shared = [f"https://news.example/{rnd}/{j}" for j in range(5)]
            a = [story(f"a{rnd}-{j}", link) for j, link in enumerate(shared)]
            b = [story(f"b{rnd}-{j}", link + "?utm_medium=rss") for j, link in
                 enumerate(shared)]
            found = await asyncio.gather(_fetch(nodes[0], 2 * rnd, 0, a),
                                         _fetch(nodes[1], 2 * rnd + 1, 1, b))
            links = [e.link.split("?")[0] for f in found for e in f.entries]
            assert sorted(links) == sorted(shared)
    finally:
        await _close(*nodes)
    assert sum(node.stats.get("dedup/repeats") for node in nodes) == 20 * 5


class _OneShard(StoryHashes):
    """Every story in shard 0 (hash = its number times SHARDS)."""

    def key_hashes(self, keys):
        return [int(key.rsplit("/", 1)[1]) * SHARDS + SHARDS for key in keys]


@on_asyncio
async def test_the_story_memory_keeps_its_bound_and_forgets_the_least_recent(redis_server):
    node = _node(redis_server.url, SimulatedClock(start=START))
    node.stories = _OneShard(None)
    try:
        # a feed of two entries: its entry memory holds 6 (2 + the least slack 4), so a
        # shard keeps SHARD_MIN stories
        for n in range(0, 12, 2):
            await _fetch(node, n, 0, [story(f"e{n}", f"https://x.example/{n}"),
                                      story(f"e{n + 1}", f"https://x.example/{n + 1}")])
        shard = await node.redis.hget(node.keys.stories(0), 0)
        assert int(await node.redis.get(node.keys.entry_capacity)) == 6
        # each story its hash's high 48 bits (the low 16 are the shard's number, 0 here)
        assert len(shard) == KEPT * SHARD_MIN
        kept = [int.from_bytes(shard[i:i + KEPT], "little") - 1
                for i in range(0, len(shard), KEPT)]
        assert kept == list(range(12 - SHARD_MIN, 12))
        # story 4 is seen again (a repeat: moved to the recent end), then three new ones:
        # the least recently seen (5, 6, 7) go, 4 stays
        again = await _fetch(node, 20, 1, [story("r4", "https://x.example/4")])
        assert again.entries == [] and node.stats.get("dedup/repeats") == 1
        await _fetch(node, 21, 1, [story(f"n{j}", f"https://x.example/{j}")
                                   for j in (20, 21, 22)])
        forgotten = await _fetch(node, 22, 0, [story("r1", "https://x.example/1"),
                                               story("r5", "https://x.example/5"),
                                               story("r4b", "https://x.example/4")])
    finally:
        await _close(node)
    assert [e.key for e in forgotten.entries] == ["r1", "r5"]
    assert node.stats.get("dedup/repeats") == 2


def test_a_feeds_column_of_links_gives_the_records_entry_by_entry_gives():
    """The fast path (one story key an entry, in its normal form, the feed's links hashed
    at once) and the entry-by-entry one agree; entries that need the slow path (a link to
    normalise, an id that is another URL, no key) take it."""
    fast = [story(f"k{j}", f"https://n.example/{j}") for j in range(30)]
    slow = [story("a", "https://N.example/x?utm_source=y"),
            story("https://n.example/y", "https://n.example/z"), story("no-key")]
    assert story_key_column(fast) is not None            # the fast path is taken
    for entries in (fast, fast + slow[:1], slow):
        assert story_key_column(entries) is None or entries is fast
        hashes = StoryHashes(None)
        assert hashes.all_records(entries) == [StoryHashes(None).records(e) for e in entries]
    records = StoryHashes(None).all_records(fast)
    assert len(set(records)) == len(fast) and all(len(r) == 1 for r in records)


def test_story_shards_spread_over_their_keys():
    hashes = StoryHashes(None)
    keys = {hashes.hashes(story(f"k{j}", f"https://n.example/{j}"))[0] % SHARDS // PER_KEY
            for j in range(4000)}
    assert len(keys) > 900       # of SHARDS // PER_KEY = 1024


@pytest.mark.slow
def test_two_processes_emit_each_story_once_across_feeds(redis_server, tmp_path):
    """Each simulated feed listed twice (``?copy`` a second URL of it: the same entries):
    across two processes, every story is an item once, the other copy's a repeat."""
    from tests.cluster.test_cluster import N_FEEDS, results, start, stop
    from tests.scrapy.conftest import Server
    from tests.waiting import wait_for

    web = Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", "36000",
                 "--latency", "0.02", "--seed", "3")
    names = ["w0", "w1"]
    sources = [f"{web.url}/feed/{i}.xml{q}" for i in range(N_FEEDS) for q in ("", "?copy")]
    try:
        procs = [start(redis_server, web, tmp_path, name, WHITTLE_DEDUP="link",
                       WHITTLE_SOURCES=sources, WHITTLE_BUDGET=20) for name in names]

        def emitted() -> int:
            return len(results(tmp_path, names)[0])

        wait_for(lambda: emitted() >= 300, timeout=120, what="300 items")
        # as in test_sources_fate.py: one process can get that far while the other is still
        # starting, and a SIGTERM before its reactor runs ends it at once instead of stopping
        # it gracefully; its first item shows it runs
        for name, proc in zip(names, procs, strict=True):
            wait_for(lambda name=name: results(tmp_path, [name])[0], timeout=120, alive=proc,
                     what=f"process {name}'s first item")
        stop(procs)
    finally:
        web.stop()
    items, stats = results(tmp_path, names)
    links = [item["link"] for item in items]
    assert len(links) == len(set(links)), len(links) - len(set(links))
    # both copies of feeds were fetched, and the later copy's stories were repeats
    assert {item["source"].endswith("?copy") for item in items} == {False, True}
    assert sum(s.get("whittle/dedup/repeats", 0) for s in stats.values()) > 0


@on_asyncio
async def test_a_fetch_reported_in_the_script_carries_its_latency(redis_server):
    # the fetch's result is written by the report script: the download's latency (the
    # host throttle's slowing signal) reaches the planner with it
    node = _node(redis_server.url, SimulatedClock(start=START), PER_FEED)
    try:
        crawl = Crawl(0, URLS[0], 0, node.clock.now(), {}, "c-lat", 1.0)
        await take(node, crawl)
        await node.feed_fetched(crawl, [story("a1")], latency=0.25)
        sent = await node.redis.xrange(node.keys.results)
    finally:
        await _close(node)
    from scrapy_whittle.cluster.tasks import read_result
    assert [read_result(f).latency for _, f in sent] == [0.25]
