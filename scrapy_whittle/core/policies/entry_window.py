"""Counting a feed's entries published in the last few days, for the rules that schedule from
such a count (Miniflux's weekly count, NewsBlur's stories of the last 30 days).

The rules count in their databases; here each source keeps its counts of the last ``days``
days (one column per day, oldest first, and the index of the newest day), and the window
(now - (days - 1) days, now] is the last ``days - 1`` days whole plus the part of the oldest
day the window covers, counted in proportion (uniform within the day): exact to the day,
approximate within the oldest one.

Publication times come from the observation's item times; when it carries none (the
deterministic simulator), a crawl's ``new_items`` entries are spread evenly over the time
since the source's previous check (over a rule-chosen span at its first check).
"""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.estimators._base import segment_rows
from scrapy_whittle.core.observation import Observation


def entry_times(obs: Observation, sel: np.ndarray, last_check: np.ndarray, first_span: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """(CSR offsets, publication times) of the new entries of crawls ``sel`` (indices into
    ``obs``); ``last_check``: the previous check of each of them (NaN: never checked, then
    the entries are spread over the ``first_span`` before the check)."""
    if obs.item_offsets is not None:
        off, items = segment_rows(obs.item_offsets, sel)
        return off, obs.item_published[items]
    n_new = np.maximum(obs.new_items[sel], 0)
    now = obs.time[sel]
    prev = np.where(np.isnan(last_check), now - first_span, np.minimum(last_check, now))
    off = np.zeros(sel.size + 1, dtype=np.int64)
    np.cumsum(n_new, out=off[1:])
    crawl = np.repeat(np.arange(sel.size), n_new)
    pos = np.arange(off[-1]) - off[crawl]
    return off, prev[crawl] + (now - prev)[crawl] * (pos + 0.5) / n_new[crawl]


def slide_and_count(counts: np.ndarray, newest_day: np.ndarray, now: np.ndarray,
                    off: np.ndarray, times: np.ndarray, day: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Move the day counts of k checks (``counts`` (k, days), ``newest_day`` (k,), each row a
    different source) to the day of ``now``, add the entries (``off``, ``times``: CSR per
    check) that fall in them, and count the window at ``now``. Returns the new counts, newest
    days and window counts (float: the oldest day counted in part)."""
    days = counts.shape[1]
    k = counts.shape[0]
    today = np.floor(now / day).astype(np.int64)
    newest = newest_day.astype(np.int64)
    shift = today - newest
    # the days that left the window: counts[:-s] = counts[s:], zeros after
    col = np.arange(days) + np.maximum(shift, 0)[:, None]
    rows = np.arange(k)[:, None]
    counts = np.where(col < days, counts[rows, np.minimum(col, days - 1)], 0).astype(counts.dtype)
    newest = np.where(shift > 0, today, newest)
    crawl = np.repeat(np.arange(k), np.diff(off))
    slot = np.floor(times / day).astype(np.int64) - newest[crawl] + days - 1
    inside = (slot >= 0) & (slot < days)
    np.add.at(counts, (crawl[inside], slot[inside]), 1)
    part = 1.0 - (now / day - today)
    window = counts[:, 1:].sum(axis=1) + part * counts[:, 0]
    return counts, newest, window
