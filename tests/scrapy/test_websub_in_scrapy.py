"""WebSub in a Scrapy crawl against ``sim.serve``'s hub (``sim.web.websub_hub``), on a simulated
clock shared by the crawl and the server: subscription through the hub, deliveries through the
parse pool and the entry memory to the spider, the policy learning to poll the pushing sources
less, duplicated deliveries emitted once, bad signatures counted and dropped, leases renewed,
and the subscriptions restored after a restart."""

from __future__ import annotations

import socket
import sqlite3
from collections import Counter, defaultdict

import numpy as np
import pytest_twisted
from scrapy import signals

from tests.scrapy.conftest import START, VirtualWeb, make_crawler, run, whittle

WEBSUB = "scrapy_whittle.scrapy.websub.WebSubSubscriber"
N = 20
HOUR = 3600.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def websub_settings(port: int) -> dict:
    return {"EXTENSIONS": {WEBSUB: 500},
            "WHITTLE_WEBSUB_CALLBACK": f"http://127.0.0.1:{port}/websub",
            "WHITTLE_WEBSUB_LISTEN": f"127.0.0.1:{port}"}


class Crawl:
    """One crawl of ``web``: its stats, the items by entry, the polls of each source by hour
    of the simulated clock, the items each source's pushes and polls brought."""

    def __init__(self) -> None:
        self.items: Counter = Counter()
        self.polls: dict[str, list[float]] = defaultdict(list)
        self.by_push: Counter = Counter()
        self.by_poll: Counter = Counter()
        self.delays: dict[str, list[float]] = defaultdict(list)    # per source path
        self.stats: dict = {}

    async def run(self, web: VirtualWeb, *, epochs: int, port: int | None = None,
                  **settings) -> dict:
        extra = websub_settings(port) if port is not None else {}
        crawler = make_crawler(WHITTLE_SOURCES=web.feeds(N), WHITTLE_CLOCK=web.clock,
                               WHITTLE_POLICY="whittle", WHITTLE_BUDGET=4,
                               WHITTLE_PERIOD=HOUR, WHITTLE_MAX_EPOCHS=epochs,
                               **extra, **settings)

        def scraped(item, response, spider):
            self.items[item["entry_id"]] += 1
            pushed = "whittle-push" in response.flags
            (self.by_push if pushed else self.by_poll)[path(item["source"])] += 1
            if item["delay"] is not None:
                self.delays[path(item["source"])].append(item["delay"])

        def received(response, request, spider):
            if "whittle_crawl" in request.meta:
                self.polls[path(response.url)].append(web.clock.now())

        crawler.signals.connect(scraped, signal=signals.item_scraped, weak=False)
        crawler.signals.connect(received, signal=signals.response_received, weak=False)
        self.stats = whittle(await run(crawler))
        return self.stats


def stored_keys(jobdir: str) -> set[tuple[str, str]]:
    """(callback key, secret) of the subscriptions in the crawl's state file (their state
    may be "pending": a renewal asked for when the crawl stopped)."""
    db = sqlite3.connect(f"{jobdir}/whittle.sqlite")
    try:
        return set(db.execute("SELECT key, secret FROM websub").fetchall())
    finally:
        db.close()


def path(url: str) -> str:
    """A feed's path: the same source on two servers (two ports)."""
    return "/" + url.split("/", 3)[3]


def pushing_paths(web: VirtualWeb) -> set[str]:
    pushing = web.server.resource.hub.pushing
    return {path(url) for i, url in enumerate(web.feeds(N)) if pushing[i]}


@pytest_twisted.ensureDeferred
async def test_pushed_entries_arrive_by_push_and_pushing_sources_are_polled_less():
    """A hub that loses 10% of the deliveries and delays the rest by up to 5 minutes: the
    pushing sources' entries come mostly by push, and once the policy has learned how far
    their pushes go, they are polled less than without the hub, the others more; their
    entries are found sooner, and the crawl captures more utility than without the hub."""
    hub = "loss=0.1,delay=uniform,delay_max=300"
    epochs, learned = 48, 16
    with_hub, without = Crawl(), Crawl()
    web = VirtualWeb(n=N, seed=5, hub=hub, hub_tick=0.005)
    try:
        w = await with_hub.run(web, epochs=epochs, port=free_port())
        totals = web.server.resource.hub.totals()
    finally:
        await web.stop()
    plain = VirtualWeb(n=N, seed=5)
    try:
        w0 = await without.run(plain, epochs=epochs)
    finally:
        await plain.stop()
    pushers = pushing_paths(web)
    assert len(pushers) == N // 2 and totals["subscribed"] == len(pushers)
    assert not [k for k in w if k.startswith("errors/")], w
    # every pushing source subscribed; its entries came by push more than by poll, and no
    # other source's entry came by push
    assert w["websub/verified"] == len(pushers)
    assert set(with_hub.by_push) <= pushers
    assert sum(with_hub.by_push[u] for u in pushers) > sum(with_hub.by_poll[u] for u in pushers)
    assert max(with_hub.items.values()) == 1
    assert w["push/new_items"] == sum(with_hub.by_push.values())

    def polls_after(crawl: Crawl, urls) -> int:
        since = START + learned * HOUR
        return sum(sum(t >= since for t in crawl.polls[u]) for u in urls)

    def median_delay(crawl: Crawl) -> float:
        return float(np.median([d for u in pushers for d in crawl.delays[u]]))

    others = {path(u) for u in web.feeds(N)} - pushers
    utility = w["utility"] + w["push/utility"]
    print({"pushing with hub": polls_after(with_hub, pushers),
           "pushing without": polls_after(without, pushers),
           "others with hub": polls_after(with_hub, others),
           "others without": polls_after(without, others),
           "pushing sources' median delay (s) with hub": median_delay(with_hub),
           "pushing sources' median delay (s) without": median_delay(without),
           "utility with hub": utility, "utility without": w0["utility"]})
    assert polls_after(with_hub, pushers) < polls_after(without, pushers)
    assert polls_after(with_hub, others) > polls_after(without, others)
    assert median_delay(with_hub) < median_delay(without)
    assert utility >= w0["utility"]


