"""Mean base utility xi_bar_i of a source's items: a shrinkage mean towards a prior.

The prior mean m0 comes from a per-source weight (a source's ``weight`` in the source list;
here a scalar, an array, or a user function ``f(ids) -> weights``) and is worth
``prior_weight`` pseudo-items.
With n observed values v_1..v_n (weights w_j) the estimate is

    xi_hat = (w0 m0 + sum w_j v_j) / (w0 + sum w_j),

the posterior mean of a normal model with known-variance prior; its standard error is
s / sqrt(w0 + sum w), where s^2 pools the prior's spread (coefficient of variation
``prior_cv`` around m0, worth w0) with the observed squared deviations.
The same estimator serves the page model's importance m_k (the reward of a crawl that found a
change, Avrachenkov, Borkar & Patil, *Deep Reinforcement Learning for Web Crawling*, ICC 2021).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.estimators._base import (
    VectorEstimator,
    as_column,
    as_sources,
    per_source_prior,
    plausible,
)


class ValueEstimator(VectorEstimator):
    """Shrinkage mean of item values per source.

    prior_mean: m0, scalar, array over sources or callable(ids) -> array (> 0).
    prior_weight: w0, pseudo-observations the prior is worth.
    prior_cv: prior coefficient of variation of single values (for the uncertainty only).
    """

    per_source = {"m0": 0.0, "count": 0.0, "total": 0.0, "total_sq": 0.0}
    prior_columns = ("m0",)

    def __init__(self, n: int = 0, *, prior_mean=1.0, prior_weight: float = 2.0,
                 prior_cv: float = 1.0) -> None:
        if not (np.isfinite(prior_weight) and prior_weight > 0):
            raise ValueError(f"prior_weight ({prior_weight!r}) must be > 0")
        if not (np.isfinite(prior_cv) and prior_cv >= 0):
            raise ValueError(f"prior_cv ({prior_cv!r}) must be >= 0")
        self.prior_mean = prior_mean
        self.prior_weight = float(prior_weight)
        self.prior_cv = float(prior_cv)
        super().__init__(n)

    def _fill_prior(self, ids, prior_mean=None) -> None:
        self.m0[ids] = per_source_prior(
            "prior_mean", self.prior_mean if prior_mean is None else prior_mean, ids)

    def set_prior(self, sources, mean) -> None:
        self._fill_prior(as_sources(sources, self.n), mean)

    def update(self, sources, values, weight=None) -> np.ndarray:
        """Add observed values (NaN = unknown, skipped; negative or inf rejected).
        Repeated ids accumulate. Returns the bool mask of accepted values."""
        ids = as_sources(sources, self.n)
        v = as_column("values", values, ids.shape[0])
        w = as_column("weight", 1.0 if weight is None else weight, ids.shape[0])
        ok = plausible(v) & (v >= 0) & plausible(w) & (w > 0)
        np.add.at(self.count, ids[ok], w[ok])
        np.add.at(self.total, ids[ok], w[ok] * v[ok])
        np.add.at(self.total_sq, ids[ok], w[ok] * v[ok] ** 2)
        return ok

    def _invalid_extra(self, ids):
        return ~(self.count[ids] >= 0) | ~(self.total[ids] >= 0) | ~(self.m0[ids] > 0)

    def report(self, source: int, value: float, weight: float = 1.0) -> bool:
        return bool(self.update([source], [value], [weight])[0])

    def mean(self) -> np.ndarray:
        w0 = self.prior_weight
        return (w0 * self.m0 + self.total) / (w0 + self.count)

    get = mean

    def mean_at(self, ids) -> np.ndarray:
        """``mean()[ids]``, computed for those sources only."""
        w0 = self.prior_weight
        return (w0 * self.m0[ids] + self.total[ids]) / (w0 + self.count[ids])

    def std(self) -> np.ndarray:
        m = self.mean()
        dev = np.maximum(self.total_sq - 2 * m * self.total + m * m * self.count, 0.0)
        w0 = self.prior_weight
        prior_dev = w0 * ((self.prior_cv * self.m0) ** 2 + (self.m0 - m) ** 2)
        s2 = (prior_dev + dev) / (w0 + self.count)
        return np.sqrt(s2 / (w0 + self.count))
