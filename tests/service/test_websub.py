"""The WebSub subscriber's Scrapy-free part (:mod:`scrapy_whittle.service.sources.websub`):
signatures, hub discovery, lease arithmetic, the subscriptions' life, and their place in the crawl's
state."""

from __future__ import annotations

import hashlib
import hmac
import math

import pytest

from scrapy_whittle.service.clock import HOLD_POLL, SimulatedClock
from scrapy_whittle.service.config import InvalidSetting, WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.sources.websub import (
    ACTIVE,
    LEAVING,
    PENDING,
    RETRY,
    RecentDeliveries,
    Subscriptions,
    check_signature,
    delivery_id,
    discover,
    renew_at,
    retry_wait,
    sign,
)
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore

START = 1_700_000_000.0
HUB, TOPIC = "https://hub.example/", "https://news.example/feed.xml"


# -- signatures ----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["sha1", "sha256", "sha384", "sha512"])
def test_a_signature_of_every_method_of_the_spec_is_accepted(method):
    body, secret = b"<feed>...</feed>", "s3cret"
    digest = hmac.new(secret.encode(), body, getattr(hashlib, method)).hexdigest()
    assert check_signature(secret, body, f"{method}={digest}")
    assert check_signature(secret, body, f"{method.upper()}={digest.upper()}")


def test_a_wrong_missing_or_unknown_signature_is_refused():
    body, secret = b"<feed/>", "s3cret"
    good = sign(secret, body)
    assert good.startswith("sha256=") and check_signature(secret, body, good)
    assert not check_signature(secret, body + b" ", good)             # another body
    assert not check_signature("other", body, good)                   # another secret
    assert not check_signature(secret, body, None)
    assert not check_signature(secret, body, "")
    assert not check_signature(secret, body, good.split("=")[1])      # no method
    assert not check_signature(secret, body, "md5=" + good.split("=")[1])


# -- discovery -----------------------------------------------------------------------------------
def test_the_hub_is_found_in_the_link_header_first_then_in_the_body():
    url = "https://news.example/rss"
    header = [f'<{HUB}>; rel="hub", <{TOPIC}>; rel="self"']
    assert discover(url, b"<rss/>", header) == (HUB, TOPIC)
    atom = (b'<feed xmlns="http://www.w3.org/2005/Atom"><link rel="self" href="/atom"/>'
            b"<link href='https://hub.example/a' rel='hub'/></feed>")
    assert discover(url, atom) == ("https://hub.example/a", "https://news.example/atom")
    rss = (b'<rss><channel><atom:link xmlns:atom="http://www.w3.org/2005/Atom" rel="hub" '
           b'href="https://hub.example/r"/></channel></rss>')
    assert discover(url, rss) == ("https://hub.example/r", url)       # no self: the URL
    json_feed = (b'{"version": "https://jsonfeed.org/version/1.1", "feed_url": "' +
                 TOPIC.encode() + b'", "hubs": [{"type": "rssCloud", "url": "x"}, '
                 b'{"type": "WebSub", "url": "https://hub.example/j"}], "items": []}')
    assert discover(url, json_feed) == ("https://hub.example/j", TOPIC)
    assert discover(url, b"<rss><channel><link>https://x/</link></channel></rss>") is None
    assert discover(url, b'{"hubs": "nonsense"}') is None
    assert discover(url, b"<feed><link rel='hub' href='mailto:x@y'/></feed>") is None


# -- leases and the subscriptions' life -----------------------------------------------------
def test_lease_arithmetic():
    assert renew_at(1000.0, 3600.0) == 1000.0 + 3240.0
    assert retry_wait(1) == RETRY and retry_wait(2) == 2 * RETRY
    assert retry_wait(100) == 86400.0


def subscribed(lease: float = 7200.0) -> tuple[Subscriptions, str]:
    subs = Subscriptions("https://me.example/websub/", 864000.0)
    assert subs.discovered(3, HUB, TOPIC, START)
    (request,) = subs.due(START)
    assert request.mode == "subscribe" and request.hub == HUB
    form = request.form
    assert form["hub.callback"] == f"https://me.example/websub/{request.key}"
    assert form["hub.topic"] == TOPIC and form["hub.lease_seconds"] == "864000"
    assert len(bytes.fromhex(form["hub.secret"])) == 32
    assert subs.by_key[request.key].state == PENDING
    assert subs.verify(request.key, "subscribe", TOPIC, f"{lease:g}", START + 5)
    return subs, request.key


