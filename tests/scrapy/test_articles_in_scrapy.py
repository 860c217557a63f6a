"""WHITTLE_ARTICLES end to end on the simulated web: every new entry's page is fetched and its
article extracted into the item; a page that cannot be fetched or read still gives its item,
the failure counted and logged once; article and feed requests of one host stay within the
host's allowance; the budget is spent on feeds alone."""

from __future__ import annotations

import logging
from collections import Counter

import pytest_twisted
from scrapy import signals

from sim.web.articles import ArticlePages
from tests.scrapy.conftest import VirtualWeb, make_crawler, run, whittle


def collect(crawler) -> list[dict]:
    items: list[dict] = []

    def scraped(item, response, spider):
        items.append(item)

    crawler.signals.connect(scraped, signal=signals.item_scraped, weak=False)
    return items


def on_clock(web: VirtualWeb, **settings):
    return make_crawler(WHITTLE_CLOCK=web.clock, WHITTLE_ARTICLES=True,
                        WHITTLE_PARSE_WORKERS=0, **settings)


async def crawl_articles(web: VirtualWeb, n: int, **settings) -> tuple[list, dict]:
    """(items, stats) of a round-robin crawl of the ``n`` feeds of ``web`` with articles on,
    its web stopped after."""
    try:
        crawler = on_clock(web, WHITTLE_SOURCES=web.feeds(n), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=n, WHITTLE_PERIOD=3600, **settings)
        items = collect(crawler)
        return items, await run(crawler)
    finally:
        await web.stop()


def entry_of(link: str) -> tuple[int, int]:
    i, seq = link.rsplit("/item/", 1)[1].split("/")
    return int(i), int(seq)


@pytest_twisted.ensureDeferred
async def test_every_new_entry_s_item_carries_its_article():
    web = VirtualWeb(n=6, seed=5)
    items, stats = await crawl_articles(web, 6, WHITTLE_MAX_EPOCHS=3)
    w = whittle(stats)
    pages = ArticlePages(5)
    assert len(items) >= 6
    assert w["crawls"] == 6 * 3                  # the budget went to feeds only
    assert w["articles/extracted"] == len(items)
    for item in items:
        assert item["article_error"] is None, item
        i, seq = entry_of(item["link"])
        assert item["text"] == pages.text(i, seq)
        story = pages.story(i, seq)
        assert item["article_title"] == story.title
        assert item["authors"] == [story.author]
        assert item["language"] == "en"
        assert item["article_date"] is not None, item
        assert item["source"].endswith(f"/feed/{i}.xml") and item["entry_id"]
        if story.kind == "syndicated":
            assert item["canonical_url"] == f"{web.url}/item/{i - 1}/{seq}"
        else:
            assert item["canonical_url"] is None
    assert stats.get("downloader/request_count") == 18 + len(items)


@pytest_twisted.ensureDeferred
async def test_a_page_that_fails_still_gives_its_item_the_failure_counted_and_logged_once(
        caplog):
    web = VirtualWeb(n=6, seed=6, article_faults=0.5)
    try:
        crawler = on_clock(web, WHITTLE_SOURCES=web.feeds(6), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=6, WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=3)
        items = collect(crawler)
        with caplog.at_level(logging.WARNING, logger="scrapy_whittle.scrapy.articles"):
            stats = await run(crawler)
    finally:
        await web.stop()
    w = whittle(stats)
    pages = ArticlePages(6, faults=0.5)
    expected = {"404": "http_404", "500": "http_500", "binary": "not_html", "empty": "no_text"}
    kinds = Counter()
    for item in items:
        fault = pages.fault(*entry_of(item["link"]))
        if fault is None:
            assert item["article_error"] is None and item["text"]
        else:
            assert item["article_error"] == expected[fault], item
            assert item["text"] is None and item["authors"] == []
            assert item["title"] and item["entry_id"]           # the entry's own fields
            kinds[expected[fault]] += 1
    assert len(kinds) == 4, kinds                # every kind of failure was met
    for kind, count in kinds.items():
        assert w[f"articles/failed/{kind}"] == count
    assert w["articles/extracted"] == len(items) - sum(kinds.values())
    warned = Counter(r.getMessage().split("(")[1].split(":")[0] for r in caplog.records
                     if r.name == "scrapy_whittle.scrapy.articles")
    assert warned == dict.fromkeys(kinds, 1)          # named once per kind


