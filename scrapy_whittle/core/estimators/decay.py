"""Interest decay mu_i: weighted log-linear fits of value against age, shrunk to a prior.

An item published with base utility xi is worth xi exp(-mu age) (Avrachenkov & Borkar,
*Whittle Index Policy for Crawling Ephemeral Content*, IEEE TCNS 2018, Section II), so
y = log(xi / value) = mu age. Three kinds of evidence, all reduced to least-squares sums:

* ``report(source, value_at_capture, age, base_value)`` with the base known: a regression
  through the origin, Sxx += w age^2, Sxy += w age y.
* the same without the base (what a Scrapy item pipeline usually knows): log value =
  log xi_bar - mu age + noise, a regression with a per-source intercept; its centred sums
  sum w (a - a_bar)^2 and sum w (a - a_bar)(y - y_bar) enter the same slope.
* ``update_curve``: one item seen at several ages with an engagement level (views per hour,
  say) proportional to exp(-mu age): a regression with a per-item intercept (centred within
  the item). Cumulative counters (comments) are turned into rates between observations first.
* ``update_batch``: a crawl captured R = sum_n xi_n exp(-mu a_n) over items of known base value
  xi_n and age a_n (the simulator's reward): mu_j solves this exactly (log-sum-exp is convex
  and decreasing in mu, so Newton from mu = 0 climbs monotonically onto the root); the crawl
  enters as one point (a_eff, mu_j a_eff), a_eff = the value-weighted mean age at mu_j.

* ``update_captures``: a crawl captured R = sum_n xi_n exp(-mu a_n) over items of unknown base
  value (a crawl: a feed tells values at capture only): one point per crawl of the fit with a
  per-source intercept, log sum exp(-mu a_n) linearised at the current estimate (at the
  crawl's discount-weighted age, with the tangent's intercept).

* ``update_span``: a crawl captured R from items of unknown base values that arrived as a
  Poisson stream over the last s units of time (the deterministic simulator; a count-only
  source): E[R] = A s g(mu s), A = Lambda xi_bar, g(z) = (1 - e^{-z}) / z. On a log grid of mu
  values the sums of log(R / s) - log g(mu s) give, per grid point, the residual sum of squares
  of the fit with a free intercept log A; it is added to the quadratic of the other evidence and
  minimised over the grid, refined by a parabola in log mu. ``span_scale()`` returns A_hat.

Prior: mu_0 = ln 2 / half-life, a penalty P (log mu - log mu_0)^2 with P = w0 (ln 2)^2: the
curvature, at mu_0, of ``prior_weight`` pseudo-items seen at the age h0 = half-life. It is set in
log mu because decay rates are scale parameters spread over orders of magnitude (a linear-scale
pseudo-item at age h0 would forbid a 10x faster decay far more than a 10x slower one). With the
least-squares sums S_xx, S_xy of the evidence, mu_hat minimises
S_xx mu^2 - 2 S_xy mu + P (log mu - log mu_0)^2 (+ the span residuals): between log mu_0 and
log(S_xy / S_xx) the derivative changes sign once, found by safeguarded Newton. The evidence is
weighted by 1 / sigma^2, sigma^2 its residual variance (prior sigma_0 = 0.5 in log units,
worth one observation; the prior penalty is in units of sigma_0^2), estimated in a first pass:
consistent evidence (the simulator's noise-free decay) soon outweighs the prior, noisy evidence
does not. The estimate is kept within [ln 2 / max_half_life, ln 2 / min_half_life]; its
standard error is the inverse square root of the objective's curvature (S_xx / sigma^2 + P / mu^2).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from scrapy_whittle.core.columns import Col, PerSourceArrays, SparseRows
from scrapy_whittle.core.estimators._base import (
    VectorEstimator,
    as_column,
    as_ragged,
    as_sources,
    per_source_prior,
    plausible,
    segment_rows,
    segment_sum,
)

LN2 = float(np.log(2.0))
SIGMA0_SQ = 0.25          # prior residual variance of log values (sigma_0 = 0.5)
FIT_PASSES = 4
NEWTON_STEPS = 12


def prior_from_categories(categories, half_lives: Mapping, default: float) -> np.ndarray:
    """Per-source prior half-lives from a category per source and a half-life per category."""
    return np.array([float(half_lives.get(c, default)) for c in categories], dtype=np.float64)


class _SpanStats(PerSourceArrays):
    """Sufficient statistics of the ``update_span`` evidence on the mu grid (G points), for
    the sources that have such evidence only (count-only sources of the simulator): the sums
    of log(R / s), its square, and per grid point of log g(mu s), its square and the product."""

    def __init__(self, grid_size: int) -> None:
        self.grid_size = grid_size
        self._init_arrays(0)

    def _columns(self) -> dict[str, Col]:
        g = self.grid_size
        return {"gn": Col(0.0), "gly": Col(0.0), "gly2": Col(0.0),
                "glg": Col(0.0, width=g), "glg2": Col(0.0, width=g), "glyg": Col(0.0, width=g),
                "scale": Col(np.nan, persist=False)}           # A_hat at the last fit


class _OriginStats(PerSourceArrays):
    """Sums of the regressions through the origin (base value known: the simulator, or a
    pipeline's reports with it; engagement curves), for the sources that have such evidence."""

    per_source = {"sxx": 0.0, "sxy": 0.0, "syy": 0.0}

    def __init__(self) -> None:
        self._init_arrays(0)


class DecayEstimator(VectorEstimator):
    """Decay rate mu_i of each source (per unit of time).

    prior_half_life: prior half-life (same unit of time): scalar, array or callable(ids).
    prior_weight: pseudo-observations the prior is worth (w0).
    min_half_life, max_half_life: bounds the estimate is kept within.

    Per source: the prior mu_0, the observation count and the six sums of the fit with a
    free intercept (64 bytes), a one-byte "refit" flag and the cached estimate; the three sums
    of the fits through the origin, and the grid sums of ``update_span`` evidence (3 x G + 3
    numbers), only for the sources that have such evidence.
    """

    per_source = {"mu0": 0.0, "nobs": 0.0,
                  "s0": 0.0, "s1": 0.0, "s2": 0.0, "t0": 0.0, "t1": 0.0, "t2": 0.0,
                  "dirty": Col(True, persist=False), "c_mu": Col(0.0, persist=False)}
    prior_columns = ("mu0",)

    def __init__(self, n: int = 0, *, prior_half_life=24.0, prior_weight: float = 1.0,
                 min_half_life: float = 1e-3, max_half_life: float = 1e6,
                 grid_per_decade: int = 10) -> None:
        if not (np.isfinite(prior_weight) and prior_weight > 0):
            raise ValueError(f"prior_weight ({prior_weight!r}) must be > 0")
        if not (0 < min_half_life < max_half_life < np.inf):
            raise ValueError(f"need 0 < min_half_life ({min_half_life!r}) < max_half_life "
                             f"({max_half_life!r}) < inf")
        self.prior_half_life = prior_half_life
        self.prior_weight = float(prior_weight)
        self.min_half_life = float(min_half_life)
        self.max_half_life = float(max_half_life)
        if int(grid_per_decade) < 2:
            raise ValueError(f"grid_per_decade ({grid_per_decade!r}) must be >= 2")
        self.grid_per_decade = int(grid_per_decade)
        decades = np.log10(self.max_half_life / self.min_half_life)
        self._grid = np.geomspace(LN2 / self.max_half_life, LN2 / self.min_half_life,
                                  int(np.ceil(decades * self.grid_per_decade)) + 1)
        self.span = _SpanStats(self._grid.shape[0])
        self.span_rows = SparseRows(lambda ids: self.span.grow_arrays(ids.shape[0]))
        self.origin = _OriginStats()
        self.origin_rows = SparseRows(lambda ids: self.origin.grow_arrays(ids.shape[0]))
        super().__init__(n)

    def grow(self, n_new: int, **prior) -> None:
        super().grow(n_new, **prior)
        self.span_rows.grow(max(int(n_new), 0))
        self.origin_rows.grow(max(int(n_new), 0))

    def _sparse_children(self):
        return {"span": (self.span_rows, self.span), "origin": (self.origin_rows, self.origin)}

    def _fill_prior(self, ids, prior_half_life=None) -> None:
        h = per_source_prior("prior_half_life", self.prior_half_life if prior_half_life is None
                             else prior_half_life, ids)
        h = np.clip(h, self.min_half_life, self.max_half_life)
        self.mu0[ids] = LN2 / h
        self.dirty[ids] = True

    def set_prior(self, sources, half_life) -> None:
        """Replace the prior of ``sources`` (e.g. from their category)."""
        self._fill_prior(as_sources(sources, self.n), half_life)

    # -- evidence -------------------------------------------------------------------------
    def update(self, sources, value, age, base_value=None, weight=None) -> np.ndarray:
        """Vectorised ``report``; ``base_value`` NaN (or None) = unknown. Returns accepted."""
        ids = as_sources(sources, self.n)
        k = ids.shape[0]
        v = as_column("value", value, k)
        a = as_column("age", age, k)
        b = as_column("base_value", np.nan if base_value is None else base_value, k)
        w = as_column("weight", 1.0 if weight is None else weight, k)
        ok = plausible(v) & (v > 0) & plausible(a) & (a >= 0) & plausible(w) & (w > 0)
        ok &= np.isnan(b) | (plausible(b) & (b > 0))
        known = ok & ~np.isnan(b)
        if np.any(known):
            y = np.log(b[known] / v[known])
            self._add_origin(ids[known], a[known], y, w[known])
        unknown = ok & np.isnan(b)
        if np.any(unknown):
            i, aa, ww, y = ids[unknown], a[unknown], w[unknown], -np.log(v[unknown])
            for arr, val in ((self.s0, ww), (self.s1, ww * aa), (self.s2, ww * aa * aa),
                             (self.t0, ww * y), (self.t1, ww * aa * y), (self.t2, ww * y * y)):
                np.add.at(arr, i, val)
            np.add.at(self.nobs, i, 1.0)
            self.dirty[i] = True
        return ok

    def report(self, source: int, value_at_capture: float, age: float,
               base_value: float | None = None, weight: float = 1.0) -> bool:
        """One item's value when captured, at ``age`` (time since publication), and its base
        value at publication when known. For a Scrapy item pipeline. Returns accepted."""
        return bool(self.update([source], [value_at_capture], [age],
                                [np.nan if base_value is None else base_value], [weight])[0])

    def update_curve(self, source: int, ages, engagement, cumulative: bool = False,
                     weight: float = 1.0) -> bool:
        """One item's engagement at several ages (>= 2 distinct, positive, finite values).

        ``cumulative``: engagement is a running total (comment count); its increments per
        unit of time are used, at the midpoints (exact for equal spacing)."""
        a = np.asarray(ages, dtype=np.float64).ravel()
        e = np.asarray(engagement, dtype=np.float64).ravel()
        if a.shape != e.shape:
            raise ValueError("ages and engagement must have the same length")
        as_sources([source], self.n)
        ok = plausible(a) & plausible(e) & (a >= 0)
        a, e = a[ok], e[ok]
        order = np.argsort(a, kind="stable")
        a, e = a[order], e[order]
        if cumulative:
            da = np.diff(a)
            keep = da > 0
            e = np.diff(e)[keep] / da[keep]
            a = (a[1:] + a[:-1])[keep] / 2
        keep = e > 0
        a, e = a[keep], e[keep]
        if a.shape[0] < 2 or np.ptp(a) <= 0 or not (np.isfinite(weight) and weight > 0):
            return False
        y = -np.log(e)
        ac, yc = a - a.mean(), y - y.mean()
        (row,) = self.origin_rows.rows([source], create=True)
        self.origin.sxx[row] += weight * np.dot(ac, ac)
        self.origin.sxy[row] += weight * np.dot(ac, yc)
        self.origin.syy[row] += weight * np.dot(yc, yc)
        self.nobs[source] += a.shape[0] - 1
        self.dirty[source] = True
        return True

    def update_batch(self, sources, captured, offsets, ages, base_values) -> np.ndarray:
        """Crawl j of ``sources[j]`` captured ``captured[j]`` = sum of base_value exp(-mu age)
        over its items ``[offsets[j], offsets[j+1])``. Items with an unknown (NaN) base value
        or a bad age make the crawl unusable. Returns accepted."""
        ids = as_sources(sources, self.n)
        k = ids.shape[0]
        r = as_column("captured", captured, k)
        off, a = as_ragged("ages", offsets, ages, k)
        b = np.asarray(base_values, dtype=np.float64)
        if b.shape != a.shape:
            raise ValueError("base_values must have one value per age")
        bad_item = ~(plausible(a) & (a >= 0) & plausible(b) & (b >= 0))
        bad = segment_sum(bad_item.astype(np.float64), off) > 0
        a = np.where(bad_item, 0.0, a)
        b = np.where(bad_item, 0.0, b)
        total = segment_sum(b, off)
        ok = ~bad & plausible(r) & (r > 0) & (total > 0) & (r <= total * (1 + 1e-9))
        ok &= segment_sum(b * a, off) > 0                  # some value with a positive age
        mu_max = LN2 / self.min_half_life
        mu = np.zeros(k)
        logr = np.log(np.where(ok, r, 1.0))
        seg = np.repeat(np.arange(k), np.diff(off))
        for _ in range(60):                                  # monotone Newton from the left
            w = b * np.exp(-mu[seg] * a)
            s = segment_sum(w, off)
            sa = segment_sum(w * a, off)
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.log(np.where(s > 0, s, 1.0)) - logr
                step = np.where(ok & (sa > 0), f * s / np.where(sa > 0, sa, 1.0), 0.0)
            mu = np.minimum(mu + np.maximum(step, 0.0), mu_max)
            if np.all(np.abs(step) <= 1e-12 * np.maximum(mu, 1e-300)):
                break
        w = b * np.exp(-mu[seg] * a)
        s = segment_sum(w, off)
        with np.errstate(divide="ignore", invalid="ignore"):
            a_eff = np.where(s > 0, segment_sum(w * a, off) / np.where(s > 0, s, 1.0), 0.0)
        ok &= a_eff > 0
        self._add_origin(ids[ok], a_eff[ok], mu[ok] * a_eff[ok], np.ones(int(ok.sum())))
        return ok

    def update_captures(self, sources, captured, offsets, ages) -> np.ndarray:
        """Crawl j of ``sources[j]`` captured ``captured[j]`` from the items
        ``[offsets[j], offsets[j+1])`` of ages ``ages``, whose base values are unknown (a
        crawl: a feed tells values at capture only). Returns accepted.

        E[R_j] = xi_bar D_j(mu), D_j(mu) = sum_n exp(-mu a_n). The crawl enters the fit with a
        per-source intercept as one point: log D_j linearised at the current estimate mu_hat,
        log D_j(mu) ~ log n_j + c_j - mu a_j, a_j = sum a w / sum w (w = exp(-mu_hat a): the
        discount-weighted age) and c_j = log(mean w) + mu_hat a_j <= 0 (the tangent's
        intercept: log-sum-exp is convex in mu; 0 when the ages are equal), so the point is
        (a_j, log(R_j / n_j) - c_j). The mean value at the mean age a_bar instead lies above
        the line (mean w >= exp(-mu_hat a_bar), Jensen), the more so as the ages spread, and
        the slope comes out too small where a crawl's items span several half-lives (its old
        items also pull a_bar far out, where a single point steers the slope: a warm feed's
        first poll). Left as it is: the log
        of a sum of random base values reads low by an amount that depends on their law
        (-0.58 for one exponential value, 0 for equal ones, as where a feed shows no
        engagement), which is unknown; it cancels between crawls of alike item counts."""
        ids = as_sources(sources, self.n)
        k = ids.shape[0]
        r = as_column("captured", captured, k)
        off, a = as_ragged("ages", offsets, ages, k)
        counts = np.diff(off)
        bad_item = ~(plausible(a) & (a >= 0))
        bad = segment_sum(bad_item.astype(np.float64), off) > 0
        ok = ~bad & (counts > 0) & plausible(r) & (r > 0)
        if not ok.any():
            return ok
        o_off, o_idx = segment_rows(off, ok)
        aa = a[o_idx]
        n_items = np.diff(o_off).astype(np.float64)
        seg = np.repeat(np.arange(n_items.shape[0]), np.diff(o_off))
        mu = self.mean_at(ids[ok])
        a_min = np.minimum.reduceat(aa, o_off[:-1])
        w = np.exp(-mu[seg] * (aa - a_min[seg]))          # scaled: the youngest weighs 1
        sw = segment_sum(w, o_off)
        a_eff = segment_sum(w * aa, o_off) / sw
        gap = np.log(sw / n_items) + mu * (a_eff - a_min)
        y = np.log(r[ok] / n_items) - gap
        self.update(ids[ok], np.exp(y), a_eff)
        return ok

    def update_span(self, sources, captured, span) -> np.ndarray:
        """Crawl j captured ``captured[j]`` from items of unknown base value that arrived over
        the last ``span[j]`` units of time (both > 0 and finite). Returns accepted."""
        ids = as_sources(sources, self.n)
        k = ids.shape[0]
        r = as_column("captured", captured, k)
        sp = as_column("span", span, k)
        ok = plausible(r) & (r > 0) & plausible(sp) & (sp > 0)
        i, ly = ids[ok], np.log(r[ok] / sp[ok])
        z = self._grid[None, :] * sp[ok][:, None]
        lg = np.log(-np.expm1(-z) / z)
        rows, b = self.span_rows.rows(i, create=True), self.span
        np.add.at(b.gn, rows, 1.0)
        np.add.at(b.gly, rows, ly)
        np.add.at(b.gly2, rows, ly * ly)
        np.add.at(b.glg, rows, lg)
        np.add.at(b.glg2, rows, lg * lg)
        np.add.at(b.glyg, rows, ly[:, None] * lg)
        self.dirty[i] = True
        return ok

    def _add_origin(self, ids, a, y, w) -> None:
        rows = self.origin_rows.rows(ids, create=True)
        np.add.at(self.origin.sxx, rows, w * a * a)
        np.add.at(self.origin.sxy, rows, w * a * y)
        np.add.at(self.origin.syy, rows, w * y * y)
        np.add.at(self.nobs, ids, 1.0)
        self.dirty[ids] = True

    # -- estimates ------------------------------------------------------------------------
    def _sums(self, rows):
        """S_xx, S_xy, S_yy of the linear evidence (origin, per-item and per-source fits)."""
        s0, s1, t0 = self.s0[rows], self.s1[rows], self.t0[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = np.where(s0 > 0, 1.0 / np.where(s0 > 0, s0, 1.0), 0.0)
        cxx = np.maximum(self.s2[rows] - s1 * s1 * inv, 0.0)
        cxy = self.t1[rows] - s1 * t0 * inv
        cyy = np.maximum(self.t2[rows] - t0 * t0 * inv, 0.0)
        has = self.origin_rows.has(rows)
        if has.any():
            r = self.origin_rows.rows(rows[has])
            cxx[has] += self.origin.sxx[r]
            cxy[has] += self.origin.sxy[r]
            cyy[has] += self.origin.syy[r]
        return cxx, cxy, cyy

    def _prior(self, rows) -> float:
        """Curvature of the log-space prior, in units of the residual variance sigma_0^2."""
        return self.prior_weight * LN2 * LN2 / SIGMA0_SQ

    def _bounds(self) -> tuple[float, float]:
        return LN2 / self.max_half_life, LN2 / self.min_half_life

    def _linear_fit(self, rows, sxx, sxy, sigma2) -> np.ndarray:
        """argmin over mu of (S_xx mu^2 - 2 S_xy mu) / sigma2 + P (log mu - log mu_0)^2."""
        lo_b, hi_b = self._bounds()
        th0 = np.log(self.mu0[rows])
        p = self._prior(rows)
        with np.errstate(divide="ignore", invalid="ignore"):
            data = np.where((sxx > 0) & (sxy > 0), sxy / sxx, lo_b)
            thd = np.log(np.clip(data, lo_b, hi_b))
            lo, hi = np.minimum(th0, thd), np.maximum(th0, thd)
            a, b = sxx / sigma2, sxy / sigma2
            th = 0.5 * (lo + hi)
            active = np.ones(th.shape, dtype=bool)
            for _ in range(NEWTON_STEPS):  # Newton in log mu, bisection when it leaves [lo, hi]
                m = np.exp(th)
                am = a * m
                h = m * (am - b) + p * (th - th0)
                dh = m * (am + am - b) + p
                up = h > 0
                hi = np.where(up, th, hi)
                lo = np.where(up, lo, th)
                nt = th - h / dh
                nt = np.where((dh > 0) & (nt >= lo) & (nt <= hi) & active, nt,
                              np.where(active, 0.5 * (lo + hi), th))
                # converged rows stay put (a row's result never depends on the others)
                active &= np.abs(nt - th) > 1e-10
                th = nt
                if not active.any():
                    break
        return np.exp(th)

    def _grid_fit(self, rows, sxx, sxy, syy, sigma2):
        """(mu, data residual sum of squares, curvature of the data part in mu, grid position)
        of sources ``rows``, all with span evidence (the other arguments are over ``rows``)."""
        grid = self._grid
        b, br = self.span, self.span_rows.rows(rows)
        gn = b.gn[br][:, None]
        sse = (b.gly2[br][:, None] - 2 * b.glyg[br] + b.glg2[br]
               - (b.gly[br][:, None] - b.glg[br]) ** 2 / gn)
        data = (syy[:, None] - 2 * grid * sxy[:, None] + grid * grid * sxx[:, None]
                + np.maximum(sse, 0.0))
        th0 = np.log(self.mu0[rows])[:, None]
        q = data / sigma2[:, None] + self._prior(rows) * (np.log(grid) - th0) ** 2
        j = np.clip(np.argmin(q, axis=1), 1, grid.shape[0] - 2)
        r = np.arange(rows.shape[0])
        q0, q1, q2 = q[r, j - 1], q[r, j], q[r, j + 1]
        den = q0 - 2 * q1 + q2
        with np.errstate(divide="ignore", invalid="ignore"):
            shift = np.where(den > 0, 0.5 * (q0 - q2) / den, 0.0)
        pos = j + np.clip(shift, -1.0, 1.0)
        step = np.log(grid[1] / grid[0])
        mu = grid[0] * np.exp(pos * step)
        d0, d1, d2 = data[r, j - 1], data[r, j], data[r, j + 1]
        curv = np.maximum(d0 - 2 * d1 + d2, 0.0) / (step * mu) ** 2    # d2(data)/dmu2
        return mu, np.maximum(d1, 0.0), curv, pos

    def _fit(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mu_hat, curvature of the objective at it) of sources ``rows``; the span scale
        A_hat of the rows with span evidence is stored in their block.

        A few passes: the first with sigma^2 = sigma_0^2, the next with the residual variance
        of the previous, so that consistent (e.g. noise-free) evidence outweighs the prior."""
        sxx, sxy, syy = self._sums(rows)
        has_span = self.span_rows.has(rows)
        span_count = np.zeros(rows.shape[0])
        span_count[has_span] = self.span.gn[self.span_rows.rows(rows[has_span])]
        span = span_count > 0
        sr = rows[span]
        dof = (1.0 + np.maximum(self.nobs[rows] - (self.s0[rows] > 0), 0.0)
               + np.maximum(span_count - 1, 0.0))
        sigma2 = np.full(rows.shape[0], SIGMA0_SQ)
        mu = np.zeros(rows.shape[0])
        info = np.zeros(rows.shape[0])
        pos = np.zeros(rows.shape[0])
        act = np.arange(rows.shape[0])              # rows whose sigma^2 has not settled
        for _ in range(FIT_PASSES):
            r = rows[act]
            m = self._linear_fit(r, sxx[act], sxy[act], sigma2[act])
            rss = np.maximum(syy[act] - 2 * m * sxy[act] + m * m * sxx[act], 0.0)
            inf = 2 * sxx[act]
            sp = span[act]
            if sp.any():
                a = act[sp]
                m[sp], rss[sp], inf[sp], pos[a] = self._grid_fit(
                    rows[a], sxx[a], sxy[a], syy[a], sigma2[a])
            mu[act], info[act] = m, inf
            new_sigma2 = (SIGMA0_SQ + rss) / dof[act]
            moved = np.abs(new_sigma2 - sigma2[act]) > 1e-3 * sigma2[act]
            sigma2[act] = new_sigma2
            act = act[moved]
            if act.size == 0:
                break
        mu = np.clip(mu, *self._bounds())
        info = 0.5 * info / sigma2 + self._prior(rows) / mu**2
        if sr.size:
            b, br = self.span, self.span_rows.rows(sr)
            pos = pos[span]
            lo = np.clip(np.floor(pos).astype(np.int64), 0, self._grid.shape[0] - 2)
            f = pos - lo
            r = np.arange(sr.shape[0])
            base = b.gly[br] / b.gn[br]
            v0 = base - b.glg[br][r, lo] / b.gn[br]
            v1 = base - b.glg[br][r, lo + 1] / b.gn[br]
            b.scale[br] = np.exp((1 - f) * v0 + f * v1)
        return mu, info

    def _refresh(self) -> None:
        """Refit the sources whose evidence changed since the last fit."""
        rows = np.flatnonzero(self.dirty)
        if rows.size == 0:
            return
        self.c_mu[rows], _ = self._fit(rows)
        self.dirty[rows] = False

    def mean(self) -> np.ndarray:
        self._refresh()
        return self.c_mu.copy()

    get = mean

    def mean_at(self, ids) -> np.ndarray:
        """``mean()[ids]`` without a copy of every source's estimate."""
        self._refresh()
        return self.c_mu[ids]

    def span_scale(self) -> np.ndarray:
        """A_hat = (Lambda xi_bar)_hat from ``update_span`` evidence (NaN without any)."""
        self._refresh()
        out = np.full(self.n, np.nan)
        has = self.span_rows.has()
        out[has] = self.span.scale[self.span_rows.row[has]]
        return out

    def half_life(self) -> np.ndarray:
        return LN2 / self.mean()

    def learned_at(self, ids) -> np.ndarray:
        """bool per source of ``ids``: some evidence bears on mu (a least-squares curvature
        S_xx > 0, or ``update_span`` evidence); where none does, mu_hat is the prior's (one
        capture of unknown base values at one age, say, fixes the intercept only)."""
        ids = np.asarray(ids, dtype=np.int64)
        return (self._sums(ids)[0] > 0) | self.span_rows.has(ids)

    def std(self) -> np.ndarray:
        """Standard error of mu_hat: the inverse square root of the objective's curvature."""
        _, info = self._fit(np.arange(self.n))
        return 1.0 / np.sqrt(info)

    def _after_import(self) -> None:
        self.dirty[:] = True
