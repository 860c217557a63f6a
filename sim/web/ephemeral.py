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

Start (``start``): "empty" (the default, the papers' setting: every source starts with
nothing waiting, X(0) = 0) or "warm": the web has been publishing since -infinity and nobody
crawled it, so each feed holds what the model's stationary law puts there. Deterministic: the
never-crawled value X_i(0) = u_i / (1 - alpha_i) = Lambda_i xi_i / mu_i, or Lambda_i xi_i
(1 - exp(-mu_i L)) / mu_i with a lifetime L, constant until the first crawl. Stochastic: the
first crawl of a source draws its arrivals over [now - depth_i, now) (``stock_depth``): the
newest ``window`` entries of a Poisson process since -infinity, or the items younger than the
lifetime, each with its publication time and base utility, rewarded at their decayed value.
With neither a window nor a lifetime the feed is unbounded and the stock is cut at
``STOCK_HALF_LIVES`` interest half-lives (the value left out is 2^-16 of the stationary
value). A warm start needs mu_i > 0 where nothing else bounds the stock.

Users' measures (stochastic mode). ``info["missed_items"]`` counts the items published since
the start (time 0) that the crawl found gone: pushed out of the window, or older than the
lifetime. ``outstanding()`` settles the sources at the end of a run: the items published since
the start and since each source's last crawl, and how many of them are already gone. Both draw
from a second generator seeded with the first's seed, so that the crawl's own draws (and hence
every reward) are the same whether or not anybody reads them.

