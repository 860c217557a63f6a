"""A WebSub hub over HTTP for ``sim.serve`` (``--hub``): the simulated web's pushing sources
name it, subscribers subscribe to it, and it POSTs their new entries on the virtual clock.

The protocol is the W3C WebSub Recommendation's, hub side:

* **discovery**: a pushing source's feed carries ``Link: <hub>; rel="hub", <topic>;
  rel="self"`` and, in its body, ``<atom:link rel="hub">`` / ``rel="self"`` (RSS, Atom) or
  ``hubs`` (JSON Feed); a news sitemap only the header. The topic is the feed's URL.
* **subscription**: ``POST /hub`` with ``hub.mode`` (subscribe / unsubscribe), ``hub.topic``,
  ``hub.callback``, ``hub.secret``, ``hub.lease_seconds`` is answered 202 (400 for a bad
  request, a topic that is no pushing source, a secret of 200 bytes or more); the hub then
  verifies the intent: a GET of the callback with ``hub.mode``, ``hub.topic``,
  ``hub.challenge`` (and ``hub.lease_seconds``, the lease granted: at most ``lease_max``),
  and activates the subscription only when the answer is 2xx with the challenge as body. A
  lease ends unrenewed: the subscription is gone.
* **delivery** (content distribution, a "fat ping"): each new entry of a topic is POSTed to
  every active subscriber as a feed document listing it alone, with the feed's
  ``Content-Type``, the ``Link`` header and ``X-Hub-Signature: sha256=<hex HMAC-SHA256 of
  the body with the subscriber's secret>`` (none without a secret). A failed POST is not
  retried. For the benchmarks, a delivery of an entry also names it (``X-Sim-Entry:
  <source>:<seq>``) and the delay the hub drew for it (``X-Sim-Delay``, seconds of the
  scenario: its lateness by design, before the hub's ``tick``); a subscriber ignores them.

Faults, seeded (``sim.web.hub.HubModel`` for the shared ones, in the scenario's time unit):
``share`` of the sources push (``HubModel.pushers``); each entry is lost with probability
``loss``, else delivered after a ``delay`` law's draw; delivered a second time with
probability ``duplicate``; ``spurious`` pings per time unit and pushing source bring a feed
document with no entry; ``bad_signature`` of the deliveries are signed with a wrong key; from
``down_at`` on the hub delivers nothing and accepts no subscription (503).

Time: the hub acts on the server's virtual clock: entries are read from ``sim.web.feedweb`` as
they are published, deliveries fall due at publication + delay. A ``tick`` loop delivers what
is due; on a ``SimulatedClock`` shared with an in-process crawl the hub registers its next
time as a horizon of the clock (``SimulatedClock.add_horizon``), so the clock never jumps past
a delivery, and holds while a delivery is on its way, so the subscriber receives it at its
time.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import logging
import math
import secrets
from dataclasses import dataclass, field
from io import BytesIO
from urllib.parse import parse_qs, urlencode

import numpy as np
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol
from twisted.internet.task import LoopingCall
from twisted.web.client import Agent, FileBodyProducer
from twisted.web.http_headers import Headers

from sim.web.hub import HubModel

logger = logging.getLogger(__name__)

HUB_PATH = "/hub"
EPSILON = 1e-5             # real seconds: see ``WebSubHub.horizon``
#: real seconds a verification or a delivery may take (the clock is held meanwhile)
TIMEOUT = 10.0
ATOM = "http://www.w3.org/2005/Atom"
#: a delivery's headers for the benchmarks: the entry it brings ("source:seq") and the hub's
#: drawn delay for it (seconds of the scenario)
SIM_ENTRY, SIM_DELAY = b"x-sim-entry", b"x-sim-delay"
#: the options of ``--hub`` (times in seconds of the scenario), and their defaults
OPTIONS = {"share": 0.5, "loss": 0.0, "delay": "exponential", "delay_mean": 30.0,
           "delay_max": 300.0, "duplicate": 0.0, "spurious": 0.0, "bad_signature": 0.0,
           "down_at": None, "lease_max": 864000.0}


def parse_hub(spec: str | dict | None, unit: float) -> dict | None:
    """``--hub``: "" / None (no hub), "on" (the defaults) or ``key=value,...`` among
    :data:`OPTIONS` (times in seconds); ValueError naming what is wrong. Returns the
    arguments of :class:`WebSubHub` (times in the scenario's unit, ``unit`` seconds)."""
    if not spec:
        return None
    if isinstance(spec, str):
        pairs = {} if spec.strip() == "on" else dict(
            part.split("=", 1) if "=" in part else (part, "")
            for part in spec.split(",") if part.strip())
    else:
        pairs = dict(spec)
    values = dict(OPTIONS)
    for key, raw in pairs.items():
        key = key.strip()
        if key not in OPTIONS:
            raise ValueError(f"--hub: unknown option {key!r} (options: {', '.join(OPTIONS)})")
        if key == "delay":
            values[key] = str(raw).strip()
            continue
        try:
            values[key] = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"--hub: {key} ({raw!r}) must be a number") from None
    if not 0.0 <= values["bad_signature"] <= 1.0:
        raise ValueError(f"--hub: bad_signature ({values['bad_signature']!r}) must lie in [0, 1]")
    if not (math.isfinite(values["lease_max"]) and values["lease_max"] > 0):
        raise ValueError(f"--hub: lease_max ({values['lease_max']!r}) must be > 0")
    model = HubModel(share=values["share"], loss=values["loss"], delay=values["delay"],
                     delay_mean=values["delay_mean"] / unit,
                     delay_max=values["delay_max"] / unit, duplicate=values["duplicate"],
                     spurious=values["spurious"] * unit,
                     down_at=None if values["down_at"] is None else values["down_at"] / unit)
    return {"model": model, "bad_signature": values["bad_signature"],
            "lease_max": values["lease_max"]}


