"""A cluster process to kill while its items are in the pipelines:
``python -m tests.cluster.delivery_crawl REDIS_URL SERVER_URL N ITEMS SECONDS DELAY
[articles]``.

Crawls N feeds of a running ``sim.serve`` as one process of the cluster on REDIS_URL, with
``DeliveryMiddleware`` on and a pipeline that holds every item DELAY seconds (so that items
queue up in the pipelines); every item a pipeline received is appended to ITEMS (flushed and
fsynced, ``tests/scrapy/crash_crawl.py``'s ``SyncedItems``), every new entry a fetch found to
``ITEMS.found`` before the spider sees it (its ``FoundEntries``)."""

from __future__ import annotations

import asyncio
import sys

from scrapy.crawler import CrawlerProcess

from scrapy_whittle.scrapy.spiders import FeedSpider


class SlowPipeline:
    def __init__(self, delay: float) -> None:
        self.delay = delay

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings.getfloat("SLOW_ITEMS"))

    async def process_item(self, item):
        await asyncio.sleep(self.delay)
        return item


class ReplaySpider(FeedSpider):
    def parse_entry(self, response, entry, value):
        item = super().parse_entry(response, entry, value)
        item["replayed"] = "whittle_replay" in response.meta
        return item


def main(argv: list[str]) -> int:
    redis_url, server, n, items, seconds, delay, *options = argv
    # "articles": every entry's page fetched and extracted into its item (WHITTLE_ARTICLES)
    articles = {"WHITTLE_ARTICLES": True} if "articles" in options else {}
    process = CrawlerProcess({
        **articles,
        "SCHEDULER": "scrapy_whittle.WhittleScheduler",
        "DOWNLOADER_MIDDLEWARES": {"scrapy_whittle.FeedObserverMiddleware": 540,
                                   "tests.scrapy.crash_crawl.FoundEntries": 530},
        "SPIDER_MIDDLEWARES": {"scrapy_whittle.DeliveryMiddleware": 10},
        "ITEM_PIPELINES": {f"{__name__}.SlowPipeline": 50,
                           "tests.scrapy.crash_crawl.SyncedItems": 100},
        "WHITTLE_SOURCES": [f"{server}/feed/{i}.xml" for i in range(int(n))],
        "WHITTLE_BUDGET": 10, "WHITTLE_PERIOD": 0.5, "WHITTLE_REDIS_URL": redis_url,
        "WHITTLE_REDIS_PREFIX": "test:{spider}", "WHITTLE_REDIS_LEASE": 2.0,
        "WHITTLE_REDIS_LOCK_TTL": 1.5, "WHITTLE_CHECKPOINT_INTERVAL": 0.3,
        "WHITTLE_ENGAGEMENT_SCALE": 1000, "WHITTLE_LOGSTATS_INTERVAL": 0,
        "LOGSTATS_INTERVAL": 0, "LOG_LEVEL": "INFO", "CRASH_ITEMS": items,
        "SLOW_ITEMS": float(delay), "CLOSESPIDER_TIMEOUT": float(seconds),
        "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 5, "CONCURRENT_REQUESTS": 8,
        "TELNETCONSOLE_ENABLED": False,
    })
    process.crawl(ReplaySpider)
    process.start()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