def test_a_subscription_is_verified_only_for_what_was_asked_and_renewed_before_it_ends():
    subs = Subscriptions("https://me.example/websub", 864000.0)
    subs.discovered(3, HUB, TOPIC, START)
    (request,) = subs.due(START)
    key = request.key
    assert not subs.verify("other-key", "subscribe", TOPIC, "60", START)
    assert not subs.verify(key, "subscribe", "https://evil.example/", "60", START)
    assert not subs.verify(key, "unsubscribe", TOPIC, None, START)    # not asked for
    subs, key = subscribed(lease=7200.0)
    sub = subs.by_key[key]
    assert (sub.state, sub.expires_at) == (ACTIVE, START + 5 + 7200.0)
    assert not subs.discovered(3, HUB, TOPIC, START + 10)            # known: nothing new
    assert subs.next_due() == renew_at(START + 5, 7200.0) < sub.expires_at
    assert subs.due(renew_at(START + 5, 7200.0) - 1) == []
    (renewal,) = subs.due(renew_at(START + 5, 7200.0))
    assert renewal.key == key and renewal.form["hub.secret"] == sub.secret
    assert subs.verify(key, "subscribe", TOPIC, "7200", START + 7000)
    assert sub.expires_at == START + 7000 + 7200.0


def test_an_unverified_or_refused_request_is_sent_again_after_a_back_off():
    subs = Subscriptions("https://me.example/websub", 3600.0)
    subs.discovered(0, HUB, TOPIC, START)
    (request,) = subs.due(START)
    subs.failed(request.key, START + 1)                  # the hub answered 5xx
    assert subs.due(START + 2) == [] and subs.next_due() == START + 1 + RETRY
    assert len(subs.due(START + 1 + RETRY)) == 1         # asked again
    assert subs.due(START + 1 + RETRY + 1) == []         # pending: verification awaited
    # never verified: asked again, after a longer wait
    assert len(subs.due(START + 1 + RETRY + retry_wait(2))) == 1
    assert subs.denied(request.key, TOPIC, START + 5000)
    assert subs.due(START + 5001) == []


def test_a_source_that_leaves_or_names_another_hub_is_unsubscribed():
    subs, key = subscribed()
    subs.source_left(3, START + 100)
    assert subs.by_key[key].state == LEAVING and 3 not in subs.by_source
    (request,) = subs.due(START + 100)
    assert request.mode == "unsubscribe" and "hub.secret" not in request.form
    assert subs.verify(key, "unsubscribe", TOPIC, None, START + 101)
    assert subs.by_key == {}
    # another hub: the old subscription is undone, a new one asked for
    subs, key = subscribed()
    assert subs.discovered(3, "https://hub2.example/", TOPIC, START + 100)
    modes = sorted((r.mode, r.hub) for r in subs.due(START + 100))
    assert modes == [("subscribe", "https://hub2.example/"), ("unsubscribe", HUB)]


def test_deliveries_are_told_apart():
    subs, key = subscribed()
    secret = subs.by_key[key].secret
    body = b"<rss/>"
    assert subs.delivery(key, body, sign(secret, body)) is subs.by_key[key]
    assert subs.delivery(key, body, sign(secret, body, "sha1")) is subs.by_key[key]
    assert subs.delivery(key, body, sign("wrong", body)) == "push_signature"
    assert subs.delivery(key, body, None) == "push_signature"
    assert subs.delivery("nobody", body, sign(secret, body)) == "push_unknown_callback"


def test_a_delivery_received_again_within_the_window_is_a_repeat():
    recent = RecentDeliveries(600.0)
    one, other = delivery_id("k1", "sha256=AB"), delivery_id("k1", "sha256=cd")
    assert not recent.repeated(one, START)
    assert recent.repeated(one, START)                      # a copy at the same time
    assert not recent.repeated(other, START + 1)            # another body
    assert recent.repeated(one, START + 599.9)              # a retry within the window
    # the window runs from the first receipt: repeats do not extend it
    assert not recent.repeated(one, START + 600.0)
    assert recent.repeated(one, START + 700.0)
    assert not recent.repeated(other, START + 601.0)
    # what left the window is forgotten: one entry per delivery of the last window
    recent.repeated(delivery_id("k2", "sha256=ef"), START + 1300.0)
    assert len(recent) == 1
    with pytest.raises(ValueError, match="window"):
        RecentDeliveries(0.0)


def test_a_delivery_s_identity_is_its_callback_and_signature():
    sig = "sha256=" + "ab" * 32
    assert delivery_id("k", sig) == delivery_id("k", f" SHA256={sig[7:].upper()} ")
    assert delivery_id("k", sig) != delivery_id("k2", sig)
    assert delivery_id("k", sig) != delivery_id("k", "sha1=" + "ab" * 32)
    assert len(delivery_id("k", sig)) == 32


def test_the_subscriptions_round_trip_through_their_rows():
    subs, key = subscribed()
    subs.discovered(4, HUB, "https://other.example/feed", START)   # wanted, never sent
    again = Subscriptions(subs.callback, subs.lease)
    again.load(subs.rows())
    assert again.rows() == subs.rows() and not again.changed
    assert again.by_key[key] == subs.by_key[key]
    assert math.isinf(again.by_source[4].expires_at)
    assert set(again.by_source) == {3, 4}


