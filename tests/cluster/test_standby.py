"""A standby planner (``scrapy_whittle.cluster.standby``) on a real redis-server: it follows
the planner's checkpoints (changed rows, new sources, moves and merges, retirements,
throttled hosts) and, taken over, holds what a fresh restore from Redis holds and chooses
what it would choose."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytest_twisted
from twisted.internet.defer import Deferred

from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.cluster.standby import Standby
from scrapy_whittle.cluster.state import RedisStateStore
from scrapy_whittle.service.clock import SimulatedClock, SystemClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.state_codec import encode
from scrapy_whittle.service.types import DictStats
from sim.crawls.planner_load import load, settings_for
from tests.cluster.test_sharded_state import CutShort
from tests.service.test_recrawl import START, PoissonFeeds

N = 40
BUDGET = 12
PERIOD = 600.0
RATES = [1 / 600, 1 / 1800, 1 / 300, 1 / 7200, 1 / 900, 1 / 60, 1 / 3600, 1 / 120] * 8
PREFIX = "sb"
KEYS = Keys(PREFIX)


def _specs(n: int = N) -> list[SourceSpec]:
    return [SourceSpec(url=f"https://h{i % 7}.example/{i}.xml",
                       category="news" if i % 5 == 0 else "") for i in range(n)]


def _config(policy: str) -> WhittleConfig:
    return WhittleConfig.from_settings({
        "WHITTLE_BUDGET": BUDGET, "WHITTLE_PERIOD": PERIOD, "WHITTLE_STEP": PERIOD,
        "WHITTLE_POLICY": policy,
        "WHITTLE_RETIRE_404_AFTER": 1800.0, "WHITTLE_HALF_LIFE": {"news": 7200.0}})


@pytest.fixture
def client(redis_server):
    c = redis_server.client()
    yield c
    c.close()


def _service(client, policy: str, clock, keys: Keys = KEYS) -> RecrawlService:
    return RecrawlService(_config(policy), clock=clock, store=RedisStateStore(client, keys))


def state_of(service: RecrawlService) -> dict:
    """What a service holds of each source and of its policy (hosts and groups by name:
    their ids are labels numbered in order of appearance)."""
    src, st, policy = service.sources, service.state, service.policy
    n = len(src)
    ids = np.arange(n)
    groups = {gid: key for key, gid in src.groups.items()}
    out = {"n": n, "origin": service.origin, "first_epoch": service.timeline.first_epoch,
           "urls": [src.url(i) for i in range(n)],
           "hosts": [src.host_names[h] for h in src.host[:n].tolist()],
           "groups": [groups[g] for g in src.group[:n].tolist()],
           "aliases": {u: src.id_of(u) for u in src.registry.aliases},
           "etags": st.etag.get_many(ids),
           "rows": policy.export_rows(ids).tobytes(),
           "global": encode(policy.global_state()),
           "blocks": {k: (s.tolist(), r.tobytes())
                      for k, (s, r) in policy.export_blocks(ids).items()},
           "hosts_throttled": service.throttle.rows(),
           "probes": sorted(service.retirement.probes),
           "n_left": src.n_left, "n_retired": src.n_retired,
           "pending_grow": list(service.keeper.pending_grow),
           "grown_since_select": list(service.keeper.grown_since_select),
           "children": {sid: c.row(sid) for sid, c in service.children.children.items()},
           "indexes": service.children.index_rows(range(n)),
           "awaiting": dict(service.children.awaiting)}
    for part in (src, st):
        for name in type(part).per_source:
            if name not in ("host", "group"):             # by name above
                out[f"{type(part).__name__}.{name}"] = getattr(part, name)[:n].tobytes()
    return out


def _crawl(service, clock, feeds, epoch: int, moves: dict[int, str]) -> None:
    """One epoch: fetches with ETags, 304s, 429s that throttle a host (from epoch 8),
    404s that retire sources,
    the moves and merges of ``moves`` (source -> the URL it answers at)."""
    while (crawl := service.next_crawl()) is not None:
        sid = crawl.source
        if sid in moves:
            crawl = service.moved(crawl, moves.pop(sid))
            sid = crawl.source
        if sid % 9 == 4:
            service.crawl_failed(crawl, "http_404", "HTTP 404")
        elif sid % 7 == 3 and epoch >= 8:
            service.crawl_failed(crawl, "http_429", "HTTP 429")
        elif sid % 4 == 1 and epoch % 2:
            service.not_modified(crawl, etag=f'"e{sid}"')
        else:
            service.feed_fetched(crawl, feeds.entries(sid, clock.now()),
                                 etag=f'"v{sid}.{epoch}"')
    clock.advance_to(service.wake_at)


@pytest.mark.parametrize("policy", ["whittle", "thompson-whittle", "round_robin"])
def test_a_standby_taken_over_holds_what_a_fresh_restore_holds(client, policy):
    _takes_over_as_a_fresh_restore(client, Keys(PREFIX), policy)


def test_a_standby_on_a_redis_cluster_holds_what_a_fresh_restore_holds(redis_cluster):
    client = redis_cluster.client()
    try:
        _takes_over_as_a_fresh_restore(client, redis_cluster.keys(PREFIX), "whittle")
    finally:
        client.close()


def _takes_over_as_a_fresh_restore(client, keys: Keys, policy: str) -> None:
    clock = SimulatedClock(start=START)
    feeds = PoissonFeeds(RATES, seed=5)
    planner = _service(client, policy, clock, keys)
    planner.open(_specs())
    _crawl(planner, clock, feeds, 0, {})
    planner.checkpoint()
    standby = Standby(client, keys, lambda store: RecrawlService(
        _config(policy), clock=clock, store=store))
    assert standby.open()
    moves = {2: "https://moved.example/2.xml",            # a move to a new host
             # a merge into source 1: of a fast feed (one a minute, whose window of five
             # fills every epoch), which the index crawls every epoch
             21: "https://h1.example/1.xml",
             16: "https://h2.example/16-new.xml"}
    applied = 0
    for epoch in range(1, 20):
        _crawl(planner, clock, feeds, epoch, moves if epoch >= 3 else {})
        if epoch == 5:
            planner.add_sources(_specs(N + 8)[N:])        # sources that join mid-crawl
        planner.checkpoint()
        if epoch % 3:                                     # sometimes two checkpoints at once
            applied += standby.follow()
    assert applied > 0 and standby.seq == int(client.hget(keys.meta, "checkpoint_seq"))
    assert not moves and planner.stats.get("sources/merged", 0) == 1
    assert planner.sources.n_retired > 0                  # the 404s retired some
    if policy == "whittle":         # (the others' choices spread the 429s too thin)
        assert planner.throttle.rows()                    # the 429s throttled a host
    # the planner dies after its last checkpoint; the standby takes over
    taken = standby.take(_specs() + _specs(N + 8)[N:])
    fresh = _service(client, policy, clock, keys)
    fresh.open(_specs() + _specs(N + 8)[N:])
    got, want = state_of(taken), state_of(fresh)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key
    assert want["n"] == N + 8
    # and both choose the same next epoch
    assert [c.source for c in iter(taken.next_crawl, None)] == \
        [c.source for c in iter(fresh.next_crawl, None)]


def test_a_standby_that_fell_behind_the_changes_restores_again(client):
    clock = SimulatedClock(start=START)
    feeds = PoissonFeeds(RATES, seed=6)
    planner = _service(client, "whittle", clock)
    planner.open(_specs())
    _crawl(planner, clock, feeds, 0, {})
    planner.checkpoint()
    standby = Standby(client, Keys(PREFIX), lambda store: RecrawlService(
        _config("whittle"), clock=clock, store=store))
    assert standby.open()
    for epoch in range(1, 4):
        _crawl(planner, clock, feeds, epoch, {})
        planner.checkpoint()
    client.xtrim(Keys(PREFIX).changes, maxlen=1, approximate=False)   # two of three gone
    assert standby.follow() == 0
    assert standby.ready and standby.seq == int(client.hget(Keys(PREFIX).meta,
                                                            "checkpoint_seq"))
    taken = standby.take(_specs())
    fresh = _service(client, "whittle", clock)
    fresh.open(_specs())
    assert state_of(taken) == state_of(fresh)


def test_a_standby_waits_for_a_crawl_to_follow(client):
    standby = Standby(client, Keys(PREFIX), lambda store: RecrawlService(
        _config("whittle"), store=store))
    assert not standby.open()
    assert not standby.ready


# -- in a planner: following while another holds the lock, taking over ----------------------
def _on_reactor(coro):
    return Deferred.fromFuture(asyncio.ensure_future(coro))


def _standby_node(redis_server, prefix: str, stats: DictStats) -> ClusterNode:
    settings = settings_for(BUDGET, PERIOD)
    load(redis_server.url, prefix, 300, 10, settings)
    return ClusterNode(WhittleConfig.from_settings(settings), redis_url=redis_server.url,
                       prefix=prefix, specs=[], stats=stats, clock=SystemClock(),
                       lock_ttl=3.0, capacity=0, standby=True)


@pytest_twisted.ensureDeferred
async def test_a_standby_tries_the_lock_as_it_expires_and_takes_over_warm(redis_server):
    stats = DictStats()
    node = _standby_node(redis_server, "sbw", stats)
    planner, client = node.planner, redis_server.client()
    client.set(node.keys.planner, b"another", px=300)     # another planner, about to die
    try:
        wait = await _on_reactor(planner.step())
        assert not planner.leader
        assert wait <= 0.31                     # not a third of the TTL (1 s): its expiry
        await _on_reactor(asyncio.wait([planner._standing]))
        assert planner.standby.ready
        client.delete(node.keys.planner)
        await _on_reactor(planner.step())
        assert planner.leader
        assert stats.get("cluster/standby/takeovers") == 1
        assert await _on_reactor(node.redis.xlen(node.keys.tasks)) > 0
    finally:
        client.close()
        await _on_reactor(node.redis.aclose())
        node.sync_redis.close()


@pytest_twisted.ensureDeferred
async def test_a_standby_that_cannot_follow_takes_over_by_a_restore(redis_server,
                                                                     monkeypatch):
    def broken(self):
        raise RuntimeError("the standby's Redis connection broke")

    monkeypatch.setattr(Standby, "follow", broken)
    stats = DictStats()
    node = _standby_node(redis_server, "sbf", stats)
    planner, client = node.planner, redis_server.client()
    client.set(node.keys.planner, b"another", px=5000)
    try:
        for _ in range(3):
            await _on_reactor(planner.step())
            await _on_reactor(asyncio.wait([planner._standing]))
        assert stats.get("cluster/standby/failures") == 2    # the third one not seen yet
        client.delete(node.keys.planner)
        await _on_reactor(planner.step())
        assert planner.leader
        assert stats.get("cluster/standby/takeovers", 0) == 0
        assert len(planner.service.sources) == 300
        assert await _on_reactor(node.redis.xlen(node.keys.tasks)) > 0
    finally:
        client.close()
        await _on_reactor(node.redis.aclose())
        node.sync_redis.close()


def _cut_short(planner, clock, feeds, epoch: int, moves: dict[int, str]) -> None:
    """One epoch whose checkpoint a planner killed between its tags' transactions and the
    crawl-wide one leaves: the tags a checkpoint ahead of the meta."""
    _crawl(planner, clock, feeds, epoch, moves)
    store = planner.store
    store.client = CutShort(store.client)
    with pytest.raises(RuntimeError, match="killed"):
        planner.checkpoint()
    store.client = store.client.client


def _same(taken: RecrawlService, fresh: RecrawlService) -> None:
    got, want = state_of(taken), state_of(fresh)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key
    assert taken.store.applied == fresh.store.applied
    assert taken.store.ahead == fresh.store.ahead
    assert [c.source for c in iter(taken.next_crawl, None)] == \
        [c.source for c in iter(fresh.next_crawl, None)]


def test_a_standby_taking_over_after_a_checkpoint_cut_short_holds_a_fresh_restore(
        redis_cluster):
    client = redis_cluster.client()
    keys = redis_cluster.keys("cut")
    try:
        clock = SimulatedClock(start=START)
        feeds = PoissonFeeds(RATES, seed=7)
        planner = _service(client, "whittle", clock, keys)
        planner.open(_specs())
        _crawl(planner, clock, feeds, 0, {})
        planner.checkpoint()
        standby = Standby(client, keys, lambda store: RecrawlService(
            _config("whittle"), clock=clock, store=store))
        assert standby.open()
        for epoch in range(1, 4):
            _crawl(planner, clock, feeds, epoch, {})
            planner.checkpoint()
        assert standby.follow() == 3
        _cut_short(planner, clock, feeds, 4, {})
        assert standby.follow() == 0               # nothing committed crawl-wide
        taken = standby.take(_specs())
        fresh = _service(client, "whittle", clock, keys)
        fresh.open(_specs())
        assert fresh.store.ahead                   # the tags' records a checkpoint ahead
        _same(taken, fresh)
    finally:
        client.close()


def test_a_standby_following_the_planner_after_a_checkpoint_cut_short_holds_a_fresh_restore(
        redis_cluster):
    client = redis_cluster.client()
    keys = redis_cluster.keys("cutf")
    try:
        clock = SimulatedClock(start=START)
        feeds = PoissonFeeds(RATES, seed=8)
        planner = _service(client, "whittle", clock, keys)
        planner.open(_specs())
        _crawl(planner, clock, feeds, 0, {})
        planner.checkpoint()
        standby = Standby(client, keys, lambda store: RecrawlService(
            _config("whittle"), clock=clock, store=store))
        assert standby.open()
        _cut_short(planner, clock, feeds, 1, {})
        # the next planner restores (the tags as written), plans an epoch, checkpoints
        planner = _service(client, "whittle", clock, keys)
        planner.open(_specs())
        ahead = set(planner.store.ahead)
        assert ahead
        planner.checkpoint()                       # its first, as a planner taking over
        _crawl(planner, clock, feeds, 2, {})
        planner.checkpoint()
        assert standby.follow() == 2
        taken = standby.take(_specs())
        fresh = _service(client, "whittle", clock, keys)
        fresh.open(_specs())
        _same(taken, fresh)
    finally:
        client.close()


def test_a_standby_taking_over_holds_the_sitemap_indexes_children_as_they_are_now(client):
    # the children's rows are not followed: read at the take-over
    clock = SimulatedClock(start=START)
    feeds = PoissonFeeds(RATES, seed=9)
    planner = _service(client, "whittle", clock)
    planner.open(_specs())
    specs = _specs()
    planner.children.listed(0, [specs[1].url, specs[2].url, specs[3].url], clock.now())
    _crawl(planner, clock, feeds, 0, {})
    planner.checkpoint()
    standby = Standby(client, KEYS, lambda store: RecrawlService(
        _config("whittle"), clock=clock, store=store))
    assert standby.open()
    for epoch in range(1, 3):                  # the index drops a child, lists another
        planner.children.listed(0, [specs[1].url, specs[4].url], clock.now())
        _crawl(planner, clock, feeds, epoch, {})
        planner.checkpoint()
    assert standby.follow() == 2
    taken = standby.take(_specs())
    fresh = _service(client, "whittle", clock)
    fresh.open(_specs())
    assert set(fresh.children.children) == {2, 3, 4, 1}
    assert fresh.children.children[2].misses == 2
    _same(taken, fresh)


def test_a_standby_taking_over_holds_the_indexes_last_listings_as_they_are_now(client):
    # an index's last listing read in part (a 304 repeating it counts no miss) and a child
    # it named whose registration was not read yet: read at the take-over, as a restore does
    clock = SimulatedClock(start=START)
    feeds = PoissonFeeds(RATES, seed=9)
    planner = _service(client, "whittle", clock)
    planner.open(_specs())
    specs = _specs()
    planner.children.listed(0, [specs[1].url, specs[2].url], clock.now())
    _crawl(planner, clock, feeds, 0, {})
    planner.checkpoint()
    standby = Standby(client, KEYS, lambda store: RecrawlService(
        _config("whittle"), clock=clock, store=store))
    assert standby.open()
    planner.children.listed(0, [specs[1].url], clock.now())               # 2: one miss
    _crawl(planner, clock, feeds, 1, {})
    planner.checkpoint()
    new = "https://h0.example/new-child.xml"
    planner.children.listed(0, [specs[1].url, new], clock.now(), complete=False)
    _crawl(planner, clock, feeds, 2, {})
    planner.checkpoint()
    assert standby.follow() == 2
    taken = standby.take(_specs())
    fresh = _service(client, "whittle", clock)
    fresh.open(_specs())
    for service in (taken, fresh):
        sid = service.source_id(new)
        assert sid == N and service.children.children[sid].parent == 0    # registered
        service.children.unchanged(0, clock.now())        # a 304: repeats a partial listing
        assert service.children.children[2].misses == 1
    _same(taken, fresh)
