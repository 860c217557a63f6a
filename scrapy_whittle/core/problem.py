"""What a crawler knows about its sources: the model parameters and the problem it solves.

Two models share one parameterisation, the pair (alpha_i, u_i) of the ephemeral-content
recursion x' = alpha x + u (Avrachenkov & Borkar, *Whittle Index Policy for Crawling
Ephemeral Content*, IEEE TCNS 2018, eq. (1)-(3)):

* ephemeral content: content arrives at rate Lambda_i with mean base utility xi_i and
  loses interest at rate mu_i; with crawl epochs of length T,
  alpha_i = exp(-mu_i T) and u_i = Lambda_i xi_i (1 - exp(-mu_i T)) / mu_i;
* changing pages (Avrachenkov, Borkar & Patil, *Deep Reinforcement Learning for Web
  Crawling*, ICC 2021): a page of importance m_k changes in a slot with probability
  Delta_k = 1 - exp(-lambda_k); left alone for n slots its expected reward is
  m_k (1 - (1 - Delta_k)^n), which is the same recursion with alpha = 1 - Delta_k and
  u = m_k Delta_k (the bridge in the papers' README).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from scrapy_whittle.core.dynamics import alpha_u, pages_alpha_u


def _as_float_array(name: str, value, n: int | None = None) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0 and n is not None:
        arr = np.full(n, float(arr))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr!r}")
    return arr


@dataclass(frozen=True)
class SourceParams:
    """True (or estimated) parameters of N sources of ephemeral content.

    rate: Lambda_i, items published per unit of time.
    mean_utility: xi_i, mean base utility of an item at publication.
    decay: mu_i, rate at which interest in an item decays (per unit of time); 0 allowed.
    period: T, the length of a crawl epoch in the same unit of time.
    """

    rate: np.ndarray
    mean_utility: np.ndarray
    decay: np.ndarray
    period: float = 1.0

    def __post_init__(self) -> None:
        rate = _as_float_array("rate", self.rate)
        n = rate.shape[0]
        object.__setattr__(self, "rate", rate)
        xi = _as_float_array("mean_utility", self.mean_utility, n)
        object.__setattr__(self, "mean_utility", xi)
        object.__setattr__(self, "decay", _as_float_array("decay", self.decay, n))
        if not (self.mean_utility.shape == self.decay.shape == (n,)):
            raise ValueError("rate, mean_utility and decay must have the same length")
        if np.any(rate < 0) or np.any(self.mean_utility < 0) or np.any(self.decay < 0):
            raise ValueError("rate, mean_utility and decay must be >= 0")
        if not (np.isfinite(self.period) and self.period > 0):
            raise ValueError(f"period ({self.period!r}) must be > 0")

    @property
    def n(self) -> int:
        return int(self.rate.shape[0])

    @property
    def alpha(self) -> np.ndarray:
        """alpha_i = exp(-mu_i T), the fraction of value left after one epoch."""
        return alpha_u(0.0, self.decay, self.period)[0]

    @property
    def u(self) -> np.ndarray:
        """u_i, the expected value that arrives during one epoch, valued at the epoch's end.

        Lambda xi (1 - e^{-mu T}) / mu, written as Lambda xi T * (-expm1(-mu T)) / (mu T)
        so that mu -> 0 gives the limit Lambda xi T without cancellation.
        """
        return alpha_u(self.rate * self.mean_utility, self.decay, self.period)[1]

    def subset(self, idx) -> SourceParams:
        return SourceParams(self.rate[idx], self.mean_utility[idx], self.decay[idx], self.period)


@dataclass(frozen=True)
class Problem:
    """What a policy is told when it is built.

    n: number of sources (arms).
    cost: C_i, budget units one crawl of source i uses (the papers' per-source cost).
    period: T, epoch length (seconds in Scrapy, 1 in the papers' examples).
    alpha, u: the true (alpha_i, u_i) of every source, for oracle policies only; None when
        the parameters are unknown and must be learned.
    groups: group (arm) id of each source for policies that act on groups of sources with
        round-robin inside a group (ICC 2021); None means every source is its own group.
    initial_state: x_i(0), the expected value waiting at each source at time 0 (0 = empty).
    """

    n: int
    cost: np.ndarray = field(default=None)  # type: ignore[assignment]
    period: float = 1.0
    alpha: np.ndarray | None = None
    u: np.ndarray | None = None
    groups: np.ndarray | None = None
    initial_state: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"n ({self.n!r}) must be >= 0")
        cost = np.ones(self.n) if self.cost is None else _as_float_array("cost", self.cost, self.n)
        if cost.shape != (self.n,) or np.any(cost <= 0):
            raise ValueError("cost must have one value > 0 per source")
        object.__setattr__(self, "cost", cost)
        for name in ("alpha", "u", "initial_state"):
            value = getattr(self, name)
            if value is not None:
                arr = _as_float_array(name, value, self.n)
                if arr.shape != (self.n,):
                    raise ValueError(f"{name} must have one value per source")
                object.__setattr__(self, name, arr)
        if self.alpha is not None and np.any((self.alpha < 0) | (self.alpha > 1)):
            raise ValueError("alpha must lie in [0, 1]")
        if self.u is not None and np.any(self.u < 0):
            raise ValueError("u must be >= 0")
        if self.groups is not None:
            groups = np.asarray(self.groups, dtype=np.int64)
            if groups.shape != (self.n,) or (self.n and groups.min() < 0):
                raise ValueError("groups must hold one non-negative group id per source")
            object.__setattr__(self, "groups", groups)

    @property
    def knows_parameters(self) -> bool:
        return self.alpha is not None and self.u is not None

    @classmethod
    def from_params(cls, params: SourceParams, cost=None, **kwargs) -> Problem:
        """An oracle problem for ephemeral-content sources with known parameters."""
        return cls(n=params.n, cost=cost, period=params.period, alpha=params.alpha, u=params.u,
                   **kwargs)

    @classmethod
    def from_pages(cls, change_rate, importance, cost=None, **kwargs) -> Problem:
        """An oracle problem for changing pages (ICC 2021), through the bridge
        alpha = exp(-lambda), u = m (1 - exp(-lambda))."""
        lam = _as_float_array("change_rate", change_rate)
        m = _as_float_array("importance", importance, lam.shape[0])
        alpha, u = pages_alpha_u(lam, m)
        return cls(n=lam.shape[0], cost=cost, alpha=alpha, u=u, **kwargs)

    def without_parameters(self) -> Problem:
        """The same problem as a learner sees it: the true parameters removed."""
        return Problem(n=self.n, cost=self.cost, period=self.period, groups=self.groups)
