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

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class UpperBound:
    value: float          # the bound on the long-run average reward per epoch
    price: float          # lambda*, the budget's shadow price
    cycle: np.ndarray     # n_i(lambda*): relaxed crawl cycle of each source (inf = never)

    def __float__(self) -> float:
        return self.value

    @property
    def crawl_rate(self) -> np.ndarray:
        """Relaxed crawls per epoch of each source, 1 / n_i."""
        return 1.0 / self.cycle


def best_cycle(price_cost, alpha, u) -> np.ndarray:
    """Smallest n >= 1 with x_n - n u alpha^n >= c (c = lambda C), inf when c >= u*.

    Solved in continuous n by Newton's method on
    f(n) = n log(alpha) + log1p(n (1 - alpha)) - log(1 - c / u*), which is decreasing and
    concave, so the iterates started right of the root decrease monotonically onto it; the
    integer answer is then checked against its neighbours.
    """
    c = np.asarray(price_cost, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    c, alpha, u = np.broadcast_arrays(c, alpha, u)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        la = np.log(alpha)
        om = -np.expm1(la)                                   # 1 - alpha
        ustar = np.where(om > 0, u / np.where(om > 0, om, 1.0), np.inf)
        q = np.where(ustar > 0, c / ustar, np.inf)
        never = (q >= 1.0) | (u <= 0)
        # alpha = 1 (no decay): every cycle earns u, so the longest (never) wins when c > 0.
        never |= (om <= 0) & (c > 0)
        target = np.log1p(-np.where(never, 0.0, q))          # log(1 - q) <= 0
        n = np.ones_like(c)
        # move right of the root (f <= 0) by doubling: f is decreasing in n
        for _ in range(200):
            f = n * la + np.log1p(n * om) - target
            bad = (f > 0) & ~never
            if not bad.any():
                break
            n = np.where(bad, n * 2.0, n)
        for _ in range(100):
            f = n * la + np.log1p(n * om) - target
            df = la + om / (1.0 + n * om)
            step = np.where((df < 0) & ~never, f / df, 0.0)
            n_new = n - step
            n_new = np.where(n_new < 1.0, 1.0, n_new)
            if np.all(np.abs(n_new - n) <= 1e-9 * np.maximum(n, 1.0)):
                n = n_new
                break
            n = n_new
        n = np.maximum(1.0, np.ceil(n - 1e-7))

        def gamma_c(k):  # C * index at x_k, as a multiple of u*: 1 - alpha^k (1 + k (1-alpha))
            return -np.expm1(k * la) - k * om * np.exp(k * la)

        qq = np.where(never, 0.0, q)
        # fix the integer rounding: smallest n with gamma_c(n) >= q
        for _ in range(3):
            down = (n > 1) & (gamma_c(n - 1) >= qq)
            n = np.where(down, n - 1, n)
            up = gamma_c(n) < qq
            n = np.where(up, n + 1, n)
    return np.where(never, np.inf, n)


def _relaxed(price: float, alpha, u, cost):
    cyc = best_cycle(price * cost, alpha, u)
    finite = np.isfinite(cyc)
    n = np.where(finite, cyc, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        om = -np.expm1(np.log(alpha))
        geo = np.where(om > 0, -np.expm1(n * np.log(alpha)) / np.where(om > 0, om, 1.0), n)
    x_n = u * geo
    gain = np.where(finite, np.maximum((x_n - price * cost) / n, 0.0), 0.0)
    rate = np.where(finite, cost / n, 0.0)
    return gain.sum(), rate.sum(), cyc


def upper_bound(alpha, u, budget: float, cost=1.0, *, tol: float = 1e-12) -> UpperBound:
    """Lagrangian upper bound on the average reward per epoch of N sources with parameters
    (alpha_i, u_i), crawl costs C_i and a budget of ``budget`` cost units per epoch.

    Any lambda >= 0 gives a valid bound; the one returned is minimised over lambda by
    bisection on the slope (a sign change of M - sum C_i / n_i(lambda)).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    alpha, u, cost = np.broadcast_arrays(alpha, u, np.asarray(cost, dtype=np.float64))
    if budget <= 0:
        raise ValueError(f"budget ({budget!r}) must be > 0")
    if alpha.size == 0:
        return UpperBound(0.0, 0.0, np.zeros(0))
    gain0, rate0, cyc0 = _relaxed(0.0, alpha, u, cost)
    if rate0 <= budget:                       # crawling everything every epoch is affordable
        return UpperBound(float(gain0), 0.0, cyc0)
    with np.errstate(divide="ignore", invalid="ignore"):
        om = -np.expm1(np.log(alpha))
        ustar = np.where(om > 0, u / np.where(om > 0, om, 1.0), np.inf)
    finite_ustar = ustar[np.isfinite(ustar)] / cost[np.isfinite(ustar)]
    lo = 0.0
    hi = float(finite_ustar.max()) if finite_ustar.size else 1.0
    hi = max(hi, 1e-300)
    # L is convex with slope M - rate(lambda); bisect for the slope's sign change.
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        _, rate, _ = _relaxed(mid, alpha, u, cost)
        if rate > budget:
            lo = mid
        else:
            hi = mid
        if hi - lo <= tol * max(hi, 1e-300):
            break
    best = None
    for lam in (lo, hi):
        gain, _, cyc = _relaxed(lam, alpha, u, cost)
        value = lam * budget + gain
        if best is None or value < best.value:
            best = UpperBound(float(value), float(lam), cyc)
    return best
