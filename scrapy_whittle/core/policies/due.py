"""Due-time scheduling, the mechanics every interval rule shares (Nutch, Miniflux, NewsBlur,
CommaFeed, StormCrawler, a fixed interval).

Such a rule keeps, per source, the time its next crawl is due, set after each crawl to the
crawl's epoch plus the interval its rule computes. A crawler running the rule fetches the
sources that are due (due time <= now); under a budget, the most overdue first, and budget that
no due source needs is left unused, as the rules' own schedulers do.

A maximum interval (``with_max_interval``) is the one piece of such a rule that the index
policies take too: a source not crawled for that long goes first.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from scrapy_whittle.core.selection import select_top


def select_due(due_time: np.ndarray, now: float, cost: np.ndarray | None, budget: float,
               eligible: np.ndarray | None = None) -> np.ndarray:
    """The sources due at ``now`` (``due_time <= now``), most overdue first, within ``budget``
    (and ``eligible``, a bool mask, when given)."""
    if due_time.shape[0] == 0 or budget <= 0:
        return np.zeros(0, dtype=np.int64)
    overdue = now - due_time
    due = overdue >= 0
    return select_top(overdue, cost, budget, due if eligible is None else due & eligible)


def with_max_interval(select: Callable[[float, np.ndarray | None], np.ndarray],
                      waited: np.ndarray, max_interval: float | None, cost: np.ndarray,
                      budget: float, eligible: np.ndarray | None = None) -> np.ndarray:
    """Every source checked at least every ``max_interval``: the sources that ``waited`` that
    long since their last crawl (and are ``eligible``) first, the longest waiting first,
    within ``budget``; then ``select(budget left, eligible less those)`` for the rest (the
    policy's own choice). ``max_interval`` None: ``select`` alone. A slow feed's stories are
    worth little to an index that values freshness, so without it such a feed can wait for
    days, and a reader notices; every feed reader caps its interval for that reason."""
    if max_interval is None or budget <= 0:
        return select(budget, eligible)
    with np.errstate(invalid="ignore"):
        late = waited >= max_interval
    if eligible is not None:
        late &= eligible
    if not late.any():
        return select(budget, eligible)
    forced = select_top(np.nan_to_num(waited, nan=0.0), cost, budget, late)
    spent = float(np.sum(cost[forced])) if cost is not None else float(forced.shape[0])
    rest = np.ones(waited.shape[0], dtype=bool) if eligible is None else eligible.copy()
    rest[forced] = False
    if budget - spent < 1e-9 or not rest.any():
        return forced
    return np.concatenate([forced, select(budget - spent, rest)])