# -- in the re-crawl service ---------------------------------------------------------------------
def service(tmp_path, urls) -> RecrawlService:
    config = WhittleConfig.from_settings({
        "WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 600.0,
        "WHITTLE_WEBSUB_CALLBACK": "https://me.example/websub",
        "WHITTLE_WEBSUB_LISTEN": "127.0.0.1:0"})
    svc = RecrawlService(config, clock=SimulatedClock(start=START),
                         store=SqliteStateStore(tmp_path / FILE_NAME))
    svc.open([SourceSpec(url=u) for u in urls])
    return svc


def test_the_service_checkpoints_the_subscriptions_and_unsubscribes_a_source_that_leaves(
        tmp_path):
    urls = ["https://a.example/feed", "https://b.example/feed"]
    svc = service(tmp_path, urls)
    svc.websub.discovered(1, HUB, urls[1], START)
    (request,) = svc.websub.due(START)
    assert svc.websub.verify(request.key, "subscribe", urls[1], "3600", START)
    svc.close()
    svc = service(tmp_path, urls)
    assert svc.websub.rows() and svc.websub.by_source[1].state == ACTIVE
    svc.roster.sync_sources([SourceSpec(url=urls[0])])          # b leaves the list
    (request,) = svc.websub.due(START + 1)
    assert request.mode == "unsubscribe" and request.form["hub.topic"] == urls[1]
    svc.close()


def test_websub_settings_are_validated_together():
    base = {"WHITTLE_BUDGET": 1}
    with pytest.raises(InvalidSetting, match="WHITTLE_WEBSUB_LISTEN as well"):
        WhittleConfig.from_settings({**base, "WHITTLE_WEBSUB_CALLBACK": "https://me/x"})
    with pytest.raises(InvalidSetting, match="WHITTLE_WEBSUB_CALLBACK as well"):
        WhittleConfig.from_settings({**base, "WHITTLE_WEBSUB_LISTEN": "0.0.0.0:80"})
    for bad in ("ftp://me/x", "https://me/x?a=1", "me/x", 5):
        with pytest.raises(InvalidSetting, match="WHITTLE_WEBSUB_CALLBACK"):
            WhittleConfig.from_settings({**base, "WHITTLE_WEBSUB_CALLBACK": bad,
                                         "WHITTLE_WEBSUB_LISTEN": "127.0.0.1:8080"})
    for bad in ("8080", "host:", "host:99999", "h:x", 8080):
        with pytest.raises(InvalidSetting, match="WHITTLE_WEBSUB_LISTEN"):
            WhittleConfig.from_settings({**base, "WHITTLE_WEBSUB_CALLBACK": "https://me/x",
                                         "WHITTLE_WEBSUB_LISTEN": bad})
    clustered = WhittleConfig.from_settings({**base, "WHITTLE_WEBSUB_CALLBACK": "https://me/x",
                                             "WHITTLE_WEBSUB_LISTEN": "127.0.0.1:8080",
                                             "WHITTLE_REDIS_URL": "redis://localhost"})
    assert clustered.websub_callback == "https://me/x"       # a cluster serves it too
    config = WhittleConfig.from_settings({**base, "WHITTLE_WEBSUB_CALLBACK": "https://me/x/",
                                          "WHITTLE_WEBSUB_LISTEN": "[::1]:8080"})
    assert config.websub_callback == "https://me/x" and config.websub_listen == ("::1", 8080)
    assert WhittleConfig.from_settings(base).websub_callback is None


def test_an_idle_jump_of_the_simulated_clock_stops_at_an_actor_s_time():
    clock = SimulatedClock(start=100.0)
    due = [150.0]
    clock.add_horizon(lambda: due[0])
    assert clock.wait(200.0, idle=True) == 0.0 and clock.now() == 150.0
    assert clock.wait(200.0, idle=True) == HOLD_POLL and clock.now() == 150.0  # it acts first
    due[0] = math.inf                                    # it acted
    assert clock.wait(200.0, idle=True) == 0.0 and clock.now() == 200.0
    assert clock.wait(300.0, idle=False) is None and clock.now() == 200.0


def test_discovery_reads_only_the_top_of_the_body():
    from scrapy_whittle.service.sources.websub import DISCOVERY_BYTES

    link = b'<atom:link rel="hub" href="https://hub.example/"/>'
    assert discover("https://n.example/f", b"<rss><channel>" + link)
    late = b"<rss><channel>" + b" " * DISCOVERY_BYTES + link
    assert discover("https://n.example/f", late) is None


def test_a_subscription_s_row_is_in_the_order_of_the_store_s_columns():
    from dataclasses import fields

    from scrapy_whittle.service.sources.websub import Subscription
    from scrapy_whittle.service.state.store import WEBSUB_COLUMNS

    assert tuple(f.name for f in fields(Subscription)) == WEBSUB_COLUMNS
