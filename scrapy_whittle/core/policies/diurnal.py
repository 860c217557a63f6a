"""Rhythm-aware Whittle index policies: crawl when it pays, given each feed's daily rhythm.

With a periodic publishing intensity Lambda_i p_i(t) (``scrapy_whittle.core.periodic``), two things
change for the index policy of Avrachenkov & Borkar, *Whittle Index Policy for Crawling
Ephemeral Content* (IEEE TCNS 2018):

* **the expected state** (exact): the value waiting at source i at time t, last crawled at
  t_i, is x_i(t) = Lambda_i xi_i int_{t_i}^t p_i(s) exp(-mu_i (t - s)) ds, a source in its
  night holds far less than Lambda_i xi_i (1 - alpha^k) / mu_i, one at its peak more;
* **the index** (a plug-in): Theorem 1 is the index of a source whose arrivals are the same
  every epoch. We evaluate it at the exact x_i(t) with u frozen at

      u_i = (1 - A_i) u_i(t) + A_i u_bar_i,     A_i = alpha_i^K (the value left after a day),

  u_i(t) = Lambda_i xi_i int_t^{t+T} p_i(s) exp(-mu_i (t + T - s)) ds the arrivals of the
  coming epoch and u_bar_i their daily mean: content that is stale by tomorrow is worth
  crawling for what arrives now, content that lasts for days for what arrives on average.
  It is exact when p_i is constant and is not the index of the periodic problem (which need
  not even be indexable); on ``news-diurnal`` it beats freezing u at the coming epoch's
  arrivals, at the daily mean, or at averages over the next hours (docs/diurnal.md).

``diurnal-oracle`` knows alpha_i and u_i(tau) for every phase tau of the period
(``PeriodicArrivals``) and tracks x exactly by the periodic recursion. ``diurnal-whittle``
learns: Lambda, xi, mu as ``whittle`` does (it is that policy, whose estimates it
reuses through ``parameters()``), and p_i with ``ProfileEstimator`` from the publication
times the feeds show; where a source has shown no dated item (pages, count-only sources) it
is ranked exactly as by ``whittle``.
"""

from __future__ import annotations

import math

import numpy as np

from scrapy_whittle.core.columns import Col
from scrapy_whittle.core.dynamics import decayed_integral
from scrapy_whittle.core.estimators._base import segment_rows
from scrapy_whittle.core.estimators.profile import ProfileEstimator
from scrapy_whittle.core.index import IndexTable
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.core.periodic import PeriodicArrivals, period_values
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.whittle import AdaptiveWhittlePolicy
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.core.selection import PrunedTop, select_top

ARRIVALS = ("blend", "now", "mean", "ahead:L")


def _parse_arrivals(arrivals: str) -> int:
    """Epochs averaged by an ``arrivals`` choice (1 for "now"; 0 for "blend" and "mean")."""
    if arrivals in ("blend", "mean"):
        return 0
    if arrivals == "now":
        return 1
    if isinstance(arrivals, str) and arrivals.startswith("ahead:"):
        try:
            ahead = int(arrivals[6:])
        except ValueError:
            ahead = 0
        if ahead >= 1:
            return ahead
    raise ValueError(f"arrivals ({arrivals!r}) must be one of {', '.join(ARRIVALS)} "
                     "(L an integer >= 1)")


