"""Thompson sampling: the 2021 paper's Beta-Bernoulli baseline, and a Whittle variant.

``thompson`` (:class:`ThompsonPolicy`), as in *Deep Reinforcement Learning for Web Crawling*
(Avrachenkov, Borkar & Patil, ICC 2021), Section IV-A: every arm (group of pages, crawled
round-robin inside the group) has a Beta(alpha_k, beta_k) prior starting at Beta(1, 1); a
crawl that finds the page changed is a success (alpha_k += 1), otherwise a failure
(beta_k += 1); only the selected arm is updated; each slot one sample per arm is drawn and
"the arm corresponding to the maximum value of this sample is selected". The paper's reward is
the arm's importance when the page changed, but its selection rule uses the sample alone, so
by default the sample is NOT weighted by importance (``weight="none"``, faithful).
``weight="reward"`` multiplies each sample by the mean reward per observed change of the arm
(its importance, learned from the rewards; 1 before any change is seen), an option the paper
does not use. With a budget of M > 1 the M arms of largest sample are crawled.

``thompson-whittle`` (:class:`ThompsonWhittlePolicy`), for ephemeral content (IEEE TCNS 2018
model): each epoch it draws every source's parameters from a posterior
(:class:`EphemeralEstimator`: Gamma-Poisson for the arrival rate Lambda from item counts and
exposure, a pseudo-count mean for the base value xi from item values, a log-normal around the
fitted decay rate mu), turns them into (alpha, u), tracks the expected state
x = u (1 - alpha^k) / (1 - alpha) with k the epochs since the last crawl, and crawls the sources
of largest Whittle index (``scrapy_whittle.core.index.IndexTable``) of the sample.

A source not learned yet (no crawl taught its rate anything) is priced as the learned Whittle
policy prices it (``scrapy_whittle.core.population``): the population's expected index of a
never-crawled source of its pooling group (``groups``), averaged over the learned sources' own
parameters *of this epoch's draw*. Not the index of one learned source drawn at random, the
prior predictive draw a textbook Thompson sampler would make: that draw says nothing about
which unknown source is which, so it cannot pick better unknown sources, only more of them;
and with many unknown sources the best of their draws is a high quantile of the population,
not its mean, so the unknown sources would crowd out the known ones in proportion to how many
there are (a sweep first, the valuable feeds already found left waiting) and fall behind them
once few remain. The average is what a crawl of an unknown source earns in expectation,
whatever their number; the randomness of Thompson sampling stays where it informs, on the
learned sources' parameters (and through them on the average). Its floor, so that every
source is crawled some day: the population's mean arrivals u per epoch, undecayed, over the
epochs since the source joined. Before anything is learned the unknown sources keep the draws
of the estimator's own (optimistic) prior.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.columns import Col, PerSourceArrays, refill_rows, unusable_rows
from scrapy_whittle.core.distinct import distinct
from scrapy_whittle.core.dynamics import alpha_u, geometric_sum, u_logs
from scrapy_whittle.core.estimators._base import segment_rows, segment_sum
from scrapy_whittle.core.estimators.decay import DecayEstimator
from scrapy_whittle.core.estimators.rate import RateEstimator
from scrapy_whittle.core.index import IndexTable
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.groups import RoundRobinArms, arm_of_sources
from scrapy_whittle.core.population import (
    check_groups,
    expected_index,
    group_ids,
    history_start,
    oldest_listed,
    sample_of,
)
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.core.selection import PrunedTop, select_top


class ThompsonPolicy(Policy):
    """Beta-Bernoulli Thompson sampling over arms (ICC 2021 baseline)."""

    name = "thompson"

    def __init__(self, problem: Problem, rng=None, weight: str = "none",
                 prior: tuple[float, float] = (1.0, 1.0)) -> None:
        super().__init__(problem, rng)
        if weight not in ("none", "reward"):
            raise ValueError(f"weight ({weight!r}) must be 'none' or 'reward'")
        self.weight = weight
        self.prior = (float(prior[0]), float(prior[1]))
        self.arms = RoundRobinArms(arm_of_sources(problem))
        k = self.arms.k
        self.a = np.full(k, self.prior[0])          # alpha_k: 1 + successes
        self.b = np.full(k, self.prior[1])          # beta_k: 1 + failures
        self.reward_sum = np.zeros(k)               # rewards of successes (importance)

    def sample(self) -> np.ndarray:
        """One Beta(alpha_k, beta_k) draw per arm. With both parameters >= 1 (the default
        prior, and every count added to it) as X / (X + Y), X ~ Gamma(alpha_k) and
        Y ~ Gamma(beta_k), the definition of the Beta law: numpy's ``beta`` draws the
        Beta(1, 1) of every arm not yet crawled by Johnk's rejection method, 5 times
        slower, and that is most arms of a large crawl for a long while."""
        if self.prior[0] >= 1.0 and self.prior[1] >= 1.0:
            x = self.rng.standard_gamma(self.a)
            theta = x / (x + self.rng.standard_gamma(self.b))
        else:
            theta = self.rng.beta(self.a, self.b)
        if self.weight == "reward":
            changes = self.a - self.prior[0]
            theta = theta * np.where(changes > 0, self.reward_sum / np.maximum(changes, 1), 1.0)
        return theta

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        return self.arms.select(self.sample(), self.problem.cost, budget, eligible)

    def observe(self, obs: Observation) -> None:
        ok = obs.ok
        arms = self.arms.arm[obs.sources[ok]]
        changed = obs.changed[ok]
        np.add.at(self.a, arms, changed.astype(np.float64))
        np.add.at(self.b, arms, (~changed).astype(np.float64))
        np.add.at(self.reward_sum, arms, np.where(changed, obs.reward[ok], 0.0))

    def grow(self, n_new: int, cost=1.0, alpha=None, u=None) -> None:
        if n_new <= 0:
            return
        k_old = self.arms.k
        super().grow(n_new, cost, alpha, u)
        self.arms.add_sources(np.arange(k_old, k_old + n_new))
        pad = n_new
        self.a = np.concatenate([self.a, np.full(pad, self.prior[0])])
        self.b = np.concatenate([self.b, np.full(pad, self.prior[1])])
        self.reward_sum = np.concatenate([self.reward_sum, np.zeros(pad)])

    def global_state(self) -> dict[str, Any]:
        state = super().global_state()
        state.update(a=self.a.copy(), b=self.b.copy(), reward_sum=self.reward_sum.copy(),
                     pointer=self.arms.pointer.copy(), arm=self.arms.arm.copy())
        return state

    def load_global_state(self, state: dict[str, Any]) -> None:
        super().load_global_state(state)
        self.arms = RoundRobinArms(np.asarray(state["arm"]))
        self.arms.pointer[:] = state["pointer"]
        self.a = np.array(state["a"], dtype=np.float64)
        self.b = np.array(state["b"], dtype=np.float64)
        self.reward_sum = np.array(state["reward_sum"], dtype=np.float64)


# -- ephemeral content ------------------------------------------------------------------------

MU_GRID = np.logspace(-3, 2, 26)   # candidate decay rates (per epoch) for the mu fit


class EphemeralEstimator(PerSourceArrays):
    """Per-source estimates of (Lambda, xi, mu) of the ephemeral-content model from crawls.

    * Lambda: Gamma(rate_shape + items, rate_exposure + exposure) posterior, kept by
      ``scrapy_whittle.core.estimators.RateEstimator`` (``observe_crawls``: the exposure of a crawl
      is the time since the previous crawl, censored correctly when the feed's window was
      full); crawls without publication times (changing pages) count their new entries over
      the time since the previous crawl.
    * xi: mean of the observed base values of items, with ``xi_weight`` pseudo-items of value
      ``xi_prior``; a crawl without per-item data (changing pages) counts its reward per new
      entry instead (the page's importance); a crawl whose items' base values are all unknown
      (a crawl's: a feed tells values at capture only) counts its captured total R at weight
      D = sum_j exp(-mu_hat a_j), its items' discount at the current decay estimate (the ratio
      estimator of ``AdaptiveWhittlePolicy``, docs/estimators.md).
    * mu: a crawl captures sum_j v_j exp(-mu a_j) for items of base value v_j and age a_j; with
      R the sum of captured rewards and S(mu) = sum_j v_j exp(-mu a_j) accumulated on the grid
      ``MU_GRID`` (per epoch; decreasing in mu), mu_hat solves S(mu) = R (log-linear
      interpolation, ends clamped to the grid). A source none of whose crawls told base
      values has its decay learnt from its captures at their ages instead
      (``DecayEstimator.update_captures``).
      Its "posterior" for sampling is log-normal around mu_hat with spread
      ``mu_spread / sqrt(1 + crawls used)``: a heuristic, not a conjugate posterior.

    Priors in units of the epoch (``period``), so that a crawl counting time in seconds has
    the priors of one counting it in epochs: the rate's, ``rate_shape`` entries over
    ``rate_exposure`` epochs; the decay's, ``mu_prior`` per epoch.
    """

    def __init__(self, n: int, period: float = 1.0, rate_shape: float = 1.0,
                 rate_exposure: float = 0.01, xi_prior: float = 1.0, xi_weight: float = 1.0,
                 mu_prior: float = 1.0, mu_spread: float = 1.0, start_time: float = 0.0) -> None:
        self.period = float(period)
        self.rate_shape, self.rate_exposure = float(rate_shape), float(rate_exposure)
        self.xi_prior, self.xi_weight = float(xi_prior), float(xi_weight)
        self.mu_prior, self.mu_spread = float(mu_prior), float(mu_spread)
        self.start_time = float(start_time)
        exposure = self.rate_exposure * self.period
        self.rates = RateEstimator(n, prior_rate=self.rate_shape / exposure,
                                   prior_exposure=exposure)
        # the decay of the sources whose crawls tell values at capture only
        self.blind = DecayEstimator(n, prior_half_life=np.log(2.0) / self._mu0,
                                    min_half_life=1e-3 * self.period,
                                    max_half_life=1e6 * self.period)
        self._grid = MU_GRID / self.period
        self._init_arrays(n)

    per_source = {"value_sum": 0.0, "value_n": 0.0, "reward_sum": 0.0, "fit_crawls": 0.0,
                  "blind_crawls": 0.0,
                  "s_grid": Col(0.0, width=MU_GRID.size), "last_time": np.nan}

    #: mean discount exp(-mu age) below which a crawl's items teach xi nothing
    MIN_DISCOUNT = 1e-6

    @property
    def _mu0(self) -> float:
        """The decay's prior, per unit of time."""
        return self.mu_prior / self.period

    @property
    def n(self) -> int:
        return self.n_rows

    def _row_children(self):
        return {"rates": self.rates, "blind": self.blind}

    def update(self, obs: Observation) -> None:
        # a source crawled twice in the batch: its crawls one pass each (the rate estimator
        # takes every source at most once per call)
        for batch in one_per_source(obs.sources, obs.time, obs.ok):
            self._update_pass(obs, batch)

    def _update_pass(self, obs: Observation, crawls: np.ndarray) -> None:
        """What the crawls ``crawls`` (bool mask, each of a different source) teach."""
        sel = np.flatnonzero(crawls)
        src = obs.sources[sel]
        k, t, reward = src.size, obs.time[sel], obs.reward[sel]
        if obs.item_offsets is not None:
            off, items = segment_rows(obs.item_offsets, crawls)
            pub, val = obs.item_published[items], obs.item_value[items]
            self.rates.observe_crawls(src, t, off, pub, obs.window_full[sel],
                                      start=self.start_time)
            lens = np.diff(off)
            known = np.isfinite(val)
            crawl = np.repeat(np.arange(k), lens)
            v_sum = np.bincount(crawl, weights=np.where(known, val, 0.0), minlength=k)
            v_n = np.bincount(crawl, weights=known, minlength=k)
        else:
            prev = np.where(np.isfinite(self.last_time[src]), self.last_time[src],
                            self.start_time)
            self.rates.update(src, obs.new_items[sel], t - prev)
            lens, v_sum, v_n = np.zeros(k, dtype=np.int64), np.zeros(k), np.zeros(k)
        new = obs.new_items[sel]
        page = (lens == 0) & (new > 0)   # no per-item data: the reward per new entry
        self.value_sum[src] += np.where(page, reward, 0.0) + v_sum
        self.value_n[src] += np.where(page, new, 0) + v_n
        fit = (lens > 0) & (v_n == lens)        # every item's value known: the mu fit
        if fit.any():
            f_off, f_idx = segment_rows(off, fit)
            age = np.maximum(np.repeat(t[fit], lens[fit]) - pub[f_idx], 0.0)
            terms = np.exp(-np.outer(age, self._grid)) * val[f_idx][:, None]
            fitted = src[fit]
            self.s_grid[fitted] += np.add.reduceat(terms, f_off[:-1], axis=0)
            self.reward_sum[fitted] += reward[fit]
            self.fit_crawls[fitted] += 1
        blind = (lens > 0) & (v_n == 0)         # values at capture only: a crawl's
        if blind.any():
            self._learn_captures(src[blind], t[blind], reward[blind], off, blind, pub)
        self.last_time[src] = t

    def _learn_captures(self, src, t, reward, off, blind, pub) -> None:
        """Crawls ``blind`` (a mask over the pass) of sources ``src`` told only their
        captured totals ``reward``: the decay from the captures at their ages, then xi as the
        ratio estimator (sum R over sum D, D the items' discount at the decay learnt)."""
        b_off, b_idx = segment_rows(off, blind)
        lens = np.diff(b_off)
        age = np.nan_to_num(np.maximum(np.repeat(t, lens) - pub[b_idx], 0.0))
        self.blind.update_captures(src, reward, b_off, age)
        self.blind_crawls[src] += 1
        mu = np.repeat(self.blind.mean_at(src), lens)
        disc = segment_sum(np.exp(-mu * age), b_off)
        # items whose value has all but vanished weigh next to nothing, and R / D could
        # overflow the sums: skipped
        clear = (disc >= lens * self.MIN_DISCOUNT) & np.isfinite(reward) & (reward >= 0)
        self.value_sum[src[clear]] += reward[clear]
        self.value_n[src[clear]] += disc[clear]

    def rate_posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """(shape, rate) of the Gamma posterior of Lambda."""
        return self.rates.shape.copy(), self.rates.rate.copy()

    def xi_mean(self) -> np.ndarray:
        xi = self.value_sum + self.xi_weight * self.xi_prior
        xi /= self.value_n + self.xi_weight
        return xi

    def mu_hat(self) -> np.ndarray:
        mu = np.full(self.n, self._mu0)
        blind = (self.blind_crawls > 0) & ~(self.fit_crawls > 0)
        if blind.any():
            ids = np.flatnonzero(blind)
            mu[ids] = self.blind.mean_at(ids)
        fit = self.fit_crawls > 0
        if not fit.any():
            return mu
        s = self.s_grid[fit]                           # decreasing along the grid
        r = self.reward_sum[fit][:, None]
        above = s >= r                                 # True up to the crossing
        k = above.sum(axis=1)                          # first grid index with s < r
        k0 = np.clip(k - 1, 0, MU_GRID.size - 1)
        k1 = np.clip(k, 0, MU_GRID.size - 1)
        rows = np.arange(s.shape[0])
        s0, s1 = s[rows, k0], s[rows, k1]
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(s0 > s1, (s0 - r[:, 0]) / (s0 - s1), 0.0)
        w = np.clip(w, 0.0, 1.0)
        grid = self._grid
        logmu = np.log(grid[k0]) + w * (np.log(grid[k1]) - np.log(grid[k0]))
        mu[fit] = np.exp(logmu)
        return mu

    def point(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Point estimates (Lambda, xi, mu): posterior means and the fitted decay."""
        shape, rate = self.rate_posterior()
        return shape / rate, self.xi_mean(), self.mu_hat()

    def sample(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One posterior draw of (Lambda, xi, mu) for every source."""
        lam = self.rates.sample(rng)
        sd = 1.0 + self.fit_crawls                  # (in place: a million sources' arrays)
        sd += self.blind_crawls
        np.sqrt(sd, out=sd)
        np.divide(self.mu_spread, sd, out=sd)
        mu = rng.standard_normal(self.n)
        mu *= sd
        np.exp(mu, out=mu)
        mu *= self.mu_hat()
        return lam, self.xi_mean(), mu

    def alpha_u(self, lam, xi, mu) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, u) of the 2018 paper for parameters (Lambda, xi, mu) and epoch length T."""
        return alpha_u(lam * xi, mu, self.period)

    def grow(self, n_new: int) -> None:
        self.rates.grow(n_new)
        self.blind.grow(n_new)
        self.grow_arrays(n_new)


class ThompsonWhittlePolicy(Policy):
    """Whittle index of a posterior sample of each source's parameters (ephemeral content).

    groups: pooling group of each source for the price of the sources not learned yet (array
        of non-negative ints, or callable(ids) -> ints), as ``whittle``'s; default one group.
    Other keywords go to :class:`EphemeralEstimator` (the priors).
    """

    name = "thompson-whittle"
    per_source = {"last_crawl": 0,
                  # where the source's history began, as its first look showed (population)
                  "history_epoch": np.nan,
                  "group": Col(0, np.int32, persist=False)}
    scalar_state = ("_epoch",)

    def __init__(self, problem: Problem, rng=None, *, groups=None,
                 **estimator_options: Any) -> None:
        super().__init__(problem, rng)
        self.estimator = EphemeralEstimator(problem.n, problem.period, **estimator_options)
        self._estimator_options = estimator_options
        self._epoch = 0
        self._pruning = PrunedTop()
        check_groups(groups, problem.n)
        self.groups = groups
        self.group[:] = group_ids(groups, np.arange(problem.n))

    def _row_children(self):
        return {"estimator": self.estimator}

    def _after_import(self) -> None:
        super()._after_import()
        self.group[:] = group_ids(self.groups, np.arange(self.n))

    def rate_estimator(self) -> RateEstimator:
        return self.estimator.rates

    def learned(self) -> np.ndarray:
        """bool[N]: some crawl of the source taught its arrival rate something."""
        return self.estimator.rates.updates > 0

    def summary(self, ids) -> dict[str, np.ndarray]:
        lam, xi, mu = self.estimator.point()
        ids = np.asarray(ids, dtype=np.int64)
        return {"rate": lam[ids], "half_life": np.log(2.0) / mu[ids], "value": xi[ids]}

    def _sampled(self, epoch: int) -> tuple[Any, ...]:
        """(x, u, log alpha, 1 - alpha, unknown) of one posterior draw of every source's
        parameters; x = u G_k, k epochs after the last crawl (x0 = 0 then:
        ``dynamics.expected_state`` without its alpha^k x0), except for the sources not
        learned yet (``unknown``, a bool mask; None: none priced so), whose x is their price
        times their cost (``_price_unknown``)."""
        lam, xi, mu = self.estimator.sample(self.rng)
        lam *= xi
        u, log_alpha, one_minus = u_logs(lam, mu, self.estimator.period)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = u * geometric_sum(epoch - self.last_crawl, log_alpha, one_minus)
        unknown = self._price_unknown(epoch, x, u, log_alpha, one_minus)
        return x, u, log_alpha, one_minus, unknown

    def _price_unknown(self, epoch: int, x, u, log_alpha, one_minus) -> np.ndarray | None:
        """Set x of the sources not learned yet to the population's expected index of their
        group (per unit of cost, times the cost) under this draw, at least the population's
        mean u over the epochs since they joined (the module docstring); their mask, None
        while nothing (or everything) is learned."""
        learned = self.learned()
        ids = sample_of(np.flatnonzero(learned & np.isfinite(self.history_epoch)))
        if ids.size == 0 or learned.all():
            return None
        pooled = expected_index(epoch, log_alpha[ids], one_minus[ids], u[ids],
                                self.history_epoch[ids], np.ones(ids.shape[0]),
                                self.group[ids], int(self.group.max()) + 1)
        unknown = ~learned
        mean_u = u[ids]
        mean_u = float(mean_u[np.isfinite(mean_u)].mean()) if np.isfinite(mean_u).any() \
            else 0.0
        cost = self.problem.cost[unknown]
        floor = mean_u * np.maximum(epoch - self.last_crawl[unknown], 0)
        x[unknown] = np.maximum(pooled[self.group[unknown]] * cost, floor)
        return unknown

    def priority(self, epoch: int) -> np.ndarray:
        x, u, log_alpha, one_minus, unknown = self._sampled(epoch)
        return self._priority_of(slice(None), x, u, log_alpha, one_minus, unknown)

    def _priority_of(self, ids, x, u, log_alpha, one_minus, unknown) -> np.ndarray:
        """The priorities of sources ``ids`` (an index array, or ``slice(None)``: all) for
        the draw (x, u, log alpha, 1 - alpha, unknown) of ``_sampled``: the index of the
        draw, or the price x / C of a source not learned yet (no index computed for it)."""
        cost = self.problem.cost[ids]
        if unknown is None:
            return IndexTable.from_logs(log_alpha[ids], u[ids], cost, one_minus[ids]) \
                .index_where_unsaturated(x[ids])
        prio = x[ids] / cost
        at = np.flatnonzero(~unknown[ids])
        src = at if isinstance(ids, slice) else ids[at]
        prio[at] = IndexTable.from_logs(log_alpha[src], u[src], cost[at], one_minus[src]) \
            .index_where_unsaturated(x[src])
        return prio

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The top of ``priority`` within ``budget``; with unit costs the index is computed
        only for the sources that can make the top (``PrunedTop``: the index never exceeds
        x / C, an unknown source's price is x / C). The same draws, the same choice either
        way (tested)."""
        self._epoch = epoch
        draw = self._sampled(epoch)
        cost = self.problem.cost
        unit = bool(np.all(cost == 1.0))
        if unit:
            chosen = self._pruning(draw[0], lambda ids: self._priority_of(ids, *draw), budget,
                                   eligible)
            if chosen is not None:
                return chosen
        prio = self._priority_of(slice(None), *draw)
        chosen = select_top(prio, cost, budget, eligible)
        if unit:
            self._pruning.settled(prio, chosen)
        return chosen

    def observe(self, obs: Observation) -> None:
        new = np.isnan(self.history_epoch[obs.sources[obs.ok]])
        self.estimator.update(obs)
        src = obs.sources[obs.ok]
        first = new & (self.estimator.rates.updates[src] > 0)
        if first.any():
            # the history a first useful look showed, from the epoch the source joined or
            # was last crawled (when earlier looks found nothing)
            start = history_start(obs.epoch, obs.time[obs.ok], float(self.problem.period),
                                  oldest_listed(obs, obs.ok), self.last_crawl[src])
            np.fmin.at(self.history_epoch, src[first], start[first])
        self.last_crawl[src] = obs.epoch

    def grow(self, n_new: int, cost=1.0, alpha=None, u=None) -> None:
        if n_new <= 0:
            return
        super().grow(n_new, cost, alpha, u)
        self.last_crawl[-n_new:] = self._epoch
        self.group[-n_new:] = group_ids(self.groups, np.arange(self.n - n_new, self.n))
        self.estimator.grow(n_new)

    def repair(self, ids=None) -> np.ndarray:
        """Sources whose estimates hold numbers that are not finite (or, when every source
        is checked, whose point estimates are not) go back to their priors."""
        full = ids is None
        ids = np.arange(self.n) if full else distinct(np.asarray(ids, dtype=np.int64))
        ids = ids[(ids >= 0) & (ids < self.n)]
        est = self.estimator
        bad = unusable_rows(est, ids) | est.rates.invalid(ids)
        if full and ids.size:
            with np.errstate(all="ignore"):
                alpha, u = est.alpha_u(*est.point())
            bad |= ~((alpha[ids] >= 0) & (alpha[ids] <= 1) & (u[ids] >= 0)
                     & np.isfinite(u[ids]))
        out = ids[bad]
        if out.size:
            refill_rows(est, out)
            est.rates.reset(out)
            self.history_epoch[out] = np.nan
        return out
