"""What one batch of crawls showed: the only thing a policy ever learns from.

The simulator (``sim``) and the Scrapy middleware both produce an :class:`Observation`;
every policy consumes it through ``Policy.observe``. It carries what a real crawler sees
when it fetches a feed, never the hidden model parameters:

* per crawled source (arrays aligned with ``sources``): the time of the crawl, whether the
  fetch succeeded, how many entries were new since the previous crawl, whether the feed's
  window was full of new entries (so older new entries may have been lost), and the value
  captured (the utility of the new entries at capture, as the crawler measures it);
* per new entry (ragged, CSR layout through ``item_offsets``): its publication time and, when
  the source exposes it, its observed base value (NaN when unknown).

For the changing-pages model a crawl's single "entry" is the page itself: ``new_items`` is the
changed-since-last-crawl bit and ``reward`` is the importance captured.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from scrapy_whittle.core.distinct import all_distinct, first_of_each

_EMPTY_F = np.zeros(0, dtype=np.float64)


def one_per_source(sources: np.ndarray, time: np.ndarray, keep: np.ndarray
                   ) -> Iterator[np.ndarray]:
    """The crawls ``keep`` (bool mask) in passes that hold each source at most once (what an
    estimator's batch update needs): bool masks over the crawls, a source's crawls in time
    order (its earliest in the first pass). One pass, ``keep`` itself, when no source
    repeats (the usual batch)."""
    keep = np.asarray(keep, dtype=bool)
    if all_distinct(sources[keep]):
        if keep.any():
            yield keep
        return
    remaining = keep.copy()
    while remaining.any():
        idx = np.flatnonzero(remaining)
        idx = idx[np.lexsort((time[idx], sources[idx]))]
        _, first = first_of_each(sources[idx])
        batch = np.zeros(remaining.shape[0], dtype=bool)
        batch[idx[first]] = True
        yield batch
        remaining &= ~batch


@dataclass(frozen=True)
class Observation:
    epoch: int
    sources: np.ndarray                 # int64[k]   crawled source ids
    time: np.ndarray                    # float64[k] time of each crawl (epoch * T in the sim)
    new_items: np.ndarray               # int64[k]   entries new since the previous crawl
    reward: np.ndarray                  # float64[k] value captured by each crawl
    ok: np.ndarray = field(default=None)           # type: ignore[assignment] bool[k]
    window_full: np.ndarray = field(default=None)  # type: ignore[assignment] bool[k]
    item_offsets: np.ndarray | None = None  # int64[k+1]: entries of crawl j are [off[j], off[j+1])
    item_published: np.ndarray | None = None  # float64[total] publication times
    item_value: np.ndarray | None = None      # float64[total] observed base values (NaN unknown)
    # float64[k]: publication time of the oldest entry each crawl's feed listed, new or known
    # (NaN unknown): how far back the crawl could see what a hub lost
    listed_from: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        k = len(self.sources)
        object.__setattr__(self, "sources", np.asarray(self.sources, dtype=np.int64))
        time = np.asarray(self.time, dtype=np.float64)
        if time.ndim == 0:
            time = np.full(k, float(time))
        object.__setattr__(self, "time", time)
        object.__setattr__(self, "new_items", np.asarray(self.new_items, dtype=np.int64))
        object.__setattr__(self, "reward", np.asarray(self.reward, dtype=np.float64))
        ok = np.ones(k, dtype=bool) if self.ok is None else np.asarray(self.ok, dtype=bool)
        object.__setattr__(self, "ok", ok)
        full = (np.zeros(k, dtype=bool) if self.window_full is None
                else np.asarray(self.window_full, dtype=bool))
        object.__setattr__(self, "window_full", full)
        listed = (np.full(k, np.nan) if self.listed_from is None
                  else np.asarray(self.listed_from, dtype=np.float64))
        object.__setattr__(self, "listed_from", listed)
        for name in ("time", "new_items", "reward", "ok", "window_full", "listed_from"):
            if getattr(self, name).shape != (k,):
                raise ValueError(f"Observation.{name} must have one value per crawled source")
        if self.item_offsets is not None:
            off = np.asarray(self.item_offsets, dtype=np.int64)
            if off.shape != (k + 1,):
                raise ValueError("Observation.item_offsets must have len(sources) + 1 entries")
            object.__setattr__(self, "item_offsets", off)
            if self.item_published is None:
                raise ValueError("Observation.item_published is required with item_offsets")
            pub = np.asarray(self.item_published, dtype=np.float64)
            object.__setattr__(self, "item_published", pub)
            val = (np.full(pub.shape, np.nan) if self.item_value is None
                   else np.asarray(self.item_value, dtype=np.float64))
            object.__setattr__(self, "item_value", val)
            if pub.shape != (off[-1],) or val.shape != pub.shape:
                raise ValueError("Observation item arrays must hold item_offsets[-1] entries")

    @property
    def total_reward(self) -> float:
        return float(self.reward[self.ok].sum())

    @property
    def changed(self) -> np.ndarray:
        """bool[k]: the crawl found something new (the 2021 paper's changed bit)."""
        return (self.new_items > 0) & self.ok

    def items_of(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """(publication times, values) of the new entries of the j-th crawl."""
        if self.item_offsets is None:
            return _EMPTY_F, _EMPTY_F
        a, b = self.item_offsets[j], self.item_offsets[j + 1]
        return self.item_published[a:b], self.item_value[a:b]

    @classmethod
    def empty(cls, epoch: int = 0) -> Observation:
        z = np.zeros(0)
        return cls(epoch=epoch, sources=z, time=z, new_items=z, reward=z)
