"""Independent, slow reference computations from the definitions (no closed forms).

The Whittle index of state x is the subsidy lambda at which crawling and waiting are equally
good at x in the single-source average-reward problem with subsidy C lambda for passivity.
With deterministic dynamics every policy from x is "wait k >= 0 epochs, crawl, then follow the
stationary optimum from u", whose stationary part is a cycle of some length n >= 1 or never
crawling. Enumerating k and n, relative values (to V(u)) are

    crawl now:            x - beta
    wait k, then crawl:   k (C lambda - beta) + x_k - beta
                          (x_k = alpha^k x + u (1 - alpha^k) / (1 - alpha))
    wait forever:         0 when beta = C lambda (never crawling is optimal), else -infinity

with beta = max(C lambda, max_n (C lambda (n - 1) + u*(1 - alpha^n)) / n). Their difference
is non-increasing in lambda; bisection finds the indifference point.
"""

from __future__ import annotations

import numpy as np


def _passive_states(x, alpha, u, kmax):
    k = np.arange(1, kmax + 1, dtype=np.float64)
    ak = alpha**k
    geo = (1 - ak) / (1 - alpha) if alpha < 1 else k
    return k, ak * x + u * geo


def average_reward(c, alpha, u, nmax):
    n = np.arange(1, nmax + 1, dtype=np.float64)
    an = alpha**n
    xn = u * ((1 - an) / (1 - alpha) if alpha < 1 else n)
    cycles = (c * (n - 1) + xn) / n
    return max(c, float(cycles.max()))


def crawl_advantage(x, c, alpha, u, horizon):
    beta = average_reward(c, alpha, u, horizon)
    k, xk = _passive_states(x, alpha, u, horizon)
    wait = float(np.max(k * (c - beta) + xk - beta))
    if beta <= c + 1e-12 * max(1.0, abs(c)):
        wait = max(wait, 0.0)
    return (x - beta) - wait


def brute_force_index(x, alpha, u, cost=1.0, horizon=3000, iters=80):
    """The subsidy at which crawling and waiting tie at state x (by bisection on lambda)."""
    ustar = u / (1 - alpha) if alpha < 1 else np.inf
    hi_c = max(x, ustar if np.isfinite(ustar) else x, 1e-12) * 2 + 1.0
    lo_c = 0.0
    if crawl_advantage(x, lo_c, alpha, u, horizon) <= 0:
        return 0.0
    for _ in range(iters):
        mid = 0.5 * (lo_c + hi_c)
        if crawl_advantage(x, mid, alpha, u, horizon) > 0:
            lo_c = mid
        else:
            hi_c = mid
    return 0.5 * (lo_c + hi_c) / cost


def brute_force_bound(alpha, u, budget, cost, lambdas, nmax=5000):
    """min over a grid of prices of the Lagrangian, each source's best cycle by enumeration."""
    lambdas = np.asarray(lambdas, dtype=np.float64)[:, None]
    n = np.arange(1, nmax + 1, dtype=np.float64)[None, :]
    total = lambdas[:, 0] * budget
    for a, uu, c in zip(alpha, u, cost, strict=True):
        xn = uu * (1 - a**n) / (1 - a)
        total = total + np.maximum(0.0, np.max((xn - lambdas * c) / n, axis=1))
    return float(total.min())
