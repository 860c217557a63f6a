"""Due-time scheduling, the mechanics every interval rule shares (Nutch, Miniflux, NewsBlur,
CommaFeed, StormCrawler, a fixed interval).

Such a rule keeps, per source, the time its next crawl is due, set after each crawl to the
crawl's epoch plus the interval its rule computes. A crawler running the rule fetches the
sources that are due (due time <= now); under a budget, the most overdue first, and budget that
no due source needs is left unused, as the rules' own schedulers do.
"""

from __future__ import annotations

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
