"""Many Scrapy processes, one crawl, on a real redis-server: one budget, each entry emitted
once, no feed fetched by two processes at once; processes killed with SIGKILL (the planner
too) and Redis restarted mid-crawl lose nothing but crawls in flight, which come back.

The tests wait on conditions (items emitted, a line in a log, tasks pending in Redis), never a
fixed time: the crawls run until the test has seen what it waits for, then are stopped with
SIGTERM (Scrapy's graceful shutdown: each process still writes its stats)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis as redis_py

from scrapy_whittle.cluster.keys import CHUNK, Keys
from tests.cluster.conftest import RedisClusterServers, RedisServer, source_urls
from tests.processes import spawn
from tests.scrapy.conftest import ROOT, Server
from tests.waiting import wait_for

N_FEEDS = 30
N_WIDE = 2 * CHUNK + 30
BUDGET = 10
PREFIX = "test:feeds"
LONG = 300.0          # CLOSESPIDER_TIMEOUT of a crawl the test stops itself


@pytest.fixture(scope="module")
def web():
    server = Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", "36000",
                    "--latency", "0.02", "--seed", "3")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def wide_web():
    """A web of more feeds than two chunks of sources (``keys.CHUNK``): a crawl of it has
    keys under the crawl's prefix and three tags, on the three shards of the test cluster."""
    server = Server("--scenario", "news-mix", "--n", str(N_WIDE), "--speed", "36000",
                    "--latency", "0.02", "--seed", "3")
    yield server
    server.stop()


def start(redis: RedisServer | RedisClusterServers, web, tmp: Path, name: str,
          seconds: float = LONG, feeds: int = N_FEEDS, **settings) -> subprocess.Popen:
    return spawn([sys.executable, "-m", "sim.crawls.cluster_crawl", redis.url, web.url, str(feeds),
                  str(tmp / f"{name}.jsonl"), str(seconds), json.dumps(settings)],
                 log=tmp / f"{name}.log", cwd=ROOT)


