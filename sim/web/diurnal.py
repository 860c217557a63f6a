"""News feeds with daily rhythms: the ephemeral-content model with periodic arrivals.

Source i publishes as a Poisson process of intensity Lambda_i p_i(t), p_i a periodic
multiplier of mean 1 (``sim.web.profiles.DiurnalProfile``: an hour-of-day shape, a time zone,
a day/night ratio, optionally a weekend factor); everything else is the model of
Avrachenkov & Borkar, *Whittle Index Policy for Crawling Ephemeral Content* (IEEE TCNS 2018)
as simulated by ``sim.web.ephemeral.EphemeralWeb``: base utilities Exponential(mean xi_i), value
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

Start: "empty" or "warm" as in ``sim.web.ephemeral`` (module docstring there): a warm source never
crawled holds the stationary value of the periodic recursion at the current phase (mean
dynamics), or, at its first crawl, the arrivals of its stock depth in operational time
(``sim.web.ephemeral.stock_depth``); ``info["missed_items"]`` and ``outstanding()`` as there.

``diurnal_trace`` draws a trace of the same model for ``sim.web.trace.TraceReplay``;
``python -m sim.web.make_trace`` writes one of the ``news-diurnal`` sources.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.dynamics import geometric_sum
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.periodic import PeriodicArrivals
from scrapy_whittle.core.problem import Problem, SourceParams
from scrapy_whittle.report.trace import Trace
from sim.web.ephemeral import (
    SourcesEnv,
    aux_generator,
    check_action,
    check_start,
    check_warm,
    lost_since_start,
    newest_ages,
    stock_depth,
)
from sim.web.profiles import DiurnalProfile


def periodic_arrivals(params: SourceParams, profile: DiurnalProfile) -> PeriodicArrivals:
    """alpha_i and u_i(tau) of every phase of the rhythm's period (epochs of params.period)."""
    u = profile.epoch_table(params.rate, params.mean_utility, params.decay, params.period)
    return PeriodicArrivals(params.alpha, u)


#: the most phases a day (or week) for which ``_expected`` runs the periodic recursion phase
#: by phase (a week of hourly epochs); longer tables (epochs of minutes) sum it at once
LOOPED_PHASES = 168


def summed_accumulated(periodic: PeriodicArrivals, ids: np.ndarray, phase: np.ndarray,
                       k: np.ndarray) -> np.ndarray:
    """``periodic.accumulated`` as weighted sums over the K phases, one row per source asked:
    F(phase, k) = F(phase, r) + alpha^r D(phase) G_m (r = k mod K, m = k div K), with
    F(phase, r) = sum_{j<r} alpha^(r-1-j) u(phase + j) and D the same over a whole period.
    The recursion's K numpy steps per call cost more than the simulation itself at 1,440
    epochs a day; the sums are the same figures up to rounding."""
    big_k = periodic.k
    ids = np.asarray(ids, dtype=np.int64)
    j = np.arange(big_k)
    rows = periodic.u[ids[:, None], (phase[:, None] + j) % big_k]      # u(phase + j)
    a = periodic.alpha[ids][:, None]
    r, m = k % big_k, k // big_k
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        head = np.sum(np.where(j < r[:, None], rows * a ** np.maximum(r[:, None] - 1 - j, 0),
                               0.0), axis=1)
        full = np.sum(rows * a ** (big_k - 1 - j), axis=1)
        log_a = np.log(a[:, 0])
    return head + a[:, 0] ** r * full * geometric_sum(m, big_k * log_a)


