"""Round trips to Redis, counted by the node's clients: a command or a pipeline is one; a
worker reports a fetched feed (entries told new, stories, pending batch, result, the task
acknowledged) in one."""

from __future__ import annotations

import asyncio

import pytest_twisted
import redis
from twisted.internet.defer import Deferred

from scrapy_whittle.cluster.counting import RoundTrips, count_round_trips
from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.tasks import FETCHED, read_result
from scrapy_whittle.cluster.writes import Writes
from scrapy_whittle.service.types import Crawl
from tests.cluster.conftest import RedisServer
from tests.cluster.harness import take
from tests.cluster.test_node_outcomes import FETCHES
from tests.cluster.test_pending import URL, _close, _node


def test_a_command_and_a_pipeline_are_one_round_trip_each(redis_server):
    counter = RoundTrips()
    client = count_round_trips(redis.Redis.from_url(redis_server.url), counter)
    try:
        client.ping()                          # connected: its handshake counted too
        start = counter.count
        client.set("a", 1)
        pipe = client.pipeline(transaction=False)
        for _ in range(3):
            pipe.incr("a")
        assert pipe.execute() == [2, 3, 4]
        assert counter.count - start == 2
    finally:
        client.close()


@pytest_twisted.ensureDeferred
async def test_a_fetch_is_reported_in_two_round_trips(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        await Deferred.fromFuture(asyncio.ensure_future(_one_trip(server.url)))
    finally:
        server.stop()


async def _one_trip(url: str) -> None:
    node = _node(url)
    try:
        await node._ensure_groups()
        k = node.keys
        for n, entries in enumerate(FETCHES[:3]):
            crawl = Crawl(0, URL, n, node.clock.now(), {}, f"c{n}", 1.5)
            await node.redis.xadd(k.tasks, {"sid": 0})
            got = await node.redis.xreadgroup("workers", "w", {k.tasks: ">"}, count=1)
            task_id = got[0][1][0][0].decode()
            node.tasks.taken.setdefault(crawl.cid, []).append(task_id)
            await node.redis.ping()            # connection and script cached
            before = node.round_trips.count
            found = await node.feed_fetched(crawl, entries)
            # the entry script on the source's tag, the report on the crawl's (the first
            # time each script is loaded: a refused EVALSHA, SCRIPT LOAD, EVALSHA)
            assert node.round_trips.count - before == (2 if n else 6)
            # the task acknowledged and gone, its result in the stream
            assert await node.redis.xpending(k.tasks, "workers") == {
                "pending": 0, "min": None, "max": None, "consumers": []}
            assert await node.redis.xlen(k.tasks) == 0
            last = (await node.redis.xrevrange(k.results, count=1))[0][1]
            result = read_result(last)
            assert (result.kind, result.cid, result.new_items) == (
                FETCHED, crawl.cid, len(found.entries))
            assert result.reward == float(sum(found.values))
            assert (found.batch is not None) == bool(found.entries)
    finally:
        await _close(node)


@pytest_twisted.ensureDeferred
async def test_batches_delivered_together_are_forgotten_in_one_round_trip(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        await Deferred.fromFuture(asyncio.ensure_future(_delivered_together(server.url)))
    finally:
        server.stop()


async def _delivered_together(url: str) -> None:
    node = _node(url)
    try:
        await node._ensure_groups()
        batches = []
        for n, entries in enumerate(FETCHES[:3]):
            crawl = Crawl(0, URL, n, node.clock.now(), {}, f"c{n}", 1.5)
            await take(node, crawl)
            batches.append((await node.feed_fetched(crawl, entries)).batch)
        t = Keys.tag_of(0)
        assert None not in batches and await node.redis.hlen(node.keys.pending(t)) == 3
        await node.write(Writes().add("PING", node.keys.meta))   # its script loaded, once
        before = node.round_trips.count
        for batch in batches:
            node.delivered(batch)
        await asyncio.wait(list(node._posting))
        assert node.round_trips.count - before == 1
        assert await node.redis.hlen(node.keys.pending(t)) == 0
        assert await node.redis.zcard(node.keys.pending_since(t)) == 0
        assert node.batches.held == set()
    finally:
        await _close(node)
