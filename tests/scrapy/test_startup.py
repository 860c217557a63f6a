"""A new user's project: ``scrapy startproject``, the add-on line, ``scrapy crawl``.

A bad setting or an unreadable source list stops ``scrapy crawl`` before the spider opens,
with exit status 1 and one ERROR line naming the setting, the value and what is allowed, and
no traceback; the same without the add-on (explicit SCHEDULER and DOWNLOADER_MIDDLEWARES).
A budget the project template's DOWNLOAD_DELAY makes unreachable is warned about once."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scrapy.conftest import ROOT

SPIDER = """from scrapy_whittle import FeedSpider


class NewsSpider(FeedSpider):
    name = "news"
"""
UNREACHABLE = "http://127.0.0.1:9/"       # never fetched: the tests stop before any request


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """``scrapy startproject news`` (Scrapy's own template: DOWNLOAD_DELAY = 1, one request
    per domain at a time) configured as the README's quick start says."""
    base = tmp_path_factory.mktemp("user")
    scrapy(base, "startproject", "news")
    root = base / "news"
    settings = root / "news" / "settings.py"
    text = settings.read_text()
    assert re.search(r"^ADDONS = \{\}$", text, re.M), "Scrapy's template changed"
    text = re.sub(r"^ADDONS = \{\}$", 'ADDONS = {"scrapy_whittle.Addon": 0}', text, flags=re.M)
    text += '\nWHITTLE_SOURCES = "feeds.txt"\nWHITTLE_BUDGET = 60\n'
    settings.write_text(text)
    (root / "news" / "spiders" / "news.py").write_text(SPIDER)
    (root / "feeds.txt").write_text("".join(f"{UNREACHABLE}feed/{i}.xml\n" for i in range(300)))
    (root / "broken.opml").write_text("<opml><body><outline xmlUrl='http://x/a.xml'></body>")
    return root


def scrapy(cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "scrapy.cmdline", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def crawl(project: Path, *settings: str) -> subprocess.CompletedProcess:
    args = ["crawl", "news", "-s", "CLOSESPIDER_TIMEOUT=0.5", "-s", "TELNETCONSOLE_ENABLED=0"]
    for s in settings:
        args += ["-s", s]
    return scrapy(project, *args)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if re.search(r"\] ERROR: ", line)]


EXPLICIT = ("ADDONS={}", "SCHEDULER=scrapy_whittle.WhittleScheduler",
            'DOWNLOADER_MIDDLEWARES={"scrapy_whittle.FeedObserverMiddleware": 540}')

# (every setting's checks are tested in-process in test_settings.py; here, one of each kind
# of failure through the real command)
BAD = [
    ("WHITTLE_BUDGET=-1", "WHITTLE_BUDGET ('-1') must be > 0"),
    ("WHITTLE_POLICY=nonsense", "WHITTLE_POLICY ('nonsense') must be one of: 'whittle'"),
    ("WHITTLE_SOURCES=missing.opml", "WHITTLE_SOURCES ('missing.opml') is not a usable "
                                     "source list: missing.opml: cannot read"),
    ("WHITTLE_SOURCES=broken.opml", "WHITTLE_SOURCES ('broken.opml') is not a usable source "
                                    "list: broken.opml: no usable entry (1 bad: line 1: not "
                                    "well-formed XML"),
    ("WHITTLE_POLICY=oracle", "WHITTLE_ORACLE_PARAMS (None) must name a JSON file"),
    ("WHITTLE_BUDGTE=3", "WHITTLE_BUDGTE ('3') is not a scrapy-whittle setting: did you mean "
                         "WHITTLE_BUDGET?"),
]


CASES = [("addon", *case) for case in BAD] + [("explicit", *BAD[i]) for i in (0, 2, 5)]


@pytest.mark.parametrize(("setup", "setting", "message"), CASES)
def test_a_bad_setting_is_one_error_line_and_exit_status_1(project, setup, setting, message):
    result = crawl(project, *(EXPLICIT if setup == "explicit" else ()), setting)
    assert result.returncode == 1, result.stderr[-3000:]
    errors = error_lines(result.stderr)
    assert len(errors) == 1, result.stderr[-3000:]
    assert message in errors[0], errors[0]
    assert "Traceback" not in result.stderr and "Spider opened" not in result.stderr
    if setting == "WHITTLE_POLICY=nonsense":           # every known policy is named
        from scrapy_whittle.core.policies import POLICIES

        for name in ["whittle", "oracle", *(p for p in POLICIES if p != "whittle")]:
            assert f"'{name}'" in errors[0]


def test_the_add_on_checks_the_reactor_and_the_scheduler(project):
    result = crawl(project, "TWISTED_REACTOR=twisted.internet.selectreactor.SelectReactor")
    assert result.returncode == 1
    (line,) = error_lines(result.stderr)
    assert "TWISTED_REACTOR ('twisted.internet.selectreactor.SelectReactor') must be " \
           "'twisted.internet.asyncioreactor.AsyncioSelectorReactor'" in line
    result = crawl(project, "SCHEDULER=scrapy.core.scheduler.Scheduler")
    assert result.returncode == 1
    (line,) = error_lines(result.stderr)
    assert "SCHEDULER ('scrapy.core.scheduler.Scheduler') must be " \
           "scrapy_whittle.WhittleScheduler" in line
    assert "Traceback" not in result.stderr


