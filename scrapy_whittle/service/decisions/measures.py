"""The users' measures of a crawl: how long the entries it captured had waited in their feeds
(the discovery delay, publication to capture), and crawls per captured entry; the entries it
missed are estimated where the policy learns (``missed_items``, :mod:`.outcomes`).

A delay is measured for each entry found new at a re-crawl of its source that carries a
publication date: entries of a source's first fetch (in a run) were published before the
crawler looked, and how long they waited says nothing of the policy; an undated entry has no
delay. A date after the capture (a clock ahead of ours) counts as no wait.

Delays are kept in a fixed histogram (:data:`EDGES`: [0, 1 s), then ten log-spaced bins per
decade up to 10^8 s, about three years, then one bin for anything longer) beside their exact
sum, so the memory and the store's rows stay bounded however long the crawl: the mean is
exact; the median and the 90th percentile are read from the histogram, interpolated within
their bin, so within a bin's width (a factor 10^0.1) of the exact value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

#: bin k holds delays in [EDGES[k], EDGES[k + 1]); the last bin all from EDGES[-1] on
EDGES = np.concatenate(([0.0], 10.0 ** (np.arange(81) / 10)))
N_BINS = EDGES.shape[0]


def as_times(values: Iterable) -> np.ndarray:
    """Publication times as float64, NaN where unknown (None) or unreadable."""
    values = list(values)
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):     # a worker's garbage, through Redis
        out = np.full(len(values), np.nan)
        for j, v in enumerate(values):
            try:
                out[j] = float(v)
            except (TypeError, ValueError, OverflowError):
                pass
        return out


class DelayHistogram:
    """Discovery delays (seconds): counts per bin of :data:`EDGES` and their exact sum."""

    __slots__ = ("counts", "seconds")

    def __init__(self) -> None:
        self.counts = np.zeros(N_BINS, dtype=np.int64)
        self.seconds = 0.0

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def add(self, delays: np.ndarray) -> None:
        """Delays (finite, >= 0)."""
        bins = np.searchsorted(EDGES, delays, side="right") - 1
        self.counts += np.bincount(bins, minlength=N_BINS)
        self.seconds += float(delays.sum())

    def merge(self, other: DelayHistogram) -> None:
        self.counts += other.counts
        self.seconds += other.seconds

    def mean(self) -> float:
        n = self.n
        return self.seconds / n if n else math.nan

    def quantile(self, q: float) -> float:
        """The q-quantile (0 < q < 1), interpolated within its bin: linearly in the first,
        log-linearly in the others; the last, unbounded, gives its lower edge. NaN when
        empty."""
        cum = np.cumsum(self.counts)
        total = int(cum[-1])
        if not total:
            return math.nan
        target = q * total
        k = int(np.searchsorted(cum, target, side="left"))
        before = int(cum[k - 1]) if k else 0
        within = (target - before) / int(self.counts[k])
        lo = float(EDGES[k])
        if k == N_BINS - 1:
            return lo
        hi = float(EDGES[k + 1])
        return lo + within * (hi - lo) if k == 0 else lo * (hi / lo) ** within

    def rows(self, epoch: int) -> list[tuple[int, int, int]]:
        """(epoch, bin, count) of the bins that hold delays: the store's ``epoch_delays``."""
        bins = np.flatnonzero(self.counts)
        return [(epoch, b, c) for b, c in zip(bins.tolist(), self.counts[bins].tolist(),
                                              strict=True)]

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, int]], seconds: float) -> DelayHistogram:
        """From (bin, count) rows and the delays' sum (as the store holds them); bins out of
        range (a foreign or damaged file) are left out."""
        h = cls()
        for b, c in rows:
            if 0 <= int(b) < N_BINS and int(c) > 0:
                h.counts[int(b)] += int(c)
        h.seconds = float(seconds)
        return h

    def summary(self) -> dict[str, float]:
        """``mean_s``, ``median_s``, ``p90_s`` (NaN when no delay was measured)."""
        return {"mean_s": self.mean(), "median_s": self.quantile(0.5),
                "p90_s": self.quantile(0.9)}

