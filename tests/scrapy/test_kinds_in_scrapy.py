"""Sources of every kind in one crawl through Scrapy: ``sim.serve --kinds mix`` serves RSS,
Atom, JSON Feed and news sitemaps at look-alike URLs, and a sitemap index whose children
(gzip sitemaps) are in no source list. Every kind yields items, the index's children join
the crawl as sources, the policy learns every source's rate, and conditional GET saves the
body of an unchanged source of every kind. Hostile bodies of the new kinds are counted errors
and the crawl goes on."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import numpy as np
import pytest_twisted
from scrapy import signals
from twisted.web.resource import Resource
from twisted.web.server import Site

from scrapy_whittle.scrapy.sink import whittle_service
from sim.web.kinds import INDEX_PATH
from tests.scrapy.conftest import START, VirtualWeb, make_crawler, run, whittle


def kind_of(web: VirtualWeb, url: str) -> str:
    if url.endswith(INDEX_PATH):
        return "index"
    i = int(url.rsplit("/", 1)[1].split(".")[0])
    kind = web.server.resource.kinds.kind(i)
    return "indexed sitemap" if web.server.resource.kinds.indexed(i) else kind


@pytest_twisted.ensureDeferred
async def test_every_kind_is_crawled_and_learned():
    n = 32
    web = VirtualWeb(n=n, seed=3, kinds="mix")
    kinds = web.server.resource.kinds
    listed = [url for _name, url in kinds.listed(web.url)]
    assert not any("/sitemap/" in url for url in listed)     # found only through the index
    items: dict[str, int] = defaultdict(int)
    box = {}
    try:
        crawler = make_crawler(WHITTLE_SOURCES=listed, WHITTLE_CLOCK=web.clock,
                               WHITTLE_POLICY="whittle", WHITTLE_BUDGET=8,
                               WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=30,
                               CONCURRENT_REQUESTS=16, CONCURRENT_REQUESTS_PER_DOMAIN=16)

        def scraped(item, response, spider):
            items[kind_of(web, item["source"])] += 1

        def opened(spider):
            box["service"] = whittle_service(crawler)

        crawler.signals.connect(scraped, signal=signals.item_scraped, weak=False)
        crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
        stats = await run(crawler)
    finally:
        await web.stop()
    w = whittle(stats)
    assert stats["finish_reason"] == "finished"
    assert not [k for k in w if k.startswith("errors/")], w
    # items of every kind, the children of the index included
    assert set(items) == {"rss", "atom", "json", "sitemap", "indexed sitemap"}, dict(items)
    assert all(count > 0 for count in items.values())
    indexed = [i for i in range(n) if kinds.indexed(i)]
    assert w["sources/named"] >= len(indexed)
    service = box["service"]
    ids = {i: service.sources.id_of(kinds.url(web.url, i)) for i in range(n)}
    assert all(ids[i] is not None for i in indexed)
    # learning: every source of every kind fetched with entries taught the rate estimator
    rates = service.policy.rate_estimator()
    true = web.server.web.params.rate / 3600.0                 # per second
    fetched = [i for i in range(n) if service.state.crawls[ids[i]] > 0]
    by_kind = defaultdict(list)
    for i in fetched:
        by_kind[kinds.kind(i)].append(i)
    assert set(by_kind) == {"rss", "atom", "json", "sitemap"}
    for kind, sources in by_kind.items():
        sids = np.array([ids[i] for i in sources])
        assert (rates.updates[sids] > 0).all(), kind
        est = rates.mean()[sids]
        # the estimate follows the truth: a source publishing faster is estimated faster
        # (rank correlation over the kind's sources), whatever the kind
        if len(sources) >= 4:
            rank = np.corrcoef(np.argsort(np.argsort(est)),
                               np.argsort(np.argsort(true[sources])))[0, 1]
            assert rank > 0, (kind, est, true[sources])


@pytest_twisted.ensureDeferred
async def test_conditional_get_works_for_every_kind():
    """Sources fetched every five minutes (faster than they publish): an unchanged source of
    every kind, and the index, answer 304 to the validators of its previous answer."""
    web = VirtualWeb(n=8, seed=3, kinds="mix")
    listed = [url for _name, url in web.server.resource.kinds.listed(web.url)]
    assert len(listed) == 8                                  # 7 sources and the index
    statuses: dict[str, list[int]] = defaultdict(list)
    validated: dict[str, list[bool]] = defaultdict(list)           # per URL
    try:
        crawler = make_crawler(WHITTLE_SOURCES=listed, WHITTLE_CLOCK=web.clock,
                               WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=9,
                               WHITTLE_PERIOD=300, WHITTLE_MAX_EPOCHS=24)

        def received(response, request, spider):
            if "whittle_crawl" in request.meta:
                kind = kind_of(web, response.url)
                statuses[kind].append(response.status)
                validated[response.url].append(request.headers.get("If-None-Match")
                                               is not None)

        crawler.signals.connect(received, signal=signals.response_received, weak=False)
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    assert set(statuses) == {"rss", "atom", "json", "sitemap", "indexed sitemap", "index"}
    for kind, codes in statuses.items():
        assert codes[0] == 200 and 304 in codes, (kind, codes)
    for url, sent in validated.items():      # every fetch after the first is conditional
        assert not sent[0] and all(sent[1:]), (url, sent)
    assert w["not_modified"] == sum(c.count(304) for c in statuses.values())


class HostileKinds(Resource):
    """A good JSON Feed beside hostile bodies of the new kinds."""

    isLeaf = True

    def __init__(self, clock) -> None:
        super().__init__()
        self.clock = clock
        self.bodies = {
            "bomb.xml.gz": gzip.compress(b"<urlset>" + b" " * (4 * 1024 * 1024) + b"</urlset>"),
            "cut.xml.gz": gzip.compress(b"<urlset><url><loc>https://a/</loc></url></urlset>")[:-9],
            "deep.json": b'{"version": "https://jsonfeed.org/version/1.1", "x": '
                         + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "objects.json": b'{"version": "https://jsonfeed.org/version/1.1", "items": ['
                            + b",".join([b"{}"] * 200_000) + b"]}",
            "plain.json": b'{"title": "not a feed"}',
        }

    def render_GET(self, request) -> bytes:
        name = request.path.decode().strip("/")
        if name == "good.json":
            hour = int((self.clock.now() - START) // 3600)
            return json.dumps({"version": "https://jsonfeed.org/version/1.1", "items": [
                {"id": f"h{hour}", "url": f"https://n.example/{hour}"}]}).encode()
        return self.bodies[name]


@pytest_twisted.ensureDeferred
async def test_hostile_bodies_of_the_new_kinds_are_counted_errors_and_the_crawl_goes_on():
    from twisted.internet import reactor

    from scrapy_whittle.service.clock import SimulatedClock

    clock = SimulatedClock(start=START, speed=0.0)
    site = HostileKinds(clock)
    port = reactor.listenTCP(0, Site(site), interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    names = ["good.json", *site.bodies]
    try:
        crawler = make_crawler(WHITTLE_SOURCES=[f"{url}/{n}" for n in names],
                               WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=len(names),
                               WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=3, WHITTLE_CLOCK=clock,
                               WHITTLE_MAX_FEED_SIZE=1024 * 1024)
        w = whittle(await run(crawler))
    finally:
        await port.stopListening()
    assert w["new_items"] >= 1 and w["fetched"] >= 3       # the good feed, every epoch
    assert w["errors/too_large"] >= 2                       # the bomb, the 200,000 objects
    assert w["errors/malformed"] >= 2                       # the cut gzip, the deep JSON
    assert w["errors/not_a_feed"] >= 1