def finish(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.wait(120)
        assert proc.returncode == 0


def stop(procs: list[subprocess.Popen]) -> None:
    """Scrapy's graceful shutdown (the first SIGTERM), then wait for the processes' end."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    finish(procs)


def emitted(tmp: Path, name: str) -> list[dict]:
    """The items process ``name`` emitted so far (complete lines; one may be half written)."""
    path = tmp / f"{name}.jsonl"
    lines = path.read_text().split("\n")[:-1] if path.exists() else []
    return [row for row in map(json.loads, lines) if "stats" not in row]


def log(tmp: Path, name: str) -> str:
    return (tmp / f"{name}.log").read_text()


def results(tmp: Path, names) -> tuple[list[dict], dict[str, dict]]:
    items, stats = [], {}
    for name in names:
        path = tmp / f"{name}.jsonl"
        for line in path.read_text().splitlines() if path.exists() else ():
            row = json.loads(line)
            if "stats" in row:
                stats[name] = row["stats"]
            else:
                items.append(row)
    return items, stats


def no_duplicates(items: list[dict]) -> None:
    keys = [(i["source"], i["entry_id"]) for i in items]
    assert len(keys) == len(set(keys)), len(keys) - len(set(keys))


def epochs_cost(redis: RedisServer) -> dict[int, float]:
    raw = redis.client().hgetall(f"{PREFIX}:epochs")
    return {int(k.decode().split(":")[0]): float(v) for k, v in raw.items()
            if k.decode().endswith(":cost")}


def planner(tmp: Path, names) -> str | None:
    """The process whose log says its planner took over, if one does."""
    return next((name for name in names if "took over" in log(tmp, name)), None)


def held_by(client: redis_py.Redis, pid: int) -> int:
    """Tasks the worker of process ``pid`` took from the stream and has not acknowledged."""
    try:
        pending = client.xpending(f"{PREFIX}:tasks", "workers")
    except redis_py.ResponseError:            # no stream or group yet
        return 0
    return sum(c["pending"] for c in pending.get("consumers", [])
               if f"-{pid}-" in c["name"].decode())


@pytest.mark.slow
def test_two_processes_share_one_crawl(redis_server, web, tmp_path):
    names = ["w0", "w1"]
    procs = [start(redis_server, web, tmp_path, name) for name in names]
    wait_for(lambda: all(len(emitted(tmp_path, n)) >= 50 for n in names)
             and len(epochs_cost(redis_server)) >= 4, timeout=120,
             what="50 items from each process, 4 epochs checkpointed")
    stop(procs)
    items, stats = results(tmp_path, names)
    no_duplicates(items)
    assert sorted(stats) == names
    assert all(s["whittle/fetched"] > 0 for s in stats.values()), stats
    # one planner at a time (the second takes over when the first closes, if it outlives it)
    planners = [s for s in stats.values() if "whittle/planner/crawls" in s]
    assert 1 <= sum(s["whittle/cluster/takeovers"] for s in planners) <= 2
    # one budget: no epoch cost more than M, whichever process fetched its crawls
    costs = epochs_cost(redis_server)
    assert len(costs) >= 4 and max(costs.values()) <= BUDGET + 1e-9
    assert sum(costs.values()) == sum(s["whittle/planner/crawls/cost"] for s in planners)
    # every result reached the learner, or waits in Redis for the next one (the processes
    # close together: a worker may report after the last planner's last read), and no feed
    # was fetched by two processes at once
    fetched = sum(s.get("whittle/fetched", 0) for s in stats.values())
    learned = sum(s.get("whittle/planner/fetched", 0) for s in planners)
    client = redis_server.client()
    (group,) = client.xinfo_groups(f"{PREFIX}:results")
    assert group["pending"] == 0                     # what it read, it checkpointed
    unread = client.xrange(f"{PREFIX}:results",
                           min=f"({group['last-delivered-id'].decode()}", max="+")
    assert learned <= fetched <= learned + len(unread)
    assert json.loads(_get(web.url + "/stats.json"))["max_concurrent_per_feed"] == 1


def _get(url: str) -> bytes:
    from urllib.request import urlopen

    with urlopen(url, timeout=10) as r:
        return r.read()


@pytest.mark.slow
def test_killed_processes_lose_nothing(redis_server, web, tmp_path):
    names = ["w0", "w1", "w2"]
    procs = {name: start(redis_server, web, tmp_path, name) for name in names}
    victim = wait_for(lambda: planner(tmp_path, names), timeout=60, what="a planner")
    proc, client = procs[victim], redis_server.client()
    # The planner is killed at a random instant (seeded): once it has emitted n items, at a
    # moment its worker holds crawls. It is frozen (SIGSTOP) to look, then killed or let go.
    n = int(np.random.default_rng(7).integers(5, 40))

    def frozen_holding_crawls() -> bool:
        if len(emitted(tmp_path, victim)) < n:
            return False
        proc.send_signal(signal.SIGSTOP)
        if held_by(client, proc.pid) >= 2:
            return True
        proc.send_signal(signal.SIGCONT)
        return False

    wait_for(frozen_holding_crawls, timeout=60, alive=proc,
             what=f"the planner {victim} holding crawls after {n} items")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    killed_at = time.time()
    held = held_by(client, proc.pid)
    assert held >= 1                             # the kill left crawls in flight
    survivors = [name for name in names if name != victim]
    # a survivor takes over, takes the dead worker's crawls back, and the crawl goes on
    heir = wait_for(lambda: planner(tmp_path, survivors), timeout=60, what="a takeover")
    wait_for(lambda: held_by(client, proc.pid) == 0, timeout=60,
             what=f"the {held} crawls {victim} held taken back")
    wait_for(lambda: sum(i["discovered_at"] > killed_at + 1 for n in survivors
                         for i in emitted(tmp_path, n)) >= 20, timeout=60,
             what="20 items found after the takeover")
    stop([procs[name] for name in survivors])
    items, stats = results(tmp_path, names)
    no_duplicates(items)
    assert sorted(stats) == survivors and "took over" in log(tmp_path, heir)
    # the heir took over (and maybe the other, when the first closed before it)
    assert 1 <= sum(s.get("whittle/cluster/takeovers", 0) for s in stats.values()) <= 2
    assert len(source_urls(client, Keys(PREFIX))) == N_FEEDS                  # no source lost
    # each crawl held was handed out again, or forgotten once its deadline passed
    assert sum(s.get("whittle/cluster/reclaimed", 0) + s.get("whittle/cluster/lost_crawls", 0)
               for s in stats.values()) >= held, stats


@pytest.mark.slow
def test_a_redis_restart_pauses_the_crawl_then_it_resumes(redis_server, web, tmp_path):
    names = ["w0", "w1"]
    procs = [start(redis_server, web, tmp_path, n) for n in names]
    wait_for(lambda: all(len(emitted(tmp_path, n)) >= 20 for n in names), timeout=60,
             what="20 items from each process")
    redis_server.stop()
    wait_for(lambda: all("Redis unreachable" in log(tmp_path, n) for n in names),
             timeout=60, what="each process finding Redis gone")
    before = {n: len(emitted(tmp_path, n)) for n in names}
    redis_server.start()                           # same port, data kept (append-only file)
    restarted = time.time()
    wait_for(lambda: all("reachable again" in log(tmp_path, n)
                         and sum(i["discovered_at"] > restarted
                                 for i in emitted(tmp_path, n)[before[n]:]) >= 10
                         for n in names),
             timeout=60, what="each process back, with 10 items found since the restart")
    stop(procs)
    items, stats = results(tmp_path, names)
    no_duplicates(items)
    assert sorted(stats) == names
    for name in names:
        text = log(tmp_path, name)
        assert "Traceback" not in text
        # one outage, logged once by the process (its loops share one Retrier), and counted
        assert text.count("Redis unreachable") == 1, name
        assert text.count("Redis reachable again") == 1, name
        assert stats[name]["whittle/cluster/redis_outages"] == 1, name


@pytest.mark.slow
def test_on_a_redis_cluster_a_shard_restart_pauses_the_crawl_then_it_resumes(
        own_redis_cluster, wide_web, tmp_path):
    """Two processes on a three-node Redis Cluster: the crawl's keys on all three shards
    (their tags), the shard of its crawl-wide keys restarted mid-crawl (its data and slots
    kept); the crawl goes on, and no entry is emitted twice."""
    redis_cluster = own_redis_cluster
    names = ["w0", "w1"]
    procs = [start(redis_cluster, wide_web, tmp_path, n, feeds=N_WIDE) for n in names]
    keys = redis_cluster.keys(PREFIX)
    wait_for(lambda: all(len(emitted(tmp_path, n)) >= 20 for n in names), timeout=60,
             what="20 items from each process")
    shard = redis_cluster.shard_of(keys.meta)
    with redis_cluster.client() as client:     # the crawl's keys on every shard
        # (the prefix "{whittle:...}" and the tags' "{whittle:...:t5}"; each key's node read
        # from this client's slot map: a client made for each of them takes seconds)
        assert {client.get_node_from_key(k.decode()).port for k in client.scan_iter(
            match=keys.prefix[:-1] + "*")} == {s.port for s in redis_cluster.servers}
    shard.stop()
    wait_for(lambda: all("Redis unreachable" in log(tmp_path, n) for n in names),
             timeout=60, what="each process finding the shard gone")
    before = {n: len(emitted(tmp_path, n)) for n in names}
    redis_cluster.restart(shard)                 # stopped already: started, cluster ok again
    restarted = time.time()
    wait_for(lambda: all("reachable again" in log(tmp_path, n)
                         and sum(i["discovered_at"] > restarted
                                 for i in emitted(tmp_path, n)[before[n]:]) >= 10
                         for n in names),
             timeout=90, what="each process back, with 10 items found since the restart")
    stop(procs)
    items, stats = results(tmp_path, names)
    no_duplicates(items)
    assert sorted(stats) == names
    assert all(s["whittle/fetched"] > 0 for s in stats.values()), stats
    with redis_cluster.client() as client:
        assert len(source_urls(client, keys)) == N_WIDE                    # no source lost
    for name in names:
        assert "Traceback" not in log(tmp_path, name)
        assert stats[name]["whittle/cluster/redis_outages"] >= 1, name
