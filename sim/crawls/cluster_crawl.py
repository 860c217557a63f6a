"""One crawler process on the simulated web, for the cluster tests and benchmark:
``python -m sim.crawls.cluster_crawl REDIS_URL SERVER_URL N ITEMS SECONDS [SETTINGS_JSON]``.

Crawls N feeds of a running ``sim.serve`` for SECONDS as one process of the cluster on
REDIS_URL ("-": a single process, no Redis), appending every item to ITEMS (one JSON line,
flushed and fsynced, with ``pushed``: whether a WebSub delivery brought it, and
``piped_at``: the unix time it reached the pipeline) and, at the end, the process's
``whittle/*`` stats as a last line ``{"stats": {...}}`` (with setting
``CLUSTER_POLLS_AFTER``, seconds: also ``"polls"``, the polls of each source made that long
after the start or later). SETTINGS_JSON overrides settings."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter

from scrapy import signals
from scrapy.crawler import CrawlerProcess

from scrapy_whittle.scrapy.meta import META_SOURCE_URL
from scrapy_whittle.scrapy.spiders import FeedSpider


class SyncedItems:
    def __init__(self, path: str) -> None:
        self.file = open(path, "a", encoding="utf-8")

    @classmethod
    def from_crawler(cls, crawler):
        obj = cls(crawler.settings["CLUSTER_ITEMS"])
        obj.fsync = crawler.settings.getbool("CLUSTER_FSYNC", True)
        crawler.signals.connect(obj.closed, signal=signals.spider_closed)
        obj.crawler = crawler
        obj.polls, obj.polls_since = None, None
        if crawler.settings.get("CLUSTER_POLLS_AFTER") is not None:
            obj.polls = Counter()
            obj.polls_since = time.time() + crawler.settings.getfloat("CLUSTER_POLLS_AFTER")
            crawler.signals.connect(obj.polled, signal=signals.response_received)
        return obj

    def polled(self, response, request, spider):
        if "whittle_crawl" in request.meta and time.time() >= self.polls_since:
            self.polls[request.meta.get(META_SOURCE_URL, request.url)] += 1

    def process_item(self, item):
        row = {**item, "piped_at": time.time()}
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        if self.fsync:       # what a crash test reads must be on disk (benchmarks skip it)
            os.fsync(self.file.fileno())
        return item

    def closed(self, spider):
        stats = {k: v for k, v in self.crawler.stats.get_stats().items()
                 if k.startswith("whittle/")}
        last = {"stats": stats, "pid": os.getpid()}
        if self.polls is not None:
            last["polls"] = dict(self.polls)
        self.file.write(json.dumps(last) + "\n")
        self.file.close()


class ClusterFeedSpider(FeedSpider):
    """``FeedSpider`` whose items say whether a WebSub delivery brought them."""

    def parse_entry(self, response, entry, value):
        item = super().parse_entry(response, entry, value)
        item["pushed"] = "whittle-push" in response.flags
        return item


def main(argv: list[str]) -> int:
    redis_url, server, n, items, seconds, *extra = argv
    feeds = [f"{server}/feed/{i}.xml" for i in range(int(n))]
    settings = {
        "SCHEDULER": "scrapy_whittle.WhittleScheduler",
        "DOWNLOADER_MIDDLEWARES": {"scrapy_whittle.FeedObserverMiddleware": 540},
        "ITEM_PIPELINES": {f"{__name__}.SyncedItems": 100},
        "WHITTLE_SOURCES": feeds, "WHITTLE_BUDGET": 10, "WHITTLE_PERIOD": 0.5,
        "WHITTLE_REDIS_URL": None if redis_url == "-" else redis_url,
        "WHITTLE_REDIS_PREFIX": "test:{spider}",
        "WHITTLE_REDIS_LEASE": 2.0, "WHITTLE_REDIS_LOCK_TTL": 1.5,
        "WHITTLE_CHECKPOINT_INTERVAL": 0.3, "WHITTLE_ENGAGEMENT_SCALE": 1000,
        "WHITTLE_LOGSTATS_INTERVAL": 0, "LOGSTATS_INTERVAL": 0, "LOG_LEVEL": "INFO",
        "CLUSTER_ITEMS": items, "CLOSESPIDER_TIMEOUT": float(seconds),
        "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 5, "CONCURRENT_REQUESTS": 8,
        "TELNETCONSOLE_ENABLED": False,
    }
    if extra:
        settings.update(json.loads(extra[0]))
    process = CrawlerProcess(settings)
    process.crawl(ClusterFeedSpider)
    process.start()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
