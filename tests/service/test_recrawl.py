"""The re-crawl service without Scrapy: planning, learning in batches, missed entries,
checkpoints and restores through the SQLite store, damaged state files."""

from __future__ import annotations

import logging
import sqlite3

import numpy as np
import pytest

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.store import (
    FILE_NAME,
    SCHEMA_VERSION,
    SqliteStateStore,
    StoreError,
)

START = 1_700_000_000.0


def make_service(n=4, policy="round_robin", budget=2, period=600.0, store=None, clock=None,
                 **settings):
    # one plan an epoch: these tests count in epochs (the default's steps: test_steps.py)
    settings.setdefault("WHITTLE_STEP", period)
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": period,
                                          "WHITTLE_POLICY": policy, **settings})
    clock = clock or SimulatedClock(start=START)
    service = RecrawlService(config, clock=clock, store=store)
    service.open([SourceSpec(url=f"https://s{i}.example/feed.xml") for i in range(n)])
    return service, clock


class PoissonFeeds:
    """Sources publishing Poisson streams; a feed shows its newest ``window`` entries."""

    def __init__(self, rates, window=5, seed=0):
        rng = np.random.default_rng(seed)
        self.times = [START + np.cumsum(rng.exponential(1 / r, 20_000)) for r in rates]
        self.window = window

    def entries(self, sid, now):
        t = self.times[sid]
        shown = t[t <= now][-self.window:][::-1]
        first = int(np.searchsorted(t, now, side="right")) - shown.shape[0]
        return [FeedEntry(key=f"{sid}:{first + shown.shape[0] - 1 - j}", title=None, link=None,
                          published=float(p), engagement=None) for j, p in enumerate(shown)]


def crawl_epochs(service, clock, feeds, epochs):
    """Drive the service like Scrapy would, every download instantaneous."""
    emitted = []
    for _ in range(epochs):
        while (crawl := service.next_crawl()) is not None:
            found = service.feed_fetched(crawl, feeds.entries(crawl.source, clock.now()))
            emitted += [(crawl.source, e.key) for e in found.entries]
        clock.advance_to(service.wake_at)
    return emitted


def test_http_dates_are_those_of_the_standard_library():
    from email.utils import formatdate

    from scrapy_whittle.feeds.httpdates import http_date

    for t in np.random.default_rng(0).uniform(0, 4e9, 2000):
        assert http_date(t) == formatdate(t, usegmt=True)


def test_plans_the_budget_each_epoch_and_says_when_to_come_back():
    service, clock = make_service(n=5, budget=2)
    first = [service.next_crawl(), service.next_crawl()]
    assert [c.source for c in first] == [0, 1] and service.next_crawl() is None
    assert service.wake_at == pytest.approx(START + 600)        # the next epoch
    clock.advance_to(service.wake_at)
    assert service.next_crawl().source == 2 and first[0].epoch == 0
    assert service.stats.get("crawls") == 3


@pytest.mark.parametrize("policy", ["round_robin", "whittle"])
def test_missed_entries_estimate_matches_the_truth_of_poisson_feeds(policy):
    """With a policy that estimates rates (the learned default) the service reads its
    estimates; with one that does not (round-robin) it keeps its own."""
    rate, window, interval = 3.0 / 600, 4, 1200.0        # ~6 new entries per crawl, 4 shown
    service, clock = make_service(n=1, budget=1, period=interval, policy=policy)
    feeds = PoissonFeeds([rate], window=window)
    crawl_epochs(service, clock, feeds, 600)
    service.flush()
    t = feeds.times[0]
    crawl_times = START + interval * np.arange(600)
    shown_per_crawl = np.minimum(np.diff(np.searchsorted(t, crawl_times, side="right")), window)
    new_per_crawl = np.diff(np.searchsorted(t, crawl_times, side="right"))
    truth = float(np.sum(new_per_crawl - shown_per_crawl))
    assert truth > 800
    assert service.stats.get("missed_items") == pytest.approx(truth, rel=0.05)


