"""The per-source relaxation behind the Lagrangian bounds (:mod:`~scrapy_whittle.core.bound`,
:mod:`~scrapy_whittle.core.host_bound`): each source's best crawl cycle and relaxed gain at a
price per crawl."""

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
