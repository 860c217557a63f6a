"""WebSub in a cluster crawl, its nodes stepped by hand on a real redis-server (and a real Redis
Cluster): the planner owns the subscriptions and keeps them in Redis under the crawl's keys,
one request per topic whatever the number of processes; any process verifies a hub's intent
from Redis and takes a delivery checked against the secret there; a delivery sent to two
processes, or racing a poll, brings its entries once; its learning reaches the planner on the
results stream, at no budget, once however many processes received it; a new planner goes on
with the same callbacks and secrets."""

from __future__ import annotations

from types import SimpleNamespace

from scrapy_whittle.cluster.tasks import PUSH, read_result
from scrapy_whittle.cluster.websub import PlannerWebSub, decode
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.scrapy.websub import WebSubSubscriber, subscriptions_of
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.sources.websub import (
    ACTIVE,
    DENIED,
    LEAVING,
    PENDING,
    REPEAT_WINDOW,
    Subscriptions,
    delivery_id,
    sign,
)
from tests.cluster.harness import SETTINGS, Cluster, entries, on_asyncio

URLS = [f"https://h{i}.example/feed.xml" for i in range(4)]
HUB = "https://hub.example/"
WEBSUB = {**SETTINGS, "WHITTLE_WEBSUB_CALLBACK": "https://crawler.example/websub",
          "WHITTLE_WEBSUB_LISTEN": "127.0.0.1:8080"}


class Engine:
    """What the callback hands the engine: the requests of the deliveries it took."""

    def __init__(self) -> None:
        self.requests = []
        self.spider = object()

    def crawl(self, request) -> None:
        self.requests.append(request)


def callback_of(node) -> WebSubSubscriber:
    """The WebSub extension of ``node``'s process, its callback served (no port opened)."""
    ext = WebSubSubscriber(SimpleNamespace(engine=Engine()), ("127.0.0.1", 0), 1 << 20)
    ext.subscriptions = subscriptions_of(ext, node)
    ext.stats = node.stats
    node.on_hub_requests = ext.send
    return ext


async def fetch(cluster: Cluster, planner, worker, shown, hub: str | None = HUB):
    """``worker`` fetches the crawls the planner hands out; each feed shows ``shown`` and
    names ``hub`` (its own topic); the planner learns the results."""
    await planner.planner.step()
    crawls = await cluster.crawls(worker)
    for crawl in crawls.values():
        if hub is not None:
            worker.websub.discovered(crawl.source, hub, crawl.url, cluster.clock.now())
        await worker.feed_fetched(crawl, shown)
    await planner.planner.step()
    return crawls


async def subscribed(cluster: Cluster, planner, worker, ext) -> list:
    """Until every source is subscribed: the requests the planner's process sent."""
    for _ in range(2):
        await fetch(cluster, planner, worker, entries("old"))
        cluster.advance()
    await planner.planner.step()
    return list(ext.crawler.engine.requests)


def form(request) -> dict:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(request.body.decode()))


