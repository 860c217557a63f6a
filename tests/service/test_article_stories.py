"""One story counted once by what its article says: a canonical URL known as another entry's
link (or another page's canonical URL) makes a repeat, and so does, with
WHITTLE_NEAR_DUPLICATES, a text much like one seen before; a repeat is taken back from what
the policy learns of the feed, whether its crawl is still buffered or learnt already."""

from __future__ import annotations

import pytest

from scrapy_whittle.feeds.article import fingerprint
from scrapy_whittle.feeds.story import ParamFilter
from scrapy_whittle.service.memory.article_stories import ArticleStories, NearDuplicates
from scrapy_whittle.service.memory.story_memory import StoryMemory
from scrapy_whittle.service.state.store import FILE_NAME, Checkpoint, SqliteStateStore
from sim.web.articles import ArticlePages
from tests.service.test_dedup import crawls, make, story

PAGES = ArticlePages(2)


def test_a_canonical_url_known_as_a_link_or_a_canonical_url_is_a_repeat():
    stories = ArticleStories(StoryMemory(ParamFilter()))
    stories.stories.split(0, [story("a", "https://news.example/a")])
    assert stories.judge(1, "http://news.example/a/?utm_source=x", None) == "canonical"
    assert stories.judge(1, "https://wire.example/7", None) is None       # new: remembered
    assert stories.judge(2, "https://wire.example/7", None) == "canonical"
    # the original, listed later by a feed, is a repeat at that feed's fetch
    fresh, repeats = stories.stories.split(3, [story("x", "https://wire.example/7")])
    assert (fresh, repeats) == ([], 1)
    assert ArticleStories(None).judge(1, "https://news.example/a", None) is None


def test_near_duplicate_texts_are_one_story_unrelated_ones_are_not():
    wire = [(i, s) for i in range(1, 41, 2) for s in range(40) if PAGES.kind(i, s) == "wire"]
    stories = ArticleStories(None, threshold=0.8)
    for i, s in wire:                              # the originals first, then their copies
        assert stories.judge(i - 1, None, fingerprint(PAGES.text(i - 1, s))) is None
    own = [(i, s) for i in range(0, 40, 2) for s in range(40) if (i + 1, s) not in wire]
    assert all(stories.judge(i, None, fingerprint(PAGES.text(i, s))) is None
               for i, s in own[:300])
    assert all(stories.judge(i, None, fingerprint(PAGES.text(i, s))) == "near_duplicate"
               for i, s in wire)
    assert ArticleStories(None, threshold=0.0).near is None


def test_the_comparison_keeps_the_last_fingerprints_and_knows_an_article_seen_again():
    near = NearDuplicates(0.9, capacity=2)
    prints = [fingerprint(PAGES.text(0, s)) for s in range(3)]
    assert [near.seen(p, 0) for p in prints] == [False, False, False]
    assert near.seen(prints[2], 1) and near.seen(prints[1], 1)
    assert not near.seen(prints[0], 1)              # forgotten: the ring holds two
    # the same text from the source that brought it: that article again (a batch handed
    # out again after a restart), not a repeat, and not kept twice
    assert not near.seen(prints[0], 1) and near.seq == 4
    assert near.seen(prints[0], 0)                  # another source's copy: a repeat


