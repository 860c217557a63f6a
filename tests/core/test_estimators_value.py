from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.estimators import ValueEstimator


def test_shrinkage_mean_matches_batch_reference():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4, 300)
    vals = rng.exponential(2.0, 300)
    vals[::7] = np.nan                         # unknown values are skipped
    est = ValueEstimator(4, prior_mean=[1.0, 2.0, 3.0, 4.0], prior_weight=2.0)
    ok = est.update(ids, vals)
    np.testing.assert_array_equal(ok, np.isfinite(vals))
    good = np.isfinite(vals)
    n = np.bincount(ids[good], minlength=4)
    s = np.bincount(ids[good], vals[good], 4)
    np.testing.assert_allclose(est.mean(), (2.0 * np.arange(1, 5) + s) / (2.0 + n))


def test_prior_from_a_user_function_and_garbage():
    est = ValueEstimator(3, prior_mean=lambda ids: 1.0 + ids)
    np.testing.assert_allclose(est.mean(), [1.0, 2.0, 3.0])
    assert not est.update([0, 1, 2], [-1.0, np.inf, np.nan]).any()
    np.testing.assert_allclose(est.mean(), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError):
        ValueEstimator(1, prior_mean=-1.0)


def test_uncertainty_shrinks_with_data_and_state_round_trips():
    est = ValueEstimator(1, prior_mean=1.0)
    s0 = est.std()[0]
    est.update(np.zeros(100, dtype=int), np.full(100, 3.0))
    assert est.std()[0] < s0 / 3
    assert est.mean()[0] == pytest.approx((2 + 300) / 102)
    clone = ValueEstimator(0)
    clone.load_state_dict(est.state_dict())
    assert clone.mean()[0] == est.mean()[0]
