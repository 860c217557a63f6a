"""The source list changing under a crawl: sources join, leave (state kept) and rejoin; list
documents told apart by content type and content."""

from __future__ import annotations

import json

import pytest

from scrapy_whittle.core.policies import POLICIES
from scrapy_whittle.service.sources.registry import (
    SourceListError,
    SourceSpec,
    is_list_url,
    parse_source_list,
)
from scrapy_whittle.service.state.store import SqliteStateStore
from tests.service.test_recrawl import make_service

OPML = b"""<?xml version="1.0"?><opml version="2.0"><body>
<outline text="News"><outline xmlUrl="https://a.example/feed" title="A"/></outline>
<outline xmlUrl="https://b.example/feed"/></body></opml>"""
FEED = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>t</title></channel></rss>"""


def urls(specs):
    return [s.url for s in specs]


def test_list_documents_by_content_type_and_content():
    assert urls(parse_source_list(OPML, "u")) == ["https://a.example/feed",
                                                  "https://b.example/feed"]
    doc = json.dumps({"sources": [{"url": "https://c.example/f", "weight": 2}]}).encode()
    (spec,) = parse_source_list(doc, "u", content_type="application/json; charset=utf-8")
    assert spec.url == "https://c.example/f" and spec.weight == 2
    text = b"# my feeds\nhttps://d.example/f\n\nhttps://e.example/f extra words\n"
    assert urls(parse_source_list(text, "u", content_type="text/plain")) == [
        "https://d.example/f", "https://e.example/f"]
    # a feed fetched where a list was expected is that one feed
    assert urls(parse_source_list(FEED, "u", url="https://f.example/rss")) == [
        "https://f.example/rss"]
    with pytest.raises(SourceListError, match="not well-formed"):
        parse_source_list(b"<html><body>login<br></body></html>", "u",
                          content_type="text/html")
    with pytest.raises(SourceListError, match="not an http"):
        parse_source_list(b"ftp://g.example/f\n", "u")
    assert is_list_url("https://example.org/feeds.opml") and not is_list_url("feeds.opml")
    assert not is_list_url(["https://example.org/feed"])


def specs(*names):
    return [SourceSpec(url=f"https://{n}.example/feed.xml") for n in names]


def test_sources_leave_and_rejoin_with_their_state():
    service, clock = make_service(n=0, budget=3)
    service.roster.sync_sources(specs("a", "b", "c"))
    while (crawl := service.next_crawl()) is not None:
        service.not_modified(crawl, etag=f"e{crawl.source}")
    b = service.source_id("https://b.example/feed.xml")
    # the spider registers a source of its own: not the list's to remove
    (own,) = service.add_sources(specs("own"))
    assert service.roster.sync_sources(specs("a", "c", "d")) == (1, 1)
    assert service.sources.left[b] and service.stats.get("sources") == 4
    assert service.stats.get("sources/left") == 1
    planned = []
    for _ in range(4):
        clock.advance_to(service.wake_at)
        while (crawl := service.next_crawl()) is not None:
            planned.append(crawl.source)
            service.not_modified(crawl)
    assert b not in planned and own in planned
    assert service.roster.sync_sources(specs("a", "b", "c", "d")) == (1, 0)    # b rejoins
    assert not service.sources.left[b] and service.state.etag.get(b) == f"e{b}"


def test_a_changed_list_between_runs_of_a_jobdir_crawl(tmp_path):
    store = SqliteStateStore(tmp_path / "whittle.sqlite")
    service, clock = make_service(n=0, budget=3, store=store)
    service.close()
    first, _ = make_service(n=0, budget=3, store=SqliteStateStore(tmp_path / "whittle.sqlite"),
                            clock=clock)
    first.roster.sync_sources(specs("a", "b", "c"))
    while (crawl := first.next_crawl()) is not None:
        first.not_modified(crawl, etag=f"e{crawl.source}")
    first.close()
    # the next run's list drops b and adds d
    from scrapy_whittle.service.recrawl import RecrawlService

    again = RecrawlService(first.config, clock=clock,
                           store=SqliteStateStore(tmp_path / "whittle.sqlite"))
    again.open(specs("a", "c", "d"))
    b = again.source_id("https://b.example/feed.xml")
    assert again.sources.left[b] and again.stats.get("sources") == 3
    assert [again.state.etag.get(i) for i in range(3)] == ["e0", "e1", "e2"]
    again.close()
    # a run with no list at all (resuming the JOBDIR as it is) removes nothing
    third = RecrawlService(first.config, clock=clock,
                           store=SqliteStateStore(tmp_path / "whittle.sqlite"))
    third.open([])
    assert list(third.sources.left[:4]) == [False, True, False, False]
    third.close()


def test_weights_and_intervals_must_be_finite_numbers():
    bad = [b'[{"url": "https://a.example/f", "weight": "inf"}]',
           b'[{"url": "https://a.example/f", "min_interval": -1}]',
           b'[{"url": "https://a.example/f", "weight": true}]',
           b'<opml><body><outline xmlUrl="https://a.example/f" weight="inf"/></body></opml>']
    for doc in bad:
        with pytest.raises(SourceListError, match="finite number >= 0"):
            parse_source_list(doc, "list")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_starts_with_no_source_when_the_list_comes_later(name):
    """A list at a URL is fetched after the service opens: the service builds its policy
    for no source, then the sources join. Every registered policy, with the oracle's
    parameters and daily rhythms for those that need them, deciding at the default's steps
    (fractional epochs)."""
    from scrapy_whittle.core.policies import policy_class
    from scrapy_whittle.service.clock import SimulatedClock
    from scrapy_whittle.service.config import WhittleConfig
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sources.registry import load_oracle
    from tests.service.test_recrawl import START, PoissonFeeds, crawl_epochs

    joining = specs("a", "b", "c")
    period = 600.0
    rate = 1 / period
    # a rhythm of two epochs (four bins of half an epoch)
    oracle = {"sources": [{"url": s.url, "rate": rate, "mean_utility": 1.0, "decay": 1e-4,
                           "profile": {"bins": [1.0, 2.0, 1.0, 0.5],
                                       "bin_seconds": period / 2}} for s in joining]}
    needs = policy_class(name).needs_parameters
    settings = {"WHITTLE_BUDGET": 2, "WHITTLE_PERIOD": period, "WHITTLE_POLICY": name}
    if needs:
        settings["WHITTLE_ORACLE_PARAMS"] = oracle
    clock = SimulatedClock(start=START)
    service = RecrawlService(WhittleConfig.from_settings(settings), clock=clock,
                             oracle=load_oracle(oracle) if needs else None)
    service.open([], listed=False)
    assert service.next_crawl() is None
    service.roster.sync_sources(joining)
    crawl_epochs(service, clock, PoissonFeeds([rate] * 3), 12)
    assert service.stats.get("crawls") > 0
