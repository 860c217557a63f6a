"""Baselines that need no learning: greedy, uniform random, round-robin."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.oracle import ExpectedStatePolicy
from scrapy_whittle.core.selection import select_top


class GreedyPolicy(ExpectedStatePolicy):
    """Crawl the sources with the largest expected value waiting now, per unit of cost.

    Myopic: it ignores that a source left alone keeps most of its value (alpha close to 1),
    which is exactly what the Whittle index accounts for.
    """

    name = "greedy"

    def priority(self, epoch: int) -> np.ndarray:
        self._advance(epoch)
        return self.x / self.problem.cost


class UniformPolicy(Policy):
    """Crawl sources chosen uniformly at random (the 2021 paper's naive baseline)."""

    name = "uniform"

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        return select_top(self.rng.random(self.n), self.problem.cost, budget, eligible)

    def observe(self, obs: Observation) -> None:
        pass


class RoundRobinPolicy(Policy):
    """Crawl sources in a fixed cyclic order, as many as the budget allows per epoch.

    This is what re-crawling with Scrapy's FIFO scheduler amounts to: every source is
    re-queued after its fetch and comes back once every N / M epochs, whatever it holds.
    """

    name = "round_robin"
    scalar_state = ("next_source",)

    def __init__(self, problem, rng=None) -> None:
        super().__init__(problem, rng)
        self.next_source = 0

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The next sources in the cycle that fit the budget; a source that may not be
        crawled now (``eligible``) is passed over until the cycle comes round again, as a
        FIFO queue re-queues a request that cannot go yet."""
        n = self.n
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        cost = self.problem.cost
        cmin = float(cost.min())
        k = min(n, int(np.floor(budget / cmin + 1e-9)))
        if eligible is None:
            order = (self.next_source + np.arange(k)) % n
        else:
            order = (self.next_source + np.arange(n)) % n
            order = order[eligible[order]][:k]
        fits = np.cumsum(cost[order]) <= budget + 1e-9
        chosen = order[fits]
        if chosen.size:
            self.next_source = int((chosen[-1] + 1) % n)
        return chosen

    def observe(self, obs: Observation) -> None:
        pass