class DiurnalOraclePolicy(Policy):
    """The rhythm-aware index with the true alpha_i and u_i(tau) (``"diurnal-oracle"``).

    periodic: ``PeriodicArrivals`` of the sources (alpha, u per phase, phase of epoch 0), for
        epochs of ``problem.period``; its alpha must be the problem's.
    arrivals: the u the index is evaluated at: ``"blend"`` (the default, see the module
        docstring), ``"now"`` (the coming epoch's), ``"mean"`` (the period's mean: the exact
        state with rhythm-blind arrivals) or ``"ahead:L"`` (the mean over the next L epochs).
        For comparisons (docs/diurnal.md).
    warm: the sources have been publishing for ever (a warm web, ``sim``'s ``start="warm"``):
        a source not crawled yet holds the stationary value of the periodic recursion at the
        current phase, not 0.
    """

    name = "diurnal-oracle"
    needs_parameters = True
    needs_rhythms = True
    # x is derived (it moves for every source every epoch): what persists is the epoch each
    # source was emptied, from which _after_import replays the periodic recursion
    per_source = {"x": Col(0.0, persist=False), "emptied": np.nan}
    scalar_state = ("_advanced_to", "_start")

    def __init__(self, problem: Problem, rng=None, *,
                 periodic: PeriodicArrivals | None = None, arrivals: str = "blend",
                 warm: bool = False) -> None:
        super().__init__(problem, rng)
        self.arrivals = arrivals
        self.warm = bool(warm)
        self._ahead = _parse_arrivals(arrivals)
        if periodic is None:
            raise ValueError("policy 'diurnal-oracle' needs periodic= (the sources' arrivals "
                             "per phase of the day, scrapy_whittle.core.periodic.PeriodicArrivals)")
        if periodic.n != problem.n:
            raise ValueError(f"periodic describes {periodic.n} sources, the problem "
                             f"{problem.n}")
        self.periodic = periodic
        self._advanced_to: int | None = None
        self._start: int | None = None
        self._tables: dict[int, IndexTable] = {}
        # (the table at the mean arrivals, the mean arrivals, alpha^K), for _table
        self._base: tuple[IndexTable, np.ndarray, np.ndarray] | None = None
        self._pruning = PrunedTop()

    def _after_import(self) -> None:
        """Replay x <- alpha x + u(phase) from each source's emptying (or the start) to now:
        O(epochs x sources), done once per restore."""
        if self._advanced_to is None:
            return
        p = self.periodic
        since = np.where(np.isnan(self.emptied), self._start, self.emptied)
        x = np.zeros(self.n)
        for t in range(int(np.min(since)) if since.size else 0, self._advanced_to):
            live = since <= t
            x = np.where(live, p.alpha * x + p.u[:, int(p.phase(t))], 0.0)
        if self.warm:
            never = np.isnan(self.emptied)
            x = np.where(never, self._stationary(self._advanced_to), x)
        self.x[...] = x

    def _stationary(self, epoch: int) -> np.ndarray:
        """x of a source never emptied at the start of ``epoch``, after the rhythm ran for
        ever: the period's arrivals ending at this phase, D(phase), over 1 - alpha^K."""
        p = self.periodic
        phase = int(p.phase(epoch))
        return period_values(p.alpha, p.u)[:, phase] / (1.0 - p.alpha ** p.k)

    def _advance(self, epoch: float) -> None:
        """Bring x to the start of ``epoch``: x <- alpha x + u(phase) once per epoch. A
        fractional epoch (a decision step, ``WHITTLE_STEP``) is its whole epoch's: the model
        is the paper's, in whole epochs, so a source crawled at a step is empty until the
        next epoch's arrivals."""
        epoch = math.floor(epoch)
        if self._advanced_to is None:
            self._advanced_to = self._start = epoch
            if self.warm:
                self.x[...] = self._stationary(epoch)
            return
        p = self.periodic
        for t in range(self._advanced_to, epoch):
            self.x *= p.alpha
            self.x += p.u[:, int(p.phase(t))]
        self._advanced_to = max(self._advanced_to, epoch)

    def _table(self, phase: int) -> IndexTable:
        """The index table of a phase: the arrivals of ``arrivals`` at that phase, with the
        alpha part shared by every phase's table (made once per phase)."""
        table = self._tables.get(phase)
        if table is None:
            p = self.periodic
            if self._base is None:
                mean_u = p.mean_u
                self._base = (IndexTable(p.alpha, mean_u, self.problem.cost), mean_u,
                              p.alpha ** p.k)
            base, mean_u, survive = self._base
            if self.arrivals == "mean":
                table = base
            elif self.arrivals == "blend":
                table = base.with_u((1.0 - survive) * p.u[:, phase] + survive * mean_u)
            else:
                table = base.with_u(p.u[:, (phase + np.arange(self._ahead)) % p.k].mean(axis=1))
            self._tables[phase] = table
        return table

    def priority(self, epoch: float) -> np.ndarray:
        self._advance(epoch)
        return self._table(int(self.periodic.phase(self._advanced_to))).index(self.x)

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The top of ``priority`` within ``budget``; with unit costs the index is computed
        only for the sources that can make the top (``PrunedTop``: the index never exceeds
        x / C), from the phase's table."""
        cost = self.problem.cost
        if not np.all(cost == 1.0):
            return select_top(self.priority(epoch), cost, budget, eligible)
        self._advance(epoch)
        table = self._table(int(self.periodic.phase(self._advanced_to)))
        chosen = self._pruning(self.x, lambda ids: table.index_at(ids, self.x[ids]), budget,
                               eligible)
        if chosen is not None:
            return chosen
        prio = table.index(self.x)
        chosen = select_top(prio, None, budget, eligible)
        self._pruning.settled(prio, chosen)
        return chosen

    def observe(self, obs: Observation) -> None:
        self._advance(obs.epoch)
        crawled = obs.sources[obs.ok]
        self.x[crawled] = 0.0
        self.emptied[crawled] = self._advanced_to

    def grow(self, n_new, cost=1.0, alpha=None, u=None, periodic_u=None) -> None:
        """Add sources; ``periodic_u`` (n_new, K) their arrivals per phase."""
        if n_new <= 0:
            return
        if periodic_u is None or alpha is None:
            raise ValueError("policy 'diurnal-oracle' needs alpha and periodic_u of new sources")
        pu = np.asarray(periodic_u, dtype=np.float64).reshape(n_new, self.periodic.k)
        super().grow(n_new, cost, alpha, pu.mean(axis=1) if u is None else u)
        if self._advanced_to is not None:        # new sources start empty, now
            self.emptied[-n_new:] = self._advanced_to
        p = self.periodic
        self.periodic = PeriodicArrivals(np.concatenate([p.alpha, np.broadcast_to(
            np.asarray(alpha, dtype=np.float64), (n_new,))]), np.concatenate([p.u, pu]),
            p.phase0)
        self._tables.clear()
        self._base = None

    def _costs_changed(self) -> None:
        self._tables.clear()
        self._base = None