def announce(body: bytes, kind: str, hub: str, topic: str) -> bytes:
    """A feed's body naming its hub and topic (RSS and Atom: atom:link elements at the top of
    the channel / feed; JSON Feed: ``hubs``; a sitemap: unchanged, the header names them)."""
    if kind == "json":
        head = b'{"hubs": [{"type": "WebSub", "url": "' + hub.encode() + b'"}], '
        return head + body[1:]
    links = (f'<atom:link xmlns:atom="{ATOM}" rel="hub" href="{hub}"/>'
             f'<atom:link xmlns:atom="{ATOM}" rel="self" href="{topic}"/>').encode()
    for opening in (b"<channel>", b"</id>"):          # RSS's channel, Atom's feed id
        at = body.find(opening)
        if at >= 0:
            at += len(opening)
            return body[:at] + links + body[at:]
    return body


class _Body(Protocol):
    """Collects a response's body (Twisted's ``readBody`` warns on the asyncio reactor's
    transports, which lack ``abortConnection``)."""

    def __init__(self, done: Deferred) -> None:
        self.done, self.parts = done, []

    def dataReceived(self, data: bytes) -> None:
        self.parts.append(data)

    def connectionLost(self, reason=None) -> None:
        self.done.callback(b"".join(self.parts))


def read_body(response) -> Deferred:
    done: Deferred = Deferred()
    response.deliverBody(_Body(done))
    return done


@dataclass
class HubSubscription:
    callback: str
    secret: str | None
    expires_at: float              # unix (the server's real time)


@dataclass(order=True)
class _Event:
    at: float                      # unix time due
    seq: int
    source: int = field(compare=False)
    kind: str = field(compare=False)        # "entry", "duplicate", "spurious"
    item: object = field(compare=False, default=None)
    bad: bool = field(compare=False, default=False)
    late: float = field(compare=False, default=0.0)      # the drawn delay (scenario units)


