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


START = 1_700_000_000.0          # simulated crawls start at this unix time


class VirtualWeb:
    """A simulated web served in this process, on the crawl's simulated clock.

    The crawl gets ``clock`` as ``WHITTLE_CLOCK``: it stands still while anything is being
    downloaded and jumps to the next due time when the crawler is idle, so a test of many
    simulated hours takes as long as its downloads. ``speed``: scenario seconds per
    simulated crawler second (1: an hour of news-mix is an hour of crawl)."""

    def __init__(self, scenario: str = "news-mix", *, n: int | None = 20, seed: int = 0,
                 speed: float = 1.0, **options) -> None:
        from scrapy_whittle.service.clock import SimulatedClock
        from sim.serve import start_server

        self.clock = SimulatedClock(start=START, speed=0.0)
        self.server = start_server(scenario, n=n, speed=speed, seed=seed, clock=self.clock,
                                   **options)
        self.url = self.server.url

    def feeds(self, n: int, start: int = 0) -> list[str]:
        return [f"{self.url}/feed/{i}.xml" for i in range(start, start + n)]

    async def stop(self) -> None:
        await self.server.stop()


def make_crawler(spidercls=None, **settings):
    from scrapy_whittle.scrapy.spiders import FeedSpider

    return get_crawler(spidercls or FeedSpider, {**BASE_SETTINGS, **settings})


async def run(crawler, **kwargs) -> dict:
    await crawler.crawl(**kwargs)
    return crawler.stats.get_stats()


def whittle(stats: dict) -> dict:
    return {k[len("whittle/"):]: v for k, v in stats.items() if k.startswith("whittle/")}
