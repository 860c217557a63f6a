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

from scrapy_whittle.core.dynamics import geometric_sum


@dataclass(frozen=True)
class UpperBound:
    value: float          # the bound on the long-run average reward per epoch
    price: float          # lambda*, the budget's shadow price
    cycle: np.ndarray     # n_i(lambda*): relaxed crawl cycle of each source (inf = never)
    #: mu_h*, the shadow price of each host's allowance (None: no host constraints; 0 where
    #: a host's allowance does not bind), see :mod:`~scrapy_whittle.core.host_bound`
    host_price: np.ndarray | None = None

    def __float__(self) -> float:
        return self.value

    @property
    def crawl_rate(self) -> np.ndarray:
        """Relaxed crawls per epoch of each source, 1 / n_i."""
        return 1.0 / self.cycle


class _Sources:
    """Per-source constants of the relaxation, computed once per bound."""

    def __init__(self, alpha, u, cost) -> None:
        self.alpha, self.u, self.cost = np.broadcast_arrays(
            *(np.asarray(a, dtype=np.float64) for a in (alpha, u, cost)))
        with np.errstate(divide="ignore", invalid="ignore"):
            self.la = np.log(self.alpha)                              # log alpha <= 0
            self.om = -np.expm1(self.la)                              # 1 - alpha
            self.ustar = np.where(self.om > 0, self.u / np.where(self.om > 0, self.om, 1.0),
                                  np.inf)
            # la + om = log(alpha) + 1 - alpha < 0: slope of an upper line of f (see below)
            self.slope = self.la + self.om

    def best_cycle(self, c) -> np.ndarray:
        """Smallest n >= 1 with x_n - n u alpha^n >= c (c = lambda C); inf when c >= u*.

        Solved in continuous n by Newton's method on
        f(n) = n log(alpha) + log1p(n (1 - alpha)) - log(1 - c / u*), decreasing and concave.
        Since log1p(y) <= y, f(n) <= n (log alpha + 1 - alpha) - log(1 - c/u*), whose root is
        right of f's: Newton started there decreases monotonically onto the root. The integer
        answer is then checked against its neighbours.
        """
        la, om, u = self.la, self.om, self.u
        c = np.broadcast_to(np.asarray(c, dtype=np.float64), la.shape)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            q = np.where(self.ustar > 0, c / self.ustar, np.inf)
            never = (q >= 1.0) | (u <= 0) | ((om <= 0) & (c > 0))
            active = ~never
            target = np.log1p(-np.where(active, q, 0.0))              # log(1 - q) <= 0
            n = np.where(active & (self.slope < 0), target / self.slope, 1.0)
            n = np.maximum(n, 1.0)
            for _ in range(60):
                f = n * la + np.log1p(n * om) - target
                df = la + om / (1.0 + n * om)
                # (alpha = 0, log alpha = -inf: n = 1 already, and f / df would be NaN)
                step = np.where(active & (df < 0) & (f < 0) & np.isfinite(la), f / df, 0.0)
                n_new = np.maximum(n - step, 1.0)
                done = np.abs(n_new - n) <= 1e-9 * n
                n = n_new
                if done.all():
                    break
            n = np.maximum(1.0, np.ceil(n - 1e-7))
            qq = np.where(active, q, 0.0)

            def reaches(k):  # C * index at x_k as a multiple of u*: 1 - alpha^k (1 + k(1-alpha))
                return -np.expm1(k * la) - k * om * np.exp(k * la) >= qq

            for _ in range(3):
                n = np.where((n > 1) & reaches(n - 1), n - 1, n)
                n = np.where(~reaches(n), n + 1, n)
        return np.where(never, np.inf, n)

    def relaxed(self, price: float):
        """(sum of relaxed gains, relaxed budget use, cycles) at this price."""
        gain, cyc = self.relaxed_at(price * self.cost)
        finite = np.isfinite(cyc)
        rate = np.where(finite, self.cost / np.where(finite, cyc, 1.0), 0.0)
        return float(gain.sum()), float(rate.sum()), cyc

    def relaxed_at(self, c) -> tuple[np.ndarray, np.ndarray]:
        """(relaxed gain per epoch, cycle) of each source when a crawl of it is priced ``c``
        (per source: lambda C_i, plus its host's price under host constraints)."""
        c = np.broadcast_to(np.asarray(c, dtype=np.float64), self.u.shape)
        cyc = self.best_cycle(c)
        finite = np.isfinite(cyc)
        n = np.where(finite, cyc, 1.0)
        geo = geometric_sum(n, self.la)
        gain = np.where(finite, np.maximum((self.u * geo - c) / n, 0.0), 0.0)
        # a source whose value never decays (alpha = 1) earns (n u - lambda C) / n, which
        # tends to u as its cycle grows: at any price it is crawled ever more rarely (no
        # finite cycle, no budget) and still earns u per epoch
        gain = np.where(~finite & (self.om <= 0) & (self.u > 0), self.u, gain)
        return gain, cyc


def best_cycle(price_cost, alpha, u) -> np.ndarray:
    """Smallest n >= 1 whose Whittle index (times C) reaches ``price_cost``; inf = never."""
    return _Sources(alpha, u, 1.0).best_cycle(price_cost)


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
        from scrapy_whittle.core.host_bound import host_constrained_bound

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


def bound_curve(alpha, u, budgets, cost=1.0, *, tol: float = 1e-8) -> BoundCurve:
    """:func:`upper_bound` of the same sources at each of ``budgets`` (> 0, any order; the
    curve holds them sorted, repeats dropped), and the value available at any budget.

    The bound is concave and non-decreasing in the budget (a minimum over lambda of lines
    lambda M + G(lambda) of slope lambda >= 0). Budgets are solved from the smallest up: the
    price can only fall as the budget grows, so each search starts from the last price.
    """
    src = _Sources(alpha, u, cost)
    budgets = np.unique(np.asarray(budgets, dtype=np.float64).ravel())
    if budgets.size and not (np.all(np.isfinite(budgets)) and budgets[0] > 0):
        raise ValueError(f"budgets must be finite and > 0, got {budgets!r}")
    if src.u.size == 0:
        return BoundCurve(budgets, np.zeros(budgets.size), 0.0, 0.0)
    available, saturation, _ = src.relaxed(0.0)
    values = np.empty(budgets.size)
    price = None
    for k, budget in enumerate(budgets.tolist()):
        bound = _minimise(src, budget, tol, hi=price)
        # the search stops within tol of lambda*, maybe just below it: widen by as much
        values[k], price = bound.value, bound.price * (1.0 + 4.0 * tol)
    return BoundCurve(budgets, values, float(available), float(saturation))
