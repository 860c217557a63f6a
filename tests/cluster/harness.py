"""Nodes of one cluster crawl stepped by hand in one test process, on the reactor's asyncio
loop: the planner's rounds and the workers' reports called directly, no loop running."""

from __future__ import annotations

import asyncio
import functools

import pytest_twisted
from twisted.internet.defer import Deferred

from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.cluster.tasks import task_crawl, task_fields
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.types import DictStats

START = 1_700_000_000.0
PERIOD = 600.0
# one plan an epoch: these tests count in epochs (the default's steps:
# tests/service/test_steps.py)
SETTINGS = {"WHITTLE_BUDGET": 2, "WHITTLE_PERIOD": PERIOD, "WHITTLE_STEP": PERIOD,
            "WHITTLE_POLICY": "round_robin",
            "WHITTLE_RETIRE_AFTER": 10 * PERIOD, "WHITTLE_RETIRE_PROBE": 20 * PERIOD}


def on_asyncio(test):
    """The coroutine test as an asyncio task on the reactor's loop (the Redis client's calls
    need one)."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        yield Deferred.fromFuture(asyncio.ensure_future(test(*args, **kwargs)))
    return pytest_twisted.inlineCallbacks(run)


class Cluster:
    """Nodes of one crawl on one clock, stepped by hand: no loop runs."""

    def __init__(self, url: str, settings=SETTINGS) -> None:
        self.url = url
        self.config = WhittleConfig.from_settings(settings)
        self.clock = SimulatedClock(start=START)
        self.nodes: list[ClusterNode] = []

    async def node(self, urls, **options) -> ClusterNode:
        node = ClusterNode(self.config, redis_url=self.url, prefix="test",
                           specs=[SourceSpec(url=u) for u in urls], stats=DictStats(),
                           clock=self.clock, **options)
        await node._ensure_groups()
        self.nodes.append(node)
        return node

    async def crawls(self, node: ClusterNode) -> dict:
        """The planner's step, then the crawls it handed out, by source id."""
        await node.planner.step()
        got = await node.redis.xreadgroup("workers", node.consumer, {node.keys.tasks: ">"},
                                          count=100)
        for task_id, f in (got[0][1] if got else ()):
            node.tasks.queue.append((task_crawl(f), task_id.decode()))
        out = {}
        while (crawl := node.next_crawl()) is not None:
            out[crawl.source] = crawl
        return out

    def advance(self, epochs: float = 1.0) -> None:
        self.clock.advance_to(self.clock.now() + epochs * PERIOD)

    async def close(self) -> None:
        for node in self.nodes:
            await node.redis.aclose()
            node.sync_redis.close()


async def take(node: ClusterNode, crawl) -> str:
    """``crawl`` made a task on the stream and taken by ``node`` (its report acknowledges a
    task that is pending, as a real one is); returns the task's id."""
    await node._ensure_groups()
    await node.redis.xadd(node.keys.tasks, task_fields(crawl))
    got = await node.redis.xreadgroup("workers", node.consumer, {node.keys.tasks: ">"},
                                      count=1)
    task_id = got[0][1][0][0].decode()
    node.tasks.taken.setdefault(crawl.cid, []).append(task_id)
    return task_id


def entries(*keys):
    return [FeedEntry(key=k, title=None, link=None, published=None, engagement=None)
            for k in keys]


async def hand_over(cluster: Cluster, old: ClusterNode, urls) -> ClusterNode:
    """``old``'s planner resigns (a checkpoint); a new node with list ``urls`` takes over."""
    await old.planner.resign()
    new = await cluster.node(urls)
    await new.planner.step()
    assert new.planner.leader
    return new
