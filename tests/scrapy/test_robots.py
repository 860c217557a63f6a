"""robots.txt Crawl-delay becomes the papers' cost C_i and paces the host's download slot."""

from __future__ import annotations

import pytest
import pytest_twisted

from tests.scrapy.conftest import Server, make_crawler, run, whittle
from tests.scrapy.test_crawl import feeds, keep_scheduler


@pytest.fixture(scope="module")
def slow_host():
    server = Server("--scenario", "news-mix", "--n", "6", "--speed", "3600",
                    "--crawl-delay", "0.25")
    yield server
    server.stop()


@pytest_twisted.ensureDeferred
async def test_crawl_delay_raises_costs_and_limits_crawls(slow_host):
    # budget 8 per second: a 0.25 s Crawl-delay makes each crawl cost max(1, 0.25 * 8) = 2
    crawler = make_crawler(WHITTLE_SOURCES=feeds(slow_host, 6), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=8, WHITTLE_PERIOD=1.0, CLOSESPIDER_TIMEOUT=3.5,
                           ROBOTSTXT_OBEY=True)
    box = keep_scheduler(crawler)
    w = whittle(await run(crawler))
    service = box["scheduler"].service
    assert service.sources.crawl_delays == {"127.0.0.1": 0.25}
    assert list(service.policy.problem.cost) == [2.0] * 6
    # epoch 0 was planned before robots.txt arrived: its 6 crawls cost 1 each; every later
    # crawl costs 2, so each of the 3 later epochs (3.5 s) affords at most 4 crawls
    later = w["crawls"] - 6
    assert 1 <= later <= 4 * 3
    assert w["crawls/cost"] == pytest.approx(6 + 2.0 * later)