def test_the_fingerprints_survive_a_restart(tmp_path):
    """A crawl stopped and resumed on its state file knows the wire copy of a story whose
    original it fetched before the stop; the store keeps the ring's last fingerprints."""
    wire = [(i, s) for i in range(1, 9, 2) for s in range(40) if PAGES.kind(i, s) == "wire"]
    assert len(wire) >= 3
    service = make(tmp_path, n=2, WHITTLE_ARTICLES=True, WHITTLE_NEAR_DUPLICATES=0.8)
    for i, s in wire:
        assert service.article_seen(0, None, fingerprint(PAGES.text(i - 1, s)), 1.0) is None
    service.close()
    resumed = make(tmp_path, n=2, WHITTLE_ARTICLES=True, WHITTLE_NEAR_DUPLICATES=0.8)
    assert resumed.article_stories.near.size == len(wire)
    # the original's page fetched again (its batch handed out again): no repeat
    i, s = wire[0]
    assert resumed.article_seen(0, None, fingerprint(PAGES.text(i - 1, s)), 1.0) is None
    assert [resumed.article_seen(1, None, fingerprint(PAGES.text(i, s)), 1.0)
            for i, s in wire] == ["near_duplicate"] * len(wire)
    assert resumed.stats.get("articles/repeats/near_duplicate") == len(wire)
    resumed.close()
    # the store holds as many as the ring: a smaller ring reads the last of them
    near = NearDuplicates(0.8, capacity=2)
    store = SqliteStateStore(tmp_path / FILE_NAME)
    rows = store.article_prints()
    near.load(rows)
    assert len(rows) == len(wire) and (near.size, near.next, near.seq) == (2, 0, len(wire))
    assert near.seen(fingerprint(PAGES.text(wire[-1][0], wire[-1][1])), 1)
    assert not near.seen(fingerprint(PAGES.text(wire[0][0], wire[0][1])), 1)
    store.write(Checkpoint(taken_at=0.0, meta={}, article_prints=near.drain()[0],
                           article_prints_from=near.seq - near.capacity))
    assert sorted(r[0] for r in store.article_prints()) == [len(wire) - 1, len(wire)]
    store.close()


def test_without_a_store_nothing_is_kept_for_a_checkpoint():
    service = make(n=2, WHITTLE_ARTICLES=True, WHITTLE_NEAR_DUPLICATES=0.8)
    service.article_seen(0, None, fingerprint(PAGES.text(0, 0)), 1.0)
    assert not service.article_stories.near.track_changes
    assert service.article_stories.near.kept == []


def test_a_repeat_found_by_the_article_is_taken_back_from_the_feed():
    service = make(n=2, WHITTLE_ARTICLES=True)
    c = crawls(service)
    service.feed_fetched(c[0], [story("a", "https://news.example/a")])
    found = service.feed_fetched(c[1], [story("b", "https://other.example/b"),
                                        story("c", "https://other.example/c")])
    assert found.values == [1.0, 1.0]
    # b's page names a's as canonical: while the crawl is buffered, the crawl is amended
    assert service.article_seen(1, "https://news.example/a", None, 1.0) == "canonical"
    row = [r for r in service.outcomes.buffer if r.source == 1][-1]
    assert (row.new_items, row.reward, len(row.published)) == (1, 1.0, 1)
    assert service.stats.get("dedup/repeats") == 1
    assert service.stats.get("articles/repeats/canonical") == 1
    # once learnt, the next crawl of the feed that brings entries pays for it
    service.outcomes.flush()
    assert service.article_seen(1, "https://news.example/a", None, 1.0) == "canonical"
    assert service.outcomes.repeats_due == {1: (1, 1.0)}
    clock = service.outcomes.clock
    for _ in range(40):
        clock.advance_to(service.wake_at)
        c = crawls(service)
        if 1 in c:
            break
    service.feed_fetched(c[1], [story("d", "https://other.example/d"),
                                story("e", "https://other.example/e")])
    row = [r for r in service.outcomes.buffer if r.source == 1][-1]
    assert (row.new_items, row.reward) == (1, 1.0) and service.outcomes.repeats_due == {}
    assert service.article_seen(7, "https://x.example/", None, 1.0) is None   # no such source


def test_near_duplicates_need_a_threshold_between_a_half_and_one():
    from scrapy_whittle.service.config import InvalidSetting, WhittleConfig

    for bad in (0.3, 1.5, -1, "x"):
        with pytest.raises(InvalidSetting, match="WHITTLE_NEAR_DUPLICATES"):
            WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_NEAR_DUPLICATES": bad})
    with pytest.raises(InvalidSetting, match="WHITTLE_ARTICLE_HOST_LIMIT"):
        WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_ARTICLE_HOST_LIMIT": 0})
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_ARTICLES": "true",
                                          "WHITTLE_NEAR_DUPLICATES": "0.8"})
    assert config.articles.enabled and config.articles.near_duplicates == 0.8
