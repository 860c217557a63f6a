"""Broken feeds and failing servers: the crawl goes on, each source's error is logged once
with its cause and counted under whittle/errors/<kind>, the source backs off, and the
policy is told ok=False."""

import logging
import socket

import numpy as np
import pytest_twisted
from scrapy import signals

from scrapy_whittle.scrapy.middleware import FeedObserverMiddleware, exception_kind
from scrapy_whittle.scrapy.sink import whittle_service
from tests.scrapy.conftest import make_crawler, run, whittle

ERRORS = {"malformed": "malformed", "html": "not_a_feed", "empty": "empty",
          "huge": "too_large", "404": "http_404", "500": "http_500", "slow": "timeout"}
WARNINGS_ONLY = ("nodates", "future", "dupids", "redirect", "latin1")


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest_twisted.ensureDeferred
async def test_bad_feeds_do_not_stop_the_crawl(sim_server, caplog):
    bad = [f"{sim_server.url}/bad/{case}" for case in (*ERRORS, *WARNINGS_ONLY)]
    refused = f"http://127.0.0.1:{closed_port()}/feed.xml"
    good = f"{sim_server.url}/feed/3.xml"
    observed = []
    crawler = make_crawler(
        WHITTLE_SOURCES=[good, *bad, refused], WHITTLE_POLICY="round_robin",
        WHITTLE_BUDGET=14, WHITTLE_PERIOD=0.4, CLOSESPIDER_TIMEOUT=3.5, DOWNLOAD_TIMEOUT=1,
        WHITTLE_MAX_FEED_SIZE=1_000_000, WHITTLE_BACKOFF_BASE=0.5, WHITTLE_BACKOFF_MAX=10,
        # a page at a feed's address is an error here; with site search (the default) it is
        # a site's address, searched: tests/scrapy/test_site_search.py
        WHITTLE_SITE_SEARCH=False)

    def opened(spider):
        policy = whittle_service(crawler).policy
        original = policy.observe

        def spy(obs):
            observed.append(obs)
            original(obs)
        policy.observe = spy

    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
    caplog.set_level(logging.INFO, logger="scrapy_whittle")
    w = whittle(await run(crawler))
    for case, kind in ERRORS.items():
        assert w.get(f"errors/{kind}", 0) >= 1, (case, sorted(w.items()))
        records = [r for r in caplog.records
                   if r.levelno == logging.WARNING and f"/bad/{case})" in r.getMessage()]
        assert len(records) == 1, (case, [r.getMessage() for r in records])
    assert w["errors/connection"] >= 1
    assert not any(f"errors/{k}" in w for k in ("redirect", "http_302"))
    # the good feed is crawled every epoch; failing sources back off (0.5 s, 1 s, 2 s, ...)
    by_source = {}
    for obs in observed:
        for sid, ok in zip(obs.sources, obs.ok, strict=True):
            by_source.setdefault(int(sid), []).append(bool(ok))
    assert all(by_source[0]) and len(by_source[0]) >= 7
    failing = [by_source[1 + i] for i, _ in enumerate(ERRORS) if 1 + i in by_source]
    assert all(not any(v) for v in failing)
    assert max(len(v) for v in failing) < len(by_source[0])
    assert w["warnings"] >= 1                 # no dates / future dates / duplicate ids
    # failed crawls carry no items and no reward
    for obs in observed:
        assert np.all(obs.reward[~obs.ok] == 0)


def test_exception_kinds():
    from twisted.internet.error import ConnectionRefusedError, DNSLookupError, TimeoutError

    assert exception_kind(TimeoutError()) == "timeout"
    assert exception_kind(DNSLookupError()) == "dns"
    assert exception_kind(ConnectionRefusedError()) == "connection"
    assert exception_kind(ValueError()) == "other"


@pytest_twisted.ensureDeferred
async def test_middleware_ignores_non_source_requests():
    from scrapy import Request
    from scrapy.http import Response

    mw = FeedObserverMiddleware.from_crawler(make_crawler(WHITTLE_BUDGET=1,
                                                          WHITTLE_POLICY="round_robin"))
    response = Response("http://127.0.0.1:1/x", status=500)
    assert await mw.process_response(Request("http://127.0.0.1:1/x"), response) is response
    assert await mw.process_exception(Request("http://127.0.0.1:1/x"), ValueError()) is None
