from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.estimators import ChangeRateEstimator, cho_garcia_molina


@pytest.mark.parametrize(("n", "x", "interval"), [(10, 4, 2.0), (50, 50, 1.0), (7, 0, 3.0),
                                                  (200, 13, 0.5)])
def test_regular_visits_reproduce_the_closed_form(n, x, interval):
    est = ChangeRateEstimator(1)
    changed = np.zeros(n, dtype=bool)
    changed[:x] = True
    est.update(np.zeros(n, dtype=int), np.full(n, interval), changed)
    expected = cho_garcia_molina(n, x, interval)
    assert est.mean()[0] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert np.isfinite(est.mean()[0])                # finite even when every visit changed


def test_simulated_poisson_pages_regular_and_irregular():
    rng = np.random.default_rng(5)
    lam = np.array([0.02, 0.3, 1.5])
    n = 4000
    for irregular in (False, True):
        iv = rng.exponential(1.0, (3, n)) + 0.05 if irregular else np.ones((3, n))
        ch = rng.random((3, n)) < -np.expm1(-lam[:, None] * iv)
        est = ChangeRateEstimator(3)
        est.update(np.repeat(np.arange(3), n), iv.ravel(), ch.ravel())
        z = (est.mean() - lam) / est.std()
        assert np.all(np.abs(z) < 4), (irregular, est.mean(), est.std())
        assert np.all(np.abs(est.mean() / lam - 1) < 0.15)


def test_prior_and_garbage():
    est = ChangeRateEstimator(2, prior_rate=0.4)
    np.testing.assert_allclose(est.mean(), [0.4, 0.4], rtol=1e-6)
    ok = est.update([0, 0, 1], [np.nan, -1.0, 0.0], [True, True, True])
    assert not ok.any()
    np.testing.assert_allclose(est.mean(), [0.4, 0.4], rtol=1e-6)
    est.update([0], [1.0], [True])                   # one change: no extreme value
    assert 0.4 < est.mean()[0] < 2.0
    clone = ChangeRateEstimator(0, prior_rate=0.4)
    clone.load_state_dict(est.state_dict())
    np.testing.assert_allclose(clone.mean(), est.mean())
    est.grow(1, prior_rate=0.1)
    assert est.mean()[2] == pytest.approx(0.1, rel=1e-6)
