"""Replaying recorded publication times: sources whose items come from a CSV trace.

The trace's format (the CSV, read and written, and the :class:`Trace` record) is the product's,
:mod:`scrapy_whittle.report.trace`: ``scrapy whittle trace`` writes it from a crawl's own
history. Its time unit is the replay's (the unit of ``period``, ``decay`` and ``lifetime``);
where an item has no utility, ``default_utility`` is used for the reward and the observation
reports NaN (the crawler did not see it).

The replay speaks the same language as the stochastic :class:`sim.web.ephemeral.EphemeralWeb`:
epoch t starts at time ``start + t T`` (``start`` defaults to the first timestamp); a crawl
captures the items published since the source's previous crawl and before the crawl, each worth
xi exp(-mu age) at capture, with the same ``window`` and ``lifetime`` rules; the observation
carries their publication times (newest first) and base utilities. Items published before
``start`` are waiting at reset. Nothing is random: ``reset(seed=...)`` accepts a seed for API
compatibility and ignores it. ``truncated`` turns true once an epoch starts after the last item.

Users' measures (``sim.bench.measures``), as :class:`sim.web.ephemeral.EphemeralWeb`
reports them, but exact: ``info["missed_items"]`` counts the items published since ``start``
(``time_origin``) that a crawl found gone (pushed out of the window, or past the lifetime)
before any crawl captured them; ``outstanding()`` settles every source at the current epoch's
start.

``problem`` knows no oracle parameters (alpha, u) unless ``params`` (a :class:`SourceParams`
aligned with ``names``) is given: a trace has no "true" rate. ``fitted_params()`` gives the
empirical ones (rate = items / trace duration, mean utility, the given decay) for oracle
baselines; they are estimates, not the process that generated the trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.problem import Problem, SourceParams
from scrapy_whittle.report.trace import Trace, read_trace
from sim.web.ephemeral import SourcesEnv, check_action


class TraceReplay(SourcesEnv):
    """Replay a trace of publications as N sources under a crawl budget, Gymnasium-style.

    trace: a path to the CSV, an open text file, lines, or a :class:`Trace`.
    budget: cost units per epoch.
    decay: mu, interest decay rate per time unit: a scalar, a mapping name -> mu, or an array
        aligned with ``names``.
    period: T, epoch length in the trace's time unit.
    cost, window, lifetime: as in :class:`sim.web.ephemeral.EphemeralWeb`.
    start: time of epoch 0 (default: the first timestamp).
    default_utility: base utility of an item with no utility in the trace.
    params: oracle parameters aligned with ``names`` for ``problem`` (default: none known).
    time_unit_seconds: length of the time unit, for ISO 8601 timestamps (default one hour).
    """

    def __init__(self, trace, budget: float, decay: float | Mapping[str, float] | Any = 0.0,
                 period: float = 1.0, cost=None, window: int | None = None,
                 lifetime: float | None = None, start: float | None = None,
                 default_utility: float = 1.0, params: SourceParams | None = None,
                 time_unit_seconds: float = 3600.0) -> None:
        if not isinstance(trace, Trace):
            trace = read_trace(trace, time_unit_seconds)
        if not (np.isfinite(budget) and budget > 0):
            raise ValueError(f"budget ({budget!r}) must be > 0")
        if not (np.isfinite(period) and period > 0):
            raise ValueError(f"period ({period!r}) must be > 0")
        if window is not None and (int(window) != window or window < 1):
            raise ValueError(f"window ({window!r}) must be a positive integer or None")
        if lifetime is not None and not (lifetime > 0):
            raise ValueError(f"lifetime ({lifetime!r}) must be > 0 or None")
        self.trace = trace
        self.names = trace.names
        n = len(self.names)
        if isinstance(decay, Mapping):
            missing = [name for name in self.names if name not in decay]
            if missing:
                raise ValueError(f"decay has no value for sources {missing[:5]}")
            mu = np.array([float(decay[name]) for name in self.names])
        else:
            mu = np.broadcast_to(np.asarray(decay, dtype=np.float64), (n,)).copy()
        if not (np.all(np.isfinite(mu)) and np.all(mu >= 0)):
            raise ValueError("decay must be finite and >= 0")
        if params is not None and params.n != n:
            raise ValueError(f"params describe {params.n} sources, the trace has {n}")
        self.decay = mu
        self.budget = float(budget)
        self.period = float(period)
        self.window = None if window is None else int(window)
        self.lifetime = None if lifetime is None else float(lifetime)
        self.default_utility = float(default_utility)
        self.params = params
        self.start = float(trace.time.min()) if start is None else float(start)
        if params is not None:
            self._problem = Problem.from_params(params, cost=cost)
        else:
            self._problem = Problem(n=n, cost=cost, period=self.period)
        # Search keys: time shifted to [0, H], plus source * S, increasing along the sorted items.
        rel = trace.time - self.start
        self._lo = min(float(rel.min()), 0.0)
        self._h = float(rel.max()) - self._lo
        self._stride = self._h + 2.0
        self._keys = (rel - self._lo) + trace.source * self._stride
        self._offsets = np.searchsorted(trace.source, np.arange(n + 1))
        self._value = np.where(np.isnan(trace.utility), self.default_utility, trace.utility)
        self._ptr = self._offsets[:-1].copy()
        self.epoch = 0

    @property
    def n(self) -> int:
        return len(self.names)

    def source_id(self, name: str) -> int:
        i = int(np.searchsorted(self.names, name))
        if i >= self.n or self.names[i] != name:
            raise KeyError(name)
        return i

    def fitted_params(self) -> SourceParams:
        """Empirical parameters: items per time unit over the trace, mean base utility."""
        duration = max(self._h, self.period)
        counts = np.diff(self._offsets)
        sums = np.bincount(self.trace.source, weights=self._value, minlength=self.n)
        xi = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
        return SourceParams(rate=counts / duration, mean_utility=xi, decay=self.decay,
                            period=self.period)

    @property
    def time_origin(self) -> float:
        return self.start

    def reset(self, *, seed: int | None = None) -> tuple[Observation, dict[str, Any]]:
        self._ptr = self._offsets[:-1].copy()
        self.epoch = 0
        return Observation.empty(0), {}

    def _index(self, ids: np.ndarray, rel_time: float, side: str) -> np.ndarray:
        q = min(max(rel_time - self._lo, -0.5), self._h + 1.0)
        return np.searchsorted(self._keys, q + ids * self._stride, side=side)

    def _visible(self, ids: np.ndarray, rel_now: float):
        """For sources ``ids`` at ``rel_now`` (time since ``start``): (begin, end, lost,
        full): the items a crawl would capture are ``begin:end`` (alive and in the window),
        ``lost`` of those published since ``start`` and since the last crawl are gone, and
        ``full``: the window was full."""
        end = self._index(ids, rel_now, "left")            # first item at or after the crawl
        begin = self._ptr[ids]
        if self.lifetime is not None:                        # alive: age < lifetime
            begin = np.maximum(begin, self._index(ids, rel_now - self.lifetime, "right"))
        begin = np.minimum(begin, end)
        full = np.zeros(ids.shape[0], dtype=bool)
        if self.window is not None:
            full = end - begin >= self.window
            begin = np.maximum(begin, end - self.window)
        since = np.minimum(np.maximum(self._ptr[ids], self._index(ids, 0.0, "left")), end)
        return begin, end, np.maximum(begin, since) - since, full

    def step(self, action) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        ids = check_action(action, self.n, self.cost, self.budget)
        t = self.epoch
        rel_now = t * self.period
        begin, end, lost, full = self._visible(ids, rel_now)
        counts = end - begin
        off = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        rank = np.arange(off[-1]) - np.repeat(off[:-1], counts)
        idx = np.repeat(end - 1, counts) - rank               # newest first
        published = self.trace.time[idx]
        age = (rel_now + self.start) - published
        captured = self._value[idx] * np.exp(-self.decay[self.trace.source[idx]] * age)
        reward = np.bincount(np.repeat(np.arange(ids.shape[0]), counts), weights=captured,
                             minlength=ids.shape[0])
        self._ptr[ids] = np.maximum(self._ptr[ids], end)
        self.epoch = t + 1
        obs = Observation(epoch=t, sources=ids, time=self.start + rel_now, new_items=counts,
                          reward=reward, window_full=full, item_offsets=off,
                          item_published=published, item_value=self.trace.utility[idx])
        truncated = rel_now > self._h + self._lo
        return obs, obs.total_reward, False, bool(truncated), {"missed_items": int(lost.sum())}

    def outstanding(self) -> dict[str, int]:
        """Settle every source at the start of the current epoch: the items published since
        ``start`` and since its last crawl (``published``), and how many of them are gone
        (``missed``)."""
        ids = np.arange(self.n)
        rel_now = self.epoch * self.period
        _, end, lost, _ = self._visible(ids, rel_now)
        since = np.maximum(self._ptr, self._index(ids, 0.0, "left"))
        return {"published": int(np.maximum(end - since, 0).sum()), "missed": int(lost.sum())}

    def __repr__(self) -> str:
        return f"TraceReplay(n={self.n}, items={self.trace.time.shape[0]}, budget={self.budget:g})"
