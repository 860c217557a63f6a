"""The feed windows a learned Whittle policy (``whittle``) learns, and the index of a source
whose window can fill (:mod:`scrapy_whittle.core.window`): a fast feed is crawled before it
overflows."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.learned_pages import PAGE
from scrapy_whittle.core.window import (
    NO_WINDOW,
    SATURATED,
    filling,
    index_at_state,
    steps_to_state,
)


class FeedWindows:
    """The windows of ``policy``'s feeds (an ``AdaptiveWhittlePolicy``: its ``window``
    column, the entries each feed lists, learned; NaN: not known, no window)."""

    def __init__(self, policy) -> None:
        self.policy = policy

    def learn(self, obs: Observation, sel: np.ndarray, src: np.ndarray) -> None:
        """The entries a feed lists, from the crawls that found every listed entry new (its
        window full: ``window_full``): they show exactly as many as it lists. Not from a
        first crawl, which shows everything new too: a feed that lists its whole history
        would look like one with a window of that size."""
        full = obs.window_full[sel] & (obs.new_items[sel] > 0)
        if full.any():
            at = src[full]
            window = self.policy.window
            window[at] = np.fmax(window[at], obs.new_items[sel][full].astype(float))

    def index(self, epoch: int, ids: np.ndarray, x: np.ndarray, u: np.ndarray,
              out: np.ndarray, positions: bool = False, by_state=None) -> None:
        """The index of the explored sources ``ids`` (states ``x``, arrivals ``u``, aligned)
        whose feed window can fill before their next epoch, written into ``out`` (at ``ids``,
        or at their positions among ``ids`` with ``positions``): (k + 1) x_k s_k - k x_{k+1}
        s_{k+1} over the cost (``window.index_at_state``). Every other source keeps the
        paper's index, which this is when no window can fill.

        ``by_state`` (bool, aligned with ``ids``): sources whose state is not the one their
        time since the crawl gives (a daily rhythm's, ``diurnal-whittle``): ranked as the
        source of arrivals u would be at state x, k the epochs it takes to reach it
        (``window.steps_to_state``), at the rate of those arrivals (the learned rate times
        u over the arrivals at that rate), as the paper's index is evaluated at their x
        with u frozen."""
        if not ids.size:
            return
        policy = self.policy
        window = policy.window[ids]
        known = np.isfinite(window) & (window < NO_WINDOW) & (policy.kind[ids] != PAGE)
        if not known.any():
            return
        period = float(policy.problem.period)
        resolution = policy.resolution
        at = np.flatnonzero(known)
        src = ids[at]
        step = period * resolution
        k = np.maximum(epoch - policy.last_epoch[src], 0.0) / resolution       # steps
        rate = policy.rates.mean_at(src)
        mu = policy._decay_rates_at(src)
        if by_state is not None and by_state[at].any():
            k, rate = self._at_state(by_state[at], src, k, rate, x[at], u[at], mu, period)
        # (a saturated source, k = inf, fills as one crawled long ago)
        lasting = np.where(np.isinf(k), SATURATED / np.maximum(mu * step, 1e-300), k)
        fills = filling(lasting, step, rate, window[at])
        if not fills.any():
            return
        at, src, mu = at[fills], src[fills], mu[fills]
        u_step = u[at] * -np.expm1(-mu * step) / np.maximum(-np.expm1(-mu * period), 1e-300)
        u_step = np.where(mu > 0, u_step, u[at] * resolution)
        index = index_at_state(k[fills], x[at], u_step, mu, step, rate[fills], window[at])
        index /= policy.problem.cost[src]
        out[at if positions else src] = index

    def _at_state(self, by_state: np.ndarray, src: np.ndarray, k: np.ndarray, rate: np.ndarray,
                  x: np.ndarray, u: np.ndarray, mu: np.ndarray, period: float
                  ) -> tuple[np.ndarray, np.ndarray]:
        """(steps, rate) of ``index`` where ``by_state``: the age at which the source of
        arrivals ``u`` per epoch holds ``x``, in steps, and the rate of those arrivals (of
        the sources ``src``, aligned)."""
        policy = self.policy
        at = np.flatnonzero(by_state)
        k, rate = k.copy(), rate.copy()
        k[at] = steps_to_state(x[at], u[at], mu[at], period) / policy.resolution
        # the rate whose arrivals are u: the learned rate's arrivals are its u at stationarity
        learned = policy._kept_u()[src[at]]
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(learned > 0, u[at] / learned, 1.0)
        rate[at] = rate[at] * scale
        return k, rate
