"""A sitemap index's children in a cluster crawl, its nodes stepped by hand on a real
redis-server (and a real three-node Redis Cluster): a worker's result carries what the index
lists, the planner's service retires a child the index has not listed for
WHITTLE_SITEMAP_CHILD_MISSES fetches (a 304 repeats the previous listing, a listing read in
part counts no miss) and brings it back when listed again, as one process does; the
children's rows are kept in Redis with the checkpoint, and so is each index's last listing
(read in part, the children awaiting their registration), so a planner killed or handing
over leaves the next one counting on."""

from __future__ import annotations

import asyncio

from scrapy_whittle.cluster import index_children
from scrapy_whittle.cluster.keys import CHUNK
from scrapy_whittle.cluster.tasks import (
    CrawlResult,
    read_result,
    result_fields,
    source_fields,
    source_url,
)
from scrapy_whittle.service.sources.index_children import Listing
from scrapy_whittle.service.sources.registry import SourceSpec
from tests.cluster.harness import PERIOD, SETTINGS, Cluster, entries, hand_over, on_asyncio

INDEX, USER = "https://a.example/sitemap-index.xml", "https://b.example/feed.xml"
C1, C2 = "https://a.example/news-1.xml", "https://a.example/news-2.xml"
LIST = [INDEX, USER]
#: every source crawled each epoch; none silent long enough to retire for that
CHILDREN = {**SETTINGS, "WHITTLE_BUDGET": 4, "WHITTLE_RETIRE_AFTER": 100 * PERIOD,
            "WHITTLE_SITEMAP_CHILD_MISSES": 3}


async def epoch(cluster: Cluster, node, listing) -> set[int]:
    """The next epoch: ``node`` plans and fetches; the index answers ``listing`` (a
    :class:`Listing`, or "304"), every other source an entry it showed before; the planner
    learns the results. The ids crawled."""
    cluster.advance()
    crawls = await cluster.crawls(node)
    for sid, crawl in crawls.items():
        if sid != 0:
            await node.feed_fetched(crawl, entries(f"e{sid}"))
        elif listing == "304":
            await node.not_modified(crawl)
        else:
            await node.feed_fetched(crawl, [], listing=listing)
    await node.planner.step()
    return set(crawls)


async def index_fetch(cluster: Cluster, node, listing) -> set[int]:
    """Epochs (as :func:`epoch`) until one fetched the index (a planner's first epoch after a
    take-over may pass it over); the ids crawled in that one."""
    for _ in range(3):
        crawled = await epoch(cluster, node, listing)
        if 0 in crawled:
            return crawled
    raise AssertionError("the index was not crawled in three epochs")


async def registered(cluster: Cluster, node) -> tuple[int, int]:
    """The index's first fetch lists C1, C2 (unknown yet) and USER; the spider registers
    the children after the fetch's report, as FeedSpider does; their ids."""
    crawls = await cluster.crawls(node)
    assert sorted(crawls) == [0, 1]
    await node.feed_fetched(crawls[0], [], listing=Listing((C1, C2, USER)))
    await node.feed_fetched(crawls[1], entries("e1"))
    await node.planner.step()                        # learnt: the children await their ids
    for url in (C1, C2):
        node.add_source(SourceSpec(url=url))
    await asyncio.wait(list(node._posting))
    await node.planner.step()                        # registered: linked to the index
    service = node.planner.service
    c1, c2 = service.source_id(C1), service.source_id(C2)
    assert service.children.children[c1].parent == 0
    return c1, c2


def child(node, sid: int):
    return node.planner.service.children.children[sid]


