"""Static optimisation: a fixed crawl distribution, the baseline of *Deep Reinforcement Learning
for Web Crawling* (Avrachenkov, Borkar & Patil, ICC 2021, Section IV-B), after Azar, Horvitz,
Lubetzky, Peres & Shahaf, *Tractable near-optimal policies for crawling* (PNAS 2018).

A page that changes in a slot with probability Delta_k and is crawled in each slot with
probability p_k (independently) is fresh a fraction p_k / (p_k + Delta_k - Delta_k p_k) of the
time, so the policy maximises the weighted freshness

    F(p) = sum_k m_k p_k / (p_k + Delta_k - Delta_k p_k)   subject to   sum_k C_k p_k = M,
    0 <= p_k <= 1,

(ICC 2021 eq. (8); M = 1 there), which is concave. Its Lagrange conditions
m_k Delta_k / (Delta_k + p_k (1 - Delta_k))^2 = lambda C_k give

    p_k(lambda) = clip( (sqrt(m_k Delta_k / (lambda C_k)) - Delta_k) / (1 - Delta_k), 0, 1 ),

piecewise linear in s = 1 / sqrt(lambda), so the multiplier is found exactly: sort the
breakpoints (where p_k leaves 0 and reaches 1), find the piece where sum C p crosses M and
solve the linear equation there (``static_distribution``). A page with Delta = 1 is a step at
lambda = m / C; the budget left at that step is shared among the pages on it.

Ephemeral sources use the bridge Delta = 1 - alpha, m = u / Delta (so m Delta = u); for pages
``Problem.from_pages`` gives u = m Delta, the same numbers. ``objective="reward"`` instead
maximises the expected reward rate of the crawls, sum_k u_k p_k / (p_k + Delta_k - Delta_k p_k)
(weights m_k Delta_k rather than m_k): with the ICC 2021 reward (m_k when the page changed) the
freshness objective is not the reward, and on that paper's example this variant puts all the
mass on page 1.

Each epoch ``select`` draws the sources to crawl by systematic sampling (Madow) over a random
order fixed at the first draw: every source is included with probability exactly p_k and, with
unit costs, exactly M sources are drawn. With unequal costs the draw is trimmed at random to the
budget, so inclusion probabilities are then approximate.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.distinct import distinct
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.core.selection import select_top


def static_distribution(alpha, u, budget: float, cost=1.0,
                        objective: str = "freshness") -> np.ndarray:
    """The exact maximiser p of F under sum C p = budget, 0 <= p <= 1 (see module doc)."""
    alpha, u, cost = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64)
                                           for a in (alpha, u, cost)))
    if objective not in ("freshness", "reward"):
        raise ValueError(f"objective ({objective!r}) must be 'freshness' or 'reward'")
    if budget <= 0:
        raise ValueError(f"budget ({budget!r}) must be > 0")
    delta = 1.0 - alpha
    gain = (u if objective == "freshness" else u * delta) / cost   # m Delta / C
    p = np.zeros(alpha.shape)
    act = np.flatnonzero(gain > 0)
    if act.size == 0:
        return p
    if cost[act].sum() <= budget:
        p[act] = 1.0
        return p
    g, d, c = gain[act], delta[act], cost[act]
    root = np.sqrt(g)
    step = d >= 1.0                       # Delta = 1: a step from 0 to 1 at s = 1 / sqrt(g)
    s0 = d / root                         # p leaves 0
    s1 = 1.0 / root                       # p reaches 1
    slope = np.where(step, 0.0, root / np.where(step, 1.0, 1.0 - d))
    shift = np.where(step, 0.0, d / np.where(step, 1.0, 1.0 - d))

    def total(s: float, strict_steps_at: float | None = None) -> float:
        q = np.clip(slope * s - shift, 0.0, 1.0)
        on = s1 <= s if strict_steps_at is None else s1 < strict_steps_at
        q = np.where(step, on, q)
        return float(np.dot(c, q))

    bp = np.unique(np.concatenate([s0[~step], s1]))
    lo, hi = 0, bp.shape[0] - 1           # smallest j with total(bp[j]) >= budget
    while lo < hi:
        mid = (lo + hi) // 2
        if total(bp[mid]) >= budget:
            hi = mid
        else:
            lo = mid + 1
    sj = bp[lo]
    jump = float(c[step & (s1 == sj)].sum())
    left = total(sj) - jump                # P just below sj
    if left >= budget or jump == 0.0:
        s_prev = bp[lo - 1] if lo > 0 else 0.0
        p_prev = total(s_prev, strict_steps_at=sj) if lo > 0 else 0.0
        s = sj if left <= p_prev else s_prev + (budget - p_prev) * (sj - s_prev) / (left - p_prev)
        q = np.clip(slope * s - shift, 0.0, 1.0)
        q = np.where(step, (s1 < sj).astype(np.float64), q)
    else:                                  # the budget runs out on the step at sj
        q = np.clip(slope * sj - shift, 0.0, 1.0)
        frac = (budget - left) / jump
        q = np.where(step, np.where(s1 < sj, 1.0, np.where(s1 == sj, frac, 0.0)), q)
    p[act] = q
    return p


class StaticPolicy(Policy):
    """Crawl sources drawn from the static optimum p* each epoch (oracle: needs alpha, u).

    objective: "freshness" (Azar et al., as in ICC 2021; default) or "reward".
    """

    name = "static"
    needs_parameters = True
    scalar_state = ("_order",)

    def __init__(self, problem: Problem, rng=None, objective: str = "freshness") -> None:
        super().__init__(problem, rng)
        if objective not in ("freshness", "reward"):
            raise ValueError(f"objective ({objective!r}) must be 'freshness' or 'reward'")
        self.objective = objective
        self._order: np.ndarray | None = None
        self._cache: tuple[float, np.ndarray, np.ndarray] | None = None

    def distribution(self, budget: float) -> np.ndarray:
        """p*: the probability of crawling each source in an epoch with this budget."""
        p = self.problem
        return static_distribution(p.alpha, p.u, budget, p.cost, self.objective)

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """A draw from p* (systematic sampling); drawn sources that may not be crawled now
        (``eligible``) are dropped, not replaced: p* is a per-epoch probability."""
        if self.n == 0 or budget <= 0:
            return np.zeros(0, dtype=np.int64)
        if self._order is None or self._order.shape[0] != self.n:
            self._order = self.rng.permutation(self.n)
            self._cache = None
        if self._cache is None or self._cache[0] != budget:
            prob = self.distribution(budget)
            self._cache = (budget, prob, np.cumsum(prob[self._order]))
        _, prob, cum = self._cache
        total = cum[-1]
        if total <= 0:
            return np.zeros(0, dtype=np.int64)
        points = self.rng.random() + np.arange(int(np.ceil(total)))
        points = points[points < total]
        chosen = distinct(self._order[np.searchsorted(cum, points, side="right")])
        if eligible is not None:
            chosen = chosen[eligible[chosen]]
        cost = self.problem.cost
        if cost[chosen].sum() > budget + 1e-9:
            keep = select_top(self.rng.random(chosen.shape[0]), cost[chosen], budget)
            chosen = chosen[keep]
        return chosen

    def observe(self, obs: Observation) -> None:
        pass

    def grow(self, n_new, cost=1.0, alpha=None, u=None) -> None:
        if alpha is None or u is None:
            raise ValueError(f"policy {self.name!r} needs alpha and u of new sources")
        super().grow(n_new, cost, alpha, u)
        self._order = None
        self._cache = None
