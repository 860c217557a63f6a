"""A crawl's state spread over a Redis Cluster's shards by tag: the planner's checkpoint is a
transaction per tag, then the crawl-wide one; a planner killed between them leaves tags a
checkpoint ahead, whose learnt results the next planner does not learn twice."""

from __future__ import annotations

import asyncio

import pytest

from scrapy_whittle.cluster.keys import SPREAD, Keys
from tests.cluster.conftest import RedisClusterServers
from tests.cluster.harness import Cluster, entries, on_asyncio

URLS = ["https://a.example/feed.xml", "https://b.example/feed.xml"]


class CutShort:
    """A client whose first transaction (a checkpoint's crawl-wide one: the tags' come after
    it is begun, and run before it) fails as a planner killed there would leave it."""

    def __init__(self, client) -> None:
        self.client = client
        self.cut = False

    def pipeline(self, **options):
        pipe = self.client.pipeline(**options)
        if not self.cut:
            self.cut = True

            def killed():
                raise RuntimeError("the planner was killed")
            pipe.execute = killed
        return pipe

    def __getattr__(self, name):
        return getattr(self.client, name)


@pytest.mark.parametrize("standby", [False, True], ids=["restore", "standby"])
@on_asyncio
async def test_a_checkpoint_cut_short_between_its_tags_and_the_crawl_is_not_learnt_twice(
        redis_cluster, standby):
    cluster = Cluster(redis_cluster.url)
    try:
        a = await cluster.node(URLS)
        if standby:         # a process keeping a standby, restored before the cut
            b = await cluster.node(URLS, standby=True)
            await a.planner.step()
            await b.planner.step()
            await asyncio.wait([b.planner._standing])
            assert b.planner.standby.ready
        crawls = await cluster.crawls(a)
        assert sorted(crawls) == [0, 1]
        for sid, crawl in crawls.items():
            await a.feed_fetched(crawl, entries(f"e{sid}", f"f{sid}"))
        await a.planner.learning.read_messages()                   # learnt, not checkpointed
        assert list(a.planner.service.state.new_items[:2]) == [2, 2]
        store = a.planner.service.store
        assert store.per_tag
        store.client = CutShort(store.client)
        try:
            await a.planner.checkpoint()
            raise AssertionError("the checkpoint was not cut short")
        except RuntimeError:
            pass
        k = a.keys
        t = Keys.tag_of(0)
        with redis_cluster.client() as client:
            seq = int(client.hget(k.meta, "checkpoint_seq"))
            assert int(client.hget(k.checkpoint(t), "seq")) == seq + 1   # the tag ahead
            assert client.xpending(k.results, "planner")["pending"] == 2  # not acknowledged
        # the planner is killed: its lock lives out its TTL, another process takes over
        await a.redis.delete(a.keys.planner)
        if not standby:
            b = await cluster.node(URLS)
        await b.planner.step()
        assert b.planner.leader
        assert b.stats.get("cluster/standby/takeovers", 0) == int(standby)
        # the records as the tags' transactions wrote them, the results taken for learnt
        assert list(b.planner.service.state.new_items[:2]) == [2, 2]
        assert b.planner.service.store.applied == set()
        assert not {0, 1} & set(b.planner.service.sources.in_flight)   # selectable again
        with redis_cluster.client() as client:
            assert client.xpending(k.results, "planner")["pending"] == 0
            # their crawls ended (none handed out again: the epoch's budget is spent)
            assert b.planner.in_flight == {} and client.hlen(k.in_flight) == 0
    finally:
        await cluster.close()


@on_asyncio
async def test_a_crawls_state_spread_over_tags_is_restored_whole(any_redis):
    urls = [f"https://h{i % 7}.example/{i}.xml" for i in range(3 * 512 * 2)]
    cluster = Cluster(any_redis.url)
    try:
        a = await cluster.node(urls)
        crawls = await cluster.crawls(a)
        for crawl in crawls.values():
            await a.feed_fetched(crawl, entries(f"x{crawl.source}"))
        await a.planner.learning.read_messages()
        await a.planner.resign()
        b = await cluster.node(urls)
        await b.planner.step()
        service = b.planner.service
        assert [service.url(i) for i in range(len(urls))] == urls
        assert int(sum(service.state.crawls[:len(urls)])) == len(crawls)
        with any_redis.client() as client:
            tags = {Keys.tag_of(sid) for sid in range(len(urls))}
            assert all(client.exists(a.keys.rows(sid)) for sid in range(0, len(urls), 512))
            if isinstance(any_redis, RedisClusterServers):
                shards = {any_redis.shard_of(a.keys.tag(t)).port for t in tags}
                assert len(shards) == len(any_redis.servers)   # every shard
            assert len(tags) == 6 and max(tags) < SPREAD
    finally:
        await cluster.close()
