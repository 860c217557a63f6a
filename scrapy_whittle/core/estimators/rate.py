"""Arrival rate Lambda_i of new entries: Gamma-Poisson conjugate, censoring-aware.

Entries of source i arrive as a Poisson process of rate Lambda_i (Avrachenkov & Borkar,
*Whittle Index Policy for Crawling Ephemeral Content*, IEEE TCNS 2018, Section II). With the
prior Lambda ~ Gamma(shape a0, rate b0) (mean a0 / b0 = ``prior_rate``, worth ``prior_exposure``
units of time of observation), c entries seen over an exposure e give the posterior
Gamma(a0 + c, b0 + e): mean (a0 + c) / (b0 + e), variance (a0 + c) / (b0 + e)^2.

Feed-window overflow (``window_full``): a feed shows only its newest K entries. When all K are
new, entries published between the previous crawl t0 and the oldest visible one t_K may have
been lost, so "c = K over (t0, t]" would under-count. Looking back from the crawl time t, the
K-th arrival is a stopping time of the reversed Poisson process, so the likelihood of what is
visible is exactly Lambda^K exp(-Lambda (t - t_K)): count K over the exposure (t_K, t], and the
interval (t0, t_K) carries no information. The expected number of lost entries is then
E[N(t0, t_K)] = Lambda_hat (t_K - t0), returned by ``observe_crawls`` (for the stats key
``whittle/missed_items``).

First crawl of a source (no previous crawl time known, ``start`` not given): what came before is
unknown, so the same backward argument applies: count K over (t_K, t] when the window is full;
otherwise the oldest visible entry is taken as the time origin and the n - 1 entries after it are
counted over (t_n, t].
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from scrapy_whittle.core.columns import Col
from scrapy_whittle.core.distinct import all_distinct
from scrapy_whittle.core.estimators._base import (
    VectorEstimator,
    as_column,
    as_ragged,
    as_sources,
    per_source_prior,
    plausible,
)


class RateEstimator(VectorEstimator):
    """Posterior Gamma(shape, rate) of each source's arrival rate.

    prior_rate: prior mean rate (entries per unit of time): scalar, array or callable(ids).
    prior_exposure: prior weight, in units of time of observation (b0).
    future_tolerance: clock skew allowed between a publication time and the crawl time.
    """

    per_source = {"shape": 0.0, "rate": 0.0, "last_time": np.nan,
                  "missed": Col(0.0, np.float32),        # entries lost to full windows (stats)
                  "updates": Col(0, np.uint32)}          # accepted updates (0: nothing learnt)

    def __init__(self, n: int = 0, *, prior_rate=1.0, prior_exposure: float = 1.0,
                 future_tolerance: float = 0.0) -> None:
        if not (np.isfinite(prior_exposure) and prior_exposure > 0):
            raise ValueError(f"prior_exposure ({prior_exposure!r}) must be > 0")
        if not (np.isfinite(future_tolerance) and future_tolerance >= 0):
            raise ValueError(f"future_tolerance ({future_tolerance!r}) must be >= 0")
        self.prior_rate = prior_rate
        self.prior_exposure = float(prior_exposure)
        self.future_tolerance = float(future_tolerance)
        super().__init__(n)

    def _fill_prior(self, ids, prior_rate=None, prior_exposure=None) -> None:
        r0 = per_source_prior("prior_rate", self.prior_rate if prior_rate is None
                              else prior_rate, ids)
        b0 = self.prior_exposure if prior_exposure is None else float(prior_exposure)
        self.shape[ids] = r0 * b0
        self.rate[ids] = b0

    def set_prior(self, sources, prior_rate) -> np.ndarray:
        """Replace the prior mean rate of those ``sources`` that have learned nothing yet (a
        rate the feed declares); returns the ids changed. Learned evidence is never undone."""
        ids = as_sources(sources, self.n)
        r0 = np.broadcast_to(np.asarray(prior_rate, dtype=np.float64), ids.shape)
        keep = (self.updates[ids] == 0) & np.isfinite(r0) & (r0 > 0)
        self._fill_prior(ids[keep], prior_rate=r0[keep])
        return ids[keep]

    def _reset_prior(self, ids, bad_prior) -> None:
        self._fill_prior(ids)              # shape and rate are prior and evidence in one

    def _invalid_extra(self, ids):
        return ~(self.rate[ids] > 0) | ~(self.shape[ids] >= 0)

    # -- updates --------------------------------------------------------------------------
    def update(self, sources, counts, exposure) -> np.ndarray:
        """Conjugate update: ``counts`` entries seen over ``exposure`` units of time.

        Returns the bool mask of accepted inputs (counts finite >= 0, exposure finite > 0).
        Repeated ids are accumulated.
        """
        ids = as_sources(sources, self.n)
        c = as_column("counts", counts, ids.shape[0])
        e = as_column("exposure", exposure, ids.shape[0])
        ok = plausible(c) & (c >= 0) & plausible(e) & (e > 0)
        np.add.at(self.shape, ids[ok], c[ok])
        np.add.at(self.rate, ids[ok], e[ok])
        np.add.at(self.updates, ids[ok], 1)
        return ok

    def observe_crawls(self, sources, times, offsets, published, window_full=None,
                       start=None, extra=None) -> tuple[np.ndarray, np.ndarray]:
        """Update from crawls: crawl j of ``sources[j]`` at ``times[j]`` found the new entries
        ``published[offsets[j]:offsets[j+1]]`` (their publication times; NaN = unknown).

        ``window_full[j]``: all entries the feed showed were new (some may have been lost).
        ``start``: time before which no source published (None = unknown); a first crawl that
        lists an entry older than it is read as if none were given (that source did publish
        before: a warm web's feed).
        ``extra[j]``: entries of the span crawl j covers that were seen otherwise first (pushed
        since the source's previous crawl), counted with its own (None: none); not where the
        window was full: every entry it showed was new, so none of them was pushed in the span
        it covers, (t_K, t], and those pushed before t_K fall in the interval that carries no
        information.
        Returns (accepted, missed): which crawls were used, and the estimated number of
        entries lost to a full window per crawl (0 where the window was not full).
        A crawl is rejected when its time is not finite or not after the source's previous
        crawl (ids must be distinct within one call). Publication times that are not finite or
        lie beyond ``times[j] + future_tolerance`` are treated as unknown.
        """
        ids = as_sources(sources, self.n)
        k = ids.shape[0]
        if not all_distinct(ids):
            raise ValueError("observe_crawls takes each source at most once per call")
        t = as_column("times", times, k)
        off, pub = as_ragged("published", offsets, published, k)
        full = np.zeros(k, dtype=bool) if window_full is None else \
            as_column("window_full", window_full, k, dtype=bool)
        count = np.diff(off).astype(np.float64)
        t_item = np.repeat(t, np.diff(off))
        valid = np.isfinite(pub) & (pub <= t_item + self.future_tolerance)
        # oldest valid publication time of each crawl (+inf when none)
        masked = np.where(valid, pub, np.inf)
        oldest = np.full(k, np.inf)
        nonempty = np.diff(off) > 0
        if np.any(nonempty):
            oldest[nonempty] = np.minimum.reduceat(masked, off[:-1][nonempty])
        oldest = np.minimum(oldest, t)
        prev = self.last_time[ids].copy()
        if start is not None:
            # an entry older than ``start`` shows that its source published before it: that
            # source's first crawl is read as one without a start (a feed publishing for long)
            prev = np.where(np.isnan(prev) & ~(oldest < float(start)), float(start), prev)
        accepted = np.isfinite(t) & ~(t <= self.last_time[ids])   # NaN last_time passes
        known = accepted & np.isfinite(prev)
        # 1) previous crawl known, window not full: c entries over (t0, t]
        plain = known & ~full
        # 2) window full (t0 known): K over (max(t_K, t0), t]; 3) first crawl: backward/origin
        has_oldest = np.isfinite(oldest)
        cens = accepted & (full | ~np.isfinite(prev)) & has_oldest
        boundary = np.where(np.isfinite(prev), np.maximum(oldest, prev), oldest)
        c_upd = np.where(plain, count, np.where(full, count, count - 1.0))
        if extra is not None:
            more = as_column("extra", extra, k)
            more = np.where(plausible(more) & (more > 0), more, 0.0)
            c_upd = c_upd + np.where(full, 0.0, more)
        e_upd = np.where(plain, t - prev, t - boundary)
        # a full window whose entries carry no usable time: the plain count is a lower bound
        fallback = known & full & ~has_oldest
        use = (plain | cens | fallback) & (e_upd > 0) & (c_upd >= 0)
        e_upd = np.where(fallback, t - prev, e_upd)
        c_upd = np.where(fallback, count if extra is None else count + more, c_upd)
        self.update(ids[use], c_upd[use], e_upd[use])
        missed = np.zeros(k)
        lost = use & full & np.isfinite(prev) & has_oldest
        if np.any(lost):
            missed[lost] = self.mean_at(ids[lost]) * (boundary[lost] - prev[lost])
            np.add.at(self.missed, ids[lost], missed[lost])
        self.last_time[ids[accepted]] = t[accepted]
        return accepted, missed

    # -- estimates ------------------------------------------------------------------------
    def mean(self) -> np.ndarray:
        return self.shape / self.rate

    get = mean

    def mean_at(self, ids) -> np.ndarray:
        """``mean()[ids]``, computed for those sources only."""
        return self.shape[ids] / self.rate[ids]

    def var(self) -> np.ndarray:
        return self.shape / self.rate**2

    def std(self) -> np.ndarray:
        return np.sqrt(self.var())

    def interval(self, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """Equal-tailed credible interval (Wilson-Hilferty approximation of Gamma quantiles)."""
        if not 0 < level < 1:
            raise ValueError(f"level ({level!r}) must lie in (0, 1)")
        z = NormalDist().inv_cdf(0.5 + level / 2)
        a = np.maximum(self.shape, 1e-12)
        c = 1.0 / (9.0 * a)

        def q(zz):
            return self.mean() * np.maximum(1.0 - c + zz * np.sqrt(c), 0.0) ** 3

        return q(-z), q(z)

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """One posterior draw per source (Thompson sampling): the same draws as
        ``rng.gamma(shape, 1 / rate)`` (to the last bit or so), without its broadcasting of
        a second parameter array (a large part of its time)."""
        draws = rng.standard_gamma(np.maximum(self.shape, 1e-12))
        draws /= self.rate
        return draws
