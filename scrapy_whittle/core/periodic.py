"""The ephemeral-content recursion with periodic arrivals: what a daily rhythm changes.

In the model of Avrachenkov & Borkar, *Whittle Index Policy for Crawling Ephemeral Content*
(IEEE TCNS 2018, eqs. (2)-(3)), the value waiting at source i evolves as
x' = alpha_i x + u_i between crawls. When source i publishes at a periodic intensity
Lambda_i p_i(t), the value that arrives during an epoch depends on the epoch's phase
tau = t mod K (K epochs per period, a day or a week):

    x_i(t + 1) = alpha_i x_i(t) + u_i(tau(t))      (not crawled at t),
    x_i(t + 1) = u_i(tau(t))                       (crawled at t),

with u_i(tau) = Lambda_i xi_i int_{epoch tau} p_i(s) exp(-mu_i (end of epoch - s)) ds. Since
arrivals are still Poisson (independent increments), the expected value waiting at a source
given everything a crawler has seen is still this deterministic function of the epoch of its
last crawl, which is what the periodic bound and the oracle policy use.

``accumulated`` gives F(phi, k), the value waiting k epochs after a crawl at phase phi, in
O(K) vector passes whatever k: with r = k mod K, m = k // K, A = alpha^K and D(phi) = F(phi, K),

    F(phi, r + m K) = F(phi, r) + alpha^r D(phi) (1 - A^m) / (1 - A).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scrapy_whittle.core.dynamics import decayed_integral, geometric_sum


@dataclass(frozen=True)
class PeriodicArrivals:
    """What a periodic model needs per source: alpha_i and u_i(tau) for the K phases.

    alpha: float64[N], the fraction of value left after one epoch.
    u: float64[N, K], value arriving during an epoch of phase tau (valued at its end).
    phase0: the phase of epoch 0 (epoch t has phase (t + phase0) mod K).
    """

    alpha: np.ndarray
    u: np.ndarray
    phase0: int = 0

    def __post_init__(self) -> None:
        alpha = np.asarray(self.alpha, dtype=np.float64)
        u = np.asarray(self.u, dtype=np.float64)
        if alpha.ndim != 1 or u.ndim != 2 or u.shape[0] != alpha.shape[0] or u.shape[1] < 1:
            raise ValueError(f"alpha must be (N,) and u (N, K), got {alpha.shape} and "
                             f"{u.shape}")
        if np.any(~np.isfinite(alpha) | (alpha < 0) | (alpha > 1)):
            raise ValueError("alpha must lie in [0, 1]")
        if np.any(~np.isfinite(u) | (u < 0)):
            raise ValueError("u must be finite and >= 0")
        object.__setattr__(self, "alpha", alpha)
        # the daily mean summed along each source's row, as numpy sums a C-ordered array
        object.__setattr__(self, "_mean_u", np.ascontiguousarray(u).mean(axis=1))
        # stored phase by phase (column-major): an epoch reads one phase of every source,
        # which is then contiguous instead of one element per 8 x K bytes
        object.__setattr__(self, "u", np.asfortranarray(u))
        object.__setattr__(self, "phase0", int(self.phase0) % u.shape[1])

    @property
    def n(self) -> int:
        return int(self.alpha.shape[0])

    @property
    def k(self) -> int:
        """K, epochs per period."""
        return int(self.u.shape[1])

    @property
    def mean_u(self) -> np.ndarray:
        """The time-average of u_i(tau): the u of the rhythm-blind stationary model."""
        return self._mean_u

    def phase(self, epoch) -> np.ndarray:
        return (np.asarray(epoch, dtype=np.int64) + self.phase0) % self.k

    def subset(self, ids) -> PeriodicArrivals:
        ids = np.asarray(ids, dtype=np.int64)
        return PeriodicArrivals(self.alpha[ids], self.u[ids], self.phase0)

    def accumulated(self, ids, phase, k) -> np.ndarray:
        """F(phase, k) of sources ``ids``: value waiting k >= 0 epochs after a crawl made
        at an epoch of phase ``phase`` (arrays aligned with ids)."""
        return accumulated(self.alpha, self.u, ids, phase, k)


def epoch_arrivals(rate, mean_utility, decay, bin_rates, bin_width: float,
                   period: float) -> np.ndarray:
    """u_i(tau) from a piecewise-constant rhythm: ``bin_rates`` (N, B) are p_i on the B bins
    of width ``bin_width`` that make one period of the rhythm, bin 0 starting with epoch
    phase 0. Exactly Lambda_i xi_i int_{epoch tau} p_i(s) exp(-mu_i (end - s)) ds, a sum
    over the bins of each epoch; shape (N, K) with K = B bin_width / period. The epoch length
    ``period`` must be a whole number of bins and divide the rhythm's period."""
    bin_rates = np.asarray(bin_rates, dtype=np.float64)
    n, nb = bin_rates.shape
    per_epoch = period / bin_width
    b = round(per_epoch)
    if abs(per_epoch - b) > 1e-9 or b < 1 or nb % b:
        raise ValueError(f"period ({period!r}) must be a whole number of bins "
                         f"({bin_width!r}) and divide the rhythm's period "
                         f"({nb * bin_width!r})")
    mu = np.asarray(decay, dtype=np.float64).reshape(n, 1)
    ages = (b - 1 - np.arange(b)) * bin_width          # from a bin's end to its epoch's end
    one_bin = decayed_integral(bin_width, mu)
    weight = np.exp(-mu * ages[None, :]) * one_bin    # (N, b)
    u = np.einsum("nkb,nb->nk", bin_rates.reshape(n, nb // b, b), weight)
    scale = np.asarray(rate, dtype=np.float64) * np.asarray(mean_utility, dtype=np.float64)
    return u * scale.reshape(n, 1)


def period_values(alpha: np.ndarray, u: np.ndarray) -> np.ndarray:
    """D(phi) = F(phi, K) for every source and phase, shape (N, K)."""
    n, k = u.shape
    d = np.zeros((n, k))
    for j in range(k):                       # arrivals of phases phi + j, j = 0..K-1
        d = alpha[:, None] * d + np.roll(u, -j, axis=1)
    return d


def accumulated(alpha, u, ids, phase, k) -> np.ndarray:
    """F(phase, k) for the sources ``ids`` of (alpha, u[N, K]); see the module docstring."""
    ids = np.asarray(ids, dtype=np.int64)
    phase = np.broadcast_to(np.asarray(phase, dtype=np.int64), ids.shape)
    k = np.broadcast_to(np.asarray(k, dtype=np.int64), ids.shape)
    if np.any(k < 0):
        raise ValueError("k must be >= 0")
    big_k = u.shape[1]
    a = np.asarray(alpha, dtype=np.float64)[ids]
    r, m = k % big_k, k // big_k
    rows = u[ids]
    head = np.zeros(ids.shape)                 # F(phase, r)
    full = np.zeros(ids.shape)                 # D(phase)
    for j in range(big_k):
        arrive = rows[np.arange(ids.shape[0]), (phase + j) % big_k]
        head = np.where(j < r, a * head + arrive, head)
        full = a * full + arrive
    with np.errstate(divide="ignore"):
        log_a = np.log(a)
    # the m whole periods: G_m of the period's decay A = a^K
    return head + a ** r * full * geometric_sum(m, big_k * log_a)


def arrivals_from_bins(rate, mean_utility, decay, bins, bin_width: float, period: float,
                       origin: float = 0.0, start: float = 0.0) -> PeriodicArrivals:
    """``PeriodicArrivals`` for epochs of length ``period`` starting at time ``start``, from a
    rhythm given as rate multipliers ``bins`` (N, B) on bins of ``bin_width`` that make one
    period of the rhythm from time ``origin`` (e.g. the ``profile`` entries of
    ``sim.serve``'s ``/params.json``, for a rhythm-aware oracle in Scrapy). The phase of epoch
    0 is rounded to whole epochs when ``start - origin`` is not a multiple of ``period``."""
    rate = np.asarray(rate, dtype=np.float64)
    decay = np.asarray(decay, dtype=np.float64)
    u = epoch_arrivals(rate, mean_utility, decay, bins, bin_width, period)
    k = u.shape[1]
    rhythm = k * period
    phase0 = round(((start - origin) % rhythm) / period) % k
    return PeriodicArrivals(np.exp(-decay * period), u, phase0)
