"""Moved and dead feeds in a cluster, on a real redis-server: a worker's permanent redirect
moves the source in the planner's service (its old URL an alias, a merge onto another
source's URL), a 410 and a long silence retire it, a probe revives it, all as one process
does, and all kept in Redis so that the next planner goes on with them (a source list that
still names the old URL makes no twin)."""

from __future__ import annotations

import asyncio

import pytest

from scrapy_whittle.service.sources.registry import SourceSpec
from tests.cluster.harness import PERIOD, SETTINGS, START, Cluster, entries, hand_over, on_asyncio

OLD, OTHER = "https://a.example/old.xml", "https://b.example/feed.xml"
NEW = "https://a.example/new.xml"


@on_asyncio
async def test_a_move_is_kept_and_the_old_url_makes_no_twin(redis_server):
    cluster = Cluster(redis_server.url)
    try:
        a = await cluster.node([OLD, OTHER])
        crawls = await cluster.crawls(a)
        assert sorted(crawls) == [0, 1]
        moved = a.moved(crawls[0], NEW)
        assert moved.url == NEW
        await a.feed_fetched(moved, entries("x"))
        await a.feed_fetched(crawls[1], entries("y"))
        await a.planner.step()                      # learns the results
        service = a.planner.service
        assert service.url(0) == NEW and service.source_id(OLD) == 0
        assert a.stats.get("planner/sources/moved") == 1
        # the next planner reads a list that still names the old URL
        b = await hand_over(cluster, a, [OLD, OTHER])
        service = b.planner.service
        assert len(service.sources) == 2 and service.sources.n_left == 0
        assert service.url(0) == NEW and service.source_id(OLD) == 0
        b.add_source(SourceSpec(url=OLD))           # a spider names it again
        await asyncio.wait(list(b._posting))
        cluster.advance()
        crawls = await cluster.crawls(b)
        assert len(service.sources) == 2
        assert crawls[0].url == NEW                  # fetched where it is now
    finally:
        await cluster.close()


@on_asyncio
async def test_a_move_onto_another_source_merges_them_for_the_next_planner_too(redis_server):
    cluster = Cluster(redis_server.url)
    try:
        a = await cluster.node([OLD, OTHER])
        crawls = await cluster.crawls(a)
        await a.feed_fetched(a.moved(crawls[0], OTHER), entries("x"))
        await a.feed_fetched(crawls[1], entries("y"))
        await a.planner.step()
        assert a.stats.get("planner/sources/merged") == 1
        b = await hand_over(cluster, a, [OLD, OTHER])
        service = b.planner.service
        assert service.source_id(OLD) == 1 and service.sources.merged[0]
        assert service.sources.n_left == 1
        cluster.advance()
        assert sorted(await cluster.crawls(b)) == [1]     # the merged source is not crawled
    finally:
        await cluster.close()


@on_asyncio
async def test_a_410_retires_the_source_and_the_next_planner_probes_it_back(redis_server):
    cluster = Cluster(redis_server.url)
    try:
        a = await cluster.node([OLD, OTHER])
        crawls = await cluster.crawls(a)
        await a.crawl_failed(crawls[0], "http_410", "HTTP 410")
        await a.feed_fetched(crawls[1], entries("y"))
        await a.planner.step()
        assert a.planner.service.sources.retired[0]
        assert a.stats.get("planner/sources/retired") == 1
        b = await hand_over(cluster, a, [OLD, OTHER])
        assert b.planner.service.sources.retired[0]
        cluster.advance()
        crawls = await cluster.crawls(b)
        assert sorted(crawls) == [1]                      # retired: out of the choice
        await b.feed_fetched(crawls[1], entries("z"))
        cluster.advance(20)                               # the probe is due
        crawls = await cluster.crawls(b)
        assert 0 in crawls and b.stats.get("planner/probes/crawls") >= 1
        await b.feed_fetched(crawls[0], entries("back"))
        await b.planner.step()
        assert not b.planner.service.sources.retired[0]
        assert b.stats.get("planner/sources/revived") == 1
    finally:
        await cluster.close()


@on_asyncio
async def test_a_silent_source_retires_counting_from_its_last_entry_across_planners(redis_server):
    cluster = Cluster(redis_server.url)
    try:
        a = await cluster.node([OLD, OTHER])
        crawls = await cluster.crawls(a)
        await a.feed_fetched(crawls[0], entries("x"))
        await a.feed_fetched(crawls[1], entries("y"))
        await a.planner.step()
        alive = a.planner.service.sources.alive_at[0]
        assert alive == pytest.approx(START)
        b = await hand_over(cluster, a, [OLD, OTHER])
        assert b.planner.service.sources.alive_at[0] == pytest.approx(alive)
        # fetched again and again with nothing new: retired once silent for RETIRE_AFTER
        # from its last new entry, under the first planner
        for _ in range(12):
            cluster.advance()
            crawls = await cluster.crawls(b)
            for sid, crawl in crawls.items():
                await b.feed_fetched(crawl, entries("x" if sid == 0 else "y"))
            await b.planner.step()
            if b.planner.service.sources.retired[0]:
                break
        assert b.planner.service.sources.retired[0]
        assert cluster.clock.now() - START == pytest.approx(10 * PERIOD)
    finally:
        await cluster.close()


