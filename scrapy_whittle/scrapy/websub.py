"""``WebSubSubscriber``: the crawl's WebSub callback, served on the reactor the crawl runs.

On with ``WHITTLE_WEBSUB_CALLBACK`` (the public URL hubs POST to) and
``WHITTLE_WEBSUB_LISTEN`` (the local ``host:port`` it is served on); the add-on installs it
in ``EXTENSIONS`` (it is not configured without the settings). The protocol's state
(subscriptions, secrets, leases, signatures) is the re-crawl service's
(:mod:`scrapy_whittle.service.sources.websub`, ``service.websub``), checkpointed with the crawl's
state; this module moves HTTP:

* **discovery**: ``FeedObserverMiddleware`` reads each fetched feed's hub (its ``Link``
  header, else its body) and tells ``service.websub``;
* **requests to hubs** (subscribe, renew, unsubscribe) go through Scrapy as POSTs that the
  scheduler serves first and that cost no budget (``meta["whittle_outside"]``), checked
  every ``tick`` seconds (on a ``SimulatedClock``, the next one is a horizon of the clock, so
  a jump does not pass a renewal);
* **the callback** (a Twisted web server): a GET is a hub's verification of intent, answered
  with its challenge only for a mode and topic this crawl asked for (else 404); a POST is a
  delivery: its ``X-Hub-Signature`` is checked against the subscription's secret, a bad or
  missing one is counted (``whittle/errors/push_signature``) and dropped (answered 202, as the
  spec allows, so the hub does not insist), a good one received already within ``REPEAT_WINDOW`` (a
  hub's retry: :class:`~scrapy_whittle.service.sources.websub.RecentDeliveries`) is counted
  (``whittle/push/repeated``) and answered 202, told to nobody; any other good one becomes a request
  the scheduler serves
  first, answered by ``FeedObserverMiddleware`` without a download: the body is parsed by
  the same parse pool as a fetched feed, handed to ``RecrawlService.pushed`` (entry memory,
  values, delivery journal, the policy's ``observe_push``; no budget), and the spider gets a
  response with the new entries in ``meta["whittle_entries"]``, as for a fetch.

In a cluster crawl (``WHITTLE_REDIS_URL``) every process serves the callback and the
subscriptions are the planner's (:mod:`scrapy_whittle.cluster.websub`): a hub's verification
or delivery is checked against the subscription in Redis, a verification told to the planner
through its inbox, a delivery's entries told new by the shared entry memory
(``ClusterNode.pushed``), a repeat told by Redis in the call that reads the subscription
(whichever process received the first copy); the requests to hubs are the planner's, sent
by the process that plans (``ClusterNode.on_hub_requests``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from scrapy import Request, signals
from scrapy.exceptions import NotConfigured
from scrapy.http import Response
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.error import CannotListenError
from twisted.internet.task import LoopingCall
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from scrapy_whittle.cluster.websub import read, read_delivery, tell_planner
from scrapy_whittle.scrapy.meta import (
    META_HUB_REQUEST,
    META_OUTSIDE,
    META_PUSH,
    META_SOURCE_ID,
    META_SOURCE_URL,
)
from scrapy_whittle.scrapy.sink import whittle_sink
from scrapy_whittle.scrapy.startup import crawl_start
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.sink import LocalSink
from scrapy_whittle.service.sources.websub import (
    SUBSCRIBE,
    RecentDeliveries,
    check_signature,
    delivery_id,
    intended,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_whittle.cluster.node import ClusterNode
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sink import CrawlSink
    from scrapy_whittle.service.sources.websub import HubRequest

logger = logging.getLogger(__name__)

#: real seconds between checks for requests due (a simulated clock's: see the docstring)
TICK = 1.0
SIMULATED_TICK = 0.005


@dataclass(frozen=True)
class Push:
    """A delivery accepted: source id, body, its Content-Type, when it arrived."""

    source: int
    body: bytes
    content_type: str | None
    received_at: float


def push_response(request: Request) -> Response:
    """The response of a delivery's request: the delivered body, as if fetched."""
    push: Push = request.meta[META_PUSH]
    headers = {"Content-Type": push.content_type} if push.content_type else None
    return Response(request.url, status=200, headers=headers, body=push.body,
                    request=request, flags=["whittle-push"])


