"""News feeds with daily rhythms: the ephemeral-content model with periodic arrivals.

Source i publishes as a Poisson process of intensity Lambda_i p_i(t), p_i a periodic
multiplier of mean 1 (``sim.profiles.DiurnalProfile``: an hour-of-day shape, a time zone,
a day/night ratio, optionally a weekend factor); everything else is the model of
Avrachenkov & Borkar, *Whittle Index Policy for Crawling Ephemeral Content* (IEEE TCNS 2018)
as simulated by ``sim.ephemeral.EphemeralWeb``: base utilities Exponential(mean xi_i), value
xi exp(-mu_i age), epoch t starting at t T, a crawl at t T capturing what was published in
[previous crawl, t T). Time 0 is Monday 00:00 UTC.

Deterministic mode: the reward of a crawl is the expected value F(phase, k) of the periodic
recursion (``scrapy_whittle.core.periodic``), exactly; ``new_items`` the expected count, rounded.
Stochastic mode: at a crawl, the number of arrivals since the previous crawl is drawn
~ Poisson(Lambda_i (P_i(now) - P_i(prev))), P_i the cumulative multiplier, and their times as
uniform order statistics in that operational time mapped back through P_i^{-1} (exact for the
piecewise-constant profile), newest first so that a ``window`` draws only what a feed shows.

``env.problem`` is the rhythm-blind oracle problem (alpha_i and the time-average of
u_i(tau)); ``env.periodic`` holds u_i(tau) for every phase, what ``diurnal-oracle`` and the
periodic upper bound need.

``diurnal_trace`` draws a trace of the same model for ``sim.trace.TraceReplay``;
``python -m sim.make_trace`` writes one of the ``news-diurnal`` sources.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.periodic import PeriodicArrivals
from scrapy_whittle.core.problem import Problem, SourceParams
from sim.ephemeral import SourcesEnv, check_action, newest_ages
from sim.profiles import DiurnalProfile
from sim.trace import Trace


def periodic_arrivals(params: SourceParams, profile: DiurnalProfile) -> PeriodicArrivals:
    """alpha_i and u_i(tau) of every phase of the rhythm's period (epochs of params.period)."""
    u = profile.epoch_table(params.rate, params.mean_utility, params.decay, params.period)
    return PeriodicArrivals(params.alpha, u)


