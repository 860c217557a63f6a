from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle import upper_bound, whittle_index
from scrapy_whittle.core.bound import best_cycle, bound_curve
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


def test_the_bound_curve_is_upper_bound_at_each_budget_non_decreasing_and_concave():
    rng = np.random.default_rng(17)
    for _ in range(5):
        n = 8
        a = rng.uniform(0.1, 0.99, n)
        u = rng.lognormal(0, 1, n)
        c = rng.uniform(0.5, 2.0, n)
        budgets = np.geomspace(0.05, 1.2 * c.sum(), 40)
        curve = bound_curve(a, u, budgets[::-1], c)       # any order: held ascending
        np.testing.assert_array_equal(curve.budgets, budgets)
        direct = [upper_bound(a, u, m, c).value for m in budgets]
        # each a bound (no lower than the minimum over lambda) within the search's tolerance
        assert np.all(curve.values >= np.array(direct) * (1 - 1e-12))
        np.testing.assert_allclose(curve.values, direct, rtol=2e-6)
        assert np.all(np.diff(curve.values) >= -2e-6 * curve.values[1:])
        # concave in the budget: each chord lies below the curve
        m, v = curve.budgets, curve.values
        for i in range(1, len(m) - 1):
            chord = v[i - 1] + (v[i + 1] - v[i - 1]) * (m[i] - m[i - 1]) / (m[i + 1] - m[i - 1])
            assert v[i] >= chord - 2e-6 * v[i]
        # the value available is crawling every source every epoch, at the sum of the costs
        assert curve.available == pytest.approx(u.sum())
        assert curve.saturation == pytest.approx(c.sum())
        assert curve.shares[-1] == 1.0 and np.all(curve.shares[m < c.sum() * 0.999] < 1)


def test_the_bound_curve_matches_brute_force_on_small_problems():
    rng = np.random.default_rng(23)
    a = rng.uniform(0.2, 0.95, 5)
    u = rng.lognormal(0, 1, 5)
    c = np.ones(5)
    curve = bound_curve(a, u, [0.3, 1.0, 2.5], c)
    for m, value in zip(curve.budgets, curve.values, strict=True):
        price = upper_bound(a, u, m).price
        grid = np.concatenate([np.linspace(0, 2 * price + 1e-9, 400), [price]])
        assert value == pytest.approx(brute_force_bound(a, u, m, c, grid), rel=1e-4)


def test_the_bound_curve_of_sources_without_value_or_of_no_source():
    a = np.array([0.5, 0.9, 0.7])
    u = np.array([0.0, 2.0, 3.0])           # a source worth nothing
    curve = bound_curve(a, u, [0.5, 1, 2, 3, 10])
    assert curve.saturation == 2.0 and curve.available == pytest.approx(5.0)
    np.testing.assert_allclose(curve.values,
                               [upper_bound(a, u, m).value for m in curve.budgets], rtol=2e-6)
    assert curve.shares[-2:].tolist() == [1.0, 1.0]
    assert np.all(np.diff(curve.values) >= 0)
    empty = bound_curve([], [], [1.0, 2.0])
    assert empty.values.tolist() == [0.0, 0.0] and empty.available == 0.0
    assert empty.shares.tolist() == [0.0, 0.0]
    worthless = bound_curve([0.5, 0.5], [0.0, 0.0], [1.0])
    assert worthless.saturation == 0.0 and worthless.shares.tolist() == [0.0]
    with pytest.raises(ValueError, match="budgets"):
        bound_curve(a, u, [0.0, 1.0])


def test_sources_without_decay_or_without_memory_bound_what_they_can_earn():
    # alpha = 1: crawled ever more rarely, a source still earns u per epoch, at no budget;
    # alpha = 0: what waits is u however long it waits, so a crawl every epoch earns u
    never_decays = upper_bound([1.0], [1.0], 0.5)
    assert never_decays.value == pytest.approx(1.0)
    forgets = upper_bound([0.0], [3.0], 0.5)
    assert forgets.value == pytest.approx(1.5)          # u x (a crawl every other epoch)
    a, u = np.array([0.5, 0.9, 1.0, 0.0]), np.array([0.0, 2.0, 1.0, 3.0])
    curve = bound_curve(a, u, [0.5, 1, 2, 3, 10])
    assert curve.saturation == 3.0 and curve.available == pytest.approx(6.0)
    assert np.all(np.diff(curve.values) >= 0) and curve.shares[-1] == 1.0
    # the source without decay is worth its u at every budget
    assert curve.values[0] >= 1.0
