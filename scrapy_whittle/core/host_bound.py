"""The Lagrangian upper bound when hosts limit how often their sources may be crawled.

Many sources share a host, and a host may allow at most a_h crawls per epoch of all its
sources together (robots.txt Crawl-delay, a rate limit, a setting). Relaxing each host's
limit to hold on average, like the global budget, prices it at mu_h >= 0 beside the budget's
lambda: a crawl of source i then costs lambda C_i + mu_h(i), each source still solves its own
problem, and weak duality gives, for every lambda >= 0 and mu >= 0,

    R(policy) <= L(lambda, mu) = lambda M + sum_h mu_h a_h
                                 + sum_i max(0, max_n (x_n^i - lambda C_i - mu_h(i)) / n).

L is jointly convex. For a fixed lambda it separates by host: each mu_h minimises
mu_h a_h + sum_{i in h} g_i(lambda C_i + mu_h), whose slope a_h - sum_{i in h} 1 / n_i is
non-decreasing in mu_h (bisection, all hosts at once). The partial minimum over mu is
convex in lambda with slope M - sum_i C_i / n_i (envelope), bisected in turn. The value
returned is L at the prices found, so it is an upper bound however close they are to the
minimum.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.relaxation import UpperBound, _Sources


def host_constrained_bound(src: _Sources, budget: float, host, allowance,
                           tol: float = 1e-10) -> UpperBound:
    """The bound of ``src`` under ``budget`` and per-host ``allowance`` (see the module)."""
    n = src.u.shape[0]
    if host is None or allowance is None:
        raise ValueError("host constraints need both host (per source) and allowance "
                         "(per host)")
    host = np.broadcast_to(np.asarray(host, dtype=np.int64), (n,))
    allowance = np.atleast_1d(np.asarray(allowance, dtype=np.float64))
    if n and (host.min() < 0 or host.max() >= allowance.shape[0]):
        raise ValueError("host ids must index allowance (0 <= host < len(allowance))")
    if np.any(np.isnan(allowance)) or np.any(allowance < 0):
        raise ValueError(f"allowances must be >= 0 (inf: no limit), got {allowance!r}")
    if n == 0:
        return UpperBound(0.0, 0.0, np.zeros(0), np.zeros(allowance.shape[0]))
    return _HostDual(src, budget, host, allowance, tol).minimise()


class _HostDual:
    """L(lambda, mu) of one problem, and its minimisation."""

    def __init__(self, src: _Sources, budget: float, host: np.ndarray, allowance: np.ndarray,
                 tol: float) -> None:
        self.src, self.budget, self.host, self.allowance = src, budget, host, allowance
        self.tol = tol
        self.n_hosts = allowance.shape[0]
        self.limited = np.isfinite(allowance)
        # above the largest u* of its sources a host's price stops every crawl of it
        top = np.zeros(self.n_hosts)
        finite = np.isfinite(src.ustar)
        np.maximum.at(top, host[finite], src.ustar[finite])
        self.mu_hi = np.maximum(top, 1e-300)

    def _per_host(self, values: np.ndarray) -> np.ndarray:
        return np.bincount(self.host, weights=values, minlength=self.n_hosts)

    def _at(self, lam: float, mu: np.ndarray):
        """(gain per source, cycle per source) at prices (lam, mu)."""
        return self.src.relaxed_at(lam * self.src.cost + mu[self.host])

    def host_prices(self, lam: float) -> np.ndarray:
        """The mu minimising L(lam, .): per limited host, the price at which its relaxed
        crawls per epoch fall to its allowance (0 where they are within it at 0)."""
        mu = np.zeros(self.n_hosts)
        _, cyc = self._at(lam, mu)
        over = self.limited & (self._per_host(1.0 / cyc) > self.allowance)
        if not over.any():
            return mu
        lo, hi = np.zeros(self.n_hosts), np.where(over, self.mu_hi, 0.0)
        for _ in range(200):
            mid = np.where(over, 0.5 * (lo + hi), 0.0)
            _, cyc = self._at(lam, mid)
            above = self._per_host(1.0 / cyc) > self.allowance
            lo = np.where(over & above, mid, lo)
            hi = np.where(over & ~above, mid, hi)
            if np.all(hi - lo <= self.tol * hi):
                break
        # L is convex in each mu_h: keep, per host, the better end of its bracket
        part_lo, part_hi = self._host_parts(lam, lo), self._host_parts(lam, hi)
        return np.where(part_lo < part_hi, lo, hi)

    def _host_parts(self, lam: float, mu: np.ndarray) -> np.ndarray:
        """Each host's share of L at (lam, mu): mu_h a_h + its sources' gains."""
        gain, _ = self._at(lam, mu)
        return np.where(self.limited, mu * np.where(self.limited, self.allowance, 0.0),
                        0.0) + self._per_host(gain)

    def value(self, lam: float, mu: np.ndarray) -> tuple[float, np.ndarray]:
        """(L(lam, mu), cycles): a valid bound for any lam, mu >= 0."""
        gain, cyc = self._at(lam, mu)
        limited_part = float(np.sum(mu[self.limited] * self.allowance[self.limited]))
        return lam * self.budget + limited_part + float(gain.sum()), cyc

    def budget_use(self, lam: float, mu: np.ndarray) -> float:
        _, cyc = self._at(lam, mu)
        return float(np.sum(np.where(np.isfinite(cyc), self.src.cost / cyc, 0.0)))

    def minimise(self) -> UpperBound:
        mu0 = self.host_prices(0.0)
        if self.budget_use(0.0, mu0) <= self.budget:    # the budget does not bind
            value, cyc = self.value(0.0, mu0)
            return UpperBound(value, 0.0, cyc, mu0)
        src = self.src
        finite = np.isfinite(src.ustar)
        lo = 0.0
        hi = float((src.ustar[finite] / src.cost[finite]).max()) if finite.any() else 1.0
        hi = max(hi, 1e-300)
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if self.budget_use(mid, self.host_prices(mid)) > self.budget:
                lo = mid
            else:
                hi = mid
            if hi - lo <= self.tol * hi:
                break
        best = None
        for lam in (lo, hi):
            mu = self.host_prices(lam)
            value, cyc = self.value(lam, mu)
            if best is None or value < best.value:
                best = UpperBound(float(value), float(lam), cyc, mu)
        return best
