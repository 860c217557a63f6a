"""Change rate lambda_i of a page watched only for "changed since the last visit or not".

Cho & Garcia-Molina, *Estimating frequency of change*, ACM TOIT 3(3), 2003. A page changes as
a Poisson process of rate lambda; a visit I after the previous one finds it changed with
probability 1 - exp(-lambda I). With n visits at a regular interval I and X detected changes
their bias-reduced estimator is

    lambda_hat = -log((n - X + 0.5) / (n + 0.5)) / I                            (regular)

which stays finite when every visit found a change. It is exactly the maximum-likelihood
estimate after adding half an unchanged visit of length I. For irregular intervals this module
maximises the same regularised likelihood

    L(lambda) = sum_{changed j} log(1 - exp(-lambda I_j)) - lambda (sum_{unchanged j} I_j
                + 0.5 I_bar)

(I_bar: the source's mean visit interval), i.e. solves the decreasing score equation
sum_changed I_j / (exp(lambda I_j) - 1) = sum_unchanged I_j + 0.5 I_bar by safeguarded
Newton in log lambda. For the regular case this reproduces the closed form above. To keep
O(1) memory per source, changed intervals are kept as counts and sums in geometric bins
(``bins_per_decade`` per factor 10); a bin's intervals are represented by their mean, exact
when they are equal (the regular case, and integer epochs below ~10 with the default 12 bins
per decade).

An optional prior ``prior_rate`` lambda_0 enters as ``prior_weight`` pseudo-visits of length
``prior_interval``, a fraction 1 - exp(-lambda_0 I_0) of them changed, so a page never
visited has the estimate lambda_0 (without it the estimate is 0 until a change is seen).
Standard error: the inverse square root of the Fisher information,
sum_changed I_j^2 exp(lambda I_j) / (exp(lambda I_j) - 1)^2.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.columns import Col
from scrapy_whittle.core.estimators._base import (
    VectorEstimator,
    as_column,
    as_sources,
    per_source_prior,
    plausible,
)


def cho_garcia_molina(n, changes, interval) -> np.ndarray:
    """The bias-reduced estimator for n regular visits at ``interval`` with ``changes`` seen."""
    n = np.asarray(n, dtype=np.float64)
    x = np.asarray(changes, dtype=np.float64)
    return -np.log((n - x + 0.5) / (n + 0.5)) / np.asarray(interval, dtype=np.float64)


class ChangeRateEstimator(VectorEstimator):
    """Change rate per source from (interval, changed) pairs; intervals in any fixed unit.

    prior_rate: lambda_0 (None: no prior, the pure Cho & Garcia-Molina estimator), scalar,
        array or callable(ids).
    prior_weight, prior_interval: the prior's pseudo-visits and their length.
    regularise: the half visit of the bias-reduced estimator (0.5; 0 gives the plain MLE).
    min_interval, max_interval, bins_per_decade: the grid of interval bins.
    """

    per_source = {"unchanged": 0.0, "visits": 0.0, "total_time": 0.0, "lam0": 0.0, "pw": 0.0,
                  "lam": Col(0.0, persist=False), "dirty": Col(True, persist=False)}

    def __init__(self, n: int = 0, *, prior_rate=None, prior_weight: float = 1.0,
                 prior_interval: float = 1.0, regularise: float = 0.5,
                 min_interval: float = 1e-2, max_interval: float = 1e6,
                 bins_per_decade: int = 12) -> None:
        if not (0 < min_interval < max_interval < np.inf) or bins_per_decade < 1:
            raise ValueError("need 0 < min_interval < max_interval and bins_per_decade >= 1")
        for name, v in (("prior_weight", prior_weight), ("prior_interval", prior_interval)):
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} ({v!r}) must be > 0")
        if not (np.isfinite(regularise) and regularise >= 0):
            raise ValueError(f"regularise ({regularise!r}) must be >= 0")
        self.prior_rate = prior_rate
        self.prior_weight = float(prior_weight)
        self.prior_interval = float(prior_interval)
        self.regularise = float(regularise)
        self.min_interval = float(min_interval)
        self.max_interval = float(max_interval)
        self.bins_per_decade = int(bins_per_decade)
        decades = np.log10(self.max_interval / self.min_interval)
        self._log_edges = np.linspace(np.log(self.min_interval), np.log(self.max_interval),
                                      int(np.ceil(decades * self.bins_per_decade)) + 1)
        self.n_bins = self._log_edges.shape[0] - 1
        super().__init__(n)

    def _columns(self) -> dict[str, Col]:
        width = self.n_bins
        return {"ccount": Col(0.0, width=width), "ctime": Col(0.0, width=width),
                **super()._columns()}

    def _fill_prior(self, ids, prior_rate=None, prior_weight=None) -> None:
        rate = self.prior_rate if prior_rate is None else prior_rate
        if rate is None:
            self.lam0[ids] = 0.0
            self.pw[ids] = 0.0
        else:
            self.lam0[ids] = per_source_prior("prior_rate", rate, ids, positive=False)
            self.pw[ids] = self.prior_weight if prior_weight is None else float(prior_weight)
        self.dirty[ids] = True

    def set_prior(self, sources, rate, weight: float | None = None) -> None:
        self._fill_prior(as_sources(sources, self.n), rate, weight)

    def update(self, sources, intervals, changed) -> np.ndarray:
        """Visits of ``sources`` ``intervals`` after their previous visit, which found a change
        or not. Intervals must be finite and > 0. Returns the bool mask of accepted visits."""
        ids = as_sources(sources, self.n)
        iv = as_column("intervals", intervals, ids.shape[0])
        ch = as_column("changed", changed, ids.shape[0], dtype=bool)
        ok = plausible(iv) & (iv > 0)
        i, iv, ch = ids[ok], iv[ok], ch[ok]
        b = np.clip(np.searchsorted(self._log_edges, np.log(iv), side="right") - 1,
                    0, self.n_bins - 1)
        np.add.at(self.ccount, (i[ch], b[ch]), 1.0)
        np.add.at(self.ctime, (i[ch], b[ch]), iv[ch])
        np.add.at(self.unchanged, i[~ch], iv[~ch])
        np.add.at(self.visits, i, 1.0)
        np.add.at(self.total_time, i, iv)
        self.dirty[i] = True
        return ok

    # -- estimates ------------------------------------------------------------------------
    def _score_terms(self, rows):
        c = self.ccount[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            iv = np.where(c > 0, self.ctime[rows] / np.where(c > 0, c, 1.0), 1.0)
            mean_iv = np.where(self.visits[rows] > 0,
                               self.total_time[rows] / np.maximum(self.visits[rows], 1), 0.0)
        q0 = np.exp(-self.lam0[rows] * self.prior_interval)
        pc = self.pw[rows] * (1.0 - q0)                      # prior changed pseudo-visits
        unchanged = (self.unchanged[rows] + self.regularise * mean_iv
                     + self.pw[rows] * q0 * self.prior_interval)
        return c, iv, pc, unchanged

    def _solve(self, rows: np.ndarray) -> None:
        c, iv, pc, unchanged = self._score_terms(rows)
        i0 = self.prior_interval
        has_change = (c.sum(axis=1) + pc) > 0
        finite = has_change & (unchanged > 0)
        ref = np.where(self.visits[rows] > 0,
                       self.total_time[rows] / np.maximum(self.visits[rows], 1), i0)
        lo = np.log(1e-12 / ref)
        shortest = np.where(c > 0, iv, np.inf).min(axis=1, initial=np.inf)
        hi = np.log(1e3 / np.minimum(ref, shortest))
        th = np.log(np.where(self.lam[rows] > 0, self.lam[rows], 1.0 / ref))
        th = np.clip(th, lo, hi)
        active = finite.copy()
        for _ in range(100):          # Newton in log lambda, bisection when it leaves [lo, hi]
            lam = np.exp(th)
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                e = np.expm1(lam[:, None] * iv)
                e0 = np.expm1(lam * i0)
                g = (np.sum(np.where(c > 0, c * iv / e, 0.0), axis=1) + pc * i0 / e0
                     - unchanged)
                dg = -lam * (np.sum(np.where(c > 0, c * iv * iv * (e + 1) / (e * e), 0.0),
                                    axis=1) + np.where(pc > 0, pc * i0 * i0 * (e0 + 1)
                                                       / (e0 * e0), 0.0))
                nt = th - g / dg
            up = g > 0
            lo = np.where(up, th, lo)
            hi = np.where(up, hi, th)
            ok_step = np.isfinite(nt) & (dg < 0) & (nt >= lo) & (nt <= hi)
            nt = np.where(ok_step, nt, 0.5 * (lo + hi))
            nt = np.where(active, nt, th)               # converged rows stay put
            active &= np.abs(nt - th) > 1e-12
            th = nt
            if not active.any():
                break
        lam = np.exp(th)
        lam = np.where(finite, lam, np.where(has_change, np.exp(hi), 0.0))
        self.lam[rows] = lam
        self.dirty[rows] = False

    def mean(self) -> np.ndarray:
        rows = np.flatnonzero(self.dirty)
        if rows.size:
            self._solve(rows)
        return self.lam.copy()

    get = mean

    def std(self) -> np.ndarray:
        lam = self.mean()
        rows = np.arange(self.n)
        c, iv, pc, _ = self._score_terms(rows)
        i0 = self.prior_interval
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            lc = lam[:, None] * iv
            fi = np.sum(np.where(c > 0, c * iv**2 * np.exp(-lc) / (-np.expm1(-lc)) ** 2, 0.0),
                        axis=1)
            l0 = lam * i0
            fi = fi + np.where(pc > 0, pc * i0**2 * np.exp(-l0) / (-np.expm1(-l0)) ** 2, 0.0)
            return np.where(fi > 0, 1.0 / np.sqrt(fi), np.inf)

    def _after_import(self) -> None:
        self.dirty[:] = True