@pytest_twisted.ensureDeferred
async def test_duplicated_spurious_and_badly_signed_deliveries():
    """A hub that sends a third of its deliveries twice, pings with nothing new and signs a
    fifth of them with a wrong key: no entry is emitted twice, every bad signature is counted
    under ``whittle/errors/push_signature`` and its delivery dropped, every good one taken but
    the same delivery again within the window (``whittle/push/repeated``)."""
    crawl = Crawl()
    web = VirtualWeb(n=N, seed=7, hub="loss=0,duplicate=0.3,spurious=0.0005,bad_signature=0.2",
                     hub_tick=0.005)
    try:
        w = await crawl.run(web, epochs=24, port=free_port())
        hub = web.server.resource.hub.totals()
    finally:
        await web.stop()
    assert hub["duplicates"] > 0 and hub["spurious"] > 0 and hub["bad_signatures"] > 0, hub
    assert max(crawl.items.values()) == 1                    # nothing emitted twice
    assert w["errors/push_signature"] == hub["bad_signatures"]
    # every good delivery taken, or acknowledged as a repeat of one received within the
    # window: the hub's spurious pings of a source are one document, the same body again
    assert w["websub/deliveries"] == w["push/deliveries"]
    assert w["websub/deliveries"] + w["push/repeated"] == \
        hub["delivered"] - hub["bad_signatures"]
    assert w["push/repeated"] > 0
    # a duplicate or a spurious ping brings nothing new, or is a repeat (a duplicate may also
    # come after a poll found the entry, and the first delivery may have been the badly
    # signed one)
    assert w["push/empty"] + w["push/repeated"] >= hub["spurious"] - hub["bad_signatures"]
    assert w["push/new_items"] == sum(crawl.by_push.values()) > 0
    assert not [k for k in w if k.startswith("errors/") and k != "errors/push_signature"], w


@pytest_twisted.ensureDeferred
async def test_subscriptions_are_renewed_across_leases_and_restored_after_a_restart(tmp_path):
    """Leases of two hours on a crawl of 12 hours, stopped after 6 and started again with the
    same JOBDIR: every subscription is renewed before its lease ends (the hub lets none
    expire), and the second run goes on with the subscriptions of the first (no new secret,
    deliveries taken at once)."""
    port = free_port()
    web = VirtualWeb(n=N, seed=9, hub=f"loss=0,lease_max={2 * HOUR:g}", hub_tick=0.005)
    jobdir = str(tmp_path / "job")
    first, second = Crawl(), Crawl()
    try:
        w1 = await first.run(web, epochs=6, port=port, JOBDIR=jobdir)
        hub1 = dict(web.server.resource.hub.totals())
        keys1 = stored_keys(jobdir)
        w2 = await second.run(web, epochs=6, port=port, JOBDIR=jobdir)
        hub2 = web.server.resource.hub.totals()
        keys2 = stored_keys(jobdir)
    finally:
        await web.stop()
    pushers = len(pushing_paths(web))
    assert len(keys1) == pushers and keys2 == keys1          # the same callbacks and secrets
    assert hub1["subscribed"] >= 2 * pushers            # subscribed, then renewed
    assert w1["websub/verified"] == hub1["subscribed"]
    assert hub2["expired"] == 0 and hub2["active_subscriptions"] == pushers
    # the second run subscribed nothing anew: it renewed the restored subscriptions (the
    # callbacks and secrets are the first run's, above); a renewal sent just before the stop
    # may still wait for its verification, at most one per subscription
    assert w2["websub/verified"] == hub2["subscribed"] - hub1["subscribed"] > 0
    assert 0 <= w2.get("websub/subscribe_requests", 0) - w2["websub/verified"] <= pushers
    assert w2["push/new_items"] > 0 and w2.get("errors/push_unknown_callback", 0) == 0
    assert max((first.items + second.items).values()) == 1


