"""A sitemap index's children in a cluster crawl of real Scrapy processes
(``sim.crawls.cluster_crawl``) on a real redis-server, against ``sim.serve --kinds mix
--index-rotate``: the index lists one of its two children at a time and swaps them every
three real seconds. The children the index names are registered by the workers' spiders
(``FeedSpider``) and become the cluster's sources, once each; a child the index has not
listed for three of its fetches retires (its row in Redis says so), and after the planner
is killed with SIGKILL and a new process joins, the new planner brings it back when the
index lists it again."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from scrapy_whittle.cluster import index_children
from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.state import RedisStateStore
from tests.cluster.test_cluster import PREFIX, log, planner, results
from tests.processes import spawn
from tests.scrapy.conftest import ROOT, Server
from tests.waiting import wait_for

RELISTED = "listed again by its sitemap index"
N = 16                      # sources 7 and 15 of the web are behind its sitemap index
ROTATE = 30.0               # scenario hours between two swaps: 3 real s at speed 36,000


def start(redis, web: Server, tmp: Path, name: str) -> object:
    sources = [f"{web.url}/sitemap_index.xml"] + [f"{web.url}/feed/{i}.xml" for i in range(4)]
    settings = {"WHITTLE_SOURCES": sources, "WHITTLE_POLICY": "round_robin",
                "WHITTLE_SITEMAP_CHILD_MISSES": 3}
    return spawn([sys.executable, "-m", "sim.crawls.cluster_crawl", redis.url, web.url, str(N),
                  str(tmp / f"{name}.jsonl"), "300", json.dumps(settings)],
                 log=tmp / f"{name}.log", cwd=ROOT)


@pytest.mark.slow
def test_children_retire_and_come_back_across_a_killed_planner(redis_server, tmp_path):
    web = Server("--scenario", "news-mix", "--n", str(N), "--speed", "36000", "--latency",
                 "0.02", "--seed", "3", "--kinds", "mix", "--index-rotate", str(ROTATE))
    client = redis_server.client()
    keys = Keys(PREFIX)
    procs = {}

    def rows() -> dict[int, tuple]:
        return {child: rest for child, *rest in index_children.saved_rows(client, keys)}

    try:
        procs = {name: start(redis_server, web, tmp_path, name) for name in ("w0", "w1")}
        wait_for(lambda: any(d for _p, _m, _t, d in rows().values()), timeout=90,
                 what="a child retired for not being listed")
        victim = planner(tmp_path, list(procs))
        assert victim is not None
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait(30)
        procs["w2"] = start(redis_server, web, tmp_path, "w2")       # a process joins
        survivors = [name for name in procs if name != victim]
        # a survivor's planner brings a retired child back when the index lists it again
        # (a crawl of a retiring child already in flight may revive it first, as its new
        # entries would in one process: it retires again at the next run of misses)
        heir = wait_for(lambda: next((n for n in survivors if RELISTED in log(tmp_path, n)),
                                     None),
                        timeout=90, what="a retired child listed again by a new planner")
        for name in survivors:
            procs[name].send_signal(signal.SIGTERM)
        for name in survivors:
            procs[name].wait(120)
        urls = RedisStateStore(client, keys).urls()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        client.close()
        web.stop()
    children = sorted(f"{web.url}/sitemap/{i}.xml.gz" for i in (7, 15))
    assert sorted(u for u in urls if "/sitemap/" in u) == children        # each once
    _items, stats = results(tmp_path, survivors)
    assert stats[heir].get("whittle/planner/sources/relisted", 0) >= 1, stats[heir]
    for name in survivors:
        assert "Traceback" not in log(tmp_path, name)