@on_asyncio
async def test_one_subscription_per_topic_verified_by_any_process_kept_in_redis(any_redis):
    cluster = Cluster(any_redis.url, WEBSUB)
    try:
        a = await cluster.node(URLS)
        b = await cluster.node(URLS)
        ext_a, ext_b = callback_of(a), callback_of(b)
        await a.planner.step()
        assert a.planner.leader and not b.planner.leader
        await subscribed(cluster, a, b, ext_a)
        sent = ext_a.crawler.engine.requests
        await b.planner.step()                    # not planning: it asks no hub anything
        assert ext_b.crawler.engine.requests == []
        # one subscription per topic, with a callback and secret of its own (a request not
        # verified within ten minutes is asked again, the same)
        asked = list({form(r)["hub.topic"]: form(r) for r in sent}.values())
        assert sorted(f["hub.topic"] for f in asked) == sorted(URLS)
        assert {(f["hub.topic"], f["hub.callback"], f["hub.secret"], f["hub.mode"], r.url)
                for r in sent for f in [form(r)]} == \
            {(f["hub.topic"], f["hub.callback"], f["hub.secret"], "subscribe", HUB)
             for f in asked}
        assert len({f["hub.callback"] for f in asked}) == len({f["hub.secret"] for f in asked}) \
            == len(URLS)
        # in Redis before the hub verifies: pending, under the crawl's keys
        client = any_redis.client()
        stored = {k.decode(): decode(v) for k, v in
                  client.hgetall(any_redis.keys("test").websub).items()}
        assert {s.state for s, _url, _w in stored.values()} == {PENDING}
        assert {(s.topic, s.secret) for s, _u, _w in stored.values()} == \
            {(f["hub.topic"], f["hub.secret"]) for f in asked}
        # the hub's verification reaches the worker, not the planner: answered from Redis
        for f in asked:
            key = f["hub.callback"].rsplit("/", 1)[1]
            status, body = await ext_b.verification(key, {
                "hub.mode": "subscribe", "hub.topic": f["hub.topic"],
                "hub.challenge": "c-" + key, "hub.lease_seconds": "7200"})
            assert (status, body) == (200, ("c-" + key).encode())
        wrong = await ext_b.verification(key, {"hub.mode": "subscribe", "hub.topic": "x",
                                               "hub.challenge": "c"})
        assert wrong == (404, b"")
        assert b.stats.get("websub/verified") == len(URLS)
        assert b.stats.get("websub/refused_verifications") == 1
        await a.planner.step()                   # the planner starts the leases
        stored = {k.decode(): decode(v)[0] for k, v in
                  client.hgetall(any_redis.keys("test").websub).items()}
        assert {s.state for s in stored.values()} == {ACTIVE}
        assert {s.lease_seconds for s in stored.values()} == {7200.0}
        # a new planner (a's resigned) goes on with them: nothing asked of the hub
        c = await cluster.node(URLS)
        ext_c = callback_of(c)
        await a.planner.resign()
        await c.planner.step()
        assert c.planner.leader
        service = c.planner.service
        assert {s.key: (s.secret, s.state) for s in service.websub.by_key.values()} == \
            {k: (s.secret, s.state) for k, s in stored.items()}
        cluster.advance()
        await fetch(cluster, c, b, entries("old"))
        await c.planner.step()
        assert ext_c.crawler.engine.requests == []
        # it renews them when a tenth of the lease is left: the same callbacks and secrets
        cluster.clock.advance_to(cluster.clock.now() + 0.9 * 7200)
        await c.planner.step()
        renewed = [form(r) for r in ext_c.crawler.engine.requests]
        assert sorted((f["hub.callback"].rsplit("/", 1)[1], f["hub.secret"])
                      for f in renewed) == sorted((k, s.secret) for k, s in stored.items())
        stored = {k.decode(): decode(v)[0] for k, v in
                  client.hgetall(any_redis.keys("test").websub).items()}
        assert {s.state for s in stored.values()} == {PENDING}
        client.close()
    finally:
        await cluster.close()