@pytest_twisted.ensureDeferred
async def test_feeds_and_articles_of_a_host_stay_within_its_allowance():
    """A host allowed 10 requests an epoch, 6 of them the feeds': their plan is what it would
    be without articles, and the articles take what is left, the rest waiting for the next
    epochs; those still waiting when the crawl's last epoch ends are not sent."""
    web = VirtualWeb(n=6, seed=7)
    try:
        crawler = on_clock(web, WHITTLE_SOURCES=web.feeds(6), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=6, WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=4,
                           WHITTLE_HOST_LIMITS={"127.0.0.1": 10})
        sent: list[tuple[float, bool]] = []

        def reached(request, spider):
            sent.append((web.clock.now(), "whittle_article" in request.meta))

        crawler.signals.connect(reached, signal=signals.request_reached_downloader, weak=False)
        items = collect(crawler)
        stats = await run(crawler)
    finally:
        await web.stop()
    w = whittle(stats)
    assert w["crawls"] == 6 * 4                  # the feeds' plan: unchanged
    origin = min(t for t, _ in sent)
    per_epoch = Counter(int((t - origin) // 3600) for t, _ in sent)
    articles = Counter(int((t - origin) // 3600) for t, article in sent if article)
    assert max(per_epoch.values()) <= 10, per_epoch
    assert sum(articles.values()) >= 4 * 3        # articles used the room feeds left
    # what still waited when the last epoch ended was not sent: its items go without text
    ended = [i for i in items if i["article_error"] == "crawl_ended"]
    assert ended and w["articles/failed/crawl_ended"] == len(ended)
    assert len(items) == sum(articles.values()) + len(ended)


@pytest_twisted.ensureDeferred
async def test_copies_of_a_story_are_repeats_by_canonical_url_or_text():
    items, stats = await crawl_articles(VirtualWeb(n=10, seed=8), 10, WHITTLE_MAX_EPOCHS=4,
                                        WHITTLE_NEAR_DUPLICATES=0.8)
    w = whittle(stats)
    pages = ArticlePages(8)
    by_entry = {entry_of(i["link"]): i for i in items}
    repeats = Counter()
    for (i, seq), item in by_entry.items():
        kind = pages.kind(i, seq)
        partner = (i - 1, seq) if i % 2 else (i + 1, seq)
        copied = kind != "own" or pages.kind(*partner) != "own"
        if item["repeat"] is not None:
            repeats[item["repeat"]] += 1
            assert copied, item                      # only a copy or its original
        if kind == "wire" and partner in by_entry:   # one of the two is the repeat
            assert [by_entry[partner]["repeat"], item["repeat"]].count("near_duplicate") == 1
        if kind == "syndicated" and partner in by_entry:
            assert item["repeat"] == "canonical"     # the original's entry came first
    assert repeats["canonical"] and repeats["near_duplicate"], repeats
    assert w["articles/repeats/canonical"] == repeats["canonical"]
    assert w["articles/repeats/near_duplicate"] == repeats["near_duplicate"]
    assert w["dedup/repeats"] >= sum(repeats.values())


@pytest_twisted.ensureDeferred
async def test_a_page_over_the_size_limit_is_not_read():
    items, stats = await crawl_articles(VirtualWeb(n=2, seed=9), 2, WHITTLE_MAX_EPOCHS=1,
                                        WHITTLE_ARTICLE_MAX_SIZE=1024)
    assert items and {i["article_error"] for i in items} == {"too_large"}
    assert whittle(stats)["articles/failed/too_large"] == len(items)