@pytest.mark.slow
def test_two_processes_follow_a_moved_and_a_dead_feed(redis_server, tmp_path):
    from scrapy_whittle.cluster.keys import Keys
    from scrapy_whittle.cluster.state import RedisStateStore
    from tests.cluster.test_cluster import (
        N_FEEDS,
        PREFIX,
        emitted,
        no_duplicates,
        results,
        start,
        stop,
    )
    from tests.scrapy.conftest import Server
    from tests.waiting import wait_for

    web = Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", "36000",
                 "--latency", "0.02", "--seed", "3", "--fates", "3:301,5:410")
    names = ["w0", "w1"]
    procs = []
    try:
        procs = [start(redis_server, web, tmp_path, name) for name in names]
        client = redis_server.client()
        store = RedisStateStore(client, Keys(PREFIX))
        moved, gone = f"{web.url}/moved/3.xml", f"{web.url}/feed/5.xml"

        def followed() -> bool:
            saved = store.load()
            if saved is None:
                return False
            urls, flags = saved.sources["url"], saved.sources["flags"]
            return (moved in urls and gone in urls
                    and flags[urls.index(gone)] >> 34 & 1 == 1)

        wait_for(followed, timeout=120, what="the move and the death in Redis")
        # the other process may still be starting (the first can get that far alone on a
        # loaded machine): Scrapy takes the SIGTERM of a graceful stop only once its reactor
        # runs, before that the signal ends the process at once; an item emitted shows it runs
        for name, proc in zip(names, procs, strict=True):
            wait_for(lambda name=name: emitted(tmp_path, name), timeout=120, alive=proc,
                     what=f"process {name}'s first item")
        stop(procs)
        saved = store.load()
        client.close()
    finally:
        web.stop()
    urls = list(saved.sources["url"])
    assert len(urls) == N_FEEDS                         # no twin of the moved feed
    assert dict(saved.aliases)[f"{web.url}/feed/3.xml"] == urls.index(moved)
    items, stats = results(tmp_path, names)
    no_duplicates(items)
    planners = [s for s in stats.values() if "whittle/planner/crawls" in s]
    assert sum(s.get("whittle/planner/sources/moved", 0) for s in planners) == 1
    assert sum(s.get("whittle/planner/sources/retired", 0) for s in planners) >= 1


@on_asyncio
async def test_a_move_learnt_by_a_planner_killed_before_its_checkpoint_is_not_lost(redis_server):
    cluster = Cluster(redis_server.url)
    try:
        a = await cluster.node([OLD, OTHER])
        crawls = await cluster.crawls(a)
        await a.feed_fetched(a.moved(crawls[0], NEW), entries("x"))
        await a.feed_fetched(crawls[1], entries("y"))
        await a.planner.step()                      # learnt, not checkpointed
        assert a.planner.service.url(0) == NEW
        # the planner is killed: its lock lives out its TTL, another process takes over
        await a.redis.delete(a.keys.planner)
        b = await cluster.node([OLD, OTHER])
        await b.planner.step()
        assert b.planner.leader
        service = b.planner.service
        assert service.url(0) == NEW and service.source_id(OLD) == 0
        assert len(service.sources) == 2
    finally:
        await cluster.close()


@on_asyncio
async def test_a_run_of_404s_retires_the_source_though_the_planner_changed(redis_server):
    cluster = Cluster(redis_server.url, {**SETTINGS, "WHITTLE_RETIRE_404_AFTER": 2 * PERIOD})
    try:
        node = await cluster.node([OLD, OTHER])
        crawls = await cluster.crawls(node)
        for crawl in crawls.values():
            await node.feed_fetched(crawl, entries(f"e{crawl.source}"))
        await node.planner.step()
        for n in range(3):                 # three 404s in a row, a new planner after two
            if n == 2:
                node = await hand_over(cluster, node, [OLD, OTHER])
            cluster.advance()
            crawls = await cluster.crawls(node)
            assert 0 in crawls
            await node.crawl_failed(crawls[0], "http_404", "HTTP 404")
            await node.feed_fetched(crawls[1], entries("e1"))
            await node.planner.step()
            assert node.planner.service.sources.retired[0] == (n == 2)
        assert node.stats.get("planner/sources/retired") == 1
    finally:
        await cluster.close()