class WebSubSubscriber:
    """See the module docstring. The HTTP side; what the subscriptions say is asked of
    ``subscriptions``: a :class:`LocalSubscriptions` (the service's) or a
    :class:`ClusterSubscriptions` (in Redis), made for the crawl's sink when the spider
    opens."""

    def __init__(self, crawler: Crawler, listen: tuple[str, int], max_body: int) -> None:
        self.crawler = crawler
        self.listen = listen
        self.max_body = max_body
        self.subscriptions: LocalSubscriptions | ClusterSubscriptions | None = None
        self.stats = None                         # the service's, or the node's
        self.port = None
        self.closed = False
        self._warned: set[str] = set()
        #: one process's deliveries of the last REPEAT_WINDOW (a cluster's are in Redis)
        self.recent = RecentDeliveries()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> WebSubSubscriber:
        config = crawl_start(crawler).config
        if config.websub_callback is None:
            raise NotConfigured      # without a message: Scrapy would warn of it
        ext = cls(crawler, config.websub_listen, config.max_feed_size)
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    # -- life -------------------------------------------------------------------------------
    def spider_opened(self, spider=None) -> None:
        subscriptions = subscriptions_of(self, whittle_sink(self.crawler))
        if subscriptions is None:
            logger.warning("WebSub: no local re-crawl service in this crawl: not started")
            return
        self.subscriptions, self.stats = subscriptions, subscriptions.stats
        subscriptions.open()

    def _listen(self, stats) -> bool:
        """Serve the callback (False: the address cannot be listened on; counted, logged)."""
        from twisted.internet import reactor

        host, port = self.listen
        site = Site(CallbackResource(self))
        site.noisy = False
        try:
            self.port = reactor.listenTCP(port, site, interface=host)
        except CannotListenError as exc:
            # the crawl goes on polling: WebSub is an addition to it
            stats.inc("errors/websub_listen")
            logger.error("WHITTLE_WEBSUB_LISTEN (%r) cannot be listened on (%s): WebSub is off "
                         "for this crawl, the feeds are polled", f"{host}:{port}",
                         exc.socketError)
            return False
        return True

    async def spider_closed(self, spider=None, reason=None) -> None:
        self.closed = True
        if self.subscriptions is not None:
            self.subscriptions.close()
        if self.port is not None:
            port, self.port = self.port, None
            await maybe_deferred_to_future(port.stopListening())

    # -- requests to hubs --------------------------------------------------------------------
    def send(self, requests: list[HubRequest]) -> None:
        """Send ``requests`` to their hubs through Scrapy."""
        engine = getattr(self.crawler, "engine", None)
        if engine is None or getattr(engine, "spider", None) is None:
            return                       # asked again after their retry wait
        for hub_request in requests:
            engine.crawl(self._request(hub_request))
            self.stats.inc(f"websub/{hub_request.mode}_requests")

    def _request(self, hub_request: HubRequest) -> Request:
        return Request(
            hub_request.hub, method="POST", body=urlencode(hub_request.form),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            dont_filter=True, callback=self._hub_answered, errback=self._hub_failed,
            meta={META_OUTSIDE: True, META_HUB_REQUEST: hub_request.key,
                  "dont_obey_robotstxt": True, "dont_cache": True,
                  "handle_httpstatus_all": True})

    def _hub_answered(self, response: Response):
        if not 200 <= response.status < 300:
            self._refused(response.request, f"HTTP {response.status}")
        return []

    def _hub_failed(self, failure):
        self._refused(failure.request, str(failure.value))
        return []

    def _refused(self, request: Request, cause: str) -> None:
        if self.subscriptions is not None:
            self.subscriptions.refused(request.meta[META_HUB_REQUEST])
        self.stats.inc("errors/websub_request")
        logger.warning("WebSub: the hub %s refused or missed a request (%s): asked again "
                       "later", request.url, cause)

    # -- the callback ------------------------------------------------------------------------
    async def verification(self, key: str, args: dict[str, str]) -> tuple[int, bytes]:
        """A hub's GET: (status, body). Once the spider closed (a request the listener had
        taken before it stopped), 503: the crawl's state and stats are final, and a lease
        started now would be one they do not know of; the hub asks again later."""
        if self.closed:
            return 503, b""
        return await self.subscriptions.verification(key, args)

    async def delivery(self, key: str, body: bytes, signature: str | None,
                       content_type: str | None) -> int:
        """A hub's POST: the status to answer."""
        if len(body) > self.max_body:
            self.stats.inc("errors/push_too_large")
            return 413
        return await self.subscriptions.delivery(key, body, signature, content_type)

    def _repeated(self, key: str) -> int:
        """A delivery received already (a hub's retry, a copy that reached another process
        first): acknowledged, so the hub stops, and told to nobody (its entries are known)."""
        self.stats.inc("push/repeated")
        if "push_repeated" not in self._warned:
            self._warned.add("push_repeated")
            logger.info("WebSub: a delivery to callback %s received again within %g s: "
                        "acknowledged, not taken (counted in whittle/push/repeated)", key,
                        self.recent.window)
        return 202

    def _dropped(self, key: str, verdict: str) -> int:
        """A delivery dropped (``verdict``: its stats key under ``errors/``): the status."""
        self.stats.inc(f"errors/{verdict}")
        if verdict not in self._warned:          # warn once per kind
            self._warned.add(verdict)
            logger.warning("WebSub: a delivery to callback %s dropped (%s: %s)", key,
                           verdict, "no valid X-Hub-Signature" if verdict ==
                           "push_signature" else "no subscription of this crawl there")
        return 410 if verdict == "push_unknown_callback" else 202

    def _hand_out(self, push: Push, url: str) -> None:
        """A delivery accepted: a request the scheduler serves first, answered by
        ``FeedObserverMiddleware`` without a download."""
        self.stats.inc("websub/deliveries")
        self.crawler.engine.crawl(Request(url, dont_filter=True, meta={
            META_PUSH: push, META_OUTSIDE: True, META_SOURCE_ID: push.source,
            META_SOURCE_URL: url, "dont_obey_robotstxt": True, "dont_cache": True}))


