"""The crawl's policy as the settings ask for it (``WHITTLE_POLICY``, its options) for the
service's sources, and what an oracle (``WHITTLE_ORACLE_PARAMS``: each source's true
publishing parameters, and its daily rhythm) tells it: at the policy's construction, and
for the sources added later (``Policy.grow``)."""

from __future__ import annotations

import inspect
from collections import defaultdict

import numpy as np

from scrapy_whittle.core.periodic import PeriodicArrivals, arrivals_from_bins
from scrapy_whittle.core.policies import Policy, policy_class
from scrapy_whittle.core.problem import Problem, SourceParams
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from scrapy_whittle.service.decisions.epochs import Timeline
from scrapy_whittle.service.once_log import OnceLog
from scrapy_whittle.service.policy_options import build_policy
from scrapy_whittle.service.sources.source_table import SourceTable


class PolicyFactory:
    """Builds the policy of the sources of ``sources`` (the oracle's parameters by URL:
    ``oracle``, None without one)."""

    def __init__(self, config: WhittleConfig, *, sources: SourceTable, timeline: Timeline,
                 log_once: OnceLog,
                 oracle: dict[str, tuple[float, float, float]] | None = None) -> None:
        self.config = config
        self.sources = sources
        self.timeline = timeline
        self.oracle = oracle
        self._log_once = log_once

    def build(self, n: int) -> Policy:
        """A fresh policy for ``n`` sources."""
        alpha = u = None
        if self.oracle is not None:
            alpha, u = self._au(range(n), strict=True)
        supplied = {}
        cls = policy_class(self.config.core_policy)
        takes = inspect.signature(cls.__init__).parameters
        options = self.config.policy_options
        if "time_unit_hours" in takes and "time_unit_hours" not in options:
            # feed readers' rules count in minutes and hours; the service's unit is the second
            supplied["time_unit_hours"] = 1.0 / 3600.0
        if cls.takes_resolution and "resolution" not in options \
                and self.config.steps_per_epoch > 1:
            # deciding every WHITTLE_STEP: the index of the step, not of the epoch
            supplied["resolution"] = 1.0 / self.config.steps_per_epoch
        if "groups" in takes and "groups" not in options:
            # the prior of the sources never crawled pools those alike: the list's category,
            # else the host; a callable, so the sources added later join their group
            supplied["groups"] = self.sources.group_of
        if self.oracle is not None and cls.needs_rhythms:
            alpha, periodic_u = self._rhythms(range(n), strict=True)
            supplied["periodic"] = PeriodicArrivals(alpha, periodic_u, 0)
            u = periodic_u.mean(axis=1)
        problem = Problem(n=n, cost=self.sources.cost[:n].copy(), period=self.config.period,
                          alpha=alpha, u=u)
        return build_policy(self.config, problem, **supplied)

    def _rhythms(self, sids, strict: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, u per phase of the day (N, K), column t for epoch t mod K) of sources
        ``sids`` from the oracle's parameters and rhythms (``WHITTLE_ORACLE_PARAMS``); a
        source without a rhythm publishes evenly (with ``strict``: InvalidSetting)."""
        sids = list(sids)
        alpha, _ = self._au(sids, strict=strict)
        profiles = getattr(self.oracle, "profiles", {})
        rows = [profiles.get(self.sources.url(s)) for s in sids]
        known = [r for r in rows if r is not None]
        if not sids and profiles:
            # no source yet (a list fetched after start-up): the phases are those of the
            # rhythms the oracle gives, for the sources that join later
            known = [next(iter(profiles.values()))]
        if not known or (strict and len(known) < len(rows)):
            raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r}) needs "
                                 f"a daily rhythm (\"profile\") for every source of policy "
                                 f"{self.config.policy!r}")
        flat = ([1.0] * len(known[0][0]), known[0][1], known[0][2])
        groups: dict[tuple, list[int]] = defaultdict(list)
        for j, row in enumerate(rows):
            bins, width, origin = row or flat
            groups[len(bins), width, origin].append(j)
        params = np.array([self.oracle.get(self.sources.url(s), (0.0, 0.0, 0.0))
                           for s in sids], dtype=np.float64).reshape(-1, 3)
        out = None
        for (_, width, origin), idx in groups.items():
            bins = np.array([(rows[j] or flat)[0] for j in idx], dtype=np.float64)
            try:
                arr = arrivals_from_bins(*params[idx].T, bins, width, self.config.period,
                                         origin=origin, start=self.timeline.origin)
            except ValueError as exc:
                raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r}):"
                                     f" {exc} (WHITTLE_PERIOD {self.config.period!r})"
                                     ) from None
            if out is None:
                out = np.zeros((len(sids), arr.u.shape[1]))
            if arr.u.shape[1] != out.shape[1]:
                raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r}):"
                                     " the rhythms must all span the same time")
            out[idx] = np.roll(arr.u, -arr.phase0, axis=1)   # phase of epoch 0 made 0
        if out is None:         # no source: no rows, as many phases as the rhythms have
            bins, width, origin = known[0]
            try:
                out = arrivals_from_bins(np.zeros(0), np.zeros(0), np.zeros(0),
                                         np.zeros((0, len(bins))), width, self.config.period,
                                         origin=origin, start=self.timeline.origin).u
            except ValueError as exc:
                raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r}):"
                                     f" {exc} (WHITTLE_PERIOD {self.config.period!r})"
                                     ) from None
        return alpha, out

    def _au(self, sids, strict: bool = False) -> tuple[np.ndarray, np.ndarray]:
        rows = []
        for sid in sids:
            url = self.sources.url(sid)
            params = self.oracle.get(url)
            if params is None:
                if strict:
                    raise InvalidSetting(f"WHITTLE_ORACLE_PARAMS ({self.config.oracle_params!r})"
                                         f" has no parameters for source {url}")
                self._log_once(sid, "oracle", url, "no oracle parameters: never crawled")
                params = (0.0, 0.0, 0.0)
            rows.append(params)
        arr = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
        p = SourceParams(arr[:, 0], arr[:, 1], arr[:, 2], period=self.config.period)
        return p.alpha, p.u

    def grow_extra(self, sids: np.ndarray, policy: Policy) -> dict:
        """What ``policy.grow`` takes of the oracle for new sources ``sids``."""
        if self.oracle is None:
            return {}
        if policy.needs_rhythms:
            alpha, periodic_u = self._rhythms(sids)
            return {"alpha": alpha, "periodic_u": periodic_u}
        alpha, u = self._au(sids)
        return {"alpha": alpha, "u": u}
