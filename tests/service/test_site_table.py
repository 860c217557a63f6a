"""The sites searched and their feeds: kept in JOBDIR across restarts, put in the sites' place
in a source list; and in the service, a site's address giving way to its feeds."""

import numpy as np

from scrapy_whittle.feeds.finder import FoundFeed
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.sources.site_table import SiteTable
from scrapy_whittle.service.types import Crawl

SITE = "https://news.example.com/"
FEEDS = [FoundFeed("https://news.example.com/world.rss", "World"),
         FoundFeed("https://news.example.com/sport.atom", "")]


def test_a_site_searched_is_its_feeds_in_a_list_and_after_a_restart(tmp_path):
    table = SiteTable.in_jobdir(tmp_path)
    assert table.record(SITE, FEEDS, 100.0) == []
    table.close()
    again = SiteTable.in_jobdir(tmp_path)
    again.load()
    assert again.get(SITE).feeds == tuple(FEEDS) and again.get(SITE).searched_at == 100.0
    assert again.site_of(FEEDS[1].url) == SITE
    listed = [SourceSpec("https://a.example.org/feed"),
              SourceSpec(SITE, title="News", weight=2.0, category="world")]
    out = again.expand(listed)
    assert [s.url for s in out] == ["https://a.example.org/feed", FEEDS[0].url, FEEDS[1].url]
    assert [s.title for s in out[1:]] == ["World", "News"]
    assert all(s.weight == 2.0 and s.category == "world" for s in out[1:])
    # searched again: a feed it names no more is dropped
    moved = FoundFeed("https://news.example.com/sport/feed")
    assert again.record(SITE, [FEEDS[0], moved], 200.0) == [FEEDS[1].url]
    assert again.site_of(FEEDS[1].url) is None and again.site_of(moved.url) == SITE
    again.close()


def test_an_unreadable_file_is_searched_again(tmp_path, caplog):
    (tmp_path / "whittle-sites.sqlite").write_bytes(b"not a database at all" * 100)
    table = SiteTable.in_jobdir(tmp_path)
    table.load()
    assert len(table) == 0
    assert "searched again" in caplog.text


def crawl_of(service: RecrawlService, url: str) -> Crawl:
    for _ in range(10):
        crawl = service.next_crawl()
        if crawl is not None and crawl.url == url:
            return crawl
    raise AssertionError(f"{url} never handed out")


def test_a_site_gives_way_to_its_feeds():
    service = RecrawlService(WhittleConfig(budget=10, step=3600.0, policy="round_robin"))
    service.open([SourceSpec("https://a.example.org/feed"), SourceSpec(SITE)])
    site = service.source_id(SITE)
    crawl = crawl_of(service, SITE)
    assert service.roster.site_page(crawl) is True          # it was on the list
    assert service.sources.left[site] and not service.sources.listed[site]
    assert service.stats.get("errors/not_a_feed") == 0
    # no back-off: a restart before its search ended fetches it again at once
    assert service.sources.retry_at[site] == 0.0
    ids = service.roster.site_feeds([SourceSpec(f.url, title=f.title) for f in FEEDS], listed=True)
    src = service.sources
    assert np.all(src.listed[ids]) and not np.any(src.left[ids])
    assert service.stats.get("sources") == 3
    # the list read again, expanded, keeps them; a feed the site names no more leaves
    service.roster.site_feeds([SourceSpec(FEEDS[0].url)], [FEEDS[1].url], listed=True)
    assert src.left[ids[1]] and not src.left[ids[0]]
    assert service.stats.get("sources") == 2


def test_a_feed_that_served_a_page_is_no_site():
    service = RecrawlService(WhittleConfig(budget=10, step=3600.0, policy="round_robin"))
    service.open([SourceSpec("https://a.example.org/feed")])
    crawl = crawl_of(service, "https://a.example.org/feed")
    service.feed_fetched(crawl, [])
    assert service.roster.site_page(crawl) is None          # a page later: a failing feed
    assert not service.sources.left[crawl.source]


def test_a_site_without_feeds_stays_out_of_the_list_until_due(tmp_path):
    table = SiteTable.in_jobdir(tmp_path)
    table.record(SITE, [], 100.0)
    listed = [SourceSpec(SITE), SourceSpec("https://a.example.org/feed")]
    assert [s.url for s in table.expand(listed, again_before=100.0)] == [
        "https://a.example.org/feed"]
    assert [s.url for s in table.expand(listed, again_before=100.5)] == [
        SITE, "https://a.example.org/feed"]                 # due: searched again
    table.close()


def test_whether_a_sites_feeds_are_dead():
    service = RecrawlService(WhittleConfig(budget=10, step=3600.0, policy="round_robin"))
    urls = [f.url for f in FEEDS]
    service.open([SourceSpec(u) for u in urls])
    assert service.roster.sources_dead(urls) == (False, True)
    for url in urls:
        service.sources.set_retired(service.source_id(url), True)
    assert service.roster.sources_dead(urls) == (True, True)
    assert service.roster.sources_dead(["https://unknown.example.org/feed"]) == (True, True)
