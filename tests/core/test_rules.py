"""The feed readers' and news crawlers' interval rules: NewsBlur, CommaFeed, StormCrawler
(news-crawl's settings) and a fixed interval, against their published formulas."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy, policy_class
from scrapy_whittle.core.policies.commafeed import CommaFeedPolicy, commafeed_minutes
from scrapy_whittle.core.policies.fixed_interval import FixedIntervalPolicy
from scrapy_whittle.core.policies.newsblur import NewsBlurPolicy, newsblur_minutes
from scrapy_whittle.core.policies.stormcrawler import StormCrawlerPolicy, adaptive_interval
from scrapy_whittle.core.problem import Problem

RULES = {"newsblur": NewsBlurPolicy, "commafeed": CommaFeedPolicy,
         "stormcrawler": StormCrawlerPolicy, "fixed-interval": FixedIntervalPolicy}


def obs(epoch, sources, new_items, items=None, ok=None):
    sources = np.asarray(sources)
    kwargs = {}
    if items is not None:
        off = np.concatenate([[0], np.cumsum([len(x) for x in items])])
        kwargs = {"item_offsets": off,
                  "item_published": np.concatenate([np.asarray(x, float) for x in items])}
    return Observation(epoch=epoch, sources=sources, time=float(epoch), new_items=new_items,
                       reward=np.zeros(len(sources)), ok=ok, **kwargs)


def test_registry():
    for name, cls in RULES.items():
        assert policy_class(name) is cls and cls.name == name and not cls.needs_parameters


# -- NewsBlur -----------------------------------------------------------------------------------

def test_newsblur_formula():
    # one free subscriber: subs = 0.1
    np.testing.assert_allclose(newsblur_minutes([0, 15, 30, 60]), [1440, 180, 45, 45])
    # no story for 3 months: 1440 x 3, capped at 48 h
    np.testing.assert_allclose(newsblur_minutes([0, 0], [0.5, 3.0]), [1440, 2880])
    # one premium subscriber: subs = 1, capped at 4 h
    np.testing.assert_allclose(newsblur_minutes([0, 15, 30], [2.0, 0, 0], 1, 1), [240, 180, 45])
    # 20 active, 10 premium: subs = 11
    np.testing.assert_allclose(newsblur_minutes([30, 15, 3, 0], 0, 20, 10), [6, 30, 54, 240])
    # 5 active, 2 premium: subs = 2.3
    np.testing.assert_allclose(newsblur_minutes([45, 29], 0, 5, 2), [15, 60 * (1 - 29 / 30)])


def test_newsblur_counts_the_last_30_days_and_schedules():
    policy = NewsBlurPolicy(Problem(n=2), random_delay=False)      # one time unit = one hour
    assert policy.select(0, 2).tolist() == [0, 1]
    recent = [1000.0 - 10 * k for k in range(1, 46)]               # 45 in the last 450 h
    old = [1000.0 - 800 - k for k in range(5)]                     # older than 30 days
    policy.observe(obs(1000, [0, 1], [50, 0], items=[recent + old, []]))
    assert policy.stories_last_month.tolist() == [45, 0]
    # 1.5 stories a day: 45 min; nothing ever: 1440 min
    np.testing.assert_allclose(policy.next_update, [1000.75, 1024.0])
    assert policy.select(1000, 2).tolist() == []                   # budget left unused
    assert policy.select(1001, 2).tolist() == [0]
    assert policy.select(1024, 2).tolist() == [0, 1]               # most overdue first
    assert policy.select(1024, 1).tolist() == [0]
    # 60 days later nothing new: no story in 30 days, the last one 2 months old: 2880 min
    policy.observe(obs(2440, [0], [0], items=[[]]))
    assert policy.stories_last_month[0] == 0
    assert policy.next_update[0] == pytest.approx(2440 + 48.0)


def test_newsblur_random_delay_is_a_quarter_of_whole_minutes():
    n = 300
    policy = NewsBlurPolicy(Problem(n=n), rng=7)
    items = [[100.0 - k for k in range(1, 31)]] * n                # 30 stories: 45 min
    policy.observe(obs(100, np.arange(n), np.full(n, 30), items=items))
    delay_minutes = (policy.next_update - 100.75) * 60
    quarters = np.round(delay_minutes * 4)
    np.testing.assert_allclose(delay_minutes * 4, quarters, atol=1e-6)
    assert quarters.min() >= 0 and quarters.max() <= 45
    assert np.unique(quarters).size > 30                           # drawn, not fixed


# -- CommaFeed ----------------------------------------------------------------------------------

def test_commafeed_formula():
    gap = [60, 4, 600, np.nan, 60, 60, 60, 60, 60]
    days = [0, 0, 0, 0, 7, 14, 30, np.nan, 6.9]
    np.testing.assert_allclose(commafeed_minutes(gap, days),
                               [30, 5, 60, 240, 60, 120, 240, 240, 30])
    np.testing.assert_allclose(commafeed_minutes([600], [0], 10, 1000), [250])


def test_commafeed_half_the_mean_gap_of_the_document():
    policy = CommaFeedPolicy(Problem(n=3), feed_window=3)
    policy.select(0, 3)
    # source 0: four entries 30 min apart; 1: one entry; 2: newest entry 10 days old
    policy.observe(obs(100, [0, 1, 2], [4, 1, 2],
                       items=[[99.5, 98.0, 99.0, 98.5], [99.0], [-140.0, -141.0]]))
    np.testing.assert_allclose(policy.entries[0], [98.5, 99.0, 99.5])  # the newest 3
    # 15 min; the 4 h maximum without a mean gap; 4 h / 4 after 7 days
    np.testing.assert_allclose(policy.next_refresh, [100.25, 104.0, 101.0])
    assert policy.select(100, 3).tolist() == []
    assert policy.select(101, 3).tolist() == [0, 2]
    # a crawl with nothing new keeps the document; a new entry pushes the oldest out
    policy.observe(obs(101, [0, 1], [1, 0], items=[[100.9], []]))
    np.testing.assert_allclose(policy.entries[0], [99.0, 99.5, 100.9])
    gap = (100.9 - 99.0) / 2 * 60
    assert policy.next_refresh[0] == pytest.approx(101 + min(gap / 2, 60) / 60)
    assert policy.next_refresh[1] == pytest.approx(105.0)


def test_commafeed_without_item_times_spreads_new_entries():
    policy = CommaFeedPolicy(Problem(n=1))
    policy.observe(obs(10, [0], [0]))
    policy.observe(obs(12, [0], [4]))                  # 4 entries over 2 h: 30 min apart
    np.testing.assert_allclose(policy.entries[0, -4:], [10.25, 10.75, 11.25, 11.75])
    assert policy.next_refresh[0] == pytest.approx(12.25)


# -- StormCrawler -------------------------------------------------------------------------------

def test_stormcrawler_formula():
    np.testing.assert_allclose(adaptive_interval([720, 720, 100_000, 91], [True, False, False,
                                                                            True]),
                               [594, 1080, 129_600, 90])
    # StormCrawler's own defaults: 60 .. 20160, rates 0.5
    np.testing.assert_allclose(adaptive_interval([1440, 15_000], [True, False], 60, 20_160,
                                                 0.5, 0.5), [750, 20_160])


def test_stormcrawler_first_fetch_sets_the_default_then_adapts():
    policy = StormCrawlerPolicy(Problem(n=2))
    policy.observe(obs(0, [0, 1], [5, 0]))
    np.testing.assert_allclose(policy.interval_minutes, [720, 720])   # not adapted
    np.testing.assert_allclose(policy.next_fetch, [12, 12])
    policy.observe(obs(12, [0, 1], [3, 0]))
    np.testing.assert_allclose(policy.interval_minutes, [594, 1080])
    np.testing.assert_allclose(policy.next_fetch, [12 + 9.9, 12 + 18])
    policy.observe(obs(22, [0], [0], ok=[False]))                     # failed: unchanged
    assert policy.interval_minutes[0] == 594 and policy.next_fetch[0] == pytest.approx(21.9)


def test_unconstrained_volume_on_a_deterministic_problem():
    """Crawled every epoch a rule makes due, with a budget that never binds."""
    def crawl_epochs(policy, horizon, new_items):
        epochs = []
        for t in range(horizon):
            chosen = policy.select(t, policy.n)
            epochs.extend([t] * chosen.size)
            policy.observe(obs(t, chosen, np.full(chosen.size, new_items)))
        return epochs

    # never anything new: 12 h, then 18 h, then 27 h
    assert crawl_epochs(StormCrawlerPolicy(Problem(n=1)), 60, 0) == [0, 12, 30, 57]
    # every 2 h: 4 sources crawled at epochs 0, 2, 4, ...: 2 crawls an epoch
    epochs = crawl_epochs(FixedIntervalPolicy(Problem(n=4), interval_minutes=120), 10, 1)
    assert epochs == [t for t in range(0, 10, 2) for _ in range(4)]


# -- fixed interval and what every rule shares --------------------------------------------------

def test_fixed_interval_due_time():
    policy = FixedIntervalPolicy(Problem(n=2), interval_minutes=180)
    policy.observe(obs(5, [0], [0]))
    assert policy.next_fetch.tolist() == [8.0, 0.0]
    assert policy.select(7, 2).tolist() == [1]
    assert policy.select(8, 2).tolist() == [1, 0]          # 1 overdue since 0, 0 since 8
    day_unit = FixedIntervalPolicy(Problem(n=1), time_unit_hours=24.0)
    day_unit.observe(obs(3, [0], [0]))
    assert day_unit.next_fetch[0] == pytest.approx(3 + 1 / 24)


def some_crawls(policy):
    policy.select(0, policy.n)
    policy.observe(obs(0, [0, 1], [2, 0], items=[[-3.0, -1.0], []]))
    policy.observe(obs(7, [0], [3], items=[[5.0, 6.0, 6.5]]))


@pytest.mark.parametrize("name", sorted(RULES))
def test_state_round_trip(name):
    a = make_policy(name, Problem(n=3), rng=1)
    some_crawls(a)
    b = make_policy(name, Problem(n=3), rng=2)
    b.load_state_dict(a.state_dict())
    for key in a.row_dtype().names:
        np.testing.assert_array_equal(getattr(b, key), getattr(a, key))
    later = obs(9, [0, 1, 2], [1, 0, 4], items=[[8.5], [], [1.0, 2.0, 3.0, 8.0]])
    a.observe(later)
    b.observe(later)
    for t in (10, 20, 40, 200):
        assert a.select(t, 3).tolist() == b.select(t, 3).tolist()
    due = {"newsblur": "next_update", "commafeed": "next_refresh"}.get(name, "next_fetch")
    np.testing.assert_array_equal(getattr(b, due), getattr(a, due))


@pytest.mark.parametrize("name", sorted(RULES))
def test_grow_keeps_the_state_of_existing_sources(name):
    policy = make_policy(name, Problem(n=2), rng=0)
    some_crawls(policy)
    before = {key: getattr(policy, key).copy() for key in policy.row_dtype().names}
    policy.grow(3)
    assert policy.n == 5
    for key, value in before.items():
        np.testing.assert_array_equal(getattr(policy, key)[:2], value)
    # new sources are due at once, before the ones crawled since
    assert policy.select(8, 3).tolist() == [2, 3, 4]
