"""A planner that loses its lock (Redis away longer than ``WHITTLE_REDIS_LOCK_TTL``: a
restart, a shard's restart on a Redis Cluster) and takes it again in the same process counts
each crawl in flight once: its hosts are not left saturated by crawls it counted before."""

from __future__ import annotations

from tests.cluster.harness import Cluster, on_asyncio

URLS = [f"https://one.example/{i}.xml" for i in range(4)]


@on_asyncio
async def test_a_planner_that_lost_its_lock_and_took_it_again_counts_each_crawl_once(
        redis_server):
    cluster = Cluster(redis_server.url)
    try:
        node = await cluster.node(URLS, host_concurrency=1)
        planner = node.planner
        first = await cluster.crawls(node)
        assert len(first) == 1                         # the host's concurrency
        host = "one.example"
        assert planner.hosts.in_flight[host] == 1
        # the lock expires meanwhile (Redis away): the next renewal finds it gone
        await node.redis.delete(node.keys.planner)
        planner._renewed = 0.0
        assert await planner.step() == 0.0 and not planner.leader
        await planner.step()                           # elected again: takes over
        assert planner.leader and len(planner.in_flight) == 1
        assert planner.hosts.in_flight[host] == 1
        # the crawls' results free the host: the next epoch's crawls are handed out
        for crawl in first.values():
            await node.not_modified(crawl)
        cluster.advance()
        second = await cluster.crawls(node)
        assert len(second) == 1 and planner.hosts.in_flight[host] == 1
    finally:
        await cluster.close()
