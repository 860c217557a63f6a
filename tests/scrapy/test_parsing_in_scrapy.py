"""Feed parsing inside a crawl: the parse pool is built from the settings, takes hostile
feeds (20,000 entries, a 1 MB title) off the reactor thread, counts what the limits changed
under whittle/warnings/<notice>, and is closed with the engine."""

from __future__ import annotations

import pytest
import pytest_twisted
from scrapy import signals

from scrapy_whittle.scrapy.middleware import FeedObserverMiddleware
from scrapy_whittle.scrapy.scheduler import WhittleScheduler
from scrapy_whittle.service.config import InvalidSetting
from tests.scrapy.conftest import make_crawler, run, whittle

GOOD = {"WHITTLE_BUDGET": 2, "WHITTLE_POLICY": "round_robin",
        "WHITTLE_SOURCES": ["http://127.0.0.1:1/a.xml"]}


@pytest.mark.parametrize(("name", "value", "fragment"), [
    ("WHITTLE_FEED_PARSER", "lxml", "is not usable: unknown feed parser"),
    ("WHITTLE_PARSE_WORKERS", -1, "must be >= 0"),
    ("WHITTLE_PARSE_WORKERS", 1.5, "must be an integer"),
    ("WHITTLE_PARSE_INLINE_MAX_BYTES", -1, "must be >= 0"),
    ("WHITTLE_PARSE_TIMEOUT", 0, "must be > 0"),
    ("WHITTLE_MAX_FEED_ENTRIES", 0, "must be >= 1"),
    ("WHITTLE_MAX_FEED_ENTRIES", 50_000, "must be <= WHITTLE_MAX_ENTRIES_PER_SOURCE"),
    ("WHITTLE_MAX_FIELD_LENGTH", 10, "must be >= 64"),
])
def test_bad_parsing_settings_name_setting_and_value(name, value, fragment):
    crawler = make_crawler(**{**GOOD, name: value})
    with pytest.raises(InvalidSetting) as info:
        WhittleScheduler.from_crawler(crawler)
    assert name in str(info.value) and repr(value) in str(info.value)
    assert fragment in str(info.value)
    with pytest.raises(InvalidSetting):
        FeedObserverMiddleware.from_crawler(make_crawler(**{**GOOD, name: value}))


def test_the_pool_follows_the_settings():
    crawler = make_crawler(**GOOD, WHITTLE_FEED_PARSER="feedparser", WHITTLE_PARSE_WORKERS=3,
                           WHITTLE_MAX_ENTRIES_PER_SOURCE=300, WHITTLE_MAX_FIELD_LENGTH=100,
                           WHITTLE_MAX_FEED_SIZE=5000)
    pool = FeedObserverMiddleware.from_crawler(crawler).pool
    assert (pool.parser, pool.workers, pool.inline_max_bytes) == ("feedparser", 3, 8 * 1024)
    assert (pool.limits.max_entries, pool.limits.max_field_chars, pool.limits.max_bytes) == \
        (300, 100, 5000)


@pytest_twisted.ensureDeferred
async def test_hostile_feeds_are_parsed_in_a_worker_and_their_limits_counted(sim_server):
    good = f"{sim_server.url}/feed/3.xml"
    many, long = f"{sim_server.url}/bad/many", f"{sim_server.url}/bad/longtitle"
    crawler = make_crawler(WHITTLE_SOURCES=[good, many, long], WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=3, WHITTLE_PERIOD=0.5, CLOSESPIDER_TIMEOUT=2.5,
                           WHITTLE_MAX_ENTRIES_PER_SOURCE=500, WHITTLE_PARSE_WORKERS=1)
    box = {}

    def opened(spider):
        box["middlewares"] = crawler.engine.downloader.middleware.middlewares
    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
    w = whittle(await run(crawler))
    (mw,) = [m for m in box["middlewares"] if isinstance(m, FeedObserverMiddleware)]
    assert w["warnings/too_many_entries"] >= 1 and w["warnings/field_too_long"] >= 1
    assert mw.pool.offloaded >= 2 and mw.pool.inline >= 1   # 1.4 MB and 1.2 MB: in a worker
    assert not any(k.startswith("errors/") for k in w), w
    # 500 entries kept of /bad/many at the first crawl: all new
    assert w["new_items"] >= 500
    assert mw.pool._closed and mw.pool._workers == []        # closed at engine_stopped
