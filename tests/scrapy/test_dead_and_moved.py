"""Feeds that move or die, crawled offline (``sim.web.faults.FeedFates``): a permanent redirect
moves its source within one crawl and the list still naming the old URL makes no twin; 410
retires a source at once, a run of 404s retires it; a retired feed is probed outside the
budget and comes back when it revives."""

import math

import pytest_twisted
from scrapy import signals

from scrapy_whittle.report.data import ReadOnlyStore
from scrapy_whittle.service.state.store import FILE_NAME
from tests.scrapy.conftest import VirtualWeb, make_crawler, run, whittle

HOUR = 3600.0


@pytest_twisted.ensureDeferred
async def test_moved_and_dead_feeds_in_one_crawl(tmp_path):
    fates = {0: ("301", math.inf), 1: ("308", math.inf), 2: ("410", math.inf),
             3: ("404", math.inf), 4: ("410", 2 * HOUR), 5: ("302", math.inf)}
    web = VirtualWeb(n=6, seed=3, fates=fates)
    listing = tmp_path / "feeds.txt"
    listing.write_text("\n".join(web.feeds(6)) + "\n")     # the old URLs, for good
    box = {}
    try:
        crawler = make_crawler(WHITTLE_CLOCK=web.clock, WHITTLE_SOURCES=str(listing),
                               WHITTLE_SOURCES_REFRESH=900, WHITTLE_POLICY="round_robin",
                               WHITTLE_BUDGET=6, WHITTLE_PERIOD=900, WHITTLE_MAX_EPOCHS=16,
                               WHITTLE_RETIRE_PROBE=HOUR, WHITTLE_RETIRE_404_AFTER=1800,
                               JOBDIR=str(tmp_path / "job"))
        crawler.signals.connect(lambda spider: box.update(s=crawler.engine.scheduler),
                                signal=signals.spider_opened, weak=False)
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    service = box["s"].service
    answered = web.server.resource.fates.answered
    # moved within one crawl: only the first request met the redirect
    assert service.url(0) == f"{web.url}/moved/0.xml" and answered[0] == 1
    assert service.url(1) == f"{web.url}/moved/1.xml" and answered[1] == 1
    assert service.url(5) == web.feeds(6)[5] and answered[5] > 1       # 302: not moved
    assert w["sources/moved"] == 2 and len(service.sources) == 6      # no twin
    # 410 at once (then a probe an hour), a run of 404s, a revived feed back in the plan
    src = service.sources
    assert src.retired[2] and src.retired[3] and not src.retired[4]
    assert service.state.crawls[2] <= 1 + 4 < service.state.crawls[5]
    assert w["sources/retired"] == 3 and w["sources/revived"] == 1
    assert w["probes/crawls"] >= 3
    store = ReadOnlyStore(tmp_path / "job" / FILE_NAME)
    saved = store.load()
    store.close()
    assert saved.sources["url"][0] == f"{web.url}/moved/0.xml"
    assert (web.feeds(6)[0], 0) in saved.aliases


def test_only_the_leading_permanent_redirects_move_a_source():
    from scrapy import Request

    from scrapy_whittle.scrapy.middleware import moved_to

    def chain(reasons, url="https://d/feed"):
        urls = ["https://a/feed", "https://b/feed", "https://c/feed"][:len(reasons)]
        return Request(url, meta={"redirect_urls": urls, "redirect_reasons": reasons})

    assert moved_to(chain([301])) == "https://d/feed"
    assert moved_to(chain([308, 301])) == "https://d/feed"
    assert moved_to(chain([301, 302])) == "https://b/feed"      # then a temporary hop
    assert moved_to(chain([302, 301])) is None
    assert moved_to(chain(["meta refresh"])) is None
    assert moved_to(Request("https://a/feed")) is None


@pytest_twisted.ensureDeferred
async def test_the_sources_listing_shows_retired_and_moved_sources(tmp_path):
    from scrapy_whittle.report import load_report
    from scrapy_whittle.report.page import write
    from scrapy_whittle.report.table import text

    web = VirtualWeb(n=3, seed=4, fates={0: ("301", math.inf), 1: ("410", math.inf)})
    try:
        crawler = make_crawler(WHITTLE_CLOCK=web.clock, WHITTLE_SOURCES=web.feeds(3),
                               WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=3,
                               WHITTLE_PERIOD=900, WHITTLE_MAX_EPOCHS=2,
                               JOBDIR=str(tmp_path / "job"))
        await run(crawler)
    finally:
        await web.stop()
    report = load_report(tmp_path / "job")
    listing = text(report)
    assert "# 1 sources retired" in listing
    assert f"source 0 moved to {web.url}/moved/0.xml (was {web.feeds(3)[0]})" in listing
    assert "retired: next probe" in listing
    page = (write(report, tmp_path / "report")).read_text()
    assert "Retired and moved sources" in page and f"{web.url}/moved/0.xml" in page
