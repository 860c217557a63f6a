"""Server and feed hints through Scrapy with the add-on: a 429's Retry-After is honoured (and
not retried at once by Scrapy's RetryMiddleware), a feed's <ttl> spaces its fetches."""

from __future__ import annotations

from collections import Counter

import pytest_twisted
from twisted.web.resource import Resource
from twisted.web.server import Site

from scrapy_whittle.service.clock import SimulatedClock
from tests.scrapy.conftest import BASE_SETTINGS, START, run, whittle


class HintedFeeds(Resource):
    """/plain, /ttl (<ttl> 2 h) publish one entry per hour; /busy answers 429 Retry-After 3 h."""

    isLeaf = True

    def __init__(self, clock: SimulatedClock) -> None:
        super().__init__()
        self.clock = clock
        self.hits: Counter[str] = Counter()

    def render_GET(self, request) -> bytes:
        name = request.path.decode().strip("/")
        self.hits[name] += 1
        if name == "busy":
            request.setResponseCode(429)
            request.setHeader("Retry-After", "10800")
            return b"slow down"
        hour = int((self.clock.now() - START) // 3600)
        ttl = "<ttl>120</ttl>" if name == "ttl" else ""
        request.setHeader("Content-Type", "application/rss+xml")
        return (f'<?xml version="1.0"?><rss version="2.0"><channel><title>{name}</title>'
                f"{ttl}<item><title>{hour}</title><guid>{name}-{hour}</guid></item>"
                "</channel></rss>").encode()


@pytest_twisted.ensureDeferred
async def test_retry_after_and_ttl_are_honoured():
    from twisted.internet import reactor

    clock = SimulatedClock(start=START, speed=0.0)
    site = HintedFeeds(clock)
    port = reactor.listenTCP(0, Site(site), interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    try:
        from scrapy.utils.test import get_crawler

        from scrapy_whittle.scrapy.spiders import FeedSpider

        base = {k: v for k, v in BASE_SETTINGS.items()
                if k not in ("SCHEDULER", "DOWNLOADER_MIDDLEWARES")}
        crawler = get_crawler(FeedSpider, dict(
            base, ADDONS={"scrapy_whittle.Addon": 0}, RETRY_ENABLED=True, RETRY_TIMES=2,
            WHITTLE_POLICY="round_robin",
            WHITTLE_SOURCES=[f"{url}/plain", f"{url}/ttl", f"{url}/busy"],
            WHITTLE_BUDGET=3, WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=12,
            # one plan an epoch: with steps, what a held feed leaves unspent goes to the
            # plain one later in the hour, and the hits below count hours
            WHITTLE_STEP=3600,
            WHITTLE_CLOCK=clock, WHITTLE_BACKOFF_BASE=60))
        w = whittle(await run(crawler))
    finally:
        await port.stopListening()
    # every hour for the plain feed; every two for <ttl> 120; every three for Retry-After
    assert site.hits["plain"] == 12
    assert site.hits["ttl"] == 6
    assert site.hits["busy"] == 4 == w["errors/http_429"]        # no immediate retries
    assert w["hints/retry_after"] == 4 and w["hints/ttl"] == 6
