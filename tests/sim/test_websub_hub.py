"""``sim.serve``'s WebSub hub (``sim.web.websub_hub``) over HTTP: discovery in the feeds,
subscription with verification of intent, signed deliveries of each new entry on the virtual
clock, refusals, a hub going down; and its options."""

from __future__ import annotations

import hashlib
import hmac
from io import BytesIO

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater
from twisted.web.client import Agent, FileBodyProducer
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.server import Site

from scrapy_whittle.service.clock import SimulatedClock
from sim.serve import start_server
from sim.web.websub_hub import announce, parse_hub, read_body

START = 1_700_000_000.0


class Subscriber(Resource):
    """A callback that answers the challenge (or not) and keeps what it is sent."""

    isLeaf = True

    def __init__(self, echo: bool = True) -> None:
        super().__init__()
        self.echo = echo
        self.verified: defer.Deferred = defer.Deferred()
        self.deliveries: list[tuple[bytes, dict]] = []
        self.delivered: defer.Deferred | None = None

    def render_GET(self, request) -> bytes:
        args = {k.decode(): v[0].decode() for k, v in request.args.items()}
        if not self.verified.called:
            reactor.callLater(0, self.verified.callback, args)
        return args["hub.challenge"].encode() if self.echo else b"no"

    def render_POST(self, request) -> bytes:
        headers = {k.decode().lower(): v[0].decode()
                   for k, v in request.requestHeaders.getAllRawHeaders()}
        self.deliveries.append((request.content.read(), headers))
        if self.delivered is not None and not self.delivered.called:
            reactor.callLater(0, self.delivered.callback, None)
        request.setResponseCode(202)
        return b""


async def post(url: str, form: dict) -> tuple[int, bytes]:
    body = "&".join(f"{k}={v}" for k, v in form.items()).encode()
    response = await Agent(reactor).request(
        b"POST", url.encode(),
        Headers({b"content-type": [b"application/x-www-form-urlencoded"]}),
        FileBodyProducer(BytesIO(body)))
    return response.code, await read_body(response)


async def get(url: str):
    response = await Agent(reactor).request(b"GET", url.encode())
    return response, await read_body(response)


def test_hub_options():
    args = parse_hub("loss=0.2,delay_max=600,spurious=0.001,down_at=7200,lease_max=60", 3600.0)
    model = args["model"]
    assert (model.loss, model.delay_max, model.down_at) == (0.2, 600 / 3600, 2.0)
    assert model.spurious == pytest.approx(3.6) and args["lease_max"] == 60.0
    assert parse_hub("on", 1.0)["model"].loss == 0.0 and parse_hub("", 1.0) is None
    for bad in ("nonsense=1", "loss=x", "loss=2", "bad_signature=-1", "lease_max=0",
                "delay=normal"):
        with pytest.raises(ValueError, match="hub"):
            parse_hub(bad, 1.0)


def test_feeds_name_the_hub_in_their_body():
    hub, topic = "http://h/hub", "http://h/feed/0.xml"
    rss = announce(b"<rss><channel><title>t</title></channel></rss>", "rss", hub, topic)
    assert b'<channel><atom:link xmlns:atom="http://www.w3.org/2005/Atom" rel="hub" ' \
           b'href="http://h/hub"/>' in rss and b'rel="self" href="http://h/feed/0.xml"' in rss
    atom = announce(b"<feed><id>x</id><entry/></feed>", "atom", hub, topic)
    assert atom.index(b'rel="hub"') < atom.index(b"<entry/>")
    assert announce(b'{"items": []}', "json", hub, topic).startswith(
        b'{"hubs": [{"type": "WebSub", "url": "http://h/hub"}], "items"')


@pytest_twisted.ensureDeferred
async def test_subscription_verification_and_signed_deliveries_on_the_virtual_clock():
    clock = SimulatedClock(start=START)
    server = start_server("news-mix", n=6, speed=1.0, seed=2, clock=clock,
                          hub="share=1,loss=0,delay_max=60,down_at=36000", hub_tick=3600)
    sub, refuser = Subscriber(), Subscriber(echo=False)
    ports = [reactor.listenTCP(0, Site(r), interface="127.0.0.1") for r in (sub, refuser)]
    cb = [f"http://127.0.0.1:{p.getHost().port}/cb" for p in ports]
    hub = server.resource.hub
    try:
        response, body = await get(f"{server.url}/feed/0.xml")
        link = response.headers.getRawHeaders(b"link")[0].decode()
        topic = f"{server.url}/feed/0.xml"
        assert link == f'<{server.url}/hub>; rel="hub", <{topic}>; rel="self"'
        assert b'rel="hub"' in body
        # bad requests
        for form in ({"hub.mode": "subscribe", "hub.topic": "http://elsewhere/",
                      "hub.callback": cb[0]},
                     {"hub.mode": "publish", "hub.topic": topic, "hub.callback": cb[0]},
                     {"hub.mode": "subscribe", "hub.topic": topic, "hub.callback": "x"},
                     {"hub.mode": "subscribe", "hub.topic": topic, "hub.callback": cb[0],
                      "hub.secret": "s" * 200}):
            assert (await post(f"{server.url}/hub", form))[0] == 400
        # a callback that does not answer the challenge is not subscribed
        assert (await post(f"{server.url}/hub", {
            "hub.mode": "subscribe", "hub.topic": topic, "hub.callback": cb[1]}))[0] == 202
        await refuser.verified
        code, _ = await post(f"{server.url}/hub", {
            "hub.mode": "subscribe", "hub.topic": topic, "hub.callback": cb[0],
            "hub.secret": "k3y", "hub.lease_seconds": "999999999"})
        assert code == 202
        args = await sub.verified
        assert (args["hub.mode"], args["hub.topic"]) == ("subscribe", topic)
        assert args["hub.lease_seconds"] == "864000"              # the hub's longest
        while hub.in_flight:                   # the hub reads the verification's answer
            await deferLater(reactor, 0, lambda: None)
        assert hub.totals()["subscribed"] == 1 and hub.totals()["verify_failed"] == 1
        # the next entry of source 0 is delivered at its publication + delay, not before
        nxt = server.web.next_publication(0, server.clock.now())
        clock.advance_to(server.clock.real(nxt) - 1)
        hub.tick()
        assert sub.deliveries == [] and hub.horizon() == pytest.approx(
            server.clock.real(nxt), abs=1e-3)
        clock.advance_to(server.clock.real(nxt) + 61)
        sub.delivered = defer.Deferred()
        hub.tick()
        await sub.delivered
        body, headers = sub.deliveries[0]
        digest = hmac.new(b"k3y", body, hashlib.sha256).hexdigest()
        assert headers["x-hub-signature"] == f"sha256={digest}"
        assert headers["content-type"] == "application/rss+xml"
        assert body.count(b"<item>") == 1 and b'rel="hub"' in body
        # for the benchmarks: the entry delivered and the delay drawn for it (seconds)
        assert f"<guid isPermaLink=\"false\">urn:sim:{headers['x-sim-entry']}</guid>" \
            in body.decode()
        assert headers["x-sim-entry"].startswith("0:")
        assert 0 < float(headers["x-sim-delay"]) <= 60
        # the hub down: no more subscriptions
        clock.advance_to(server.clock.real(10.0) + 1)
        assert (await post(f"{server.url}/hub", {
            "hub.mode": "subscribe", "hub.topic": topic, "hub.callback": cb[0]}))[0] == 503
    finally:
        for p in ports:
            await p.stopListening()
        await server.stop()