class DiurnalWeb(SourcesEnv):
    """N news sources with daily rhythms under a crawl budget, Gymnasium-style.

    params: Lambda (mean rate), xi, mu, T; profile: the sources' rhythms (same N).
    budget, cost, stochastic, window, start: as in ``sim.web.ephemeral.EphemeralWeb``.
    """

    #: periods of the rhythm behind a warm source's virtual last crawl: far enough that the
    #: recursion's remembered value (alpha^(K * this)) is below a double's precision
    WARM_PERIODS = 2**40

    def __init__(self, params: SourceParams, profile: DiurnalProfile, budget: float,
                 cost=None, stochastic: bool = False, window: int | None = None,
                 start: str = "empty") -> None:
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
        self.start = check_start(start)
        if start == "warm":
            check_warm(params, self.window, None)
        self._depth = stock_depth(params, self.window, None) if start == "warm" else None
        self._warm: np.ndarray | None = None
        self._aux: np.random.Generator | None = None
        self._last = np.zeros(0, dtype=np.int64)
        self._rng: np.random.Generator | None = None
        self.epoch = 0

    @property
    def n(self) -> int:
        return self.params.n

    def reset(self, *, seed: int | None = None) -> tuple[Observation, dict[str, Any]]:
        self._rng = np.random.default_rng(seed)
        self._last = np.zeros(self.n, dtype=np.int64)
        self._warm = np.ones(self.n, dtype=bool) if self.start == "warm" else None
        self._aux = aux_generator(seed)
        self.epoch = 0
        return Observation.empty(0), {}

    def expected_state(self) -> np.ndarray:
        """X(t) of the mean dynamics at the start of the current epoch, for every source."""
        return self._expected(np.arange(self.n), self.epoch)

    def _virtual_last(self, ids: np.ndarray) -> np.ndarray:
        """The epoch of each source's last crawl; for a warm source never crawled, one so far
        back (and of phase 0's phase) that the recursion is at its stationary cycle."""
        last = self._last[ids]
        if self._warm is not None:
            last = np.where(self._warm[ids], -self.periodic.k * self.WARM_PERIODS, last)
        return last

    def _expected(self, ids: np.ndarray, t: int) -> np.ndarray:
        last = self._virtual_last(ids)
        if self.periodic.k > LOOPED_PHASES:
            return summed_accumulated(self.periodic, ids, self.periodic.phase(last), t - last)
        return self.periodic.accumulated(ids, self.periodic.phase(last), t - last)

    def outstanding(self) -> dict[str, int]:
        """As ``sim.web.ephemeral.EphemeralWeb.outstanding`` (no lifetime here)."""
        if not self.stochastic:
            raise ValueError("outstanding() needs stochastic=True: the mean dynamics have no "
                             "items")
        period = self.params.period
        since = self._last * period
        if self._warm is not None:
            since = np.where(self._warm, 0.0, since)
        mass = self.profile.cumulative(np.full(self.n, self.epoch * period)) \
            - self.profile.cumulative(since)
        alive = self._aux.poisson(self.params.rate * mass)
        lost = 0 if self.window is None else int(np.maximum(alive - self.window, 0).sum())
        return {"published": int(alive.sum()), "missed": lost}

    def step(self, action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._rng is None:
            raise RuntimeError("call reset(seed=...) before step()")
        ids = check_action(action, self.n, self.cost, self.budget)
        t = self.epoch
        expected = self._expected(ids, t)
        period = self.params.period
        info = {"expected_reward": float(expected.sum())}
        if self.stochastic:
            obs, info["missed_items"] = self._sample(ids, t)
        else:
            mass = (self.profile.cumulative(t * period, ids)
                    - self.profile.cumulative(self._last[ids] * period, ids))
            if self._warm is not None:
                mass = np.where(self._warm[ids], mass + self._depth[ids], mass)
            obs = Observation(epoch=t, sources=ids, time=t * period,
                              new_items=np.rint(self.params.rate[ids] * mass),
                              reward=expected)
        self._last[ids] = t
        if self._warm is not None:
            self._warm[ids] = False
        self.epoch = t + 1
        return obs, obs.total_reward, False, False, info

    def _sample(self, ids: np.ndarray, t: int) -> tuple[Observation, int]:
        p, rng = self.params, self._rng
        now = t * p.period
        prev = self._last[ids] * p.period
        top = self.profile.cumulative(np.full(ids.shape[0], now), ids)
        span = top - self.profile.cumulative(prev, ids)            # operational time
        warm = None
        if self._warm is not None:
            warm = self._warm[ids]
            span = np.where(warm, span + self._depth[ids], span)   # P(0) = 0: top + depth
        n_arr = rng.poisson(p.rate[ids] * span)
        if self.window is None:
            keep, full = n_arr, np.zeros(ids.shape[0], dtype=bool)
        else:
            keep, full = np.minimum(n_arr, self.window), n_arr >= self.window
        frac, grp = newest_ages(n_arr, keep, rng)
        lost = n_arr - keep
        if warm is not None and (warm & (lost > 0)).any():       # only what came since 0
            j = np.flatnonzero(warm & (lost > 0))
            oldest = frac[np.cumsum(keep)[j] - 1] * span[j]
            lost = lost.copy()
            lost[j] = lost_since_start(lost[j], oldest, top[j], span[j], self._aux)
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
                           item_value=xi), int(lost.sum())

    def __repr__(self) -> str:
        mode = "stochastic" if self.stochastic else "deterministic"
        return (f"DiurnalWeb(n={self.n}, budget={self.budget:g}, {mode}, window={self.window}, "
                f"start={self.start})")


def diurnal_trace(params: SourceParams, profile: DiurnalProfile, duration: float,
                  seed: int = 0, names: list[str] | None = None) -> Trace:
    """A trace of publications over [0, duration) (time units of ``params``) drawn from the
    periodic model, for ``sim.web.trace.TraceReplay``: item counts Poisson(Lambda_i P_i(duration)),
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