class WebSubHub:
    """The hub of a ``SimWebResource`` (see the module docstring). ``model``: the faults
    shared with ``sim.web.hub``; ``bad_signature``: the share of deliveries signed with a wrong
    key; ``lease_max``: the longest lease granted, seconds; ``tick``: real seconds between
    checks for what is due; ``sim_clock``: a ``SimulatedClock`` shared with a crawl (its
    horizon)."""

    def __init__(self, resource, model: HubModel, *, seed: int = 0,
                 bad_signature: float = 0.0, lease_max: float = 864000.0,
                 reactor=None, tick: float = 0.05, sim_clock=None) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.resource, self.model = resource, model
        self.web, self.clock = resource.web, resource.clock
        self.bad_signature, self.lease_max = float(bad_signature), float(lease_max)
        self.reactor = reactor
        self.pushing = model.pushers(self.web.n, seed)
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 28, 1]))
        self.subs: dict[int, dict[str, HubSubscription]] = {}       # source -> callback -> sub
        self.seen = np.zeros(self.web.n, dtype=np.int64)            # entries read per source
        self.next_spurious = np.full(self.web.n, math.inf)
        # per source, the virtual time it must next be read (its next publication or spurious
        # ping; -inf: at once; inf: nobody subscribed), so a check of what is due is one
        # array minimum, not a walk over the subscribed sources
        self.due = np.full(self.web.n, math.inf)
        self.next_expiry = math.inf                # unix, the earliest lease end
        self.events: list[_Event] = []
        self._seq = itertools.count()
        self.in_flight = 0
        self.agent = Agent(reactor)
        self.counts = {"subscribed": 0, "unsubscribed": 0, "verify_failed": 0, "refused": 0,
                       "delivered": 0, "lost": 0, "duplicates": 0, "spurious": 0,
                       "bad_signatures": 0, "failed_posts": 0, "expired": 0}
        self.topics: dict[str, int] = {}
        self.base = ""                   # the server's address as the feeds' requests named it
        self._tick_soon = False
        self._loop = LoopingCall(self.tick)
        self._loop.clock = reactor
        self._loop.start(tick, now=False)
        self.sim_clock = sim_clock
        if sim_clock is not None:
            sim_clock.add_horizon(self.horizon)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()
        if self.sim_clock is not None:
            self.sim_clock.remove_horizon(self.horizon)

    # -- what sources show -----------------------------------------------------------------
    def url(self, base: str) -> str:
        return base + HUB_PATH

    def announce(self, request, i: int, body: bytes, kind: str, base: str) -> bytes:
        """Feed i's body (and headers) naming the hub, when source i pushes."""
        if not self.pushing[i]:
            return body
        self._learn_topics(base)
        topic = self.resource.kinds.url(base, i)
        hub = self.url(base)
        request.setHeader("link", f'<{hub}>; rel="hub", <{topic}>; rel="self"')
        return announce(body, kind, hub, topic)

    def _learn_topics(self, base: str) -> None:
        """The topics (feed URLs) of the pushing sources at ``base``."""
        if base != self.base or not self.topics:
            self.base = base
            self.topics.update({self.resource.kinds.url(base, i): i
                                for i in np.flatnonzero(self.pushing).tolist()})

    def totals(self) -> dict:
        self._expire(self.clock.time_source())
        active = sum(len(s) for s in self.subs.values())
        return {**self.counts, "active_subscriptions": active,
                "pushing_sources": int(self.pushing.sum())}

    # -- subscriptions -------------------------------------------------------------------------
    def render_POST(self, request) -> bytes:
        now = self.clock.time_source()
        if now >= self.clock.real(self.model.down):
            request.setResponseCode(503)
            return b"hub down"
        form = parse_qs(request.content.read().decode("utf-8", "replace"))

        def one(name: str) -> str | None:
            values = form.get(name)
            return values[0] if values else None

        mode, topic, callback = one("hub.mode"), one("hub.topic"), one("hub.callback")
        secret, lease = one("hub.secret"), one("hub.lease_seconds")
        self._learn_topics(self.resource.base(request))
        source = self.topics.get(topic or "")
        problem = None
        if mode not in ("subscribe", "unsubscribe"):
            problem = f"hub.mode {mode!r} is neither subscribe nor unsubscribe"
        elif not callback or not callback.startswith(("http://", "https://")):
            problem = f"hub.callback {callback!r} is no http(s) URL"
        elif source is None:
            problem = f"hub.topic {topic!r} is not a topic of this hub"
        elif secret is not None and len(secret.encode()) >= 200:
            problem = "hub.secret must be less than 200 bytes"
        if problem is not None:
            self.counts["refused"] += 1
            request.setResponseCode(400)
            return problem.encode()
        try:
            asked = float(lease) if lease else self.lease_max
        except ValueError:
            asked = self.lease_max
        granted = min(self.lease_max, asked) if asked > 0 else self.lease_max
        self.reactor.callLater(0, self._verify, source, topic, mode, callback, secret, granted)
        request.setResponseCode(202)
        return b""

    def _verify(self, source: int, topic: str, mode: str, callback: str, secret: str | None,
                lease: float):
        challenge = secrets.token_urlsafe(16)
        query = {"hub.mode": mode, "hub.topic": topic, "hub.challenge": challenge}
        if mode == "subscribe":
            query["hub.lease_seconds"] = f"{lease:.0f}"
        sep = "&" if "?" in callback else "?"
        url = f"{callback}{sep}{urlencode(query)}".encode()
        self.in_flight += 1

        def answered(response):
            return read_body(response).addCallback(lambda body: (response.code, body))

        def verified(result):
            code, body = result
            if not (200 <= code < 300 and body == challenge.encode()):
                self.counts["verify_failed"] += 1
                return
            subs = self.subs.setdefault(source, {})
            if mode == "unsubscribe":
                if subs.pop(callback, None) is not None:
                    self.counts["unsubscribed"] += 1
                if not subs:
                    self.due[source] = math.inf
                return
            now = self.clock.time_source()
            subs[callback] = HubSubscription(callback, secret, now + lease)
            self.next_expiry = min(self.next_expiry, now + lease)
            self.counts["subscribed"] += 1
            if self.seen[source] == 0:           # deliveries start with what comes next
                self.seen[source] = self.web.latest_seq(source, self.clock.now()) + 1
                self._plan_spurious(source, self.clock.now())
            self.due[source] = -math.inf

        def failed(failure):
            self.counts["verify_failed"] += 1
            logger.info("hub: verification of %s failed: %s", callback, failure.value)

        def done(_):
            self.in_flight -= 1

        d = self.agent.request(b"GET", url)
        d.addTimeout(TIMEOUT, self.reactor)
        d.addCallback(answered).addCallbacks(verified, failed).addBoth(done)
        return d

    # -- deliveries ------------------------------------------------------------------------------
    def _plan_spurious(self, i: int, v: float) -> None:
        rate = self.model.spurious
        self.next_spurious[i] = v + self.rng.exponential(1.0 / rate) if rate > 0 else math.inf

    def horizon(self) -> float:
        """The server time the hub acts next (-inf: it is acting now: a delivery or a
        verification on its way, or something due)."""
        if self.in_flight:
            return -math.inf
        t = self.events[0].at if self.events else math.inf
        nxt = float(self.due.min())
        if nxt <= self.clock.now():
            t = min(t, self.clock.time_source())        # published, not read yet: now
        elif nxt < self.model.down:
            # a hair after: read back through the virtual clock, the instant must not
            # round to just before the publication
            t = min(t, self.clock.real(nxt) + EPSILON)
        if t <= self.clock.time_source() and not self._tick_soon:
            self._tick_soon = True
            self.reactor.callLater(0, self.tick)
        return t

    def tick(self) -> None:
        """Read what was published up to now, deliver what is due."""
        self._tick_soon = False
        v = self.clock.now()
        now = self.clock.time_source()
        down = self.model.down
        if now >= self.next_expiry:
            self._expire(now)
        for i in np.flatnonzero(self.due <= v).tolist():
            for it in self.web.feed(i, v)[::-1]:       # oldest first
                if it.seq < self.seen[i]:
                    continue
                self.seen[i] = it.seq + 1
                if it.published >= down:
                    continue
                if self.rng.random() < self.model.loss:
                    self.counts["lost"] += 1
                    continue
                delay = float(self.model.delays(self.rng, 1)[0])
                self._push(self.clock.real(it.published + delay), i, "entry", it, delay)
                if self.rng.random() < self.model.duplicate:
                    again = float(self.model.delays(self.rng, 1)[0])
                    self._push(self.clock.real(it.published + delay + again), i,
                               "duplicate", it, delay + again)
            while self.next_spurious[i] <= v:
                if self.next_spurious[i] < down:
                    self._push(self.clock.real(self.next_spurious[i]), i, "spurious", None)
                self._plan_spurious(i, self.next_spurious[i])
            self.due[i] = min(self.web.next_publication(i, v), self.next_spurious[i])
        while self.events and self.events[0].at <= now:
            self._deliver(heapq.heappop(self.events))

    def _push(self, at: float, i: int, kind: str, item, late: float = 0.0) -> None:
        bad = self.rng.random() < self.bad_signature
        heapq.heappush(self.events, _Event(at, next(self._seq), i, kind, item, bad, late))

    def _expire(self, now: float) -> None:
        """Every lease ended by ``now`` (unix) is gone; a source left with no subscriber is
        read no more."""
        if now < self.next_expiry:
            return
        self.next_expiry = math.inf
        for i, subs in self.subs.items():
            for callback in [c for c, s in subs.items() if s.expires_at <= now]:
                del subs[callback]
                self.counts["expired"] += 1
            if not subs:
                self.due[i] = math.inf
            self.next_expiry = min([self.next_expiry, *(s.expires_at for s in subs.values())])

    def _deliver(self, event: _Event) -> None:
        i = event.source
        base = self.base
        items = [] if event.item is None else [event.item]
        body, ctype = self.resource.document(i, items, self.clock.now(), base)
        topic = self.resource.kinds.url(base, i)
        hub = self.url(base)
        body = announce(body, self.resource.kinds.kind(i), hub, topic)
        for sub in list(self.subs.get(i, {}).values()):
            headers = {b"content-type": [ctype.encode()],
                       b"link": [f'<{hub}>; rel="hub", <{topic}>; rel="self"'.encode()]}
            if event.item is not None:            # for the benchmarks (see the docstring)
                headers[SIM_ENTRY] = [f"{i}:{event.item.seq}".encode()]
                headers[SIM_DELAY] = [f"{event.late * self.clock.unit:.3f}".encode()]
            if sub.secret is not None:
                key = sub.secret if not event.bad else sub.secret + "x"
                digest = hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
                headers[b"x-hub-signature"] = [f"sha256={digest}".encode()]
            self.counts["delivered"] += 1
            self.counts["bad_signatures"] += event.bad
            self.counts["duplicates"] += event.kind == "duplicate"
            self.counts["spurious"] += event.kind == "spurious"
            self._post(sub.callback, body, headers)

    def _post(self, callback: str, body: bytes, headers: dict) -> None:
        self.in_flight += 1

        def answered(response):
            if not 200 <= response.code < 300:
                self.counts["failed_posts"] += 1
            return read_body(response)

        def failed(failure):
            self.counts["failed_posts"] += 1

        def done(_):
            self.in_flight -= 1

        d = self.agent.request(b"POST", callback.encode(), Headers(headers),
                               FileBodyProducer(BytesIO(body)))
        d.addTimeout(TIMEOUT, self.reactor)
        d.addCallback(answered).addErrback(failed).addBoth(done)
