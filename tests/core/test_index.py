from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle import whittle_index
from scrapy_whittle.core.index import IndexTable
from tests.core.brute_force import brute_force_index

TABLE_I_ALPHA = np.exp(-np.array([0.7, 0.35, 0.7, 0.21]))
TABLE_I_U = 250 * np.array([1.0, 0.7, 0.2, 0.08]) * (1 - TABLE_I_ALPHA) / np.array(
    [0.7, 0.35, 0.7, 0.21])


def test_table_i_u_values_match_the_papers_readme():
    np.testing.assert_allclose(TABLE_I_U, [179.79, 147.66, 35.96, 18.04], atol=0.01)


def test_index_on_visited_states_is_the_tie_between_cycles_n_and_n_plus_1():
    # x_n = u*(1 - a^n); cycles n and n + 1 tie at subsidy C*lambda = x_n - n u a^n
    def cycle_value(c, m, a, u):  # average reward of crawling every m epochs, subsidy c
        return (c * (m - 1) + u / (1 - a) * (1 - a**m)) / m

    for a, u in zip(TABLE_I_ALPHA, TABLE_I_U, strict=True):
        n = np.arange(1, 40)
        gamma = whittle_index(u / (1 - a) * (1 - a**n), a, u)
        for m, c in zip(n, gamma, strict=True):
            assert cycle_value(c, m, a, u) == pytest.approx(cycle_value(c, m + 1, a, u), rel=1e-9)


def test_matches_brute_force_from_the_definition_on_random_instances():
    rng = np.random.default_rng(12345)
    for _ in range(60):
        alpha = float(rng.uniform(0.05, 0.97))
        u = float(rng.lognormal(0, 1))
        cost = float(rng.uniform(0.5, 3))
        ustar = u / (1 - alpha)
        # states inside [u, u*), below u, on the grid, and above u*
        xs = [rng.uniform(u, ustar), rng.uniform(0, u), ustar * (1 - alpha ** rng.integers(1, 9)),
              rng.uniform(ustar, 3 * ustar)]
        for x in xs:
            expected = brute_force_index(float(x), alpha, u, cost)
            got = float(whittle_index(x, alpha, u, cost))
            assert got == pytest.approx(expected, rel=1e-6, abs=1e-9 * ustar), (x, alpha, u)


def test_is_finite_and_non_decreasing_in_x_everywhere():
    rng = np.random.default_rng(7)
    for alpha in [0.0, 1e-12, 0.01, 0.3, 0.9, 0.999, 1 - 1e-9, 1.0]:
        for u in [0.0, 1e-300, 1e-9, 1.0, 1e6]:
            ustar = u / (1 - alpha) if alpha < 1 else 1e9
            x = np.sort(np.concatenate([
                np.linspace(0, 3 * ustar + 1, 2001), rng.uniform(0, 3 * ustar + 1, 500),
                [0.0, u, ustar, np.nextafter(ustar, 0), np.nextafter(ustar, np.inf)]]))
            g = whittle_index(x, alpha, u, 1.0)
            assert np.all(np.isfinite(g)), (alpha, u)
            assert np.all(g >= 0)
            # non-decreasing up to floating-point rounding of the pieces
            assert np.all(np.diff(g) >= -1e-12 * max(1.0, float(g.max()))), (alpha, u)


def test_continuous_at_u_star_and_equal_to_x_over_cost_above_it():
    a, u, c = 0.8, 2.0, 1.5
    ustar = u / (1 - a)
    below = float(whittle_index(ustar * (1 - 1e-12), a, u, c))
    assert below == pytest.approx(ustar / c, rel=1e-6)
    np.testing.assert_allclose(whittle_index([ustar, 2 * ustar], a, u, c),
                               [ustar / c, 2 * ustar / c])


def test_limits_alpha_to_one_and_zero_and_silent_source():
    x = np.array([0.0, 0.5, 3.0])
    # alpha -> 1: nothing is lost by waiting, the index vanishes continuously
    g = [whittle_index(x, 1 - eps, 1.0) for eps in (1e-3, 1e-6, 1e-9)]
    assert np.all(g[2] <= g[1] + 1e-12) and np.all(g[1] <= g[0] + 1e-12)
    np.testing.assert_allclose(whittle_index(x, 1.0, 1.0), 0.0)
    assert np.all(g[2] < 1e-6)
    # alpha -> 0: content is worthless after an epoch; gamma = (1 - alpha) x below u*
    np.testing.assert_allclose(whittle_index([0.2, 0.7], 1e-300, 1.0), [0.2, 0.7])
    np.testing.assert_allclose(whittle_index([0.2, 0.7], 0.0, 1.0), [0.2, 0.7])
    # u -> 0: collect what is left, the index is x / C, continuous in u
    np.testing.assert_allclose(whittle_index(x, 0.5, 0.0, 2.0), x / 2)
    np.testing.assert_allclose(whittle_index(x, 0.5, 1e-15, 2.0), x / 2, atol=1e-14)


def test_returns_an_array_even_for_scalars():
    g = whittle_index(3.0, 0.5, 2.0)
    assert isinstance(g, np.ndarray) and g.shape == ()


def test_broadcasts_and_cost_scales():
    g = whittle_index(np.ones((3, 1)), np.array([0.2, 0.5]), 1.0, np.array([1.0, 2.0]))
    assert g.shape == (3, 2)
    np.testing.assert_allclose(g[:, 1] * 2, whittle_index(1.0, 0.5, 1.0) * np.ones(3))


