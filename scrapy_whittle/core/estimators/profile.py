"""A source's daily publishing rhythm p_i(t), learned from the publication times feeds show.

Model: source i publishes as a Poisson process of intensity Lambda_i p_i(t), with

    p_i(t) = 1 + sum_{k=1..H} c_ik cos(k w t) + s_ik sin(k w t),     w = 2 pi / day,

t the absolute time (unix seconds in Scrapy, where ``day`` = 86400 and t = 0 is midnight UTC;
the scenario's unit in ``sim``). Time zones need not be known: a phase is a pair (c, s).

Sufficient statistics per source (28 + 16 H bytes: 60 bytes with H = 2 harmonics): the
number n of dated items and the exposure E_0 (time during which every new item was seen), both
float64; the sums over items S_k = sum_j (cos k w t_j, sin k w t_j) and the exposure moments
E_k = int_exposure (cos k w s, sin k w s) ds, float32 (over whole days the E_k cancel, so they
stay small); the time of the previous crawl (float64) and the shrinkage group (float32).

Estimate: with lambda(t) = b_0 + sum b_k . (cos, sin)(k w t), E[n] = int lambda and
E[S_k] = int lambda (cos, sin)(k w .): a linear system in b with the Gram matrix of the basis
over the exposure. Over whole days that matrix is diag(E_0, E_0 / 2, ...); we keep its first
row and column exactly (E_0, E_k) and drop the partial-day terms of the products of two
harmonics, which are O(1 day / E_0). Then b_k = (S_k - b_0 E_k) / (E_0 / 2) and
b_0 (E_0 - 2 sum E_k^2 / E_0) = n - 2 sum S_k E_k / E_0; the raw coefficients are b_k / b_0,
each with variance about 2 / n (a Poisson moment estimator).

Shrinkage (empirical Bayes): within a group of sources (a category, or all), the raw
coefficients are shrunk towards the group's precision-weighted mean m_g by
tau^2 / (tau^2 + 2 / n), tau^2 the spread of the true coefficients in the group (the
DerSimonian-Laird moment estimate per harmonic, pooling its cosine and sine since a phase
has no preferred direction, floored at ``tau_min``^2). A source with few items takes its
group's rhythm; a group of flat sources (no rhythm) shrinks every source to flat. Finally,
where the estimate would dip below ``floor`` somewhere in the day, its harmonic part is scaled
down so that its minimum is ``floor``: a rate is never negative.

Which items count (the same censoring as ``RateEstimator``): items published after the
previous crawl, over the exposure (previous crawl, crawl]; with a full window the exposure
starts at the oldest visible item; at a first crawl (no previous one) the oldest visible item
is the time origin and is not counted (unless the window is full). Undated items and crawls
that go back in time are skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scrapy_whittle.core.columns import Col, KeptRows
from scrapy_whittle.core.distinct import all_distinct
from scrapy_whittle.core.dynamics import decayed_integral
from scrapy_whittle.core.estimators._base import (
    VectorEstimator,
    as_column,
    as_ragged,
    as_sources,
)
from scrapy_whittle.core.estimators.profile_groups import many_group_stats, one_group_stats

HARMONIC_ARRAYS = ("item_cos", "item_sin", "exp_cos", "exp_sin")


def _row_sum(x: np.ndarray) -> np.ndarray:
    """``x.sum(axis=-1)`` for the few harmonics of a profile, the same sums in the same
    order: ``einsum`` walks the short last axis several times faster than ``sum``."""
    return np.einsum("...j->...", x)


def _rows(a: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``a[ids]`` of the rows ``ids`` (an index array) of a 2-D array: ``np.take``, several
    times faster than indexing on these short rows, the same values."""
    return np.take(a, ids, axis=0)


