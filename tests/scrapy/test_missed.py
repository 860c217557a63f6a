"""The scheduler's estimate of entries lost to full feed windows (stats ``missed_items``),
checked against a Poisson feed whose losses are known exactly."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.settings import WhittleConfig
from scrapy_whittle.source_table import SourceTable
from scrapy_whittle.sources import SourceSpec


def _table() -> SourceTable:
    table = SourceTable(WhittleConfig.from_settings({"WHITTLE_BUDGET": 1,
                                                     "WHITTLE_PERIOD": 1.0}))
    table.add([SourceSpec(url="https://a.example/feed.xml")])
    return table


def test_missed_entries_estimate_matches_the_truth_of_a_poisson_feed():
    sched = _table()
    rng = np.random.default_rng(0)
    rate, window, interval = 3.0, 4, 2.0        # ~6 new entries per crawl, 4 visible
    arrivals = np.cumsum(rng.exponential(1 / rate, 20000))
    truth = estimate = 0.0
    for k in range(1, 2000):
        t0, t1 = (k - 1) * interval, k * interval
        new = arrivals[(arrivals > t0) & (arrivals <= t1)]
        visible = new[-window:]
        truth += len(new) - len(visible)
        estimate += sched.estimate_missed(0, t1, visible, window_full=len(new) >= window)
    assert truth > 1000
    assert estimate == pytest.approx(truth, rel=0.05)


def test_nothing_is_missed_when_the_window_was_not_full():
    sched = _table()
    assert sched.estimate_missed(0, 5.0, np.array([1.0, 2.0]), window_full=False) == 0.0
