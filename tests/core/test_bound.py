from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle import upper_bound, whittle_index
from scrapy_whittle.core.bound import best_cycle
from tests.core.brute_force import brute_force_bound
from tests.core.test_index import TABLE_I_ALPHA, TABLE_I_U


def test_table_i_bounds_match_the_papers_readme():
    m1 = upper_bound(TABLE_I_ALPHA, TABLE_I_U, 1)
    assert m1.value == pytest.approx(260.39, abs=0.005)
    # the relaxed optimum crawls sources 1 and 2 every other epoch and never 3, 4
    np.testing.assert_array_equal(m1.cycle, [2, 2, np.inf, np.inf])
    # and equals the alternating policy's value (u1(1+a1) + u2(1+a2)) / 2
    alt = (TABLE_I_U[:2] * (1 + TABLE_I_ALPHA[:2])).sum() / 2
    assert m1.value == pytest.approx(alt, rel=1e-9)
    m2 = upper_bound(TABLE_I_ALPHA, TABLE_I_U, 2)
    assert m2.value == pytest.approx(338.05, abs=0.005)


def test_matches_brute_force_enumeration_of_cycles_and_prices():
    rng = np.random.default_rng(5)
    for _ in range(5):
        n = 6
        a = rng.uniform(0.1, 0.95, n)
        u = rng.lognormal(0, 1, n)
        c = rng.uniform(0.5, 2.0, n)
        budget = float(rng.uniform(0.5, 3.0))
        ub = upper_bound(a, u, budget, c)
        # the minimum of a convex piecewise-linear function: a grid around the price found
        grid = np.concatenate([np.linspace(0, 2 * ub.price + 1e-9, 400), [ub.price]])
        brute = brute_force_bound(a, u, budget, c, grid)
        assert ub.value <= brute + 1e-9 * max(1, brute)
        assert ub.value == pytest.approx(brute, rel=1e-4)


def test_every_price_gives_a_larger_value_and_a_feasible_relaxation():
    rng = np.random.default_rng(9)
    a = rng.uniform(0.1, 0.99, 50)
    u = rng.lognormal(0, 1, 50)
    ub = upper_bound(a, u, 5)
    assert np.sum(1.0 / ub.cycle) == pytest.approx(5, rel=0.2)
    for lam in [0.0, ub.price / 2, ub.price * 2]:
        cyc = best_cycle(lam, a, u)
        n = np.where(np.isfinite(cyc), cyc, 1)
        gain = np.where(np.isfinite(cyc), (u * (1 - a**n) / (1 - a) - lam) / n, 0).clip(0)
        assert lam * 5 + gain.sum() >= ub.value - 1e-9


def test_best_cycle_is_the_smallest_n_whose_index_reaches_the_price():
    rng = np.random.default_rng(11)
    a = rng.uniform(0.01, 0.999, 2000)
    u = rng.lognormal(0, 1, 2000)
    ustar = u / (1 - a)
    c = rng.uniform(0, 1, 2000) * ustar
    n = best_cycle(c, a, u)
    assert np.all(np.isfinite(n))
    at_n = whittle_index(ustar * (1 - a**n), a, u)
    before = whittle_index(ustar * (1 - a ** (n - 1)), a, u)
    assert np.all(at_n >= c * (1 - 1e-9))
    assert np.all((before < c * (1 + 1e-9)) | (n == 1))
    assert np.all(np.isinf(best_cycle(ustar * 1.01, a, u)))


def test_affordable_budget_gives_the_sum_of_u_and_bad_budget_is_rejected():
    a = np.array([0.5, 0.9])
    u = np.array([1.0, 2.0])
    assert upper_bound(a, u, 2).value == pytest.approx(3.0)
    with pytest.raises(ValueError, match="budget"):
        upper_bound(a, u, 0)
