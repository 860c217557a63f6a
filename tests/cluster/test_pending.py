"""Pending batches of a cluster on a real redis-server: the script that tells a fetch's entries
new stores them as a pending batch in the same step, a delivered batch is forgotten, and a
batch nobody renewed for a lease is reclaimed by one node, once (a killed worker's, or one
whose reply was lost with the connection)."""

from __future__ import annotations

import asyncio

import pytest_twisted
from redis.exceptions import ConnectionError
from twisted.internet.defer import Deferred

from scrapy_whittle.cluster.entries import entry_args, packed_hashes
from scrapy_whittle.cluster.keys import SPREAD, Keys, batch_tag
from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.service.clock import SystemClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.state.deliveries import Batch
from scrapy_whittle.service.types import Crawl, DictStats
from tests.cluster.conftest import RedisServer
from tests.cluster.harness import take
from tests.cluster.test_node_outcomes import FETCHES, SETTINGS

URL = "https://s.example/feed.xml"
LEASE = 0.4
# The lease of the test that renews a batch half-way: real seconds (Redis times the lease),
# and that test's steps between its sleeps of a fraction of the lease must take well under the
# rest of it, also on a loaded machine (the tests run two at a time), or a node reclaims a
# batch a step early
STEPPED_LEASE = 1.0


def _on_reactor(coro):
    return Deferred.fromFuture(asyncio.ensure_future(coro))


def _node(url: str, *, journal: bool = True, lease: float = LEASE) -> ClusterNode:
    node = ClusterNode(WhittleConfig.from_settings(SETTINGS), redis_url=url, prefix="test",
                       specs=[], stats=DictStats(), clock=SystemClock(), lease=lease)
    node.journal_deliveries = journal
    return node


async def _close(*nodes: ClusterNode) -> None:
    for node in nodes:
        if node._posting:
            await asyncio.wait(list(node._posting))
        await node.redis.aclose()
        node.sync_redis.close()


async def _fetch(node: ClusterNode, n: int, entries):
    crawl = Crawl(0, URL, n, node.clock.now(), {}, f"c{n}", 1.5)
    await take(node, crawl)
    return await node.feed_fetched(crawl, entries)


async def _pending(node: ClusterNode) -> dict[int, Batch]:
    """Every tag's pending batches (source 0's tag holds them all)."""
    raw, since = {}, set()
    for t in range(SPREAD):
        got = await node.redis.hgetall(node.keys.pending(t))
        assert t == Keys.tag_of(0) or not got
        raw.update(got)
        since |= {int(m) for m in await node.redis.zrange(node.keys.pending_since(t), 0, -1)}
    assert since == {int(k) for k in raw}            # the two keys hold the same batches
    assert all(batch_tag(int(k)) == Keys.tag_of(0) for k in raw)
    return {int(k): Batch.from_line(v) for k, v in raw.items()}


