"""Bare Scrapy, the benchmarks' reference: its settings and a spider that downloads the same
URLs round-robin with a fixed number in flight, doing nothing else with them but what a
subclass's ``parse`` adds (``sim.bench.throughput``: nothing; ``sim.bench.articles``: the
extractor)."""

from __future__ import annotations

TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"


def bare_settings(concurrency: int) -> dict:
    """Scrapy's settings for a timed crawl: ``concurrency`` requests in flight on one host,
    nothing else on (robots.txt, cookies, retries, the progress line)."""
    return {
        "TWISTED_REACTOR": TWISTED_REACTOR, "LOG_LEVEL": "ERROR", "TELNETCONSOLE_ENABLED": False,
        "CONCURRENT_REQUESTS": concurrency, "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        "ROBOTSTXT_OBEY": False, "COOKIES_ENABLED": False, "LOG_INSTALL_ROOT_HANDLER": False,
        "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 30, "LOGSTATS_INTERVAL": 0,
    }


def round_robin_spider(urls: list[str], concurrency: int):
    """A spider class (``name`` "bare") that keeps ``concurrency`` requests of ``urls`` in
    flight, in turn: its ``parse`` asks for the next one (a subclass's ``parse`` does its work
    and yields ``self.next_request()``)."""
    import scrapy

    class RoundRobin(scrapy.Spider):
        name = "bare"
        position = 0

        def next_request(self):
            url = urls[self.position % len(urls)]
            self.position += 1
            return scrapy.Request(url, dont_filter=True, callback=self.parse)

        async def start(self):
            for _ in range(concurrency):
                yield self.next_request()

        def parse(self, response):
            yield self.next_request()

    return RoundRobin
