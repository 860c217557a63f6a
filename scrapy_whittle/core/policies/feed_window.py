"""The feed windows a learned Whittle policy (``whittle``) learns, and the index of a source
whose window can fill (:mod:`scrapy_whittle.core.window`): a fast feed is crawled before it
overflows."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies.learned_pages import PAGE
from scrapy_whittle.core.window import NO_WINDOW, filling, index_at_state


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
              out: np.ndarray, positions: bool = False, rates=None) -> None:
        """The index of the explored sources ``ids`` (states ``x``, arrivals ``u``, aligned)
        whose feed window can fill before their next epoch, written into ``out`` (at ``ids``,
        or at their positions among ``ids`` with ``positions``): (k + 1) x_k s_k - k x_{k+1}
        s_{k+1} over the cost (``window.index_at_state``). Every other source keeps the
        paper's index, which this is when no window can fill.

        ``rates``: callable(sources, rate, step) -> (the mean rate since each source's last
        crawl, the mean rate until the end of the next ``step``), given the learned ``rate``
        (a daily rhythm's, ``diurnal-whittle``); default that rate for both."""
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
        k = np.maximum(epoch - policy.last_epoch[src], 0.0)
        step = period * resolution
        rate = rate_next = policy.rates.mean_at(src)
        if rates is not None:
            rate, rate_next = rates(src, rate, step)
        fills = filling(k / resolution, step, rate_next, window[at])
        if not fills.any():
            return
        at, src = at[fills], src[fills]
        mu = policy._decay_rates_at(src)
        u_step = u[at] * -np.expm1(-mu * step) / np.maximum(-np.expm1(-mu * period), 1e-300)
        u_step = np.where(mu > 0, u_step, u[at] * resolution)
        index = index_at_state(k[fills] / resolution, x[at], u_step, mu, step,
                               rate[fills], window[at], rate_next[fills])
        index /= policy.problem.cost[src]
        out[at if positions else src] = index