@on_asyncio
async def test_an_unlisted_child_retires_after_k_fetches_across_planners_and_comes_back(
        any_redis):
    cluster = Cluster(any_redis.url, CHILDREN)
    try:
        a = await cluster.node(LIST)
        c1, c2 = await registered(cluster, a)
        await index_fetch(cluster, a, Listing((C1, C2, USER)))      # the children join the plan
        assert {c1, c2} <= await index_fetch(cluster, a, Listing((C1, C2, USER)))
        rotated = Listing((C2, USER))                # the site rotated C1 out
        assert c1 in await index_fetch(cluster, a, rotated)
        assert child(a, c1).misses == 1
        await a.planner.checkpoint()                 # (every WHITTLE_CHECKPOINT_INTERVAL)
        assert c1 in await index_fetch(cluster, a, rotated)
        assert child(a, c1).misses == 2
        # the planner is killed (its lock lives out its TTL): another process takes over
        # from the last checkpoint (one miss) and the results still pending (the second)
        await a.redis.delete(a.keys.planner)
        b = await cluster.node(LIST)
        await b.planner.step()
        assert b.planner.leader
        assert child(b, c1).misses == 2 and child(b, c2).misses == 0
        assert not b.planner.service.sources.retired[c1]
        assert c1 in await index_fetch(cluster, b, rotated)           # the third miss
        service = b.planner.service
        assert service.sources.retired[c1] and child(b, c1).dropped
        assert not service.sources.retired[c2] and not service.sources.retired[1]
        assert b.stats.get("planner/sources/unlisted") == 1
        assert c1 not in await index_fetch(cluster, b, rotated)       # retired: not crawled
        # a graceful hand-over: the next planner knows it retired for not being listed
        c = await hand_over(cluster, b, LIST)
        assert c.planner.service.sources.retired[c1] and child(c, c1).dropped
        assert c1 not in await index_fetch(cluster, c, rotated)
        await index_fetch(cluster, c, Listing((C1, C2)))              # listed again
        assert not c.planner.service.sources.retired[c1] and not child(c, c1).dropped
        assert c.stats.get("planner/sources/relisted") == 1
        assert c1 in await index_fetch(cluster, c, Listing((C1, C2)))  # crawled again
        assert not c.planner.service.sources.retired[1]         # USER: on the list
    finally:
        await cluster.close()


@on_asyncio
async def test_children_registered_survive_a_planner_killed_before_its_checkpoint(
        redis_server):
    cluster = Cluster(redis_server.url, CHILDREN)
    try:
        a = await cluster.node(LIST)
        c1, c2 = await registered(cluster, a)
        await a.redis.delete(a.keys.planner)         # killed: nothing checkpointed since
        b = await cluster.node(LIST)
        await b.planner.step()
        service = b.planner.service
        assert (service.source_id(C1), service.source_id(C2)) == (c1, c2)
        assert child(b, c1).parent == 0 and child(b, c2).parent == 0
        await index_fetch(cluster, b, Listing((C1, C2, USER)))
        assert {c1, c2} <= await index_fetch(cluster, b, Listing((C1, C2, USER)))
    finally:
        await cluster.close()


@on_asyncio
async def test_a_304_of_the_index_repeats_its_listing_and_a_partial_one_counts_no_miss(
        redis_server):
    cluster = Cluster(redis_server.url, CHILDREN)
    try:
        a = await cluster.node(LIST)
        c1, c2 = await registered(cluster, a)
        await index_fetch(cluster, a, Listing((C2, USER), complete=False))     # read in part
        assert child(a, c1).misses == 0
        await index_fetch(cluster, a, "304")                # repeats a partial listing: no miss
        assert child(a, c1).misses == 0
        await index_fetch(cluster, a, Listing((C2, USER)))
        assert child(a, c1).misses == 1
        b = await hand_over(cluster, a, LIST)
        await index_fetch(cluster, b, "304")                # repeats it: a second miss
        assert child(b, c1).misses == 2 and child(b, c2).misses == 0
        assert child(b, c2).listed_at == cluster.clock.now()
        await index_fetch(cluster, b, "304")
        assert b.planner.service.sources.retired[c1]
        assert not b.planner.service.sources.retired[c2]
    finally:
        await cluster.close()


@on_asyncio
async def test_children_awaiting_registration_survive_a_planner_killed_after_its_checkpoint(
        any_redis):
    cluster = Cluster(any_redis.url, CHILDREN)
    try:
        a = await cluster.node(LIST)
        crawls = await cluster.crawls(a)
        await a.feed_fetched(crawls[0], [], listing=Listing((C1, C2, USER)))
        await a.feed_fetched(crawls[1], entries("e1"))
        await a.planner.step()                       # learnt: the children await their ids
        await a.planner.checkpoint()                 # the index's answer is checkpointed
        for url in (C1, C2):                         # the spider registers them
            a.add_source(SourceSpec(url=url))
        await asyncio.wait(list(a._posting))
        await a.redis.delete(a.keys.planner)         # killed before it read them
        b = await cluster.node(LIST)
        await b.planner.step()
        assert b.planner.leader
        service = b.planner.service
        c1, c2 = service.source_id(C1), service.source_id(C2)
        assert child(b, c1).parent == 0 and child(b, c2).parent == 0
        assert len(service.sources) == 4             # each once
        rotated = Listing((C2, USER))                # the index drops C1: it retires
        for _ in range(3):
            await index_fetch(cluster, b, rotated)
        assert service.sources.retired[c1] and not service.sources.retired[c2]
    finally:
        await cluster.close()


