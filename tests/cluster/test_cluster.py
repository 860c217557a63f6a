"""Many Scrapy processes, one crawl, on a real redis-server: one budget, each entry emitted
once, no feed fetched by two processes at once; processes killed with SIGKILL (the planner
too) and Redis restarted mid-crawl lose nothing but crawls in flight, which come back."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import RedisServer
from tests.scrapy.conftest import ROOT, Server

N_FEEDS = 30
BUDGET = 10
PREFIX = "test:feeds"


@pytest.fixture(scope="module")
def web():
    server = Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", "36000",
                    "--latency", "0.02", "--seed", "3")
    yield server
    server.stop()


def start(redis: RedisServer, web, tmp: Path, name: str, seconds: float,
          **settings) -> subprocess.Popen:
    with open(tmp / f"{name}.log", "w") as log:      # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "sim.cluster_crawl", redis.url, web.url,
             str(N_FEEDS), str(tmp / f"{name}.jsonl"), str(seconds), json.dumps(settings)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)


def finish(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.wait(120)
        assert proc.returncode == 0


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


def planner_pid(tmp: Path, procs: dict[str, subprocess.Popen]) -> str | None:
    for name in procs:
        if "took over" in (tmp / f"{name}.log").read_text():
            return name
    return None


@pytest.mark.slow
def test_two_processes_share_one_crawl(redis_server, web, tmp_path):
    procs = [start(redis_server, web, tmp_path, f"w{i}", 4.0) for i in range(2)]
    finish(procs)
    items, stats = results(tmp_path, ["w0", "w1"])
    no_duplicates(items)
    assert len(items) > 100
    assert all(s.get("whittle/fetched", 0) > 0 for s in stats.values()), stats
    # one planner at a time (the second takes over when the first closes, if it outlives it)
    planners = [s for s in stats.values() if "whittle/planner/crawls" in s]
    assert 1 <= sum(s["whittle/cluster/takeovers"] for s in planners) <= 2
    # one budget: no epoch cost more than M, whichever process fetched its crawls
    costs = epochs_cost(redis_server)
    assert costs and max(costs.values()) <= BUDGET + 1e-9
    assert sum(costs.values()) == sum(s["whittle/planner/crawls/cost"] for s in planners)
    # every result reached the learner, and no feed was fetched by two processes at once
    fetched = sum(s.get("whittle/fetched", 0) for s in stats.values())
    learned = sum(s.get("whittle/planner/fetched", 0) for s in planners)
    assert learned >= 0.9 * fetched
    assert json.loads(_get(web.url + "/stats.json"))["max_concurrent_per_feed"] == 1


def _get(url: str) -> bytes:
    from urllib.request import urlopen

    with urlopen(url, timeout=10) as r:
        return r.read()


@pytest.mark.slow
def test_killed_processes_lose_nothing(redis_server, web, tmp_path):
    names = ["w0", "w1", "w2"]
    procs = {name: start(redis_server, web, tmp_path, name, 7.0) for name in names}
    deadline = time.monotonic() + 60
    while (victim := planner_pid(tmp_path, procs)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(2.5)
    procs[victim].send_signal(signal.SIGKILL)      # the planner, with crawls in flight
    procs[victim].wait(30)
    killed_at = time.time()
    survivors = [p for n, p in procs.items() if n != victim]
    finish(survivors)
    items, stats = results(tmp_path, names)
    no_duplicates(items)
    # a survivor took over (and maybe the other, when the first closed before it)
    assert 1 <= sum(s.get("whittle/cluster/takeovers", 0) for s in stats.values()) <= 2
    assert any(i["discovered_at"] > killed_at + 1 for i in items)   # the crawl went on
    r = redis_server.client()
    assert r.llen(f"{PREFIX}:urls") == N_FEEDS                     # no source lost
    # the dead worker's crawls were taken back: nothing is left pending on it
    pending = r.xpending(f"{PREFIX}:tasks", "workers")
    dead = [c for c in pending.get("consumers", []) if str(procs[victim].pid)
            in c["name"].decode()]
    assert not dead, pending


@pytest.mark.slow
def test_a_redis_restart_pauses_the_crawl_then_it_resumes(redis_server, web, tmp_path):
    names = ["w0", "w1"]
    procs = [start(redis_server, web, tmp_path, n, 9.0) for n in names]
    time.sleep(3.5)
    redis_server.stop()
    time.sleep(1.5)
    redis_server.start()                           # same port, data kept (append-only file)
    restarted = time.time()
    finish(procs)
    items, _ = results(tmp_path, names)
    no_duplicates(items)
    assert any(i["discovered_at"] > restarted for i in items)     # new entries again
    for name in names:
        log = (tmp_path / f"{name}.log").read_text()
        assert "Traceback" not in log
        assert 1 <= log.count("Redis unreachable") <= 3, name     # once per loop, not more
        assert "reachable again" in log