@pytest_twisted.ensureDeferred
async def test_a_hub_gone_down_sends_its_sources_back_to_polling():
    """The hub delivers for 20 hours, then nothing: in the hours after the policy has seen
    it fall silent the pushing sources are polled more than while it pushed."""
    crawl = Crawl()
    down = 20
    web = VirtualWeb(n=N, seed=5, hub=f"loss=0.1,delay=uniform,delay_max=300,"
                     f"down_at={down * HOUR:g}", hub_tick=0.005)
    try:
        w = await crawl.run(web, epochs=48, port=free_port())
    finally:
        await web.stop()
    pushers = pushing_paths(web)

    def polls(first: int, last: int) -> int:
        lo, hi = START + first * HOUR, START + last * HOUR
        return sum(sum(lo <= t < hi for t in crawl.polls[u]) for u in pushers)

    print({"pushing, hours 8-20": polls(8, down), "hours 36-48": polls(36, 48)})
    assert w["push/new_items"] > 0
    assert polls(36, 48) > polls(8, down)


@pytest_twisted.ensureDeferred
async def test_a_source_that_leaves_the_list_is_unsubscribed(tmp_path):
    """The source list (a file read every hour) loses a pushing source at hour 6: its
    subscription is undone through the hub (verified unsubscription), the others stay, and
    the budget pays for polls alone."""
    web = VirtualWeb(n=N, seed=9, hub="loss=0", hub_tick=0.005)
    listing = tmp_path / "feeds.txt"
    feeds = web.feeds(N)
    listing.write_text("\n".join(feeds) + "\n")
    pushers = sorted(pushing_paths(web))
    gone = next(u for u in feeds if path(u) == pushers[0])
    changed, polls = [], []

    def received(response, request, spider):
        if "whittle_crawl" in request.meta:
            polls.append(response.url)
        if not changed and web.clock.now() >= START + 6 * HOUR:
            listing.write_text("\n".join(u for u in feeds if u != gone) + "\n")
            changed.append(web.clock.now())

    try:
        crawler = make_crawler(WHITTLE_SOURCES=str(listing), WHITTLE_SOURCES_REFRESH=HOUR,
                               WHITTLE_CLOCK=web.clock, WHITTLE_POLICY="whittle",
                               WHITTLE_BUDGET=4, WHITTLE_PERIOD=HOUR, WHITTLE_MAX_EPOCHS=12,
                               **websub_settings(free_port()))
        crawler.signals.connect(received, signal=signals.response_received, weak=False)
        w = whittle(await run(crawler))
        hub = web.server.resource.hub.totals()
    finally:
        await web.stop()
    assert changed and w["sources/left"] == 1
    assert w["websub/unsubscribe_requests"] == w["websub/unsubscribed"] == 1
    assert hub["unsubscribed"] == 1
    assert hub["active_subscriptions"] == len(pushers) - 1
    assert w["crawls"] == len(polls)          # hub requests and deliveries cost nothing


@pytest_twisted.ensureDeferred
async def test_sources_of_every_kind_push():
    """``--kinds mix``: RSS, Atom, JSON Feed and news sitemaps (some gzip, behind an index)
    name the hub (a sitemap in its Link header only): every kind is subscribed to and its
    entries pushed."""
    web = VirtualWeb(n=32, seed=3, kinds="mix", hub="share=1,loss=0", hub_tick=0.005)
    kinds = web.server.resource.kinds
    listed = [url for _name, url in kinds.listed(web.url)]
    pushed: Counter = Counter()
    try:
        crawler = make_crawler(WHITTLE_SOURCES=listed, WHITTLE_CLOCK=web.clock,
                               WHITTLE_POLICY="whittle", WHITTLE_BUDGET=8,
                               WHITTLE_PERIOD=HOUR, WHITTLE_MAX_EPOCHS=12,
                               **websub_settings(free_port()))

        def scraped(item, response, spider):
            if "whittle-push" in response.flags:
                i = int(item["source"].rsplit("/", 1)[1].split(".")[0])
                pushed["indexed" if kinds.indexed(i) else kinds.kind(i)] += 1

        crawler.signals.connect(scraped, signal=signals.item_scraped, weak=False)
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    assert set(pushed) == {"rss", "atom", "json", "sitemap", "indexed"}, pushed
    assert not [k for k in w if k.startswith("errors/")], w


@pytest_twisted.ensureDeferred
async def test_a_callback_address_in_use_is_an_error_and_the_crawl_polls_on(caplog):
    web = VirtualWeb(n=4, seed=1, hub="share=1", hub_tick=0.005)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        crawler = make_crawler(WHITTLE_SOURCES=web.feeds(4), WHITTLE_CLOCK=web.clock,
                               WHITTLE_BUDGET=2, WHITTLE_PERIOD=HOUR, WHITTLE_MAX_EPOCHS=3,
                               **websub_settings(taken.getsockname()[1]))
        w = whittle(await run(crawler))
    finally:
        taken.close()
        await web.stop()
    assert w["errors/websub_listen"] == 1 and w["crawls"] == 6
    assert "websub/subscribe_requests" not in w
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "WHITTLE_WEBSUB_LISTEN" in errors[0]
