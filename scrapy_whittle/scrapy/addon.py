"""``scrapy_whittle.Addon``: scrapy-whittle in a Scrapy project with one line.

::

    ADDONS = {"scrapy_whittle.Addon": 0}
    WHITTLE_SOURCES = "feeds.opml"
    WHITTLE_BUDGET = 60

It installs ``WhittleScheduler`` as ``SCHEDULER``, ``FeedObserverMiddleware`` at order 540 and
``RetryAfterMiddleware`` at 560 in ``DOWNLOADER_MIDDLEWARES`` (and, with ``ROBOTSTXT_OBEY``,
``QuietRobotsTxtMiddleware`` in place of Scrapy's ``RobotsTxtMiddleware``, unless the project
lists a robots.txt middleware itself: :mod:`scrapy_whittle.scrapy.robots`),
``DeliveryMiddleware`` at 10 in ``SPIDER_MIDDLEWARES`` (items handed out again after a kill:
:mod:`scrapy_whittle.scrapy.delivery`), ``WebSubSubscriber`` in ``EXTENSIONS`` (off unless
``WHITTLE_WEBSUB_CALLBACK`` is set: :mod:`scrapy_whittle.scrapy.websub`) and
``PrometheusExporter`` (off unless ``WHITTLE_PROMETHEUS_PORT`` is set:
:mod:`scrapy_whittle.scrapy.prometheus`), gives every
``WHITTLE_*`` setting its default (from the table in :mod:`scrapy_whittle.service.config`,
so that ``scrapy settings --get`` shows what the crawl uses) and lowers ``CONCURRENT_ITEMS``
to 16 (below), all with Scrapy's ``"addon"`` priority, so a value the project sets itself wins (a
subclass of the scheduler, another order for the middleware, its own settings). It checks
that the crawl runs on the asyncio reactor, and runs the start-up check of the ``WHITTLE_*``
settings and the source list (:mod:`scrapy_whittle.scrapy.startup`) while Scrapy applies the
settings, before anything is built: a bad setting stops ``scrapy crawl`` with one ERROR line
and exit status 1.

``CONCURRENT_ITEMS`` (Scrapy's default 100, the items of one response processed at once):
Scrapy queues up to twice that many items of a response, and one of its item tasks runs
through the queue without returning to the event loop as long as the pipelines do not wait on
anything. A feed that shows thousands of unseen entries at once (a first crawl, a replayed
archive) then holds every download while its items go through (``sim.bench.soak`` measures the
loop's stalls). A feed crawl hands out a few items per response, so the items of one response
need little concurrency: 16 keeps 32 in a step. A project's own ``CONCURRENT_ITEMS`` wins
(say, for pipelines that wait on a database).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.utils.misc import load_object

from scrapy_whittle.scrapy.startup import crawl_start, refuse_to_start
from scrapy_whittle.service.config import REQUIRED, SETTINGS, InvalidSetting

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
SCHEDULER = "scrapy_whittle.scrapy.scheduler.WhittleScheduler"
MIDDLEWARE_ORDER = 540
RETRY_AFTER_ORDER = 560          # before RetryMiddleware (550) sees a response
CONCURRENT_ITEMS = 16            # see the module docstring
WEBSUB_ORDER = 500               # an extension: its order matters to no other
PROMETHEUS_ORDER = 500           # the same
ROBOTS_ORDER = 100               # Scrapy's RobotsTxtMiddleware's, should its base lack it


class Addon:
    """See the module docstring."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Addon:
        return cls(crawler)

    def update_settings(self, settings: BaseSettings) -> None:
        from scrapy_whittle.scrapy.delivery import ORDER as DELIVERY_ORDER
        from scrapy_whittle.scrapy.delivery import DeliveryMiddleware
        from scrapy_whittle.scrapy.middleware import FeedObserverMiddleware, RetryAfterMiddleware
        from scrapy_whittle.scrapy.prometheus import PrometheusExporter
        from scrapy_whittle.scrapy.scheduler import WhittleScheduler
        from scrapy_whittle.scrapy.websub import WebSubSubscriber

        with refuse_to_start():
            check_reactor(settings)
            settings.set("SCHEDULER", SCHEDULER, priority="addon")
            settings.set("CONCURRENT_ITEMS", CONCURRENT_ITEMS, priority="addon")
            set_whittle_defaults(settings)
            scheduler = settings.get("SCHEDULER")
            if not _is_subclass(scheduler, WhittleScheduler):
                raise InvalidSetting(
                    f"SCHEDULER ({scheduler!r}) must be scrapy_whittle.WhittleScheduler or a "
                    "subclass of it when the scrapy_whittle.Addon add-on is enabled (remove "
                    "the SCHEDULER setting: the add-on sets it)")
            settings.setdefault_in_component_priority_dict(
                "DOWNLOADER_MIDDLEWARES", FeedObserverMiddleware, MIDDLEWARE_ORDER)
            settings.setdefault_in_component_priority_dict(
                "DOWNLOADER_MIDDLEWARES", RetryAfterMiddleware, RETRY_AFTER_ORDER)
            settings.setdefault_in_component_priority_dict(
                "SPIDER_MIDDLEWARES", DeliveryMiddleware, DELIVERY_ORDER)
            settings.setdefault_in_component_priority_dict(
                "EXTENSIONS", WebSubSubscriber, WEBSUB_ORDER)
            settings.setdefault_in_component_priority_dict(
                "EXTENSIONS", PrometheusExporter, PROMETHEUS_ORDER)
            if settings.getbool("ROBOTSTXT_OBEY"):
                install_quiet_robots(settings)
        crawl_start(self.crawler)


