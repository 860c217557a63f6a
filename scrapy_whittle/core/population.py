"""The empirical-Bayes prior of a source never crawled: the population-expected index.

A learner knows nothing of a source before its first crawl but what the sources it has crawled
say about the population. The right price of an unknown source is then the *expected index*
over that population: the mean, over the sources j already learned, of gamma_j(x_j(t)), x_j(t)
the value j would hold now had it never been crawled. Not the index of the mean parameters: news
populations are heavy-tailed, the mean (alpha, u) describes no source, and the expected index
prices the chance that an unknown source is one of the few that carry most of the value (the
first-look oracle of ``sim.bench.first_look`` ranks unknown sources the same way with the true
population).

What a never-crawled source holds: its first crawl showed the source's history back to the
oldest entry it listed (a feed that has been publishing for long lists entries far older than
the crawl's start; one that started with the crawl, none). That history's start, h_j in epochs,
is kept per source, and a never-crawled copy of j would hold x_j(t) = u_j G(t - h_j),
G(k) = (1 - alpha_j^k) / (1 - alpha_j): the stationary stock u_j / (1 - alpha_j) of an old feed,
or what arrived since the start of a new one. A feed's window caps what a first crawl can
show; its oldest visible entry bounds the history, so the stock is what the window held.

Pooling: with ``groups`` (an OPML category, a host) the mean is taken per group and shrunk
towards the population's mean with ``PSEUDO_SOURCES`` pseudo-sources of the population (a group
of a few crawled sources says little; one of hundreds speaks for itself). The index is pooled
per unit of a source's prior value weight, so that a source the user marked as twice as valuable
is priced twice as high. Beyond ``SAMPLE_SIZE`` learned sources the mean is taken over every
k-th of them by id (ids say nothing of a source's parameters), which keeps the cost per epoch
bounded at any number of sources.
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.dynamics import geometric_sum
from scrapy_whittle.core.estimators._base import segment_rows
from scrapy_whittle.core.index import IndexTable
from scrapy_whittle.core.observation import Observation

#: learned sources the population's mean is taken over, at most
SAMPLE_SIZE = 4096
#: the population's weight in a group's mean, in sources
PSEUDO_SOURCES = 8.0


def sample_of(ids: np.ndarray, size: int = SAMPLE_SIZE) -> np.ndarray:
    """At most about ``size`` of ``ids`` (sorted source ids): every k-th."""
    step = -(-ids.shape[0] // size) if ids.shape[0] > size else 1
    return ids[::step]


def check_groups(groups, n: int) -> None:
    """ValueError for a ``groups`` array that does not cover the ``n`` sources."""
    if groups is not None and not callable(groups) and len(groups) < n:
        raise ValueError(f"groups has {len(groups)} values for {n} sources: one per source "
                         f"(or a callable)")


def group_ids(groups, ids: np.ndarray) -> np.ndarray:
    """The pooling groups of sources ``ids`` given ``groups`` (None: one group; an array over
    the sources; callable(ids) -> ints): non-negative int32, a source beyond the array, or
    with a negative group, in group 0."""
    if groups is None or ids.size == 0:
        return np.zeros(ids.shape[0], dtype=np.int32)
    if callable(groups):
        g = np.asarray(groups(ids), dtype=np.int64)
    else:
        given = np.asarray(groups, dtype=np.int64)
        g = np.zeros(ids.shape[0], dtype=np.int64)
        inside = ids < given.shape[0]
        g[inside] = given[ids[inside]]
    return np.where(g >= 0, g, 0).astype(np.int32)


def oldest_listed(obs: Observation, sel: np.ndarray) -> np.ndarray:
    """Per crawl of ``sel`` (a bool mask over ``obs``), the publication time of the oldest
    entry it listed with a usable date (not after the crawl): NaN without item arrays, inf
    where no entry had one."""
    t = obs.time[sel]
    oldest = np.full(t.shape[0], np.nan)
    if obs.item_offsets is None:
        return oldest
    off, idx = segment_rows(obs.item_offsets, sel)
    counts = np.diff(off)
    pub = obs.item_published[idx]
    with np.errstate(invalid="ignore"):
        pub = np.where(pub <= np.repeat(t, counts), pub, np.inf)
    oldest[:] = np.inf
    some = counts > 0
    if some.any():
        oldest[some] = np.minimum.reduceat(pub, off[:-1][some])
    return oldest


def history_start(epoch, time, period: float, oldest_published, added_epoch) -> np.ndarray:
    """The epoch at which a source's history begins, from its first crawl at ``epoch``
    (``time``, in the problem's unit) that listed entries back to ``oldest_published`` (NaN or
    inf: none with a usable date): no later than the epoch the source was added."""
    with np.errstate(invalid="ignore"):
        listed = np.asarray(epoch, dtype=np.float64) - (np.asarray(time) - oldest_published) \
            / float(period)
    listed = np.where(np.isfinite(listed), listed, np.inf)
    return np.minimum(listed, added_epoch)


def expected_index(epoch: int, log_alpha: np.ndarray, one_minus_alpha: np.ndarray,
                   u: np.ndarray, history: np.ndarray, weight: np.ndarray,
                   groups: np.ndarray | None = None, n_groups: int = 1) -> np.ndarray:
    """Per group (0 .. n_groups - 1), the expected index at ``epoch`` of a source never crawled,
    per unit of prior weight and cost, from the learned sources of the sample (their
    log alpha, 1 - alpha, u, history start and prior weight; ``groups``: their group ids,
    None: one group). NaN where nothing was learned."""
    out = np.full(n_groups, np.nan)
    if u.shape[0] == 0:
        return out
    waited = np.maximum(epoch - np.nan_to_num(history, nan=float(epoch)), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = u * geometric_sum(waited, log_alpha, one_minus_alpha)
        per_weight = IndexTable.from_logs(log_alpha, u, 1.0, one_minus_alpha).index(x) / weight
    per_weight = np.where(np.isfinite(per_weight), per_weight, 0.0)
    overall = float(per_weight.mean())
    if groups is None or n_groups == 1:
        out[:] = overall
        return out
    total = np.bincount(groups, per_weight, minlength=n_groups)[:n_groups]
    count = np.bincount(groups, minlength=n_groups)[:n_groups]
    return (total + PSEUDO_SOURCES * overall) / (count + PSEUDO_SOURCES)
