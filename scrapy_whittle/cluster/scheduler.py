"""``ClusterScheduler``: the WhittleScheduler of a process in a cluster crawl.

``WhittleScheduler.from_crawler`` builds one when ``WHITTLE_REDIS_URL`` (or ``REDIS_URL``)
is set. Source requests come from the process's :class:`~scrapy_whittle.cluster.node.
ClusterNode` (the tasks it took from the Redis stream) instead of a local service; every other
request, redirects and retries, spider-registered sources (told to the planner) and the
engine wake-ups work as in one process.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.core.scheduler import Scheduler
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future

from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.scrapy.scheduler import META_CRAWL, META_REGISTER, WhittleScheduler
from scrapy_whittle.scrapy.stats import WhittleStats
from scrapy_whittle.service.sources import SourceSpec

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

    from scrapy_whittle.service.config import WhittleConfig

logger = logging.getLogger(__name__)


class ClusterScheduler(WhittleScheduler):
    def __init__(self, inner, node: ClusterNode, config: WhittleConfig, *,
                 crawler: Crawler | None = None) -> None:
        self.node = node
        super().__init__(inner, None, config=config, crawler=crawler)

    @classmethod
    def build(cls, crawler: Crawler, config: WhittleConfig, *, sources, oracle,
              slot_delays, max_flight) -> ClusterScheduler:
        settings = crawler.settings
        spider = getattr(crawler, "spidercls", None)
        prefix = config.redis_prefix.format(spider=getattr(spider, "name", "crawl"))
        stats = WhittleStats(crawler.stats, config.logstats_interval, config.policy)
        node = ClusterNode(
            config, redis_url=config.redis_url, prefix=prefix, specs=sources, stats=stats,
            clock=config.clock or _system_clock(), oracle=oracle, slot_delays=slot_delays,
            lease=config.redis_lease or max_flight, lock_ttl=config.redis_lock_ttl,
            backlog=config.redis_backlog, capacity=settings.getint("CONCURRENT_REQUESTS"),
            host_concurrency=settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN"),
            download_delay=settings.getfloat("DOWNLOAD_DELAY"))
        return cls(Scheduler.from_crawler(crawler), node, config, crawler=crawler)

    @property
    def sink(self) -> ClusterNode:
        return self.node

    # -- open / close -------------------------------------------------------------------
    def open(self, spider: Spider):
        return deferred_from_coro(self._open(spider))

    async def _open(self, spider: Spider) -> None:
        self.spider = spider
        result = self.inner.open(spider)
        if result is not None:
            await maybe_deferred_to_future(result)
        self.node.on_tasks = self._wake
        await self.node.start()
        self.node.stats.start()
        logger.info("cluster crawl %s on %s as %s", self.node.keys.prefix,
                    self.node.redis_label, self.node.consumer)

    async def _close(self, reason: str) -> None:
        self._cancel_wakeup()
        unstarted = [r.meta[META_CRAWL] for r in self.followups if META_CRAWL in r.meta]
        self.followups.clear()
        await self.node.stop(unstarted)
        self.node.stats.stop()
        result = self.inner.close(reason)
        if result is not None:
            await maybe_deferred_to_future(result)

    # -- the scheduler interface --------------------------------------------------------
    def has_pending_requests(self) -> bool:
        return (not self.node.finished or bool(self.node.queue) or bool(self.followups)
                or self.inner.has_pending_requests())

    def __len__(self) -> int:
        return len(self.followups) + len(self.node.queue) + len(self.inner)

    def enqueue_request(self, request: Request) -> bool:
        if META_CRAWL in request.meta or not request.meta.get(META_REGISTER):
            return super().enqueue_request(request)
        template = request.replace(dont_filter=True, meta={
            k: v for k, v in request.meta.items() if k != META_REGISTER})
        self.templates[request.url] = template
        self.node.add_source(SourceSpec(url=request.url))
        return True

    def _next_source_request(self) -> Request | None:
        crawl = self.node.next_crawl()
        if crawl is None:
            return None
        self.polls += 1
        return self._request(crawl)

    def _request(self, crawl) -> Request:
        template = self.templates.get(crawl.url)
        if template is not None:
            self.templates[crawl.source] = template
        return super()._request(crawl)


def _system_clock():
    from scrapy_whittle.service.clock import SystemClock

    return SystemClock()