def set_whittle_defaults(settings: BaseSettings) -> None:
    """Every ``WHITTLE_*`` setting the project leaves unset, at its default (a required one,
    ``WHITTLE_BUDGET``, stays unset: the start-up check names it)."""
    for setting in SETTINGS:
        if setting.default is not REQUIRED:
            default = setting.default
            settings.set(setting.name, default.copy() if isinstance(default, dict) else default,
                         priority="addon")


def install_quiet_robots(settings: BaseSettings) -> None:
    """``QuietRobotsTxtMiddleware`` at the order of Scrapy's ``RobotsTxtMiddleware``, which
    it replaces, unless ``DOWNLOADER_MIDDLEWARES`` names a robots.txt middleware already (the
    project's own, or Scrapy's, disabled or moved)."""
    from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware

    from scrapy_whittle.scrapy.robots import QuietRobotsTxtMiddleware

    if any(_is_subclass(path, RobotsTxtMiddleware)
           for path in settings.getdict("DOWNLOADER_MIDDLEWARES")):
        return
    order = next((v for k, v in settings.getdict("DOWNLOADER_MIDDLEWARES_BASE").items()
                  if _is_subclass(k, RobotsTxtMiddleware)), ROBOTS_ORDER)
    settings.setdefault_in_component_priority_dict(
        "DOWNLOADER_MIDDLEWARES", RobotsTxtMiddleware, None)
    settings.setdefault_in_component_priority_dict(
        "DOWNLOADER_MIDDLEWARES", QuietRobotsTxtMiddleware, order)


def check_reactor(settings: BaseSettings) -> None:
    """scrapy-whittle's scheduler runs on Twisted's asyncio reactor (Scrapy's default)."""
    if not settings.getbool("TWISTED_REACTOR_ENABLED", True):
        raise InvalidSetting("TWISTED_REACTOR_ENABLED (False) must be True: scrapy-whittle "
                             f"runs on Twisted's reactor {ASYNCIO_REACTOR}")
    reactor = settings.get("TWISTED_REACTOR")
    if reactor and reactor != ASYNCIO_REACTOR:
        raise InvalidSetting(f"TWISTED_REACTOR ({reactor!r}) must be {ASYNCIO_REACTOR!r} "
                             "(Scrapy's default) for scrapy-whittle")


def _is_subclass(value, cls: type) -> bool:
    try:
        obj = load_object(value) if isinstance(value, str) else value
    except (ImportError, NameError, ValueError, AttributeError):
        return False
    # the MRO, not issubclass: Scrapy's BaseScheduler counts any class with a scheduler's
    # methods as a subclass of every scheduler
    return isinstance(obj, type) and cls in obj.__mro__
