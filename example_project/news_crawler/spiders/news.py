"""``news``: one item per new entry; with no WHITTLE_SOURCES, crawls an embedded simulated web
and prints, at close, the utility captured against what round-robin would have captured."""

from __future__ import annotations

import logging

from scrapy import signals

from scrapy_whittle import FeedSpider

logger = logging.getLogger(__name__)


class NewsSpider(FeedSpider):
    name = "news"

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        settings = crawler.settings
        server = None
        if not settings.get("WHITTLE_SOURCES"):
            from sim.serve import start_server

            server = start_server(
                settings.get("SIM_SCENARIO", "news-mix"), n=settings.getint("SIM_SOURCES", 300),
                speed=settings.getfloat("SIM_SPEED", 1800.0), seed=settings.getint("SIM_SEED"))
            settings.set("WHITTLE_SOURCES", [f"{server.url}/feed/{i}.xml"
                                             for i in range(server.web.n)], priority="spider")
            logger.info("simulated web: %d %s feeds at %s/feeds.opml, %g simulated s per s",
                        server.web.n, settings.get("SIM_SCENARIO"), server.url,
                        server.clock.speed)
        spider = super().from_crawler(crawler, *args, **kwargs)
        spider.sim_server = server
        crawler.signals.connect(spider.opened, signal=signals.spider_opened)
        crawler.signals.connect(spider.closed_summary, signal=signals.spider_closed)
        return spider

    def opened(self, spider):
        if self.sim_server is not None:      # virtual time 0 = the scheduler's epoch origin
            self.sim_server.clock.reset(self.crawler.engine.scheduler.service.origin)

    def closed_summary(self, spider, reason):
        stats = self.crawler.stats
        get = lambda key, d=0: stats.get_value(f"whittle/{key}", d)  # noqa: E731
        lines = [f"crawls {get('crawls')}, new items {get('new_items')}, "
                 f"utility captured {get('utility', 0.0):.1f}, not modified "
                 f"{get('not_modified')}, budget used {get('budget_used', 0.0):.1%}"]
        server = self.sim_server
        if server is not None:
            from news_crawler.compare import round_robin_utility

            settings = self.crawler.settings
            epochs = int(server.clock.now() // 1.0)   # news-mix: T = one hour = one unit
            budget = settings.getfloat("WHITTLE_BUDGET")
            truth = server.web.totals()
            rr = round_robin_utility(server.web.params, server.web.seed, budget, epochs,
                                     server.web.window, server.web.start)
            lines.append(f"ground truth: captured {truth['captured']:.1f} "
                         f"({truth['captured_items']} items, {truth['missed_items']} missed) "
                         f"in {epochs} simulated hours")
            lines.append(f"round-robin on the same items and budget: {rr:.1f} "
                         f"-> {settings.get('WHITTLE_POLICY')} / round_robin = "
                         f"{truth['captured'] / rr if rr else float('nan'):.2f}")
        logger.info("Whittle summary:\n  %s", "\n  ".join(lines))
        if server is not None:
            server.stop()
