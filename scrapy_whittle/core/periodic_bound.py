"""The Lagrangian upper bound for sources with periodic arrivals (a daily rhythm).

Relax "at most M budget units in every epoch" by prices: lambda_tau >= 0 for the epochs of
phase tau (tau = 0..K-1, K epochs per period). For every price vector, weak duality gives

    R(policy) <= L(lambda) = M mean(lambda) + sum_i g_i(lambda),

g_i the best long-run average of (reward - lambda_{tau(t)} C_i per crawl) of source i alone:
the relaxation still decomposes per source, as in ``scrapy_whittle.core.bound`` (which is the case
K = 1). One price for all phases (``prices="scalar"``) relaxes the budget to "M on average";
one per phase (``prices="phase"``, the default) keeps "M in every epoch of each phase on
average over periods", which is tighter when sources share time zones.

The subsidy problem of one source is solved exactly. After a crawl at phase phi the state
restarts, and the next crawl k epochs later earns F(phi, k) (``scrapy_whittle.core.periodic``) and
pays lambda at its own phase: a deterministic semi-Markov problem on the K phases, whose best
average is the maximum cycle ratio (sum of edge rewards / sum of durations) of a complete
graph on K nodes, or 0 (never crawl). Among the edges from phi to psi (durations
k = r + m K, r = (psi - phi) mod K) the reward is concave in m, so the best m for a given
gain comes in closed form; Howard's policy iteration (multichain, for cycle ratios) then
finds the optimal cycle in a few iterations, vectorised over sources: O(N K^2) per iteration.
``g_i`` is exact for any prices, so the returned value is a valid bound whatever the quality
of the price search; the search only makes it tighter (bisection on the slope for a scalar
price, then a projected tatonnement on the phase prices, keeping the best value seen).

This bounds policies that decide from what crawls revealed; for Poisson arrivals the expected
value waiting at a source given that information is F(phase of last crawl, epochs since), so
it holds for the stochastic model as for the mean dynamics.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scrapy_whittle.core.bound import upper_bound
from scrapy_whittle.core.dynamics import geometric_sum
from scrapy_whittle.core.periodic import PeriodicArrivals, period_values

PRICES = ("phase", "scalar")
_CHUNK = 4_000_000            # N * K * K elements per vectorised block


@dataclass(frozen=True)
class PeriodicBound:
    value: float             # bound on the long-run average reward per epoch
    price: np.ndarray        # lambda_tau, shape (K,)
    gain: np.ndarray         # g_i(lambda) per source (relaxed reward minus prices)
    crawl_rate: np.ndarray   # (N, K): relaxed crawls per epoch of each source at each phase
    scalar_value: float      # the bound with one price for all phases (>= value)

    def __float__(self) -> float:
        return self.value


class _Block:
    """Per-source constants of the subsidy problem for a block of sources."""

    M_MAX = 1e7             # longest wait considered, in periods (a cap far beyond any optimum)

    def __init__(self, alpha, u, cost) -> None:
        n, k = u.shape
        self.n, self.k = n, k
        a = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0 - 2.0**-52)
        self.cost = np.asarray(cost, dtype=np.float64)
        head = np.zeros((n, k, k))              # head[i, phi, r] = F(phi, r), r = 0..K-1
        acc = np.zeros((n, k))
        for r in range(1, k):
            acc = a[:, None] * acc + np.roll(u, -(r - 1), axis=1)
            head[:, :, r] = acc
        full = period_values(a, u)               # D(phi) = F(phi, K)
        with np.errstate(divide="ignore"):
            log_a = np.log(a)
        self.log_big_a = k * log_a               # log A, A = alpha^K (-inf when alpha = 0)
        steps = np.arange(k)
        self.r = (steps[None, :] - steps[:, None]) % k          # r[phi, psi]
        self.m_min = (self.r == 0).astype(np.float64)
        rr = np.broadcast_to(self.r, (n, k, k))
        alpha_r = np.exp(log_a[:, None] * steps[None, :])       # alpha^r (alpha^0 = 1)
        self.base = np.take_along_axis(head, rr, axis=2)        # F(phi, r)
        self.coef = alpha_r[np.arange(n)[:, None, None], rr] * full[:, :, None]  # a^r D
        # V(psi): value waiting at phase psi after an endless wait, D(psi) / (1 - A); every
        # edge into psi earns less, so a source with V(psi) <= lambda_psi C at every psi
        # is never worth a crawl
        self.value_inf = full / -np.expm1(self.log_big_a)[:, None]
        self.scale = np.maximum(self.value_inf.max(axis=1), 1e-300)

    def take(self, idx: np.ndarray) -> _Block:
        sub = object.__new__(_Block)
        sub.n, sub.k = int(idx.shape[0]), self.k
        sub.r, sub.m_min = self.r, self.m_min
        for name in ("cost", "log_big_a", "base", "coef", "value_inf", "scale"):
            setattr(sub, name, getattr(self, name)[idx])
        return sub

    def geo(self, m) -> np.ndarray:
        """(1 - A^m) / (1 - A) for m broadcast against (n, K, K) or (n, K)."""
        return geometric_sum(m, self.log_big_a.reshape((-1,) + (1,) * (np.ndim(m) - 1)))

    def weights(self, m, price_cost) -> tuple[np.ndarray, np.ndarray]:
        """(reward - price, duration) of every edge phi -> psi with m extra periods (n, K, K);
        ``price_cost`` (n, K) is lambda_psi C_i."""
        w = self.base + self.coef * self.geo(m) - price_cost[:, None, :]
        return w, self.r + m * self.k

    def policy_edges(self, succ, m, price_cost) -> tuple[np.ndarray, np.ndarray]:
        """(reward - price, duration) of the edges a policy (succ, m) uses, shape (n, K)."""
        i = np.arange(self.n)[:, None]
        phi = np.arange(self.k)[None, :]
        w = (self.base[i, phi, succ] + self.coef[i, phi, succ] * self.geo(m)
             - price_cost[i, succ])
        return w, self.r[phi, succ] + m * self.k

    def best_m(self, gain) -> np.ndarray:
        """Best m >= m_min on every edge for a gain per epoch ``gain`` > 0 (n,): the
        maximiser of coef (1 - A^m) / (1 - A) - gain K m, concave in m (closed form, then the
        better of the two integers around it)."""
        la = self.log_big_a[:, None, None]
        g = gain[:, None, None]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            arg = g * self.k * -np.expm1(la) / (self.coef * -la)
            m_star = np.log(arg) / la
        m_star = np.where(~(arg < 1.0), 0.0, np.where(np.isfinite(m_star), m_star, self.M_MAX))
        lo = np.clip(np.floor(m_star), self.m_min, self.M_MAX)
        hi = np.clip(lo + 1.0, self.m_min, self.M_MAX)
        obj_lo = self.coef * self.geo(lo) - g * self.k * lo
        obj_hi = self.coef * self.geo(hi) - g * self.k * hi
        return np.where(obj_hi > obj_lo, hi, lo)

    def positive_start(self, price_cost) -> tuple[np.ndarray, np.ndarray]:
        """A policy of positive gain for sources worth crawling: wait at the phase psi* of
        largest V(psi) - lambda_psi C long enough that the self-loop there pays; every other
        phase goes straight to psi*."""
        k = self.k
        target = (self.value_inf - price_cost).argmax(axis=1)
        i = np.arange(self.n)
        v = self.value_inf[i, target]
        with np.errstate(divide="ignore", invalid="ignore"):
            m0 = np.floor(np.log1p(-price_cost[i, target] / v) / self.log_big_a) + 1.0
        m0 = np.clip(np.where(np.isfinite(m0), m0, 1.0), 1.0, self.M_MAX)
        succ = np.broadcast_to(target[:, None], (self.n, k)).copy()
        m = self.m_min[np.arange(k)[None, :], succ].copy()
        m[i, target] = m0
        return succ, m


def _take(a, idx):
    return np.take_along_axis(a, idx, axis=1)


def _evaluate(succ, w, d):
    """Gain (ratio of the cycle reached) and bias of every node under the policy ``succ``."""
    k = succ.shape[1]
    node = np.broadcast_to(np.arange(k), succ.shape).copy()
    for _ in range(k):
        node = _take(succ, node)                                 # now on a cycle
    start = node
    sw, sd, root = _take(w, start), _take(d, start), start.copy()
    node = _take(succ, start)
    active = node != start
    for _ in range(k - 1):
        if not active.any():
            break
        sw = sw + np.where(active, _take(w, node), 0.0)
        sd = sd + np.where(active, _take(d, node), 0.0)
        root = np.where(active, np.minimum(root, node), root)
        node = np.where(active, _take(succ, node), node)
        active &= node != start
    eta = sw / sd
    h = np.zeros(succ.shape)
    node = np.broadcast_to(np.arange(k), succ.shape).copy()
    active = node != root
    for _ in range(2 * k):
        if not active.any():
            break
        h += np.where(active, _take(w, node) - eta * _take(d, node), 0.0)
        node = np.where(active, _take(succ, node), node)
        active &= node != root
    return eta, h


def _howard(blk: _Block, price_cost, succ, m, max_iter: int = 500):
    """Howard's policy iteration for the maximum cycle ratio, from a policy of positive gain;
    returns (gain, crawl rate per phase (n, K), succ, m)."""
    n, k = blk.n, blk.k
    i = np.arange(n)[:, None]
    phi = np.arange(k)[None, :]
    tol = 1e-12 * blk.scale[:, None]
    for _ in range(max_iter):
        w, d = blk.policy_edges(succ, m, price_cost)
        eta, h = _evaluate(succ, w, d)
        best = eta.max(axis=1)
        best_node = eta.argmax(axis=1)
        optimal = eta >= best[:, None] - tol / d              # nodes already of best gain
        m_best = blk.best_m(best)
        w_b, d_b = blk.weights(m_best, price_cost)
        q = w_b - best[:, None, None] * d_b + h[:, None, :]
        q = np.where(optimal[:, None, :], q, -np.inf)         # stay on gain-optimal targets
        cand = q.argmax(axis=2)
        q_best = np.take_along_axis(q, cand[:, :, None], axis=2)[:, :, 0]
        better = optimal & (q_best > h + tol)
        new_succ = np.where(~optimal, best_node[:, None], np.where(better, cand, succ))
        new_m = np.where(~optimal, m_best[i, phi, best_node[:, None]],
                         np.where(better, m_best[i, phi, cand], m))
        if np.array_equal(new_succ, succ) and np.array_equal(new_m, m):
            break
        succ, m = new_succ, new_m
    else:
        raise RuntimeError("periodic bound: policy iteration did not converge")
    # crawl rate per phase on the optimal cycle
    rows = np.arange(n)
    node = best_node.copy()
    for _ in range(k):
        node = succ[rows, node]
    start = node.copy()
    rate = np.zeros((n, k))
    total = np.zeros(n)
    active = np.ones(n, dtype=bool)
    for _ in range(k):
        nxt = succ[rows, node]
        rate[rows, nxt] += active
        total += np.where(active, d[rows, node], 0.0)
        node = nxt
        active &= node != start
        if not active.any():
            break
    return best, rate / total[:, None], succ, m


def _solve_block(blk: _Block, price_cost, policy=None):
    """g_i and the relaxed crawl rates per phase of every source of the block at prices
    ``price_cost`` (n, K); ``policy`` (succ, m) warm-starts Howard (returned updated)."""
    n, k = blk.n, blk.k
    gain, rate = np.zeros(n), np.zeros((n, k))
    if policy is None:
        policy = blk.positive_start(price_cost)
    succ, m = (a.copy() for a in policy)
    worth = np.flatnonzero((blk.value_inf - price_cost).max(axis=1) > 0)
    if worth.size:
        sub = blk.take(worth)
        pc = price_cost[worth]
        s, mm = succ[worth], m[worth]
        w, d = sub.policy_edges(s, mm, pc)
        eta, _ = _evaluate(s, w, d)
        restart = eta.max(axis=1) <= 0
        if restart.any():
            s0, m0 = sub.positive_start(pc)
            s[restart], mm[restart] = s0[restart], m0[restart]
        g, r, s, mm = _howard(sub, pc, s, mm)
        gain[worth], rate[worth] = g, r
        succ[worth], m[worth] = s, mm
    return gain, rate, (succ, m)


class _Sources:
    """All sources, split into blocks of bounded memory; remembers Howard's policies."""

    def __init__(self, alpha, u, cost) -> None:
        n, k = u.shape
        size = max(1, _CHUNK // max(1, k * k))
        self.blocks = [(_Block(alpha[s:s + size], u[s:s + size], cost[s:s + size]),
                        slice(s, s + size)) for s in range(0, n, size)]
        self.policies: list = [None] * len(self.blocks)
        self.n, self.k = n, k
        self.cost = cost

    def relaxed(self, price: np.ndarray):
        """(sum of g_i, crawl cost per epoch at each phase (K,), g, rates (N, K))."""
        gain = np.zeros(self.n)
        rate = np.zeros((self.n, self.k))
        for j, (blk, sl) in enumerate(self.blocks):
            pc = blk.cost[:, None] * price[None, :]
            g, r, pol = _solve_block(blk, pc, self.policies[j])
            self.policies[j] = pol
            gain[sl], rate[sl] = g, r
        use = (rate * self.cost[:, None]).sum(axis=0) * self.k
        return float(gain.sum()), use, gain, rate


def periodic_upper_bound(arrivals: PeriodicArrivals, budget: float, cost=1.0, *,
                         prices: str = "phase", rounds: int = 60,
                         tol: float = 1e-6) -> PeriodicBound:
    """Lagrangian upper bound on the average reward per epoch of sources with periodic
    arrivals ``arrivals`` (alpha_i, u_i(tau)), crawl costs C_i and ``budget`` cost units per
    epoch. See the module docstring; ``rounds`` bounds the phase-price search."""
    if prices not in PRICES:
        raise ValueError(f"prices ({prices!r}) must be one of {', '.join(PRICES)}")
    if not (np.isfinite(budget) and budget > 0):
        raise ValueError(f"budget ({budget!r}) must be > 0")
    n, k = arrivals.n, arrivals.k
    cost = np.broadcast_to(np.asarray(cost, dtype=np.float64), (n,)).copy()
    if np.any(~np.isfinite(cost) | (cost <= 0)):
        raise ValueError("cost must be finite and > 0")
    if n == 0:
        return PeriodicBound(0.0, np.zeros(k), np.zeros(0), np.zeros((0, k)), 0.0)
    src = _Sources(arrivals.alpha, np.ascontiguousarray(arrivals.u), cost)

    def value(price):
        total, use, gain, rate = src.relaxed(price)
        return budget * float(price.mean()) + total, use, gain, rate

    best = None

    def keep(price, result):
        nonlocal best
        if best is None or result[0] < best[0][0]:
            best = (result, price.copy())

    if cost.sum() <= budget:             # every source every epoch: nothing is ever lost
        total = float(arrivals.mean_u.sum())
        return PeriodicBound(total, np.zeros(k), arrivals.mean_u.copy(),
                             np.full((n, k), 1.0 / k), total)
    def scalar(lam: float) -> bool:
        """Evaluate one price for all phases; True when the relaxed use exceeds the budget."""
        res = value(np.full(k, lam))
        keep(np.full(k, lam), res)
        return bool(res[1].mean() > budget)

    # the budget binds: bisection on a scalar price, bracketed around the stationary bound's
    # price at the daily mean arrivals
    guess = upper_bound(arrivals.alpha, arrivals.mean_u, budget, cost).price
    lo, hi = 0.0, max(2.0 * guess, 1e-300)
    while scalar(hi):
        lo, hi = hi, 2.0 * hi
    if scalar(0.5 * hi):
        lo = 0.5 * hi
    else:
        hi = 0.5 * hi
    for _ in range(200):
        if hi - lo <= tol * hi:
            break
        mid = 0.5 * (lo + hi)
        if scalar(mid):
            lo = mid
        else:
            hi = mid
    scalar_value = best[0][0]
    if prices == "phase" and k > 1 and best[1].max() > 0:
        price = best[1].copy()
        step = 0.5
        last = best[0]
        for _ in range(rounds):
            # tatonnement: raise the price of phases used above the budget, lower the others
            excess = last[1] / budget - 1.0
            trial = np.maximum(price * np.exp(step * np.clip(excess, -1.0, 1.0)), 0.0)
            res = value(trial)
            if res[0] < last[0]:
                price, last = trial, res
                keep(price, res)
                step *= 1.2
            else:
                step *= 0.5
                if step < 1e-4:
                    break
    (total, _, gain, rate), price = best
    return PeriodicBound(float(total), price, gain, rate, float(scalar_value))
