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

Time: ``obs.time`` and publication times are in the problem's unit (seconds in Scrapy, where
``problem.period`` is the epoch length in seconds; epochs of length 1 in the papers' examples);
epochs are ``obs.epoch``. Crawls that failed (``ok`` False) teach nothing and leave the source's
content in place.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scrapy_whittle.core.columns import Col, KeptRows, SparseRows
from scrapy_whittle.core.distinct import distinct
from scrapy_whittle.core.dynamics import (
    alpha_u_logs,
    decay_logs,
    geometric_sum,
    pages_alpha_u,
    refine,
)
from scrapy_whittle.core.estimators import (
    ChangeRateEstimator,
    DecayEstimator,
    PushReliability,
    RateEstimator,
    ValueEstimator,
)
from scrapy_whittle.core.estimators._base import segment_rows, segment_sum
from scrapy_whittle.core.index import LOG_ALPHA_MIN, IndexTable
from scrapy_whittle.core.observation import Observation, one_per_source
from scrapy_whittle.core.policies.base import Policy
from scrapy_whittle.core.policies.due import with_max_interval
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
from scrapy_whittle.core.window import NO_WINDOW, filling, index_at_state

UNKNOWN, EPHEMERAL, PAGE, COUNTS = 0, 1, 2, 3
MODELS = ("auto", "ephemeral", "pages")