@pytest_twisted.ensureDeferred
async def test_new_entries_are_pending_until_delivered_and_reclaimed_once(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        await _on_reactor(_reclaimed_once(server.url))
    finally:
        server.stop()


async def _reclaimed_once(url: str) -> None:
    a, b, c = (_node(url, lease=STEPPED_LEASE) for _ in range(3))
    try:
        await a._ensure_groups()
        first = await _fetch(a, 0, FETCHES[0])
        second = await _fetch(a, 1, FETCHES[1])
        third = await _fetch(a, 4, FETCHES[3])         # g, f: new
        old = await _fetch(a, 5, FETCHES[4])           # g, f again: nothing new, no batch
        assert old.entries == [] and old.batch is None
        assert first.batch and second.batch and first.batch != second.batch
        pending = await _pending(a)
        assert set(pending) == {first.batch, second.batch, third.batch}
        for found in (first, second):
            batch = pending[found.batch]
            assert (batch.url, batch.source) == (URL, 0)
            assert batch.entries == found.entries and batch.values == found.values
        assert a.batches.held == set(pending)
        # delivered: forgotten in Redis
        a.delivered(first.batch)
        await asyncio.wait(list(a._posting))
        assert set(await _pending(a)) == {second.batch, third.batch}
        # a fresh batch is not reclaimed; one its holder renews is not either
        await b.batches.renew_and_reclaim()
        assert b.take_replay() is None
        await asyncio.sleep(STEPPED_LEASE * 0.6)
        a.batches.held.discard(third.batch)           # as if a had never heard of it
        await a.batches.renew_and_reclaim()                # renews second.batch only
        await asyncio.sleep(STEPPED_LEASE * 0.6)
        await b.batches.renew_and_reclaim()
        replay = b.take_replay()
        assert replay is not None and replay.id == third.batch
        assert [e.key for e in replay.entries] == ["g", "f"]
        assert b.take_replay() is None and b.batches.held == {third.batch}
        assert b.stats.get("deliveries/replayed") == 2
        # taken once: renewed to b, not reclaimed by another node
        await c.batches.renew_and_reclaim()
        assert c.take_replay() is None
        b.delivered(replay.id)
        await asyncio.wait(list(b._posting))
        assert set(await _pending(a)) == {second.batch}
        # a worker that stops gracefully releases what it holds at once
        a.stopping = True
        await a.batches.release()
        await c.batches.renew_and_reclaim()
        assert c.take_replay().id == second.batch
    finally:
        await _close(a, b, c)


@pytest_twisted.ensureDeferred
async def test_a_lost_reply_leaves_the_batch_to_be_reclaimed(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        await _on_reactor(_lost_reply(server.url))
    finally:
        server.stop()


async def _lost_reply(url: str) -> None:
    node, plain = _node(url), _node(url, journal=False)
    try:
        await node._ensure_groups()
        # the entry script ran, its reply was lost with the connection: the retry finds
        # the entries seen
        distinct, packed = packed_hashes(FETCHES[0])
        keys, args = node.entry_call(0, packed, entry_args(URL, 0, node.clock.now(), distinct,
                                                           [1.0, 2.0]))
        await node._entries(keys=keys, args=args)
        again = await _fetch(node, 0, FETCHES[0])
        assert again.entries == [] and again.batch is None
        await asyncio.sleep(LEASE * 1.2)
        await node.batches.renew_and_reclaim()              # its own lost batch, reclaimed
        replay = node.take_replay()
        assert [e.key for e in replay.entries] == ["a", "b"] and replay.values == [1.0, 2.0]
        # without DeliveryMiddleware (nothing reports deliveries) nothing is kept
        found = await _fetch(plain, 1, FETCHES[1])
        assert [e.key for e in found.entries] == ["c"] and found.batch is None
        assert set(await _pending(node)) == {replay.id}
    finally:
        await _close(node, plain)


@pytest_twisted.ensureDeferred
async def test_a_lost_report_reply_leaves_the_batch_to_be_reclaimed(tmp_path):
    (tmp_path / "redis").mkdir()
    server = RedisServer(tmp_path / "redis")
    try:
        await _on_reactor(_lost_report(server.url))
    finally:
        server.stop()


async def _lost_report(url: str) -> None:
    node = _node(url)
    try:
        # both scripts ran, the report's reply was lost with the connection: the retry
        # finds the task acknowledged, emits nothing and holds nothing; the batch the
        # entry script stored is reclaimed after the lease, not lost
        crawl = Crawl(0, URL, 0, node.clock.now(), {}, "c0", 1.5)
        await take(node, crawl)
        report = node._report
        calls = []

        async def lost_once(keys, args):
            got = await report(keys=keys, args=args)
            calls.append(got)
            if len(calls) == 1:
                raise ConnectionError("the reply lost")
            return got

        node._report = lost_once
        found = await node.feed_fetched(crawl, FETCHES[0])
        assert [int(c[0]) for c in calls] == [1, 0]
        assert found.entries == [] and found.batch is None and node.batches.held == set()
        assert node.stats.get("cluster/reported_already") == 1
        sent = await node.redis.xrange(node.keys.results)
        assert len(sent) == 1                           # the result sent once
        await asyncio.sleep(LEASE * 1.2)
        await node.batches.renew_and_reclaim()
        replay = node.take_replay()
        assert [e.key for e in replay.entries] == ["a", "b"]
    finally:
        await _close(node)
