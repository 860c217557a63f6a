"""robots.txt Crawl-delay becomes the host's allowance in the plan (floor(T / d) crawls per
epoch) and paces the host's download slot; a
robots.txt that cannot be fetched is one WARNING line."""

from __future__ import annotations

import logging
import socket

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
async def test_crawl_delay_is_the_host_s_allowance(slow_host):
    # epochs of 1 s: a 0.25 s Crawl-delay lets floor(1 / 0.25) = 4 crawls of the host into
    # each, whatever the budget (8); each crawl still costs 1
    crawler = make_crawler(WHITTLE_SOURCES=feeds(slow_host, 6), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=8, WHITTLE_PERIOD=1.0, CLOSESPIDER_TIMEOUT=3.5,
                           ROBOTSTXT_OBEY=True)
    box = keep_scheduler(crawler)
    w = whittle(await run(crawler))
    service = box["scheduler"].service
    allowances = service.throttle.allowances
    assert allowances.crawl_delays == {"127.0.0.1": 0.25}
    assert allowances.hosts["127.0.0.1"].limit == 4.0
    assert list(service.policy.problem.cost) == [1.0] * 6
    # epoch 0 was planned before robots.txt arrived: its 6 crawls; each of the 3 later
    # epochs (3.5 s) plans at most 4
    later = w["crawls"] - 6
    assert 1 <= later <= 4 * 3
    assert w["crawls/cost"] == pytest.approx(w["crawls"])


def refused_port() -> int:
    """A port of 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest_twisted.ensureDeferred
async def test_an_unreachable_feed_host_is_one_warning_line_not_a_traceback(caplog):
    port = refused_port()
    crawler = make_crawler(ADDONS={"scrapy_whittle.Addon": 0}, ROBOTSTXT_OBEY=True,
                           WHITTLE_SOURCES=[f"http://127.0.0.1:{port}/f/{k}" for k in range(3)],
                           WHITTLE_BUDGET=3, WHITTLE_PERIOD=0.5, CLOSESPIDER_TIMEOUT=1.5)
    with caplog.at_level(logging.INFO):
        await run(crawler)
    robots = [r for r in caplog.records if "robots.txt" in r.getMessage()]
    assert len(robots) == 1, [r.getMessage() for r in robots]
    record = robots[0]
    message = record.getMessage()
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "\n" not in message and f"127.0.0.1:{port}" in message
    assert "ConnectionRefusedError" in message
    assert not any(r.exc_info or "Traceback" in r.getMessage() for r in caplog.records)
    assert crawler.stats.get_value("robotstxt/request_count") == 1


def test_the_addon_replaces_scrapys_robots_middleware_unless_the_project_set_one():
    from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware

    from scrapy_whittle.scrapy.robots import QuietRobotsTxtMiddleware

    def middlewares(**settings):
        crawler = make_crawler(ADDONS={"scrapy_whittle.Addon": 0}, WHITTLE_BUDGET=1,
                               WHITTLE_SOURCES=["http://127.0.0.1:1/feed"], **settings)
        return crawler.settings.getdict("DOWNLOADER_MIDDLEWARES")

    on = middlewares(ROBOTSTXT_OBEY=True)
    assert on[QuietRobotsTxtMiddleware] == 100 and on[RobotsTxtMiddleware] is None
    assert QuietRobotsTxtMiddleware not in middlewares(ROBOTSTXT_OBEY=False)
    own = {"scrapy.downloadermiddlewares.robotstxt.RobotsTxtMiddleware": 90,
           "scrapy_whittle.FeedObserverMiddleware": 540}
    kept = middlewares(ROBOTSTXT_OBEY=True, DOWNLOADER_MIDDLEWARES=own)
    assert QuietRobotsTxtMiddleware not in kept and own.items() <= kept.items()
