"""Pushed entries (a WebSub hub's deliveries) through the re-crawl service: the same entry
memory and learning as fetched ones, no budget, and the policy's push state checkpointed."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore

START = 1_700_000_000.0


def make(n=3, store=None, clock=None, policy="whittle"):
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_POLICY": policy})
    clock = clock or SimulatedClock(start=START)
    service = RecrawlService(config, clock=clock, store=store)
    service.open([SourceSpec(url=f"https://s{i}.example/feed.xml") for i in range(n)])
    return service, clock


def entry(key, published):
    return FeedEntry(key=key, title=key, link=None, published=published, engagement=None)


def test_pushed_entries_share_the_entry_memory_and_cost_no_budget():
    service, _ = make()
    crawl = service.next_crawl()
    spent = service.planner.spent
    found = service.pushed(crawl.source, [entry("a", START - 5), entry("b", START - 3)])
    assert [e.key for e in found.entries] == ["a", "b"] and found.values == [1.0, 1.0]
    assert service.planner.spent == spent
    # the fetch that follows finds only what the push did not bring
    fetched = service.feed_fetched(crawl, [entry("c", START - 1), entry("b", START - 3),
                                           entry("a", START - 5)])
    assert [e.key for e in fetched.entries] == ["c"]
    # a push of known entries brings nothing, and says so
    again = service.pushed(service.url(crawl.source), [entry("c", START - 1)])
    assert again.entries == []
    stats = service.stats
    assert stats.get("push/deliveries") == 2 and stats.get("push/empty") == 1
    assert stats.get("push/new_items") == 2 and stats.get("new_items") == 1
    assert service.state.new_items[crawl.source] == 3


def poll(service, clock, sid, entries):
    """Fetch source ``sid`` (the others' crawls handed out meanwhile answer 304), showing
    ``entries``: what it found new."""
    for _ in range(100):
        crawl = service.next_crawl()
        if crawl is None:
            clock.advance_to(max(service.wake_at, clock.now() + 1.0)
                             if np.isfinite(service.wake_at) else clock.now() + 600.0)
        elif crawl.source != sid:
            service.not_modified(crawl)
        else:
            return service.feed_fetched(crawl, entries)
    raise AssertionError(f"source {sid} was never crawled")


def test_the_policy_learns_that_a_source_pushes_once_a_poll_checks_it():
    service, clock = make(n=2)
    old = [entry(f"o{j}", START - 100.0 * (j + 1)) for j in range(40)]     # a window of 40
    poll(service, clock, 0, old)
    t0 = clock.now()
    for k in range(30):
        clock.advance_to(t0 + 60.0 * (k + 1))
        service.pushed(0, [entry(f"p{k}", clock.now() - 2.0)])
    service.outcomes.flush()
    # what the hub lost only a poll shows: pushes no poll checked are no evidence yet
    assert service.policy.estimates()["push_share"][0] == 0.0
    assert service.policy.push.n == 1
    listed = [entry(f"p{k}", t0 + 60.0 * (k + 1) - 2.0) for k in range(29, -1, -1)]
    lost = [entry("m0", t0 + 100.0), entry("m1", t0 + 1000.0)]
    found = poll(service, clock, 0, sorted(listed + lost, key=lambda e: -e.published)
                 + old[:8])
    assert sorted(e.key for e in found.entries) == ["m0", "m1"]
    service.outcomes.flush()
    push = service.policy.push                   # one row: source 0's
    assert push.pushed[0] == 30.0 and push.polled[0] == 2.0
    est = service.policy.estimates()
    assert est["push_share"][0] > 0.9 and est["push_share"][1] == 0.0


def test_a_push_for_an_unknown_source_is_counted_and_dropped():
    service, _ = make()
    assert service.pushed("https://nowhere.example/feed.xml", [entry("x", START)]).entries == []
    assert service.pushed(17, [entry("x", START)]).entries == []
    assert service.stats.get("errors/push_unknown_source") == 2
    assert service.stats.get("push/deliveries") == 0


def feed(k, now, window=8):
    """A delivered feed document: the newest ``window`` of entries p0..pk, newest first."""
    return [entry(f"p{j}", now - 60.0 * (k - j) - 2.0) for j in range(k, max(-1, k - window), -1)]


def test_push_state_survives_a_checkpoint(tmp_path):
    service, clock = make(store=SqliteStateStore(tmp_path / FILE_NAME))
    for k in range(10):
        clock.advance_to(START + 60.0 * (k + 1))
        assert [e.key for e in service.pushed(1, feed(k, clock.now())).entries] == [f"p{k}"]
    poll(service, clock, 1, feed(9, START + 600.0))      # checks the pushes: nothing lost
    service.checkpoint()
    restored, _ = make(store=SqliteStateStore(tmp_path / FILE_NAME), clock=clock)
    share = restored.policy.estimates()["push_share"]
    np.testing.assert_array_equal(share, service.policy.estimates()["push_share"])
    assert share[1] > 0.8
    # the pushed entries are remembered: the same feed pushed again brings nothing new
    assert restored.pushed(1, feed(9, clock.now())).entries == []
    assert [e.key for e in restored.pushed(1, feed(10, clock.now())).entries] == ["p10"]


def test_a_push_of_only_the_new_entries_makes_no_entry_new_twice():
    # A hub may deliver only the new entries (PubSubHubbub 0.3 hubs do for RSS and Atom).
    # The feed lists its 20 entries oldest first, so its oldest remembered ones are those it
    # still shows: the push must not push them out of the source's memory.
    service, clock = make(n=1)
    listed = [entry(f"a{k}", START - 1000 + k) for k in range(20)]
    assert len(poll(service, clock, 0, listed).entries) == 20
    pushed = [entry(f"p{k}", clock.now() - 10 + k) for k in range(6)]
    assert len(service.pushed(0, pushed).entries) == 6
    assert poll(service, clock, 0, listed + pushed).entries == []