Cost: a step costs O(number of crawled sources + items drawn); nothing is done per source that
is not crawled (the state is kept as the epoch of each source's last crawl).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.dynamics import decayed_integral, geometric_sum
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.problem import Problem, SourceParams

STARTS = ("empty", "warm")
#: depth of a warm stock without window or lifetime, in interest half-lives
STOCK_HALF_LIVES = 16
#: expected arrivals over a warm stock's depth when only a window bounds it: the window is full
#: with certainty, so the newest ``window`` entries follow the law of a process since -infinity
WINDOW_STOCK_ITEMS = 1e9


def check_start(start: str) -> str:
    if start not in STARTS:
        raise ValueError(f"start ({start!r}) must be one of {', '.join(STARTS)}")
    return start


def stationary_state(params: SourceParams, lifetime: float | None = None) -> np.ndarray:
    """X_i of a source never crawled since -infinity: Lambda xi int_0^L exp(-mu a) da
    (L = infinity without a lifetime: u / (1 - alpha))."""
    span = np.inf if lifetime is None else float(lifetime)
    with np.errstate(invalid="ignore"):
        return params.rate * params.mean_utility * decayed_integral(span, params.decay)


def stock_depth(params: SourceParams, window: int | None, lifetime: float | None,
                rate=None) -> np.ndarray:
    """How far back (time units; operational time with a rhythm) a warm source's first crawl
    draws arrivals: the lifetime; else, with a window, deep enough that the window is surely
    full; else ``STOCK_HALF_LIVES`` half-lives of interest. ``rate``: the arrival rate per
    unit of that time (default Lambda)."""
    rate = params.rate if rate is None else rate
    active = rate > 0                       # a silent source has no stock (and no 0 * inf)
    if lifetime is not None:
        return np.where(active, float(lifetime), 0.0)
    if window is not None:
        return np.where(active, WINDOW_STOCK_ITEMS / np.where(active, rate, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        return np.where(active, STOCK_HALF_LIVES * np.log(2.0) / params.decay, 0.0)


def check_warm(params: SourceParams, window: int | None, lifetime: float | None) -> None:
    if lifetime is None and window is None and np.any((params.decay <= 0) & (params.rate > 0)):
        raise ValueError("a warm start needs decay > 0 (or a window or lifetime): a source "
                         "whose items never lose interest has no stationary value")


def aux_generator(seed) -> np.random.Generator:
    """The measures' own generator, a child of ``seed``'s SeedSequence: drawing from it leaves
    the simulator's stream untouched."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])


def lost_since_start(lost: np.ndarray, oldest_kept: np.ndarray, since_start: np.ndarray,
                     span: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Of ``lost`` arrivals pushed out of a window, those published since the start: given the
    kept ones, the lost are uniform over the span older than the oldest kept (age
    ``oldest_kept``), of which ``since_start - oldest_kept`` lies after the start."""
    room = span - oldest_kept
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(room > 0, (since_start - oldest_kept) / room, 0.0)
    return rng.binomial(lost, np.clip(share, 0.0, 1.0))


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
    def time_origin(self) -> float:
        """The time the run starts at (epoch 0), in the simulator's unit: the users' measures
        (``sim.bench.measures``) count the items published since then."""
        return 0.0

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
    start: "empty" or "warm" (see the module docstring); warm excludes ``initial_state``.
    """

    def __init__(self, params: SourceParams, budget: float, cost=None, stochastic: bool = False,
                 window: int | None = None, lifetime: float | None = None,
                 initial_state=None, start: str = "empty") -> None:
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
        self.start = check_start(start)
        if start == "warm":
            if self.initial_state is not None and np.any(self.initial_state):
                raise ValueError("a warm start replaces initial_state; give one or the other")
            check_warm(params, self.window, self.lifetime)
        self._depth = stock_depth(params, self.window, self.lifetime) if start == "warm" \
            else None
        self._warm: np.ndarray | None = None      # never crawled since a warm start
        self._aux: np.random.Generator | None = None
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
        self._warm = np.ones(self.n, dtype=bool) if self.start == "warm" else None
        self._aux = aux_generator(seed)
        self.epoch = 0
        return Observation.empty(0), {}

    # -- the state, for tests and diagnostics (O(N)) -------------------------------------
    def expected_state(self) -> np.ndarray:
        """X(t) of the mean dynamics at the start of the current epoch, for every source."""
        return self._expected(np.arange(self.n), self.epoch - self._last)

    def _expected(self, ids: np.ndarray, k: np.ndarray) -> np.ndarray:
        if self._warm is not None:               # never crawled: the stationary value
            k = np.where(self._warm[ids], np.inf, k)
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
        info = {"expected_reward": float(expected.sum())}
        if self.stochastic:
            obs, info["missed_items"] = self._sample(ids, k, t)
        else:
            span = self._span(ids, k)
            if self.lifetime is not None:
                span = np.minimum(span, self.lifetime)
            obs = Observation(epoch=t, sources=ids, time=t * self.params.period,
                              new_items=np.rint(self.params.rate[ids] * span),
                              reward=expected)
        self._last[ids] = t
        if self._base is not None:
            self._base[ids] = 0.0
        if self._warm is not None:
            self._warm[ids] = False
        self.epoch = t + 1
        return obs, obs.total_reward, False, False, info

    def _span(self, ids: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Time since each crawled source's previous crawl; for a warm source never crawled,
        since the start of its stock."""
        span = k * self.params.period
        if self._warm is not None:
            warm = self._warm[ids]
            if warm.any():
                span = np.where(warm, span + self._depth[ids], span)
        return span

    def _missed(self, ids, k, t, n_lost, age, keep, span) -> int:
        """Items published since the start that a crawl found gone (``n_lost`` pushed out of
        the window, plus those past the lifetime)."""
        missed = n_lost
        warm = None if self._warm is None else self._warm[ids]
        if warm is not None and warm.any() and n_lost.any():
            j = np.flatnonzero(warm & (n_lost > 0))
            ends = np.cumsum(keep)
            oldest = age[ends[j] - 1]            # newest first: a crawl's last item is oldest
            missed = missed.copy()
            missed[j] = lost_since_start(n_lost[j], oldest, t * self.params.period, span[j],
                                         self._aux)
        total = int(missed.sum())
        if self.lifetime is not None:
            since = k * self.params.period
            if warm is not None:
                since = np.where(warm, t * self.params.period, since)
            gone = np.maximum(since - self.lifetime, 0.0) * self.params.rate[ids]
            if gone.any():
                total += int(self._aux.poisson(gone).sum())
        return total

    def outstanding(self) -> dict[str, int]:
        """Settle every source at the current time: the items published since the start and
        since its last crawl (``published``), and how many of them are gone (``missed``)."""
        if not self.stochastic:
            raise ValueError("outstanding() needs stochastic=True: the mean dynamics have no "
                             "items")
        p = self.params
        since = (self.epoch - self._last) * p.period
        if self._warm is not None:
            since = np.where(self._warm, self.epoch * p.period, since)
        alive_span = since if self.lifetime is None else np.minimum(since, self.lifetime)
        alive = self._aux.poisson(p.rate * alive_span)
        expired = self._aux.poisson(p.rate * (since - alive_span))
        lost = expired if self.window is None else expired + np.maximum(alive - self.window, 0)
        return {"published": int(alive.sum() + expired.sum()), "missed": int(lost.sum())}

    def _sample(self, ids: np.ndarray, k: np.ndarray, t: int) -> tuple[Observation, int]:
        p = self.params
        rng = self._rng
        now = t * p.period
        span = self._span(ids, k)
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
        missed = self._missed(ids, k, t, n_new - counts, age, keep_arr, span)
        off = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        if not keep_base.any():                  # items already in place, crawl by crawl
            published = np.subtract(now, age, out=age)
            reward = np.bincount(grp, weights=value, minlength=ids.shape[0])
            return Observation(epoch=t, sources=ids, time=now, new_items=counts, reward=reward,
                               window_full=full, item_offsets=off, item_published=published,
                               item_value=xi), missed
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
                           item_value=base_value), missed

    def __repr__(self) -> str:
        mode = "stochastic" if self.stochastic else "deterministic"
        return (f"EphemeralWeb(n={self.n}, budget={self.budget:g}, {mode}, "
                f"window={self.window}, lifetime={self.lifetime}, start={self.start})")
