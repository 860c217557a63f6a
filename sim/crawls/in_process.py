"""Crawls run in the benchmark's own process, on Scrapy's asyncio reactor: a coroutine that
makes them one after another (``scrapy.crawler.Crawler(...).crawl()``, on the simulated
clock), run to its end."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from sim.crawls.bare_scrapy import TWISTED_REACTOR

T = TypeVar("T")


def run_crawls(crawls: Callable[[], Awaitable[T]]) -> T:
    """Start the reactor, await ``crawls()`` on it, stop it; what ``crawls()`` returned."""
    from scrapy.crawler import CrawlerProcess
    from scrapy.utils.reactor import install_reactor
    from twisted.internet import defer

    install_reactor(TWISTED_REACTOR)
    process = CrawlerProcess({"TWISTED_REACTOR": TWISTED_REACTOR, "LOG_LEVEL": "ERROR"})
    from twisted.internet import reactor

    box: dict[str, T] = {}

    async def run():
        try:
            box["result"] = await crawls()
        finally:
            reactor.stop()

    reactor.callWhenRunning(lambda: defer.ensureDeferred(run()))
    process.start(stop_after_crawl=False)
    return box["result"]