class DiurnalWhittlePolicy(AdaptiveWhittlePolicy):
    """``whittle`` with learned daily rhythms (``"diurnal-whittle"``).

    day: length of a day in the problem's time unit: 86400 (seconds, Scrapy's unit; the
        default), 24 for ``sim`` scenarios in hours. Times are absolute (unix time in Scrapy,
        so a day starts at midnight UTC; the phase of each source is learned, time zones
        need not be known).
    harmonics: Fourier harmonics of each profile (``ProfileEstimator``).
    time_origin: time of the start of epoch 0; default: learned from the observations as the
        smallest crawl time minus epoch x period (0 in ``sim``, the crawl's start in Scrapy).
    groups: shrinkage group of each source (array, or callable(ids) -> ints, e.g. OPML
        categories); default one group. Sources added later than an array covers are in
        group 0.
    arrivals: ``"blend"`` (default), ``"now"`` or ``"mean"``, as for ``diurnal-oracle``.
    Other arguments: as ``AdaptiveWhittlePolicy``: ``max_interval`` and ``resolution`` (the
    index of the decision step) apply alike, and so does a feed's window: the index of a feed
    whose window can fill is the window's (``FeedWindows``) at the state x under the rhythm,
    with u frozen as above.
    """

    name = "diurnal-whittle"
    takes_max_interval = True
    takes_resolution = True
    per_source = {**AdaptiveWhittlePolicy.per_source, "crawl_time": np.nan}
    scalar_state = (*AdaptiveWhittlePolicy.scalar_state, "time_origin", "fixed_origin")

    def __init__(self, problem: Problem, rng=None, *, prior_rate=None, prior_half_life=None,
                 weights=None, prior_exposure: float | None = None, prior_weight: float = 1.0,
                 model: str = "auto", day: float = 86400.0, harmonics: int = 2,
                 time_origin: float | None = None, groups=None,
                 arrivals: str = "blend", max_interval: float | None = None,
                 resolution: float = 1.0) -> None:
        super().__init__(problem, rng, prior_rate=prior_rate, prior_half_life=prior_half_life,
                         weights=weights, prior_exposure=prior_exposure,
                         prior_weight=prior_weight, model=model, groups=groups,
                         max_interval=max_interval, resolution=resolution)
        if not (np.isfinite(day) and day > 0):
            raise ValueError(f"day ({day!r}) must be > 0")
        if time_origin is not None and not np.isfinite(time_origin):
            raise ValueError(f"time_origin ({time_origin!r}) must be finite")
        if arrivals not in ("blend", "now", "mean"):
            raise ValueError(f"arrivals ({arrivals!r}) must be one of blend, now, mean")
        self.arrivals = arrivals
        self.day = float(day)
        self.profile = ProfileEstimator(problem.n, day=self.day, harmonics=harmonics)
        self.fixed_origin = time_origin is not None
        self.time_origin = float(time_origin) if time_origin is not None else np.nan
        self._set_groups(np.arange(problem.n))
        # a source never crawled has its exact priority at no cost: no share limit; the bound
        # of a source crawled days ago is nearly its priority (tight)
        self._pruning = PrunedTop(max_share=1.0, tight=True)

    def _set_groups(self, ids: np.ndarray) -> None:
        """The shrinkage groups of sources ``ids``; a source added after the array given as
        ``groups`` (a crawl's list grew) is in group 0, the default."""
        if self.groups is None or ids.size == 0:
            return
        if callable(self.groups):
            g = self.groups(ids)
        else:
            given = np.asarray(self.groups)
            g = np.zeros(ids.shape[0], dtype=given.dtype)
            inside = ids < given.shape[0]
            g[inside] = given[ids[inside]]
        self.profile.set_groups(ids, g)

    # -- the index --------------------------------------------------------------------------
    def time_of(self, epoch: int) -> float:
        """Start of ``epoch`` in the problem's time unit."""
        origin = 0.0 if np.isnan(self.time_origin) else self.time_origin
        return origin + epoch * float(self.problem.period)

    def _rhythmic(self) -> np.ndarray:
        return self.explored() & (self.profile.items > 0) & np.isfinite(self.crawl_time)

    def _decay_scale(self, ids: np.ndarray, u0) -> tuple[np.ndarray, np.ndarray]:
        """(mu, Lambda xi) of sources ``ids`` with stationary arrivals ``u0``."""
        mu = self._decay_rates_at(ids)
        return mu, u0 / decayed_integral(float(self.problem.period), mu)   # value per time

    def _rhythm_at(self, epoch: int, ids: np.ndarray, u0: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(x, u) under the learned rhythm of the rhythmic sources ``ids`` (u0: their
        stationary arrivals); element by element, whichever sources are asked."""
        period = float(self.problem.period)
        mu, scale = self._decay_scale(ids, u0)
        now = self.time_of(epoch)
        last = np.minimum(self.crawl_time[ids], now)
        coef = self.profile.coefficients(ids)
        x = scale * self.profile.decayed_integral(last, now, mu, ids, coef)
        u = u0
        if self.arrivals != "mean":
            coming = scale * self.profile.decayed_integral(now, now + period, mu, ids, coef)
            survive = 0.0 if self.arrivals == "now" else np.exp(-mu * self.day)
            u = (1.0 - survive) * coming + survive * u0
        return x, u

    def priority(self, epoch: int) -> np.ndarray:
        stationary = self._expected(epoch)
        prio = stationary[0] / self.problem.cost        # never crawled: x / C, no index
        ids = np.flatnonzero(self.explored())
        prio[ids] = self._priority_at(epoch, ids, stationary)
        return prio

    def _priority_at(self, epoch: int, ids: np.ndarray, stationary, rhythmic=None
                     ) -> np.ndarray:
        """The index of the explored sources ``ids`` at their expected state under the
        learned rhythm (the stationary one where none was learned; ``rhythmic``: the
        ``_rhythmic()`` mask of every source, where the caller has it), of the decision step
        (``resolution``), and the window's where a feed's window can fill
        (``FeedWindows``: at the rhythm's x and u, as the paper's index is)."""
        x0, u0 = stationary
        x, u = x0[ids], u0[ids]
        rhythmic = (self._rhythmic() if rhythmic is None else rhythmic)[ids]
        if rhythmic.any():
            at = np.flatnonzero(rhythmic)
            x[at], u[at] = self._rhythm_at(epoch, ids[at], u0[ids[at]])
        x, u = np.maximum(x, 0.0), np.maximum(u, 0.0)
        index = self._table(ids, u, self.problem.cost[ids]).index_where_unsaturated(x)
        self.windows.index(epoch, ids, x, u, index, positions=True, by_state=rhythmic)
        return index

    def select_top(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The top of ``priority`` within ``budget`` (among ``eligible`` sources), after the
        sources that waited ``max_interval`` (``select``); with unit costs, computing the
        rhythm and the index only for the sources that can make the top (``PrunedTop``).

        The index never exceeds x / C, and ``_bound`` bounds x under the rhythm whatever its
        phase: that is the bound of an explored source; a source never crawled has its exact
        priority, x / C, at no cost. The choice is the same (tested)."""
        self.added_epoch[np.isnan(self.added_epoch)] = epoch
        cost = self.problem.cost
        if self._pruning.cut is not None and np.all(cost == 1.0):   # (the bound costs)
            explored = self.explored()
            rhythmic = self._rhythmic()
            # (the stationary x of a source with a rhythm is not needed: NaN)
            stationary = self._expected(epoch, skip=rhythmic)

            def priority_of(ids):
                prio = stationary[0][ids]
                at = np.flatnonzero(explored[ids])
                prio[at] = self._priority_at(epoch, ids[at], stationary, rhythmic)
                return prio

            chosen = self._pruning(self._bound(epoch, stationary, rhythmic), priority_of,
                                   budget, eligible)
            if chosen is not None:
                return chosen
        prio = self.priority(epoch)
        chosen = select_top(prio, cost, budget, eligible)
        self._pruning.settled(prio, chosen)
        return chosen

    def _bound(self, epoch: int, stationary, rhythmic: np.ndarray) -> np.ndarray:
        """Per source, a bound of its priority (unit costs): x / C where the stationary x is
        exact (never crawled, or no rhythm learned), else a bound of x under the rhythm
        (``ProfileEstimator.integral_bound``: exact in the part that depends on the current
        time of day, bounded in the part that depends on the time of the last crawl, which
        has faded away for a source crawled days ago; no profile of a million sources is
        computed whole for it)."""
        x0, u0 = stationary
        ids = np.flatnonzero(rhythmic)
        if not ids.size:
            return x0
        mu, scale = self._decay_scale(ids, u0[ids])
        now = self.time_of(epoch)
        flat = decayed_integral(np.maximum(now - self.crawl_time[ids], 0.0), mu)
        bound = x0.copy()
        # (with room for the rounding of the exact integral)
        bound[ids] = scale * self.profile.integral_bound(flat, ids, mu, now) * (1.0 + 1e-9)
        return bound

    # -- learning ---------------------------------------------------------------------------
    def observe(self, obs: Observation) -> None:
        super().observe(obs)
        keep = obs.ok & (obs.sources >= 0) & (obs.sources < self.n) & np.isfinite(obs.time)
        if not keep.any():
            return
        if not self.fixed_origin:
            start = float(np.min(obs.time[keep] - obs.epoch * float(self.problem.period)))
            self.time_origin = start if np.isnan(self.time_origin) else \
                min(self.time_origin, start)
        if obs.item_offsets is not None and self.model != "pages":
            self._observe_profile(obs, keep)
        src = obs.sources[keep]
        np.fmax.at(self.crawl_time, src, obs.time[keep])

    def _observe_profile(self, obs: Observation, keep: np.ndarray) -> None:
        """Feed the profile estimator, each source at most once per pass, in time order."""
        for batch in one_per_source(obs.sources, obs.time, keep):
            off, items = segment_rows(obs.item_offsets, batch)
            self.profile.observe_crawls(obs.sources[batch], obs.time[batch], off,
                                        obs.item_published[items], obs.window_full[batch])

    # -- outputs, growth and persistence ----------------------------------------------------
    def estimates(self) -> dict[str, np.ndarray]:
        out = super().estimates()
        out["profile"] = self.profile.coefficients().copy()
        out["profile_items"] = self.profile.items.copy()
        return out

    def grow(self, n_new: int, cost=1.0, alpha=None, u=None, weights=None) -> None:
        if n_new <= 0:
            return
        n0 = self.n
        super().grow(n_new, cost, alpha, u, weights)
        self.profile.grow(n_new)
        self._set_groups(np.arange(n0, n0 + n_new))

    def _row_children(self):
        return {**super()._row_children(), "profile": self.profile}
