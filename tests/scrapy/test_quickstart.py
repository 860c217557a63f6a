"""The quick start: ``python -m sim.serve`` prints the ``scrapy crawl`` line that fits what it
serves (epoch length, budget, engagement scale, the feed list), and that line, on top of
Scrapy's project template, passes the start-up check with the budget reachable."""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
import urllib.request

import pytest
from scrapy.settings import Settings

from scrapy_whittle.scrapy.startup import check_start
from tests.scrapy.conftest import ROOT

#: what ``scrapy startproject`` writes into settings.py (Scrapy 2.19), besides names
TEMPLATE = {"ROBOTSTXT_OBEY": True, "CONCURRENT_REQUESTS_PER_DOMAIN": 1, "DOWNLOAD_DELAY": 1,
            "FEED_EXPORT_ENCODING": "utf-8"}


@pytest.fixture(scope="module")
def served():
    proc = subprocess.Popen([sys.executable, "-m", "sim.serve", "--n", "40", "--port", "0",
                             "--speed", "7200", "--engagement-scale", "500"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("PORT "):
            break
    yield lines
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


def printed_settings(lines: list[str]) -> dict[str, str]:
    (command,) = [line.strip() for line in lines if line.strip().startswith("scrapy crawl ")]
    words = shlex.split(command)
    assert words[:3] == ["scrapy", "crawl", "news"]
    pairs = [words[i + 1] for i, w in enumerate(words) if w == "-s"]
    assert len(pairs) * 2 + 3 == len(words)
    return dict(p.split("=", 1) for p in pairs)


def test_sim_serve_prints_the_crawl_command_for_what_it_serves(served, tmp_path, caplog):
    settings = printed_settings(served)
    base = settings["WHITTLE_SOURCES"].rsplit("/", 1)[0]
    params = json.load(urllib.request.urlopen(f"{base}/params.json", timeout=10))
    assert float(settings["WHITTLE_PERIOD"]) == pytest.approx(params["period_seconds"])
    assert float(settings["WHITTLE_PERIOD"]) == 0.5              # an hour at --speed 7200
    assert float(settings["WHITTLE_STEP"]) == pytest.approx(0.5 / 60)   # a simulated minute
    assert float(settings["WHITTLE_ENGAGEMENT_SCALE"]) == params["engagement_scale"] == 500
    from sim.web.scenarios import make_scenario

    assert float(settings["WHITTLE_BUDGET"]) == make_scenario("news-mix", n=40).budget
    opml = urllib.request.urlopen(settings["WHITTLE_SOURCES"], timeout=10).read()
    feeds = tmp_path / "feeds.opml"
    feeds.write_bytes(opml)

    def check(printed: dict[str, str]) -> list[str]:
        s = Settings(TEMPLATE, priority="project")
        s.setdict({**printed, "WHITTLE_SOURCES": str(feeds)}, priority="cmdline")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="scrapy_whittle"):
            start = check_start(s)
        assert len(start.sources) == 40 and start.config.period == 0.5
        return [r.getMessage() for r in caplog.records]

    assert check(settings) == []
    # the line sets DOWNLOAD_DELAY = 0 because all simulated feeds share one host
    (warning,) = check({k: v for k, v in settings.items() if k != "DOWNLOAD_DELAY"})
    assert "out of reach" in warning
