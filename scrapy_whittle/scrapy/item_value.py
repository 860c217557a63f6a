"""Reporting what an entry turned out to be worth, from a spider callback or item pipeline.

The value a reader gives an entry (clicks, comments, shares) is what the crawl tries to
capture early; it decays as the entry ages, at a rate the Whittle policy must know. Feeds
seldom show it, but a pipeline often can measure it later. Report it and the policy's decay
estimate for that source learns from it::

    from scrapy_whittle import report_value

    class ClicksPipeline:
        def __init__(self, crawler):
            self.crawler = crawler

        @classmethod
        def from_crawler(cls, crawler):
            return cls(crawler)

        def process_item(self, item):
            clicks = lookup_clicks(item["link"])          # your analytics
            report_value(self.crawler, source=item["source"], value=clicks,
                         published=item["published"])
            return item

``source`` is the feed URL (``item["source"]`` of ``FeedSpider`` items) and ``published`` the
entry's publication time (unix seconds); ``at`` (default now) is when ``value`` was measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


def report_value(crawler: Crawler, *, source: str | int, value: float, published: float,
                 at: float | None = None, base_value: float | None = None) -> bool:
    """Pass the observed value of one entry to the crawl's policy; see the module docstring.
    Returns whether it was used (False with a WhittleScheduler-less crawl, an unknown source,
    a policy that learns no decay, or an implausible report)."""
    from scrapy_whittle.scrapy.sink import whittle_sink

    sink = whittle_sink(crawler)
    if sink is None:
        return False
    return sink.report_value(source, value, published=published, at=at,
                             base_value=base_value)
