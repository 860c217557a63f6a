"""Moved and dead sources in the service: a permanent redirect moves a source (its old URL an
alias, so a list naming it makes no twin), or merges it into the source already at the new
URL; 410, runs of 404 and long silence retire a source, which is then only probed, and comes
back when a probe finds new entries."""

from __future__ import annotations

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.store import SqliteStateStore
from tests.service.test_recrawl import make_service

DAY = 86400.0


def spec(name):
    return SourceSpec(url=f"https://{name}.example/feed.xml")


def entry(key, when):
    return FeedEntry(key=key, title=None, link=None, published=when, engagement=None)


def crawl_all(service, answer):
    """Hand out every crawl due now; ``answer(crawl)`` reports it."""
    sources = []
    while (crawl := service.next_crawl()) is not None:
        sources.append(crawl.source)
        answer(crawl)
    return sources


def test_a_moved_source_keeps_its_id_and_its_old_url_names_it(tmp_path):
    store = SqliteStateStore(tmp_path / "whittle.sqlite")
    service, clock = make_service(n=0, budget=3, store=store)
    service.roster.sync_sources([spec("a"), spec("b")])
    crawl = service.next_crawl()
    moved = service.moved(crawl, "https://new.example/a.xml")
    assert moved.source == crawl.source and moved.url == "https://new.example/a.xml"
    service.not_modified(moved)
    a = crawl.source
    assert service.url(a) == "https://new.example/a.xml"
    # the list still names the old URL: the same source, no twin
    assert service.roster.sync_sources([spec("a"), spec("b")]) == (0, 0)
    assert len(service.sources) == 2 and service.source_id(spec("a").url) == a
    assert service.stats.get("sources/moved") == 1
    crawl_all(service, service.not_modified)
    clock.advance_to(clock.now() + 600.0)
    assert {c.url for c in iter(service.next_crawl, None)} >= {"https://new.example/a.xml"}
    service.close()
    # after a restart, with the old URL still listed: still one source, at its new URL
    again = RecrawlService(service.config, clock=clock,
                           store=SqliteStateStore(tmp_path / "whittle.sqlite"))
    again.open([spec("a"), spec("b")])
    assert len(again.sources) == 2 and again.url(a) == "https://new.example/a.xml"
    assert again.source_id(spec("a").url) == a == again.source_id("https://new.example/a.xml")
    assert not again.sources.left.any()
    again.close()


def test_a_source_moving_onto_another_merges_into_it(tmp_path):
    service, clock = make_service(n=0, budget=3, store=SqliteStateStore(tmp_path / "w.sqlite"))
    service.roster.sync_sources([spec("a"), spec("b")])
    a, b = service.source_id(spec("a").url), service.source_id(spec("b").url)
    crawl = service.next_crawl()
    assert crawl.source == a
    as_b = service.moved(crawl, spec("b").url)
    assert as_b.source == b
    service.feed_fetched(as_b, [entry("x", clock.now() - 10)])
    assert service.memory.size[b] == 1 and service.sources.merged[a]
    assert service.stats.get("sources/merged") == 1 and service.stats.get("sources") == 1
    # the list naming both makes neither a twin nor a return of the merged source
    assert service.roster.sync_sources([spec("a"), spec("b")]) == (0, 0)
    assert service.source_id(spec("a").url) == b and service.sources.left[a]
    planned = []
    for _ in range(3):
        clock.advance_to(clock.now() + 600.0)
        planned += crawl_all(service, service.not_modified)
    assert a not in planned and b in planned
    service.close()
    again = RecrawlService(service.config, clock=clock,
                           store=SqliteStateStore(tmp_path / "w.sqlite"))
    again.open([spec("a"), spec("b")])
    assert len(again.sources) == 2 and again.source_id(spec("a").url) == b
    assert again.sources.merged[a] and again.sources.left[a] and not again.sources.left[b]
    again.close()


def test_410_retires_at_once_and_a_probe_with_new_entries_brings_it_back(tmp_path):
    service, clock = make_service(n=2, budget=2, WHITTLE_RETIRE_PROBE=DAY,
                                  store=SqliteStateStore(tmp_path / "w.sqlite"))

    def answer(crawl):
        if crawl.source == 0:
            service.crawl_failed(crawl, "http_410", "HTTP 410")
        else:
            service.not_modified(crawl)

    crawl_all(service, answer)
    assert service.sources.retired[0] and service.stats.get("sources/retired") == 1
    planned = []
    for _ in range(10):                     # not planned, not probed before a day
        clock.advance_to(clock.now() + 600.0)
        planned += crawl_all(service, answer)
    assert 0 not in planned and 1 in planned
    assert service.stats.get("probes/crawls") == 0
    service.close()
    # the probe survives a restart, and comes a day after the retirement
    again = RecrawlService(service.config, clock=clock,
                           store=SqliteStateStore(tmp_path / "w.sqlite"))
    again.open([])
    assert again.sources.retired[0]
    clock.advance_to(again.sources.retry_at[0])
    probe = again.next_crawl()
    assert probe.source == 0 and again.stats.get("probes/crawls") == 1
    assert again.stats.get("crawls") == 0          # outside the budget
    again.not_modified(probe)                       # alive, nothing new: still retired
    assert again.sources.retired[0]
    assert again.sources.retry_at[0] == clock.now() + DAY
    clock.advance_to(clock.now() + DAY)
    crawl_all(again, lambda c: again.feed_fetched(c, [entry(f"{c.source}", clock.now())])
              if c.source == 0 else again.not_modified(c))
    assert not again.sources.retired[0] and again.stats.get("sources/revived") == 1
    clock.advance_to(clock.now() + 600.0)
    assert 0 in crawl_all(again, again.not_modified)      # planned again
    again.close()


def test_a_run_of_404s_retires_only_after_the_silence_setting():
    service, clock = make_service(n=1, budget=1, WHITTLE_RETIRE_404_AFTER=3 * DAY,
                                  WHITTLE_BACKOFF_MAX=DAY, WHITTLE_RETIRE_AFTER=0)
    fails = 0
    while not service.sources.retired[0]:
        for crawl in iter(service.next_crawl, None):
            service.crawl_failed(crawl, "http_404", "HTTP 404")
            fails += 1
        clock.advance_to(clock.now() + 600.0)
        assert fails < 100
    assert service.sources.not_found[0] >= 3
    assert clock.now() - service.sources.alive_at[0] >= 3 * DAY
    # one success in between ends the run
    service2, clock2 = make_service(n=1, budget=1, WHITTLE_RETIRE_404_AFTER=1.0)
    for answer in ("http_404", "http_404", None, "http_404", "http_404"):
        while (crawl := service2.next_crawl()) is None:
            clock2.advance_to(clock2.now() + 600.0)
        if answer:
            service2.crawl_failed(crawl, answer, "HTTP 404")
        else:
            service2.not_modified(crawl)
    assert not service2.sources.retired[0] and service2.sources.not_found[0] == 2


def test_silence_for_retire_after_retires_and_0_never_does():
    for after, retired in ((5 * 600.0, True), (0.0, False)):
        service, clock = make_service(n=1, budget=1, WHITTLE_RETIRE_AFTER=after)
        for _ in range(12):
            crawl_all(service, service.not_modified)
            clock.advance_to(clock.now() + 600.0)
        assert bool(service.sources.retired[0]) is retired
        assert service.stats.get("sources/retired") == int(retired)
