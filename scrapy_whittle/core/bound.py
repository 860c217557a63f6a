"""The Lagrangian (Whittle-relaxation) upper bound on the average reward of any crawl policy.

Relax "at most M budget units every epoch" to "at most M on average" and price the budget at
lambda >= 0. Each source then solves its own problem: crawl every n epochs (cycle n earns
x_n = u* (1 - alpha^n) per crawl, i.e. x_n / n per epoch, and pays lambda C / n) or never.
Weak duality gives, for every lambda >= 0,

    R(policy) <= L(lambda) = lambda M + sum_i max(0, max_{n >= 1} (x_n^i - lambda C_i) / n),

and the bound is the minimum over lambda of this convex, piecewise-linear function. The best
cycle of source i at price lambda is the smallest n whose Whittle index is at least lambda
(the index at x_n is exactly the price at which cycles n and n + 1 tie), so L's slope is
M - sum_i C_i / n_i(lambda) and the minimum sits where the relaxed crawl rate meets the budget.

This bounds the expected reward of policies that decide from what crawls revealed (the
simulator's policies never see a source's value before crawling it). It holds for the
deterministic model and, since a source's expected value after n epochs is x_n however its
items arrive, for the stochastic one; a feed window or content lifetime only lowers rewards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scrapy_whittle.core.host_bound import host_constrained_bound
from scrapy_whittle.core.relaxation import UpperBound, _Sources, best_cycle

__all__ = ["BoundCurve", "UpperBound", "best_cycle", "bound_curve", "upper_bound"]


def upper_bound(alpha, u, budget: float, cost=1.0, *, host=None, allowance=None,
                tol: float = 1e-10) -> UpperBound:
    """Lagrangian upper bound on the average reward per epoch of N sources with parameters
    (alpha_i, u_i), crawl costs C_i and a budget of ``budget`` cost units per epoch.

    Any lambda >= 0 gives a valid bound; the one returned is minimised over lambda by
    bisection on the slope (a sign change of M - sum C_i / n_i(lambda)).

    ``host`` (int[N], ids 0..H-1) and ``allowance`` (float[H], crawls per epoch, inf = no
    limit) add a constraint per host: at most ``allowance[h]`` crawls of host h's sources
    per epoch (:mod:`~scrapy_whittle.core.host_bound`, one more price per limited host).
    """
    src = _Sources(alpha, u, cost)
    if budget <= 0:
        raise ValueError(f"budget ({budget!r}) must be > 0")
    if host is not None or allowance is not None:
        return host_constrained_bound(src, float(budget), host, allowance, tol)
    return _minimise(src, float(budget), tol)


def _minimise(src: _Sources, budget: float, tol: float, hi: float | None = None
              ) -> UpperBound:
    """The bound of ``src`` at ``budget``; ``hi``: a price known to be at least lambda* (the
    price of a smaller budget), which narrows the bisection."""
    if src.u.size == 0:
        return UpperBound(0.0, 0.0, np.zeros(0))
    gain0, rate0, cyc0 = src.relaxed(0.0)
    if rate0 <= budget:                       # crawling everything every epoch is affordable
        return UpperBound(gain0, 0.0, cyc0)
    lo = 0.0
    if hi is None or not hi > 0:
        finite = np.isfinite(src.ustar)
        hi = float((src.ustar[finite] / src.cost[finite]).max()) if finite.any() else 1.0
    hi = max(hi, 1e-300)
    # L is convex with slope M - rate(lambda); bisect for the slope's sign change.
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if src.relaxed(mid)[1] > budget:
            lo = mid
        else:
            hi = mid
        if hi - lo <= tol * hi:
            break
    best = None
    for lam in (lo, hi):
        gain, _, cyc = src.relaxed(lam)
        value = lam * budget + gain
        if best is None or value < best.value:
            best = UpperBound(float(value), float(lam), cyc)
    return best


@dataclass(frozen=True)
class BoundCurve:
    """The upper bound as a function of the budget (:func:`bound_curve`)."""

    budgets: np.ndarray   # ascending, cost units per epoch
    values: np.ndarray    # the bound at each budget (average reward per epoch)
    available: float      # the bound once every source with value is crawled every epoch
    saturation: float     # the budget that does it: sum of C_i over sources with value

    @property
    def shares(self) -> np.ndarray:
        """Each bound as a share of ``available`` (0 where nothing is available)."""
        if not self.available > 0:
            return np.zeros_like(self.values)
        return np.minimum(self.values / self.available, 1.0)


def bound_curve(alpha, u, budgets, cost=1.0, *, tol: float = 1e-6) -> BoundCurve:
    """:func:`upper_bound` of the same sources at each of ``budgets`` (> 0, any order; the
    curve holds them sorted, repeats dropped), and the value available at any budget.

    The bound is concave and non-decreasing in the budget (a minimum over lambda of lines
    lambda M + G(lambda) of slope lambda >= 0). Budgets are solved from the smallest up: the
    price can only fall as the budget grows, so each search starts from the last price. Each
    value is a valid bound within a relative ``tol`` of the minimum over lambda (certified
    by convexity: :func:`_bound_from_above`).
    """
    src = _Sources(alpha, u, cost)
    budgets = np.unique(np.asarray(budgets, dtype=np.float64).ravel())
    if budgets.size and not (np.all(np.isfinite(budgets)) and budgets[0] > 0):
        raise ValueError(f"budgets must be finite and > 0, got {budgets!r}")
    if src.u.size == 0:
        return BoundCurve(budgets, np.zeros(budgets.size), 0.0, 0.0)
    available, saturation, _ = src.relaxed(0.0)
    values = np.empty(budgets.size)
    finite = np.isfinite(src.ustar)
    top = float((src.ustar[finite] / src.cost[finite]).max()) if finite.any() else 1.0
    hi = (max(top, 1e-300), 0.0)               # (price, gain): nothing is worth crawling
    for k, budget in enumerate(budgets.tolist()):
        if saturation <= budget:
            values[k] = available
            continue
        values[k], hi = _bound_from_above(src, budget, tol, hi)
    return BoundCurve(budgets, values, float(available), float(saturation))


def _bound_from_above(src: _Sources, budget: float, tol: float, hi: tuple[float, float]
                      ) -> tuple[float, tuple[float, float]]:
    """The bound at ``budget`` and a (price, gain) pair at least as dear as its lambda*,
    given ``hi``, such a pair for a smaller budget (the price falls as the budget grows).

    The relaxed crawl rate falls with the price, nearly smoothly over many sources: the
    sign change of M - rate(lambda) is bracketed by stepping down from ``hi`` and found by
    regula falsi on log lambda (Illinois), a few relaxations a budget where bisection from 0
    takes one per bit. Every price gives a valid bound (weak duality): the lower of the
    bracket's two ends is returned."""
    hi_price, hi_gain = hi
    hi_rate = src.relaxed(hi_price)[1] if hi_gain == 0.0 else None
    lo_price = hi_price
    while True:                                   # bracket: rate(lo) > budget >= rate(hi)
        lo_price /= 4.0
        if lo_price < 1e-300:
            lo_price = 0.0
        lo_gain, lo_rate, _ = src.relaxed(lo_price)
        if lo_rate > budget:
            break
        hi_price, hi_gain, hi_rate = lo_price, lo_gain, lo_rate
    if hi_rate is None:
        hi_gain, hi_rate, _ = src.relaxed(hi_price)
    side = 0
    for _ in range(200):
        # L is convex: on [lo, hi] it lies above both ends' tangents, whose crossing is a
        # lower bound on the minimum; stop once the better end is within tol of it
        s_lo, s_hi = budget - lo_rate, budget - hi_rate        # s_lo < 0 <= s_hi
        l_lo, l_hi = lo_price * budget + lo_gain, hi_price * budget + hi_gain
        if s_hi - s_lo > 0:
            cross = (l_hi - l_lo + s_lo * lo_price - s_hi * hi_price) / (s_lo - s_hi)
            floor = l_lo + s_lo * (cross - lo_price)
        else:
            floor = min(l_lo, l_hi)
        if min(l_lo, l_hi) - floor <= tol * abs(min(l_lo, l_hi)) \
                or hi_price - lo_price <= 1e-12 * hi_price:
            break
        if lo_price > 0.0:                        # secant in log lambda, kept inside
            x0, x1 = math.log(lo_price), math.log(hi_price)
            f0, f1 = lo_rate - budget, hi_rate - budget
            w0, w1 = (f0 / 2.0 if side == 1 else f0), (f1 / 2.0 if side == -1 else f1)
            x = x0 - w0 * (x1 - x0) / (w1 - w0)
            mid = math.exp(min(max(x, x0 + 0.01 * (x1 - x0)), x1 - 0.01 * (x1 - x0)))
        else:
            mid = 0.5 * hi_price
        gain, rate, _ = src.relaxed(mid)
        if rate > budget:
            lo_price, lo_gain, lo_rate, side = mid, gain, rate, -1
        else:
            hi_price, hi_gain, hi_rate, side = mid, gain, rate, 1
    value = min(lo_price * budget + lo_gain, hi_price * budget + hi_gain)
    return float(value), (hi_price, hi_gain)
