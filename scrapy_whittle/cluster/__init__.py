"""Many Scrapy processes, one crawl: shared sources, budget, learning and politeness on Redis.

See ``docs/cluster.md``. Every process is a *worker* (it fetches the crawls handed out on a
Redis stream, tells new entries from old through a shared entry memory, and sends back what
each fetch showed); one of them, elected through a Redis lock with a time-to-live, is also the
*planner* (it runs the re-crawl service: the policy, the budget, the politeness, and
checkpoints the learned state to Redis). ``WHITTLE_REDIS_URL`` turns it on.
"""
