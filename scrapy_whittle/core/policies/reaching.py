"""The threshold form of a learned Whittle policy's choice (``whittle``) when it decides
several times an epoch: the sources whose priority may have reached a threshold a little
below the last cut-off are found with one comparison of kept epochs, and only their
priorities are computed (:class:`ReachingTop`), where every source's value waiting would
be computed otherwise."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.dynamics import geometric_sum, refine
from scrapy_whittle.core.index import epochs_to_reach
from scrapy_whittle.core.policies.fresh_classes import FreshClasses
from scrapy_whittle.core.policies.learned_pages import PAGE
from scrapy_whittle.core.selection import select_top
from scrapy_whittle.core.window import NO_WINDOW


class ReachEpochs:
    """Per source, the epoch before which its priority stays below a threshold, kept between
    selections.

    ``compute(ids, threshold)`` gives those epochs (an index array, or ``slice(None)``:
    every source; -inf where a source must always be looked at, inf where it never reaches
    the threshold under its estimates), each from that source's state alone; sources whose
    state changed are computed again at their next use (``changed``), every source after
    ``reset``. ``token``: what the epochs were computed under besides the sources' states
    (the caller's, compared by identity)."""

    __slots__ = ("_compute", "_epochs", "_stale", "threshold", "token")

    def __init__(self, compute) -> None:
        self._compute = compute
        self._epochs: np.ndarray | None = None
        self._stale: list[np.ndarray] = []
        self.threshold: float | None = None
        self.token = None

    @property
    def ready(self) -> bool:
        return self._epochs is not None

    def reset(self, threshold: float, token=None) -> None:
        """Every source's epoch at ``threshold``."""
        self.threshold, self.token = float(threshold), token
        self._epochs, self._stale = self._compute(slice(None), self.threshold), []

    def reaching(self, epoch: float, eligible: np.ndarray | None = None) -> np.ndarray:
        """The (eligible) sources whose priority may reach the threshold at ``epoch``,
        sorted."""
        if self._stale:
            ids = np.concatenate(self._stale)      # (a repeated id is computed alike twice)
            self._stale = []
            self._epochs[ids] = self._compute(ids, self.threshold)
        keep = self._epochs <= epoch
        if eligible is not None:
            keep &= eligible
        return np.flatnonzero(keep)

    def changed(self, ids) -> None:
        """The state of sources ``ids`` changed."""
        if self._epochs is not None:
            self._stale.append(np.asarray(ids, dtype=np.int64).reshape(-1))

    def forget(self) -> None:
        """Nothing kept: the next use resets."""
        self._epochs, self._stale, self.threshold, self.token = None, [], None, None


class ReachingTop:
    """``select_top``'s choice of ``policy`` (an ``AdaptiveWhittlePolicy`` deciding several
    times an epoch), from the sources whose priority may have reached a threshold ``MARGIN``
    below the last cut-off.

    A source's index grows while it waits (``index.epochs_to_reach``), and so does its value
    waiting, x, which bounds it (and is the priority of a source never crawled): each
    source's epoch of reaching the threshold is kept (``ReachEpochs``), computed again for
    the sources a crawl or new estimates changed, for those never crawled when the
    population's prior moves (once an epoch), and for all where the cut-off moved out of the
    threshold's reach. A step then computes the priorities of the sources whose epoch has
    come only. The choice is ``select_top``'s over every priority whenever its M-th priority
    clears the threshold, since every other source's priority is below it; :meth:`top` says
    None otherwise (the caller computes in full), where the bound is not this one (a hub that
    may have failed), where the crawl has not begun learning, and where most sources reach
    the threshold."""

    #: the threshold lies this share below the last cut-off
    MARGIN = 0.05
    #: above this share of the sources reaching it (those never crawled, alike, at a crawl's
    #: start), ranking them here costs more than the caller's passes over every source
    MAX_SHARE = 0.5

    def __init__(self, policy) -> None:
        self.policy = policy
        self.epochs = ReachEpochs(self._epochs_at)
        self.classes = FreshClasses()
        self._classes_built = False
        self.decisions = 0                     # choices made here (diagnostics)
        self.by_class = 0                      # of them, with classes of sources never crawled

    def changed(self, ids) -> None:
        self.classes.changed(ids)
        self.epochs.changed(ids)

    def forget(self) -> None:
        self.epochs.forget()
        self.classes.forget(0)
        self._classes_built = False

    def top(self, epoch: float, budget: float, eligible, k: int) -> np.ndarray | None:
        """The top ``k`` sources (unit costs) at ``epoch``, or None: see the class."""
        policy = self.policy
        cut = policy._pruning.cut
        if (policy.resolution == 1.0 or policy.pushes.failed is not None or cut is None
                or not cut > 0):
            return None
        reach = self.epochs
        pooled = policy.population_prior(epoch)
        if (not reach.ready or reach.threshold > cut
                or reach.threshold < cut * (1.0 - 2.0 * self.MARGIN)):
            if not policy.explored().any():
                return None                     # nothing learned: the prior is not in use
            if not self._classes_built:
                self._build_classes()
            reach.reset(cut * (1.0 - self.MARGIN), pooled)
        elif reach.token is not pooled:         # a new prior: the sources never crawled
            reach.token = pooled
            fresh = ~policy.explored()
            if self.classes.ready:
                fresh &= ~self.classes.in_class(slice(None))
            reach.changed(np.flatnonzero(fresh))
        cand = reach.reaching(epoch, eligible)
        classed = self.classes.ready
        if classed:
            before = cand.shape[0]
            extra = self.classes.candidates(epoch, pooled, k, eligible)
            if extra.size:
                cand = np.sort(np.concatenate([cand, extra]))
            classed = cand.shape[0] > before
        if not k <= cand.shape[0] <= self.MAX_SHARE * policy.n:
            return None
        x, u, explored = self._expected_at(epoch, cand, pooled)
        prio = x.copy()                       # unexplored: x / C (C = 1), no index needed
        at = np.flatnonzero(explored)
        if at.size:
            src = cand[at]
            index = policy._table(src, u[at], 1.0).index_where_unsaturated(x[at])
            policy._window_index(epoch, src, x[at], u[at], index, positions=True)
            prio[at] = index
        top = select_top(prio, None, budget)
        if top.shape[0] < k or not prio[top[-1]] >= reach.threshold:
            return None
        policy._pruning.cut = float(prio[top[-1]])
        self.decisions += 1
        self.by_class += classed
        return cand[top]

    def _build_classes(self) -> None:
        """The sources never crawled, in classes by what their priority is made of
        (``FreshClasses``; ``_expected_at``)."""
        policy = self.policy
        self._classes_built = True
        ids = np.flatnonzero(~policy.explored())
        added = policy.added_epoch[ids]
        params = np.column_stack([policy._kept_u()[ids],
                                  np.where(np.isnan(added), -np.inf, added),
                                  policy.values.m0[ids], policy.problem.cost[ids]])
        self.classes.build(ids, params, policy.group[ids], policy.n)

    def _expected_at(self, epoch: float, ids: np.ndarray, pooled: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, u, explored) of sources ``ids``, each x as ``_expected_polled`` computes it
        where some source has been explored (``pooled``: the population's prior)."""
        policy = self.policy
        u = policy._kept_u()[ids]
        explored = self._explored(ids)
        added = policy.added_epoch[ids]
        x = u * np.maximum(epoch - np.where(np.isnan(added), epoch, added), 0.0)
        if not explored.all():
            prior_x = policy.values.m0[ids] * pooled[policy.group[ids]] * policy.problem.cost[ids]
            x = np.where(~explored & (prior_x > x), prior_x, x)
        at = np.flatnonzero(explored)
        if at.size:
            k = np.maximum(epoch - policy.last_epoch[ids[at]], 0.0)
            _, log_alpha, one_minus = policy._alphas_at(ids[at], with_alpha=False)
            with np.errstate(divide="ignore", invalid="ignore"):
                x[at] = u[at] * geometric_sum(k, log_alpha, one_minus)
        return x, u, explored

    def _explored(self, ids) -> np.ndarray:
        """``policy.explored()[ids]`` (``ids``: an index array or ``slice(None)``)."""
        policy = self.policy
        if isinstance(ids, slice):
            return policy.explored()
        out = policy._explored_at(ids)
        if policy.pushes.relearn is not None:
            out &= ~np.isin(ids, policy.pushes.relearn)
        return out

    def _epochs_at(self, ids, threshold: float) -> np.ndarray:
        """The epoch before which the priority of each of sources ``ids`` (an index array or
        ``slice(None)``) stays below ``threshold``, a little early. An explored source's from
        its index after its last crawl, at the decision step's (``index.epochs_to_reach``);
        where its feed window is known (whose index is the window's), from its x: u G_k =
        threshold, k = log(1 - threshold (1 - alpha) / u) / log alpha epochs after its last
        crawl (threshold / u where alpha = 1; never where what x saturates at is below); one
        never crawled from its x, u times the epochs since it was added, or now where the
        population's prior clears the threshold. -inf (always looked at) where a number is
        not finite; inf for the sources in a class (those are looked at by class)."""
        policy = self.policy
        u = policy._kept_u()[ids]
        explored = self._explored(ids)
        _, log_alpha, one_minus = policy._alphas_at(ids, with_alpha=False)
        low = threshold * (1.0 - 1e-6)              # the rounding of what is inverted
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            share = low * one_minus / u
            k = np.where(one_minus > 0, np.log1p(-share) / log_alpha, low / u)
            k = np.where((one_minus > 0) & (share >= 1.0), np.inf, k)
            k = np.where(u > 0, k, np.inf)
            window = policy.window[ids]
            windowed = np.isfinite(window) & (window < NO_WINDOW) & (policy.kind[ids] != PAGE)
            indexed = np.flatnonzero(explored & ~windowed)
            if indexed.size:
                resolution = policy.resolution
                log_r, one_minus_r, u_r = refine(log_alpha[indexed], one_minus[indexed],
                                                 u[indexed], resolution)
                k[indexed] = epochs_to_reach(log_r, one_minus_r, u_r, low,
                                             k[indexed] / resolution) * resolution
            crawled = policy.last_epoch[ids] + k
            fresh = np.where(u > 0, policy.added_epoch[ids] + low / u, np.inf)
            pooled = self.epochs.token               # the prior reset() was given
            if pooled is not None:
                prior_x = (policy.values.m0[ids] * pooled[policy.group[ids]]
                           * policy.problem.cost[ids])
                fresh = np.where(prior_x >= low, -np.inf, fresh)
        out = np.where(explored, crawled, fresh)
        out[np.isnan(out)] = -np.inf
        if self.classes.ready:
            out[self.classes.in_class(ids)] = np.inf
        return out