@on_asyncio
async def test_a_delivery_to_two_processes_and_a_racing_poll_bring_each_entry_once(any_redis):
    cluster = Cluster(any_redis.url, WEBSUB)
    client = any_redis.client()
    spent = any_redis.keys("test").spent
    try:
        a = await cluster.node(URLS)
        b = await cluster.node(URLS)
        ext_a, ext_b = callback_of(a), callback_of(b)
        await a.planner.step()
        sent = await subscribed(cluster, a, b, ext_a)
        service = a.planner.service
        sub = next(s for s in service.websub.by_key.values() if s.topic == URLS[1])
        body = b"<rss>one delivered document</rss>"
        budget = client.hgetall(spent)
        # forged copies reach b first: dropped, and they mark nothing a genuine one hits
        assert await ext_b.delivery(sub.key, body, sign("not the secret", body), None) == 202
        assert await ext_b.delivery(sub.key, body, None, None) == 202
        assert await ext_b.delivery("nobody", body, sign(sub.secret, body), None) == 410
        assert b.stats.get("errors/push_signature") == 2
        assert b.stats.get("errors/push_unknown_callback") == 1
        # the same delivery (signed) reaches both processes: both acknowledge it, the first
        # takes it, the second finds it received already and tells nobody
        for ext in (ext_a, ext_b):
            assert await ext.delivery(sub.key, body, sign(sub.secret, body),
                                      "application/rss+xml") == 202
        assert (a.stats.get("websub/deliveries"), b.stats.get("websub/deliveries")) == (1, 0)
        assert (a.stats.get("push/repeated"), b.stats.get("push/repeated")) == (0, 1)
        assert ext_b.crawler.engine.requests == []
        (req_a,) = ext_a.crawler.engine.requests[len(sent):]
        assert req_a.url == URLS[1]
        # another document with the same entries (a hub's later re-delivery) reaches b: taken,
        # and the shared memory says which entries are new, to one of them
        again = b"<rss>the same entries, another document</rss>"
        assert await ext_b.delivery(sub.key, again, sign(sub.secret, again), None) == 202
        (req_b,) = ext_b.crawler.engine.requests
        assert req_b.url == URLS[1]
        delivered = entries("p1", "p2", "old")
        got_a = await a.pushed(sub.source, delivered, now=cluster.clock.now())
        got_b = await b.pushed(sub.source, delivered, now=cluster.clock.now())
        assert sorted(e.key for e in got_a.entries + got_b.entries) == ["p1", "p2"]
        assert not (got_a.entries and got_b.entries)
        # the planner learns the two deliveries (the second brought nothing), not the repeat,
        # at no budget
        await a.planner.step()
        assert service.stats.get("push/deliveries") == 2
        assert service.stats.get("push/new_items") == 2
        assert service.stats.get("push/empty") == 1
        assert client.hgetall(spent) == budget
        assert a.stats.get("push/new_items") + b.stats.get("push/new_items") == 2
        # a poll of the feed after (or racing) the push finds nothing it brought
        polled = None
        for _ in range(3):
            cluster.advance()
            await a.planner.step()
            for crawl in (await cluster.crawls(b)).values():
                shown = entries("p2", "p1", "old") if crawl.source == sub.source \
                    else entries("old")
                found = await b.feed_fetched(crawl, shown)
                if crawl.source == sub.source:
                    polled = found
        assert polled is not None and polled.entries == []
    finally:
        client.close()
        await cluster.close()


@on_asyncio
async def test_a_repeat_is_one_within_the_window_of_the_crawl_s_clock(redis_server):
    """The window runs on the crawl's clock from the first receipt: the same delivery is a
    repeat to any process until it ends, then taken again (a push of nothing new); Redis
    forgets the mark after the window's length."""
    cluster = Cluster(redis_server.url, WEBSUB)
    client = redis_server.client()
    try:
        a = await cluster.node(URLS)
        b = await cluster.node(URLS)
        ext_a, ext_b = callback_of(a), callback_of(b)
        await a.planner.step()
        sent = await subscribed(cluster, a, b, ext_a)
        sub = next(iter(a.planner.service.websub.by_key.values()))
        body = b"<rss/>"
        signature = sign(sub.secret, body)
        t0 = cluster.clock.now()
        assert await ext_a.delivery(sub.key, body, signature, None) == 202
        mark = redis_server.keys("test").delivered(delivery_id(sub.key, signature))
        assert float(client.get(mark)) == t0
        assert 0 < client.ttl(mark) <= REPEAT_WINDOW
        cluster.clock.advance_to(t0 + REPEAT_WINDOW - 1.0)
        assert await ext_b.delivery(sub.key, body, signature, None) == 202
        assert await ext_a.delivery(sub.key, body, signature, None) == 202
        assert b.stats.get("push/repeated") == a.stats.get("push/repeated") == 1
        cluster.clock.advance_to(t0 + REPEAT_WINDOW)
        assert await ext_b.delivery(sub.key, body, signature, None) == 202
        assert b.stats.get("websub/deliveries") == 1
        assert float(client.get(mark)) == t0 + REPEAT_WINDOW
        assert len(ext_a.crawler.engine.requests) - len(sent) == \
            len(ext_b.crawler.engine.requests) == 1
    finally:
        client.close()
        await cluster.close()


