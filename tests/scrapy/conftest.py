"""Fixtures of the Scrapy tests: the simulated web as a subprocess on 127.0.0.1, port 0, and
a helper that runs a crawl in this process (pytest-twisted; with ``--reactor=asyncio`` the
crawl runs on Scrapy's default asyncio reactor, else on the installed one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scrapy.utils.test import get_crawler

ROOT = Path(__file__).resolve().parents[2]

BASE_SETTINGS = {
    "SCHEDULER": "scrapy_whittle.WhittleScheduler",
    "DOWNLOADER_MIDDLEWARES": {"scrapy_whittle.FeedObserverMiddleware": 540},
    "LOG_LEVEL": "INFO",
    "WHITTLE_LOGSTATS_INTERVAL": 0,
    "LOGSTATS_INTERVAL": 0,
    "RETRY_ENABLED": False,
    "DOWNLOAD_TIMEOUT": 5,
    "ROBOTSTXT_OBEY": False,
}


class Server:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sim.serve", "--port", "0", *args], cwd=ROOT,
            stdout=subprocess.PIPE, text=True)
        for line in self.proc.stdout:
            if line.startswith("PORT "):
                self.port = int(line.split()[1])
                break
        else:  # pragma: no cover
            raise RuntimeError("sim.serve did not start")
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture(scope="session")
def sim_server():
    """20 news-mix feeds, one simulated hour per real second."""
    server = Server("--scenario", "news-mix", "--n", "20", "--speed", "3600", "--seed", "0")
    yield server
    server.stop()


def make_crawler(spidercls=None, **settings):
    from scrapy_whittle.spiders import FeedSpider

    return get_crawler(spidercls or FeedSpider, {**BASE_SETTINGS, **settings})


async def run(crawler, **kwargs) -> dict:
    await crawler.crawl(**kwargs)
    return crawler.stats.get_stats()


def whittle(stats: dict) -> dict:
    return {k[len("whittle/"):]: v for k, v in stats.items() if k.startswith("whittle/")}
