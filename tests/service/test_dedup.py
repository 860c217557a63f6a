"""One story, counted once: an entry whose story another feed brought first makes no item
and is worth nothing to the policy; the story memory is bounded, checkpointed, restored, and
knows what the delivery journal hands out again."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.feeds.story import ParamFilter, story_keys
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from scrapy_whittle.service.memory.entry_memory import key_hashes
from scrapy_whittle.service.memory.story_memory import StoryMemory, to_signed
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore

START = 1_700_000_000.0


def story(key, link, published=START):
    return FeedEntry(key=key, title=key, link=link, published=published, engagement=None)


def make(tmp_path=None, n=3, clock=None, journal=False, **settings):
    # one plan an epoch: these tests count in epochs (the default's steps: test_steps.py)
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": n, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_STEP": 600.0,
                                          "WHITTLE_POLICY": "round_robin",
                                          "WHITTLE_DEDUP": "link", **settings})
    store = SqliteStateStore(tmp_path / FILE_NAME) if tmp_path is not None else None
    service = RecrawlService(config, clock=clock or SimulatedClock(start=START), store=store)
    service.journal_deliveries = journal
    service.open([SourceSpec(url=f"https://s{i}.example/feed.xml") for i in range(n)])
    return service


def crawls(service):
    out = {}
    while (crawl := service.next_crawl()) is not None:
        out[crawl.source] = crawl
    return out


FRONT = [story("https://news.example/a", "https://news.example/a"),
         story("https://news.example/b", "https://news.example/b")]
# a section repeating the front page's "a" (its own guid, a tracked link) and a story of its own
SECTION = [story("section-17", "http://NEWS.example/a/?utm_source=rss#top"),
           story("section-18", "https://news.example/c")]


def test_a_story_seen_in_another_feed_is_no_item_and_worth_nothing():
    service = make()
    c = crawls(service)
    assert [e.key for e in service.feed_fetched(c[0], FRONT).entries] == [
        "https://news.example/a", "https://news.example/b"]
    found = service.feed_fetched(c[1], SECTION)
    assert [e.key for e in found.entries] == ["section-18"] and found.values == [1.0]
    assert service.stats.get("dedup/repeats") == 1
    assert service.state.new_items[1] == 1 and service.state.utility[1] == 1.0
    assert service.stats.get("new_items") == 3
    # a feed that only repeats others brings nothing
    found = service.feed_fetched(c[2], FRONT[::-1])
    assert found.entries == [] and service.state.new_items[2] == 0
    assert service.state.utility[2] == 0.0 and service.stats.get("dedup/repeats") == 3
    service.outcomes.flush()
    assert service.stats.get("utility") == 3.0


def test_per_feed_identity_counts_every_copy():
    service = make(WHITTLE_DEDUP="entry")
    assert service.stories is None
    c = crawls(service)
    service.feed_fetched(c[0], FRONT)
    assert len(service.feed_fetched(c[1], SECTION).entries) == 2
    assert len(service.feed_fetched(c[2], FRONT).entries) == 2
    assert service.stats.get("dedup/repeats") == 0


def test_entries_without_a_story_key_keep_their_feed_identity():
    service = make()
    c = crawls(service)
    plain = [story("tag:x,2024:1", None), story("42", None)]
    assert len(service.feed_fetched(c[0], plain).entries) == 2
    assert len(service.feed_fetched(c[1], plain).entries) == 2


def test_repeats_do_not_make_a_window_look_full():
    """Every entry a feed shows is new to it, but one is a repeat: the window was full all
    the same (new entries may have been lost)."""
    service = make()
    c = crawls(service)
    service.feed_fetched(c[0], FRONT)
    service.feed_fetched(c[1], [story("s1", "https://news.example/z")])
    service.outcomes.clock.advance_to(service.wake_at)
    c = crawls(service)
    found = service.feed_fetched(c[1], [story("s2", "https://news.example/a"),
                                        story("s3", "https://news.example/y")])
    assert found.window_full and len(found.entries) == 1


def test_a_window_full_of_repeats_teaches_that_the_feed_brought_nothing():
    """A feed crawled rarely shows only entries new to it, all of them repeats: the policy
    learns nothing new over the whole time since its last crawl (not a full window of no
    item, which the rate estimate cannot use, leaving the feed at its prior)."""
    service = make(n=2, WHITTLE_POLICY="whittle")
    rates = service.keeper.policy.rates
    c = crawls(service)
    service.feed_fetched(c[0], FRONT)
    service.feed_fetched(c[1], [story("r0", "https://news.example/z")])
    clock = service.outcomes.clock
    for _ in range(40):                     # until the repeating feed is crawled again
        clock.advance_to(service.wake_at)
        c = crawls(service)
        if 1 in c:
            break
    for crawl in c.values():
        service.feed_fetched(crawl, FRONT if crawl.source == 0 else
                             [story("r1", "https://news.example/a"),
                              story("r2", "https://news.example/b")])
    service.outcomes.flush()
    found_nothing_since = rates.rate[1] - rates.prior_exposure
    assert service.stats.get("dedup/repeats") == 2 and not service.stats.get("window_full")
    # the first crawl (one entry, published as it was fetched) taught nothing; this one:
    # no new item over the whole time since
    assert rates.updates[1] == 1 and rates.shape[1] == 1.0
    assert found_nothing_since == pytest.approx(clock.now() - START)


def test_the_settings_are_checked():
    with pytest.raises(InvalidSetting, match=r"WHITTLE_DEDUP .*'link', 'entry'"):
        WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_DEDUP": "url"})
    with pytest.raises(InvalidSetting, match="WHITTLE_DEDUP_DROP_PARAMS"):
        WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_DEDUP_DROP_PARAMS": 3})
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1,
                                          "WHITTLE_DEDUP_DROP_PARAMS": "ref, utm_*"})
    assert config.dedup_drop_params == ("ref", "utm_*")
    service = make(WHITTLE_DEDUP_DROP_PARAMS='["ref"]')
    c = crawls(service)
    service.feed_fetched(c[0], [story("x", "https://news.example/a?ref=rss")])
    # utm_source is kept when the list leaves it out: another story
    assert len(service.feed_fetched(c[1], [story("y", "https://news.example/a?utm_source=1"),
                                           story("z", "https://news.example/a")]).entries) == 1


def test_the_memory_is_bounded_least_recently_seen_first():
    memory = StoryMemory(ParamFilter(), lambda: 0, min_capacity=4)
    for i in range(4):
        assert memory.split(0, [story(f"e{i}", f"https://x.example/{i}")])[1] == 0
    assert memory.split(1, [story("r0", "https://x.example/0")])[1] == 1   # 0 seen again
    memory.split(0, [story("e4", "https://x.example/4")])                  # 1 forgotten
    assert len(memory) == 4
    assert memory.split(2, [story("r1", "https://x.example/1"),
                            story("r0", "https://x.example/0")]) [1] == 1
    assert StoryMemory(ParamFilter(), lambda: 10_000).capacity == 20_000


def test_the_memory_forgets_an_eighth_of_its_capacity_at_once():
    """Beyond its capacity the memory forgets the least recently seen eighth at once (not a
    story or two at every crawl, each walking past the holes the last ones left)."""
    memory = StoryMemory(ParamFilter(), lambda: 0, min_capacity=64)
    memory.split(0, [story(f"e{i}", f"https://x.example/{i}") for i in range(64)])
    assert memory.split(1, [story("r0", "https://x.example/0")])[1] == 1   # 0: most recent
    memory.split(0, [story("e64", "https://x.example/64")])
    assert len(memory) == 64 - 8 + 1
    assert memory.split(2, [story(f"r{i}", f"https://x.example/{i}") for i in (1, 8)])[1] == 0
    assert memory.split(2, [story(f"s{i}", f"https://x.example/{i}")
                            for i in (0, 9, 64)])[1] == 3
    assert len(memory.gone) == 8 and len(memory) == 64 - 8 + 1 + 2


def test_checkpointed_restored_and_every_source_recorded(tmp_path):
    clock = SimulatedClock(start=START)
    service = make(tmp_path, clock=clock)
    c = crawls(service)
    service.feed_fetched(c[0], FRONT)
    service.feed_fetched(c[1], SECTION)
    service.checkpoint()
    service.close()
    restored = make(tmp_path, clock=SimulatedClock(start=clock.now() + 700))
    assert len(restored.stories) == len(service.stories) == 3
    c = crawls(restored)
    found = restored.feed_fetched(c[2], [story("w", "https://news.example/b/"),
                                         story("v", "https://news.example/c?fbclid=1")])
    assert found.entries == []
    restored.close()
    db = sqlite3.connect(tmp_path / FILE_NAME)
    seen = db.execute("SELECT story, source FROM story_sources").fetchall()
    first = dict(db.execute("SELECT story, source FROM stories").fetchall())
    db.close()
    a, b, c_ = (to_signed(h) for h in key_hashes(["news.example/a", "news.example/b",
                                                  "news.example/c"]))
    assert first == {a: 0, b: 0, c_: 1}
    assert sorted(seen) == sorted([(a, 1), (b, 2), (c_, 2)])


def test_replayed_deliveries_are_known_stories(tmp_path):
    clock = SimulatedClock(start=START)
    service = make(tmp_path, clock=clock, journal=True)
    c = crawls(service)
    service.checkpoint()
    first = service.feed_fetched(c[0], FRONT)        # never delivered; killed, no close
    assert first.batch is not None
    restored = make(tmp_path, clock=SimulatedClock(start=clock.now() + 700), journal=True)
    assert {e.key for b in restored.replays for e in b.entries} == {e.key for e in FRONT}
    c = crawls(restored)
    assert restored.feed_fetched(c[1], SECTION[:1]).entries == []


class _LoopMemory(StoryMemory):
    """The story memory entry by entry (story_keys of each): the reference of the batch path
    that :meth:`StoryMemory.split` takes for a feed whose links are in their normal form."""

    def split(self, source, entries):
        fresh, repeats = [], 0
        for entry in entries:
            hashes = key_hashes(story_keys(entry, self.params))
            known = [h for h in hashes if h in self.stories]
            if known:
                repeats += 1
                self.sightings.add((known[0], source))
                first = self.stories[known[0]]
            else:
                fresh.append(entry)
                first = source
            for h in hashes:
                self.stories.pop(h, None)
                self.stories[h] = first
                self.seq += 1
                self.changed[h] = self.seq
        self._forget()
        return fresh, repeats


def test_the_batch_path_remembers_as_the_loop_does():
    """Random feeds of links (normal, http and https twins of one story, ids equal to the
    link or not URLs, some needing the full normaliser), split by the memory and by the
    entry-by-entry reference: the same items, repeats, memory order, changes and sightings."""
    rng = np.random.default_rng(11)
    fast, loop = StoryMemory(ParamFilter(), lambda: 40), _LoopMemory(ParamFilter(), lambda: 40)
    fast.min_capacity = loop.min_capacity = 60      # stories are forgotten too
    for crawl in range(600):
        source = int(rng.integers(5))
        entries = []
        for j in range(int(rng.integers(1, 8))):
            n = int(rng.integers(150))
            link = f"{rng.choice(['https', 'http'])}://x{n % 3}.example/s/{n}"
            if rng.random() < 0.1:
                link += rng.choice(["/", "?utm_source=rss", "#c"])
            key = link if rng.random() < 0.8 else f"tag:{crawl}-{j}"
            entries.append(story(key, link if rng.random() < 0.9 else None))
        assert fast.split(source, entries) == loop.split(source, entries)
        assert list(fast.stories.items()) == list(loop.stories.items())
    assert fast.changed == loop.changed and fast.gone == loop.gone
    assert fast.sightings == loop.sightings and fast.seq == loop.seq


def test_a_memory_without_a_store_keeps_no_changes():
    service = make(n=2)
    assert not service.stories.track_changes
    for crawl in crawls(service).values():
        service.feed_fetched(crawl, FRONT if crawl.source == 0 else SECTION)
    assert len(service.stories) == 3 and service.stats.get("dedup/repeats") == 1
    assert not service.stories.changed and not service.stories.sightings
