"""A crawl to kill: ``python -m tests.scrapy.crash_crawl URL N JOBDIR ITEMS DUMP SECONDS
[articles]``.

Crawls N feeds of a running ``sim.serve`` with JOBDIR state, appending every item to ITEMS
(one JSON line, flushed and fsynced: an item in the file was received by a pipeline; a
replayed one has ``"replayed": true``), every item to ``ITEMS.export`` through Scrapy's own
feed export (``FEEDS``, appending), and every new entry a fetch found to ``ITEMS.found``
before the spider sees it; once the state is restored, it writes to DUMP what the service
holds (policy rows, validators, back-offs), for ``test_crash.py`` to compare with the
checkpoint it killed the previous run after. With ``articles``, ``WHITTLE_ARTICLES`` is on:
an entry's item waits for its page. With ``sites``, the sources are the sites of ``sim.serve
--sites`` (its ``/sites.txt``; N is not read), searched for their feeds, one request to
127.0.0.1 at a time every 0.05 s (``DOWNLOAD_DELAY``) so that a search takes a while.
"""

from __future__ import annotations

import json
import os
import sys
from urllib.request import urlopen

import numpy as np
from scrapy import signals
from scrapy.crawler import CrawlerProcess

from scrapy_whittle.scrapy.sink import whittle_service
from scrapy_whittle.scrapy.spiders import FeedSpider


class SyncedItems:
    """Writes each item as a JSON line and fsyncs it before the next one."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "a", encoding="utf-8")

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings["CRASH_ITEMS"])

    def process_item(self, item):
        self.file.write(json.dumps(dict(item)) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())
        return item

    def close_spider(self):
        self.file.close()


class FoundEntries:
    """A downloader middleware below FeedObserverMiddleware: records each new entry a feed
    response brought (source URL, entry key), one unbuffered write per response, before the
    spider makes items of them."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler.settings["CRASH_ITEMS"] + ".found")

    def process_response(self, request, response):
        entries = request.meta.get("whittle_entries")
        if entries and "whittle_replay" not in request.meta:
            url = request.meta["whittle_source_url"]
            os.write(self.fd, "".join(json.dumps([url, e.key]) + "\n"
                                      for e in entries).encode())
        return response


class CrashSpider(FeedSpider):
    def parse_entry(self, response, entry, value):
        item = super().parse_entry(response, entry, value)
        item["replayed"] = "whittle_replay" in response.meta
        return item


class DumpRestored:
    """At spider_opened (the state is restored by then), write what the service holds."""

    def __init__(self, crawler) -> None:
        self.crawler = crawler
        crawler.signals.connect(self.opened, signal=signals.spider_opened)

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def opened(self, spider):
        service = whittle_service(self.crawler)
        n = len(service.sources)
        ids = np.arange(n)
        rows = service.policy.export_rows(ids)
        size = rows.dtype.itemsize
        raw = rows.tobytes()
        dump = {"n": n, "origin": service.origin,
                "policy_rows": [raw[i * size:(i + 1) * size].hex() for i in range(n)],
                "entries": [b.hex() for b in service.memory.export_keys(ids)],
                "etag": service.state.etag.get_many(ids),
                "retry_at": service.sources.retry_at.tolist(),
                "failures": service.sources.failures.tolist()}
        with open(self.crawler.settings["CRASH_DUMP"], "w", encoding="utf-8") as f:
            json.dump(dump, f)


def main(argv: list[str]) -> int:
    server, n, jobdir, items, dump, seconds, *options = argv
    feeds = [f"{server}/feed/{i}.xml" for i in range(int(n))]
    extra = {}
    # "articles": every entry's page fetched and extracted into its item (WHITTLE_ARTICLES)
    if "articles" in options:
        extra["WHITTLE_ARTICLES"] = True
    # "sites": the sources are sites' addresses, searched for their feeds, slowly
    if "sites" in options:
        with urlopen(f"{server}/sites.txt") as answer:
            feeds = answer.read().decode().split()
        extra.update(DOWNLOAD_DELAY=0.05, DOWNLOAD_DELAY_JITTER=0)
    process = CrawlerProcess({
        **extra,
        "SCHEDULER": "scrapy_whittle.WhittleScheduler",
        "DOWNLOADER_MIDDLEWARES": {"scrapy_whittle.FeedObserverMiddleware": 540,
                                   f"{__name__}.FoundEntries": 530},
        "SPIDER_MIDDLEWARES": {"scrapy_whittle.DeliveryMiddleware": 10},
        "FEEDS": {items + ".export": {"format": "jsonlines", "overwrite": False}},
        "ITEM_PIPELINES": {f"{__name__}.SyncedItems": 100},
        "EXTENSIONS": {f"{__name__}.DumpRestored": 0},
        "WHITTLE_SOURCES": feeds, "WHITTLE_BUDGET": 20, "WHITTLE_PERIOD": 0.25,
        "WHITTLE_CHECKPOINT_INTERVAL": 0.2, "WHITTLE_ENGAGEMENT_SCALE": 1000,
        "WHITTLE_LOGSTATS_INTERVAL": 0, "LOGSTATS_INTERVAL": 0, "LOG_LEVEL": "INFO",
        "JOBDIR": jobdir, "CRASH_ITEMS": items, "CRASH_DUMP": dump,
        "CLOSESPIDER_TIMEOUT": float(seconds), "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 5,
        "CONCURRENT_REQUESTS": 16, "TELNETCONSOLE_ENABLED": False,
    })
    process.crawl(CrashSpider)
    process.start()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
