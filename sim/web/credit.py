"""A crawl budget per epoch that need not be whole: the unspent fraction carried as a credit.

A rule's own request volume (``sim.bench --volume-of``) is a mean, 0.8 crawls per epoch say;
with unit costs a budget of 0.8 every epoch buys nothing. A credit keeps the mean instead:
each epoch it grows by the budget, the epoch may spend its whole part, and it shrinks by what
was spent, so that over many epochs the spend averages the budget (0.8: four crawls in five
epochs). A whole budget is passed as it is, epoch after epoch: a run with one is the same
run as without the credit.
"""

from __future__ import annotations

import math

import numpy as np

#: slack against the rounding of a credit summed over many epochs
EPS = 1e-9


class BudgetCredit:
    """The budget of each epoch (``allowance``), given the spend (``spend``)."""

    def __init__(self, budget: float) -> None:
        self.budget = float(budget)
        self.whole = self.budget == math.floor(self.budget)
        self.credit = 0.0

    def allowance(self) -> float:
        """What the coming epoch may spend."""
        if self.whole:
            return self.budget
        self.credit += self.budget
        return float(math.floor(self.credit + EPS))

    def spend(self, cost: np.ndarray, action) -> None:
        """The epoch crawled the sources ``action``, of crawl costs ``cost[action]``."""
        if not self.whole:
            self.credit -= float(np.sum(cost[np.asarray(action, dtype=np.int64)]))
