from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.estimators import DecayEstimator, prior_from_categories

LN2 = np.log(2)


def test_prior_half_life_and_categories():
    h = prior_from_categories(["breaking", "blog", "other"], {"breaking": 2.0, "blog": 48.0},
                              default=12.0)
    est = DecayEstimator(3, prior_half_life=h)
    np.testing.assert_allclose(est.half_life(), [2.0, 48.0, 12.0])
    est.set_prior([2], 6.0)
    assert est.half_life()[2] == pytest.approx(6.0)


def test_reports_with_known_base_recover_mu_against_a_numpy_reference():
    rng = np.random.default_rng(0)
    mu = 0.3
    age = rng.uniform(0, 10, 400)
    base = rng.exponential(1.0, 400) + 0.1
    value = base * np.exp(-mu * age) * rng.lognormal(0, 0.2, 400)
    est = DecayEstimator(1, prior_half_life=24.0)
    assert est.update(np.zeros(400, dtype=int), value, age, base).all()
    # batch reference: least squares through the origin of log(base/value) on age
    y = np.log(base / value)
    ref = np.dot(age, y) / np.dot(age, age)
    assert est.mean()[0] == pytest.approx(ref, rel=0.01)     # the prior barely matters
    assert abs(est.mean()[0] - mu) < 3 * est.std()[0] + 0.01


def test_pipeline_reports_without_base_use_a_free_intercept():
    rng = np.random.default_rng(1)
    est = DecayEstimator(1, prior_half_life=1.0)
    for _ in range(300):
        age = rng.uniform(0, 20)
        assert est.report(0, 5.0 * np.exp(-0.1 * age) * rng.lognormal(0, 0.1), age)
    assert est.mean()[0] == pytest.approx(0.1, rel=0.05)


def test_engagement_curves_cumulative_and_level():
    est = DecayEstimator(2, prior_half_life=100.0)
    ages = np.arange(0.0, 12.0, 2.0)
    for _ in range(20):
        assert est.update_curve(0, ages, 7.0 * np.exp(-0.25 * ages))
        assert est.update_curve(1, ages, 40 * -np.expm1(-0.25 * ages), cumulative=True)
    np.testing.assert_allclose(est.mean(), [0.25, 0.25], rtol=0.02)
    assert not est.update_curve(0, [1.0], [2.0])               # one point: no curve


def test_batch_crawls_give_the_exact_decay_of_the_simulator():
    rng = np.random.default_rng(2)
    mu = np.array([0.7, 0.05])
    est = DecayEstimator(2, prior_half_life=5.0)
    for _ in range(60):
        n = rng.integers(1, 30, 2)
        off = np.concatenate([[0], np.cumsum(n)])
        ages = rng.uniform(0, 4, off[-1])
        base = rng.exponential(1.0, off[-1])
        src_of = np.repeat([0, 1], n)
        captured = np.bincount(src_of, base * np.exp(-mu[src_of] * ages), 2)
        assert est.update_batch([0, 1], captured, off, ages, base).all()
    np.testing.assert_allclose(est.mean(), mu, rtol=0.03)


def test_span_evidence_without_items_recovers_mu_and_scale():
    mu, scale = np.array([0.1, 1.3]), np.array([3.0, 0.5])
    est = DecayEstimator(2, prior_half_life=4.0)
    for s in [1, 2, 3, 5, 2, 8, 1, 4, 6, 3, 2, 1] * 3:
        span = np.array([s, s], dtype=float)
        est.update_span([0, 1], scale * -np.expm1(-mu * span) / mu, span)
    np.testing.assert_allclose(est.mean(), mu, rtol=0.1)
    np.testing.assert_allclose(est.span_scale(), scale, rtol=0.1)


def test_garbage_never_enters_and_bounds_hold():
    est = DecayEstimator(1, prior_half_life=2.0, min_half_life=0.5, max_half_life=100.0)
    ok = est.update([0] * 5, [np.nan, -1.0, 1.0, 1.0, 0.0], [1.0, 1.0, np.inf, -2.0, 1.0],
                    [1.0, 1.0, 1.0, 1.0, 1.0])
    assert not ok.any()
    assert est.mean()[0] == pytest.approx(LN2 / 2.0)
    for _ in range(50):
        est.report(0, 1e-300, 1e-3, base_value=1.0)               # absurdly fast decay
    assert np.isfinite(est.mean()[0]) and est.mean()[0] <= LN2 / 0.5 + 1e-12
    assert not est.update_span([0], [np.inf], [1.0]).any()
    assert not est.update_batch([0], [2.0], [0, 1], [1.0], [1.0]).any()   # value grew


def test_state_round_trip_and_grow():
    est = DecayEstimator(1, prior_half_life=3.0)
    est.report(0, 0.5, 2.0, 1.0)
    est.update_span([0], [1.0], [2.0])
    est.grow(2, prior_half_life=10.0)
    clone = DecayEstimator(0, prior_half_life=3.0)
    clone.load_state_dict(est.state_dict())
    np.testing.assert_allclose(clone.mean(), est.mean())
    assert clone.half_life()[2] == pytest.approx(10.0)
