"""Hosts that limit crawlers in a cluster, on a real redis-server: the planner's selection
keeps each host within ``WHITTLE_HOST_LIMITS`` (what a host cannot take goes to others in
the same epoch), the workers' 429s throttle the host's allowance, and the allowance is kept
in Redis so that the next planner starts from it."""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit

import pytest

from scrapy_whittle.cluster.tasks import task_crawl
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from tests.cluster.harness import PERIOD, SETTINGS, START, Cluster, entries, hand_over, on_asyncio

URLS = [f"https://a.example/{i}.xml" for i in range(3)] + \
       [f"https://b.example/{i}.xml" for i in range(2)]


def _hosts(crawls: dict) -> Counter:
    return Counter(urlsplit(c.url).hostname for c in crawls.values())


async def _answer(node, crawls: dict, refuse=()) -> None:
    """Every crawl answered with a feed, those of ``refuse`` (source ids) with a 429."""
    for sid, crawl in crawls.items():
        if sid in refuse:
            await node.crawl_failed(crawl, "http_429", "HTTP 429")
        else:
            await node.feed_fetched(crawl, entries(f"e{sid}-{crawl.epoch}"))
    await node.planner.step()


@on_asyncio
async def test_the_planner_keeps_each_host_within_its_limit(redis_server):
    cluster = Cluster(redis_server.url, {**SETTINGS, "WHITTLE_BUDGET": 3,
                                   "WHITTLE_HOST_LIMITS": {"a.example": 1}})
    try:
        node = await cluster.node(URLS)
        seen = []
        for _ in range(6):
            crawls = await cluster.crawls(node)
            seen.append(_hosts(crawls))
            await _answer(node, crawls)
            cluster.advance()
    finally:
        await cluster.close()
    # one crawl of a.example an epoch, the rest of the budget to b.example's two feeds (the
    # first epoch's single step sends one request to each host not heard from yet)
    assert seen == [Counter({"a.example": 1, "b.example": 1})] + \
        [Counter({"a.example": 1, "b.example": 2})] * 5



@on_asyncio
async def test_the_planner_turns_download_delay_into_an_allowance_per_host(redis_server):
    # DOWNLOAD_DELAY of half an epoch: every host bears two crawls an epoch (the planner's
    # service paces them), so with a budget of 5 a.example's third feed waits its turn
    cluster = Cluster(redis_server.url, {**SETTINGS, "WHITTLE_BUDGET": 5})
    try:
        node = await cluster.node(URLS, download_delay=PERIOD / 2)
        node.planner.hosts.now = cluster.clock.now   # the dispatch delay on the test's clock
        seen = []
        for _ in range(4):
            epoch = Counter()
            for _ in range(10):                  # the planner steps through the epoch
                crawls = await cluster.crawls(node)
                epoch += _hosts(crawls)
                await _answer(node, crawls)
                cluster.advance(0.1)
            seen.append(epoch)
    finally:
        await cluster.close()
    # the planner's plan knows the allowance (not only the dispatch-time delay)
    assert node.planner.service.throttle.allowances.allowance("a.example") == 2
    assert all(e["a.example"] <= 2 and e["b.example"] <= 2 for e in seen), seen
    assert seen[1:] == [Counter({"a.example": 2, "b.example": 2})] * 3, seen

def _one_process_allowance(config) -> float:
    """a.example's allowance in one process after the same answers: two epochs, the first
    in three rounds (the hosts' slow start), the second with sources 0 and 1 refusing."""
    clock = SimulatedClock(start=START)
    service = RecrawlService(config, clock=clock)
    service.open([SourceSpec(url=u) for u in URLS])
    for rounds, refuse in ((3, ()), (1, (0, 1))):
        for _ in range(rounds):
            crawls = {}
            while (crawl := service.next_crawl()) is not None:
                crawls[crawl.source] = crawl
            for sid in sorted(crawls):
                if sid in refuse:
                    service.crawl_failed(crawls[sid], "http_429", "HTTP 429")
                else:
                    service.feed_fetched(crawls[sid], entries(f"e{sid}"))
        clock.advance_to(clock.now() + PERIOD)
    return service.throttle.allowances.allowance("a.example")