def test_index_table_matches_function():
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 1, 1000)
    u = rng.lognormal(size=1000)
    c = rng.uniform(0.5, 2, 1000)
    x = rng.uniform(0, 2, 1000) * u / (1 - a)
    np.testing.assert_array_equal(IndexTable(a, u, c).index(x), whittle_index(x, a, u, c))


def test_tables_from_logs_and_for_other_arrivals_agree_with_the_table_of_alpha():
    """``from_logs`` (log alpha and 1 - alpha as the caller has them) gives the index of
    alpha = exp(log alpha), closer where alpha is near 1 (no log of a rounded alpha), the
    same limits at alpha = 0 and 1, and refuses what the alpha table refuses; ``with_u``
    gives exactly the table built with the other arrivals."""
    rng = np.random.default_rng(4)
    mu = np.concatenate([rng.lognormal(0.0, 2.0, 2000), [0.0, 1e-20, 1e-9, 800.0, np.inf]])
    log_alpha = -mu
    alpha, one_minus = np.exp(log_alpha), -np.expm1(log_alpha)
    u = rng.lognormal(size=mu.shape[0])
    u[:3] = 0.0
    c = rng.uniform(0.5, 2, mu.shape[0])
    x = rng.uniform(0, 2, mu.shape[0]) * 3.0
    want = IndexTable(alpha, u, c).index(x)
    for table in (IndexTable.from_logs(log_alpha, u, c),
                  IndexTable.from_logs(log_alpha, u, c, one_minus)):
        got = table.index(x)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
        far = one_minus > 1e-3                  # alpha not near 1: the same but for rounding
        np.testing.assert_allclose(got[far], want[far], rtol=1e-9, atol=0)
        assert got[-5] == want[-5] == 0.0       # alpha = 1: the limit, 0
        assert got[-1] == want[-1]              # alpha = 0
    for bad in (np.nan, 0.5):
        with pytest.raises(ValueError, match="alpha"):
            IndexTable.from_logs([bad], [1.0])
    other = rng.lognormal(size=mu.shape[0])
    np.testing.assert_array_equal(IndexTable(alpha, u, c).with_u(other).index(x),
                                  IndexTable(alpha, other, c).index(x))


@pytest.mark.parametrize("saturated", [0.1, 0.6, 0.95])
def test_index_where_unsaturated_is_index(saturated):
    """The formula evaluated only below u* gives index()'s numbers to the last bit, with
    a share of the states at or above u* (where the index is x / C), exactly at u*, at 0,
    for silent sources, frozen and nearly frozen ones (alpha close to 1: the precise path)
    and costs other than 1."""
    rng = np.random.default_rng(7)
    n = 4000
    alpha = rng.uniform(0.0, 1.0, n)
    alpha[:200] = 1.0 - rng.uniform(1e-9, 1e-4, 200)           # the precise path
    alpha[200:220] = 1.0                                         # frozen
    u = rng.exponential(1.0, n)
    u[220:260] = 0.0                                             # silent
    cost = rng.uniform(0.5, 3.0, n)
    ustar = u / np.maximum(1.0 - alpha, 1e-300)
    x = np.where(rng.random(n) < saturated, ustar * rng.uniform(1.0, 2.0, n),
                 ustar * rng.uniform(0.0, 1.0, n))
    x[260:300] = ustar[260:300]                                  # exactly at u*
    x[300:340] = 0.0
    x = np.where(np.isfinite(x), x, 1.0)
    for c in (1.0, cost):
        table = IndexTable(alpha, u, c)
        want = table.index(x)
        got = table.index_where_unsaturated(x)
        assert np.array_equal(got, want)


def test_epochs_to_reach_never_passes_the_first_epoch_the_index_reaches_the_threshold():
    """``epochs_to_reach``: the index after a crawl (x_k = u* (1 - alpha^k)) stays below the
    threshold before the epochs it gives, and reaches it within about one epoch after them;
    inf where u* is below the threshold (it never does), from a start below the root or not.
    (About: the bisection's bracket, a thousandth of the epochs searched.)"""
    from scrapy_whittle.core.index import IndexTable, epochs_to_reach

    rng = np.random.default_rng(3)
    n = 5000
    log_alpha = -rng.lognormal(-2.0, 2.0, n)
    one_minus = -np.expm1(log_alpha)
    u = rng.lognormal(0.0, 1.0, n)
    ustar = u / one_minus
    threshold = 0.7 * float(np.median(ustar))
    table = IndexTable.from_logs(log_alpha, u, 1.0, one_minus)

    def index_after(k):
        return table.index(ustar * -np.expm1(k * log_alpha))

    with np.errstate(divide="ignore", invalid="ignore"):
        share = threshold / ustar
        x_reaches = np.where(share < 1.0, np.log1p(-share) / log_alpha, np.inf)
    for start in (None, x_reaches):
        k = epochs_to_reach(log_alpha, one_minus, u, threshold, start)
        finite = np.isfinite(k)
        np.testing.assert_array_equal(finite, ustar > threshold)
        for t in np.concatenate([[0.0, 0.5, 3.0, 40.0, 1e3],
                                 np.percentile(k[finite], [5, 50, 95])]):
            assert not np.any((index_after(t) >= threshold) & (t < k))
        later = index_after(np.where(finite, 1.01 * k + 1.02, 0.0))
        assert np.all(later[finite] >= threshold)