def test_batched_observations_teach_what_single_ones_do():
    """The service hands the policy batches; adaptive Whittle learns the same from a batch of
    crawls (two of one source among them) as from the crawls one at a time."""
    rng = np.random.default_rng(3)
    n, k = 6, 40
    sources = rng.integers(0, n, k)
    times = np.sort(rng.uniform(0, 3600, k)) + 7200
    counts = rng.integers(0, 4, k)
    pub = [np.sort(t - rng.uniform(0, 1800, c)) for t, c in zip(times, counts, strict=True)]
    off = np.concatenate([[0], np.cumsum(counts)])
    reward = rng.uniform(0, 2, k) * (counts > 0)
    full = rng.random(k) < 0.2
    batch = Observation(epoch=2, sources=sources, time=times, new_items=counts, reward=reward,
                        window_full=full, item_offsets=off, item_published=np.concatenate(pub))
    one = make_policy("whittle", Problem(n=n, period=3600.0))
    many = make_policy("whittle", Problem(n=n, period=3600.0))
    one.observe(batch)
    for j in range(k):
        many.observe(Observation(epoch=2, sources=[sources[j]], time=[times[j]],
                                 new_items=[counts[j]], reward=[reward[j]],
                                 window_full=[full[j]], item_offsets=[0, counts[j]],
                                 item_published=pub[j]))
    a, b = one.estimates(), many.estimates()
    for key in ("rate", "mean_utility", "decay", "alpha", "u"):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-10, err_msg=key)
    np.testing.assert_array_equal(one.select(3, 2), many.select(3, 2))


def test_checkpoints_write_only_what_changed(tmp_path):
    feeds = PoissonFeeds([1 / 600] * 50)
    service, clock = make_service(n=50, policy="whittle", budget=5,
                                  store=SqliteStateStore(tmp_path / FILE_NAME))
    crawl_epochs(service, clock, feeds, 3)
    first = service.prepare_checkpoint()
    assert first.n_new == 50 and first.n_changed == 50
    service.store.write(first)
    crawl_epochs(service, clock, feeds, 1)
    second = service.prepare_checkpoint()
    assert second.n_new == 0 and second.n_changed == 5
    service.store.write(second)
    with sqlite3.connect(tmp_path / FILE_NAME) as db:
        rows = db.execute("select url, rate_per_hour, half_life_hours, crawls from feeds "
                          "where crawls > 0").fetchall()
        seq = db.execute("select value from meta where key = 'checkpoint_seq'").fetchone()[0]
        epochs = db.execute("select epoch, crawls, cost from epochs order by epoch").fetchall()
    assert sum(r[3] for r in rows) == 20 and seq == 2
    assert epochs == [(k, 5, 5.0) for k in range(4)]      # added up across checkpoints
    assert all(r[1] > 0 and r[2] > 0 for r in rows)          # readable estimates


def test_entries_seen_before_the_checkpoint_are_never_new_again(tmp_path):
    feeds = PoissonFeeds([1 / 120] * 3, window=50)
    service, clock = make_service(n=3, budget=3, store=SqliteStateStore(tmp_path / FILE_NAME))
    before = crawl_epochs(service, clock, feeds, 4)
    service.checkpoint()
    after = crawl_epochs(service, clock, feeds, 2)        # then the process dies
    assert before and after
    restored, _ = make_service(n=3, budget=3, clock=clock,
                               store=SqliteStateStore(tmp_path / FILE_NAME))
    clock.advance_to(clock.now() + 1)
    again = []
    while (crawl := restored.next_crawl()) is not None:
        found = restored.feed_fetched(crawl, feeds.entries(crawl.source, clock.now()))
        again += [(crawl.source, e.key) for e in found.entries]
    assert not set(again) & set(before)                    # at most once before the checkpoint
    assert set(after) <= set(again)                         # at least once after it


