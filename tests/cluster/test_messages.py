"""What a worker tells the planner besides its fetches' results, on a real redis-server (and a
real three-node Redis Cluster), the nodes stepped by hand: an entry's value fed back from the
item pipelines rides the results stream, acknowledged with the checkpoint that holds what it
taught, so a planner killed before that checkpoint leaves it to the next one (and one killed
after leaves nothing to learn twice); a robots.txt ``Crawl-delay`` is kept in Redis with its
message, so a planner killed after it popped the message (or after any checkpoint: none
holds a delay) leaves it to the next one."""

from __future__ import annotations

import asyncio

import pytest

from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.tasks import VALUE, read_value, value_fields
from tests.cluster.harness import PERIOD, SETTINGS, Cluster, on_asyncio
from tests.cluster.test_sharded_state import CutShort

URLS = ["https://a.example/feed.xml", "https://b.example/feed.xml"]
# the planner at the default's decision steps (the harness plans once an epoch)
LEARNING = {**SETTINGS, "WHITTLE_POLICY": "whittle", "WHITTLE_STEP": None}
ACCEPTED = "planner/feedback/accepted"


async def killed(cluster: Cluster, node):
    """``node``'s planner is killed (its lock lives out its TTL); a new process takes over."""
    await node.redis.delete(node.keys.planner)
    heir = await cluster.node(URLS)
    await heir.planner.step()
    assert heir.planner.leader
    return heir


async def fed_back(cluster: Cluster, node, source) -> None:
    """A worker's pipeline feeds back the value of an entry of ``source``; the planner
    reads it."""
    now = cluster.clock.now()
    assert node.report_value(source, 2.0, published=now - PERIOD, at=now)
    await asyncio.wait(list(node._posting))
    await node.planner.step()


@on_asyncio
async def test_a_value_fed_back_survives_a_planner_killed_before_its_checkpoint(redis_server):
    cluster = Cluster(redis_server.url, LEARNING)
    try:
        a = await cluster.node(URLS)
        await a.planner.step()
        await a.planner.checkpoint()
        await fed_back(cluster, a, URLS[1])
        assert a.stats.get(ACCEPTED) == 1
        learnt = a.planner.service.policy.export_rows([1]).tobytes()
        b = await killed(cluster, a)                 # nothing checkpointed since the value
        assert b.stats.get(ACCEPTED) == 1            # learnt again from the results stream
        assert b.planner.service.policy.export_rows([1]).tobytes() == learnt
        await b.planner.checkpoint()                 # holds it: acknowledged
        c = await killed(cluster, b)
        assert c.stats.get(ACCEPTED, 0) == 0         # not learnt twice
        assert c.planner.service.policy.export_rows([1]).tobytes() == learnt
        with redis_server.client() as client:
            assert client.xpending(a.keys.results, "planner")["pending"] == 0
    finally:
        await cluster.close()


@on_asyncio
async def test_a_value_a_checkpoint_cut_short_wrote_into_its_tag_is_not_learnt_twice(
        redis_cluster):
    cluster = Cluster(redis_cluster.url, LEARNING)
    try:
        a = await cluster.node(URLS)
        await a.planner.step()
        await a.planner.checkpoint()
        await fed_back(cluster, a, 1)                # by id, as a pipeline may
        learnt = a.planner.service.policy.export_rows([1]).tobytes()
        store = a.planner.service.store
        assert store.per_tag
        store.client = CutShort(store.client)
        with pytest.raises(RuntimeError):           # the tags' transactions, not the rest
            await a.planner.checkpoint()
        b = await killed(cluster, a)
        assert b.stats.get(ACCEPTED, 0) == 0         # its tag holds it: acknowledged only
        assert b.planner.service.policy.export_rows([1]).tobytes() == learnt
        assert b.planner.service.store.applied == set()
    finally:
        await cluster.close()


@on_asyncio
async def test_a_crawl_delay_survives_a_planner_killed_after_reading_it(any_redis):
    cluster = Cluster(any_redis.url)
    try:
        a = await cluster.node(URLS)
        await a.planner.step()
        assert a.set_crawl_delay("b.example", 120.0)
        await asyncio.wait(list(a._posting))
        await a.planner.step()                       # popped from the inbox
        assert a.planner.service.throttle.allowances.crawl_delays == {"b.example": 120.0}
        await a.planner.checkpoint()
        b = await killed(cluster, a)
        assert b.planner.service.throttle.allowances.crawl_delays == {"b.example": 120.0}
        assert b.planner.hosts.delays["b.example"] == 120.0
        assert b.planner.service.throttle.allowances.delay_of("b.example") == 120.0
    finally:
        await cluster.close()


@on_asyncio
async def test_garbled_feedback_and_delays_are_counted_and_change_nothing(redis_server):
    cluster = Cluster(redis_server.url, LEARNING)
    try:
        a = await cluster.node(URLS)
        await a.planner.step()
        before = a.planner.service.policy.export_rows([0, 1]).tobytes()
        for garbage in ({"kind": VALUE}, {"kind": VALUE, "feedback": "{"},
                        {"kind": VALUE, "feedback": '{"source": true, "value": 1, '
                                                    '"published": 0, "at": 1}'}):
            await a.redis.xadd(a.keys.results, garbage)
        await a.planner.step()
        assert a.stats.get("cluster/bad_results") == 3
        await fed_back(cluster, a, "https://unknown.example/feed.xml")   # judged: refused
        assert a.stats.get("planner/feedback/refused") == 1
        assert a.planner.service.policy.export_rows([0, 1]).tobytes() == before
        await a.planner.checkpoint()                 # (acknowledged: not read again below)
        await a.redis.hset(a.keys.crawl_delays, mapping={"a.example": "nan",
                                                         "c.example": "soon"})
        b = await killed(cluster, a)
        assert b.planner.service.throttle.allowances.crawl_delays == {}
        assert b.stats.get("cluster/bad_results") == 2
    finally:
        await cluster.close()


def test_a_value_message_reads_back_and_other_messages_are_none():
    fields = value_fields("https://a.example/é", 1.5, 10.0, 70.0, None)
    raw = {k.encode(): v.encode() for k, v in fields.items()}
    assert read_value(raw) == {"source": "https://a.example/é", "value": 1.5,
                               "published": 10.0, "at": 70.0, "base_value": None}
    assert read_value({k.encode(): str(v).encode()
                       for k, v in value_fields(3, 1.0, 0.0, 1.0, 0.5).items()})["source"] == 3
    assert read_value({b"kind": b"source", b"url": b"x"}) is None
    assert Keys("p").crawl_delays == "p:crawl_delays"