def _row_dot(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(x * y).sum(axis=-1)``, without the product array."""
    return np.einsum("...j,...j->...", x, y)


class ProfileEstimator(VectorEstimator):
    """Per-source daily profiles (see the module docstring).

    day: length of the period in the time unit of the observations (86400 s in Scrapy).
    harmonics: H, number of harmonics (1..6).
    floor: smallest value the estimated profile may take.
    tau_min: smallest spread of true coefficients assumed within a group (keeps some trust in
        a source's own data even when its group looks flat).
    prior_tau: spread assumed while a group has too few sources with data to measure it.
    future_tolerance: clock skew allowed between a publication time and the crawl time.
    """

    per_source = {"items": 0.0, "exposure": 0.0, "last_time": np.nan,
                  "group": Col(0.0, np.float32)}

    def __init__(self, n: int = 0, *, day: float = 86400.0, harmonics: int = 2,
                 floor: float = 0.05, tau_min: float = 0.02, prior_tau: float = 0.3,
                 future_tolerance: float = 0.0) -> None:
        if not (np.isfinite(day) and day > 0):
            raise ValueError(f"day ({day!r}) must be > 0")
        if int(harmonics) != harmonics or not 1 <= harmonics <= 6:
            raise ValueError(f"harmonics ({harmonics!r}) must be an integer in 1..6")
        if not 0 <= floor < 1:
            raise ValueError(f"floor ({floor!r}) must lie in [0, 1)")
        if not (tau_min >= 0 and prior_tau > 0):
            raise ValueError("tau_min must be >= 0 and prior_tau > 0")
        self.day = float(day)
        self.harmonics = int(harmonics)
        self.floor = float(floor)
        self.tau_min = float(tau_min)
        self.prior_tau = float(prior_tau)
        self.future_tolerance = float(future_tolerance)
        self.omega = 2.0 * np.pi / self.day
        self._cache: np.ndarray | None = None
        self._stats: tuple[np.ndarray, ...] | None = None
        self._raw = KeptRows(self._raw_of)       # raw() of every source
        # per source, the grid point where ``_positive`` last found its wave lowest (-1:
        # not yet): where ``_scale_bound`` looks first
        self._trough = np.zeros(0, dtype=np.int16)
        super().__init__(n)

    def _columns(self) -> dict[str, Col]:
        h = self.harmonics
        return {**super()._columns(),
                **{name: Col(0.0, np.float32, width=h) for name in HARMONIC_ARRAYS}}

    def grow(self, n_new: int, **prior: Any) -> None:
        super().grow(n_new, **prior)
        if n_new > 0:
            self._cache = self._stats = None
            self._raw.forget()

    def _after_import(self) -> None:
        self._cache = self._stats = None
        self._raw.forget()

    def _after_reset(self, ids) -> None:
        self._changed(ids)

    def _changed(self, ids) -> None:
        """The evidence of sources ``ids`` changed: their raw coefficients are computed
        again, and the shrunk ones of every source (the groups' spreads move)."""
        self._cache = self._stats = None
        self._raw.changed(ids)

    def set_groups(self, sources, groups) -> None:
        """Put ``sources`` in shrinkage groups (ints >= 0, e.g. OPML categories)."""
        ids = as_sources(sources, self.n)
        g = as_column("groups", groups, ids.shape[0])
        if np.any(~np.isfinite(g) | (g < 0) | (g != np.floor(g))):
            raise ValueError("groups must be integers >= 0")
        self.group[ids] = g
        self._cache = self._stats = None

    # -- evidence -------------------------------------------------------------------------
    def _add(self, ids, t_items, item_owner, a, b) -> None:
        """Items at ``t_items`` (owner index into ``ids``, non-decreasing: a crawl's items
        together) and exposures (a, b] of ``ids`` (distinct). Each source's sums of the
        batch are added up in float64 and added to its float32 totals once."""
        k = np.arange(1, self.harmonics + 1)
        if t_items.size:
            ph = np.outer(np.mod(t_items, self.day) * self.omega, k)
            starts = np.flatnonzero(np.concatenate([[True], item_owner[1:] != item_owner[:-1]]))
            owners = ids[item_owner[starts]]
            self.item_cos[owners] += np.add.reduceat(np.cos(ph), starts, axis=0).astype(
                np.float32)
            self.item_sin[owners] += np.add.reduceat(np.sin(ph), starts, axis=0).astype(
                np.float32)
            self.items[owners] += np.diff(np.append(starts, t_items.shape[0]))
        pa = np.outer(np.mod(a, self.day) * self.omega, k)
        pb = pa + np.outer((b - a) * self.omega, k)
        wk = self.omega * k
        self.exp_cos[ids] += ((np.sin(pb) - np.sin(pa)) / wk).astype(np.float32)
        self.exp_sin[ids] += ((np.cos(pa) - np.cos(pb)) / wk).astype(np.float32)
        self.exposure[ids] += b - a
        self._changed(ids)

    def observe_crawls(self, sources, times, offsets, published, window_full=None,
                       start=None) -> np.ndarray:
        """Crawl j of ``sources[j]`` at ``times[j]`` showed the new items published at
        ``published[offsets[j]:offsets[j+1]]`` (NaN = undated). ``start``: time before which
        nothing was published (None = unknown). Each source at most once per call. Returns
        the bool mask of crawls used (a crawl earlier than the previous one is not)."""
        ids = as_sources(sources, self.n)
        kk = ids.shape[0]
        if not all_distinct(ids):
            raise ValueError("observe_crawls takes each source at most once per call")
        t = as_column("times", times, kk)
        off, pub = as_ragged("published", offsets, published, kk)
        full = np.zeros(kk, dtype=bool) if window_full is None else \
            as_column("window_full", window_full, kk, dtype=bool)
        prev = self.last_time[ids].copy()
        if start is not None:
            prev = np.where(np.isnan(prev), float(start), prev)
        accepted = np.isfinite(t) & ~(t <= self.last_time[ids])
        owner = np.repeat(np.arange(kk), np.diff(off))
        dated = np.isfinite(pub) & (pub <= t[owner] + self.future_tolerance) & accepted[owner]
        dated &= ~(pub <= prev[owner])                  # published after the previous crawl
        masked = np.where(dated, pub, np.inf)
        oldest = np.full(kk, np.inf)
        nonempty = np.diff(off) > 0
        if np.any(nonempty):
            oldest[nonempty] = np.minimum.reduceat(masked, off[:-1][nonempty])
        known = np.isfinite(prev)
        has = np.isfinite(oldest)
        # exposure start: the previous crawl, or the oldest visible item when the window was
        # full or the history is unknown (then that item is the origin, not counted, unless
        # the window was full)
        a = np.where(known & ~full, prev, np.where(known, np.maximum(oldest, prev), oldest))
        use = accepted & (known & ~full | has) & (a < t)
        drop_origin = use & ~known & ~full
        keep = dated & use[owner]
        first_of = np.full(kk, -1)
        if np.any(drop_origin):
            cand = np.flatnonzero(keep & drop_origin[owner] & (pub == oldest[owner]))
            first_of[owner[cand[::-1]]] = cand[::-1]         # one origin item per crawl
            keep[first_of[first_of >= 0]] = False
        if np.any(use):
            sel = np.flatnonzero(use)
            pos = np.full(kk, -1)
            pos[sel] = np.arange(sel.shape[0])
            self._add(ids[sel], pub[keep], pos[owner[keep]], a[sel], t[sel])
        self.last_time[ids[accepted]] = t[accepted]
        return accepted

    # -- estimates ------------------------------------------------------------------------
    def raw(self) -> tuple[np.ndarray, np.ndarray]:
        """(raw coefficients (N, 2H) = [c_1..c_H, s_1..s_H], their sampling variance (N,));
        variance inf where a source has no usable data. Kept between calls: only the
        sources whose evidence changed are computed again (a row depends on its own sums
        only, so the result is the same either way). Read-only."""
        coef, var = self._raw.get(self.n)
        return coef, var

    def _raw_of(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`raw` of sources ``rows`` (an index array or a slice). For every source (the
        first call, after growth or a restore) only those with items and exposure are
        computed: the others have none to show (0, inf), and early in a crawl they are
        nearly all of a million."""
        if isinstance(rows, slice):
            coef = np.zeros((self.n, 2 * self.harmonics))
            var = np.full(self.n, np.inf)
            ids = np.flatnonzero((self.exposure > 0) & (self.items > 0))
            if ids.size:
                coef[ids], var[ids] = self._raw_of(ids)
            return coef, var
        e0 = self.exposure[rows]
        items = self.items[rows]
        ec = self.exp_cos[rows].astype(np.float64)
        es = self.exp_sin[rows].astype(np.float64)
        sc = self.item_cos[rows].astype(np.float64)
        ss = self.item_sin[rows].astype(np.float64)
        ok = (e0 > 0) & (items > 0)
        e0s = np.where(ok, e0, 1.0)[:, None]
        dot = _row_dot             # sum over harmonics (einsum: 3x numpy's sum(axis=1))
        num = items - 2.0 * (dot(sc, ec) + dot(ss, es)) / e0s[:, 0]
        den = e0s[:, 0] - 2.0 * (dot(ec, ec) + dot(es, es)) / e0s[:, 0]
        b0 = num / np.where(den > 0, den, 1.0)
        ok &= (den > 0) & (b0 > 0)
        b0s = np.where(ok, b0, 1.0)[:, None]
        coef = np.concatenate([(sc - b0s * ec), (ss - b0s * es)], axis=1) / (0.5 * e0s * b0s)
        coef = np.where(ok[:, None], coef, 0.0)
        var = np.where(ok, 2.0 / np.maximum(items, 1.0), np.inf)
        return coef, var

    def _group_stats(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(group of each source (N,) as a position into the next two, the groups' means
        (G, 2H) and spreads tau^2 (G, 2H)): what the shrinkage of every source depends on
        besides its own raw coefficients (``profile_groups``), cached until new evidence. A
        group without data has mean 0 and tau^2 0: its members stay flat."""
        if self._stats is not None and self._stats[0].shape[0] == self.n:
            return self._stats
        coef, var = self.raw()
        groups = self.group.astype(np.int64)
        single = not groups.size or groups.min() == groups.max()
        stats = one_group_stats if single else many_group_stats
        self._stats = stats(coef, var, groups, self.harmonics, self.tau_min, self.prior_tau)
        return self._stats

    def _shrunk(self, ids) -> np.ndarray:
        """The raw coefficients of sources ``ids`` (an index array or a slice) shrunk towards
        their group's mean, before the positivity check; element by element, so a row is the
        same whichever rows are asked with it."""
        coef, var = self.raw()
        mean, tau2 = self._group_stats_of(ids)
        v = var[ids]
        v = np.where(np.isfinite(v), v, np.inf)[:, None]
        shrink = tau2 / (tau2 + v)
        return mean + shrink * ((coef[ids] if isinstance(ids, slice) else _rows(coef, ids))
                                - mean)

    def _group_stats_of(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(mean, tau^2) of the groups of sources ``ids``: (2H,) each with one group (they
        broadcast), else (n, 2H)."""
        position, means, tau2s = self._group_stats()
        if means.shape[0] == 1:
            return means[0], tau2s[0]
        g = position[ids]
        return _rows(means, g), _rows(tau2s, g)

    def coefficients(self, ids=None) -> np.ndarray:
        """Shrunk, non-negative profile coefficients (N, 2H), cached until new evidence; of
        sources ``ids`` only (an index array) when given: computed for those rows alone
        while the cache is stale and they are a minority (a selection ranks a few
        thousand sources of a million), each row the same as in the full array."""
        if ids is not None:
            ids = np.asarray(ids, dtype=np.int64)
        if self._cache is not None and self._cache.shape[0] == self.n:
            return self._cache if ids is None else _rows(self._cache, ids)
        if ids is not None:
            if 2 * ids.shape[0] < self.n:
                return self._positive(self._shrunk(ids), ids)
        self._cache = self._positive(self._shrunk(slice(None)), slice(None))
        return self._cache if ids is None else _rows(self._cache, ids)

    def integral_bound(self, flat, ids, mu=None, end=None) -> np.ndarray:
        """An upper bound of ``decayed_integral(b - T, b, mu, ids)`` for sources ``ids``
        whose flat part, int_0^T e^{-mu s} ds, is ``flat``, without their profiles.

        Whatever b: ``flat`` plus, per harmonic k, its amplitude (of the shrunk profile before
        the positivity check, times a bound of the check's factor) times a bound of the modulus of
        int_0^T e^{i k w s} e^{-mu s} ds = (1 - e^{-(mu + i k w) T}) / (mu + i k w): at most
        ``flat``, and at most 2 / (k w) (a decay slower than the day averages the rhythm
        out).

        With ``mu`` and ``end`` (b, one time for all: the selection's now) also, where it is
        lower, the integral's part that depends on b alone, exactly, plus a bound of the part
        that depends on the window's start: with theta = k w, D = mu^2 + theta^2 and the
        shrunk harmonic (c, s), the wave is W = B - e^{-mu T} A,
        B = sum_k [c (mu cos theta b + theta sin theta b) + s (mu sin theta b - theta cos
        theta b)] / D and |A| <= sum_k |(c, s)| / sqrt(D) <= sum_k |(c, s)| / theta (taken:
        e^{-mu T} makes it small where it matters); the positivity check scales W
        by a factor in [lo, hi] (1 and 1 where the sum of the amplitudes keeps the profile
        above the floor, else (1 - floor) / that sum and ``_scale_bound``), so with
        X = B + e^{-mu T} sum_k |(c, s)| / theta the integral is at most flat + hi X where
        X >= 0, flat + lo X where not. Then nearly exact once the window is long against
        1 / mu (a source crawled days ago), where the phase-free bound is not; the
        phase-free bound is scaled by hi too."""
        ids = np.asarray(ids, dtype=np.int64)
        flat = np.asarray(flat, dtype=np.float64)
        phased = mu is not None and end is not None
        if phased:
            mu = np.asarray(mu, dtype=np.float64)
            # e^{-mu T} from the flat part (1 - mu flat), with room for its rounding
            tail = np.maximum(1.0 - mu * flat, 0.0) + 1e-12
            mu2 = mu * mu
            day_time = np.mod(float(end), self.day)
            now_part = np.zeros(ids.shape[0])
            start_part = np.zeros(ids.shape[0])
        wave = np.zeros(ids.shape[0])
        amp_sum = np.zeros(ids.shape[0])
        harmonics = list(self._shrunk_harmonics(ids))
        for k, (c, s) in enumerate(harmonics):
            theta = self.omega * (k + 1)
            amp = np.sqrt(c * c + s * s)
            wave += amp * np.minimum(flat, 2.0 / theta)
            amp_sum += amp
            if phased:
                phase = day_time * theta
                cb, sb = np.cos(phase), np.sin(phase)
                now_part += (c * (mu * cb + theta * sb) + s * (mu * sb - theta * cb)) \
                    / (mu2 + theta * theta)
                start_part += amp * (1.0 / theta)          # (1 / sqrt(D) <= 1 / theta)
        # the positivity check scales a profile's whole harmonic part by a factor in
        # [lo, hi] (``_scale_bound``; at least (1 - floor) / the sum of its amplitudes): a
        # bound of the wave before it, times hi where at least 0, else lo, bounds it after
        # (without, a strong rhythm's bound would stay far above its integral)
        scaled = np.flatnonzero(1.0 - amp_sum < self.floor + 1e-9)
        hi = lo = None
        if scaled.size:
            hi = self._scale_bound([(c[scaled], s[scaled]) for c, s in harmonics],
                                    ids[scaled])
            room = amp_sum[scaled] > 1.0 - self.floor
            lo = np.where(room, (1.0 - self.floor) / np.where(room, amp_sum[scaled], 1.0), 1.0)
            wave[scaled] *= hi
        if phased:
            at_end = now_part + tail * start_part
            if hi is not None:
                at_end[scaled] *= np.where(at_end[scaled] >= 0.0, hi, lo)
            wave = np.minimum(wave, at_end)
        return flat + wave

    def _scale_bound(self, harmonics, ids: np.ndarray) -> np.ndarray:
        """At least the factor by which ``_positive`` scales down the harmonic part of the
        profiles of sources ``ids`` (``harmonics``: their (c_k, s_k) before the check, as
        ``_shrunk_harmonics`` gives them), without the whole grid: the factor is
        (1 - floor) / (-low), low the lowest value of the wave on the grid, and the wave at
        any grid point is at least low. The point taken is where the wave was lowest the
        last time ``_positive`` checked the source (a profile moves little between two
        selections, so it is usually the lowest still, the factor then exact); a source not
        checked yet is checked here, on the whole grid, once."""
        if self._trough.shape[0] != self.n:
            self._trough = np.full(self.n, -1, dtype=np.int16)
        cos, sin = self._grid_waves()
        trough = self._trough[ids].astype(np.intp)
        new = np.flatnonzero(trough < 0)
        if new.size:
            # (a matrix product: its rounding may pick another of two nearly equal grid
            # points, which bounds the factor as well)
            rows = np.stack([part[new] for pair in harmonics for part in pair], axis=1)
            basis = np.stack([row for pair in zip(cos, sin, strict=True) for row in pair])
            trough[new] = (rows @ basis).argmin(axis=1)
            self._trough[ids[new]] = trough[new]
        low = np.zeros(ids.shape[0])
        for m, (c, s) in enumerate(harmonics):
            low += c * np.take(cos[m], trough) + s * np.take(sin[m], trough)
        deep = 1.0 + low < self.floor
        return np.where(deep, (1.0 - self.floor) / np.where(deep, -low, 1.0), 1.0)

    def _grid_waves(self) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin) (H, grid) of each harmonic on ``_positive``'s grid, its numbers."""
        h = self.harmonics
        grid = np.arange(8 * h + 8) * (2.0 * np.pi / (8 * h + 8))
        k = np.arange(1, h + 1)[:, None]
        return np.cos(k * grid), np.sin(k * grid)

    def _shrunk_harmonics(self, ids: np.ndarray):
        """(c_k, s_k) of sources ``ids``, harmonic by harmonic: the shrunk profile before the
        positivity check (``_shrunk``'s numbers, on vectors: faster than its (n, 2H) arrays
        at many sources). A source without usable data is its group's mean
        (its shrinkage factor is 0: the same number), so only the others are computed."""
        coef, var = self.raw()
        mean, tau2 = self._group_stats_of(ids)
        v = var[ids]
        fin = np.flatnonzero(np.isfinite(v))
        v = v[fin]
        coef = _rows(coef, ids[fin])
        if mean.ndim == 2:                               # (several groups: per source)
            mean_f, tau2_f = _rows(mean, fin), _rows(tau2, fin)
        else:
            mean_f, tau2_f = mean, tau2
        h = self.harmonics
        for k in range(h):
            shrink = tau2_f[..., k] / (tau2_f[..., k] + v)
            c = np.empty(ids.shape[0])
            s = np.empty(ids.shape[0])
            c[...] = mean[..., k]
            s[...] = mean[..., h + k]
            c[fin] = mean_f[..., k] + shrink * (coef[:, k] - mean_f[..., k])
            s[fin] = mean_f[..., h + k] + shrink * (coef[:, h + k] - mean_f[..., h + k])
            yield c, s

    def _positive(self, coef: np.ndarray, sources=None) -> np.ndarray:
        """Scale the harmonic part down where the profile would fall below ``floor``
        (checked on a grid, only where the amplitudes allow it: p >= 1 - sum_k |(c_k, s_k)|).
        Row by row (sums of products in a fixed order, no matrix product: BLAS rounds a
        single row differently from many), so a row is the same whichever rows come along.
        ``sources``: the sources of the rows (an index array or a slice), whose grid point
        of lowest wave is kept for ``_scale_bound``."""
        h = self.harmonics
        amp = _row_sum(np.sqrt(coef[:, :h] ** 2 + coef[:, h:] ** 2))
        ids = np.flatnonzero(1.0 - amp < self.floor)
        if ids.size == 0:
            return coef
        grid = np.arange(8 * h + 8) * (2.0 * np.pi / (8 * h + 8))
        rows = coef[ids]
        wave = np.zeros((ids.shape[0], grid.shape[0]))
        for k in range(1, h + 1):
            wave += rows[:, k - 1, None] * np.cos(k * grid)
            wave += rows[:, h + k - 1, None] * np.sin(k * grid)
        lowest = wave.argmin(axis=1)
        low = np.take_along_axis(wave, lowest[:, None], axis=1)[:, 0]
        if sources is not None:
            if self._trough.shape[0] != self.n:
                self._trough = np.full(self.n, -1, dtype=np.int16)
            self._trough[np.arange(self.n)[sources][ids] if isinstance(sources, slice)
                         else sources[ids]] = lowest
        scale = np.where(1.0 + low < self.floor, (1.0 - self.floor) / np.maximum(-low, 1e-300),
                         1.0)
        out = coef.copy()
        out[ids] *= scale[:, None]
        return out

    def multiplier(self, t, ids=None) -> np.ndarray:
        """p_hat_i(t) for sources ``ids`` (default all), t broadcast against them."""
        coef = self.coefficients()
        ids = np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)
        h = self.harmonics
        ph = np.mod(np.asarray(t, dtype=np.float64), self.day)[..., None] * self.omega \
            * np.arange(1, h + 1)
        return 1.0 + (coef[ids, :h] * np.cos(ph)).sum(axis=-1) + \
            (coef[ids, h:] * np.sin(ph)).sum(axis=-1)

    def decayed_integral(self, a, b, mu, ids=None, coef=None) -> np.ndarray:
        """int_a^b p_hat_i(s) exp(-mu_i (b - s)) ds for every source (arrays aligned with
        ``ids``, default all; a <= b), in closed form: with theta = k w and
        D = mu^2 + theta^2, int_a^b cos(theta s) e^{-mu (b - s)} ds =
        [mu cos(theta b) + theta sin(theta b) - e^{-mu (b - a)} (mu cos(theta a) +
        theta sin(theta a))] / D, and the same with (cos, sin) -> (sin, -cos) for the sine.
        ``coef``: ``coefficients(ids)``, where the caller has them already."""
        # (the rows of ``ids`` only: a selection asks for the few sources it ranks)
        if coef is None:
            coef = self.coefficients() if ids is None else self.coefficients(ids)
        h = self.harmonics
        a = np.asarray(a, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        mu = np.asarray(mu, dtype=np.float64)
        span = np.maximum(b - a, 0.0)
        decay = np.exp(-mu * span)
        flat = decayed_integral(span, mu)
        theta = self.omega * np.arange(1, h + 1)
        # phases of a and b separately: a scalar end (the current time) costs H cosines
        pb = np.multiply.outer(np.mod(b, self.day), theta)
        pa = np.multiply.outer(np.mod(a, self.day), theta)
        cb, sb, ca, sa = np.cos(pb), np.sin(pb), np.cos(pa), np.sin(pa)
        m = mu[..., None]
        e = decay[..., None]
        den = m * m + theta * theta
        int_cos = (m * cb + theta * sb - e * (m * ca + theta * sa)) / den
        int_sin = (m * sb - theta * cb - e * (m * sa - theta * ca)) / den
        wave = _row_sum(coef[..., :h] * int_cos + coef[..., h:] * int_sin)
        return flat + wave

    def mean(self) -> np.ndarray:
        return self.coefficients()

    get = mean

    def std(self) -> np.ndarray:
        """Sampling standard deviation of each source's raw coefficients (N,), about
        sqrt(2 / n); the prior spread where a source has no data."""
        var = self.raw()[1]
        return np.sqrt(np.where(np.isfinite(var), var, self.prior_tau ** 2))