@pytest.mark.parametrize("damage", ["empty", "garbage", "truncated", "foreign"])
def test_a_damaged_state_file_is_moved_aside_and_the_crawl_starts_fresh(tmp_path, damage,
                                                                         caplog):
    path = tmp_path / FILE_NAME
    if damage in ("truncated",):
        service, clock = make_service(n=30, store=SqliteStateStore(path))
        crawl_epochs(service, clock, PoissonFeeds([1 / 60] * 30), 3)
        service.close()
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    elif damage == "foreign":
        with sqlite3.connect(path) as db:
            db.execute("create table t (x)")
    else:
        path.write_bytes(b"" if damage == "empty" else b"\x00garbage" * 100)
    caplog.set_level(logging.ERROR)
    service, _ = make_service(n=3, store=SqliteStateStore(path))
    assert service.next_crawl() is not None                 # crawling, from scratch
    assert len(service.sources) == 3
    aside = [p for p in tmp_path.glob(f"{FILE_NAME}.corrupt-*")
             if not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1
    messages = [r.getMessage() for r in caplog.records if "moved aside" in r.getMessage()]
    assert len(messages) == 1 and aside[0].name in messages[0]


def test_a_state_file_of_a_newer_schema_is_refused_not_moved(tmp_path):
    path = tmp_path / FILE_NAME
    SqliteStateStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("update meta set value = ? where key = 'schema_version'",
                   (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer scrapy-whittle"):
        SqliteStateStore(path)
    assert path.exists() and not list(tmp_path.glob("*.corrupt-*"))


def test_http_dates_are_read_in_every_form_servers_send():
    from scrapy_whittle.feeds.httpdates import unix_seconds

    t = 784111777                                    # Sun, 06 Nov 1994 08:49:37 GMT
    for text in ("Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                 "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 09:49:37 +0100"):
        assert unix_seconds(text) == t, text
    for bad in (None, "", "yesterday", "Sun, 99 Nov 1994 08:49:37 GMT", "Thu, 01 Jan 1970 "
                "00:00:00 GMT", "Sun, 06 Nov 2200 08:49:37 GMT"):
        assert unix_seconds(bad) == 0, bad


@pytest.mark.parametrize(("policy", "options", "why"), [
    ("thompson", {"weight": "bogus"}, "must be 'none' or 'reward'"),
    ("dqn", {"device": "tpu", "hidden": (8,)}, "device ('tpu') must be 'auto', 'cpu'"),
])
def test_a_policy_option_value_the_policy_refuses_names_the_setting(policy, options, why):
    """The names of WHITTLE_POLICY_OPTIONS are checked with the settings; a value the policy
    refuses when it is built (at the service's start) is an InvalidSetting that names the
    setting, its value, the policy and the policy's reason."""
    if policy == "dqn":
        pytest.importorskip("torch")
    with pytest.raises(InvalidSetting) as info:
        make_service(policy=policy, WHITTLE_POLICY_OPTIONS=options)
    message = str(info.value)
    assert message.startswith(f"WHITTLE_POLICY_OPTIONS ({options!r}) for policy {policy!r}")
    assert why in message


@pytest.mark.parametrize("rule", ["miniflux", "nutch", "newsblur", "commafeed", "stormcrawler",
                                  "fixed-interval"])
def test_feed_reader_rules_count_their_minutes_in_the_services_seconds(rule):
    service, _ = make_service(policy=rule)
    assert service.policy.time_unit_hours == pytest.approx(1 / 3600)
    given, _ = make_service(policy=rule, WHITTLE_POLICY_OPTIONS={"time_unit_hours": 0.5})
    assert given.policy.time_unit_hours == 0.5


def test_a_fixed_interval_rule_in_the_service_waits_its_hour():
    service, clock = make_service(n=1, policy="fixed-interval", budget=1, period=600.0)
    crawl = service.next_crawl()
    assert crawl is not None and crawl.epoch == 0
    service.feed_fetched(crawl, [])
    service.flush()
    epochs = []
    while len(epochs) < 2:
        if (crawl := service.next_crawl()) is None:
            clock.advance_to(service.wake_at)
            continue
        epochs.append(crawl.epoch)
        service.feed_fetched(crawl, [])
        service.flush()
    assert epochs == [6, 12]                        # every hour: every sixth 10-minute epoch
