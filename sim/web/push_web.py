"""Ephemeral content with push: the stochastic model of ``sim.web.ephemeral`` where some sources
also push their new entries through a hub (``sim.web.hub.HubModel``).

Items arrive at source i as a Poisson process of rate Lambda_i, base utility Exponential with
mean xi_i, worth xi exp(-mu_i age) when captured (as in ``sim.web.ephemeral``). An item is captured
once, by whichever comes first:

* a poll of its source (``step(action)`` at time t T): every item published since the source's
  previous poll that was not delivered by push before t T, at its value at t T;
* a push delivery at its delivery time, at its value then, at no crawl cost.

Epoch t: the polls of ``action`` happen at t T, then the hub's deliveries of [t T, (t + 1) T)
are returned in ``info["pushes"]``, an ``Observation`` whose rows are deliveries (source,
time, 1 new entry with its publication time and base value, or 0 for a push that brought
nothing new: a duplicate, a spurious push, or the late push of an entry a poll found first),
in time order, for the policy's ``observe_push``. The step's reward is what polls and pushes
captured; ``info["poll_reward"]`` and ``info["push_reward"]`` split it.

Drawing. The items a hub will deliver are drawn when they are published (one epoch at a time,
for the pushing sources only, a thinned Poisson process of rate Lambda (1 - loss) until the hub
goes down) and wait "in flight" until delivered or polled; every other item (a non-pushing
source's, a lost one, one published after the hub went down or, on a warm web, before time 0)
is drawn lazily when its source is polled, over the span since the previous poll, piece by
piece at its rate: Lambda before 0, Lambda loss (pushing, hub up) or Lambda after. So a step
costs O(crawled sources + items drawn), and a run without hub (``hub=None``) is the
stochastic ``sim.web.ephemeral`` model itself.

Start: "warm" (news scenarios) or "empty", as in ``sim.web.ephemeral``; the hub starts at time 0.
Neither a feed window nor a lifetime is modelled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.problem import Problem, SourceParams
from sim.web.ephemeral import (
    SourcesEnv,
    check_action,
    check_start,
    check_warm,
    stationary_state,
    stock_depth,
)
from sim.web.hub import HubModel

_E = np.zeros(0)


class PushWeb(SourcesEnv):
    """N sources of ephemeral content, ``pushing`` of them through ``hub`` (see the module
    docstring); Gymnasium-style like ``sim.web.ephemeral.EphemeralWeb``."""

    def __init__(self, params: SourceParams, budget: float, hub: HubModel | None,
                 pushing: np.ndarray | None = None, cost=None, start: str = "empty",
                 stochastic: bool = True) -> None:
        if not stochastic:
            raise ValueError("PushWeb draws items: it has no deterministic mode")
        if not (np.isfinite(budget) and budget > 0):
            raise ValueError(f"budget ({budget!r}) must be > 0")
        self.params = params
        self.budget = float(budget)
        self.hub = hub
        self.start = check_start(start)
        n = params.n
        if pushing is None:
            pushing = np.zeros(n, dtype=bool) if hub is None else hub.pushers(n)
        self.pushing = np.asarray(pushing, dtype=bool)
        if self.pushing.shape != (n,):
            raise ValueError(f"pushing must hold one bool per source ({n})")
        warm = start == "warm"
        if warm:
            check_warm(params, None, None)
        self._depth = stock_depth(params, None, None) if warm else np.zeros(n)
        self._problem = Problem.from_params(
            params, cost=cost, initial_state=stationary_state(params) if warm else None)
        self._rng: np.random.Generator | None = None
        self.epoch = 0

    @property
    def n(self) -> int:
        return self.params.n

    def reset(self, *, seed: int | None = None) -> tuple[Observation, dict[str, Any]]:
        self._rng = np.random.default_rng(seed)
        self._last = -self._depth.copy()          # time of each source's previous poll
        self._flight = (np.zeros(0, dtype=np.int64), _E, _E, _E)   # source, pub, xi, due
        self._ghost = (np.zeros(0, dtype=np.int64), _E)            # empty pushes: source, due
        self.epoch = 0
        return Observation.empty(0), {}

    # -- one epoch ----------------------------------------------------------------------------
    def step(self, action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        if self._rng is None:
            raise RuntimeError("call reset(seed=...) before step()")
        ids = check_action(action, self.n, self.cost, self.budget)
        t = self.epoch
        period = self.params.period
        now = t * period
        obs = self._poll(ids, t, now)
        self._publish(now, now + period)
        pushes = self._deliver(t, now + period)
        self.epoch = t + 1
        poll, push = obs.total_reward, float(pushes.reward.sum())
        info = {"pushes": pushes, "poll_reward": poll, "push_reward": push}
        return obs, poll + push, False, False, info

    def _miss_rate(self, ids: np.ndarray) -> np.ndarray:
        """The share of a source's arrivals the hub does not deliver while it is up."""
        if self.hub is None:
            return np.ones(ids.shape[0])
        return np.where(self.pushing[ids], self.hub.loss, 1.0)

    def _poll(self, ids: np.ndarray, t: int, now: float) -> Observation:
        p, rng = self.params, self._rng
        last = self._last[ids]
        down = np.inf if self.hub is None else self.hub.down
        # the pieces of (last, now): before 0, from 0 while the hub is up, after it is down
        a0, a1 = last, np.minimum(now, 0.0)
        b0, b1 = np.maximum(last, 0.0), np.minimum(now, down)
        c0, c1 = np.maximum(last, max(down, 0.0)), np.full(ids.shape[0], now)
        rate = p.rate[ids]
        starts = np.stack([a0, b0, c0], axis=1)
        lengths = np.maximum(np.stack([a1 - a0, b1 - b0, c1 - c0], axis=1), 0.0)
        rates = np.stack([rate, rate * self._miss_rate(ids), rate], axis=1)
        counts = rng.poisson(rates * lengths)
        pub = np.repeat(starts.ravel(), counts.ravel())
        pub += rng.uniform(0.0, 1.0, pub.shape[0]) * np.repeat(lengths.ravel(), counts.ravel())
        owner = np.repeat(np.arange(ids.shape[0]), counts.sum(axis=1))
        xi = rng.standard_exponential(pub.shape[0]) * p.mean_utility[ids][owner]
        # the items in flight that the poll finds first; their push comes later, empty
        fs, fp, fx, fd = self._flight
        if fs.size:
            polled = np.zeros(self.n, dtype=bool)
            polled[ids] = True
            taken = polled[fs] & (fp < now)
            if taken.any():
                pos = np.full(self.n, -1, dtype=np.int64)
                pos[ids] = np.arange(ids.shape[0])
                owner = np.concatenate([owner, pos[fs[taken]]])
                pub = np.concatenate([pub, fp[taken]])
                xi = np.concatenate([xi, fx[taken]])
                gs, gd = self._ghost
                self._ghost = (np.concatenate([gs, fs[taken]]), np.concatenate([gd, fd[taken]]))
                self._flight = (fs[~taken], fp[~taken], fx[~taken], fd[~taken])
        order = np.argsort(owner, kind="stable")
        owner, pub, xi = owner[order], pub[order], xi[order]
        value = xi * np.exp(-p.decay[ids][owner] * (now - pub))
        per = np.bincount(owner, minlength=ids.shape[0])
        off = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(per, out=off[1:])
        self._last[ids] = now
        return Observation(epoch=t, sources=ids, time=now, new_items=per,
                           reward=np.bincount(owner, weights=value, minlength=ids.shape[0]),
                           item_offsets=off, item_published=pub, item_value=xi)

    def _publish(self, t0: float, t1: float) -> None:
        """The items the hub will deliver, published in [t0, t1), into flight; the
        duplicates and spurious pushes of that span, as empty pushes."""
        hub = self.hub
        if hub is None or not self.pushing.any():
            return
        end = min(t1, hub.down)
        if end <= t0:
            return
        rng, p = self._rng, self.params
        src = np.flatnonzero(self.pushing)
        k = rng.poisson(p.rate[src] * (1.0 - hub.loss) * (end - t0))
        s = np.repeat(src, k)
        pub = t0 + rng.uniform(0.0, end - t0, s.shape[0])
        xi = rng.standard_exponential(s.shape[0]) * p.mean_utility[s]
        due = pub + hub.delays(rng, s.shape[0])
        fs, fp, fx, fd = self._flight
        self._flight = (np.concatenate([fs, s]), np.concatenate([fp, pub]),
                        np.concatenate([fx, xi]), np.concatenate([fd, due]))
        extra_s, extra_d = [], []
        if hub.duplicate > 0 and s.size:
            twice = rng.uniform(size=s.shape[0]) < hub.duplicate
            extra_s.append(s[twice])
            extra_d.append(due[twice] + hub.delays(rng, int(twice.sum())))
        if hub.spurious > 0:
            k = rng.poisson(hub.spurious * (end - t0), src.shape[0])
            extra_s.append(np.repeat(src, k))
            extra_d.append(t0 + rng.uniform(0.0, end - t0, int(k.sum())))
        if extra_s:
            gs, gd = self._ghost
            self._ghost = (np.concatenate([gs, *extra_s]), np.concatenate([gd, *extra_d]))

    def _deliver(self, t: int, until: float) -> Observation:
        """The deliveries due before ``until``, in time order."""
        fs, fp, fx, fd = self._flight
        now_f = fd < until
        self._flight = (fs[~now_f], fp[~now_f], fx[~now_f], fd[~now_f])
        gs, gd = self._ghost
        now_g = gd < until
        self._ghost = (gs[~now_g], gd[~now_g])
        s = np.concatenate([fs[now_f], gs[now_g]])
        when = np.concatenate([fd[now_f], gd[now_g]])
        new = np.concatenate([np.ones(int(now_f.sum()), dtype=np.int64),
                              np.zeros(int(now_g.sum()), dtype=np.int64)])
        pub = np.concatenate([fp[now_f], np.full(int(now_g.sum()), np.nan)])
        xi = np.concatenate([fx[now_f], np.full(int(now_g.sum()), np.nan)])
        order = np.argsort(when, kind="stable")
        s, when, new, pub, xi = s[order], when[order], new[order], pub[order], xi[order]
        value = np.where(new > 0, np.nan_to_num(xi) * np.exp(
            -self.params.decay[s] * np.nan_to_num(when - pub)), 0.0)
        off = np.zeros(s.shape[0] + 1, dtype=np.int64)
        np.cumsum(new, out=off[1:])
        keep = new > 0
        return Observation(epoch=t, sources=s, time=when, new_items=new, reward=value,
                           item_offsets=off, item_published=pub[keep], item_value=xi[keep])

    def __repr__(self) -> str:
        return (f"PushWeb(n={self.n}, budget={self.budget:g}, pushing={int(self.pushing.sum())},"
                f" hub={self.hub}, start={self.start})")
