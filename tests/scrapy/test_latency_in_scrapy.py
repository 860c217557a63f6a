"""Each good answer's latency (Scrapy's ``download_latency``) reaches the service's host
throttle with the answer, in a crawl of the simulated web (one host: 127.0.0.1)."""

from __future__ import annotations

import pytest_twisted

from tests.scrapy.conftest import VirtualWeb, run, whittle
from tests.scrapy.test_crawl import keep_scheduler, on_clock


@pytest_twisted.ensureDeferred
async def test_each_good_answer_s_latency_reaches_its_host_s_watch():
    web = VirtualWeb(n=4, seed=5)
    try:
        crawler = on_clock(web, WHITTLE_SOURCES=web.feeds(4), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=2, WHITTLE_PERIOD=900, WHITTLE_MAX_EPOCHS=6)
        box = keep_scheduler(crawler)
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    watch = box["scheduler"].service.throttle.latency
    (host,) = watch.hosts.values()                 # every feed is on 127.0.0.1
    assert w["fetched"] >= 8
    assert host.answers == w["fetched"]            # a feed or a 304: each told its latency
    assert 0.0 < host.baseline < 5.0               # seconds (DOWNLOAD_TIMEOUT is 5)
    assert w.get("hosts/slowed", 0) == 0