@on_asyncio
async def test_a_hosts_429s_throttle_it_and_the_next_planner_keeps_the_allowance(redis_server):
    cluster = Cluster(redis_server.url, {**SETTINGS, "WHITTLE_BUDGET": 5})
    try:
        a = await cluster.node(URLS)
        crawls = {}
        for _ in range(3):      # hosts not heard from yet: one request, doubling per answer
            step = await cluster.crawls(a)
            await _answer(a, step)                  # every source answered well once
            crawls.update(step)
        assert _hosts(crawls) == Counter({"a.example": 3, "b.example": 2})
        cluster.advance()
        crawls = await cluster.crawls(a)
        await _answer(a, crawls, refuse=(0, 1))     # then two of a.example's refuse
        assert a.stats.get("planner/hosts/decreases") == 1
        allowance = a.planner.service.throttle.allowances.allowance("a.example")
        assert allowance == _one_process_allowance(cluster.config) < 3
        b = await hand_over(cluster, a, URLS)
        throttle = b.planner.service.throttle
        assert throttle.allowances.allowance("a.example") == allowance
        assert b.stats.get("planner/hosts/throttled") == 1
        cluster.advance()
        crawls = {}
        for _ in range(3):      # the new planner's slow start for the hosts it has not heard
            step = await cluster.crawls(b)
            await _answer(b, step)
            crawls.update(step)
    finally:
        await cluster.close()
    # a.example held to its allowance by the new planner, b.example's two feeds crawled
    assert _hosts(crawls) == Counter({"a.example": 1, "b.example": 2})


@pytest.mark.slow
def test_two_processes_keep_the_hosts_limit_together(redis_server, tmp_path):
    from tests.cluster.test_cluster import N_FEEDS, PREFIX, no_duplicates, results, start, stop
    from tests.scrapy.conftest import Server
    from tests.waiting import wait_for

    web = Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", "36000",
                 "--latency", "0.02", "--seed", "3")
    client = redis_server.client()

    def crawls_by_epoch() -> dict[int, float]:
        raw = client.hgetall(f"{PREFIX}:epochs")
        return {int(k.decode().split(":")[0]): float(v) for k, v in raw.items()
                if k.decode().endswith(":crawls")}

    names = ["w0", "w1"]
    try:
        # every simulated feed is on one host: 2 crawls an epoch of the budget's 10
        procs = [start(redis_server, web, tmp_path, name,
                       WHITTLE_HOST_LIMITS={"127.0.0.1": 2}) for name in names]
        wait_for(lambda: len(crawls_by_epoch()) >= 6, timeout=120,
                 what="6 epochs checkpointed")
        stop(procs)
        epochs = crawls_by_epoch()
    finally:
        client.close()
        web.stop()
    assert max(epochs.values()) == 2
    items, _ = results(tmp_path, names)
    no_duplicates(items)


@on_asyncio
async def test_workers_send_articles_within_what_the_planner_grants_each_host(redis_server):
    """a.example takes 3 requests an epoch: its feed's one, and two articles the planner
    grants, claimed by the workers as they ask; b.example (no limit) and a host no feed is
    on take articles as their download slots free; the feeds' plan is as without articles."""
    urls = ["https://a.example/0.xml", "https://b.example/0.xml"]
    cluster = Cluster(redis_server.url, {**SETTINGS, "WHITTLE_BUDGET": 2,
                                         "WHITTLE_ARTICLES": True,
                                         "WHITTLE_HOST_LIMITS": {"a.example": 3}})

    async def drained(node, host: str) -> int:
        """Articles to ``host`` the worker lets go when asked until a claim brings none
        (more than 10: unbounded)."""
        sent = 0
        while sent <= 10:
            if node.admit_article(host):
                sent += 1
                continue
            await node.articles.settled()
            if not node.articles.claimed.get(host):
                break
        return sent

    try:
        nodes = [await cluster.node(urls), await cluster.node(urls)]
        for node in nodes:
            node.articles.empty_wait = 0.0       # each refusal claims: no real time here
        sent, feeds = [], Counter()
        for epoch in range(3):
            await nodes[0].planner.step()
            for node in nodes:                   # a task each, and the hosts granted
                got, _ = await node.tasks.take(1, True)
                for task_id, f in got[0][1]:
                    node.tasks.queue.append((task_crawl(f), task_id.decode()))
                crawl = node.next_crawl()
                feeds[urlsplit(crawl.url).hostname] += 1
                assert node.articles.hosts == {"a.example"}
                await _answer(node, {crawl.source: crawl})
            if epoch != 1:                       # the second's grants left unclaimed
                sent.append([await drained(node, "a.example") for node in nodes])
            # never refused: nothing granted, nothing claimed
            assert all(nodes[1].admit_article(h) for h in ("b.example", "c.example") * 4)
            cluster.advance()
    finally:
        await cluster.close()
    # the first worker claimed both grants of an epoch at once, the other found none; the
    # grants left unclaimed were gone the next epoch
    assert sent == [[2, 0]] * 2
    assert feeds == Counter({"a.example": 3, "b.example": 3})
