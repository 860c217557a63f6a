"""The Whittle index policy evaluated at online estimates of the sources' parameters.

Nothing about the sources is known in advance (``needs_parameters = False``). Every epoch the
policy turns its current estimates into the (alpha_i, u_i) of the index of Avrachenkov &
Borkar, *Whittle Index Policy for Crawling Ephemeral Content* (IEEE TCNS 2018, Theorem 1), and
crawls the sources of largest index gamma_i(x_i) within the budget:

* ephemeral content (observations with item arrays): Lambda_hat (``RateEstimator``, from entry
  counts and publication times, window overflow corrected), xi_hat (``ValueEstimator``, from
  observed base values; where a crawl tells only its captured total, that total over its
  items' discount at mu_hat, weighted by the discount), mu_hat (``DecayEstimator``, from the
  value captured against the items' ages, and their base values where known);
  alpha = exp(-mu_hat T), u = Lambda_hat xi_hat (1 - alpha) / mu_hat;
* ephemeral content seen only through counts and captured value (no item arrays, e.g. the
  deterministic simulator): Lambda_hat from ``new_items`` over the time since the previous
  crawl, and (mu_hat, A_hat = (Lambda xi)_hat) from the value captured over that span
  (``DecayEstimator.update_span``); u = A_hat (1 - alpha) / mu_hat;
* changing pages (observations without item arrays: ``new_items`` is the changed bit, the
  reward the importance captured; Avrachenkov, Borkar & Patil, *Deep Reinforcement Learning for
  Web Crawling*, ICC 2021): lambda_hat per epoch (``ChangeRateEstimator``, Cho & Garcia-Molina)
  and m_hat, the mean reward of a crawl that found a change, through the bridge
  alpha = exp(-lambda_hat), u = m_hat (1 - exp(-lambda_hat)).

The expected state is not accumulated: it is recomputed every epoch from the epoch of the last
crawl with the *current* estimates, x_i = u_i (1 - alpha_i^k) / (1 - alpha_i) after k epochs,
so a change of estimate applies at once. A source not yet explored (never crawled, or whose
crawls taught nothing yet) is priced by the empirical-Bayes prior of
``scrapy_whittle.core.population``: the expected index of a never-crawled source of its pooling
group (``groups``), estimated from the sources learned so far, times its prior weight; at least
the undecayed prior value u_i k accumulated over the k epochs since it was added (per unit of
cost), which grows without bound, so every source is explored some day, the promising ones
(large prior weight, a rich group) first. Before anything is learned only the latter counts.

Pushes (WebSub, ``observe_push``; ``docs/push.md``): an entry a hub delivers is captured at
no crawl cost, so what a poll of the source is worth is what the pushes miss. The share p_i of
new entries its pushes deliver is learned (``PushReliability``, from the entries first seen by
a poll and those first seen by push, these once a poll has checked their span), and the index
is evaluated at the arrivals the polls still find, u_i (1 - p_i (1 - q_i)), q_i the posterior
probability that the source's pushes stopped (its silence and the other pushers', evaluated at
every selection): a reliable pusher is polled little, one whose hub fell
silent as much as before. Without any push the policy does exactly what it does without this
paragraph.

The policy is composed of its parts, each in its module: ``LearnedPages`` (the pages' change
rates and importance), ``ValueLearning`` (what captures teach the rate, value and decay
estimators), ``PushLearning`` (what pushes teach, the hubs' failures), ``FeedWindows`` (the
feeds' windows and their index) and ``PopulationPrior`` (the price of a source never crawled);
the policy holds the estimators and the index, and decides.

Time: ``obs.time`` and publication times are in the problem's unit (seconds in Scrapy, where
``problem.period`` is the epoch length in seconds; epochs of length 1 in the papers' examples);
epochs are ``obs.epoch``. Crawls that failed (``ok`` False) teach nothing and leave the source's
content in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.columns import Col, KeptRows
from scrapy_whittle.core.dynamics import alpha_u_logs, decay_logs, geometric_sum, refine
from scrapy_whittle.core.estimators import DecayEstimator, RateEstimator, ValueEstimator
from scrapy_whittle.core.index import LOG_ALPHA_MIN, IndexTable
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import with_max_interval
from scrapy_whittle.core.policies.feed_window import FeedWindows
from scrapy_whittle.core.policies.learned_pages import (
    COUNTS,
    EPHEMERAL,
    PAGE,
    UNKNOWN,
    LearnedPages,
)
from scrapy_whittle.core.policies.learned_repair import repair_sources
from scrapy_whittle.core.policies.population_prior import PopulationPrior
from scrapy_whittle.core.policies.push_learning import PushLearning
from scrapy_whittle.core.policies.reaching import ReachingTop
from scrapy_whittle.core.policies.value_learning import ValueLearning
from scrapy_whittle.core.population import check_groups, group_ids
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.core.selection import PrunedTop, select_top

MODELS = ("auto", "ephemeral", "pages")


def _held(part: str, attr: str) -> property:
    """Attribute ``attr`` of the policy's part ``part``, read and written as the policy's own
    (the names ``scalar_state`` persists, and callers use)."""
    return property(lambda self: getattr(getattr(self, part), attr),
                    lambda self, value: setattr(getattr(self, part), attr, value))


class AdaptiveWhittlePolicy(Policy):
    """Whittle index at online estimates (``"whittle"``).

    prior_rate: prior arrival rate of entries (ephemeral) and change rate (pages), per unit of
        time; default one per epoch (1 / period). Scalar, array or callable(ids).
    prior_half_life: prior half-life of interest, unit of time; default 4 epochs.
    weights: prior mean value of an item (ephemeral) and importance (pages) per source;
        default 1. Scalar, array or callable(ids).
    prior_exposure: weight of the rate prior, in units of time; default one epoch.
    prior_weight: pseudo-observations behind the value, decay and change-rate priors.
    model: "auto": a crawl with item arrays is ephemeral content; one without is a page
        (changed bit) until it shows more than one new entry, a value without a new entry, or
        two different values when changed (a page's importance is fixed), after which that
        source is count-only ephemeral content for good; "ephemeral": crawls
        without items are count-only ephemeral content; "pages": every crawl is a page.
    groups: pooling group of each source for the prior of the sources never crawled (array
        of non-negative ints, or callable(ids) -> ints: OPML categories, hosts); default one
        group. Sources added later than an array covers are in group 0.
    push: keyword arguments of the ``PushReliability`` of the sources that push (its
        ``min_censor_age`` defaults to a hundredth of an epoch, ``failure_rate`` to one per
        thousand epochs).
    max_interval: the longest a source waits between two crawls, in the unit of time (None:
        no limit); those that waited that long are crawled first (``due.with_max_interval``).
    resolution: how often the policy decides, as a share of the epoch (the re-crawl service's
        ``WHITTLE_STEP`` over ``WHITTLE_PERIOD``): epochs may then be fractional, and the
        index is that of the shorter epoch (``dynamics.refine``), which prices waiting until
        the next decision rather than the next epoch; what is learned keeps the epoch's unit.

    A feed's window (the entries it lists) is learned from the crawls that found it full, and
    the index of a source whose window can fill is the window's
    (:mod:`scrapy_whittle.core.window`): a fast feed is crawled before it overflows.
    """

    name = "whittle"
    needs_parameters = False
    takes_max_interval = True
    takes_resolution = True
    per_source = {"last_epoch": np.nan, "added_epoch": np.nan,
                  "kind": Col(UNKNOWN, np.uint8),
                  # where the source's history began, as its first look showed (population)
                  "history_epoch": np.nan,
                  # the entries its feed lists (learned: the most a crawl finding every listed
                  # entry new showed; NaN: not known, no window)
                  "window": np.nan,
                  "group": Col(0, np.int32, persist=False)}
    scalar_state = ("missed_total", "last_missed", "_clock")

    def __init__(self, problem: Problem, rng=None, *, prior_rate=None, prior_half_life=None,
                 weights=None, prior_exposure: float | None = None, prior_weight: float = 1.0,
                 model: str = "auto", groups=None, push: dict[str, Any] | None = None,
                 max_interval: float | None = None, resolution: float = 1.0) -> None:
        super().__init__(problem, rng)
        if not 0 < resolution <= 1:
            raise ValueError(f"resolution ({resolution!r}) must lie in (0, 1]")
        self.resolution = float(resolution)
        if model not in MODELS:
            raise ValueError(f"model ({model!r}) must be one of {', '.join(MODELS)}")
        if max_interval is not None and not (max_interval > 0):
            raise ValueError(f"max_interval ({max_interval!r}) must be > 0 or None")
        self.max_interval = None if max_interval is None else float(max_interval)
        period = float(problem.period)
        self.prior_rate = 1.0 / period if prior_rate is None else prior_rate
        self.prior_half_life = 4.0 * period if prior_half_life is None else prior_half_life
        self.weights = 1.0 if weights is None else weights
        self.prior_exposure = period if prior_exposure is None else float(prior_exposure)
        self.prior_weight = float(prior_weight)
        self.model = model
        n = problem.n
        self.rates = RateEstimator(n, prior_rate=self.prior_rate,
                                   prior_exposure=self.prior_exposure)
        # the value prior on the unit the crawl's values come in (``ValueEstimator``, pooled)
        self.values = ValueEstimator(n, prior_mean=self.weights, prior_weight=self.prior_weight,
                                     pooled=True)
        self.decay = DecayEstimator(n, prior_half_life=self.prior_half_life,
                                    prior_weight=self.prior_weight,
                                    min_half_life=1e-3 * period, max_half_life=1e6 * period)
        self.pages = LearnedPages(self)
        self.learning = ValueLearning(self)
        self._pruning = PrunedTop()
        self.reaching = ReachingTop(self)
        self._u = KeptRows(lambda ids: (self._parameters_at(ids)[1],))   # see _kept_u
        check_groups(groups, problem.n)
        self.groups = groups
        self.group[:] = group_ids(groups, np.arange(n))
        self.prior = PopulationPrior(self)
        self.pushes = PushLearning(self, push)
        self.windows = FeedWindows(self)
        self._added_known = 0          # rows before this one have their epoch added set
        self._oldest: float | None = None     # a lower bound of the sources' last crawls

    # the pushes' estimator, and the scalars persisted, live in the parts
    push = _held("pushes", "reliability")
    missed_total = _held("learning", "missed_total")
    last_missed = _held("learning", "last_missed")
    _clock = _held("pushes", "clock")

    def _row_children(self):
        return {"rates": self.rates, "values": self.values, "decay": self.decay}

    def _sparse_children(self):
        pages, pushes = self.pages, self.pushes
        return {"changes": (pages.rows, pages.changes),
                "importance": (pages.rows, pages.importance),
                "push": (pushes.rows, pushes.reliability)}

    def rate_estimator(self) -> RateEstimator:
        return self.rates

    def set_prior_half_life(self, ids, half_life) -> None:
        self.decay.set_prior(ids, half_life)
        self._estimates_changed(ids)

    def set_prior_rate(self, ids, rate) -> np.ndarray:
        changed = super().set_prior_rate(ids, rate)
        self._estimates_changed(changed)
        return changed

    # -- the index --------------------------------------------------------------------------
    def parameters(self) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, u) of every source at the current estimates (computed afresh)."""
        return self._parameters_at(slice(None))[:2]

    def _kept_u(self) -> np.ndarray:
        """u of every source at the current estimates, read-only. It (rate x value x the
        decay's integral over an epoch: most of the work) is kept between selections and
        computed again only for the sources whose estimates changed since (``observe``,
        ``report_value``, ``repair`` and a prior set for some sources name them,
        a restore or new sources drop it): 8 bytes a source. alpha, log alpha and 1 - alpha
        (``_alphas_at``) come from the decay fits, which the decay estimator keeps, for the
        sources a selection ranks only. An element is computed the same way either way,
        so this never changes a choice (tested)."""
        return self._u.get(self.n)[0]

    def _alphas_at(self, ids, with_alpha: bool = True) -> tuple[np.ndarray | None,
                                                                np.ndarray, np.ndarray]:
        """(alpha, log alpha, 1 - alpha) of sources ``ids`` (an index array or a slice) at
        the current estimates, exactly as ``_parameters_at`` computes them; alpha is None
        unless ``with_alpha`` (the expected state and the index need only its logarithm
        and 1 - alpha: its ``exp`` is spared)."""
        log_alpha, one_minus = decay_logs(self.decay.mean_at(ids), float(self.problem.period))
        alpha = np.exp(log_alpha) if with_alpha else None
        page = self.pages.positions(ids)
        if page is not None:
            self.pages.alphas(page, alpha, log_alpha, one_minus, ids)
        return alpha, log_alpha, one_minus

    def _decay_rates_at(self, ids: np.ndarray) -> np.ndarray:
        """mu = -log alpha / T of sources ``ids`` (an index array), alpha as ``_alphas_at``
        has it (a page's from its change rate) and floored as the index floors it, taken
        from the estimates (no exp and log per source)."""
        period = float(self.problem.period)
        mu = self.decay.mean_at(ids)
        page = self.pages.positions(ids)
        if page is not None:
            mu = mu.copy()
            mu[page] = self.pages.change_rates(ids[page]) / period
        return np.minimum(mu, -LOG_ALPHA_MIN / period)

    def _estimates_changed(self, ids) -> None:
        """The estimates of sources ``ids`` changed: their kept u is computed again (and the
        population's prior with it)."""
        self._u.changed(ids)
        self.reaching.changed(ids)
        self.prior.changed()

    def _forget_u(self) -> None:
        """Every source's u is computed again (and the population's prior with it)."""
        self._u.forget()
        self.reaching.forget()
        self.prior.forget()

    def population_prior(self, epoch: int, explored: np.ndarray | None = None) -> np.ndarray:
        """Per pooling group, the expected index at ``epoch`` of a source never crawled, per
        unit of prior weight and cost (``PopulationPrior.at``); NaN where none was learned."""
        return self.prior.at(epoch, explored)

    def _after_import(self) -> None:
        super()._after_import()
        self._times_changed()
        self._forget_u()
        self.group[:] = group_ids(self.groups, np.arange(self.n))
        self.pushes.forget()

    def _parameters_at(self, ids) -> tuple[np.ndarray, ...]:
        """(alpha, u, log alpha, 1 - alpha) of sources ``ids`` (an index array, or
        ``slice(None)``: all)."""
        scale = self.rates.mean_at(ids) * self.values.mean_at(ids)          # Lambda xi
        counts = self.kind[ids] == COUNTS
        if counts.any():
            span_scale = self.decay.span_scale()[ids]
            scale = np.where(counts & np.isfinite(span_scale), span_scale, scale)
        if self.pushes.used is not None:         # what the pushes miss is what polls find
            scale = scale * (1.0 - self.pushes.used[ids])
        alpha, u, log_alpha, one_minus = alpha_u_logs(scale, self.decay.mean_at(ids),
                                                      float(self.problem.period))
        page = self.pages.positions(ids)
        if page is not None:
            u[page] = self.pages.alphas(page, alpha, log_alpha, one_minus, ids)
        return alpha, u, log_alpha, one_minus

    def expected_state(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, alpha, u): the expected value waiting at each source at ``epoch``."""
        x, u = self._expected(epoch)
        return x, self._alphas_at(slice(None))[0], u

    def _expected(self, epoch: int, skip=None) -> tuple[np.ndarray, np.ndarray]:
        """(x, u) of ``expected_state``, without alpha; ``skip``: bool[N], explored sources
        whose x the caller computes otherwise (diurnal-whittle's, under their rhythm): their
        x is NaN."""
        x, u = self._expected_polled(epoch, skip)
        if self.pushes.failed is not None:
            self.pushes.fallen_state(epoch, x, u)
        return x, u

    def _expected_polled(self, epoch: int, skip=None) -> tuple[np.ndarray, np.ndarray]:
        """``_expected`` but for the sources whose hub failed."""
        u = self._kept_u()
        explored = self.explored()
        waited = np.maximum(epoch - np.where(np.isnan(self.added_epoch), epoch,
                                             self.added_epoch), 0.0)
        # never crawled: the population's expected index (times the cost: x / C is its
        # priority), at least the prior's undecayed arrivals since the source joined, which
        # grow without bound, so that every source is crawled some day
        x = u * waited
        if not explored.all() and explored.any():
            pooled = self.population_prior(epoch, explored)[self.group]
            prior_x = self.values.m0 * pooled * self.problem.cost
            x = np.where(~explored & (prior_x > x), prior_x, x)
        if skip is not None:
            skip = skip & explored
            x[skip] = np.nan
            explored &= ~skip
        ids = np.flatnonzero(explored)
        if not ids.size:
            return x, u
        # explored: u G_k, k epochs after the last crawl (x0 = 0 then); on the explored
        # sources only while they are few (the start of a crawl)
        sub = slice(None) if 2 * ids.size > explored.shape[0] else ids
        k = np.maximum(epoch - self.last_epoch[sub], 0.0)
        _, log_alpha, one_minus = self._alphas_at(sub, with_alpha=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            after_crawl = u[sub] * geometric_sum(k, log_alpha, one_minus)
        if sub is ids:
            x[ids] = after_crawl
        else:
            x = np.where(explored, after_crawl, x)
        return x, u

    def _table(self, ids: np.ndarray, u: np.ndarray, cost) -> IndexTable:
        """The index table of sources ``ids`` (arrivals ``u``, aligned with them), from the
        logarithms of their alpha (neither alpha nor its log is computed again)."""
        _, log_alpha, one_minus = self._alphas_at(ids, with_alpha=False)
        if self.resolution != 1.0:                 # the index of the policy's decision step
            log_alpha, one_minus, u = refine(log_alpha, one_minus, u, self.resolution)
        return IndexTable.from_logs(log_alpha, u, cost, one_minus)

    def explored(self) -> np.ndarray:
        """bool[N]: some crawl of the source taught something (an update of the rate
        estimator or a visit of the change-rate one). A crawl of an empty feed at the very
        start, say, does not: the source keeps its optimistic priority."""
        out = self.pages.visited(self.rates.updates > 0)
        if self.pushes.relearn is not None:
            out[self.pushes.relearn] = False
        return out

    def priority(self, epoch: int) -> np.ndarray:
        self._refresh_push(epoch)
        x, u = self._expected(epoch)
        cost = self.problem.cost
        prio = x / cost                       # unexplored sources: x / C
        ids = np.flatnonzero(self.explored())
        prio[ids] = self._table(ids, u[ids], cost[ids]).index(x[ids])
        self._window_index(epoch, ids, x[ids], u[ids], prio)
        return prio

    def _window_index(self, epoch: int, ids: np.ndarray, x: np.ndarray, u: np.ndarray,
                      out: np.ndarray, positions: bool = False) -> None:
        """The window's index of the explored sources ``ids`` whose feed window can fill
        (``FeedWindows.index``)."""
        self.windows.index(epoch, ids, x, u, out, positions)

    def _refresh_push(self, epoch: int | None) -> None:
        """The reliability the index counts on for every source that ever pushed, at
        ``epoch`` (``PushLearning.refresh``)."""
        self.pushes.refresh(epoch)

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The sources not crawled for ``max_interval`` first (``due.with_max_interval``),
        then :meth:`select_top` within what they leave."""
        self._note_added(epoch)
        if self.max_interval is None or not self._may_be_late(epoch):
            return self.select_top(epoch, budget, eligible)
        last = np.where(np.isnan(self.last_epoch), self.added_epoch, self.last_epoch)
        waited = (epoch - last) * float(self.problem.period)
        return with_max_interval(lambda b, e: self.select_top(epoch, b, e), waited,
                                 self.max_interval, self.problem.cost, budget, eligible)

    def _note_added(self, epoch) -> None:
        """Sources seen for the first time are added at ``epoch`` (only the rows grown or
        reset since the last call are looked at)."""
        start = self._added_known
        if start < self.n:
            rows = self.added_epoch[start:]
            rows[np.isnan(rows)] = epoch
            self._added_known = self.n

    def _times_changed(self) -> None:
        """The sources' epochs (last crawl, added) were set other than by a crawl: what
        ``_note_added`` and ``_may_be_late`` keep is looked for again."""
        self._added_known, self._oldest = 0, None

    def _may_be_late(self, epoch) -> bool:
        """Whether some source may have waited ``max_interval``: the oldest of the sources'
        last crawls (or additions) is kept, and only looked for again once it may be that
        old; crawls only move a source's last crawl later, so the one kept stays a lower
        bound meanwhile (a restore or a repair, which may move it earlier, drop it)."""
        period = float(self.problem.period)
        if (self._oldest is not None
                and (epoch - self._oldest) * period < self.max_interval):
            return False
        last = np.where(np.isnan(self.last_epoch), self.added_epoch, self.last_epoch)
        self._oldest = float(np.nanmin(last)) if np.any(~np.isnan(last)) else None
        return self._oldest is not None and (epoch - self._oldest) * period >= self.max_interval

    def select_top(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The top of ``priority`` within ``budget``; with unit costs exactly so, computing the
        index only for the sources that can make the top.

        The index never exceeds x / C (``IndexTable``) and an unexplored source's priority is
        x / C, so a source with x / C below the last selection's cut-off (lowered by
        ``selection.PRUNE_MARGIN``) cannot be chosen while the top M of the others stay above it
        (``PrunedTop``, which also says when the full computation must run). The choice is
        the same either way (tested)."""
        self._note_added(epoch)
        self._refresh_push(epoch)
        cost = self.problem.cost
        k = int(np.floor(budget + 1e-9))
        if not 0 < k < self.n or not np.all(cost == 1.0):
            return select_top(self.priority(epoch), cost, budget, eligible)
        chosen = self.reaching.top(epoch, budget, eligible, k)    # deciding several an epoch
        if chosen is not None:
            return chosen
        x, u = self._expected(epoch)
        explored = self.explored()

        def priority_of(ids):             # never crawled: x / C (C = 1), no index needed
            prio, ranked = x[ids], explored[ids]
            at = ids[ranked]
            index = self._table(at, u[at], 1.0).index_where_unsaturated(x[at])
            self._window_index(epoch, at, x[at], u[at], index, positions=True)
            prio[ranked] = index
            return prio

        chosen = self._pruning(x, priority_of, budget, eligible)
        if chosen is not None:
            return chosen
        prio = x.copy()                       # unexplored: x / C (C = 1), no index needed
        ids = np.flatnonzero(explored)
        prio[ids] = self._table(ids, u[ids], 1.0).index_where_unsaturated(x[ids])
        self._window_index(epoch, ids, x[ids], u[ids], prio)
        chosen = select_top(prio, None, budget, eligible)
        self._pruning.settled(prio, chosen)
        return chosen

    # -- learning ---------------------------------------------------------------------------
    def observe(self, obs: Observation) -> None:
        self._note_added(obs.epoch)
        self.last_missed = 0.0
        keep = obs.ok & (obs.sources >= 0) & (obs.sources < self.n)
        if keep.any():
            self.pushes.tick(obs.epoch, float(np.max(obs.time[keep])), None)
        # one crawl per source per pass (Scrapy may report a source twice in one batch)
        for batch in one_per_source(obs.sources, obs.time, keep):
            self._observe_batch(obs, batch)
        self._rescale_values()

    def _rescale_values(self) -> None:
        """The value prior follows the unit of the values observed (``ValueEstimator``,
        pooled): where that unit moved, so did every source's u."""
        if self.values.rescale():
            self._forget_u()

    def _observe_batch(self, obs: Observation, sel: np.ndarray) -> None:
        src, t = obs.sources[sel], obs.time[sel]
        newer = ~(t <= self.rates.last_time[src])                 # drops stale reports
        sel = sel.copy()
        sel[np.flatnonzero(sel)[~newer]] = False
        src, t, reward = obs.sources[sel], obs.time[sel], obs.reward[sel]
        if src.size == 0:
            return
        extra = self.pushes.poll_evidence(obs, sel, src, t) if self.push.n else None
        if obs.item_offsets is not None and self.model != "pages":
            self.learning.observe_items(obs, sel, src, t, reward, extra)
            self.kind[src] = EPHEMERAL
        else:
            self.pages.observe(obs, sel, src, reward, self.learning.since(obs, src, t))
            if self.model == "pages":
                self.kind[src] = PAGE
            else:
                self.kind[src] = self.pages.kind_after(obs.new_items[sel], src, reward)
                self.learning.observe_counts(obs, sel, src, t, reward, extra)
        first = np.isnan(self.history_epoch[src]) & self._explored_at(src)
        if first.any():
            self.prior.note_history(obs, sel, first)
        self.windows.learn(obs, sel, src)
        self.last_epoch[src] = obs.epoch
        if self._oldest is not None:          # (a late report of an old crawl)
            self._oldest = min(self._oldest, float(obs.epoch))
        self.rates.last_time[src] = t
        self._estimates_changed(src)

    def _explored_at(self, ids: np.ndarray) -> np.ndarray:
        """``explored()[ids]``, for those sources only."""
        return self.pages.visited(self.rates.updates[ids] > 0, ids)

    def observe_push(self, obs: Observation) -> bool:
        """Deliveries of a hub (WebSub): the policy learns the sources' push reliability and
        the new entries' values (``PushLearning.observe``); a push costs no crawl. Returns
        True (pushes are used)."""
        return self.pushes.observe(obs)

    # -- health -----------------------------------------------------------------------------
    def repair(self, ids=None) -> np.ndarray:
        """Sources whose estimators hold unusable numbers or, when every source is checked,
        whose (alpha, u) are not finite and in range, go back to their priors
        (``learned_repair``). Returns the ids reset."""
        return repair_sources(self, ids)

    # -- outputs for the Scrapy glue --------------------------------------------------------
    def estimates(self) -> dict[str, np.ndarray]:
        """Current estimates and their standard errors, arrays over sources (a page's change
        rate and importance: their prior where the source was never seen as a page)."""
        alpha, u = self.parameters()
        lo, hi = self.rates.interval(0.9)
        return {
            "rate": self.rates.mean(), "rate_std": self.rates.std(),
            "rate_lo90": lo, "rate_hi90": hi,
            "mean_utility": self.values.mean(), "mean_utility_std": self.values.std(),
            "decay": self.decay.mean(), "decay_std": self.decay.std(),
            **self.pages.estimates(self.values.m0.copy(), float(self.problem.period)),
            "alpha": alpha, "u": u, "kind": self.kind.copy(),
            "missed": self.rates.missed.astype(np.float64),
            "push_share": self.pushes.shares(),
        }

    def summary(self, ids) -> dict[str, np.ndarray]:
        ids = np.asarray(ids, dtype=np.int64)
        return {"rate": self.rates.mean()[ids], "half_life": self.decay.half_life()[ids],
                "value": self.values.mean()[ids]}

    def report_value(self, source: int, value_at_capture: float, age: float,
                     base_value: float | None = None) -> bool:
        """Feedback from the spider (an item pipeline): an item of ``source`` was worth
        ``value_at_capture`` at ``age`` (time since publication, problem's unit); its base
        value at publication when known. Returns whether it was accepted."""
        ok = self.decay.report(source, value_at_capture, age, base_value)
        if ok and base_value is not None:
            self.values.report(source, base_value)
        if ok:
            self._estimates_changed([source])
        return ok

    # -- growth and persistence -------------------------------------------------------------
    def grow(self, n_new: int, cost=1.0, alpha=None, u=None, weights=None) -> None:
        """Add sources; ``weights`` their prior value (default: the policy's ``weights``)."""
        if n_new <= 0:
            return
        super().grow(n_new, cost)
        self._forget_u()
        self.group[self.n - n_new:] = group_ids(self.groups, np.arange(self.n - n_new, self.n))
        self.rates.grow(n_new)
        self.decay.grow(n_new)
        self.values.grow(n_new, prior_mean=weights)
        self.pages.grow(n_new)
        self.pushes.rows.grow(n_new)

    def global_state(self) -> dict[str, Any]:
        return {**super().global_state(), "model": self.model}

    def load_global_state(self, state: dict[str, Any]) -> None:
        super().load_global_state(state)
        self.model = state.get("model", self.model)