class DiurnalWeb(SourcesEnv):
    """N news sources with daily rhythms under a crawl budget, Gymnasium-style.

    params: Lambda (mean rate), xi, mu, T; profile: the sources' rhythms (same N).
    budget, cost, stochastic, window: as in ``sim.ephemeral.EphemeralWeb``.
    """

    def __init__(self, params: SourceParams, profile: DiurnalProfile, budget: float,
                 cost=None, stochastic: bool = False, window: int | None = None) -> None:
        if not (np.isfinite(budget) and budget > 0):
            raise ValueError(f"budget ({budget!r}) must be > 0")
        if profile.n != params.n:
            raise ValueError(f"profile describes {profile.n} sources, params {params.n}")
        if window is not None and (int(window) != window or window < 1):
            raise ValueError(f"window ({window!r}) must be a positive integer or None")
        if window is not None and not stochastic:
            raise ValueError("window needs stochastic=True: the deterministic model has no "
                             "individual items")
        self.params, self.profile = params, profile
        self.budget = float(budget)
        self.stochastic = bool(stochastic)
        self.window = None if window is None else int(window)
        self.periodic = periodic_arrivals(params, profile)
        self._problem = Problem(n=params.n, cost=cost, period=params.period,
                                alpha=self.periodic.alpha, u=self.periodic.mean_u)
        self._last = np.zeros(0, dtype=np.int64)
        self._rng: np.random.Generator | None = None
        self.epoch = 0

    @property
    def n(self) -> int:
        return self.params.n

    def reset(self, *, seed: int | None = None) -> tuple[Observation, dict[str, Any]]:
        self._rng = np.random.default_rng(seed)
        self._last = np.zeros(self.n, dtype=np.int64)
        self.epoch = 0
        return Observation.empty(0), {}

    def expected_state(self) -> np.ndarray:
        """X(t) of the mean dynamics at the start of the current epoch, for every source."""
        ids = np.arange(self.n)
        return self.periodic.accumulated(ids, self.periodic.phase(self._last),
                                         self.epoch - self._last)

    def step(self, action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._rng is None:
            raise RuntimeError("call reset(seed=...) before step()")
        ids = check_action(action, self.n, self.cost, self.budget)
        t = self.epoch
        k = t - self._last[ids]
        expected = self.periodic.accumulated(ids, self.periodic.phase(self._last[ids]), k)
        period = self.params.period
        if self.stochastic:
            obs = self._sample(ids, t)
        else:
            mass = (self.profile.cumulative(t * period, ids)
                    - self.profile.cumulative(self._last[ids] * period, ids))
            obs = Observation(epoch=t, sources=ids, time=t * period,
                              new_items=np.rint(self.params.rate[ids] * mass),
                              reward=expected)
        self._last[ids] = t
        self.epoch = t + 1
        return obs, obs.total_reward, False, False, {"expected_reward": float(expected.sum())}

    def _sample(self, ids: np.ndarray, t: int) -> Observation:
        p, rng = self.params, self._rng
        now = t * p.period
        prev = self._last[ids] * p.period
        top = self.profile.cumulative(np.full(ids.shape[0], now), ids)
        span = top - self.profile.cumulative(prev, ids)            # operational time
        n_arr = rng.poisson(p.rate[ids] * span)
        if self.window is None:
            keep, full = n_arr, np.zeros(ids.shape[0], dtype=bool)
        else:
            keep, full = np.minimum(n_arr, self.window), n_arr >= self.window
        frac, grp = newest_ages(n_arr, keep, rng)
        src = ids[grp]
        published = self.profile.inverse(top[grp] - frac * span[grp], src)
        published = np.minimum(published, now)
        xi = rng.standard_exponential(frac.shape[0])
        xi *= p.mean_utility[src]
        value = xi * np.exp(-p.decay[src] * (now - published))
        off = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(keep, out=off[1:])
        reward = np.bincount(grp, weights=value, minlength=ids.shape[0])
        return Observation(epoch=t, sources=ids, time=now, new_items=keep, reward=reward,
                           window_full=full, item_offsets=off, item_published=published,
                           item_value=xi)

    def __repr__(self) -> str:
        mode = "stochastic" if self.stochastic else "deterministic"
        return f"DiurnalWeb(n={self.n}, budget={self.budget:g}, {mode}, window={self.window})"


def diurnal_trace(params: SourceParams, profile: DiurnalProfile, duration: float,
                  seed: int = 0, names: list[str] | None = None) -> Trace:
    """A trace of publications over [0, duration) (time units of ``params``) drawn from the
    periodic model, for ``sim.trace.TraceReplay``: item counts Poisson(Lambda_i P_i(duration)),
    times through P_i^{-1}, utilities Exponential(xi_i). Source names default to
    ``feed-00000``... (sorted order = id order)."""
    if not (np.isfinite(duration) and duration > 0):
        raise ValueError(f"duration ({duration!r}) must be > 0")
    n = params.n
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2024, 7]))
    mass = profile.cumulative(np.full(n, float(duration)))
    counts = rng.poisson(params.rate * mass)
    src = np.repeat(np.arange(n), counts)
    y = rng.uniform(0.0, 1.0, src.shape[0]) * mass[src]
    times = np.minimum(profile.inverse(y, src), np.nextafter(duration, 0.0))
    utility = rng.standard_exponential(src.shape[0]) * params.mean_utility[src]
    order = np.lexsort((times, src))
    width = max(5, len(str(n - 1)))
    names = [f"feed-{i:0{width}d}" for i in range(n)] if names is None else list(names)
    if len(names) != n or sorted(names) != names:
        raise ValueError("names must be n names in sorted order (ids follow sorted names)")
    return Trace(names, src[order].astype(np.int64), times[order], utility[order])
