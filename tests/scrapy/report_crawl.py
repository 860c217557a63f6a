"""A crawl to report on: ``python -m tests.scrapy.report_crawl JOBDIR START EPOCHS PORT``.

Crawls a simulated web served in the same process (news-mix, N_FEEDS feeds, plus a few
broken ones so that the report has errors to show) on the simulated clock starting at unix
time START, for EPOCHS epochs of an hour, with JOBDIR state, through the add-on
(``ADDONS = {"scrapy_whittle.Addon": 0}``); the web listens on 127.0.0.1:PORT. A run of two
simulated days takes a few seconds. Run again with the same JOBDIR and PORT it resumes the
crawl (same source URLs).
"""

from __future__ import annotations

import sys

from scrapy.crawler import AsyncCrawlerProcess

from scrapy_whittle.scrapy.spiders import FeedSpider
from scrapy_whittle.service.clock import SimulatedClock

N_FEEDS = 30
BROKEN = ("404", "malformed", "500", "html")
BUDGET = 5
PERIOD = 3600.0


def main(argv: list[str]) -> int:
    jobdir, start, epochs, port = argv[0], float(argv[1]), int(argv[2]), int(argv[3])
    clock = SimulatedClock(start=start, speed=0.0)
    process = AsyncCrawlerProcess({
        "ADDONS": {"scrapy_whittle.Addon": 0},
        "WHITTLE_BUDGET": BUDGET, "WHITTLE_PERIOD": PERIOD, "WHITTLE_MAX_EPOCHS": epochs,
        # one plan an epoch: the test resumes the crawl for one and compares it with the
        # plan the report showed
        "WHITTLE_STEP": PERIOD,
        "WHITTLE_CLOCK": clock, "WHITTLE_ENGAGEMENT_SCALE": 1000,
        "WHITTLE_BACKOFF_BASE": 1800, "WHITTLE_LOGSTATS_INTERVAL": 0,
        "JOBDIR": jobdir, "LOG_LEVEL": "WARNING", "LOGSTATS_INTERVAL": 0,
        "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 5, "ROBOTSTXT_OBEY": False,
        "CONCURRENT_REQUESTS": 16, "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
        "TELNETCONSOLE_ENABLED": False,
    })
    from twisted.internet import reactor

    from sim.serve import start_server

    server = start_server("news-mix", n=N_FEEDS, speed=1.0, seed=4, clock=clock, port=port,
                          reactor=reactor)
    feeds = [f"{server.url}/feed/{i}.xml" for i in range(N_FEEDS)]
    feeds += [f"{server.url}/bad/{case}" for case in BROKEN]
    process.crawl(FeedSpider, whittle_sources=feeds)
    process.start()
    return 1 if process.bootstrap_failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
