"""The closed-form Whittle index for crawling ephemeral content.

Avrachenkov & Borkar, *Whittle Index Policy for Crawling Ephemeral Content* (IEEE TCNS 2018),
Theorem 1: for a source with alpha = exp(-mu T), u = Lambda xi (1 - alpha) / mu, crawl cost C
and u* = u / (1 - alpha),

    gamma(x) = [ eta(x) ((1 - alpha) x - u) + u (1 - alpha^eta(x)) / (1 - alpha) ] / C
    eta(x)   = ceil( log+_alpha( (u - (1 - alpha) x) / u ) ).

Writing s = 1 - x / u* this is gamma(x) = u [ (1 - alpha^eta) / (1 - alpha) - eta s ] / C with
eta = ceil(log s / log alpha). On the states a crawled source actually visits,
x_n = u* (1 - alpha^n), it is gamma(x_n) = (x_n - n u alpha^n) / C: exactly the subsidy at which
crawling every n epochs and every n + 1 epochs earn the same average reward. Between two such
states it is linear with slope n (1 - alpha) / C, and continuous, so it is non-decreasing.

Edge cases the paper leaves open, and what this module does (derived, not clamped):

* x >= u* (a source never crawled, or whose estimates just moved below its state): read
  literally the formula gives eta = 0 and gamma = 0, which would starve the fullest sources.
  From the definition, with subsidy lambda the relaxed single-source problem never crawls from
  u once C lambda >= u*, and at a state x >= u* crawling once earns x against the subsidy C
  lambda forgone, so the indifference point is gamma(x) = x / C. This is continuous at u*
  (the formula's limit from below is u*/C) and increasing.
* 0 <= x < u: eta = 1 and gamma(x) = (1 - alpha) x / C (eta is at least 1 for x > 0; at x = 0
  both readings give 0).
* u = 0 (a silent source): u* = 0, every state is >= u*, gamma(x) = x / C.
* alpha -> 1 (no decay): u* -> infinity and gamma -> 0 for every finite x: with nothing lost by
  waiting, any subsidy makes waiting preferable. (1 - alpha^eta) / (1 - alpha) is computed as
  expm1(eta log alpha) / expm1(log alpha), and log s as log1p(-x / u*), which stay accurate there.
* alpha -> 0 (content worthless after one epoch): log alpha -> -inf, eta = 1, gamma = (1-alpha)x/C.

Rounding in eta at a grid point is harmless: both neighbouring pieces take the same value there.
"""

from __future__ import annotations

import numpy as np


def whittle_index(x, alpha, u, cost=1.0) -> np.ndarray:
    """Whittle index gamma_i(x_i) of sources in state x (arrays broadcast; returns an array).

    x: expected value waiting at the source (>= 0); alpha in [0, 1]; u >= 0; cost > 0.
    """
    x, alpha, u, cost = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64)
                                              for a in (x, alpha, u, cost)))
    return IndexTable(alpha, u, cost).index(x)


class IndexTable:
    """Per-source constants of the index, precomputed once so that an epoch's evaluation over
    N sources costs a handful of vectorised operations (``index``). Arrays of shape (N,)."""

    __slots__ = ("_cost_inv", "_em1_inv", "_inv_log_alpha", "_log_alpha", "_u", "_ustar_inv")

    def __init__(self, alpha, u, cost=1.0) -> None:
        alpha = np.asarray(alpha, dtype=np.float64)
        u = np.asarray(u, dtype=np.float64)
        cost = np.asarray(cost, dtype=np.float64)
        alpha, u, cost = np.broadcast_arrays(alpha, u, cost)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_alpha = np.log(alpha)                       # <= 0, -inf at alpha = 0
            em1 = np.expm1(log_alpha)                       # alpha - 1, in [-1, 0]
            # 1/u* = (1 - alpha)/u; +inf for a silent source (u = 0, alpha < 1) so that every
            # state counts as >= u*; 0 when alpha = 1 (u* infinite).
            ustar_inv = np.where(u > 0, -em1 / np.where(u > 0, u, 1.0),
                                 np.where(alpha < 1, np.inf, 0.0))
            self._inv_log_alpha = np.where(log_alpha < 0, 1.0 / log_alpha, -np.inf)
            self._em1_inv = np.where(em1 < 0, 1.0 / em1, -np.inf)
        self._log_alpha = log_alpha
        self._ustar_inv = ustar_inv
        self._u = u
        self._cost_inv = 1.0 / cost

    def index(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            r = x * self._ustar_inv                         # x / u*
            below = r < 1.0                                 # x < u*: the formula applies
            rb = np.where(below, r, 0.0)
            # eta = ceil(log(1 - r) / log alpha), at least 1 (alpha = 0 gives 0 * ... = 0)
            eta = np.ceil(np.log1p(-rb) * self._inv_log_alpha)
            eta = np.where(eta >= 1.0, eta, 1.0)
            # (1 - alpha^eta) / (1 - alpha), stable as alpha -> 1; equals 1 at alpha = 0
            geo = np.where(self._log_alpha < 0,
                           np.expm1(eta * self._log_alpha) * self._em1_inv, eta)
            geo = np.where(np.isfinite(geo), geo, 1.0)
            inside = self._u * (geo - eta * (1.0 - rb))
            inside = np.where(inside > 0.0, inside, 0.0)    # rounding only, never a real clamp
            gamma = np.where(below, inside, x)
        return gamma * self._cost_inv
