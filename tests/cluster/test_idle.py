"""An idle cluster waits in Redis instead of polling it: the planner's read of the results
blocks until the first result (or until something is due), so a crawl at a low rate costs
about the round trips its crawls need, not a read every few milliseconds."""

from __future__ import annotations

import asyncio

from tests.cluster.harness import Cluster, on_asyncio

URLS = [f"https://one.example/{i}.xml" for i in range(4)]


@on_asyncio
async def test_an_idle_planners_read_waits_for_the_first_result_in_one_round_trip(
        redis_server):
    cluster = Cluster(redis_server.url)
    try:
        node = await cluster.node(URLS, host_concurrency=1)
        planner = node.planner
        (crawl,) = (await cluster.crawls(node)).values()
        reads = node.retry.calls["reading the inbox and results"]
        # a long wait, ended by the worker's result (a wait that did not end would fail
        # the test at the timeout below, long before the block's 60 s)
        step = asyncio.ensure_future(planner.step(block=60.0))
        await asyncio.sleep(0)
        await node.not_modified(crawl)
        await asyncio.wait_for(step, 20)
        assert crawl.source not in planner.in_flight          # the result learnt
        assert node.retry.calls["reading the inbox and results"] == reads + 1
    finally:
        await cluster.close()


@on_asyncio
async def test_the_planner_waits_until_something_is_due_and_not_past_a_full_backlog(
        redis_server):
    cluster = Cluster(redis_server.url)
    try:
        node = await cluster.node(URLS, host_concurrency=1)
        planner = node.planner
        await cluster.crawls(node)                 # one crawl out, the host then saturated
        assert 0.0 < planner._idle() <= 0.5       # nothing due before a result
        cluster.advance(2)                         # the epoch's end passed: due now
        assert planner._idle() == 0.0
        planner.backlog = len(planner.in_flight)   # no room: only a result makes some
        assert planner._idle() > 0.0
    finally:
        await cluster.close()
