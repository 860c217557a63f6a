"""The Whittle index policy with known parameters (the oracle).

Each epoch it crawls the sources of largest index gamma_i(x_i) within the budget, where x_i is
the expected value waiting at source i. Never seeing the value before a crawl, it tracks the
mean dynamics of the 2018 paper: x <- alpha x + u every epoch, x <- u after a crawl
(x_i(t) is the value present when source i is crawled at epoch t).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.columns import Col
from scrapy_whittle.core.dynamics import expected_state, refine
from scrapy_whittle.core.index import IndexTable
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import with_max_interval
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.core.selection import PrunedTop, TopSelector, select_top
from scrapy_whittle.core.window import filling, index_at_state


class ExpectedStatePolicy(Policy):
    """Tracks x_i, the expected value waiting at each source, from known (alpha, u).

    x is advanced in place every epoch (two passes over N), and is derived state: what is
    persisted is the epoch each source was last emptied (``emptied``; NaN: never, x then
    evolves from the initial state since the first epoch, ``_start``), from which
    ``_after_import`` rebuilds x exactly."""

    per_source = {"x": Col(0.0, persist=False), "emptied": np.nan}
    needs_parameters = True
    scalar_state = ("_advanced_to", "_start")

    def __init__(self, problem: Problem, rng=None) -> None:
        super().__init__(problem, rng)
        if problem.initial_state is not None:
            self.x[:] = problem.initial_state
        self._advanced_to: int | None = None
        self._start: int | None = None
        self._unit_cost = bool(np.all(problem.cost == 1.0))
        self._top = TopSelector()

    def _after_import(self) -> None:
        if self._advanced_to is None:
            return
        p = self.problem
        never = np.isnan(self.emptied)
        x0 = np.where(never, 0.0 if p.initial_state is None else p.initial_state, 0.0)
        since = np.where(never, self._start, self.emptied)
        self.x[...] = expected_state(x0, p.alpha, p.u, self._advanced_to - since)

    def _advance(self, epoch: int) -> None:
        """Bring x to the start of ``epoch`` (x is the value present at that moment)."""
        if self._advanced_to is None:
            self._advanced_to = self._start = epoch
            return
        steps = epoch - self._advanced_to
        if steps <= 0:
            return
        a, u = self.problem.alpha, self.problem.u
        if steps == 1:
            self.x *= a
            self.x += u
        else:  # k passive steps at once: x <- a^k x + u (1 - a^k) / (1 - a)
            self.x[...] = expected_state(self.x, a, u, steps)
        self._advanced_to = epoch

    def observe(self, obs: Observation) -> None:
        self._advance(obs.epoch)
        crawled = obs.sources[obs.ok]
        self.x[crawled] = 0.0          # emptied now; the next epoch adds u
        self.emptied[crawled] = self._advanced_to

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        if eligible is not None:
            return select_top(self.priority(epoch), self.problem.cost, budget, eligible)
        return self._top(self.priority(epoch), None if self._unit_cost else self.problem.cost,
                         budget)

    def grow(self, n_new, cost=1.0, alpha=None, u=None) -> None:
        if alpha is None or u is None:
            raise ValueError(f"policy {self.name!r} needs alpha and u of new sources")
        super().grow(n_new, cost, alpha, u)
        if self._advanced_to is not None:        # new sources start empty, now
            self.emptied[-n_new:] = self._advanced_to
        self._costs_changed()

    def _costs_changed(self) -> None:
        self._unit_cost = bool(np.all(self.problem.cost == 1.0))


class WhittlePolicy(ExpectedStatePolicy):
    """The oracle Whittle index policy (``"oracle"``).

    With unit costs it prunes exactly (``PrunedTop``): the index never exceeds x (see
    ``IndexTable``), so a source whose expected value is below the last epoch's cut-off (the
    smallest index selected), lowered by ``PRUNE_MARGIN``, cannot make this epoch's top M
    unless the cut-off itself fell that far. Only the sources above it get their index
    computed. Either way the choice is exactly the top M by index (ties to the lower id).
    """

    name = "oracle"
    takes_max_interval = True
    takes_resolution = True
    PRUNE_MARGIN = 0.02

    def __init__(self, problem: Problem, rng=None, *, window=None, rate=None,
                 max_interval: float | None = None, resolution: float = 1.0) -> None:
        super().__init__(problem, rng)
        if max_interval is not None and not (max_interval > 0):
            raise ValueError(f"max_interval ({max_interval!r}) must be > 0 or None")
        if not 0 < resolution <= 1:
            raise ValueError(f"resolution ({resolution!r}) must lie in (0, 1]")
        self.max_interval = None if max_interval is None else float(max_interval)
        # deciding several times an epoch: the index of the shorter epoch (AdaptiveWhittle's
        # ``resolution``), at the same expected state
        self.resolution = float(resolution)
        self._table = self._index_table()
        self._out = np.empty(problem.n)
        self._pruning = PrunedTop(self.PRUNE_MARGIN)
        if (window is None) != (rate is None):
            raise ValueError("the oracle's window needs the sources' rates too (window=, rate=)")
        # the feeds' windows and their arrival rates (entries per unit of time): the index of a
        # source whose window can fill is the window's (:mod:`scrapy_whittle.core.window`)
        self.window = None if window is None else np.broadcast_to(
            np.asarray(window, dtype=np.float64), (problem.n,))
        self.rate = None if rate is None else np.broadcast_to(
            np.asarray(rate, dtype=np.float64), (problem.n,))

    def _windowed(self, ids, index: np.ndarray) -> np.ndarray:
        """``index`` (of sources ``ids``, a slice or an index array) with the window's index
        where a source's window can fill before the next epoch."""
        if self.window is None:
            return index
        p = self.problem
        period = float(p.period)
        since = np.where(np.isnan(self.emptied[ids]), self._start, self.emptied[ids])
        k = self._advanced_to - since
        r = self.resolution
        fills = np.flatnonzero(filling(k / r, period * r, self.rate[ids], self.window[ids]))
        if fills.size:
            src = np.arange(p.n)[ids][fills]
            log_alpha = np.log(np.clip(p.alpha[src], 1e-300, 1.0))
            _, _, u = refine(log_alpha, -np.expm1(log_alpha), p.u[src], r)
            index[fills] = index_at_state(k[fills] / r, self.x[src], u, -log_alpha / period,
                                          period * r, self.rate[src], self.window[src]
                                          ) / p.cost[src]
        return index

    def priority(self, epoch: int) -> np.ndarray:
        self._advance(epoch)
        return self._windowed(slice(None), self._table.index(self.x, out=self._out))

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        self._advance(epoch)
        if self.max_interval is None:
            return self.select_top(epoch, budget, eligible)
        since = np.where(np.isnan(self.emptied), self._start, self.emptied)
        waited = (epoch - since) * float(self.problem.period)
        return with_max_interval(lambda b, e: self.select_top(epoch, b, e), waited,
                                 self.max_interval, self.problem.cost, budget, eligible)

    def select_top(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The top of the index within ``budget``."""
        self._advance(epoch)
        k = int(np.floor(budget + 1e-9))
        if not self._unit_cost or k <= 0 or k >= self.n:
            return super().select(epoch, budget, eligible)
        chosen = self._pruning(
            self.x, lambda ids: self._windowed(ids, self._table.index_at(ids, self.x[ids])),
            budget, eligible)
        if chosen is not None:
            return chosen
        chosen = select_top(self.priority(epoch), None, budget, eligible)
        self._pruning.settled(self._out, chosen)
        return chosen

    def grow(self, n_new, cost=1.0, alpha=None, u=None, window=np.nan, rate=0.0) -> None:
        """Add sources; ``window``, ``rate``: their windows and rates (when the oracle knows
        windows)."""
        if n_new > 0 and self.window is not None:
            self.window = np.concatenate([self.window, np.broadcast_to(window, (n_new,))])
            self.rate = np.concatenate([self.rate, np.broadcast_to(rate, (n_new,))])
        super().grow(n_new, cost, alpha, u)

    def _index_table(self) -> IndexTable:
        p = self.problem
        if self.resolution == 1.0:
            return IndexTable(p.alpha, p.u, p.cost)
        log_alpha = np.log(np.clip(p.alpha, 1e-300, 1.0))
        log_r, one_minus_r, u_r = refine(log_alpha, -np.expm1(log_alpha), p.u, self.resolution)
        return IndexTable.from_logs(log_r, u_r, p.cost, one_minus_r)

    def _costs_changed(self) -> None:
        super()._costs_changed()
        self._table = self._index_table()
        self._out = np.empty(self.problem.n)
        self._pruning.forget()