@on_asyncio
async def test_a_304_after_a_partial_listing_counts_no_miss_across_a_killed_planner(
        redis_server):
    cluster = Cluster(redis_server.url, CHILDREN)
    try:
        a = await cluster.node(LIST)
        c1, _ = await registered(cluster, a)
        await index_fetch(cluster, a, Listing((C2, USER)))                      # one miss
        await index_fetch(cluster, a, Listing((C2, USER), complete=False))     # read in part
        assert child(a, c1).misses == 1
        await a.planner.checkpoint()
        await a.redis.delete(a.keys.planner)         # killed
        b = await cluster.node(LIST)
        await b.planner.step()
        assert b.planner.leader
        for _ in range(3):                           # each repeats the partial listing
            await index_fetch(cluster, b, "304")
        assert child(b, c1).misses == 1 and not b.planner.service.sources.retired[c1]
        await index_fetch(cluster, b, Listing((C2, USER)))                   # whole again
        assert child(b, c1).misses == 2
    finally:
        await cluster.close()


def test_the_indexes_listings_are_kept_under_their_tags_and_a_damaged_one_skipped(
        redis_server):
    keys = redis_server.keys("test")
    client = redis_server.client()
    try:
        pipe = client.pipeline()
        far = CHUNK * 3                              # an index under another tag
        index_children.write_indexes(lambda sid: pipe, keys, [
            (0, 1, 150.0, (C1, "https://a.example/é")), (far, 0, 7.5, ())])
        pipe.execute()
        assert client.hkeys(keys.indexes(keys.tag_of(far))) == [str(far).encode()]
        client.hset(keys.indexes(0), mapping={7: "[1, NaN, []]", 8: "garbage",
                                              9: '[0, 1.0, [3]]', 10: '[2, 1.0, []]'})
        assert sorted(index_children.saved_indexes(client, keys)) == [
            (0, 1, 150.0, (C1, "https://a.example/é")), (far, 0, 7.5, ())]
    finally:
        client.close()


def test_a_result_carries_the_listing_and_garbage_carries_none():
    result = CrawlResult(3, "p:1", 0, 1.0, 2.0, "ok", children=[C1, "https://a.example/é"],
                         complete=False)
    fields = {k.encode(): str(v).encode() for k, v in result_fields(result).items()}
    back = read_result(fields)
    assert back.children == [C1, "https://a.example/é"] and not back.complete
    assert back.readable
    plain = {k.encode(): str(v).encode()
             for k, v in result_fields(CrawlResult(3, "p:1", 0, 1.0, 2.0, "ok")).items()}
    assert read_result(plain).children is None and read_result(plain).complete
    for garbage in (b"[1, 2]", b"{", b'"x"'):
        bad = read_result({**fields, b"children": garbage})
        assert bad.children is None and not bad.readable


def test_a_registration_message_reads_back_and_other_messages_are_none():
    assert source_url({k.encode(): v.encode() for k, v in source_fields(C1).items()}) == C1
    plain = {k.encode(): str(v).encode()
             for k, v in result_fields(CrawlResult(3, "p:1", 0, 1.0, 2.0, "ok")).items()}
    assert source_url(plain) is None


def test_a_damaged_row_in_redis_is_skipped(redis_server):
    keys = redis_server.keys("test")
    client = redis_server.client()
    try:
        pipe = client.pipeline()
        far = CHUNK * 3                              # a child under another tag
        index_children.write(lambda sid: pipe, keys,
                             [(5, 0, 2, 1234.5, 0), (6, 0, 0, 99.0, 1), (far, 0, 1, 7.0, 0)])
        pipe.execute()
        assert client.hkeys(keys.children(keys.tag_of(far))) == [str(far).encode()]
        client.hset(keys.children(0), mapping={7: "0 1 nan 0", 8: "garbage"})
        assert sorted(index_children.saved_rows(client, keys)) == [
            (5, 0, 2, 1234.5, 0), (6, 0, 0, 99.0, 1), (far, 0, 1, 7.0, 0)]
    finally:
        client.close()


@on_asyncio
async def test_a_garbled_registration_is_counted_and_registers_nothing(redis_server):
    cluster = Cluster(redis_server.url, CHILDREN)
    try:
        a = await cluster.node(LIST)
        await a.planner.step()
        await a.redis.xadd(a.keys.results, {"kind": "source"})          # no URL
        await a.planner.step()
        assert len(a.planner.service.sources) == 2
        assert a.stats.get("cluster/bad_results") == 1
    finally:
        await cluster.close()
