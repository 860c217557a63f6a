"""The example project's Spidermon suite (example_project/news_crawler/monitors.py) run by
Spidermon's own Scrapy extension when a crawl of the simulated web closes: its monitors read
the ``whittle/*`` stats and pass, and fail when a threshold is set out of the crawl's reach."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import pytest_twisted

from tests.scrapy.conftest import VirtualWeb, make_crawler, run

# Spidermon (1.27) writes its report through Spider.log(), which Scrapy 2.19 deprecates: a
# warning in a crawl, an error under the suite's filterwarnings = error
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Spider\.log\(\) is deprecated:scrapy.exceptions.ScrapyDeprecationWarning")
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "example_project"
N = 20


def documented_settings() -> dict:
    """The settings docs/deploy.md tells a project to add, read from its code block."""
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", (ROOT / "docs/deploy.md")
                                      .read_text(), re.S) if "SPIDERMON_ENABLED" in b]
    settings: dict = {}
    exec(block, {}, settings)
    return settings


@pytest.fixture
def example_project(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


async def crawl_monitored(**thresholds) -> dict:
    web = VirtualWeb(n=N, seed=2)
    crawler = make_crawler(
        WHITTLE_SOURCES=web.feeds(N), WHITTLE_CLOCK=web.clock, WHITTLE_BUDGET=4,
        WHITTLE_PERIOD=3600.0, WHITTLE_MAX_EPOCHS=6, **documented_settings(), **thresholds)
    try:
        return await run(crawler)
    finally:
        await web.stop()


def results(caplog) -> dict[str, str]:
    """monitor -> OK / FAIL / SKIPPED, from Spidermon's report in the log."""
    out = {}
    for record in caplog.records:
        message = record.getMessage()
        for name in ("new stories found", "budget used", "errors per crawl"):
            if f"/{name}... " in message:
                out[name] = message.rsplit("... ", 1)[1].split()[0]
    return out


@pytest_twisted.ensureDeferred
async def test_the_monitors_pass_on_a_healthy_crawl(example_project, caplog):
    with caplog.at_level(logging.INFO):
        stats = await crawl_monitored()
    assert stats["whittle/new_items"] > 0 and stats["whittle/budget_used"] > 0.5
    assert results(caplog) == {"new stories found": "OK", "budget used": "OK",
                               "errors per crawl": "OK"}
    assert stats["spidermon/whittle/passed"] == 1 and "spidermon/whittle/failed" not in stats


@pytest_twisted.ensureDeferred
async def test_a_threshold_out_of_reach_fails_its_monitor(example_project, caplog):
    with caplog.at_level(logging.INFO):
        stats = await crawl_monitored(SPIDERMON_WHITTLE_MIN_NEW_ITEMS=10**9)
    assert results(caplog) == {"new stories found": "FAIL", "budget used": "OK",
                               "errors per crawl": "OK"}
    assert stats["spidermon/whittle/failed"] == 1 and "spidermon/whittle/passed" not in stats