def subscriptions_of(subscriber: WebSubSubscriber, sink: CrawlSink | None
                     ) -> LocalSubscriptions | ClusterSubscriptions | None:
    """The subscriptions ``subscriber`` answers hubs from, for the crawl's ``sink`` (None:
    none, WebSub is not on in its service)."""
    if isinstance(sink, LocalSink):
        service = sink.service
        return LocalSubscriptions(subscriber, service) if service.websub is not None else None
    if sink is not None and sink.websub is not None:       # a cluster's node
        return ClusterSubscriptions(subscriber, sink)
    return None


class LocalSubscriptions:
    """The subscriptions of a crawl in one process: its service's (``service.websub``); the
    requests to hubs are sent from here when due."""

    def __init__(self, subscriber: WebSubSubscriber, service: RecrawlService) -> None:
        self.subscriber = subscriber
        self.service = service
        self.stats = service.stats
        self._loop: LoopingCall | None = None
        self._sim_clock: SimulatedClock | None = None
        self._soon = False

    def open(self) -> None:
        subscriber, service = self.subscriber, self.service
        if not subscriber._listen(self.stats):
            return
        clock = service.clock
        simulated = isinstance(clock, SimulatedClock)
        if simulated:
            self._sim_clock = clock
            clock.add_horizon(self.horizon)
        self._loop = LoopingCall(self.send_due)
        self._loop.start(SIMULATED_TICK if simulated else TICK, now=True)
        counts = service.websub.counts()
        logger.info("WebSub callback at %s (listening on %s:%d); %d subscriptions restored",
                    service.websub.callback, subscriber.listen[0],
                    subscriber.port.getHost().port, sum(counts.values()))

    def close(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._sim_clock is not None:
            self._sim_clock.remove_horizon(self.horizon)

    def horizon(self) -> float:
        """When a request to a hub is due next; due now: sent at once."""
        t = self.service.websub.next_due()
        if t <= self.service.clock.now() and not self._soon:
            from twisted.internet import reactor

            self._soon = True
            reactor.callLater(0, self.send_due)
        return t

    def send_due(self) -> None:
        self._soon = False
        service = self.service
        engine = getattr(self.subscriber.crawler, "engine", None)
        if engine is None or getattr(engine, "spider", None) is None:
            return
        self.subscriber.send(service.websub.due(service.clock.now()))

    def refused(self, key: str) -> None:
        self.service.websub.failed(key, self.service.clock.now())

    async def verification(self, key: str, args: dict[str, str]) -> tuple[int, bytes]:
        service = self.service
        websub, now = service.websub, service.clock.now()
        mode, topic = args.get("hub.mode", ""), args.get("hub.topic", "")
        if mode == "denied":
            if websub.denied(key, topic, now):
                service.stats.inc("websub/denied")
                logger.warning("WebSub: the hub denied the subscription to %s (%s)", topic,
                               args.get("hub.reason", "no reason given"))
                return 200, b""
            return 404, b""
        if not websub.verify(key, mode, topic, args.get("hub.lease_seconds"), now):
            service.stats.inc("websub/refused_verifications")
            return 404, b""
        service.stats.inc("websub/verified" if mode == "subscribe" else "websub/unsubscribed")
        return 200, args.get("hub.challenge", "").encode()

    async def delivery(self, key: str, body: bytes, signature: str | None,
                       content_type: str | None) -> int:
        subscriber, service = self.subscriber, self.service
        verdict = service.websub.delivery(key, body, signature)
        if isinstance(verdict, str):
            return subscriber._dropped(key, verdict)
        sid = verdict.source
        if not 0 <= sid < len(service.sources):
            service.stats.inc("errors/push_unknown_source")
            return 410
        now = service.clock.now()
        if subscriber.recent.repeated(delivery_id(key, signature), now):
            return subscriber._repeated(key)
        subscriber._hand_out(Push(sid, body, content_type, now), service.url(sid))
        return 202


class ClusterSubscriptions:
    """The subscriptions of a cluster crawl: the planner's, in Redis; a hub's verification or
    delivery is checked against them there, and the planner's requests to hubs are sent by
    the process that plans (``ClusterNode.on_hub_requests``)."""

    def __init__(self, subscriber: WebSubSubscriber, node: ClusterNode) -> None:
        self.subscriber = subscriber
        self.node = node
        self.stats = node.stats

    def open(self) -> None:
        """The planner's requests to hubs are sent from here while this process plans
        (whether or not it can listen); the callback is served here."""
        subscriber, node = self.subscriber, self.node
        node.on_hub_requests = subscriber.send
        if not subscriber._listen(node.stats):
            return
        logger.info("WebSub callback at %s (listening on %s:%d), the subscriptions in Redis "
                    "(%s)", subscriber.crawler.settings.get("WHITTLE_WEBSUB_CALLBACK"),
                    subscriber.listen[0], subscriber.port.getHost().port, node.keys.websub)

    def close(self) -> None:
        self.node.on_hub_requests = None

    def refused(self, key: str) -> None:
        websub = self.node.planner.websub
        if websub is not None:                       # still planning
            websub.failed(key, self.node.clock.now())

    async def verification(self, key: str, args: dict[str, str]) -> tuple[int, bytes]:
        from scrapy_whittle.cluster.retry import RedisUnavailable

        node, stats = self.node, self.stats
        mode, topic = args.get("hub.mode", ""), args.get("hub.topic", "")
        try:
            found = await read(node, key)
            sub = found[0] if found is not None else None
            if mode == "denied":
                if sub is None or sub.topic != topic or sub.mode != SUBSCRIBE:
                    return 404, b""
                await tell_planner(node, "denied", key, mode, topic, node.clock.now())
                stats.inc("websub/denied")
                logger.warning("WebSub: the hub denied the subscription to %s (%s)", topic,
                               args.get("hub.reason", "no reason given"))
                return 200, b""
            if not intended(sub, mode, topic):
                stats.inc("websub/refused_verifications")
                return 404, b""
            # the planner starts the lease: told before the hub hears the challenge
            await tell_planner(node, "verified", key, mode, topic, node.clock.now(),
                               args.get("hub.lease_seconds"))
        except RedisUnavailable:
            stats.inc("errors/websub_redis")   # the outage is logged by the node
            return 503, b""              # the hub verifies again later, or gives up
        stats.inc("websub/verified" if mode == SUBSCRIBE else "websub/unsubscribed")
        return 200, args.get("hub.challenge", "").encode()

    async def delivery(self, key: str, body: bytes, signature: str | None,
                       content_type: str | None) -> int:
        from scrapy_whittle.cluster.node import PushSource
        from scrapy_whittle.cluster.retry import RedisUnavailable

        subscriber, node = self.subscriber, self.node
        now = node.clock.now()
        try:
            found, repeated = await read_delivery(node, key, signature, now)
        except RedisUnavailable:
            self.stats.inc("errors/websub_redis")
            return 503                   # the hub may send it again; a poll finds it anyway
        if found is None:
            return subscriber._dropped(key, "push_unknown_callback")
        sub, url, weight = found
        if not check_signature(sub.secret, body, signature):
            return subscriber._dropped(key, "push_signature")
        if repeated:
            return subscriber._repeated(key)
        node.push_sources[sub.source] = PushSource(url, weight)
        subscriber._hand_out(Push(sub.source, body, content_type, now), url)
        return 202


class CallbackResource(Resource):
    """The callback's HTTP side: the subscription is the path's last segment."""

    isLeaf = True

    def __init__(self, subscriber: WebSubSubscriber) -> None:
        super().__init__()
        self.subscriber = subscriber

    @staticmethod
    def _key(request) -> str:
        return request.path.decode("latin-1").rstrip("/").rsplit("/", 1)[-1]

    def render_GET(self, request):
        args = {k.decode("utf-8", "replace"): v[0].decode("utf-8", "replace")
                for k, v in request.args.items() if v}

        def answer(result: tuple[int, bytes]) -> bytes:
            status, body = result
            request.setResponseCode(status)
            request.setHeader("content-type", "text/plain")
            return body

        return self._answer(request, self.subscriber.verification(self._key(request), args),
                            answer)

    def render_POST(self, request):
        body = request.content.read()
        signature = request.getHeader("x-hub-signature")
        ctype = request.getHeader("content-type")

        def answer(status: int) -> bytes:
            request.setResponseCode(status)
            return b""

        return self._answer(request, self.subscriber.delivery(self._key(request), body,
                                                              signature, ctype), answer)

    @staticmethod
    def _answer(request, result, answer):
        """``answer(result)`` when the coroutine ``result`` is done (a cluster's asks Redis)."""
        gone: list[bool] = []            # the hub hung up meanwhile: nobody to answer
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def done(value) -> None:
            if not gone:
                request.write(answer(value))
                request.finish()

        def failed(failure) -> None:
            logger.error("WebSub: the callback failed: %s", failure.getTraceback())
            if not gone:
                request.setResponseCode(500)
                request.finish()

        deferred_from_coro(result).addCallbacks(done, failed)
        return NOT_DONE_YET
