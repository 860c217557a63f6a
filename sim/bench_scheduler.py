"""Cost of a crawl decision in WhittleScheduler vs a request in Scrapy's default scheduler.

    python -m sim.bench_scheduler --n 100000 [--budget 1000] [--epochs 5] [--policy oracle]

WhittleScheduler side: N news-mix sources, the real scheduler object (no network), a clock
advanced one epoch per ``budget`` crawls; one crawl = ``next_request()`` (policy selection
amortised over the epoch, politeness mask, request building) + the single-crawl
``Observation`` the middleware sends to ``policy.observe``. Scrapy side: the default
``scrapy.core.scheduler.Scheduler`` (memory queues, dupefilter) on N distinct requests,
``enqueue_request`` + ``next_request``. Both measured in this process, one after the other;
prints microseconds per crawl / per request and their ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scrapy import Request, Spider
from scrapy.core.scheduler import Scheduler
from scrapy.utils.test import get_crawler

from scrapy_whittle.observation import Observation
from scrapy_whittle.scheduler import WhittleScheduler
from scrapy_whittle.settings import WhittleConfig
from scrapy_whittle.sources import SourceSpec
from sim.scenarios import make_scenario


def _crawler(settings=None):
    """A crawler with an engine stand-in holding a real Downloader: Scrapy's default
    DownloaderAwarePriorityQueue reads the downloader's slots."""
    from types import SimpleNamespace

    from scrapy.core.downloader import Downloader

    crawler = get_crawler(Spider, settings)
    crawler.engine = SimpleNamespace(downloader=Downloader(crawler), _slot=None)
    return crawler


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def bench_whittle(n: int, budget: int, epochs: int, policy: str, hosts: int = 1000) -> float:
    sc = make_scenario("news-mix", n=n, seed=0)
    urls = [f"http://h{i % hosts}.example/feed/{i}.xml" for i in range(n)]
    period = 3600.0
    oracle = None
    if policy == "oracle":
        spu = 3600.0      # news-mix: one hour per unit, rates per second
        p = sc.params
        oracle = {u: (p.rate[i] / spu, p.mean_utility[i], p.decay[i] / spu)
                  for i, u in enumerate(urls)}
    config = WhittleConfig.from_settings({
        "WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": period, "WHITTLE_POLICY": policy,
        "WHITTLE_ORACLE_PARAMS": oracle, "WHITTLE_LOGSTATS_INTERVAL": 0, "WHITTLE_STATE": False})
    crawler = _crawler({"WHITTLE_BUDGET": budget})
    clock = _Clock()
    sched = WhittleScheduler(Scheduler.from_crawler(crawler), config,
                             sources=[SourceSpec(u) for u in urls], oracle=oracle,
                             crawler=crawler, stats=crawler.stats, clock=clock)
    sched.open(Spider("bench"))
    crawls, elapsed = 0, 0.0
    for _ in range(epochs):
        t = time.perf_counter()
        while True:
            request = sched.next_request()
            if request is None:
                break
            sid = request.meta["whittle_source_id"]
            sched.observe(Observation(
                epoch=sched.epoch, sources=[sid], time=[clock.now - sched.t0], new_items=[1],
                reward=[1.0], item_offsets=[0, 1], item_published=[clock.now - sched.t0 - 60],
                item_value=[np.nan]))
            sched.crawl_done(sid, when=clock.now, ok=True)
            crawls += 1
        elapsed += time.perf_counter() - t
        clock.now += period
    sched.close("finished")
    return 1e6 * elapsed / max(crawls, 1)


def bench_scrapy(n: int, hosts: int = 1000) -> float:
    crawler = _crawler()
    sched = Scheduler.from_crawler(crawler)
    sched.open(Spider("bench"))
    requests = [Request(f"http://h{i % hosts}.example/page/{i}") for i in range(n)]
    t = time.perf_counter()
    for r in requests:
        sched.enqueue_request(r)
    while sched.next_request() is not None:
        pass
    elapsed = time.perf_counter() - t
    sched.close("finished")
    return 1e6 * elapsed / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.bench_scheduler")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--budget", type=int, default=None, help="crawls per epoch (1%% of n)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--hosts", type=int, default=1000, help="distinct hosts (download slots)")
    ap.add_argument("--scrapy-requests", type=int, default=20_000,
                    help="requests through Scrapy's scheduler (its cost grows with hosts)")
    ap.add_argument("--policy", default="oracle",
                    help="oracle, whittle (estimated parameters), round_robin, ...")
    args = ap.parse_args(argv)
    from scrapy.utils.reactor import install_reactor

    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
    budget = args.budget or max(1, args.n // 100)
    scrapy_us = bench_scrapy(min(args.n, args.scrapy_requests), args.hosts)
    whittle_us = bench_whittle(args.n, budget, args.epochs, args.policy, args.hosts)
    print(f"N = {args.n} sources on {args.hosts} hosts, budget = {budget} crawls per epoch, "
          f"policy {args.policy}")
    print(f"Scrapy default scheduler: {scrapy_us:8.2f} us per request (enqueue + next_request)")
    print(f"WhittleScheduler:         {whittle_us:8.2f} us per crawl (decision + observe)")
    print(f"ratio: {whittle_us / scrapy_us:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
