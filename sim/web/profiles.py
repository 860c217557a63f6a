"""Daily (and weekly) publishing rhythms: periodic rate multipliers p_i(t) of N sources.

Source i publishes as a Poisson process of intensity Lambda_i p_i(t), where p_i is periodic
(a day, or a week when a weekend factor is given) with mean 1 over its period, so Lambda_i
stays the mean rate of the stationary model (``scrapy_whittle.core.problem.SourceParams.rate``).

Representation (exact, small, vectorised):

* one base shape q shared by every source: ``bins`` piecewise-constant values over one local
  day, mean 1, minimum 0 (a newsroom's working day, ``newsroom_shape``);
* per source an amplitude a_i in [0, 1): p_i = (1 - a_i) + a_i q(local time), so the
  day/night ratio is max p / min p = 1 + a_i max(q) / (1 - a_i);
* per source a shift (its time zone and schedule): local time = t + shift_i bins, in whole
  bins so that p_i stays piecewise constant on the same grid;
* optionally per source a weekend factor w_i: the rate on local Saturdays and Sundays is w_i
  times the weekday rate, p scaled by 7 / (5 + 2 w_i) to keep the weekly mean 1. Time 0 is
  Monday 00:00 UTC.

The cumulative intensity P_i(t) = int_0^t p_i is piecewise linear, so arrival times are drawn
exactly by inverting it (``inverse``), and the expected value that arrives during an epoch,
decayed to the epoch's end, is an exact finite sum over bins (``epoch_table``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scrapy_whittle.core.periodic import epoch_arrivals

WEEKEND_DAYS = (5, 6)          # Saturday, Sunday (day 0 = Monday)


def newsroom_shape(bins: int = 96, start: float = 7.0, end: float = 21.0, edge: float = 1.0,
                   noon_boost: float = 0.35) -> np.ndarray:
    """A newsroom's working day on ``bins`` bins of one day (hours of local time).

    A smooth window from ``start`` to ``end`` o'clock (logistic edges of width ``edge``
    hours) times a mild midday maximum (1 + noon_boost cos(2 pi (h - 13) / 24)); then shifted
    to minimum 0 and scaled to mean 1. Our choice of shape, not a measured one: what it
    must show is that most items appear during working hours, with the peak around midday.
    """
    if bins < 4:
        raise ValueError(f"bins ({bins!r}) must be >= 4")
    h = (np.arange(bins) + 0.5) * 24.0 / bins

    def window(x):
        rise = 1.0 / (1.0 + np.exp(-(x - start) / edge))
        fall = 1.0 / (1.0 + np.exp(-(end - x) / edge))
        return rise * fall

    w = window(h) + window(h + 24.0) + window(h - 24.0)      # periodic
    q = w * (1.0 + noon_boost * np.cos(2.0 * np.pi * (h - 13.0) / 24.0))
    q -= q.min()
    return q / q.mean()


@dataclass(frozen=True)
class DiurnalProfile:
    """Periodic rate multipliers of N sources (see the module docstring).

    day: length of a day in time units (24 when the unit is the hour).
    shape: float64[B], the base shape over one local day (mean 1, min 0).
    amplitude: float64[N], a_i in [0, 1).
    shift: int64[N], local time = t + shift_i * day / B.
    weekend: float64[N] weekend factors w_i > 0, or None (no weekly cycle).
    """

    day: float
    shape: np.ndarray
    amplitude: np.ndarray
    shift: np.ndarray
    weekend: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not (np.isfinite(self.day) and self.day > 0):
            raise ValueError(f"day ({self.day!r}) must be > 0")
        q = np.asarray(self.shape, dtype=np.float64)
        if q.ndim != 1 or q.size < 2 or np.any(~np.isfinite(q)) or np.any(q < 0):
            raise ValueError("shape must be a 1-D array of >= 2 finite values >= 0")
        if abs(q.mean() - 1.0) > 1e-9:
            raise ValueError(f"shape must have mean 1, got {q.mean()!r}")
        a = np.asarray(self.amplitude, dtype=np.float64)
        if a.ndim != 1 or np.any(~np.isfinite(a)) or np.any((a < 0) | (a >= 1)):
            raise ValueError("amplitude must be a 1-D array of values in [0, 1)")
        s = np.asarray(self.shift)
        if s.shape != a.shape or not np.issubdtype(s.dtype, np.integer):
            raise ValueError("shift must hold one integer (bins) per source")
        object.__setattr__(self, "shape", q)
        object.__setattr__(self, "amplitude", a)
        object.__setattr__(self, "shift", s.astype(np.int64) % q.size)
        if self.weekend is not None:
            w = np.asarray(self.weekend, dtype=np.float64)
            if w.shape != a.shape or np.any(~np.isfinite(w)) or np.any(w <= 0):
                raise ValueError("weekend must hold one factor > 0 per source")
            object.__setattr__(self, "weekend", w)
        cum = np.concatenate([[0.0], np.cumsum(q)]) * (self.day / q.size)
        object.__setattr__(self, "_cum", cum)        # int_0^{j dt} q, j = 0..B

    # -- sizes --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return int(self.amplitude.shape[0])

    @property
    def bins(self) -> int:
        return int(self.shape.shape[0])

    @property
    def bin_width(self) -> float:
        return self.day / self.bins

    @property
    def period(self) -> float:
        """Length of the rhythm's period: a day, or a week with a weekend factor."""
        return self.day if self.weekend is None else 7.0 * self.day

    def _ids(self, ids) -> np.ndarray:
        return np.arange(self.n) if ids is None else np.asarray(ids, dtype=np.int64)

    def _scale(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """(weekday factor c_i, weekend factor c_i w_i) of sources ``ids``."""
        if self.weekend is None:
            one = np.ones(ids.shape[0])
            return one, one
        w = self.weekend[ids]
        c = 7.0 / (5.0 + 2.0 * w)
        return c, c * w

    def day_night_ratio(self) -> np.ndarray:
        """max p_i / min p_i within a weekday."""
        a, q = self.amplitude, self.shape
        return (1.0 - a + a * q.max()) / (1.0 - a + a * q.min())

    # -- the rate -----------------------------------------------------------------------
    def multiplier(self, t, ids=None) -> np.ndarray:
        """p_i(t) for sources ``ids`` (default all) at times t (broadcast with ids)."""
        ids = self._ids(ids)
        t = np.asarray(t, dtype=np.float64)
        local = t + self.shift[ids] * self.bin_width
        j = np.floor(np.mod(local, self.day) / self.bin_width).astype(np.int64)
        j = np.minimum(j, self.bins - 1)
        a = self.amplitude[ids]
        p = (1.0 - a) + a * self.shape[j]
        if self.weekend is not None:
            c, cw = self._scale(ids)
            dow = np.mod(np.floor(local / self.day), 7)
            p = p * np.where(dow >= WEEKEND_DAYS[0], cw, c)
        return p

    def bin_rates(self, ids=None) -> np.ndarray:
        """p_i on every bin of one period, shape (len(ids), bins per period): the exact
        piecewise-constant multiplier, bin j covering [j dt, (j + 1) dt)."""
        ids = self._ids(ids)
        per = round(self.period / self.bin_width)
        mid = (np.arange(per) + 0.5) * self.bin_width
        return self.multiplier(mid[None, :], ids[:, None])

    def _local_cumulative(self, tau: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """int_0^tau p_i in local time (origin: local Monday 00:00)."""
        day, dt = self.day, self.bin_width
        a = self.amplitude[ids]
        d = np.floor(tau / day)
        h = tau - d * day
        j = np.minimum(np.floor(h / dt).astype(np.int64), self.bins - 1)
        within = self._cum[j] + self.shape[j] * (h - j * dt)
        inday = (1.0 - a) * h + a * within                     # int over today, unscaled
        if self.weekend is None:
            return d * day + inday
        c, cw = self._scale(ids)
        w = self.weekend[ids]
        weeks = np.floor(d / 7.0)
        r = d - 7.0 * weeks                                    # local day of week, 0..6
        full = np.minimum(r, 5.0) + w * np.maximum(r - 5.0, 0.0)
        today = np.where(r >= WEEKEND_DAYS[0], cw, c)
        return weeks * 7.0 * day + c * day * full + today * inday

    def cumulative(self, t, ids=None) -> np.ndarray:
        """P_i(t) = int_0^t p_i(s) ds (t may be negative: then P < 0)."""
        ids = self._ids(ids)
        t = np.asarray(t, dtype=np.float64)
        off = self.shift[ids] * self.bin_width
        return self._local_cumulative(t + off, ids) - self._local_cumulative(off, ids)

    def inverse(self, y, ids=None) -> np.ndarray:
        """t with P_i(t) = y (the inverse of ``cumulative``; P is strictly increasing when
        every a_i < 1)."""
        ids = self._ids(ids)
        y = np.asarray(y, dtype=np.float64)
        day, dt, nb = self.day, self.bin_width, self.bins
        off = self.shift[ids] * dt
        big = y + self._local_cumulative(off, ids)             # local cumulative target
        a = self.amplitude[ids]
        if self.weekend is None:
            d = np.floor(big / day)
            z = big - d * day                                  # (1 - a) h + a Q(h) = z
            base = d * day
            scale = np.ones_like(z)
        else:
            c, cw = self._scale(ids)
            w = self.weekend[ids]
            weeks = np.floor(big / (7.0 * day))
            rem = big - weeks * 7.0 * day
            wd = rem < 5.0 * c * day
            r = np.where(wd, np.floor(rem / (c * day)),
                         5.0 + np.floor((rem - 5.0 * c * day) / (cw * day)))
            r = np.clip(r, 0.0, 6.0)
            full = np.minimum(r, 5.0) + w * np.maximum(r - 5.0, 0.0)
            scale = np.where(r >= WEEKEND_DAYS[0], cw, c)
            z = (rem - c * day * full) / scale
            base = weeks * 7.0 * day + r * day
        z = np.clip(z, 0.0, day)
        # g(j) = (1 - a) j dt + a cum[j] is increasing in j: binary search for the bin
        lo = np.zeros(z.shape, dtype=np.int64)
        hi = np.full(z.shape, nb, dtype=np.int64)
        while True:
            open_ = hi - lo > 1
            if not open_.any():
                break
            mid = (lo + hi) // 2
            g = (1.0 - a) * mid * dt + a * self._cum[mid]
            below = g <= z
            lo = np.where(open_ & below, mid, lo)
            hi = np.where(open_ & ~below, mid, hi)
        g_lo = (1.0 - a) * lo * dt + a * self._cum[lo]
        slope = (1.0 - a) + a * self.shape[lo]
        h = lo * dt + np.where(slope > 0, (z - g_lo) / np.where(slope > 0, slope, 1.0), 0.0)
        return base + np.minimum(h, day) - off

    def refined(self, factor: int) -> DiurnalProfile:
        """The same rhythm on bins ``factor`` times narrower (each bin's value repeated, the
        shifts in the narrower bins): p_i(t) unchanged, for epochs shorter than a bin."""
        if int(factor) != factor or factor < 1:
            raise ValueError(f"factor ({factor!r}) must be a positive integer")
        factor = int(factor)
        if factor == 1:
            return self
        return DiurnalProfile(self.day, np.repeat(self.shape, factor), self.amplitude,
                              self.shift * factor, self.weekend)

    # -- what the crawl-epoch models need -------------------------------------------------
    def epoch_table(self, rate, mean_utility, decay, period: float) -> np.ndarray:
        """u_i(tau): the expected value published during an epoch of phase tau (the epoch
        [tau T, (tau + 1) T) of the rhythm's period), decayed to the epoch's end, exactly
        (``scrapy_whittle.core.periodic.epoch_arrivals``); shape (N, K), K = period / T."""
        return epoch_arrivals(rate, mean_utility, decay, self.bin_rates(), self.bin_width,
                              period)

    def subset(self, ids) -> DiurnalProfile:
        ids = np.asarray(ids, dtype=np.int64)
        return DiurnalProfile(self.day, self.shape, self.amplitude[ids], self.shift[ids],
                              None if self.weekend is None else self.weekend[ids])


# -- a realistic population -----------------------------------------------------------------

#: time zones of the synthetic news population (hours from UTC) and their weights
TIME_ZONES = (
    ((0.0, 1.0, 2.0, 3.0), 0.45),                  # Europe and Africa
    ((-8.0, -7.0, -6.0, -5.0, -3.0), 0.35),        # the Americas
    ((5.5, 7.0, 8.0, 9.0, 10.0), 0.20),            # Asia and Oceania
)
RATIO_RANGE = (1.5, 16.0)          # day/night ratio, log-uniform
SCHEDULE_JITTER = 1.5              # hours, uniform +-: early and late newsrooms
WEEKEND_RANGE = (0.4, 1.0)         # weekend rate / weekday rate, uniform


def draw_profile(n: int, seed: int = 0, *, day: float = 24.0, bins: int = 96,
                 weekend: bool = False) -> DiurnalProfile:
    """A population of news rhythms (see docs/diurnal.md for the ranges and why):

    * day/night ratio R_i log-uniform on ``RATIO_RANGE`` (amplitude a_i solves
      1 + a max(q) / (1 - a) = R_i);
    * time zone from ``TIME_ZONES`` plus a schedule jitter uniform in +-SCHEDULE_JITTER hours,
      rounded to whole bins;
    * with ``weekend``: weekend factor uniform on ``WEEKEND_RANGE``.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2024, 24]))
    q = newsroom_shape(bins)
    ratio = np.exp(rng.uniform(np.log(RATIO_RANGE[0]), np.log(RATIO_RANGE[1]), n))
    amplitude = (ratio - 1.0) / (ratio - 1.0 + q.max())
    zones = rng.choice(len(TIME_ZONES), size=n, p=[w for _, w in TIME_ZONES])
    hours = np.empty(n)
    for z, (offsets, _) in enumerate(TIME_ZONES):
        sel = zones == z
        hours[sel] = rng.choice(np.asarray(offsets), size=int(sel.sum()))
    hours += rng.uniform(-SCHEDULE_JITTER, SCHEDULE_JITTER, n)
    shift = np.rint(hours * bins / 24.0).astype(np.int64)
    factor = rng.uniform(*WEEKEND_RANGE, n) if weekend else None
    return DiurnalProfile(day, q, amplitude, shift, factor)
