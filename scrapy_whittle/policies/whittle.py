"""The Whittle index policy with known parameters (the oracle).

Each epoch it crawls the sources of largest index gamma_i(x_i) within the budget, where x_i is
the expected value waiting at source i. Never seeing the value before a crawl, it tracks the
mean dynamics of the 2018 paper: x <- alpha x + u every epoch, x <- u after a crawl
(x_i(t) is the value present when source i is crawled at epoch t).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.index import IndexTable
from scrapy_whittle.observation import Observation
from scrapy_whittle.policies.base import BasePolicy
from scrapy_whittle.problem import Problem
from scrapy_whittle.selection import TopSelector


class ExpectedStatePolicy(BasePolicy):
    """Tracks x_i, the expected value waiting at each source, from known (alpha, u)."""

    per_source = {"x": 0.0}
    needs_parameters = True

    def __init__(self, problem: Problem, rng=None) -> None:
        super().__init__(problem, rng)
        if problem.initial_state is not None:
            self.x[:] = problem.initial_state
        self._advanced_to: int | None = None
        self._unit_cost = bool(np.all(problem.cost == 1.0))
        self._top = TopSelector()

    def _advance(self, epoch: int) -> None:
        """Bring x to the start of ``epoch`` (x is the value present at that moment)."""
        if self._advanced_to is None:
            self._advanced_to = epoch
            return
        steps = epoch - self._advanced_to
        if steps <= 0:
            return
        a, u = self.problem.alpha, self.problem.u
        if steps == 1:
            self.x *= a
            self.x += u
        else:  # k passive steps at once: x <- a^k x + u (1 - a^k) / (1 - a)
            ak = a ** steps
            with np.errstate(divide="ignore", invalid="ignore"):
                geo = np.where(a < 1, (1 - ak) / np.where(a < 1, 1 - a, 1.0), steps)
            self.x = ak * self.x + u * geo
        self._advanced_to = epoch

    def observe(self, obs: Observation) -> None:
        self._advance(obs.epoch)
        crawled = obs.sources[obs.ok]
        self.x[crawled] = 0.0          # emptied now; the next epoch adds u

    def priority(self) -> np.ndarray:
        raise NotImplementedError

    def select(self, epoch: int, budget: float) -> np.ndarray:
        self._advance(epoch)
        return self._top(self.priority(), None if self._unit_cost else self.problem.cost,
                         budget)

    def grow(self, n_new, cost=1.0, alpha=None, u=None) -> None:
        if alpha is None or u is None:
            raise ValueError(f"policy {self.name!r} needs alpha and u of new sources")
        super().grow(n_new, cost, alpha, u)
        self._unit_cost = bool(np.all(self.problem.cost == 1.0))

    scalar_state = ("_advanced_to",)


class WhittlePolicy(ExpectedStatePolicy):
    name = "whittle"

    def __init__(self, problem: Problem, rng=None) -> None:
        super().__init__(problem, rng)
        self._table = IndexTable(problem.alpha, problem.u, problem.cost)
        self._out = np.empty(problem.n)

    def priority(self) -> np.ndarray:
        return self._table.index(self.x, out=self._out)

    def grow(self, n_new, cost=1.0, alpha=None, u=None) -> None:
        super().grow(n_new, cost, alpha, u)
        self._table = IndexTable(self.problem.alpha, self.problem.u, self.problem.cost)
        self._out = np.empty(self.problem.n)
