"""What the shrinkage of ``ProfileEstimator``'s daily profiles depends on besides each source's
own raw coefficients: per shrinkage group, the precision-weighted mean of its sources' raw
coefficients and the spread tau^2 of the true ones (the DerSimonian-Laird moment estimate per
harmonic, pooling its cosine and sine since a phase has no preferred direction, floored at
``tau_min``^2; ``prior_tau``^2 while a group has fewer than 5 sources with data). A group
without data has mean 0 and tau^2 0: its members stay flat."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.distinct import distinct

#: sources with data a group needs before its spread is measured rather than assumed
MIN_MEASURED = 5


def one_group_stats(coef: np.ndarray, var: np.ndarray, groups: np.ndarray, harmonics: int,
                    tau_min: float, prior_tau: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group of each source (N,) as a position into the next two, the group's mean (1, 2H)
    and spread tau^2 (1, 2H)) when every source is in one group: ``coef`` (N, 2H) and
    ``var`` (N,) as ``ProfileEstimator.raw`` gives them (variance inf: no data)."""
    names = groups[:1]
    h = harmonics
    means = np.zeros((names.shape[0], 2 * h))
    tau2s = np.zeros((names.shape[0], 2 * h))
    has = np.isfinite(var)
    if names.size and has.any():
        rows = np.flatnonzero(has)
        w = 1.0 / var[rows]                                 # precision, n / 2
        known = coef if rows.shape[0] == coef.shape[0] else np.take(coef, rows, axis=0)
        # the sums over the sources one after the other, as sum(axis=0) adds them,
        # without the (n, 2H) products: einsum's loops, not a BLAS product (whose
        # rounding depends on its blocking and threads)
        mean = np.einsum("i,ij->j", w, known) / w.sum()
        k = int(has.sum())
        if k >= MIN_MEASURED:                   # DerSimonian-Laird, per harmonic (cos, sin)
            dev = known - mean
            q = np.einsum("i,ij->j", w, dev * dev)
            spread = w.sum() - (w * w).sum() / w.sum()
            tau2 = np.maximum((q - (k - 1)) / spread, 0.0)
            tau2 = np.maximum(0.5 * (tau2[:h] + tau2[h:]), tau_min ** 2)
            tau2 = np.concatenate([tau2, tau2])
        else:
            tau2 = np.full(2 * h, prior_tau ** 2)
        means[0], tau2s[0] = mean, tau2
    return np.zeros(groups.shape[0], dtype=np.int64), means, tau2s


def many_group_stats(coef: np.ndarray, var: np.ndarray, groups: np.ndarray, harmonics: int,
                     tau_min: float, prior_tau: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``one_group_stats`` for several groups (``groups``: each source's, ints) at once:
    per-group sums by ``bincount`` over the sources with data, so the cost is O(N H)
    whatever the number of groups (a crawl pools by host: a thousand groups and more)."""
    names = distinct(groups)
    position = np.searchsorted(names, groups)
    n_groups, h = names.shape[0], harmonics
    has = np.isfinite(var)
    at, known = position[has], coef[has]
    w = 1.0 / var[has]                                   # precision, n / 2

    def per_group(weights: np.ndarray) -> np.ndarray:       # float even with no data
        return np.bincount(at, weights, minlength=n_groups).astype(np.float64)

    k = np.bincount(at, minlength=n_groups)
    w_sum = per_group(w)
    safe = np.where(k > 0, w_sum, 1.0)
    means = np.stack([per_group(w * known[:, j]) for j in range(2 * h)], axis=1)
    means /= safe[:, None]
    dev = known - means[at]
    q = np.stack([per_group(w * dev[:, j] * dev[:, j]) for j in range(2 * h)], axis=1)
    spread = np.where(k > 0, w_sum - per_group(w * w) / safe, 1.0)
    tau2 = np.maximum((q - (k - 1)[:, None]) / np.where(spread > 0, spread, 1.0)[:, None],
                      0.0)                          # DerSimonian-Laird, per harmonic
    tau2 = np.maximum(0.5 * (tau2[:, :h] + tau2[:, h:]), tau_min ** 2)
    tau2 = np.concatenate([tau2, tau2], axis=1)
    tau2 = np.where((k >= MIN_MEASURED)[:, None], tau2, prior_tau ** 2)
    empty = k == 0                        # no data: mean 0, tau^2 0, members stay flat
    means[empty] = 0.0
    tau2[empty] = 0.0
    return position, means, tau2
