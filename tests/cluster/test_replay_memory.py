"""A cluster's replay of undelivered batches forgets none of the entries a feed still shows
(on a real redis-server). One process had that bug (a replayed journal batch moved its entries
to the recent end of the bounded memory restored from the checkpoint, forgetting the oldest:
``tests/service/test_deliveries.py``). A cluster's entry memory is written only by the entry
script, with all the entries a fetch showed, in the step that stores the new ones as a pending
batch; a batch reclaimed from a killed worker is handed to the spider again without touching
it. So after the replay the memory is the fetch's, byte for byte, and the feed's next fetch
finds nothing new."""

from __future__ import annotations

import asyncio

import pytest_twisted

from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.service.clock import SystemClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.types import Crawl, DictStats
from tests.cluster.conftest import RedisServer
from tests.cluster.harness import take
from tests.cluster.test_node_outcomes import entry
from tests.cluster.test_pending import URL, _close, _on_reactor

#: WHITTLE_DEDUP "entry": what is new is the entry memory's word alone
SETTINGS = {"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 600.0, "WHITTLE_POLICY": "round_robin",
            "WHITTLE_DEDUP": "entry"}


def _node(url: str) -> ClusterNode:
    node = ClusterNode(WhittleConfig.from_settings(SETTINGS), redis_url=url, prefix="test",
                       specs=[], stats=DictStats(), clock=SystemClock(), lease=600.0)
    node.journal_deliveries = True
    return node


async def _fetch(node: ClusterNode, n: int, entries):
    crawl = Crawl(0, URL, n, node.clock.now(), {}, f"c{n}", 1.0)
    await take(node, crawl)
    return await node.feed_fetched(crawl, entries)


async def _killed(node: ClusterNode) -> None:
    """``node`` killed: the batches it held are not renewed; a lease later they read as
    renewed long ago, as ``PendingBatches.release`` leaves them (what ``pending:since`` holds is
    Redis's time, not the test's clock)."""
    await node.batches.release()


async def _memory(node: ClusterNode) -> bytes:
    """Source 0's entry memory as Redis holds it (its bucket's packed string)."""
    return await node.redis.get(node.keys.entries(0))


async def _replayed(node: ClusterNode) -> list[str]:
    await node.batches.renew_and_reclaim()
    keys = []
    while (batch := node.take_replay()) is not None:
        keys += [e.key for e in batch.entries]
    return keys


async def _oldest_first(url: str) -> None:
    a, b = _node(url), _node(url)
    try:
        await a._ensure_groups()
        shown = [entry(f"a{i}") for i in range(20)]
        first = await _fetch(a, 0, shown)
        a.delivered(first.batch)
        await asyncio.wait(list(a._posting))
        shown = shown[6:] + [entry(f"b{i}") for i in range(6)]       # 6 new, 6 oldest gone
        found = await _fetch(a, 1, shown)
        assert [e.key for e in found.entries] == [f"b{i}" for i in range(6)]
        memory = await _memory(a)
        await _killed(a)                                   # before their items' delivery
        assert await _replayed(b) == [f"b{i}" for i in range(6)]
        assert await _memory(a) == memory
        again = await _fetch(b, 2, shown)                  # the unchanged feed
        assert again.entries == [] and again.batch is None
    finally:
        await _close(a, b)


async def _two_batches(url: str) -> None:
    a, b = _node(url), _node(url)
    try:
        await a._ensure_groups()
        old, new = [entry(f"a{i}") for i in range(20)], [entry(f"b{i}") for i in range(20)]
        assert len((await _fetch(a, 0, old)).entries) == 20
        assert len((await _fetch(a, 1, new)).entries) == 20
        memory = await _memory(a)
        await _killed(a)                                   # neither batch delivered
        assert sorted(await _replayed(b)) == sorted(e.key for e in old + new)
        assert await _memory(a) == memory       # as the fetch left it
        again = await _fetch(b, 2, new)
        assert again.entries == [] and again.batch is None
    finally:
        await _close(a, b)


@pytest_twisted.ensureDeferred
async def test_an_oldest_first_feed_reports_nothing_twice_after_a_replay(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        await _on_reactor(_oldest_first(server.url))
    finally:
        server.stop()


@pytest_twisted.ensureDeferred
async def test_the_replay_of_two_batches_forgets_none_of_their_entries(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        await _on_reactor(_two_batches(server.url))
    finally:
        server.stop()
