"""Ephemeral content sources: the model of *Whittle Index Policy for Crawling Ephemeral Content*
(Avrachenkov & Borkar, IEEE TCNS 2018), deterministic (eqs. (2)-(3)) or stochastic (eq. (17);
Inria RR 8702, Section 7).

Timing. Epoch t starts at time t T. X_i(t) is the value waiting at source i at the start of
epoch t, X(0) = ``initial_state`` (default 0). Crawling i at epoch t earns X_i(t) and empties
it; then X_i(t + 1) = alpha_i X_i(t) + u_i if i was not crawled, u_i if it was.

Deterministic mode: the reward of a crawl is X_i(t) of the mean dynamics exactly;
``obs.new_items`` is the expected number of items published since the previous crawl, rounded;
no per-item arrays.

Stochastic mode: items arrive at source i as a Poisson process of rate Lambda_i in continuous
time; an item's base utility xi is Exponential with mean xi_i (the papers only need the mean;
the exponential is our choice: non-negative, one parameter, heavy enough that a single item can
dominate a crawl); an item published at tau is worth xi exp(-mu_i (t_crawl - tau)) when captured.
A crawl at time t T captures every item published in [previous crawl, t T). Items are sampled
lazily, only for crawled sources, at the crawl: their number ~ Poisson(Lambda_i * elapsed) and,
given the number, their times are uniform order statistics (drawn newest first, so that a feed
window needs only the newest ``window`` of them). A non-zero ``initial_state`` x_0 is one item
of base utility x_0 published at time 0 (its value at a crawl at t is x_0 alpha^t, as in the
mean dynamics).

Options (stochastic mode only for ``window``):

* ``window``: the feed shows only its newest ``window`` entries; new items beyond them are lost
  (not visible, not rewarded). ``obs.window_full`` is set when every visible entry is new, i.e.
  at least ``window`` new items existed: that is what a crawler can see (it cannot tell "exactly
  ``window``" from "more").
* ``lifetime``: an item older than ``lifetime`` (time units) has left the feed, as in the content
  lifetime of *A learning algorithm for the Whittle index policy for scheduling web crawlers*
  (Allerton 2019). In deterministic mode the reward becomes the expected value of the items
  younger than the lifetime, Lambda xi (1 - exp(-mu min(k T, L))) / mu.

Cost: a step costs O(number of crawled sources + items drawn); nothing is done per source that
is not crawled (the state is kept as the epoch of each source's last crawl).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.dynamics import decayed_integral, geometric_sum
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.problem import Problem, SourceParams


def check_action(action, n: int, cost: np.ndarray, budget: float) -> np.ndarray:
    """The crawled ids as int64, or ValueError for out-of-range or duplicate ids, or a total
    cost above the budget."""
    ids = np.asarray(action)
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"action must be a 1-D array of source ids, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        if not np.issubdtype(ids.dtype, np.floating) or not np.all(ids == np.floor(ids)):
            raise ValueError(f"action must hold integer source ids, got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        raise ValueError(f"source id {bad} out of range [0, {n})")
    if np.unique(ids).shape[0] != ids.shape[0]:
        uniq, counts = np.unique(ids, return_counts=True)
        raise ValueError(f"duplicate source ids in action: {uniq[counts > 1][:10].tolist()}")
    total = float(cost[ids].sum())
    if total > budget + 1e-9:
        raise ValueError(f"total crawl cost {total:g} exceeds the budget {budget:g}")
    return ids


def newest_ages(n: np.ndarray, keep: np.ndarray, rng: np.random.Generator):
    """Ages, as fractions of the interval, of the ``keep[j]`` newest of ``n[j]`` points placed
    uniformly at random in an interval, for every j; newest (smallest age) first, concatenated;
    with the group index j of each point.

    With U_(1) <= ... <= U_(n) the order statistics of n uniforms, U_(n) = V_1^(1/n) and
    U_(n-i) = U_(n-i+1) V_(i+1)^(1/(n-i)), so -log U_(n-i) is a cumulative sum of E / (n - r),
    E standard exponential, r = 0..i: drawing the newest few of a large n costs only what is
    kept. The age fraction is 1 - U = -expm1(log U).
    """
    total = int(keep.sum())
    group = np.repeat(np.arange(keep.shape[0]), keep)
    if total == 0:
        return np.zeros(0), group
    starts = np.cumsum(keep) - keep
    div = (n + starts).astype(np.float64)[group]             # gathers beat np.repeat
    div -= np.arange(total)                                  # n - rank within the crawl
    s = rng.standard_exponential(total)
    s /= div
    np.cumsum(s, out=s)
    prev = np.zeros(keep.shape[0])
    later = (keep > 0) & (starts > 0)
    prev[later] = s[starts[later] - 1]                       # sum over earlier crawls
    s -= prev[group]
    np.negative(s, out=s)
    np.expm1(s, out=s)
    np.negative(s, out=s)
    return s, group


class SourcesEnv:
    """What every simulator of ``sim`` exposes beside ``reset`` and ``step``: the problem a
    policy is built for (the sources' true alpha, u when known, and the crawl costs)."""

    _problem: Problem

    @property
    def problem(self) -> Problem:
        return self._problem

    @property
    def cost(self) -> np.ndarray:
        return self._problem.cost


class EphemeralWeb(SourcesEnv):
    """N sources of ephemeral content under a crawl budget, Gymnasium-style.

    params: the sources' true parameters (Lambda, xi, mu, T).
    budget: cost units that may be spent per epoch.
    cost: C_i, cost of one crawl of each source (default 1).
    stochastic: sample item arrivals (eq. (17)) instead of the mean dynamics.
    window: number of newest entries a feed shows (None: unlimited); stochastic mode only.
    lifetime: items older than this (time units) are gone (None: never).
    initial_state: X(0) per source (default 0: empty sources).
    """

    def __init__(self, params: SourceParams, budget: float, cost=None, stochastic: bool = False,
                 window: int | None = None, lifetime: float | None = None,
                 initial_state=None) -> None:
        if not (np.isfinite(budget) and budget > 0):
            raise ValueError(f"budget ({budget!r}) must be > 0")
        if window is not None and (int(window) != window or window < 1):
            raise ValueError(f"window ({window!r}) must be a positive integer or None")
        if window is not None and not stochastic:
            raise ValueError("window needs stochastic=True: the deterministic model has no "
                             "individual items")
        if lifetime is not None and not (lifetime > 0):
            raise ValueError(f"lifetime ({lifetime!r}) must be > 0 or None")
        self.params = params
        self.budget = float(budget)
        self.stochastic = bool(stochastic)
        self.window = None if window is None else int(window)
        self.lifetime = None if lifetime is None else float(lifetime)
        self._problem = Problem.from_params(params, cost=cost, initial_state=initial_state)
        self.initial_state = self._problem.initial_state
        self._log_alpha = -params.decay * params.period
        self._base: np.ndarray | None = None
        self._last = np.zeros(0, dtype=np.int64)
        self._rng: np.random.Generator | None = None
        self.epoch = 0

    @property
    def n(self) -> int:
        return self.params.n

    def reset(self, *, seed: int | None = None) -> tuple[Observation, dict[str, Any]]:
        """Back to epoch 0 with X = initial_state; ``seed`` seeds the one generator."""
        self._rng = np.random.default_rng(seed)
        self._last = np.zeros(self.n, dtype=np.int64)
        init = self.initial_state
        self._base = None if init is None or not np.any(init) else init.copy()
        self.epoch = 0
        return Observation.empty(0), {}

    # -- the state, for tests and diagnostics (O(N)) -------------------------------------
    def expected_state(self) -> np.ndarray:
        """X(t) of the mean dynamics at the start of the current epoch, for every source."""
        return self._expected(np.arange(self.n), self.epoch - self._last)

    def _expected(self, ids: np.ndarray, k: np.ndarray) -> np.ndarray:
        p = self.params
        la = self._log_alpha[ids]
        if self.lifetime is None:
            value = self._problem.u[ids] * geometric_sum(k, la)
            alive = True
        else:
            s = np.minimum(k * p.period, self.lifetime)
            value = p.rate[ids] * p.mean_utility[ids] * decayed_integral(s, p.decay[ids])
            alive = k * p.period < self.lifetime
        if self._base is not None:
            value = value + np.where(alive, self._base[ids] * np.exp(k * la), 0.0)
        return value

    # -- one epoch ------------------------------------------------------------------------
    def step(self, action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Crawl the sources ``action`` (int ids) at the current epoch, then advance."""
        if self._rng is None:
            raise RuntimeError("call reset(seed=...) before step()")
        ids = check_action(action, self.n, self.cost, self.budget)
        t = self.epoch
        k = t - self._last[ids]
        expected = self._expected(ids, k)
        if self.stochastic:
            obs = self._sample(ids, k, t)
        else:
            span = k * self.params.period
            if self.lifetime is not None:
                span = np.minimum(span, self.lifetime)
            obs = Observation(epoch=t, sources=ids, time=t * self.params.period,
                              new_items=np.rint(self.params.rate[ids] * span),
                              reward=expected)
        self._last[ids] = t
        if self._base is not None:
            self._base[ids] = 0.0
        self.epoch = t + 1
        info = {"expected_reward": float(expected.sum())}
        return obs, obs.total_reward, False, False, info

    def _sample(self, ids: np.ndarray, k: np.ndarray, t: int) -> Observation:
        p = self.params
        rng = self._rng
        now = t * p.period
        span = k * p.period
        if self.lifetime is not None:
            span = np.minimum(span, self.lifetime)
        n_arr = rng.poisson(p.rate[ids] * span)
        has_base = np.zeros(ids.shape[0], dtype=bool)
        if self._base is not None:
            has_base = (self._base[ids] > 0) & (self.lifetime is None or now < self.lifetime)
        n_new = n_arr + has_base
        if self.window is None:
            keep_arr, keep_base, full = n_arr, has_base, np.zeros(ids.shape[0], dtype=bool)
        else:
            keep_arr = np.minimum(n_arr, self.window)
            keep_base = has_base & (n_arr < self.window)
            full = n_new >= self.window
        frac, grp = newest_ages(n_arr, keep_arr, rng)
        age = frac * span[grp]
        xi = rng.standard_exponential(frac.shape[0])
        xi *= p.mean_utility[ids][grp]
        value = p.decay[ids][grp]
        value *= age
        np.negative(value, out=value)
        np.exp(value, out=value)
        value *= xi
        counts = keep_arr + keep_base
        off = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        if not keep_base.any():                  # items already in place, crawl by crawl
            published = np.subtract(now, age, out=age)
            reward = np.bincount(grp, weights=value, minlength=ids.shape[0])
            return Observation(epoch=t, sources=ids, time=now, new_items=counts, reward=reward,
                               window_full=full, item_offsets=off, item_published=published,
                               item_value=xi)
        total = int(off[-1])
        published = np.empty(total)
        base_value = np.empty(total)
        captured = np.empty(total)
        pos = np.arange(frac.shape[0]) + np.repeat(off[:-1] - (np.cumsum(keep_arr) - keep_arr),
                                                   keep_arr)
        published[pos] = now - age
        base_value[pos] = xi
        captured[pos] = value
        j = np.flatnonzero(keep_base)
        bpos = off[j] + keep_arr[j]
        b = self._base[ids[j]]
        published[bpos] = 0.0
        base_value[bpos] = b
        captured[bpos] = b * np.exp(self._log_alpha[ids[j]] * k[j])
        owner = np.repeat(np.arange(ids.shape[0]), counts)
        reward = np.bincount(owner, weights=captured, minlength=ids.shape[0])
        return Observation(epoch=t, sources=ids, time=now, new_items=counts, reward=reward,
                           window_full=full, item_offsets=off, item_published=published,
                           item_value=base_value)

    def __repr__(self) -> str:
        mode = "stochastic" if self.stochastic else "deterministic"
        return (f"EphemeralWeb(n={self.n}, budget={self.budget:g}, {mode}, "
                f"window={self.window}, lifetime={self.lifetime})")
