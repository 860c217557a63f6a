"""WebSub in a cluster crawl of real Scrapy processes (``sim.crawls.cluster_crawl``) on a real
redis-server, against ``sim.serve``'s hub (``sim.web.websub_hub``). The crawl's public callback is
a proxy in front of the processes' callback servers (``sim.crawls.callback_proxy``): it hands each
verification of intent to one process in turn (a load balancer) and every delivery to all of
them at once (a hub's delivery reaching two processes). So: one subscription per topic
whatever the number of processes, any process verifies, 0 entries emitted twice however many
processes a delivery reaches, each delivery learnt by the planner once (the other copy a
repeat, ``whittle/push/repeated``), every bad signature counted under
``whittle/errors/push_signature``; and after a kill -9 of every process, the new ones go on
with the same subscriptions (callbacks and secrets), subscribing nothing anew."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from scrapy_whittle.cluster.websub import decode
from scrapy_whittle.service.sources.websub import ACTIVE
from sim.bench.cluster_websub import main, real_clock
from sim.crawls.callback_proxy import CallbackProxy
from tests.cluster.conftest import RedisServer, free_port
from tests.processes import spawn
from tests.scrapy.conftest import ROOT, Server
from tests.waiting import wait_for

N_FEEDS = 20
PREFIX = "test:feeds"          # sim.crawls.cluster_crawl's "test:{spider}"
SPEED = 7200.0                 # simulated seconds per real second: two hours


def start(redis: RedisServer, web: Server, proxy: CallbackProxy, port: int, tmp: Path, name: str,
          seconds: float) -> subprocess.Popen:
    settings = {"EXTENSIONS": {"scrapy_whittle.scrapy.websub.WebSubSubscriber": 500},
                "WHITTLE_WEBSUB_CALLBACK": proxy.url,
                "WHITTLE_WEBSUB_LISTEN": f"127.0.0.1:{port}"}
    return spawn([sys.executable, "-m", "sim.crawls.cluster_crawl", redis.url, web.url,
                  str(N_FEEDS), str(tmp / f"{name}.jsonl"), str(seconds),
                  json.dumps(settings)], log=tmp / f"{name}.log", cwd=ROOT)


def results(tmp: Path, name: str) -> tuple[list[dict], dict]:
    """The items process ``name`` emitted and its ``whittle/`` stats (its last line)."""
    lines = [json.loads(line) for line in (tmp / f"{name}.jsonl").read_text().splitlines()]
    stats = lines[-1]["stats"] if lines and "stats" in lines[-1] else {}
    return [line for line in lines if "entry_id" in line], stats


def hub_totals(web: Server) -> dict:
    with urllib.request.urlopen(f"{web.url}/stats.json", timeout=10) as response:
        return json.loads(response.read())["hub"]


def subscriptions(redis: RedisServer) -> dict:
    """callback key -> the subscription in Redis."""
    with redis.client() as client:
        raw = client.hgetall(redis.keys(PREFIX).websub)
    return {k.decode(): decode(v)[0] for k, v in raw.items()}


def stopped(proc: subprocess.Popen, tmp: Path, name: str) -> None:
    proc.wait(90)
    log = (tmp / f"{name}.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def hub_web(hub: str) -> Server:
    return Server("--scenario", "news-mix", "--n", str(N_FEEDS), "--speed", str(SPEED),
                  "--seed", "5", "--hub", hub)


@pytest.fixture
def faulty_hub():
    """A hub that delivers every entry (a third twice, a fifth badly signed) until 12 s of
    the run, so that no delivery reaches a process as it closes."""
    web = hub_web(f"loss=0,duplicate=0.3,bad_signature=0.2,down_at={12 * SPEED:g}")
    yield web
    web.stop()


@pytest.fixture
def good_hub():
    web = hub_web("loss=0")
    yield web
    web.stop()


def test_two_processes_one_subscription_per_topic_no_entry_twice(redis_server, faulty_hub,
                                                                  tmp_path):
    redis, web = redis_server, faulty_hub
    ports = [free_port(), free_port()]
    proxy = CallbackProxy(ports, mirror=True)
    try:
        procs = [start(redis, web, proxy, port, tmp_path, f"w{i}", 18)
                 for i, port in enumerate(ports)]
        for i, proc in enumerate(procs):
            stopped(proc, tmp_path, f"w{i}")
        hub = hub_totals(web)
    finally:
        proxy.stop()
    runs = [results(tmp_path, f"w{i}") for i in range(2)]
    items = [item for found, _ in runs for item in found]
    stats = [s for _, s in runs]
    print({"hub": hub, "processes": [{k.split("/", 1)[1]: v for k, v in s.items()
                                      if "push" in k or "websub" in k} for s in stats]})
    # one subscription per pushing source: asked once, verified by whichever process the
    # verification reached
    assert hub["subscribed"] == hub["active_subscriptions"] == hub["pushing_sources"] > 0
    assert sum(s.get("whittle/websub/subscribe_requests", 0) for s in stats) == \
        hub["pushing_sources"]
    assert sum(s.get("whittle/websub/verified", 0) for s in stats) == hub["subscribed"]
    assert len(subscriptions(redis)) == hub["pushing_sources"]
    # every delivery reached both processes; each took its good ones, dropped the badly
    # signed ones and found the rest received already (by the other process, or an identical
    # re-send of the hub's)
    assert hub["delivered"] > 0 and hub["bad_signatures"] > 0 and hub["duplicates"] > 0
    for port, s in zip(ports, stats, strict=True):
        assert proxy.answered[port] + proxy.missed[port] == hub["delivered"]
        bad, taken = s.get("whittle/errors/push_signature", 0), s["whittle/websub/deliveries"]
        assert bad + taken + s.get("whittle/push/repeated", 0) == proxy.answered[port]
        # (a process still starting when the first deliveries came missed them)
        assert hub["bad_signatures"] - proxy.missed[port] <= bad <= hub["bad_signatures"]
    missed = sum(proxy.missed.values())
    assert missed < hub["delivered"] / 10
    # each good delivery reaches the planner once, however many processes received it: at
    # most once, and at least once unless it was the hub's duplicate or both missed it
    good = hub["delivered"] - hub["bad_signatures"]
    taken = sum(s["whittle/websub/deliveries"] for s in stats)
    learnt = sum(s.get("whittle/planner/push/deliveries", 0) for s in stats)
    assert learnt == taken
    assert good - hub["duplicates"] - missed <= learnt <= good
    assert sum(s.get("whittle/push/repeated", 0) for s in stats) >= good - missed
    # no entry emitted twice across the processes, though every delivery reached both
    emitted = Counter((item["source"], item["entry_id"]) for item in items)
    assert max(emitted.values()) == 1
    pushed = sum(s.get("whittle/push/new_items", 0) for s in stats)
    assert pushed > 0
    assert sum(s.get("whittle/planner/push/new_items", 0) for s in stats) == pushed
    assert not [k for s in stats for k in s
                if k.startswith("whittle/errors/") and k != "whittle/errors/push_signature"]


def test_subscriptions_survive_a_kill_of_every_process(redis_server, good_hub, tmp_path):
    redis, web = redis_server, good_hub
    ports = [free_port(), free_port()]
    proxy = CallbackProxy(ports, mirror=True)
    try:
        first = [start(redis, web, proxy, port, tmp_path, f"a{i}", 120)
                 for i, port in enumerate(ports)]
        pushers = wait_for(lambda: hub_totals(web)["pushing_sources"], timeout=30)

        def all_active() -> bool:
            subs = subscriptions(redis)
            return len(subs) == pushers and {s.state for s in subs.values()} == {ACTIVE}

        wait_for(all_active, timeout=60, alive=first[0],
                 what="every pushing source's subscription active in Redis")
        before = {k: (s.secret, s.topic) for k, s in subscriptions(redis).items()}
        subscribed = hub_totals(web)["subscribed"]
        for proc in first:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        second = [start(redis, web, proxy, port, tmp_path, f"b{i}", 7)
                  for i, port in enumerate(ports)]
        for i, proc in enumerate(second):
            stopped(proc, tmp_path, f"b{i}")
        hub = hub_totals(web)
    finally:
        proxy.stop()
    stats = [results(tmp_path, f"b{i}")[1] for i in range(2)]
    # the same callbacks and secrets, nothing asked of the hub again
    assert {k: (s.secret, s.topic) for k, s in subscriptions(redis).items()} == before
    assert hub["subscribed"] == subscribed == pushers
    assert sum(s.get("whittle/websub/subscribe_requests", 0) for s in stats) == 0
    # the deliveries to the restored callbacks are taken
    assert sum(s.get("whittle/push/new_items", 0) for s in stats) > 0
    assert all(s.get("whittle/errors/push_unknown_callback", 0) == 0 for s in stats)


def test_the_cluster_websub_benchmark_measures_both_runs():
    """``sim.bench.cluster_websub``, short: the pushing sources' polls and delays are counted
    in both runs, only the hub's run pushes, one subscription per pushing source."""
    args = ["--feeds", "20", "--budget", "4", "--seconds", "6", "--warmup", "2", "--json"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    report = json.loads(out.getvalue())
    hub, plain = report["runs"]["hub"], report["runs"]["no-hub"]
    assert report["pushers"] == 10
    assert plain["pushed_items"] == plain["subscribe_requests"] == 0 and plain["hub"] is None
    assert hub["subscribe_requests"] == hub["hub"]["subscribed"] == report["pushers"]
    assert hub["pushed_items"] > 0 and sum(hub["deliveries_taken"]) > 0
    # the planner learns the deliveries taken (those taken as the run ends may go unlearnt)
    assert 0 < hub["pushes_learnt"] <= sum(hub["deliveries_taken"])
    assert hub["twice"] == plain["twice"] == 0
    assert plain["pusher_polls"] + plain["other_polls"] > 0
    assert hub["pusher_polls_vs_no_hub"] == hub["pusher_polls"] / max(plain["pusher_polls"], 1)
    # the crawl's own latency on the real clock: every pushed item of the window matched to
    # the delivery that brought it
    latency, pushed = hub["latency_ms"], hub["real_delay_pushed_s"]
    assert hub["unmatched_pushed_items"] == 0
    assert latency["count"] == pushed["count"] == hub["to_process_ms"]["count"] > 0
    assert 0 < latency["median"] <= latency["p90"] <= latency["max"] < math.inf
    assert hub["to_process_ms"]["max"] <= latency["max"]
    # the hub's drawn delays (uniform up to 300 s) in seconds, plus that latency
    assert 10 < pushed["max"] <= 300 + latency["max"] / 1000
    assert plain["latency_ms"]["count"] == 0 and plain["real_delay_s"]["count"] > 0


def test_a_pushed_item_is_matched_to_the_delivery_that_brought_it():
    """The last delivery of its entry that reached the proxy before the process received it;
    a polled item keeps its simulated delay; a pushed item with no such delivery is counted."""
    run = {"received": [(100.0, "3:7", "40.0"), (100.5, "3:7", "90.0"), (103.0, "3:7", "9.0"),
                        (100.2, None, None)]}
    items = [{"pushed": True, "link": "http://w/item/3/7", "discovered_at": 101.0,
              "piped_at": 101.25, "delay": 1.0},
             {"pushed": True, "link": "http://w/item/3/8", "discovered_at": 101.0,
              "piped_at": 101.5, "delay": 1.0},
             {"pushed": False, "link": "http://w/item/3/9", "discovered_at": 99.0,
              "piped_at": 99.0, "delay": 0.5}]
    out = real_clock(run, items, argparse.Namespace(speed=3600.0))
    assert out["unmatched_pushed_items"] == 1
    assert out["latency_ms"]["count"] == 1
    assert out["latency_ms"]["median"] == pytest.approx(750.0)
    assert out["to_process_ms"]["median"] == pytest.approx(500.0)
    assert out["real_delay_pushed_s"]["median"] == pytest.approx(90.75)
    assert sorted([out["real_delay_s"]["median"], out["real_delay_s"]["max"]]) == \
        pytest.approx([(90.75 + 1800.0) / 2, 1800.0])
