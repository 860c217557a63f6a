"""The one contract every crawl policy implements, and the plumbing they share.

A policy is told the :class:`~scrapy_whittle.core.problem.Problem` when it is built, then, epoch
after epoch:

1. ``select(epoch, budget, eligible)`` returns the ids of the sources to crawl now: at most
   ``budget`` in total cost (``problem.cost``), and only sources that ``eligible`` (a bool
   mask, None = all) allows; the re-crawl service masks sources that are in flight, backing
   off, crawled less than their minimum interval ago, or on a saturated host;
2. ``observe(obs)`` receives what crawls showed (a batch, possibly of several epochs' crawls,
   never the hidden parameters).

Everything else the re-crawl service calls is named here too, with a default where a policy
may have nothing to say: ``priority`` (the ranking of a ranking policy, None otherwise),
``observe_push`` (a hub's deliveries, for the policies that learn from pushes),
``grow`` (sources added while a crawl runs), ``set_cost`` (a crawl cost changed, e.g. by a
robots.txt Crawl-delay), ``report_value`` (feedback on what an entry was worth),
``rate_estimator`` (the publishing-rate estimates, if the policy keeps them, so the service
does not estimate them a second time), ``summary`` (learned estimates per source, for the
state store and the report), ``repair`` (check the learned state and reset sources whose
state went bad to their prior), and persistence.

Health. The re-crawl service calls ``repair(ids)`` before each selection for the sources the
policy learned of since the previous one (per-source state changes only there, see below),
``repair(None)`` after a restore, and once more when a selection raises on the policy's own
state (then tries the selection again): one source fed nonsense, or a damaged store, never
stops the crawl. The values a policy learns from are already kept within plausible ranges
(:mod:`scrapy_whittle.core.sanitize`); ``repair`` is what remains when they are not enough.

Persistence has two layers. The per-source state lives in arrays declared in ``per_source``
(and in the estimators named by ``_row_children``): the state store writes them row by row,
only for the sources that changed (:mod:`scrapy_whittle.core.columns`). So a policy changes a
source's persisted row only in ``observe``, ``observe_push``, ``grow``, ``set_cost``,
``report_value`` and ``set_prior_half_life`` for the sources they name, and in ``select``
only for sources added since its previous selection; state that moves for every source every
epoch is either derived (not persisted, rebuilt in ``_after_import``) or global. Everything
else (the random generator, scalars in ``scalar_state``, a network's weights) is the policy's
*global* state (``global_state`` / ``load_global_state``). ``state_dict`` /
``load_state_dict`` bundle both, for an in-memory copy. The problem's costs and (oracle)
parameters are not learned state: whoever restores a policy builds it with the current ones.

Time is counted in epochs of length ``problem.period``; the re-crawl service maps real time
onto epochs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from scrapy_whittle.core.columns import PerSourceArrays
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.core.selection import PrunedTop, select_top

if TYPE_CHECKING:
    from scrapy_whittle.core.estimators import RateEstimator


class Policy(PerSourceArrays, ABC):
    """Base class of every policy (see the module docstring).

    Subclasses set ``name``, declare ``per_source = {"attr": fill_value, ...}`` (arrays of
    length N), optionally ``scalar_state = ("attr", ...)``, and implement ``select`` (or
    ``priority``, which the default ``select`` ranks by) and ``observe``.
    """

    name: ClassVar[str] = "base"
    scalar_state: ClassVar[tuple[str, ...]] = ()
    needs_parameters: ClassVar[bool] = False
    #: the policy also needs each source's daily rhythm (``periodic=``, built by the re-crawl
    #: service from the ``profile`` entries of ``WHITTLE_ORACLE_PARAMS``)
    needs_rhythms: ClassVar[bool] = False
    #: the policy takes ``max_interval=`` (the longest a source waits between two crawls;
    #: the rules keep their own)
    takes_max_interval: ClassVar[bool] = False
    #: the policy takes ``resolution=`` (deciding several times an epoch, at fractional
    #: epochs, by the index of the shorter epoch)
    takes_resolution: ClassVar[bool] = False

    def __init__(self, problem: Problem, rng: np.random.Generator | int | None = None) -> None:
        if self.needs_parameters and not problem.knows_parameters:
            raise ValueError(f"policy {self.name!r} needs the sources' parameters "
                             "(alpha, u); use a learning policy when they are unknown")
        self.problem = problem
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self._init_arrays(problem.n)

    @property
    def n(self) -> int:
        return self.problem.n

    #: a policy that ranks only the sources able to reach the top keeps its ``PrunedTop``
    _pruning: PrunedTop | None = None

    @property
    def pruned_decisions(self) -> int:
        """Selections decided on a pruned path (``PrunedTop``; diagnostics)."""
        return 0 if self._pruning is None else self._pruning.decisions

    # -- acting and learning --------------------------------------------------------------
    def priority(self, epoch: int) -> np.ndarray | None:
        """Ranking of the sources at ``epoch`` (higher first, per unit of cost), or None for
        a policy that does not rank (it then implements ``select`` itself)."""
        return None

    def select(self, epoch: int, budget: float, eligible: np.ndarray | None = None
               ) -> np.ndarray:
        """Sources to crawl at ``epoch``: the top of ``priority`` within ``budget``."""
        prio = self.priority(epoch)
        if prio is None:
            raise NotImplementedError(f"policy {self.name!r} must implement select or priority")
        return select_top(prio, self.problem.cost, budget, eligible)

    @abstractmethod
    def observe(self, obs: Observation) -> None:
        """Learn from what crawls showed."""

    def observe_push(self, obs: Observation) -> bool:
        """Learn from a hub's deliveries (WebSub; rows of ``obs`` are pushes, see
        ``AdaptiveWhittlePolicy.observe_push``). Returns whether the policy used them (by
        default it does not: it polls as if nothing were pushed)."""
        return False

    def report_value(self, source: int, value_at_capture: float, age: float,
                     base_value: float | None = None) -> bool:
        """Feedback: an entry of ``source`` was worth ``value_at_capture`` at ``age`` (time
        since publication). Returns whether the policy used it (by default it does not)."""
        return False

    def repair(self, ids=None) -> np.ndarray:
        """Check the learned state of sources ``ids`` (None: every source, and the parameters
        derived from it) and reset each source whose state is unusable (a number that is not
        finite, an estimate out of its range) to its prior. Returns the ids reset. A policy
        whose state cannot go bad (it learns nothing per source, or only counts) keeps this
        default: nothing to reset."""
        return np.zeros(0, dtype=np.int64)

    def set_prior_half_life(self, ids, half_life) -> None:
        """Prior half-life of readers' interest for sources ``ids`` (``WHITTLE_HALF_LIFE``,
        in the problem's unit of time); policies that learn no decay ignore it."""

    def set_prior_rate(self, ids, rate) -> np.ndarray:
        """Prior publishing rate (entries per unit of time) of sources ``ids``, as their feeds
        declare it (``sy:updateFrequency``): it replaces the prior of those the policy has
        learned nothing of. Returns the ids changed (none for a policy without a rate
        estimator)."""
        rates = self.rate_estimator()
        if rates is None:
            return np.zeros(0, dtype=np.int64)
        return rates.set_prior(ids, rate)

    def rate_estimator(self) -> RateEstimator | None:
        """The policy's publishing-rate estimator, if it keeps one (fed by ``observe``)."""
        return None

    def summary(self, ids) -> dict[str, np.ndarray]:
        """Learned estimates of sources ``ids`` in the problem's unit of time, for people:
        any of ``rate`` (entries per unit of time), ``half_life`` (of readers' interest),
        ``value`` (mean value of an entry). Policies that learn none return {}."""
        return {}

    # -- the problem changes ----------------------------------------------------------------
    def grow(self, n_new: int, cost: np.ndarray | float = 1.0, alpha=None, u=None) -> None:
        """Add ``n_new`` sources at the end (ids n .. n + n_new - 1); ``alpha``, ``u``: their
        parameters, for policies that know them."""
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
        self.grow_arrays(n_new)

    def set_cost(self, ids, cost) -> None:
        """Change the crawl cost C_i of sources ``ids``."""
        new = self.problem.cost.copy()
        new[np.asarray(ids, dtype=np.int64)] = cost
        self.problem = replace(self.problem, cost=new)
        self._costs_changed()

    def _costs_changed(self) -> None:
        """Hook: refresh anything derived from the costs."""

    # -- persistence ------------------------------------------------------------------------
    def global_state(self) -> dict[str, Any]:
        """Everything learned that is not a per-source row (see the module docstring)."""
        state: dict[str, Any] = {"policy": self.name, "n": self.n,
                                 "rng": self.rng.bit_generator.state}
        for attr in self.scalar_state:
            state[attr] = getattr(self, attr)
        return state

    def load_global_state(self, state: dict[str, Any]) -> None:
        if state.get("policy") != self.name:
            raise ValueError(f"state of policy {state.get('policy')!r} cannot be loaded "
                             f"into policy {self.name!r}")
        for attr in self.scalar_state:
            if attr in state:
                setattr(self, attr, state[attr])
        self.rng.bit_generator.state = state["rng"]
        self._after_import()

    def state_dict(self) -> dict[str, Any]:
        """The whole state (global, every source's rows, and the problem's costs and
        parameters), for an in-memory copy."""
        ids = np.arange(self.n)
        p = self.problem
        return {"global": self.global_state(), "rows": self.export_rows(ids),
                "blocks": self.export_blocks(ids),
                "problem": {"cost": p.cost.copy(),
                            "alpha": None if p.alpha is None else p.alpha.copy(),
                            "u": None if p.u is None else p.u.copy()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict``; sources it has beyond this policy's are added with the
        costs (and parameters) they had."""
        rows = state["rows"]
        n0, n = self.n, rows.shape[0]
        if n > n0:
            saved = state.get("problem", {})

            def tail(key, default):
                value = saved.get(key)
                return default if value is None else np.asarray(value)[n0:n]

            params = ({} if self.problem.alpha is None
                      else {"alpha": tail("alpha", 0.0), "u": tail("u", 0.0)})
            self.grow(n - n0, tail("cost", 1.0), **params)
        self.import_rows(np.arange(n), rows)
        self.import_blocks(state.get("blocks", {}))
        self.load_global_state(state["global"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n})"
