"""What the scheduler knows of each source, in arrays indexed by source id.

The registry (URL <-> id), the crawl costs C_i and what they are made of (minimum intervals,
download-slot delays, robots.txt ``Crawl-delay``), the prior half-life of interest from
``WHITTLE_HALF_LIFE``, the crawl book-keeping (in flight, last crawl, back-off) and the
publishing-rate estimates behind the ``missed_items`` stat. The scheduler decides *when* to
ask the policy and *what* to send; this table answers *which sources may go now* and *what
one costs*.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from scrapy_whittle.estimators import RateEstimator
from scrapy_whittle.settings import WhittleConfig
from scrapy_whittle.sources import SourceRegistry, SourceSpec

# per-source arrays and their fill value for a new source
_ARRAYS: tuple[tuple[str, Any], ...] = (
    ("busy_until", 0.0),       # in flight until (0: not in flight)
    ("last_crawl", -np.inf),   # dispatch time of the last finished crawl
    ("retry_at", 0.0),         # back-off: not before
    ("failures", 0),           # consecutive failures
    ("min_interval", 0.0),     # seconds between two crawls of the source
    ("cost", 1.0),             # C_i
    ("weight", 1.0),           # value of an entry without engagement
    ("host", 0),               # host id
    ("half_life", np.nan),     # WHITTLE_HALF_LIFE prior (NaN: the policy's own)
)
_SAVED = ("last_crawl", "retry_at", "failures")


class SourceTable:
    def __init__(self, config: WhittleConfig, slot_delays: dict[str, float] | None = None
                 ) -> None:
        self.config = config
        self.registry = SourceRegistry()
        self.slot_delays = dict(slot_delays or {})
        self.crawl_delays: dict[str, float] = {}
        self.hosts: dict[str, int] = {}
        for name, fill in _ARRAYS:
            setattr(self, name, np.zeros(0, dtype=np.asarray(fill).dtype))
        # publishing rates, for the estimate of entries lost to full feed windows (whatever
        # the policy; learning policies keep their own estimates)
        self.rates = RateEstimator(0, prior_rate=1.0 / config.period,
                                   prior_exposure=config.period)

    def __len__(self) -> int:
        return len(self.registry)

    def url(self, sid: int) -> str:
        return self.registry.url(sid)

    def id_of(self, url: str) -> int | None:
        return self.registry.ids.get(url)

    # -- registration -------------------------------------------------------------------
    def add(self, specs: list[SourceSpec]) -> tuple[list[int], list[int]]:
        """(ids of ``specs``' URLs, ids of those that were new); arrays grow once a batch."""
        sids, new = [], []
        for spec in specs:
            sid, is_new = self.registry.add(spec)
            sids.append(sid)
            if is_new:
                new.append((sid, spec))
        if not new:
            return sids, []
        k = len(new)
        for name, fill in _ARRAYS:
            old = getattr(self, name)
            setattr(self, name, np.concatenate([old, np.full(k, fill, dtype=old.dtype)]))
        self.rates.grow(k)
        for sid, spec in new:
            host = urlsplit(spec.url).hostname or ""
            self.host[sid] = self.hosts.setdefault(host, len(self.hosts))
            self.min_interval[sid] = max(spec.min_interval, self.config.min_interval)
            self.cost[sid] = self.cost_of(float(self.min_interval[sid]), host)
            self.weight[sid] = spec.weight
            self.half_life[sid] = self.configured_half_life(spec)
        return sids, [sid for sid, _ in new]

    # -- costs ----------------------------------------------------------------------------
    def cost_of(self, interval: float, host: str) -> float:
        """C_i = max(1, d M / T): a crawl that must be d seconds apart from the next one to its
        source or host uses d seconds of a budget of M crawls per T seconds."""
        delay = max(interval, self.slot_delays.get(host, 0.0), self.crawl_delays.get(host, 0.0))
        return max(1.0, delay * self.config.budget / self.config.period)

    def set_crawl_delay(self, host: str, delay: float) -> np.ndarray | None:
        """Record a robots.txt ``Crawl-delay``; the ids whose cost it changed, or None when
        it is not new (or not a usable delay)."""
        if not (math.isfinite(delay) and delay > 0) or self.crawl_delays.get(host) == delay:
            return None
        self.crawl_delays[host] = delay
        hid = self.hosts.get(host)
        if hid is None:
            return np.zeros(0, dtype=np.int64)
        sids = np.flatnonzero(self.host == hid)
        for sid in sids:
            self.cost[sid] = self.cost_of(float(self.min_interval[sid]), host)
        return sids

    # -- the interest-decay prior -----------------------------------------------------------
    def configured_half_life(self, spec: SourceSpec) -> float:
        """WHITTLE_HALF_LIFE for this source: by URL, else by category, else "*"; NaN when
        the setting says nothing (the policy's own prior then applies)."""
        setting = self.config.half_life
        if setting is None:
            return math.nan
        if not isinstance(setting, dict):
            return float(setting)
        for key in (spec.url, spec.category, "*"):
            if key and key in setting:
                return setting[key]
        return math.nan

    def half_life_prior(self, ids) -> np.ndarray:
        """Prior half-lives (seconds) of sources ``ids`` for the policy's decay estimator:
        the configured ones, four epochs where none is configured."""
        h = self.half_life[np.asarray(ids, dtype=np.int64)]
        return np.where(np.isnan(h), 4.0 * self.config.period, h)

    # -- crawl book-keeping ---------------------------------------------------------------
    def not_before(self, sid: int) -> float:
        """Earliest time source ``sid`` may be fetched (in flight, back-off, min interval)."""
        return max(self.busy_until[sid], self.retry_at[sid],
                   self.last_crawl[sid] + self.min_interval[sid])

    def eligible(self, now: float, busy_hosts: set[int]) -> np.ndarray:
        """bool[N]: sources that may be fetched now."""
        ok = ((self.busy_until <= now) & (self.retry_at <= now)
              & (self.last_crawl + self.min_interval <= now + 1e-6))
        if busy_hosts:
            ok &= ~np.isin(self.host, list(busy_hosts))
        return ok

    def crawl_done(self, sid: int, *, when: float, ok: bool, now: float) -> float:
        """A finished crawl dispatched at ``when``; returns the back-off (s) now applied."""
        self.busy_until[sid] = 0.0
        self.last_crawl[sid] = when
        if ok:
            self.failures[sid] = 0
            self.retry_at[sid] = 0.0
            return 0.0
        self.failures[sid] += 1
        delay = min(self.config.backoff_max,
                    self.config.backoff_base * 2.0 ** (int(self.failures[sid]) - 1))
        self.retry_at[sid] = now + delay
        return delay

    def estimate_missed(self, sid: int, when: float, published: np.ndarray,
                        window_full: bool) -> float:
        """Entries source ``sid`` published but its feed no longer showed when crawled at
        ``when`` (seconds since t0), estimated from its rate; 0 unless the window was full."""
        _, missed = self.rates.observe_crawls([sid], [when], [0, len(published)], published,
                                              window_full=[window_full])
        return float(missed[0])

    # -- persistence ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"registry": self.registry.state_dict(), "rates": self.rates.state_dict(),
                **{name: getattr(self, name).copy() for name in _SAVED}}

    def register_saved(self, state: dict[str, Any]) -> None:
        """Register the saved sources first, so that they keep their ids."""
        self.add([SourceSpec(**d) for d in state["registry"]["specs"]])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = len(state["registry"]["specs"])
        for name in _SAVED:
            getattr(self, name)[:n] = state[name]
        if state.get("rates") is not None:
            self.rates.load_state_dict(state["rates"])
