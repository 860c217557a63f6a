"""The Scrapy adapters: add-on, scheduler, downloader middlewares, spider, item-value feedback,
the source list read through Scrapy, stats, the start-up check and the ``scrapy whittle``
commands. They translate Scrapy's objects for the re-crawl service and hold no crawl state of
their own."""
