"""Mean base utility xi_bar_i of a source's items: a shrinkage mean towards a prior.

The prior mean m0 comes from a per-source weight (a source's ``weight`` in the source list;
here a scalar, an array, or a user function ``f(ids) -> weights``) and is worth
``prior_weight`` pseudo-items.
With n observed values v_1..v_n (weights w_j) the estimate is

    xi_hat = (w0 m0 + sum w_j v_j) / (w0 + sum w_j),

the posterior mean of a normal model with known-variance prior; its standard error is
s / sqrt(w0 + sum w), where s^2 pools the prior's spread (coefficient of variation
``prior_cv`` around m0, worth w0) with the observed squared deviations.
With ``pooled`` the prior mean is m0 s, s the population's typical value per unit of prior
weight: the median, over the sources observed, of total_i / (count_i m0_i) (an
empirical-Bayes scale; 1 until some source was observed). The weights say how sources compare,
the values observed what a unit of them is worth: a crawl's values come in whatever unit its
feeds count engagement in (comments, shares), and a prior of one unit per unit of weight would
otherwise outweigh a source's first decayed captures, or be outweighed by them, according to
that unit alone. The median, not the mean: values per source are heavy-tailed, and the prior
stands for the source not yet known, the typical one. s is computed by ``rescale`` (on a
sample of the sources, and on a geometric grid of steps 2^(1/4), so that a user of the means,
a policy keeping its index, recomputes them all only when it moved); it is a function of the
arrays alone, so a restored estimator has the same.
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
    pooled: the prior mean is m0 times the population's typical value per unit of m0 (see
    above; ``rescale`` sets it).
    """

    per_source = {"m0": 0.0, "count": 0.0, "total": 0.0, "total_sq": 0.0}
    prior_columns = ("m0",)

    #: the pooled scale's grid: s = 2 ** (k / SCALE_STEPS)
    SCALE_STEPS = 4
    #: sources the pooled scale's median is taken over, at most (every k-th)
    SCALE_SAMPLE = 4096

    def __init__(self, n: int = 0, *, prior_mean=1.0, prior_weight: float = 2.0,
                 prior_cv: float = 1.0, pooled: bool = False) -> None:
        if not (np.isfinite(prior_weight) and prior_weight > 0):
            raise ValueError(f"prior_weight ({prior_weight!r}) must be > 0")
        if not (np.isfinite(prior_cv) and prior_cv >= 0):
            raise ValueError(f"prior_cv ({prior_cv!r}) must be >= 0")
        self.prior_mean = prior_mean
        self.prior_weight = float(prior_weight)
        self.prior_cv = float(prior_cv)
        self.pooled = bool(pooled)
        self.scale = 1.0
        super().__init__(n)

    def _fill_prior(self, ids, prior_mean=None) -> None:
        self.m0[ids] = per_source_prior(
            "prior_mean", self.prior_mean if prior_mean is None else prior_mean, ids)

    def set_prior(self, sources, mean) -> None:
        self._fill_prior(as_sources(sources, self.n), mean)

    # -- the pooled scale ------------------------------------------------------------------
    def pooled_scale(self) -> float:
        """s on its grid (1 unpooled, or before any source was observed)."""
        if not self.pooled or not self.n:
            return 1.0
        step = -(-self.n // self.SCALE_SAMPLE)
        count, total, m0 = self.count[::step], self.total[::step], self.m0[::step]
        seen = (count > 0) & (total > 0)
        if not seen.any():
            return 1.0
        s = float(np.median(total[seen] / (count[seen] * m0[seen])))
        if not (np.isfinite(s) and s > 0):
            return 1.0
        return float(2.0 ** (np.round(np.log2(s) * self.SCALE_STEPS) / self.SCALE_STEPS))

    def rescale(self) -> bool:
        """Move ``scale`` to the pooled scale; whether it moved (every mean moved then)."""
        s = self.pooled_scale()
        moved = s != self.scale
        self.scale = s
        return moved

    def _after_import(self) -> None:
        super()._after_import()
        self.rescale()

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
        return (w0 * self.scale * self.m0 + self.total) / (w0 + self.count)

    get = mean

    def mean_at(self, ids) -> np.ndarray:
        """``mean()[ids]``, computed for those sources only."""
        w0 = self.prior_weight
        return (w0 * self.scale * self.m0[ids] + self.total[ids]) / (w0 + self.count[ids])

    def std(self) -> np.ndarray:
        m = self.mean()
        dev = np.maximum(self.total_sq - 2 * m * self.total + m * m * self.count, 0.0)
        w0 = self.prior_weight
        m0 = self.scale * self.m0
        prior_dev = w0 * ((self.prior_cv * m0) ** 2 + (m0 - m) ** 2)
        s2 = (prior_dev + dev) / (w0 + self.count)
        return np.sqrt(s2 / (w0 + self.count))
