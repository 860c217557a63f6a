"""Settings of the example project: re-crawl a simulated news web with the Whittle index.

``scrapy crawl news`` starts ``sim.serve``'s web in this process (news-mix, 300 sources, one
simulated hour per half real second) and crawls it for a minute. Give real feeds with
``scrapy crawl news -s WHITTLE_SOURCES=feeds.opml -s WHITTLE_PERIOD=3600 -s WHITTLE_BUDGET=60``.
"""

BOT_NAME = "news_crawler"
SPIDER_MODULES = ["news_crawler.spiders"]
NEWSPIDER_MODULE = "news_crawler.spiders"

TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
ROBOTSTXT_OBEY = True
LOG_LEVEL = "INFO"

# installs WhittleScheduler and FeedObserverMiddleware (order 540: after Retry, HttpCompression,
# Redirect and HttpCache in the response path, so it sees the final, decompressed feed)
ADDONS = {"scrapy_whittle.Addon": 0}

WHITTLE_POLICY = "whittle"          # Whittle index on estimated parameters
WHITTLE_PERIOD = 0.5                # seconds: one simulated hour at SIM_SPEED = 7200
WHITTLE_BUDGET = 6                  # crawls per period (2% of the 300 sources)
WHITTLE_STEP = WHITTLE_PERIOD / 60  # a decision every simulated minute
WHITTLE_ENGAGEMENT_SCALE = 1000     # sim.serve writes slash:comments = 1000 x value
WHITTLE_LOGSTATS_INTERVAL = 10
CONCURRENT_REQUESTS_PER_DOMAIN = 16

CLOSESPIDER_TIMEOUT = 60
FEEDS = {"items.jsonl": {"format": "jsonlines", "overwrite": True}}

# the embedded simulated web (used when WHITTLE_SOURCES is not set)
SIM_SCENARIO = "news-mix"
SIM_SOURCES = 300
SIM_SPEED = 7200.0                  # simulated seconds per real second
# 120 hourly epochs in the one-minute run: enough for the estimates to settle (with 30, the
# learner spends much of the run exploring)
SIM_SEED = 0
