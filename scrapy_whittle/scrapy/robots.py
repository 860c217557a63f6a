"""Scrapy's ``RobotsTxtMiddleware``, with a robots.txt that cannot be fetched told in one line.

When robots.txt of a host cannot be downloaded (connection refused, DNS failure, timeout),
Scrapy's middleware logs an ERROR with the whole Twisted traceback, some seventy lines for
one unreachable feed host, and then crawls the host as if robots.txt allowed everything. The
traceback says nothing the exception's name and message do not, and the feed's own request
reports the failure again (``whittle/errors/...``). This subclass logs it as one WARNING line
naming the host and the cause; everything else is Scrapy's middleware unchanged.

Scrapy writes that record inside ``RobotsTxtMiddleware.robot_parser`` with no method of its
own to override, so the record is rewritten by a filter on the middleware's logger: a public
hook (``logging.Logger.addFilter``) that needs no copy of Scrapy's private code. The filter
touches only records of this crawler's spider that carry an exception and the ``request`` and
``f_exception`` arguments Scrapy gives that message; should Scrapy change them, its own
record passes unchanged.

The add-on (:mod:`scrapy_whittle.scrapy.addon`) puts this class in Scrapy's place when
``ROBOTSTXT_OBEY`` is on, unless the project configures a robots.txt middleware itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.downloadermiddlewares.robotstxt import logger as scrapy_robots_logger

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

class QuietRobotsTxtMiddleware(RobotsTxtMiddleware):
    """See the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)           # NotConfigured unless ROBOTSTXT_OBEY
        self._filter = _OneLineFailure(crawler)
        scrapy_robots_logger.addFilter(self._filter)
        crawler.signals.connect(self._remove_filter, signal=signals.engine_stopped)

    def _remove_filter(self) -> None:
        scrapy_robots_logger.removeFilter(self._filter)


class _OneLineFailure(logging.Filter):
    """Rewrites Scrapy's "Error downloading <robots.txt>" record of one crawler as one
    WARNING line."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__()
        self.crawler = crawler

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (record.exc_info and isinstance(args, dict) and "request" in args
                and "f_exception" in args
                and getattr(record, "spider", None) is self.crawler.spider):
            exc = args["f_exception"]
            record.msg = ("robots.txt of %(host)s could not be fetched (%(cause)s): its URLs "
                          "are crawled as if it allowed them")
            record.args = {"host": urlsplit(args["request"].url).netloc,
                           "cause": f"{type(exc).__name__}: {exc}".strip()}
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
