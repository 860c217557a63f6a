"""The periodic recursion and the periodic Lagrangian bound, against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from scrapy_whittle.core.bound import upper_bound
from scrapy_whittle.core.periodic import PeriodicArrivals, accumulated, arrivals_from_bins
from scrapy_whittle.core.periodic_bound import _Block, _solve_block, periodic_upper_bound


def direct_accumulated(alpha, u_row, phase, k):
    x = 0.0
    for j in range(k):
        x = alpha * x + u_row[(phase + j) % len(u_row)]
    return x


def test_accumulated_matches_the_recursion():
    rng = np.random.default_rng(0)
    alpha = rng.uniform(0.0, 1.0, 5)
    alpha[0], alpha[1] = 0.0, 1.0
    u = rng.uniform(0.0, 3.0, (5, 7))
    for i in range(5):
        for phase in range(7):
            for k in (0, 1, 3, 7, 8, 20, 71):
                got = accumulated(alpha, u, np.array([i]), np.array([phase]), np.array([k]))[0]
                assert got == pytest.approx(direct_accumulated(alpha[i], u[i], phase, k),
                                            rel=1e-10, abs=1e-12)


def brute_gain(alpha, u_row, price_cost, k_max):
    """Best average of (reward - price) over the simple cycles of the phase graph whose
    edges wait at most k_max epochs; 0 = never crawl. A best cycle ratio is always reached on
    a simple cycle (a cycle's ratio is a weighted mean of its simple cycles' ratios)."""
    big_k = len(u_row)
    best = 0.0
    for length in range(1, big_k + 1):
        for nodes in itertools.permutations(range(big_k), length):
            if nodes[0] != min(nodes):
                continue
            options = []
            for a, b in zip(nodes, nodes[1:] + nodes[:1], strict=True):
                r = (b - a) % big_k
                options.append([(k, direct_accumulated(alpha, u_row, a, k) - price_cost[b])
                                for k in range(1, k_max + 1) if k % big_k == r])
            for combo in itertools.product(*options):
                best = max(best, sum(w for _, w in combo) / sum(d for d, _ in combo))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_subsidy_problem_solved_exactly(seed):
    rng = np.random.default_rng(seed)
    big_k = int(rng.integers(1, 5))
    alpha = float(rng.uniform(0.3, 0.97))
    u = rng.uniform(0.0, 2.0, big_k) * (rng.uniform(size=big_k) < 0.8)
    price = rng.uniform(0.0, 6.0, big_k)
    k_max = {1: 60, 2: 60, 3: 21, 4: 14}[big_k]
    gain, rate, _ = _solve_block(_Block(np.array([alpha]), u[None, :], np.ones(1)),
                                 price[None, :])
    assert gain[0] == pytest.approx(brute_gain(alpha, u, price, k_max), rel=1e-9, abs=1e-12)
    assert np.all(rate >= 0)
    if gain[0] > 0:
        assert rate.sum() > 0


def test_one_phase_is_the_stationary_bound():
    rng = np.random.default_rng(3)
    alpha = rng.uniform(0.2, 0.99, 40)
    u = rng.lognormal(0.0, 1.0, 40)
    cost = rng.choice([1.0, 2.0], 40)
    stationary = upper_bound(alpha, u, 7.0, cost).value
    got = periodic_upper_bound(PeriodicArrivals(alpha, u[:, None]), 7.0, cost)
    assert got.value == pytest.approx(stationary, rel=1e-6)
    # the same arrivals every hour of a 6-hour period: still the stationary bound
    flat = periodic_upper_bound(PeriodicArrivals(alpha, np.repeat(u[:, None], 6, axis=1)),
                                7.0, cost)
    assert flat.value == pytest.approx(stationary, rel=1e-6)


def exact_optimum(alpha, u, budget_crawls: int, horizon_periods: int = 4) -> float:
    """Best long-run average of any policy crawling ``budget_crawls`` sources per epoch:
    every schedule that repeats after ``horizon_periods`` periods, evaluated in its steady
    state (the state after one repetition is periodic)."""
    n, big_k = u.shape
    length = big_k * horizon_periods
    choices = list(itertools.combinations(range(n), budget_crawls))
    best = -np.inf
    for plan in itertools.product(choices, repeat=length):
        x = np.zeros(n)
        total = 0.0
        for _ in range(3):                        # the third repetition is periodic
            total = 0.0
            for t in range(length):
                crawled = list(plan[t])
                total += x[crawled].sum()
                x[crawled] = 0.0
                x = alpha * x + u[:, t % big_k]
        best = max(best, total / length)
    return best


@pytest.mark.parametrize("seed", range(4))
def test_bound_is_above_every_policy_on_small_instances(seed):
    rng = np.random.default_rng(100 + seed)
    alpha = rng.uniform(0.3, 0.95, 3)
    u = rng.uniform(0.0, 2.0, (3, 2))
    per = PeriodicArrivals(alpha, u)
    bound = periodic_upper_bound(per, 1.0)
    best = exact_optimum(alpha, u, 1, horizon_periods=3)
    assert best <= bound.value * (1 + 1e-9)
    assert bound.value <= bound.scalar_value * (1 + 1e-12)
    # and not loose: on these 3-source, 1-crawl problems the relaxation gives away < 5%
    assert bound.value <= 1.05 * best


def test_phase_prices_tighten_a_shared_rhythm():
    # every source publishes only in the first half of the period: one price for all phases
    # lets the relaxation crawl everything then; phase prices charge that half more
    rng = np.random.default_rng(5)
    n = 60
    alpha = rng.uniform(0.3, 0.8, n)
    u = np.zeros((n, 8))
    u[:, :4] = rng.uniform(0.5, 2.0, (n, 4))
    b = periodic_upper_bound(PeriodicArrivals(alpha, u), 6.0)
    assert b.value < b.scalar_value * 0.999
    assert b.price[:4].mean() != pytest.approx(b.price[4:].mean())
    assert b.crawl_rate.shape == (n, 8) and np.all(b.crawl_rate >= 0)


def test_budget_for_everything_and_bad_input():
    per = PeriodicArrivals([0.5, 0.5], [[1.0, 0.0], [2.0, 1.0]])
    assert periodic_upper_bound(per, 2.0).value == pytest.approx(0.5 + 1.5)
    with pytest.raises(ValueError, match="budget"):
        periodic_upper_bound(per, 0.0)
    with pytest.raises(ValueError, match="prices"):
        periodic_upper_bound(per, 1.0, prices="hourly")
    with pytest.raises(ValueError, match="alpha"):
        PeriodicArrivals([1.5], [[1.0]])
    with pytest.raises(ValueError, match="u must"):
        PeriodicArrivals([0.5], [[-1.0]])


def test_arrivals_from_bins_phase_and_values():
    # 4 bins of 6 h: publishing only in bin 1 (06:00-12:00); epochs of 12 h, the crawl's
    # epoch 0 starting at 36:00 (noon of the second day)
    bins = np.array([[0.0, 4.0, 0.0, 0.0]])
    per = arrivals_from_bins([1.0], [1.0], [0.0], bins, 6.0, 12.0, origin=0.0, start=36.0)
    assert per.k == 2 and per.phase0 == 1        # noon starts the second 12-h phase
    assert per.u[0].tolist() == pytest.approx([24.0, 0.0])
    assert per.alpha[0] == 1.0
    decaying = arrivals_from_bins([1.0], [1.0], [0.1], bins, 6.0, 12.0)
    # published uniformly over 06:00-12:00 at rate 4, valued at 12:00
    assert decaying.u[0, 0] == pytest.approx(4.0 * (1 - np.exp(-0.6)) / 0.1)
    with pytest.raises(ValueError, match="whole number of bins"):
        arrivals_from_bins([1.0], [1.0], [0.0], bins, 6.0, 9.0)
