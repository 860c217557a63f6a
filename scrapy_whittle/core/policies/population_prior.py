"""The price a learned Whittle policy (``whittle``) puts on the sources it never crawled: the
population's expected index (``scrapy_whittle.core.population``), kept between selections, and
the history start each source's first useful crawl showed, which that expectation needs."""

from __future__ import annotations

import math

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.population import (
    expected_index,
    history_start,
    oldest_listed,
    sample_of,
)


class PopulationPrior:
    """The population prior of ``policy`` (an ``AdaptiveWhittlePolicy``: its ``group`` and
    ``history_epoch`` columns, estimates and ``resolution``), computed again only when the
    estimates (``changed``) or the epoch change."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self._cache: tuple[float, int, np.ndarray, int] | None = None
        self._stamp = 0

    def changed(self) -> None:
        """Some source's estimates changed: the prior is computed again at the next epoch
        (within one, with decision steps, it is kept: see ``at``)."""
        self._stamp += 1

    def forget(self) -> None:
        """Everything changed (sources added, a state imported, the value unit moved)."""
        self._stamp += 1
        self._cache = None

    def at(self, epoch: int, explored: np.ndarray | None = None) -> np.ndarray:
        """Per pooling group, the expected index at ``epoch`` of a source never crawled, per
        unit of prior weight and cost (``scrapy_whittle.core.population``), from the sources
        learned so far; NaN where none was. Kept until the estimates or the epoch change; with
        decision steps (``resolution`` < 1) for the whole epoch: an average over the learned
        sources moves little within one, and every step would pay a pass over them."""
        policy = self.policy
        cached = self._cache
        if cached is not None and (cached[:2] == (epoch, self._stamp) or (
                policy.resolution < 1.0 and cached[3] == math.floor(epoch))):
            return cached[2]
        if explored is None:
            explored = policy.explored()
        n_groups = int(policy.group.max()) + 1 if policy.n else 1
        ids = sample_of(np.flatnonzero(explored & np.isfinite(policy.history_epoch)))
        _, log_alpha, one_minus = policy._alphas_at(ids, with_alpha=False)
        out = expected_index(epoch, log_alpha, one_minus, policy._kept_u()[ids],
                             policy.history_epoch[ids], policy.values.m0[ids],
                             policy.group[ids], n_groups)
        self._cache = (epoch, self._stamp, out, math.floor(epoch))
        return out

    def note_history(self, obs: Observation, sel: np.ndarray, first: np.ndarray) -> None:
        """The history start of the sources whose first useful crawl is among the crawls
        ``sel`` (``first``, aligned with them): the oldest entry with a date it listed."""
        policy = self.policy
        src, t = obs.sources[sel], obs.time[sel]
        oldest = oldest_listed(obs, sel)
        start = history_start(obs.epoch, t, float(policy.problem.period), oldest,
                              policy.added_epoch[src])
        policy.history_epoch[src[first]] = start[first]
