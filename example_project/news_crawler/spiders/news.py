"""``news``: one item per new entry; with no WHITTLE_SOURCES, crawls an embedded simulated web
and prints, at close, what it captured against round-robin polling and Miniflux's rule at the
same budget on the same items: the utility, how much sooner entries were found and how many
fewer were missed."""

from __future__ import annotations

import logging

from scrapy import signals

from scrapy_whittle import FeedSpider
from scrapy_whittle.scrapy.sink import whittle_service

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
            self.sim_server.clock.reset(whittle_service(self.crawler).origin)

    def closed_summary(self, spider, reason):
        """After the crawl's own summary (every crawl logs one): on the embedded simulated
        web, what the same budget would have captured polled round-robin or by Miniflux's
        rule, on the same items."""
        server = self.sim_server
        if server is None:
            return
        now = server.clock.now()                # (the simulated clock runs on: read it once)
        lines = self.against_round_robin(server, now) + self.against_miniflux(server, now)
        logger.info("Whittle summary against the simulated web:\n  %s", "\n  ".join(lines))
        server.stop()

    def against_round_robin(self, server, now: float) -> list[str]:
        """The summary's lines comparing with round-robin on the same items and budget, for
        every epoch the crawl started (0 .. the current one), measured up to ``now``."""
        from news_crawler.compare import round_robin

        settings = self.crawler.settings
        epochs = int(now // 1.0)      # news-mix: T = one hour = one unit
        ours = server.web.user_measures(now)
        truth = server.web.totals()
        rr = round_robin(server.web.params, server.web.seed,
                         settings.getfloat("WHITTLE_BUDGET"), epochs + 1, server.web.window,
                         server.web.start, until=now)
        policy = settings.get("WHITTLE_POLICY")
        lines = [f"ground truth: captured {truth['captured']:.1f} "
                 f"({truth['captured_items']} items, {truth['missed_items']} missed) "
                 f"in {epochs} simulated hours; of the missed, "
                 f"{truth['missed_after_first_fetch']} after the crawl's first look at "
                 "their feed (what the crawl's own estimate of stories lost is of)",
                 f"round-robin on the same items and budget: {rr['utility']:.1f} "
                 f"-> {policy} / round_robin = "
                 f"{truth['captured'] / rr['utility'] if rr['utility'] else float('nan'):.2f}"]
        minutes = server.clock.unit / 60.0
        mine, theirs = ours["median_delay"] * minutes, rr["median_delay"] * minutes
        fewer = rr["missed_items"] - ours["missed_items"]
        missed = (f"{abs(fewer)} {'fewer' if fewer >= 0 else 'more'} missed "
                  f"({ours['missed_items']} against {rr['missed_items']})")
        if mine == mine and theirs == theirs:       # both captured an entry (not NaN)
            sooner = round(theirs) - round(mine)    # (what the line shows: never "0 later")
            lines.append(f"entries found {abs(sooner):.0f} minutes "
                         f"{'sooner' if sooner >= 0 else 'later'} (median discovery delay "
                         f"{mine:.0f} min against {theirs:.0f}) than polling every feed in "
                         f"turn, {missed}")
        else:
            lines.append(f"no entry captured yet by one of them; {missed} than polling every "
                         f"feed in turn")
        return lines

    def against_miniflux(self, server, now: float) -> list[str]:
        """The summary's line comparing with Miniflux's rule (the most used self-hosted feed
        reader's schedule) on the same items, deciding as often within the same budget, up
        to ``now``."""
        from news_crawler.compare import rule

        settings = self.crawler.settings
        epochs = int(now // 1.0)
        steps = whittle_service(self.crawler).config.steps_per_epoch
        ours = server.web.user_measures(now)
        theirs = rule("miniflux", server.web.params, server.web.seed,
                      settings.getfloat("WHITTLE_BUDGET"), epochs + 1, server.web.window,
                      server.web.start, until=now, steps=steps)
        minutes = server.clock.unit / 60.0
        mine, other = ours["mean_delay"] * minutes, theirs["mean_delay"] * minutes
        fewer = theirs["missed_items"] - ours["missed_items"]
        lost = (f"{abs(fewer)} {'fewer' if fewer >= 0 else 'more'} stories lost "
                f"({ours['missed_items']} against {theirs['missed_items']})")
        if not (mine == mine and other == other):      # one of them captured nothing yet
            return [f"against Miniflux's rule at the same budget: {lost}"]
        sooner = round(other) - round(mine)
        return [f"against Miniflux's rule at the same budget: stories found {abs(sooner):.0f} "
                f"minutes {'sooner' if sooner >= 0 else 'later'} on average (mean discovery "
                f"delay {mine:.0f} min against {other:.0f}), {lost}"]