def start_logs(caplog, **settings) -> list[str]:
    """Build what Scrapy builds before the spider opens (add-on, then middleware, then the
    scheduler, each running the start-up check); the warnings logged."""
    from scrapy.utils.test import get_crawler

    from scrapy_whittle.scrapy.addon import Addon
    from scrapy_whittle.scrapy.middleware import FeedObserverMiddleware
    from scrapy_whittle.scrapy.scheduler import WhittleScheduler
    from scrapy_whittle.scrapy.spiders import FeedSpider

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="scrapy_whittle"):
        crawler = get_crawler(FeedSpider, {"ADDONS": {Addon: 0}, **settings})  # add-ons run
        FeedObserverMiddleware.from_crawler(crawler)
        WhittleScheduler.from_crawler(crawler)
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_an_unreachable_budget_is_warned_about_once(caplog):
    feeds = [f"{UNREACHABLE}feed/{i}.xml" for i in range(300)]
    # Scrapy's template: DOWNLOAD_DELAY = 1 s; 300 sources on one host, 60 crawls per 10 s
    (warning,) = start_logs(caplog, WHITTLE_SOURCES=feeds, WHITTLE_BUDGET=60,
                            WHITTLE_PERIOD=10, DOWNLOAD_DELAY=1)
    assert "WHITTLE_BUDGET (60) per WHITTLE_PERIOD (10 s) is out of reach" in warning
    assert "set DOWNLOAD_DELAY to 0.16 s or less" in warning      # 10 s / 60 = 0.1667 s
    # the README's settings (60 per hour) are reachable with the template's delay
    assert start_logs(caplog, WHITTLE_SOURCES=feeds, WHITTLE_BUDGET=60,
                      WHITTLE_PERIOD=3600, DOWNLOAD_DELAY=1) == []
    # a host's own delay (DOWNLOAD_SLOTS) is its allowance, as DOWNLOAD_DELAY is the
    # others': 2 crawls per 10 s on 127.0.0.1, 10 on 127.0.0.2
    other = [f"http://127.0.0.2:9/feed/{i}.xml" for i in range(300)]
    (warning,) = start_logs(caplog, WHITTLE_SOURCES=feeds + other, WHITTLE_BUDGET=60,
                            WHITTLE_PERIOD=10, DOWNLOAD_SLOTS={"127.0.0.1": {"delay": 5}},
                            DOWNLOAD_DELAY=1)
    assert "can take about 12 crawls per period" in warning
    assert "set DOWNLOAD_DELAY to 0.17 s or less" in warning     # 10 s / 58 = 0.172 s
    assert start_logs(caplog, WHITTLE_SOURCES=feeds + other, WHITTLE_BUDGET=60,
                      WHITTLE_PERIOD=10, DOWNLOAD_SLOTS={"127.0.0.1": {"delay": 5}},
                      DOWNLOAD_DELAY=0.1) == []
    # two hosts at DOWNLOAD_DELAY = 1 s take 20 crawls per 10 s
    (warning,) = start_logs(caplog, WHITTLE_SOURCES=feeds + other, WHITTLE_BUDGET=60,
                            WHITTLE_PERIOD=10, DOWNLOAD_DELAY=1)
    assert "can take about 20 crawls per period" in warning
    assert "set DOWNLOAD_DELAY to 0.33 s or less" in warning     # 2 x 10 s / 60 = 0.333 s


def test_the_addon_lowers_concurrent_items_unless_the_project_sets_it():
    """Scrapy's CONCURRENT_ITEMS (100) lets one response's item flood hold the event loop
    (scrapy_whittle.scrapy.addon's docstring); the add-on sets 16 at its own priority."""
    from scrapy.utils.test import get_crawler

    from scrapy_whittle.scrapy.addon import CONCURRENT_ITEMS, Addon
    from scrapy_whittle.scrapy.spiders import FeedSpider

    feeds = [f"{UNREACHABLE}feed/{i}.xml" for i in range(3)]
    crawler = get_crawler(FeedSpider, {"ADDONS": {Addon: 0}, "WHITTLE_SOURCES": feeds,
                                       "WHITTLE_BUDGET": 1})
    assert crawler.settings.getint("CONCURRENT_ITEMS") == CONCURRENT_ITEMS == 16
    crawler = get_crawler(FeedSpider, {"ADDONS": {Addon: 0}, "WHITTLE_SOURCES": feeds,
                                       "WHITTLE_BUDGET": 1, "CONCURRENT_ITEMS": 50})
    assert crawler.settings.getint("CONCURRENT_ITEMS") == 50


def test_an_unknown_whittle_name_in_a_spiders_custom_settings_stops_the_start():
    """Spider settings reach the start-up check too (Scrapy merges them before the add-on
    runs): a misspelt name there stops the crawl like one given with ``-s``."""
    from scrapy.utils.test import get_crawler

    from scrapy_whittle.scrapy.addon import Addon
    from scrapy_whittle.scrapy.spiders import FeedSpider
    from scrapy_whittle.service.config import InvalidSetting

    class Typo(FeedSpider):
        name = "typo"
        custom_settings = {"WHITTLE_PERIDO": 60}

    with pytest.raises(InvalidSetting, match=r"WHITTLE_PERIDO \(60\) is not a scrapy-whittle "
                                             r"setting: did you mean WHITTLE_PERIOD\?"):
        get_crawler(Typo, {"ADDONS": {Addon: 0}, "WHITTLE_SOURCES": [f"{UNREACHABLE}a.xml"],
                           "WHITTLE_BUDGET": 1})