@on_asyncio
async def test_a_push_result_reaches_the_planner_on_the_results_stream(redis_server):
    """Kind ``push``, no task acknowledged, the new entries' count and publication times."""
    cluster = Cluster(redis_server.url, WEBSUB)
    try:
        a = await cluster.node(URLS)
        await a.planner.step()
        t0 = cluster.clock.now()
        e = FeedEntry(key="n1", title=None, link=None, published=t0 - 30, engagement=None)
        await a.pushed(2, [e], now=t0)
        raw = redis_server.client().xrange(redis_server.keys("test").results)
        (result,) = [read_result(f) for _id, f in raw]
        assert (result.kind, result.source, result.cid, result.new_items, result.published) \
            == (PUSH, 2, "", 1, [t0 - 30])
        assert a.stats.get("push/deliveries") == 1 and a.stats.get("crawls", 0) == 0
    finally:
        await cluster.close()


@on_asyncio
async def test_a_source_that_leaves_is_unsubscribed_by_the_planner(redis_server):
    """The planner's list loses a source: its unsubscription goes to the hub, the worker
    that gets the hub's verification answers it from Redis, and the subscription leaves
    Redis once the planner has heard of it; the others stay."""
    cluster = Cluster(redis_server.url, WEBSUB)
    client = redis_server.client()
    websub = redis_server.keys("test").websub
    try:
        a = await cluster.node(URLS)
        b = await cluster.node(URLS)
        ext_a, ext_b = callback_of(a), callback_of(b)
        await a.planner.step()
        for f in {form(r)["hub.topic"]: form(r) for r in
                  await subscribed(cluster, a, b, ext_a)}.values():
            key = f["hub.callback"].rsplit("/", 1)[1]
            assert (await ext_b.verification(key, {
                "hub.mode": "subscribe", "hub.topic": f["hub.topic"], "hub.challenge": "c",
                "hub.lease_seconds": "7200"}))[0] == 200
        await a.planner.step()
        service = a.planner.service
        gone = next(s for s in service.websub.by_key.values() if s.topic == URLS[0])
        asked = len(ext_a.crawler.engine.requests)
        service.roster.sync_sources([SourceSpec(url=u) for u in URLS[1:]])
        cluster.clock.advance_to(cluster.clock.now() + 1.0)
        await a.planner.step()
        (request,) = ext_a.crawler.engine.requests[asked:]
        assert form(request) == {"hub.mode": "unsubscribe", "hub.topic": URLS[0],
                                 "hub.callback": f"{WEBSUB['WHITTLE_WEBSUB_CALLBACK']}/"
                                                 f"{gone.key}"}
        assert decode(client.hget(websub, gone.key))[0].state == LEAVING
        assert await ext_b.verification(gone.key, {
            "hub.mode": "unsubscribe", "hub.topic": URLS[0], "hub.challenge": "bye"}) == \
            (200, b"bye")
        await a.planner.step()
        assert client.hget(websub, gone.key) is None
        assert sorted(decode(v)[0].topic for v in client.hvals(websub)) == URLS[1:]
        assert b.stats.get("websub/unsubscribed") == 1
    finally:
        client.close()
        await cluster.close()


@on_asyncio
async def test_a_denial_reaching_a_worker_backs_the_subscription_off(redis_server):
    cluster = Cluster(redis_server.url, WEBSUB)
    client = redis_server.client()
    try:
        a = await cluster.node(URLS)
        b = await cluster.node(URLS)
        ext_a, ext_b = callback_of(a), callback_of(b)
        await a.planner.step()
        await subscribed(cluster, a, b, ext_a)
        sub = next(s for s in a.planner.service.websub.by_key.values() if s.topic == URLS[2])
        denial = {"hub.mode": "denied", "hub.topic": URLS[2], "hub.reason": "no"}
        assert await ext_b.verification(sub.key, denial) == (200, b"")
        assert await ext_b.verification(sub.key, {**denial, "hub.topic": URLS[3]}) == \
            (404, b"")
        await a.planner.step()
        stored = decode(client.hget(redis_server.keys("test").websub, sub.key))[0]
        assert stored.state == DENIED and stored.retry_at > cluster.clock.now()
        assert b.stats.get("websub/denied") == 1
    finally:
        client.close()
        await cluster.close()


