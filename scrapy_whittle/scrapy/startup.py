"""The start-up check of a crawl: settings, source list, oracle parameters, reachable budget.

Run once per crawler, before the spider opens: by the add-on (:mod:`scrapy_whittle.scrapy.addon`)
while Scrapy applies the settings, else by ``FeedObserverMiddleware``, which Scrapy builds with
the engine. The scheduler, built after "Spider opened", takes the result
(:func:`crawl_start`) instead of reading the settings and the files a second time.

A problem is an :class:`~scrapy_whittle.service.config.InvalidSetting` whose message names the
setting, its value and what is allowed. It is logged here as **one ERROR line** and raised:
``scrapy crawl`` exits with status 1 (Scrapy sets it for a crawl that fails to start). Scrapy
runs each crawl in an asyncio task and asyncio reports a failed task's exception with its
traceback; a filter on the ``asyncio`` logger drops that second report of an exception
already logged here, and nothing else.

A cluster crawl (``WHITTLE_REDIS_URL``) is checked too: the Redis client must be installed
(extra ``cluster``) and Redis must answer a PING within ``WHITTLE_REDIS_WAIT`` seconds
(:mod:`scrapy_whittle.cluster.connect`); the wait blocks, as reading a long source list does,
since nothing of the crawl runs yet.

The check also warns, once, when Scrapy's own settings make ``WHITTLE_BUDGET`` crawls per
``WHITTLE_PERIOD`` unreachable: with a download delay d Scrapy sends one request to a host
per d seconds, whatever ``CONCURRENT_REQUESTS_PER_DOMAIN`` says, so a host's n sources can be
fetched at most min(n, T / d) times per period. (Without a delay the limit depends on the
servers' latency, unknown at start-up; AutoThrottle's delays follow that latency too: neither
is counted.)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_whittle.core.policies import policy_class
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig, download_slot_delays
from scrapy_whittle.service.policy_options import check_policy_build
from scrapy_whittle.service.sources.registry import (
    SourceList,
    SourceListError,
    SourceSpec,
    load_oracle,
    load_sources,
    skipped_summary,
    url_hosts,
)
from scrapy_whittle.service.state.gc_pause import gc_paused

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CrawlStart:
    """What the start-up check read: the validated settings, the sources of
    ``WHITTLE_SOURCES`` and the oracle parameters (for a policy that needs them)."""

    config: WhittleConfig
    sources: list[SourceSpec]
    oracle: dict[str, tuple[float, float, float]] | None
    #: bad entries left out of the source lists (stat ``whittle/sources/skipped``)
    skipped: int = 0


_checked: weakref.WeakKeyDictionary[Any, CrawlStart] = weakref.WeakKeyDictionary()


def crawl_start(crawler: Crawler) -> CrawlStart:
    """The start-up check of ``crawler`` (run at the first call, remembered after)."""
    start = _checked.get(crawler)
    if start is None:
        with refuse_to_start():
            start = check_start(crawler.settings, spider=crawler.spider,
                                spider_name=getattr(crawler.spidercls, "name", None))
        _checked[crawler] = start
    return start


def forget_sources(crawler: Crawler) -> None:
    """Drop the source list the start-up check read, once the crawl has registered it: the
    registry holds the sources then, and a million ``SourceSpec`` objects would stay in memory
    for nothing."""
    start = _checked.get(crawler)
    if start is not None and start.sources:
        _checked[crawler] = dataclasses.replace(start, sources=[])


def check_start(settings: BaseSettings, spider: Any = None,
                spider_name: str | None = None) -> CrawlStart:
    """Validate everything a crawl reads at start-up; raise InvalidSetting, warn about an
    unreachable budget. (``spider_name``: what ``{spider}`` in ``WHITTLE_REDIS_PREFIX``
    stands for; the spider's name when not given.)"""
    config = WhittleConfig.from_settings(settings)
    sources = _sources("WHITTLE_SOURCES", config.sources)
    spider_sources = getattr(spider, "whittle_sources", None) or None
    extra: list[SourceSpec] = []
    if spider_sources is not None:
        extra = _sources(f"the spider's whittle_sources ({type(spider).__name__})",
                         spider_sources)
    oracle = None
    cls = policy_class(config.core_policy)
    if cls.needs_parameters:
        oracle = load_oracle(config.oracle_params)
        missing = [s.url for s in sources if s.url not in oracle]
        if missing:
            raise InvalidSetting(
                f"WHITTLE_ORACLE_PARAMS ({config.oracle_params!r}) has no parameters for "
                f"{len(missing)} of the WHITTLE_SOURCES, e.g. {missing[0]}: policy "
                f"{config.policy!r} needs rate, mean_utility and decay for every source")
        missing = [s.url for s in sources if s.url not in oracle.profiles]
        if cls.needs_rhythms and missing:
            raise InvalidSetting(
                f"WHITTLE_ORACLE_PARAMS ({config.oracle_params!r}) has no daily rhythm "
                f"(\"profile\") for {len(missing)} of the WHITTLE_SOURCES, e.g. {missing[0]}: "
                f"policy {config.policy!r} needs one for every source")
    check_policy_build(config, lambda: len({s.url for s in [*sources, *extra]}))
    warn_unreachable_budget(settings, config, sources)
    if config.redis_url:
        check_cluster(config, spider_name or getattr(spider, "name", None) or "crawl")
    return CrawlStart(config=config, sources=sources, oracle=oracle,
                      skipped=len(sources.skipped) + len(getattr(extra, "skipped", ())))


def check_cluster(config: WhittleConfig, spider_name: str = "crawl") -> None:
    """A cluster crawl (``WHITTLE_REDIS_URL``) needs the Redis client installed, Redis
    answering within ``WHITTLE_REDIS_WAIT`` seconds, and the crawl's keys there (if any) in
    the layout this version reads: else the crawl does not start."""
    from scrapy_whittle.cluster.connect import check_client, check_layout, reach

    check_client(config.redis_url)
    reach(config.redis_url, config.redis_wait)
    check_layout(config.redis_url, config.redis_prefix.format(spider=spider_name))


def _sources(name: str, value: Any) -> SourceList:
    """The list's sources; its bad entries are left out with one WARNING line naming them."""
    try:
        with gc_paused():
            specs = load_sources(value)
    except SourceListError as exc:
        raise InvalidSetting(
            f"{name} ({value!r}) is not a usable source list: {exc}. Give an OPML, JSON or "
            "text file of feed URLs, or a list of URLs") from None
    if specs.skipped:
        logger.warning("%s (%s): %s", name, _short(value), skipped_message(specs))
    return specs


def skipped_message(specs: SourceList) -> str:
    """What one WARNING line says of a list's bad entries."""
    n = len(specs.skipped)
    return (f"{n} bad {'entry' if n == 1 else 'entries'} skipped, the crawl goes on with the "
            f"other {len(specs)}: {skipped_summary(specs.skipped)}")


def _short(value: Any) -> str:
    """A list given in the settings by its length (it may hold a million URLs)."""
    return f"a list of {len(value)}" if isinstance(value, list | tuple) else repr(value)


# -- the one ERROR line ---------------------------------------------------------------------
@contextmanager
def refuse_to_start() -> Iterator[None]:
    """Log an InvalidSetting raised inside as one ERROR line (once), then let it go on."""
    try:
        yield
    except InvalidSetting as exc:
        report(exc)
        raise


def report(exc: InvalidSetting) -> None:
    if exc.reported:
        return
    exc.reported = True
    _quiet_asyncio()
    logger.error("the crawl cannot start: %s", " ".join(str(exc).split()))


class _DropReported(logging.Filter):
    """Drops asyncio's report of a failed task whose exception was logged already."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, InvalidSetting) and exc.reported)


_FILTER = _DropReported()


def _quiet_asyncio() -> None:
    for name in ("asyncio", "twisted"):
        log = logging.getLogger(name)
        if _FILTER not in log.filters:
            log.addFilter(_FILTER)


# -- the reachable budget ---------------------------------------------------------------------
def warn_unreachable_budget(settings: Any, config: WhittleConfig,
                            sources: list[SourceSpec]) -> str | None:
    """Log (and return) a warning when the download delays let fewer crawls be made per
    period than the budget pays for; None when the budget is reachable."""
    # A host's delay (DOWNLOAD_DELAY, or its own in DOWNLOAD_SLOTS) is its allowance in the
    # plan, floor(T / d) crawls an epoch: what it cannot take goes to other hosts, while
    # some host can take it.
    getfloat = getattr(settings, "getfloat", None)
    delay = float(getfloat("DOWNLOAD_DELAY") if getfloat else settings.get("DOWNLOAD_DELAY", 0))
    # hosts with their own delay; the others wait DOWNLOAD_DELAY
    slot_delays = download_slot_delays(settings)
    if delay <= 0 and all(d <= 0 for d in slot_delays.values()):
        return None         # no delay anywhere: every host takes every crawl (and a million
        #                     sources need not be split into hosts for nothing)
    per_host = Counter(h or "" for h in url_hosts([s.url for s in sources]))
    if not per_host:
        return None
    period, budget = config.period, config.budget

    def reachable(default_delay: float) -> tuple[float, float]:
        """(crawls the hosts can take per period, crawls the sources could use)."""
        can = 0.0
        for host, n in per_host.items():
            d = slot_delays.get(host, default_delay)
            can += n if d <= 0 else min(n, period / d)
        return can, float(len(sources))

    can, could = reachable(delay)
    needed = min(budget, could)
    if can >= needed * (1 - 1e-9):
        return None
    fixes = []
    if delay > 0 and reachable(0.0)[0] >= needed:
        lo, hi = 0.0, delay
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if reachable(mid)[0] >= needed else (lo, mid)
        fixes.append(f"set DOWNLOAD_DELAY to {_round_down(lo):g} s or less")
    elif delay > 0:
        fixes.append("lower DOWNLOAD_DELAY")
    fixes += ["lengthen WHITTLE_PERIOD", "lower WHITTLE_BUDGET"]
    message = (f"WHITTLE_BUDGET ({budget:g}) per WHITTLE_PERIOD ({period:g} s) is out of "
               f"reach: Scrapy sends one request to a host per download delay (DOWNLOAD_DELAY "
               f"= {delay:g} s), so the {len(sources)} sources on {len(per_host)} host(s) can "
               f"take about {can:.3g} crawls per period; {', '.join(fixes[:-1])} or "
               f"{fixes[-1]}")
    logger.warning(message)
    return message


def _round_down(x: float) -> float:
    """``x`` rounded down to two significant digits (a delay to suggest)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (math.floor(math.log10(x)) - 1)
    return math.floor(x / scale) * scale