def _prior_at(value, ids: np.ndarray):
    """A prior given as a scalar, an array over all sources or ``callable(ids)``, for ``ids``."""
    if callable(value):
        return value(ids)
    arr = np.asarray(value, dtype=np.float64)
    return arr if arr.ndim == 0 else arr[ids]


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
        # pages (intervals in epochs, rates per epoch), only for the sources seen as pages:
        # row page_rows.row[i] of both estimators belongs to source i
        self.changes = ChangeRateEstimator(0, prior_rate=self._per_epoch(self.prior_rate),
                                           prior_weight=self.prior_weight)
        self.importance = ValueEstimator(0, prior_mean=1.0, prior_weight=self.prior_weight)
        self.page_rows = SparseRows(self._allocate_pages)
        self.page_rows.grow(n)
        if model == "pages":
            self.page_rows.rows(np.arange(n), create=True)
        self.missed_total = 0.0
        self.last_missed = 0.0
        self._pruning = PrunedTop()
        self._u = KeptRows(lambda ids: (self._parameters_at(ids)[1],))   # see _kept_u
        check_groups(groups, problem.n)
        self.groups = groups
        self.group[:] = self._groups_of(np.arange(n))
        self._population_cache: tuple[float, int, np.ndarray, int] | None = None
        self._population_stamp = 0
        # pushes: rows only for the sources that ever pushed (row push_rows.row[i])
        self.push = PushReliability(0, **{"min_censor_age": 0.01 * period,
                                          "failure_rate": 1e-3 / period, **(push or {})})
        self.push_rows = SparseRows(self._allocate_push)
        self.push_rows.grow(n)
        self._pushers: np.ndarray | None = None     # source of each push row (derived)
        self._push_used: np.ndarray | None = None   # reliability in u (derived)
        # sources whose hub may have failed: (ids, p, epochs since their last useful push,
        # probability of the failure) (derived)
        self._push_failed: tuple[np.ndarray, ...] | None = None
        # sources whose hub more likely failed than not and whose polls never taught their
        # decay (derived)
        self._relearn: np.ndarray | None = None
        self._clock: tuple[float, float, float] | None = None  # (epoch, poll time, push time)

    def _allocate_pages(self, ids: np.ndarray) -> np.ndarray:
        start = self.changes.n
        self.changes.grow(ids.shape[0], prior_rate=_prior_at(self._per_epoch(self.prior_rate),
                                                              ids))
        self.importance.grow(ids.shape[0], prior_mean=self.values.m0[ids])
        return np.arange(start, start + ids.shape[0])

    def _allocate_push(self, ids: np.ndarray) -> np.ndarray:
        start = self.push.n
        self.push.grow(ids.shape[0])
        self._pushers = None
        return np.arange(start, start + ids.shape[0])

    def _row_children(self):
        return {"rates": self.rates, "values": self.values, "decay": self.decay}

    def _sparse_children(self):
        return {"changes": (self.page_rows, self.changes),
                "importance": (self.page_rows, self.importance),
                "push": (self.push_rows, self.push)}

    def rate_estimator(self) -> RateEstimator:
        return self.rates

    def set_prior_half_life(self, ids, half_life) -> None:
        self.decay.set_prior(ids, half_life)
        self._estimates_changed(ids)

    def set_prior_rate(self, ids, rate) -> np.ndarray:
        changed = super().set_prior_rate(ids, rate)
        self._estimates_changed(changed)
        return changed

    def _per_epoch(self, rate):
        period = float(self.problem.period)
        if callable(rate):
            return lambda ids: np.asarray(rate(ids), dtype=np.float64) * period
        return np.asarray(rate, dtype=np.float64) * period

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
        page = self._pages(ids)
        if page is not None:
            self._page_alphas(page, alpha, log_alpha, one_minus, ids)
        return alpha, log_alpha, one_minus

    def _decay_rates_at(self, ids: np.ndarray) -> np.ndarray:
        """mu = -log alpha / T of sources ``ids`` (an index array), alpha as ``_alphas_at``
        has it (a page's from its change rate) and floored as the index floors it, taken
        from the estimates (no exp and log per source)."""
        period = float(self.problem.period)
        mu = self.decay.mean_at(ids)
        page = self._pages(ids)
        if page is not None:
            mu = mu.copy()
            mu[page] = self.changes.mean()[self.page_rows.rows(ids[page])] / period
        return np.minimum(mu, -LOG_ALPHA_MIN / period)

    def _pages(self, ids=slice(None)) -> np.ndarray | None:
        """Positions among ``ids`` of the sources ranked as pages (None: none)."""
        kind = self.kind[ids]
        page = kind == PAGE
        if self.model == "pages":
            page |= kind == UNKNOWN
        return np.flatnonzero(page) if page.any() else None

    def _page_alphas(self, at, alpha, log_alpha, one_minus, ids=slice(None)) -> np.ndarray:
        """Set the (alpha, log alpha, 1 - alpha) of the pages at positions ``at`` of ``ids``
        (an index array, or ``slice(None)``: all sources) from their change rates (alpha
        None: not wanted); returns their u."""
        src = at if isinstance(ids, slice) else ids[at]
        rows = self.page_rows.rows(src)
        page_alpha, u = pages_alpha_u(self.changes.mean()[rows], self.importance.mean()[rows])
        if alpha is not None:
            alpha[at] = page_alpha
        with np.errstate(divide="ignore"):
            log_alpha[at] = np.log(page_alpha)
        one_minus[at] = -np.expm1(log_alpha[at])
        return u

    def _estimates_changed(self, ids) -> None:
        """The estimates of sources ``ids`` changed: their kept u is computed again (and the
        population's prior with it)."""
        self._u.changed(ids)
        self._population_stamp += 1

    def _groups_of(self, ids: np.ndarray) -> np.ndarray:
        """The pooling groups of sources ``ids`` (``population.group_ids``)."""
        return group_ids(self.groups, ids)

    def population_prior(self, epoch: int, explored: np.ndarray | None = None) -> np.ndarray:
        """Per pooling group, the expected index at ``epoch`` of a source never crawled, per
        unit of prior weight and cost (``scrapy_whittle.core.population``), from the sources
        learned so far; NaN where none was. Kept until the estimates or the epoch change; with
        decision steps (``resolution`` < 1) for the whole epoch: an average over the learned
        sources moves little within one, and every step would pay a pass over them."""
        cached = self._population_cache
        if cached is not None and (cached[:2] == (epoch, self._population_stamp) or (
                self.resolution < 1.0 and cached[3] == math.floor(epoch))):
            return cached[2]
        if explored is None:
            explored = self.explored()
        n_groups = int(self.group.max()) + 1 if self.n else 1
        ids = sample_of(np.flatnonzero(explored & np.isfinite(self.history_epoch)))
        _, log_alpha, one_minus = self._alphas_at(ids, with_alpha=False)
        out = expected_index(epoch, log_alpha, one_minus, self._kept_u()[ids],
                             self.history_epoch[ids], self.values.m0[ids], self.group[ids],
                             n_groups)
        self._population_cache = (epoch, self._population_stamp, out, math.floor(epoch))
        return out

    def _after_import(self) -> None:
        super()._after_import()
        self._u.forget()
        self._population_stamp += 1
        self._population_cache = None
        self.group[:] = self._groups_of(np.arange(self.n))
        self._pushers = None
        self._push_used = None
        self._push_failed = self._relearn = None
        if self.push.n:                          # the reliability at the last time known
            self._refresh_push(None)

    def _parameters_at(self, ids) -> tuple[np.ndarray, ...]:
        """(alpha, u, log alpha, 1 - alpha) of sources ``ids`` (an index array, or
        ``slice(None)``: all)."""
        scale = self.rates.mean_at(ids) * self.values.mean_at(ids)          # Lambda xi
        counts = self.kind[ids] == COUNTS
        if counts.any():
            span_scale = self.decay.span_scale()[ids]
            scale = np.where(counts & np.isfinite(span_scale), span_scale, scale)
        if self._push_used is not None:          # what the pushes miss is what polls find
            scale = scale * (1.0 - self._push_used[ids])
        alpha, u, log_alpha, one_minus = alpha_u_logs(scale, self.decay.mean_at(ids),
                                                      float(self.problem.period))
        page = self._pages(ids)
        if page is not None:
            u[page] = self._page_alphas(page, alpha, log_alpha, one_minus, ids)
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
        if self._push_failed is not None:
            self._fallen_state(epoch, x, u)
        return x, u

    def _fallen_state(self, epoch: int, x: np.ndarray, u: np.ndarray) -> None:
        """x of the explored sources whose hub failed: polls found the share 1 - p of their
        arrivals since their last crawl, the whole of them since the hub's last useful push
        only, x = u ((1 - p) G_k + p G_s), s = min(k, epochs since that push). (u
        itself, their future arrivals, is the full one.) Counting the whole of them
        since the last crawl would make one long gap between pushes of a silent hub look like
        hours of value waiting."""
        ids, share, since, doubt = self._push_failed
        # u counts the share of the arrivals the pushes are expected to miss, p (1 - q) of
        # them less; the full arrivals are u / (1 - that)
        full = u / np.maximum(1.0 - self._push_used, 1e-12)
        if self._relearn is not None:
            # explored again as a source never crawled is, for what the failure made unknown:
            # the arrivals since the hub's last useful push, undecayed (its polls never taught
            # its decay, and its pushes cannot: a push is seen at an age near 0), q p s; those
            # the pushes missed before are what its polls always found, decayed at the
            # estimate, (1 - p) G_k. Undecayed since the last poll, every such source would
            # outrank every explored one at once when a hub serving many falls
            back = self._relearn
            at = np.flatnonzero(np.isin(ids, back))
            k = np.maximum(epoch - self.last_epoch[ids[at]], 0.0)
            s = np.clip(np.nan_to_num(since[at], nan=np.inf), 0.0, k)
            polled = np.isfinite(k)
            _, log_alpha, one_minus = self._alphas_at(ids[at], with_alpha=False)
            with np.errstate(divide="ignore", invalid="ignore"):
                g_k = geometric_sum(k, log_alpha, one_minus)
            waiting = (1.0 - share[at]) * g_k + doubt[at] * share[at] * s
            x[ids[at][polled]] = full[ids[at][polled]] * waiting[polled]
            keep = ~np.isin(ids, back)
            ids, share, since, doubt = ids[keep], share[keep], since[keep], doubt[keep]
        k = epoch - self.last_epoch[ids]
        ok = np.isfinite(k) & np.isfinite(x[ids])
        if not ok.any():
            return
        ids, share, doubt, k = ids[ok], share[ok], doubt[ok], np.maximum(k[ok], 0.0)
        s = np.clip(np.nan_to_num(since[ok], nan=np.inf), 0.0, k)
        _, log_alpha, one_minus = self._alphas_at(ids, with_alpha=False)
        with np.errstate(divide="ignore", invalid="ignore"):
            g_k = geometric_sum(k, log_alpha, one_minus)
            g_s = geometric_sum(s, log_alpha, one_minus)
        # working (1 - q): the polls' share alone, no push having come since s; failed (q):
        # the pushes' share too since the last useful push
        x[ids] = full[ids] * ((1.0 - share) * g_k + doubt * share * g_s)

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
        out = self.rates.updates > 0
        pages = self.page_rows.has()
        if pages.any():
            ids = np.flatnonzero(pages)
            out[ids] |= self.changes.visits[self.page_rows.rows(ids)] > 0
        if self._relearn is not None:
            out[self._relearn] = False
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
        """The index of the explored sources ``ids`` (states ``x``, arrivals ``u``, aligned)
        whose feed window can fill before their next epoch, written into ``out`` (at ``ids``,
        or at their positions among ``ids`` with ``positions``): (k + 1) x_k s_k - k x_{k+1}
        s_{k+1} over the cost (``window.index_at_state``). Every other source keeps the
        paper's index, which this is when no window can fill."""
        if not ids.size:
            return
        window = self.window[ids]
        known = np.isfinite(window) & (window < NO_WINDOW) & (self.kind[ids] != PAGE)
        if not known.any():
            return
        period = float(self.problem.period)
        at = np.flatnonzero(known)
        src = ids[at]
        k = np.maximum(epoch - self.last_epoch[src], 0.0)
        rate = self.rates.mean_at(src)
        fills = filling(k / self.resolution, period * self.resolution, rate, window[at])
        if not fills.any():
            return
        at, src = at[fills], src[fills]
        mu = self._decay_rates_at(src)
        step = period * self.resolution
        u_step = u[at] * -np.expm1(-mu * step) / np.maximum(-np.expm1(-mu * period), 1e-300)
        u_step = np.where(mu > 0, u_step, u[at] * self.resolution)
        index = index_at_state(k[fills] / self.resolution, x[at], u_step, mu, step,
                               rate[fills], window[at])
        index /= self.problem.cost[src]
        out[at if positions else src] = index

    #: probability of a hub's failure below which its source's waiting value is u G_k (the
    #: pushes' share, never counted as waiting then, is at most this share of it)
    PUSH_DOUBT = 1e-3
    #: change of a pushing source's counted share below which its u is not computed again
    PUSH_SHARE_STEP = 1e-3

    #: mean discount exp(-mu age) below which a crawl's items teach xi nothing
    MIN_DISCOUNT = 1e-6

    def select(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The sources not crawled for ``max_interval`` first (``due.with_max_interval``),
        then :meth:`select_top` within what they leave."""
        self.added_epoch[np.isnan(self.added_epoch)] = epoch
        if self.max_interval is None:
            return self.select_top(epoch, budget, eligible)
        last = np.where(np.isnan(self.last_epoch), self.added_epoch, self.last_epoch)
        waited = (epoch - last) * float(self.problem.period)
        return with_max_interval(lambda b, e: self.select_top(epoch, b, e), waited,
                                 self.max_interval, self.problem.cost, budget, eligible)

    def select_top(self, epoch: int, budget: float, eligible=None) -> np.ndarray:
        """The top of ``priority`` within ``budget``; with unit costs exactly so, computing the
        index only for the sources that can make the top.

        The index never exceeds x / C (``IndexTable``) and an unexplored source's priority is
        x / C, so a source with x / C below the last selection's cut-off (lowered by
        ``selection.PRUNE_MARGIN``) cannot be chosen while the top M of the others stay above it
        (``PrunedTop``, which also says when the full computation must run). The choice is
        the same either way (tested)."""
        self.added_epoch[np.isnan(self.added_epoch)] = epoch
        self._refresh_push(epoch)
        cost = self.problem.cost
        k = int(np.floor(budget + 1e-9))
        if not 0 < k < self.n or not np.all(cost == 1.0):
            return select_top(self.priority(epoch), cost, budget, eligible)
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
        self.added_epoch[np.isnan(self.added_epoch)] = obs.epoch
        self.last_missed = 0.0
        keep = obs.ok & (obs.sources >= 0) & (obs.sources < self.n)
        if keep.any():
            self._tick(obs.epoch, float(np.max(obs.time[keep])), None)
        # one crawl per source per pass (Scrapy may report a source twice in one batch)
        for batch in one_per_source(obs.sources, obs.time, keep):
            self._observe_batch(obs, batch)
        self._rescale_values()

    def _rescale_values(self) -> None:
        """The value prior follows the unit of the values observed (``ValueEstimator``,
        pooled): where that unit moved, so did every source's u."""
        if self.values.rescale():
            self._u.forget()
            self._population_stamp += 1
            self._population_cache = None

    def _observe_batch(self, obs: Observation, sel: np.ndarray) -> None:
        src, t = obs.sources[sel], obs.time[sel]
        newer = ~(t <= self.rates.last_time[src])                 # drops stale reports
        sel = sel.copy()
        sel[np.flatnonzero(sel)[~newer]] = False
        src, t, reward = obs.sources[sel], obs.time[sel], obs.reward[sel]
        if src.size == 0:
            return
        extra = self._poll_evidence(obs, sel, src, t) if self.push.n else None
        if obs.item_offsets is not None and self.model != "pages":
            self._observe_items(obs, sel, src, t, reward, extra)
            self.kind[src] = EPHEMERAL
        else:
            self._observe_changes(obs, sel, src, t, reward)
            if self.model == "pages":
                self.kind[src] = PAGE
            else:
                new = obs.new_items[sel]
                rows = self.page_rows.rows(src)
                seen = self.importance.count[rows] > 0
                m_prev = self.importance.total[rows] / np.where(
                    seen, self.importance.count[rows], 1.0)
                varies = seen & (new > 0) & (np.abs(reward - m_prev)
                                             > 1e-9 * np.maximum(1.0, m_prev))
                counts = ((self.kind[src] == COUNTS) | (self.model == "ephemeral")
                          | (new > 1) | ((new == 0) & (reward > 0)) | varies)
                self.kind[src] = np.where(counts, COUNTS, PAGE)
                self._observe_counts(obs, sel, src, t, reward, extra)
        first = np.isnan(self.history_epoch[src]) & self._explored_at(src)
        if first.any():
            self._note_history(obs, sel, first)
        self._learn_window(obs, sel, src)
        self.last_epoch[src] = obs.epoch
        self.rates.last_time[src] = t
        self._estimates_changed(src)

    def _learn_window(self, obs: Observation, sel: np.ndarray, src: np.ndarray) -> None:
        """The entries a feed lists, from the crawls that found every listed entry new (its
        window full: ``window_full``): they show exactly as many as it lists. Not from a
        first crawl, which shows everything new too: a feed that lists its whole history
        would look like one with a window of that size."""
        full = obs.window_full[sel] & (obs.new_items[sel] > 0)
        if full.any():
            at = src[full]
            self.window[at] = np.fmax(self.window[at], obs.new_items[sel][full].astype(float))

    def _explored_at(self, ids: np.ndarray) -> np.ndarray:
        """``explored()[ids]``, for those sources only."""
        out = self.rates.updates[ids] > 0
        pages = self.page_rows.has(ids)
        if pages.any():
            out[pages] |= self.changes.visits[self.page_rows.rows(ids[pages])] > 0
        return out

    def _note_history(self, obs: Observation, sel: np.ndarray, first: np.ndarray) -> None:
        """The history start of the sources whose first useful crawl is among the crawls
        ``sel`` (``first``, aligned with them): the oldest entry with a date it listed."""
        src, t = obs.sources[sel], obs.time[sel]
        oldest = oldest_listed(obs, sel)
        start = history_start(obs.epoch, t, float(self.problem.period), oldest,
                              self.added_epoch[src])
        self.history_epoch[src[first]] = start[first]

    def _observe_items(self, obs, sel, src, t, reward, extra=None) -> None:
        off, idx = segment_rows(obs.item_offsets, sel)
        pub = obs.item_published[idx]
        val = obs.item_value[idx]
        _, missed = self.rates.observe_crawls(src, t, off, pub, obs.window_full[sel],
                                              extra=extra)
        self.last_missed = float(np.sum(missed))
        self.missed_total += self.last_missed
        self._learn_values(src, t, reward, off, pub, val)

    def _learn_values(self, src, t, reward, off, pub, val, blind_decay: bool = True) -> None:
        """Base values (xi) and decay (mu) from captures: capture j of ``src[j]`` at ``t[j]``
        was worth ``reward[j]``, its entries ``pub[off[j]:off[j+1]]`` (publication times),
        ``val`` (base values, NaN unknown). A poll's and a push's alike: the same entries,
        valued at their capture. ``blind_decay``: captures whose base values are unknown
        teach mu too (``DecayEstimator.update_captures``)."""
        counts = np.diff(off)
        unknown = np.isnan(val)
        if not unknown.all():           # (a feed without engagement: no value per item)
            self.values.update(np.repeat(src, counts), val)
        ages = np.repeat(t, counts) - pub
        known = segment_sum(unknown.astype(np.float64), off) == 0
        if np.any(known & (counts > 0)):
            k_off, k_idx = segment_rows(off, known)
            self.decay.update_batch(src[known], reward[known], k_off, ages[k_idx], val[k_idx])
        # crawls whose items carry no base value (a crawl's): mu from the captures at their
        # ages (``DecayEstimator.update_captures``), then xi as the ratio estimator
        # sum R / sum D(mu_hat), D = sum exp(-mu_hat a) over the items: a crawl's value
        # undone at mu_hat and weighted by its discount D. Weighted by the item count instead,
        # an old item found long after publication multiplies any error of mu_hat by
        # exp((mu_hat - mu) a) (mu_hat is the prior's, often many times a slow source's mu,
        # until crawls at different ages teach it); weighted by D, a crawl adds its captured
        # value itself to xi's sum, and what a decayed capture says of xi counts as little as
        # its discount
        blind = ~known & (counts > 0)
        if np.any(blind):
            b_off, b_idx = segment_rows(off, blind)
            n_items = np.diff(b_off).astype(np.float64)
            a = np.nan_to_num(np.where(np.isfinite(ages[b_idx]), ages[b_idx], 0.0))
            if blind_decay:
                self.decay.update_captures(src[blind], reward[blind], b_off, a)
            mu = self.decay.mean_at(np.repeat(src[blind], np.diff(b_off)))
            disc = segment_sum(np.exp(-mu * a), b_off)
            # items whose value has all but vanished weigh next to nothing, and R / D could
            # overflow the value's sums: skipped
            clear = disc >= n_items * self.MIN_DISCOUNT
            self.values.update(src[blind][clear], reward[blind][clear] / disc[clear],
                               weight=disc[clear])

    def _since(self, obs, src, t) -> np.ndarray:
        """Time since each source's previous crawl, in epochs (since it was added, first)."""
        first = np.isnan(self.rates.last_time[src])
        return np.where(first, (obs.epoch - self.added_epoch[src]) * 1.0,
                        (t - self.rates.last_time[src]) / float(self.problem.period))

    def _observe_changes(self, obs, sel, src, t, reward) -> None:
        changed = (obs.new_items[sel] > 0)
        rows = self.page_rows.rows(src, create=True)
        self.changes.update(rows, self._since(obs, src, t), changed)
        self.importance.update(rows[changed], reward[changed])

    def _observe_counts(self, obs, sel, src, t, reward, extra=None) -> None:
        span = self._since(obs, src, t) * float(self.problem.period)
        new = obs.new_items[sel] if extra is None else obs.new_items[sel] + extra
        self.rates.update(src, new, span)
        self.decay.update_span(src, reward, span)

    # -- pushes -----------------------------------------------------------------------------
    def observe_push(self, obs: Observation) -> bool:
        """Deliveries of a hub (WebSub): row j of ``obs`` is one push to ``obs.sources[j]`` at
        ``obs.time[j]`` that brought ``obs.new_items[j]`` entries not seen before (0: a
        duplicate or spurious push), worth ``obs.reward[j]`` at delivery; its item arrays, when
        given, hold those new entries (publication time, base value). A push costs no crawl:
        the policy learns the source's push reliability, and the new entries' base values,
        but the source's last crawl is unchanged. Returns True (pushes are used)."""
        keep = obs.ok & (obs.sources >= 0) & (obs.sources < self.n) & np.isfinite(obs.time)
        if not keep.any():
            return True
        src = obs.sources[keep]
        rows = self.push_rows.rows(src, create=True)
        off = late = None
        if obs.item_offsets is not None:
            off, idx = segment_rows(obs.item_offsets, keep)
            pub = obs.item_published[idx]
            late = np.repeat(obs.time[keep], np.diff(off)) - pub
            # pushed entries valued at their delivery teach xi, and mu where their base
            # values are known (the decay at their small age); where only their values at
            # capture are, not mu: a push's value of one entry against a poll's mean value of
            # several is biased by the spread of the base values (E log xi < log E xi)
            useful = np.diff(off) > 0
            if useful.any():
                u_off, u_idx = segment_rows(off, useful)
                self._learn_values(src[useful], obs.time[keep][useful],
                                   obs.reward[keep][useful], u_off, pub[u_idx],
                                   obs.item_value[idx][u_idx], blind_decay=False)
        self.push.update_pushes(rows, obs.time[keep], obs.new_items[keep], off, late)
        self._tick(None, None, float(np.max(obs.time[keep])))
        self._estimates_changed(distinct(src))
        self._rescale_values()
        return True

    def _tick(self, epoch, poll_time, push_time) -> None:
        """Keep the latest epoch and times seen: the clock of ``_now``."""
        e, tp, tq = self._clock or (np.nan, np.nan, np.nan)
        if epoch is not None and not epoch < e:
            e, tp = float(epoch), poll_time
        if push_time is not None:
            tq = push_time if np.isnan(tq) else max(tq, push_time)
        self._clock = (e, tp, tq)

    def _now(self, epoch: int | None) -> float:
        """The time at the start of ``epoch`` as far as the observations tell (the latest
        poll's time moved on by whole epochs, or the latest push if later; None: the latest
        time known)."""
        e, tp, tq = self._clock or (np.nan, np.nan, np.nan)
        if epoch is None:
            epoch = e
        now = tp + (epoch - e) * float(self.problem.period) if np.isfinite(e) else np.nan
        return float(np.fmax(now, tq))

    def _pushing_sources(self) -> np.ndarray:
        """The source of each push row."""
        if self._pushers is None or self._pushers.shape[0] != self.push.n:
            has = np.flatnonzero(self.push_rows.has())
            out = np.empty(self.push.n, dtype=np.int64)
            out[self.push_rows.rows(has)] = has
            self._pushers = out
        return self._pushers

    def _refresh_push(self, epoch: int | None) -> None:
        """The reliability the index counts on for every source that ever pushed, at
        ``epoch`` (a hub falls silent with time alone); the sources whose reliability
        changed get their u computed again."""
        if not self.push.n:
            return
        if self._push_used is None or self._push_used.shape[0] != self.n:
            old = self._push_used
            self._push_used = np.zeros(self.n)
            if old is not None:
                self._push_used[:old.shape[0]] = old
        ids = self._pushing_sources()
        rows = np.arange(ids.shape[0])
        now = self._now(epoch)
        doubt = self.push.failure_at(rows, now, self.rates.mean_at(ids))
        share = np.nan_to_num(self.push.share_at(rows), nan=0.0)
        rel = share * (1.0 - doubt)
        self._push_failed = self._relearn = None
        doubted = doubt > self.PUSH_DOUBT
        if doubted.any():
            # a silent hub delivered until its last useful push
            period = float(self.problem.period)
            since = (now - self.push.last_push[rows[doubted]]) / period
            self._push_failed = (ids[doubted], share[doubted], since, doubt[doubted])
            blank = (doubt > 0.5) & ~self.decay.learned_at(ids)
            if blank.any():
                self._relearn = ids[blank]
        # u is computed again where the share counted on moved by more than a rounding: the
        # probability of a failure moves a little at every selection for every silent source
        moved = np.abs(rel - self._push_used[ids]) > self.PUSH_SHARE_STEP
        moved |= (rel == 0.0) != (self._push_used[ids] == 0.0)
        if moved.any():
            self._push_used[ids[moved]] = rel[moved]
            self._estimates_changed(ids[moved])

    def _poll_evidence(self, obs, sel, src, t) -> np.ndarray | None:
        """Polls of sources that push are evidence of what their hub missed; returns the
        entries pushed since each polled source's previous poll (None: no source polled
        pushes), which the rate update counts with the poll's own."""
        pushing = self.push_rows.has(src)
        if not pushing.any():
            return None
        rows = self.push_rows.rows(src[pushing])
        at = np.flatnonzero(sel)[pushing]
        if obs.item_offsets is not None:
            off, idx = segment_rows(obs.item_offsets, at)
            published = obs.item_published[idx]
        else:                                   # counts only: every new entry is a miss
            off = np.concatenate([[0], np.cumsum(obs.new_items[at])])
            published = np.full(int(off[-1]), np.nan)
        _, pushed = self.push.update_polls(rows, t[pushing], off, published,
                                           since=self.rates.last_time[src[pushing]],
                                           listed_from=obs.listed_from[at])
        extra = np.zeros(src.shape[0])
        extra[pushing] = pushed
        return extra

    # -- health -----------------------------------------------------------------------------
    def repair(self, ids=None) -> np.ndarray:
        """Sources whose estimators hold unusable numbers (``VectorEstimator.invalid``) or,
        when every source is checked, whose (alpha, u) are not finite and in range, go back
        to their priors: evidence forgotten, unexplored again (so the optimistic priority of
        a new source brings them back soon). Returns the ids reset."""
        full = ids is None
        ids = np.arange(self.n) if full else distinct(np.asarray(ids, dtype=np.int64))
        ids = ids[(ids >= 0) & (ids < self.n)]
        bad = np.isinf(self.last_epoch[ids]) | np.isinf(self.added_epoch[ids])
        for estimator in self._row_children().values():
            bad |= estimator.invalid(ids)
        pages = self.page_rows.has(ids)
        if pages.any():
            rows = self.page_rows.rows(ids[pages])
            bad[pages] |= self.changes.invalid(rows) | self.importance.invalid(rows)
        pushing = self.push_rows.has(ids)
        if pushing.any():
            bad[pushing] |= self.push.invalid(self.push_rows.rows(ids[pushing]))
        if full and ids.size:
            with np.errstate(all="ignore"):
                alpha, u = self.parameters()
            bad |= ~((alpha[ids] >= 0) & (alpha[ids] <= 1) & (u[ids] >= 0)
                     & np.isfinite(u[ids]))
        out = ids[bad]
        if out.size:
            self._reset_sources(out)
        return out

    def _reset_sources(self, ids: np.ndarray) -> None:
        for estimator in self._row_children().values():
            estimator.reset(ids)
        pages = self.page_rows.has(ids)
        if pages.any():
            rows = self.page_rows.rows(ids[pages])
            self.changes.reset(rows)
            self.importance.reset(rows)
        pushing = self.push_rows.has(ids)
        if pushing.any():
            self.push.reset(self.push_rows.rows(ids[pushing]))
        self.kind[ids] = UNKNOWN
        self._estimates_changed(ids)
        self.last_epoch[ids] = np.nan
        self.history_epoch[ids] = np.nan
        self.added_epoch[ids] = np.where(np.isinf(self.added_epoch[ids]), np.nan,
                                         self.added_epoch[ids])
        self._pruning.forget()

    # -- outputs for the Scrapy glue --------------------------------------------------------
    def estimates(self) -> dict[str, np.ndarray]:
        """Current estimates and their standard errors, arrays over sources (a page's change
        rate and importance: their prior where the source was never seen as a page)."""
        alpha, u = self.parameters()
        lo, hi = self.rates.interval(0.9)
        period = float(self.problem.period)
        change, change_std = np.full(self.n, np.nan), np.full(self.n, np.nan)
        importance, importance_std = self.values.m0.copy(), np.full(self.n, np.nan)
        ids = np.flatnonzero(self.page_rows.has())
        if ids.size:
            rows = self.page_rows.rows(ids)
            change[ids] = self.changes.mean()[rows] / period
            change_std[ids] = self.changes.std()[rows] / period
            importance[ids] = self.importance.mean()[rows]
            importance_std[ids] = self.importance.std()[rows]
        return {
            "rate": self.rates.mean(), "rate_std": self.rates.std(),
            "rate_lo90": lo, "rate_hi90": hi,
            "mean_utility": self.values.mean(), "mean_utility_std": self.values.std(),
            "decay": self.decay.mean(), "decay_std": self.decay.std(),
            "change_rate": change, "change_rate_std": change_std,
            "importance": importance, "importance_std": importance_std,
            "alpha": alpha, "u": u, "kind": self.kind.copy(),
            "missed": self.rates.missed.astype(np.float64),
            "push_share": self._push_shares(),
        }

    def _push_shares(self) -> np.ndarray:
        """The share of each source's new entries its pushes deliver (0: no push)."""
        out = np.zeros(self.n)
        if self.push.n:
            ids = self._pushing_sources()
            out[ids] = self.push.share_at(np.arange(ids.shape[0]))
        return out

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
        self._u.forget()
        self._population_stamp += 1
        self._population_cache = None
        self.group[self.n - n_new:] = self._groups_of(np.arange(self.n - n_new, self.n))
        self.rates.grow(n_new)
        self.decay.grow(n_new)
        self.values.grow(n_new, prior_mean=weights)
        self.page_rows.grow(n_new)
        self.push_rows.grow(n_new)
        if self.model == "pages":
            self.page_rows.rows(np.arange(self.n - n_new, self.n), create=True)

    def global_state(self) -> dict[str, Any]:
        return {**super().global_state(), "model": self.model}

    def load_global_state(self, state: dict[str, Any]) -> None:
        super().load_global_state(state)
        self.model = state.get("model", self.model)
