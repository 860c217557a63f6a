"""Baseline policies: static optimisation, Nutch's adaptive schedule, Miniflux's entry frequency."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy, policy_class
from scrapy_whittle.core.policies.miniflux import MinifluxPolicy, entry_frequency_interval
from scrapy_whittle.core.policies.nutch import NutchAdaptivePolicy
from scrapy_whittle.core.policies.static import StaticPolicy, static_distribution
from scrapy_whittle.core.problem import Problem


def obs(epoch, sources, new_items, time=None, items=None):
    sources = np.asarray(sources)
    kwargs = {}
    if items is not None:
        off = np.concatenate([[0], np.cumsum([len(x) for x in items])])
        kwargs = {"item_offsets": off,
                  "item_published": np.concatenate([np.asarray(x, float) for x in items])}
    return Observation(epoch=epoch, sources=sources,
                       time=float(epoch) if time is None else time,
                       new_items=new_items, reward=np.zeros(len(sources)), **kwargs)


def test_registry_and_oracle_flags():
    assert policy_class("static") is StaticPolicy and StaticPolicy.needs_parameters
    assert policy_class("nutch") is NutchAdaptivePolicy and not NutchAdaptivePolicy.needs_parameters
    assert policy_class("miniflux") is MinifluxPolicy and not MinifluxPolicy.needs_parameters
    with pytest.raises(ValueError, match="needs the sources' parameters"):
        make_policy("static", Problem(n=3))


# -- static -----------------------------------------------------------------------------------

def brute_force_static(alpha, u, budget, cost):
    """Bisection on the multiplier (the reference the exact solver must match)."""
    delta = 1 - alpha
    lo, hi = 1e-14, 1e8
    for _ in range(400):
        lam = np.sqrt(lo * hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = (np.sqrt(u / (lam * cost)) - delta) / np.where(delta < 1, 1 - delta, 1.0)
        p = np.where(delta < 1, np.clip(p, 0, 1), (u / cost > lam).astype(float))
        if np.dot(cost, p) > budget:
            lo = lam
        else:
            hi = lam
    return p


@pytest.mark.parametrize("seed", range(20))
def test_static_matches_bisection_and_spends_the_budget(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    alpha = rng.uniform(0.0, 0.999, n)
    u = rng.exponential(1.0, n)
    cost = rng.uniform(0.5, 2.0, n) if seed % 2 else np.ones(n)
    budget = float(rng.uniform(0.2, 0.8) * cost.sum())
    p = static_distribution(alpha, u, budget, cost)
    assert np.all((p >= 0) & (p <= 1))
    assert np.dot(cost, p) == pytest.approx(budget, rel=1e-9)
    np.testing.assert_allclose(p, brute_force_static(alpha, u, budget, cost), atol=1e-6)


def test_static_edge_cases():
    # budget covers every useful source: crawl them all; silent sources never
    np.testing.assert_array_equal(static_distribution([0.5, 0.5, 0.5], [1, 0, 2], 5), [1, 0, 1])
    # alpha = 0 (Delta = 1): steps; the budget left on a step is shared
    p = static_distribution([0.0, 0.0, 0.0], [3.0, 2.0, 2.0], 2.0)
    np.testing.assert_allclose(p, [1.0, 0.5, 0.5])
    with pytest.raises(ValueError, match="objective"):
        static_distribution([0.5], [1.0], 1, objective="clicks")


def test_static_sampling_has_the_right_inclusion_probabilities():
    p = Problem.from_pages([0.6, 0.08, 0.01, 0.3, 0.2], [5, 0.2, 1, 0.5, 2.0])
    policy = make_policy("static", p, rng=0)
    target = policy.distribution(2.0)
    counts = np.zeros(5)
    epochs = 4000
    for t in range(epochs):
        chosen = policy.select(t, 2.0)
        assert chosen.size == 2 and np.unique(chosen).size == 2
        counts[chosen] += 1
    np.testing.assert_allclose(counts / epochs, target, atol=0.03)


def test_static_state_round_trip():
    p = Problem.from_pages([0.6, 0.08, 0.01, 0.3], [5, 0.2, 1, 0.5])
    a = make_policy("static", p, rng=5)
    a.select(0, 1)
    b = make_policy("static", p, rng=99)
    b.load_state_dict(a.state_dict())
    assert [a.select(t, 1).tolist() for t in range(20)] == [b.select(t, 1).tolist()
                                                            for t in range(20)]


# -- Nutch ------------------------------------------------------------------------------------

def test_nutch_interval_shrinks_on_change_and_grows_otherwise():
    policy = NutchAdaptivePolicy(Problem(n=2), initial_interval=10.0, min_interval=1.0,
                                 max_interval=100.0)
    assert policy.select(0, 2).tolist() == [0, 1]          # everything due at the start
    policy.observe(obs(0, [0, 1], [3, 0]))
    np.testing.assert_allclose(policy.interval, [10 * 0.8, 10 * 1.4])
    np.testing.assert_allclose(policy.next_fetch, [8.0, 14.0])
    assert policy.select(7, 2).tolist() == []               # nothing due: budget unused
    assert policy.select(8, 2).tolist() == [0]
    assert policy.select(20, 1).tolist() == [0]             # most overdue first


def test_nutch_clamps_to_min_and_max():
    policy = NutchAdaptivePolicy(Problem(n=2), initial_interval=2.0, min_interval=1.5,
                                 max_interval=3.0)
    policy.select(0, 2)
    for t in range(5):
        policy.observe(obs(t, [0, 1], [1, 0]))
    np.testing.assert_allclose(policy.interval, [1.5, 3.0])


def test_nutch_defaults_in_hours():
    policy = NutchAdaptivePolicy(Problem(n=100))
    assert policy.min_interval == pytest.approx(60 / 3600)
    assert policy.max_interval == pytest.approx(365 * 24)
    policy.select(0, 4)
    assert policy.initial_interval == pytest.approx(25.0)   # N mean(C) / budget epochs


def test_nutch_sync_delta():
    policy = NutchAdaptivePolicy(Problem(n=1), initial_interval=2.0, min_interval=0.5,
                                 max_interval=100.0, sync_delta=True)
    policy.select(10, 1)
    # the newest new entry was published at time 4: delta = 6 > interval 1.6
    policy.observe(obs(10, [0], [2], items=[[3.0, 4.0]]))
    assert policy.interval[0] == pytest.approx(6.0)
    assert policy.next_fetch[0] == pytest.approx(10 - 0.3 * 6 + 6.0)


# -- Miniflux ---------------------------------------------------------------------------------

def test_miniflux_formula():
    minutes = entry_frequency_interval([0, 1, 7, 100, 10_000])
    np.testing.assert_allclose(minutes, [1440, 1440, 1440, round(10080 / 100), 5])
    np.testing.assert_allclose(entry_frequency_interval([14], factor=2.0), [360])


def test_miniflux_interval_from_weekly_count_of_item_times():
    policy = MinifluxPolicy(Problem(n=2))                   # one time unit = one hour
    assert policy.select(0, 2).tolist() == [0, 1]
    # source 0: 20 entries in the past week plus 5 older ones; source 1: none
    recent = list(np.linspace(100.0, 200.0, 20))
    old = [1.0, 2.0, 3.0, 4.0, 5.0]
    policy.observe(obs(200, [0, 1], [25, 0], time=200.0, items=[old + recent, []]))
    assert policy.weekly_count.tolist() == [20, 0]
    np.testing.assert_allclose(policy.interval([0, 1]), [round(10080 / 20) / 60, 24.0])
    np.testing.assert_allclose(policy.next_check, [200 + 504 / 60, 224.0])
    assert policy.select(208, 2).tolist() == []
    assert policy.select(209, 2).tolist() == [0]


def test_miniflux_counts_spread_entries_without_item_times():
    policy = MinifluxPolicy(Problem(n=1), time_unit_hours=24.0)   # one unit = one day
    policy.select(0, 1)
    policy.observe(obs(3, [0], [70], time=3.0))        # 70 entries in the last week: 10/day
    assert policy.weekly_count[0] == 70
    assert policy.interval([0])[0] == pytest.approx(144 / 60 / 24)
    policy.observe(obs(20, [0], [0], time=20.0))       # two weeks later nothing new
    assert policy.weekly_count[0] == 0
    assert policy.interval([0])[0] == pytest.approx(1.0)            # the 1440 min maximum


def test_miniflux_state_round_trip():
    a = MinifluxPolicy(Problem(n=2))
    a.observe(obs(5, [0], [3], time=5.0, items=[[4.0, 4.5, 4.9]]))
    b = MinifluxPolicy(Problem(n=2))
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(b.weekly_count, a.weekly_count)
    b.observe(obs(6, [0], [1], time=6.0, items=[[5.5]]))
    assert b.weekly_count[0] == 4


def test_miniflux_batch_counts_equal_the_crawl_by_crawl_counts():
    """A batch of checks is counted in one pass: the day counts, the weekly counts and the
    last checks equal those of the checks counted one by one (written out below, Miniflux's
    rule crawl by crawl), over weeks of irregular checks, gaps of more than 8 days too, and
    batches where a source is checked twice."""
    rng = np.random.default_rng(3)
    n, days, day = 40, 8, 24.0
    batch = MinifluxPolicy(Problem(n=n))
    ref_counts = np.zeros((n, days), dtype=np.int64)
    ref_newest = np.full(n, np.iinfo(np.int32).min, dtype=np.int64)
    ref_weekly, ref_last = np.zeros(n), np.full(n, np.nan)
    now = 0.0
    for epoch in range(60):
        now += float(rng.choice([1.0, 7.0, 30.0, 230.0]))       # hours; 230 > 8 days
        src = rng.choice(n, int(rng.integers(1, 15)), replace=False)
        times = now - np.arange(src.size) * 0.1                 # a batch spans some time
        if epoch % 5 == 0:
            src[-1] = src[0]                                    # a source checked twice
        lens = rng.integers(0, 6, src.size)
        items = [list(t - rng.uniform(0, 400, m)) for t, m in zip(times, lens, strict=True)]
        off = np.concatenate([[0], np.cumsum(lens)])
        batch.observe(Observation(epoch=epoch, sources=src, time=times, new_items=lens,
                                  reward=np.zeros(src.size), item_offsets=off,
                                  item_published=np.concatenate(
                                      [np.asarray(x, float) for x in items])))
        for j in np.argsort(times, kind="stable"):              # one check after the other
            i, t = src[j], times[j]
            today = int(np.floor(t / day))
            shift = today - int(ref_newest[i])
            if shift >= days:
                ref_counts[i] = 0
            elif shift > 0:
                ref_counts[i] = np.concatenate([ref_counts[i, shift:], np.zeros(shift)])
            if shift > 0:
                ref_newest[i] = today
            for p in items[j]:
                slot = int(np.floor(p / day)) - int(ref_newest[i]) + days - 1
                if 0 <= slot < days:
                    ref_counts[i, slot] += 1
            inside = 1.0 - (t / day - today)
            ref_weekly[i] = round(float(ref_counts[i, 1:].sum()) + inside * ref_counts[i, 0])
            ref_last[i] = t
        np.testing.assert_array_equal(batch.day_counts, ref_counts)
        np.testing.assert_array_equal(batch.newest_day, ref_newest)
        np.testing.assert_array_equal(batch.weekly_count, ref_weekly)
        np.testing.assert_array_equal(batch.last_check, ref_last)
    assert batch.weekly_count.max() > 0
