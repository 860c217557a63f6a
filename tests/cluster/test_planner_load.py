"""The planner's load test (``sim.bench.planner``) in small, on a real redis-server: a few
thousand sources loaded as a checkpoint leaves them, the real planner in its own process,
lightweight workers answering with synthetic results; then the planner killed with SIGKILL
while a second one waits. What every crawl handed out must satisfy is checked from the
workers' journal (no speed is asserted)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import Counter, defaultdict

import pytest
import pytest_twisted
import redis as redis_py
from twisted.internet.defer import Deferred

from scrapy_whittle.cluster.node import ClusterNode
from scrapy_whittle.service.clock import SystemClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.types import DictStats
from sim.crawls.planner_load import load, settings_for, url_of
from tests.cluster.conftest import RedisClusterServers, RedisServer, source_urls
from tests.processes import spawn
from tests.scrapy.conftest import ROOT
from tests.waiting import wait_for

N = 3000
HOSTS = 60
BUDGET = 300            # crawls per epoch (each source costs 1)
PERIOD = 4.0            # longer than a take-over: the new planner finishes the epoch
LOCK_TTL = 1.0
PREFIX = "load"
#: a random choice each epoch: a new planner that took over an epoch would pick again some of
#: the sources the killed one crawled in it, were they not left out
CHOICE = {"WHITTLE_POLICY": "uniform"}
#: the standby follows two of the first planner's checkpoints before the kill: one a second,
#: not one every WHITTLE_CHECKPOINT_INTERVAL's default five
FOLLOWED = {"WHITTLE_CHECKPOINT_INTERVAL": 1.0}


def _planner(server: RedisServer | RedisClusterServers, tmp, name: str,
             standby: bool = False, **more):
    settings = json.dumps(settings_for(BUDGET, PERIOD, **CHOICE, **more))
    return spawn([sys.executable, "-m", "sim.crawls.planner_load", "planner", server.url, PREFIX,
                  settings, "--lock-ttl", str(LOCK_TTL), "--lease", "60", "--backlog", "16",
                  "--events", str(tmp / f"{name}.jsonl"),
                  *(["--standby"] if standby else [])],
                 log=tmp / f"{name}.log", cwd=ROOT)


def _journal(path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1]]


# On a Redis Cluster, the standby only: a take-over by a restore of a state spread over the
# cluster's tags, and one after a checkpoint cut short between them, are tested in
# tests/cluster/test_sharded_state.py (killed at a chosen step, not at a random one).
@pytest.mark.parametrize(("any_redis", "standby"), [
    ("one-redis", False), ("one-redis", True), ("redis-cluster", True)],
    ids=["one-redis-restored", "one-redis-standby", "redis-cluster-standby"],
    indirect=["any_redis"])
def test_crawls_are_known_within_budget_once_an_epoch_and_survive_the_planners_kill(
        any_redis, tmp_path, standby):
    """The second planner restores the state when the lock falls to it, or (``standby``)
    keeps it warm from its start, following the first one's checkpoints."""
    redis_server, keys = any_redis, any_redis.keys(PREFIX)
    client = redis_server.client()
    settings = settings_for(BUDGET, PERIOD, **CHOICE)
    loaded = load(redis_server.url, PREFIX, N, HOSTS, settings)
    assert loaded["sources"] == N
    assert len(source_urls(client, keys)) == N
    journal = tmp_path / "answered.jsonl"
    workers = spawn([sys.executable, "-m", "sim.crawls.planner_load", "workers", redis_server.url,
                     PREFIX, str(N), "--workers", "4", "--seed", "7", "--log", str(journal)],
                    log=tmp_path / "workers.log", cwd=ROOT)
    first = _planner(redis_server, tmp_path, "first", **(FOLLOWED if standby else {}))

    def lock() -> bytes | None:
        return client.get(keys.planner)

    first_token = wait_for(lock, what="the first planner to take the lock", alive=first)
    wait_for(lambda: len(_journal(journal)) >= 300, timeout=120,
             what="300 crawls answered", alive=first)
    second = _planner(redis_server, tmp_path, "second", standby=standby)
    if standby:         # restored, and following the first one's checkpoints
        wait_for(lambda: (tmp_path / "second.jsonl").exists(), timeout=60,
                 what="the standby to restore the state", alive=second)
        seq = int(client.hget(keys.meta, "checkpoint_seq"))
        wait_for(lambda: int(client.hget(keys.meta, "checkpoint_seq")) >= seq + 2,
                 timeout=60, what="two checkpoints more", alive=first)
    origin = float(client.hget(keys.meta, "origin"))

    def epoch_started() -> bool:
        """Early in an epoch, a part of its budget spent: the standby takes the epoch over."""
        into = (time.time() - origin) % PERIOD
        epoch = int((time.time() - origin) // PERIOD)
        spent = sum(r["epoch"] == epoch for r in _journal(journal))
        return into < PERIOD / 4 and 0 < spent < BUDGET // 2

    wait_for(epoch_started, timeout=60, interval=0.01,
             what="the first planner to hand out an epoch's first crawls", alive=first)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(30)
    killed_at = len(_journal(journal))
    second_token = wait_for(lambda: (lock() or first_token) != first_token and lock(),
                            timeout=60, what="the standby planner to take the lock",
                            alive=second)
    second_cids = f"{second_token.decode()}:"
    wait_for(lambda: sum(r["cid"].startswith(second_cids) for r in _journal(journal)) >= 300,
             timeout=120, what="300 crawls answered after the take-over", alive=second)
    second.send_signal(signal.SIGTERM)
    second.wait(60)
    workers.send_signal(signal.SIGTERM)
    workers.wait(60)
    assert second.returncode == 0 and workers.returncode == 0

    lead = [e for e in _journal(tmp_path / "second.jsonl") if e["event"] == "lead"]
    assert len(lead) == 1 and lead[0]["warm"] is standby
    if standby:                 # it followed the checkpoints, not restored them again
        assert lead[0]["followed"] >= 2 and lead[0]["follow_failures"] == 0
    rows = _journal(journal)
    assert len(rows) > killed_at
    # every crawl is of a known source, at its URL
    for row in rows:
        assert 0 <= row["sid"] < N
        assert row["url"] == url_of(row["sid"], HOSTS)
    # both planners handed out crawls
    tokens = Counter(row["cid"].split(":")[0] for row in rows)
    assert tokens.keys() == {first_token.decode(), second_token.decode()}
    # the budget of every epoch holds across the two planners
    per_epoch = Counter(row["epoch"] for row in rows)
    assert max(per_epoch.values()) <= BUDGET
    assert len(per_epoch) >= 3
    # no source is handed out twice in one epoch, by one planner or across the take-over
    # (the new planner takes over the epoch the killed one began)
    seen: dict[int, Counter] = defaultdict(Counter)
    planners: dict[int, set[str]] = defaultdict(set)
    for row in rows:
        seen[row["epoch"]][row["sid"]] += 1
        planners[row["epoch"]].add(row["cid"].split(":")[0])
    assert all(max(c.values()) == 1 for c in seen.values())
    assert any(len(p) == 2 for p in planners.values())
    # each crawl id answered once (no task handed to two workers)
    assert max(Counter(row["cid"] for row in rows).values()) == 1
    # the spent budget Redis keeps agrees with what was handed out in the last epochs
    spent = {int(e): float(c) for e, c in client.hgetall(keys.spent).items()}
    for epoch, cost in spent.items():
        assert per_epoch.get(epoch, 0) <= cost <= BUDGET
    client.close()


def test_the_loaded_state_is_what_the_planner_restores(redis_server):
    """The loader's bulk layout reads back through the store as N listed sources at their
    URLs, never crawled, with the policy's rows (the record repeated is the service's own)."""
    from scrapy_whittle.cluster.keys import Keys
    from scrapy_whittle.cluster.state import RedisStateStore
    from scrapy_whittle.service.config import WhittleConfig
    from scrapy_whittle.service.recrawl import RecrawlService

    settings = settings_for(BUDGET, PERIOD)
    load(redis_server.url, PREFIX, 1500, HOSTS, settings)
    client = redis_py.Redis.from_url(redis_server.url)
    service = RecrawlService(WhittleConfig.from_settings(settings),
                             store=RedisStateStore(client, Keys(PREFIX)))
    service.open([])
    assert len(service.sources) == 1500
    assert service.url(1499) == url_of(1499, HOSTS)
    assert service.sources.listed[:1500].all()
    assert int(service.state.crawls[:1500].sum()) == 0
    assert not client.keys(f"{PREFIX}:scratch:*")
    client.close()


def _on_reactor(coro):
    return Deferred.fromFuture(asyncio.ensure_future(coro))


@pytest_twisted.ensureDeferred
async def test_a_take_over_longer_than_the_lock_ttl_keeps_the_lock(redis_server):
    """A restore of millions of sources outlasts WHITTLE_REDIS_LOCK_TTL: the lock is renewed
    while it runs, so the planner that won it still leads when it is done."""
    settings = settings_for(BUDGET, PERIOD)
    load(redis_server.url, PREFIX, 200, HOSTS, settings)
    node = ClusterNode(WhittleConfig.from_settings(settings), redis_url=redis_server.url,
                       prefix=PREFIX, specs=[], stats=DictStats(), clock=SystemClock(),
                       lock_ttl=0.3, capacity=0)
    planner = node.planner
    restore = planner._take_over

    async def slow_take_over():          # three times the lock's time-to-live
        await asyncio.sleep(0.9)
        await restore()

    planner._take_over = slow_take_over
    try:
        await _on_reactor(planner.step())
        assert planner.leader
        assert await _on_reactor(node.redis.get(node.keys.planner)) == planner.token.encode()
        await _on_reactor(planner.step())
        assert planner.leader
    finally:
        await _on_reactor(node.redis.aclose())
        node.sync_redis.close()


@pytest_twisted.ensureDeferred
async def test_an_epoch_selection_longer_than_the_lock_ttl_keeps_the_lock(redis_server,
                                                                         monkeypatch):
    """At millions of sources an epoch's selection takes seconds: it runs off the event
    loop, the lock renewed meanwhile, and the crawls it chose are handed out."""
    from scrapy_whittle.service.decisions.planning import EpochPlanner

    settings = settings_for(BUDGET, PERIOD)
    load(redis_server.url, PREFIX, 200, HOSTS, settings)
    node = ClusterNode(WhittleConfig.from_settings(settings), redis_url=redis_server.url,
                       prefix=PREFIX, specs=[], stats=DictStats(), clock=SystemClock(),
                       lock_ttl=0.3, capacity=0)
    choose = EpochPlanner.next_crawls

    def slow_selection(plans, hosts, limit, taken=None):
        if plans.timeline.epoch_of(plans.timeline.clock.now()) != plans.epoch:
            time.sleep(0.9)                  # three times the lock's time-to-live
        return choose(plans, hosts, limit, taken)

    monkeypatch.setattr(EpochPlanner, "next_crawls", slow_selection)
    planner = node.planner
    try:
        await _on_reactor(planner.step())
        assert planner.leader
        assert await _on_reactor(node.redis.xlen(node.keys.tasks)) > 0
        await _on_reactor(planner.step())
        assert planner.leader
        assert await _on_reactor(node.redis.get(node.keys.planner)) == planner.token.encode()
    finally:
        await _on_reactor(node.redis.aclose())
        node.sync_redis.close()
