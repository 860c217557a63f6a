"""``FeedObserverMiddleware``: turns every fetched feed into an Observation for the policy.

Install it at order **540**::

    DOWNLOADER_MIDDLEWARES = {"scrapy_whittle.FeedObserverMiddleware": 540}

Responses travel through downloader middlewares from the highest order to the lowest, so at
540 it sees each feed after HttpCacheMiddleware (900), RedirectMiddleware (600),
HttpCompressionMiddleware (590) and RetryMiddleware (550): decompressed, after redirects, and
only once retries have given up. Source requests carry ``dont_cache`` (a cached feed would
hide new entries; conditional GET gives the same savings), so the HTTP cache keeps working
for every other request.

For a source response it: records ETag / Last-Modified for the next conditional GET; counts a
304 as a successful crawl that found nothing new; parses the body
(``scrapy_whittle.feeds.parse_feed``, through ``scrapy_whittle.parse_pool.ParsePool``: small
feeds on the reactor thread, large ones in worker processes; closed at ``engine_stopped``),
keeps the entries not seen before (``EntryMemory``)
and builds an :class:`~scrapy_whittle.observation.Observation` (time = arrival of the
response, epoch = floor((dispatch time - t0) / T), publication times or first-seen time,
``window_full`` when every visible entry is new and the source had been seen before, the
crawl's reward = sum of the new entries' values at capture: engagement /
``WHITTLE_ENGAGEMENT_SCALE`` when the feed gives one, else ``WHITTLE_ITEM_VALUE`` x the
source's weight). Item base values are reported unknown (NaN): engagement measures the
value *at capture*.

Failures (HTTP >= 400, a 3xx left unfollowed, a download error after retries, an unusable
body) are observed with ``ok=False`` (policies learn nothing from them), logged once per source
and kind with their cause, counted under ``whittle/errors/<kind>``, and the source backs off
``min(WHITTLE_BACKOFF_MAX, WHITTLE_BACKOFF_BASE * 2**(k-1))`` seconds after k consecutive
failures. The new entries are in ``response.meta["whittle_entries"]`` (a list of
``FeedEntry``) with their values in ``response.meta["whittle_values"]``; an unusable
response has ``response.meta["whittle_error"]`` set to its kind.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import numpy as np
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.reactor import is_asyncio_reactor_installed

from scrapy_whittle.observation import Observation
from scrapy_whittle.settings import InvalidSetting, WhittleConfig

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_whittle.parse_pool import ParsePool

logger = logging.getLogger(__name__)


def exception_kind(exc: BaseException) -> str:
    """A short stats-key name for a download error."""
    name = type(exc).__name__
    if "Timeout" in name:
        return "timeout"
    if "DNS" in name or "DNSLookup" in name:
        return "dns"
    if name in ("IgnoreRequest",):
        return "ignored"
    if any(s in name for s in ("Connect", "ConnectionLost", "ResponseNeverReceived",
                               "ResponseFailed", "ConnectionDone")):
        return "connection"
    return name.lower()


class FeedObserverMiddleware:
    def __init__(self, crawler: Crawler | None, config: WhittleConfig,
                 clock=time.time, pool: ParsePool | None = None) -> None:
        self.crawler = crawler
        self.config = config
        self.clock = clock
        self._logged: set[tuple[int, str]] = set()
        # feeds are parsed by this pool: small ones inline, large ones in worker processes
        self.pool = pool if pool is not None else config.parsing.make_pool()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FeedObserverMiddleware:
        # The middleware is built with the engine, before the spider opens: the earliest
        # point to stop a crawl with bad WHITTLE_* settings. NotConfigured here would only
        # disable the middleware (and the scheduler would then fail less legibly).
        try:
            config = WhittleConfig.from_settings(crawler.settings)
        except NotConfigured as exc:
            raise InvalidSetting(str(exc)) from None
        pool = config.parsing.make_pool()
        if pool.workers and not is_asyncio_reactor_installed():
            logger.warning("WHITTLE_PARSE_WORKERS (%d) needs the asyncio reactor: feeds are "
                           "parsed on the reactor thread", pool.workers)
            pool.workers = 0
        mw = cls(crawler, config, pool=pool)
        crawler.signals.connect(mw._close_pool, signal=signals.engine_stopped)
        return mw

    def _close_pool(self):
        return deferred_from_coro(self.pool.close())

    def _scheduler(self):
        try:
            sched = self.crawler.engine.scheduler
        except (AttributeError, RuntimeError):   # no crawler, or the crawl has not started
            return None
        return sched if hasattr(sched, "source_of") else None

    # -- hooks --------------------------------------------------------------------------
    async def process_response(self, request: Request, response: Response) -> Response:
        sched = self._scheduler()
        sid = sched.source_of(request) if sched is not None else None
        if sid is None:
            if sched is not None and response.status == 200 and \
                    urlsplit(response.url).path == "/robots.txt":
                self._read_crawl_delay(sched, response)
            return response
        now = self.clock()
        if response.status == 304:
            self._remember_validators(sched, sid, response)
            sched.stats.inc("not_modified")
            self._success(sched, sid, request, now, entries=[], values=[], window_full=False)
            return response
        if response.status >= 300:
            kind = f"http_{response.status}"
            cause = f"HTTP {response.status}"
            if 300 <= response.status < 400:
                kind, cause = "redirect", f"HTTP {response.status} not followed"
            self._failure(sched, sid, request, now, kind, cause)
            return response
        from scrapy_whittle.feeds import FeedError

        ctype = response.headers.get("Content-Type")
        try:
            parsed = await self.pool.parse(response.body, url=response.url, now=now,
                                           content_type=ctype.decode("latin-1") if ctype
                                           else None)
        except FeedError as exc:
            self._failure(sched, sid, request, now, exc.kind, str(exc))
            return response
        self._remember_validators(sched, sid, response)
        for notice in parsed.notices:           # too_many_entries, field_too_long, ...
            sched.stats.inc(f"warnings/{notice}")
        if parsed.warnings:
            sched.stats.inc("warnings")
            self._log_once(sid, "warning", request.url, "; ".join(parsed.warnings),
                           level=logging.INFO)
        had_before = sched.memory.seen(sid) > 0
        visible = len({e.key for e in parsed.entries})
        new = sched.memory.new_entries(sid, parsed.entries)
        window_full = bool(had_before and visible > 0 and len(new) == visible)
        weight = float(sched.sources.weight[sid]) * self.config.item_value
        values = [e.engagement / self.config.engagement_scale if e.engagement is not None
                  else weight for e in new]
        self._success(sched, sid, request, now, entries=new, values=values,
                      window_full=window_full)
        return response

    def process_exception(self, request: Request, exception: BaseException) -> None:
        sched = self._scheduler()
        sid = sched.source_of(request) if sched is not None else None
        if sid is not None:
            self._failure(sched, sid, request, self.clock(), exception_kind(exception),
                          f"{type(exception).__name__}: {exception}")
        return None

    def _read_crawl_delay(self, sched, response: Response) -> None:
        """Scrapy obeys robots.txt rules but not ``Crawl-delay``; hand it to the scheduler."""
        from protego import Protego  # a dependency of Scrapy's own robots.txt support

        settings = self.crawler.settings
        agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        try:
            delay = Protego.parse(response.body.decode("utf-8", "replace")).crawl_delay(agent)
        except Exception as exc:  # an unparsable robots.txt only loses the delay
            logger.info("robots.txt at %s: Crawl-delay unreadable (%s)", response.url, exc)
            return
        if delay:
            sched.set_crawl_delay(urlsplit(response.url).hostname or "", float(delay))

    # -- observations -------------------------------------------------------------------
    def _success(self, sched, sid: int, request: Request, now: float, *, entries: list,
                 values: list[float], window_full: bool) -> None:
        t0 = sched.t0
        sent = float(request.meta.get("whittle_crawl_time", now))
        pub = np.array([e.published if e.published is not None else now for e in entries],
                       dtype=np.float64) - t0
        reward = float(np.sum(values)) if values else 0.0
        obs = Observation(
            epoch=sched.epoch_of(sent), sources=[sid], time=[now - t0],
            new_items=[len(entries)], reward=[reward], ok=[True], window_full=[window_full],
            item_offsets=[0, len(entries)], item_published=pub,
            item_value=np.full(len(entries), np.nan))
        sched.observe(obs)
        sched.crawl_done(sid, when=sent, ok=True)
        stats = sched.stats
        stats.inc("fetched")
        stats.inc("new_items", len(entries))
        stats.inc("utility", reward)
        if window_full:
            stats.inc("window_full")
        missed = sched.estimate_missed(sid, now - t0, pub, window_full)
        if missed > 0:
            stats.inc("missed_items", missed)
        request.meta["whittle_entries"] = entries
        request.meta["whittle_values"] = values
        request.meta["whittle_time"] = now

    def _failure(self, sched, sid: int, request: Request, now: float, kind: str,
                 cause: str) -> None:
        sent = float(request.meta.get("whittle_crawl_time", now))
        sched.observe(Observation(epoch=sched.epoch_of(sent), sources=[sid],
                                  time=[now - sched.t0], new_items=[0], reward=[0.0],
                                  ok=[False]))
        backoff = sched.crawl_done(sid, when=sent, ok=False)
        sched.stats.inc(f"errors/{kind}")
        request.meta["whittle_error"] = kind
        request.meta["whittle_entries"] = []
        request.meta["whittle_values"] = []
        self._log_once(sid, kind, request.url, f"{cause}; backing off {backoff:.3g} s")

    def _log_once(self, sid: int, kind: str, url: str, message: str,
                  level: int = logging.WARNING) -> None:
        if (sid, kind) in self._logged:
            logger.debug("source %d (%s): %s", sid, url, message)
            return
        self._logged.add((sid, kind))
        logger.log(level, "source %d (%s): %s", sid, url, message)

    @staticmethod
    def _remember_validators(sched, sid: int, response: Response) -> None:
        def header(name: str) -> Any:
            value = response.headers.get(name)
            return value.decode("latin-1") if value else None

        etag, modified = header("ETag"), header("Last-Modified")
        if etag or modified:
            old = sched.validators.get(sid, (None, None))
            sched.validators[sid] = (etag or old[0], modified or old[1])