@on_asyncio
async def test_without_redis_the_callback_answers_503_and_counts_it(redis_server):
    """Redis gone: a verification or a delivery waits ``WHITTLE_REDIS_WAIT``, is answered 503
    (the hub may try again; a poll finds the entries anyway) and counted; Redis back, the
    same delivery is taken."""
    cluster = Cluster(redis_server.url, WEBSUB)
    try:
        a = await cluster.node(URLS, wait=0.5)
        b = await cluster.node(URLS, wait=0.5)
        ext_a, ext_b = callback_of(a), callback_of(b)
        await a.planner.step()
        await subscribed(cluster, a, b, ext_a)
        sub = next(iter(a.planner.service.websub.by_key.values()))
        body = b"<rss/>"
        redis_server.stop()
        assert await ext_b.delivery(sub.key, body, sign(sub.secret, body), None) == 503
        assert await ext_b.verification(sub.key, {"hub.mode": "subscribe",
                                                  "hub.topic": sub.topic}) == (503, b"")
        assert b.stats.get("errors/websub_redis") == 2
        redis_server.start()
        assert await ext_b.delivery(sub.key, body, sign(sub.secret, body), None) == 202
    finally:
        await cluster.close()


def test_a_garbled_word_from_a_callback_changes_nothing():
    websub = Subscriptions("https://crawler.example/websub", 3600.0)
    websub.discovered(0, HUB, URLS[0], 0.0)
    (request,) = websub.due(0.0)
    owner = PlannerWebSub(websub, lambda sid: (URLS[sid], 1.0), node=None)
    for message in ({"type": "websub"}, {"type": "websub", "event": "verified"},
                    {"event": "verified", "key": request.key, "mode": "subscribe",
                     "topic": URLS[0], "at": "soon"},
                    {"event": "verified", "key": request.key, "mode": "subscribe",
                     "topic": URLS[1], "at": 5.0},
                    {"event": "denied", "key": "nobody", "topic": URLS[0], "at": 5.0}):
        owner.told(message)
    assert websub.dirty == set() and websub.by_key[request.key].state == PENDING
    owner.told({"event": "verified", "key": request.key, "mode": "subscribe",
                "topic": URLS[0], "at": 5.0, "lease": 60})
    assert websub.by_key[request.key].state == ACTIVE
    assert websub.by_key[request.key].expires_at == 65.0


@on_asyncio
async def test_a_standby_taking_over_holds_the_subscriptions_as_they_are_now(any_redis):
    import asyncio

    cluster = Cluster(any_redis.url, WEBSUB)
    try:
        a = await cluster.node(URLS)
        b = await cluster.node(URLS)
        c = await cluster.node(URLS, standby=True)
        ext_a, ext_b = callback_of(a), callback_of(b)
        callback_of(c)
        await a.planner.step()
        assert a.planner.leader
        await subscribed(cluster, a, b, ext_a)
        await c.planner.step()                   # its standby restores (a thread)
        await asyncio.wait([c.planner._standing])
        assert c.planner.standby.ready
        assert {s.state for s in c.planner.standby.service.websub.by_key.values()} == {PENDING}
        # the hub verifies them after the standby's restore: active in Redis
        asked = list({form(r)["hub.topic"]: form(r) for r in ext_a.crawler.engine.requests}
                     .values())
        for f in asked:
            key = f["hub.callback"].rsplit("/", 1)[1]
            status, _ = await ext_b.verification(key, {
                "hub.mode": "subscribe", "hub.topic": f["hub.topic"],
                "hub.challenge": "c-" + key, "hub.lease_seconds": "7200"})
            assert status == 200
        await a.planner.step()
        with any_redis.client() as client:
            stored = {k.decode(): decode(v)[0] for k, v in
                      client.hgetall(any_redis.keys("test").websub).items()}
        assert {s.state for s in stored.values()} == {ACTIVE}
        await a.planner.resign()
        await c.planner.step()                   # takes over with its standby's state
        assert c.planner.leader and c.stats.get("cluster/standby/takeovers") == 1
        assert {s.key: (s.secret, s.state, s.lease_seconds)
                for s in c.planner.service.websub.by_key.values()} == \
            {k: (s.secret, s.state, s.lease_seconds) for k, s in stored.items()}
    finally:
        await cluster.close()
