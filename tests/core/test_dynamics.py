"""The recursion x' = alpha x + u and its closed forms (scrapy_whittle.core.dynamics)."""

import numpy as np
import pytest

from scrapy_whittle.core.dynamics import alpha_u, expected_state, geometric_sum, pages_alpha_u
from scrapy_whittle.core.problem import SourceParams


@pytest.mark.parametrize("alpha", [0.0, 1e-300, 0.3, 0.5, 1.0 - 1e-12, 1.0])
def test_expected_state_is_the_recursion_from_any_state(alpha):
    u, x0 = 2.5, 7.0
    x = x0
    for k in range(0, 8):
        assert expected_state(x0, alpha, u, k) == pytest.approx(x, rel=1e-9), k
        x = alpha * x + u


def test_geometric_sum_edges():
    la = np.array([-np.inf, np.log(0.5), 0.0])          # alpha = 0, 1/2, 1
    np.testing.assert_allclose(geometric_sum(0, la), [0.0, 0.0, 0.0])
    np.testing.assert_allclose(geometric_sum(3, la), [1.0, 1.75, 3.0])
    # alpha just below 1: no cancellation, close to k
    assert geometric_sum(10, np.log1p(-1e-14)) == pytest.approx(10.0, rel=1e-12)


def test_alpha_u_of_the_ephemeral_model_and_the_pages_bridge():
    alpha, u = alpha_u([6.0, 6.0], [0.0, 0.5], 2.0)
    np.testing.assert_allclose(alpha, [1.0, np.exp(-1.0)])
    np.testing.assert_allclose(u, [12.0, 6.0 * (1 - np.exp(-1.0)) / 0.5])
    p = SourceParams(rate=[3.0], mean_utility=[2.0], decay=[0.5], period=2.0)
    np.testing.assert_allclose((p.alpha, p.u), alpha_u([6.0], [0.5], 2.0))
    a, u = pages_alpha_u([0.2], [3.0])
    np.testing.assert_allclose((a, u), ([np.exp(-0.2)], [3.0 * (1 - np.exp(-0.2))]))


def test_alpha_u_logs_is_alpha_u_with_the_logs():
    from scrapy_whittle.core.dynamics import alpha_u_logs, decayed_integral

    rng = np.random.default_rng(0)
    decay = np.concatenate([[0.0, 1e-12, 50.0, np.nan], rng.exponential(1e-3, 200)])
    rate = rng.uniform(0, 5, decay.size)
    alpha, u, log_alpha, one_minus = alpha_u_logs(rate, decay, 3600.0)
    want_alpha = np.exp(-decay * 3600.0)
    want_u = rate * decayed_integral(3600.0, decay)
    np.testing.assert_array_equal(alpha, want_alpha)            # bit for bit
    np.testing.assert_array_equal(u, want_u)
    np.testing.assert_array_equal(alpha_u(rate, decay, 3600.0)[1], want_u)
    ok = np.isfinite(decay)
    # log alpha is -mu T itself, and 1 - alpha -expm1 of it; log(alpha) differs from it by
    # alpha's rounding only (absolute, near alpha = 1)
    np.testing.assert_array_equal(log_alpha[ok], -decay[ok] * 3600.0)
    np.testing.assert_array_equal(one_minus[ok], -np.expm1(-decay[ok] * 3600.0))
    pos = ok & (want_alpha > 0)
    np.testing.assert_allclose(np.log(want_alpha[pos]), log_alpha[pos], rtol=1e-12,
                               atol=2.3e-16)
    k = np.arange(decay.size) % 7
    np.testing.assert_array_equal(geometric_sum(k[ok], log_alpha[ok], one_minus[ok]),
                                  geometric_sum(k[ok], log_alpha[ok]))
    # alpha = exp(-180000) = 0: one epoch after a crawl the value waiting is u (G_k = 1)
    assert want_alpha[2] == 0.0 and geometric_sum(3.0, log_alpha[2], one_minus[2]) == 1.0
