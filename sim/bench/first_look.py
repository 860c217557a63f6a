"""The first-look oracle: the ceiling of any crawler that must visit a source to learn it.

It is the oracle Whittle policy (``scrapy_whittle.core.policies.oracle.WhittlePolicy``) with
one restriction: it knows a source's true (alpha_i, u_i) only once it has crawled that source
(a first crawl shows its feed, and a perfect learner would read the source's law from it).
Before, it knows only the population: the true parameters of all the sources, but not which
source has which.

A never-crawled source is ranked by the population-expected index at the current epoch,
the mean over every source j of gamma_j(x_j(t)), x_j(t) the value a never-crawled source j
would hold now (``problem.initial_state`` carried forward by the mean dynamics: constant in
a warm web, u_j G_t from an empty start). Why not the index of the population's mean
parameters: the news populations are heavy-tailed, so the mean (alpha, u) describes no
source, and its index ignores that an unknown source may be one of the few that carry most
of the value; the expected index prices exactly that chance, and it grows with the time
the population has been left alone, as the real values do. All never-crawled sources share
one value, so among them the selection goes by id (``select_top`` breaks ties to the lower
id): a sweep of the unknown sources, interleaved with the known ones by index.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.dynamics import expected_state
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.oracle import ExpectedStatePolicy, WhittlePolicy
from scrapy_whittle.core.problem import Problem

NAME = "first-look"


class FirstLookOracle(WhittlePolicy):
    """The oracle Whittle policy that learns a source's parameters at its first crawl."""

    name = NAME
    takes_max_interval = False
    takes_resolution = False

    def __init__(self, problem: Problem, rng=None) -> None:
        super().__init__(problem, rng)
        self.known = np.zeros(problem.n, dtype=bool)
        x0 = problem.initial_state
        self._x0 = np.zeros(problem.n) if x0 is None else x0.copy()
        self._prior: tuple[int, float] | None = None       # (epoch, population index)

    def population_index(self, epoch: int) -> float:
        """The population-expected index of a source never crawled, at ``epoch``."""
        self._advance(epoch)
        if self._prior is None or self._prior[0] != epoch:
            p = self.problem
            x = expected_state(self._x0, p.alpha, p.u, epoch - self._start)
            self._prior = (epoch, float(np.mean(self._table.index(x))) if p.n else 0.0)
        return self._prior[1]

    def priority(self, epoch: int) -> np.ndarray:
        prio = super().priority(epoch)
        if not self.known.all():
            prio[~self.known] = self.population_index(epoch)
        return prio

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        # the exact top by priority; the oracle's pruning bounds the index by x, which an
        # unknown source's population index does not respect
        return ExpectedStatePolicy.select(self, epoch, budget, eligible)

    def observe(self, obs: Observation) -> None:
        super().observe(obs)
        self.known[obs.sources[obs.ok]] = True
