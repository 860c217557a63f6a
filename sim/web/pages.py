"""Changing pages: the model of *Deep Reinforcement Learning for Web Crawling* (Avrachenkov,
Borkar & Patil, ICC 2021).

Page k changes as a Poisson process of rate lambda_k per slot, so it changes in a slot with
probability Delta_k = 1 - exp(-lambda_k). A crawl only sees whether the page changed since its
previous crawl (not how many times). Crawling page k at slot t earns its importance m_k if it
changed since it was last crawled (or since slot 0), nothing otherwise; ``obs.new_items`` is
that changed bit and ``obs.reward`` = m_k * changed.

Left alone for n slots a page has changed with probability 1 - (1 - Delta_k)^n, so its
expected reward follows the ephemeral-content recursion with alpha = exp(-lambda),
u = m Delta (the bridge of ``Problem.from_pages``); ``problem`` is that oracle problem.

The environment takes page ids. The papers' groups of statistically identical pages, with
round-robin inside the group chosen by DQN or Thompson sampling, are the policy's business;
``groups`` is only passed through to ``problem``.

The change bit is sampled lazily at the crawl: one Bernoulli(1 - (1 - Delta)^n) draw per crawled
page, with n the slots since its last crawl, which has exactly the law of n independent slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.problem import Problem
from sim.web.ephemeral import SourcesEnv, check_action


class ChangingPages(SourcesEnv):
    """Pages that change at Poisson rates, Gymnasium-style.

    change_rate: lambda_k, expected changes per slot (>= 0).
    importance: m_k, reward of crawling page k when it changed (>= 0).
    budget: cost units per slot (the paper crawls one page per slot).
    groups: group id of each page, for ``problem.groups`` (None: each page its own group).
    cost: C_k, cost of one crawl of each page (default 1).
    """

    def __init__(self, change_rate, importance, budget: float = 1, groups=None,
                 cost=None) -> None:
        lam = np.asarray(change_rate, dtype=np.float64)
        m = np.asarray(importance, dtype=np.float64)
        if m.ndim == 0 and lam.ndim == 1:
            m = np.full(lam.shape, float(m))
        if lam.ndim != 1 or m.shape != lam.shape:
            raise ValueError("change_rate and importance must be 1-D arrays of the same length")
        if not (np.all(np.isfinite(lam)) and np.all(np.isfinite(m))):
            raise ValueError("change_rate and importance must be finite")
        if np.any(lam < 0) or np.any(m < 0):
            raise ValueError("change_rate and importance must be >= 0")
        if not (np.isfinite(budget) and budget > 0):
            raise ValueError(f"budget ({budget!r}) must be > 0")
        self.change_rate = lam
        self.importance = m
        self.budget = float(budget)
        self.groups = groups
        self._problem = Problem.from_pages(lam, m, cost=cost, groups=groups)
        self._last = np.zeros(0, dtype=np.int64)
        self._rng: np.random.Generator | None = None
        self.epoch = 0

    @property
    def n(self) -> int:
        return int(self.change_rate.shape[0])

    def reset(self, *, seed: int | None = None) -> tuple[Observation, dict[str, Any]]:
        self._rng = np.random.default_rng(seed)
        self._last = np.zeros(self.n, dtype=np.int64)
        self.epoch = 0
        return Observation.empty(0), {}

    def change_probability(self, ids=None) -> np.ndarray:
        """P(page changed since its last crawl) at the current slot: 1 - exp(-lambda n)."""
        ids = np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)
        return -np.expm1(-self.change_rate[ids] * (self.epoch - self._last[ids]))

    def step(self, action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Crawl the pages ``action`` (int ids) at the current slot, then advance."""
        if self._rng is None:
            raise RuntimeError("call reset(seed=...) before step()")
        ids = check_action(action, self.n, self.cost, self.budget)
        t = self.epoch
        prob = self.change_probability(ids)
        changed = self._rng.random(ids.shape[0]) < prob
        reward = np.where(changed, self.importance[ids], 0.0)
        obs = Observation(epoch=t, sources=ids, time=float(t), new_items=changed.astype(np.int64),
                          reward=reward)
        self._last[ids] = t
        self.epoch = t + 1
        info = {"expected_reward": float((self.importance[ids] * prob).sum())}
        return obs, obs.total_reward, False, False, info

    def __repr__(self) -> str:
        return f"ChangingPages(n={self.n}, budget={self.budget:g})"
