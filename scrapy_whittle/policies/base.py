"""The one interface every crawl policy implements.

A policy is told the :class:`~scrapy_whittle.problem.Problem` when it is built, then, epoch
after epoch:

1. ``select(epoch, budget)`` returns the ids of the sources to crawl now, whose total cost
   (``problem.cost``) is at most ``budget``;
2. ``observe(obs)`` receives what those crawls (and possibly crawls made at other times, in
   Scrapy) showed.

A policy that ranks sources may also expose ``priority(epoch) -> float[N]`` (higher first,
per unit of cost): the Scrapy scheduler then picks the top sources among those it may fetch
now (politeness, back-off) instead of calling ``select``.

Time is counted in epochs of length ``problem.period``; the Scrapy scheduler maps real time
onto epochs. Sources may be added while a crawl runs (``grow``), and a policy's learned state
is saved and restored with the crawl (``state_dict`` / ``load_state_dict``), so a crawl
restarted from the same JOBDIR continues learning.

:class:`BasePolicy` gives per-source state arrays that grow and persist for free: a subclass
lists them in ``per_source`` with their fill value and keeps its scalar state in
``scalar_state``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from scrapy_whittle.observation import Observation
from scrapy_whittle.problem import Problem


@runtime_checkable
class Policy(Protocol):
    name: ClassVar[str]
    problem: Problem

    def select(self, epoch: int, budget: float) -> np.ndarray: ...

    def observe(self, obs: Observation) -> None: ...

    def grow(self, n_new: int, cost: np.ndarray | float = 1.0) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class BasePolicy:
    """Shared plumbing: problem bookkeeping, per-source arrays, growth, persistence.

    Subclasses set ``name``, declare ``per_source = {"attr": fill_value, ...}`` (arrays of
    length N created by ``_init_arrays``), optionally ``scalar_state = ("attr", ...)``,
    and implement ``select`` and ``observe``.
    """

    name: ClassVar[str] = "base"
    per_source: ClassVar[dict[str, Any]] = {}
    scalar_state: ClassVar[tuple[str, ...]] = ()
    needs_parameters: ClassVar[bool] = False

    def __init__(self, problem: Problem, rng: np.random.Generator | int | None = None) -> None:
        if self.needs_parameters and not problem.knows_parameters:
            raise ValueError(f"policy {self.name!r} needs the sources' parameters "
                             "(alpha, u); use a learning policy when they are unknown")
        self.problem = problem
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self._init_arrays(problem.n)

    def _init_arrays(self, n: int) -> None:
        for attr, fill in self.per_source.items():
            dtype = np.asarray(fill).dtype
            setattr(self, attr, np.full(n, fill, dtype=dtype))

    @property
    def n(self) -> int:
        return self.problem.n

    # -- growth -------------------------------------------------------------------------
    def grow(self, n_new: int, cost: np.ndarray | float = 1.0, alpha=None, u=None) -> None:
        """Add ``n_new`` sources at the end (ids n .. n + n_new - 1)."""
        if n_new <= 0:
            return
        p = self.problem
        cost = np.broadcast_to(np.asarray(cost, dtype=np.float64), (n_new,))

        def cat(old, new, fill):
            if old is None:
                return None
            new = np.full(n_new, fill) if new is None else np.broadcast_to(new, (n_new,))
            return np.concatenate([old, new])

        groups = None
        if p.groups is not None:
            start = int(p.groups.max()) + 1 if p.n else 0
            groups = np.concatenate([p.groups, np.arange(start, start + n_new)])
        self.problem = Problem(
            n=p.n + n_new, cost=np.concatenate([p.cost, cost]), period=p.period,
            alpha=cat(p.alpha, alpha, 0.0), u=cat(p.u, u, 0.0), groups=groups,
            initial_state=cat(p.initial_state, None, 0.0))
        for attr, fill in self.per_source.items():
            old = getattr(self, attr)
            setattr(self, attr, np.concatenate([old, np.full(n_new, fill, dtype=old.dtype)]))

    def set_cost(self, ids, cost) -> None:
        """Change the crawl cost C_i of sources ``ids`` (e.g. a robots.txt Crawl-delay just
        learned); subclasses caching anything derived from costs refresh it in
        ``_costs_changed``."""
        new = self.problem.cost.copy()
        new[np.asarray(ids, dtype=np.int64)] = cost
        self.problem = replace(self.problem, cost=new)
        self._costs_changed()

    def _costs_changed(self) -> None:
        pass

    # -- persistence --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        p = self.problem
        state: dict[str, Any] = {"policy": self.name, "n": self.n,
                                 "rng": self.rng.bit_generator.state,
                                 "cost": p.cost.copy(),
                                 "alpha": None if p.alpha is None else p.alpha.copy(),
                                 "u": None if p.u is None else p.u.copy()}
        for attr in self.per_source:
            state[attr] = getattr(self, attr).copy()
        for attr in self.scalar_state:
            state[attr] = getattr(self, attr)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("policy") != self.name:
            raise ValueError(f"state of policy {state.get('policy')!r} cannot be loaded "
                             f"into policy {self.name!r}")
        n = int(state["n"])
        if n > self.n:                      # sources added during the saved crawl
            n0 = self.n

            def tail(key):
                saved = state.get(key)
                return None if saved is None else np.asarray(saved)[n0:n]

            cost = tail("cost")
            extra = {} if self.problem.alpha is None else {"alpha": tail("alpha"),
                                                           "u": tail("u")}
            self.grow(n - n0, 1.0 if cost is None else cost, **extra)
        for attr in self.per_source:
            saved = np.asarray(state[attr])
            getattr(self, attr)[: saved.shape[0]] = saved
        for attr in self.scalar_state:
            setattr(self, attr, state[attr])
        self.rng.bit_generator.state = state["rng"]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n})"
