"""A WebSub delivery forgets nothing of a cluster's entry memory (on a real redis-server and a
three-node Redis Cluster). A hub may deliver only a feed's new entries (PubSubHubbub 0.3 hubs
do for RSS and Atom): they are no view of the feed, so the source's record grows for them,
the room lent until the source's next fetch, which gives it back (one process's
``EntryMemory.pushed``)."""

from __future__ import annotations

import struct

from scrapy_whittle.cluster.entries import packed_hashes
from scrapy_whittle.cluster.keys import BUCKET, Keys
from scrapy_whittle.cluster.node import ClusterNode, PushSource
from scrapy_whittle.service.clock import SystemClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.state.deliveries import Batch
from scrapy_whittle.service.types import Crawl, DictStats
from tests.cluster.harness import entries, on_asyncio, take
from tests.cluster.test_entry_strings import record_of
from tests.cluster.test_pending import URL, _close

SETTINGS = {"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 600.0, "WHITTLE_POLICY": "round_robin",
            "WHITTLE_DEDUP": "entry"}


def _node(url: str) -> ClusterNode:
    return ClusterNode(WhittleConfig.from_settings(SETTINGS), redis_url=url, prefix="test",
                       specs=[], stats=DictStats(), clock=SystemClock())


async def _fetch(node: ClusterNode, n: int, shown) -> list[str]:
    crawl = Crawl(0, URL, n, node.clock.now(), {}, f"c{n}", 1.0)
    await take(node, crawl)
    return [e.key for e in (await node.feed_fetched(crawl, shown)).entries]


async def _push(node: ClusterNode, delivered) -> list[str]:
    return [e.key for e in (await node.pushed(0, delivered)).entries]


async def _capacity(node: ClusterNode) -> int:
    return int(await node.redis.get(node.keys.entry_capacity) or 0)


@on_asyncio
async def test_a_push_of_only_the_new_entries_makes_no_entry_new_twice(any_redis):
    # the feed lists its 20 entries oldest first, so its oldest remembered ones are those it
    # still shows; a hub pushes only the 6 new ones; the poll after shows all 26
    node = _node(any_redis.url)
    try:
        await node._ensure_groups()
        listed = entries(*(f"a{k}" for k in range(20)))
        assert len(await _fetch(node, 0, listed)) == 20
        assert (await record_of(node, 0))[:2] == (24, 0)
        pushed = entries(*(f"p{k}" for k in range(6)))
        assert await _push(node, pushed) == [f"p{k}" for k in range(6)]
        cap, lent, remembered = await record_of(node, 0)
        assert (cap, lent, len(remembered)) == (26, 2, 26)    # nothing forgotten: 2 lent
        assert await _push(node, pushed) == []                # a duplicate delivery
        assert await _fetch(node, 1, listed + pushed[::-1]) == []   # nothing new twice
        # the fetch rule's room for 26 shown, no more, nothing lent now
        assert (await record_of(node, 0))[:2] == (26 + 4, 0)
        assert await _capacity(node) == 26 + 4
    finally:
        await _close(node)


@on_asyncio
async def test_a_fetch_gives_the_lent_room_back_forgetting_the_least_recently_seen(any_redis):
    node = _node(any_redis.url)
    try:
        await node._ensure_groups()
        listed = entries(*(f"a{k}" for k in range(10)))
        await _fetch(node, 0, listed)                         # capacity 14
        pushed = entries(*(f"p{k}" for k in range(8)))
        await _push(node, pushed)
        assert (await record_of(node, 0))[:2] == (18, 4)
        assert await _capacity(node) == 18
        # the feed shows its 10 entries again (the pushed ones not listed): back to 14, the
        # 4 least recently seen of the pushed ones forgotten
        assert await _fetch(node, 1, listed) == []
        cap, lent, remembered = await record_of(node, 0)
        assert (cap, lent, len(remembered)) == (14, 0, 14)
        assert await _capacity(node) == 14
        assert await _fetch(node, 2, listed + pushed) == ["p4", "p5", "p6", "p7"]
        # (capacity 22 for 18 shown) a push then a fetch showing 40: the fetch rule's room
        # (45) is kept
        await _push(node, entries(*(f"q{k}" for k in range(8))))
        assert (await record_of(node, 0))[:2] == (26, 4)
        await _fetch(node, 3, entries(*(f"w{k}" for k in range(40))))
        assert (await record_of(node, 0))[:2] == (45, 0)
        assert await _capacity(node) == 45
    finally:
        await _close(node)


@on_asyncio
async def test_a_record_written_before_lending_reads_as_nothing_lent(any_redis):
    """A string laid out by the script before deliveries lent room (each record a capacity
    and the hashes): a push grows one record, its neighbour's bytes stay as they were."""
    node = _node(any_redis.url)
    try:
        old = entries(*(f"a{k}" for k in range(4)))
        _, packed = packed_hashes(old)
        hashes = b"".join(packed[i:i + 8] for i in range(len(packed) - 8, -1, -8))
        record = struct.pack("<I", 6) + hashes                   # capacity 6, 4 remembered
        lengths = [0] * BUCKET
        lengths[0] = lengths[1] = len(record)
        blob = struct.pack(f"<{BUCKET}I", *lengths) + record + record
        key = node.keys.entries(0)
        assert node.keys.entries(1) == key
        await node.redis.set(key, blob)
        assert await _push(node, entries(*(f"p{k}" for k in range(4)))) == \
            [f"p{k}" for k in range(4)]
        assert (await record_of(node, 0))[:2] == (8, 2)
        assert await record_of(node, 1) == (6, 0, list(struct.unpack("<4Q", hashes)))
        assert (await node.redis.get(key)).endswith(record)       # the neighbour's bytes
        await node._ensure_groups()
        assert await _fetch(node, 0, old + entries(*(f"p{k}" for k in range(4)))) == []
        assert (await record_of(node, 0))[:2] == (12, 0)
        assert (await node.redis.get(key)).endswith(record)
    finally:
        await _close(node)


@on_asyncio
async def test_a_journaled_push_stores_its_new_entries_as_a_pending_batch(any_redis):
    """The batch's arguments follow the fetch-or-push flag: its line names the source and
    holds the new entries of the delivery with their values."""
    node = _node(any_redis.url)
    node.journal_deliveries = True
    node.push_sources[0] = PushSource(URL, 2.0)
    try:
        await node._ensure_groups()
        await _fetch(node, 0, entries("a0", "a1"))
        found = await node.pushed(0, entries("p0", "a0", "p1"), now=1_700_000_123.5)
        raw = await node.redis.hget(node.keys.pending(Keys.tag_of(0)), str(found.batch))
        batch = Batch.from_line(raw)
        assert (batch.id, batch.url, batch.source, batch.found_at) == \
            (found.batch, URL, 0, 1_700_000_123.5)
        assert [e.key for e in batch.entries] == ["p0", "p1"]
        assert batch.values == found.values and len(found.values) == 2
    finally:
        await _close(node)
