"""The parts the re-crawl service is composed of: the epochs' named totals a checkpoint
writes, and the judgement of a fetched feed that the service and a cluster's node share."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scrapy_whittle.core import sanitize
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.decisions.epochs import EpochLedger, EpochTotals
from scrapy_whittle.service.decisions.outcomes import count_fetch, judge_fetch
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore
from scrapy_whittle.service.types import DictStats
from tests.service.test_recrawl import make_service


def entry(key, engagement=None):
    return FeedEntry(key=key, title=None, link=None, published=None, engagement=engagement)


def test_the_ledger_drains_named_totals_in_the_stores_column_order():
    ledger = EpochLedger()
    t = ledger[3]
    t.crawls += 2
    t.cost += 1.5
    t.new_items += 7
    t.utility += 3.25
    t.errors += 1
    t.not_modified += 4
    ledger.errors[3, "http_500"] += 1
    ledger.missed[3] += 0.5
    ledger.delays[4].add(np.array([0.5, 30.0, 31.0]))
    rows, errors, measures, delays = ledger.drain()
    assert rows == [(3, 2, 1.5, 7, 3.25, 1, 4)]
    assert errors == [(3, "http_500", 1)]
    assert measures == [(3, 0.5, 0.0), (4, 0.0, 61.5)]
    # [0, 1 s) is bin 0; 30 and 31 s in [10^1.4, 10^1.5), bin 15
    assert delays == [(4, 0, 1), (4, 15, 2)]
    assert ledger.drain() == ([], [], [], [])
    assert EpochTotals() == EpochTotals(0, 0.0, 0, 0.0, 0, 0)


def test_a_checkpoint_writes_what_each_epoch_did(tmp_path):
    service, _ = make_service(n=3, budget=3, store=SqliteStateStore(tmp_path / FILE_NAME))
    crawls = []
    while (crawl := service.next_crawl()) is not None:
        crawls.append(crawl)
    first, second, third = crawls
    service.feed_fetched(first, [entry("a"), entry("b")])
    service.not_modified(second)
    service.crawl_failed(third, "http_500", "HTTP 500")
    cp = service.prepare_checkpoint()
    cost = sum(float(service.sources.cost[c.source]) for c in crawls)
    value = 2 * service.config.item_value
    assert cp.epochs == [(first.epoch, 3, cost, 2, value, 1, 1)]
    assert cp.epoch_errors == [(first.epoch, "http_500", 1)]
    assert service.prepare_checkpoint().epochs == []      # counted once
    service.close()


def test_judge_fetch_window_values_and_clipping():
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_ITEM_VALUE": 2.0,
                                          "WHITTLE_ENGAGEMENT_SCALE": 10.0})
    stats = DictStats()
    new = [entry("a"), entry("b", engagement=5.0)]
    # a first fetch cannot tell a full window from a feed that is all new
    assert not judge_fetch(new, 2, False, 1.5, config, stats).window_full
    found = judge_fetch(new, 2, True, 1.5, config, stats)
    assert found.window_full and found.entries == new
    assert found.values == [3.0, 0.5]
    assert not judge_fetch(new, 3, True, 1.5, config, stats).window_full
    assert stats.values == {}
    huge = judge_fetch([entry("c")], 1, True, math.inf, config, stats)
    assert huge.values == [sanitize.MAX_ENTRY_VALUE]
    assert stats.get("clipped/value") == 1


@pytest.mark.parametrize("window_full", [False, True])
def test_count_fetch(window_full):
    stats = DictStats()
    count_fetch(stats, 3, 4.5, window_full)
    assert stats.values == {"fetched": 1, "new_items": 3, "utility": 4.5,
                            **({"window_full": 1} if window_full else {})}
