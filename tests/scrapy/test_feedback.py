"""The spider's feedback API: a pipeline reports what entries were worth."""

from __future__ import annotations

import numpy as np
import pytest_twisted

from scrapy_whittle import report_value
from scrapy_whittle.scheduler import WhittleScheduler
from scrapy_whittle.settings import WhittleConfig
from tests.scrapy.conftest import make_crawler, run, whittle
from tests.scrapy.test_crawl import feeds


class ReportingPipeline:
    """Reports each item's value at capture, as an analytics pipeline would report clicks."""

    def __init__(self, crawler):
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler):
        return cls(crawler)

    def process_item(self, item):
        if item["published"] is not None and item["value"] > 0:
            report_value(self.crawler, source=item["source"], value=item["value"],
                         published=item["published"], at=item["discovered_at"])
        return item


@pytest_twisted.ensureDeferred
async def test_pipeline_reports_reach_the_decay_estimate(sim_server):
    crawler = make_crawler(WHITTLE_SOURCES=feeds(sim_server, 6), WHITTLE_BUDGET=3,
                           WHITTLE_PERIOD=0.25, CLOSESPIDER_TIMEOUT=2,
                           WHITTLE_ENGAGEMENT_SCALE=1000,
                           ITEM_PIPELINES={f"{__name__}.ReportingPipeline": 100})
    w = whittle(await run(crawler))
    assert w["feedback/accepted"] > 0
    assert "feedback/refused" not in w


def test_garbage_reports_are_refused_and_counted():
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 60,
                                          "WHITTLE_SOURCES": ["https://a.example/f.xml"]})
    sched = WhittleScheduler(inner=None, config=config, sources=None)
    sched._register_many([__import__("scrapy_whittle.sources").sources.SourceSpec(
        url="https://a.example/f.xml")])
    sched.policy = sched._build_policy(1)
    before = sched.policy.decay.state_dict()
    assert not sched.report_value("https://unknown.example/", 1.0, published=0.0, at=10.0)
    assert not sched.report_value(0, float("nan"), published=0.0, at=10.0)
    assert not sched.report_value(0, -1.0, published=0.0, at=10.0)
    assert not sched.report_value(0, 1.0, published=20.0, at=10.0)      # from the future
    assert not sched.report_value(0, 1.0, published="yesterday", at=10.0)
    after = sched.policy.decay.state_dict()
    for key, value in before.items():
        np.testing.assert_array_equal(np.asarray(after[key]), np.asarray(value))
    prior = sched.policy.decay.mean()[0]
    for _ in range(5):   # half the base value left after two prior half-lives (240 s each)
        assert sched.report_value("https://a.example/f.xml", 0.5, published=0.0, at=480.0,
                                  base_value=1.0)
    assert sched.policy.decay.mean()[0] < 0.8 * prior    # interest decays slower than assumed
