"""The spider's feedback API: a pipeline reports what entries were worth."""

from __future__ import annotations

import numpy as np
import pytest_twisted

from scrapy_whittle import report_value
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from tests.scrapy.conftest import VirtualWeb, make_crawler, run, whittle


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
async def test_pipeline_reports_reach_the_decay_estimate():
    web = VirtualWeb(n=6)
    try:
        crawler = make_crawler(WHITTLE_SOURCES=web.feeds(6), WHITTLE_BUDGET=3,
                               WHITTLE_PERIOD=900, WHITTLE_MAX_EPOCHS=8,
                               WHITTLE_ENGAGEMENT_SCALE=1000, WHITTLE_CLOCK=web.clock,
                               ITEM_PIPELINES={f"{__name__}.ReportingPipeline": 100})
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    assert w["feedback/accepted"] > 0
    assert "feedback/refused" not in w


def test_garbage_reports_are_refused_and_counted():
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 60})
    service = RecrawlService(config)
    service.open([SourceSpec(url="https://a.example/f.xml")])
    before = service.policy.decay.state_dict()
    assert not service.report_value("https://unknown.example/", 1.0, published=0.0, at=10.0)
    assert not service.report_value(0, float("nan"), published=0.0, at=10.0)
    assert not service.report_value(0, -1.0, published=0.0, at=10.0)
    assert not service.report_value(0, 1.0, published=20.0, at=10.0)      # from the future
    assert not service.report_value(0, 1.0, published="yesterday", at=10.0)
    assert service.stats.get("feedback/refused") == 5
    after = service.policy.decay.state_dict()
    for key, value in before.items():
        np.testing.assert_array_equal(np.asarray(after[key]), np.asarray(value))
    prior = service.policy.decay.mean()[0]
    for _ in range(5):   # half the base value left after two prior half-lives (240 s each)
        assert service.report_value("https://a.example/f.xml", 0.5, published=0.0, at=480.0,
                                    base_value=1.0)
    assert service.policy.decay.mean()[0] < 0.8 * prior    # interest decays slower than assumed
