"""The crawler's scheduling side at scale, against Scrapy's default scheduler, in one run.

    python -m sim.bench scheduler --n 100000 [--policy whittle,round_robin,...|all]
                                  [--budget 1000] [--epochs 5] [--hosts 1000] [--state]

Per crawl (every policy asked for): the real ``WhittleScheduler`` over the re-crawl service, N
sources on ``--hosts`` hosts, a simulated clock advanced one epoch at a time; one crawl =
``next_request()`` (the policy's selection amortised over the epoch, the politeness mask, the
request) + what the middleware hands the service for a fetched feed (``feed_fetched``: a
window of 20 entries, hashed and looked up in the entry memory, one or two of them new at a
re-crawl, all 20 at a source's first crawl; the policy learns in batches). After one epoch
of warm-up (``--warmup``) most crawls measured are first crawls of their source; with
``--warmup`` above N / budget epochs every source has been crawled before (the steady state
of a long crawl). Against it, Scrapy's default ``scrapy.core.scheduler.Scheduler``
(memory queues, dupefilter, ``DownloaderAwarePriorityQueue`` over the same hosts): per
re-crawl, a new ``Request`` (as a FIFO re-crawling spider yields one per re-crawl, and as the
WhittleScheduler makes one), ``enqueue_request`` + ``next_request``. Both in this process,
one after the other: the ratio is what the report is about. "Of which deciding" is the
policy's share of a crawl: its selections (and the state checks before them) and its batch
learning, by the service's own timers (``whittle/decision/<policy>/seconds``), also per
epoch: a cost fixed per epoch weighs on small crawls (100 crawls an epoch at 10^4).

``--state`` (first policy only) adds what a crawl of that size costs to keep: start-up from a
sources file of N URLs to the first request, process RSS and bytes per source after one
epoch and after N / budget more epochs (``--fill``: as many crawls as sources; the policy
decides which, and the learned default revisits its best sources, so it reaches about two
thirds of them), the incremental checkpoint after
one epoch's crawls, the first (full) checkpoint, and a restore from the JOBDIR.
"""

from __future__ import annotations

import json
import math
import resource
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from scrapy import Request, Spider
from scrapy.core.scheduler import Scheduler
from scrapy.utils.test import get_crawler

from scrapy_whittle.core.policies import POLICIES
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.scrapy.meta import META_CRAWL
from scrapy_whittle.scrapy.scheduler import WhittleScheduler
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.state.gc_pause import thaw
from sim.bench import harness
from sim.web.scenarios import make_scenario

WINDOW = 20
#: the seconds each answer took, handed to the service as the middleware hands Scrapy's
#: download_latency (the hosts' latency watch is in what is measured)
LATENCY = 0.05
#: not benchmarked at scale: dqn (a network over arms, built for tens of groups) and lspe (the
#: Allerton 2019 critic is quadratic in N); static, greedy and whittle need true parameters.
EXCLUDED = {"dqn": "network over arms", "lspe": "critic quadratic in N"}


def _crawler(settings=None):
    """A crawler with an engine stand-in holding a real Downloader: Scrapy's default
    DownloaderAwarePriorityQueue reads the downloader's slots."""
    from scrapy.core.downloader import Downloader

    crawler = get_crawler(Spider, settings)
    crawler.engine = SimpleNamespace(downloader=Downloader(crawler), spider=None,
                                     crawl=lambda request: None)
    return crawler


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Feeds:
    """Feed windows for the benchmark: source i shows its newest 20 entries; a crawl finds
    one or two new ones."""

    def __init__(self) -> None:
        self.seq: dict[int, int] = {}

    def entries(self, sid: int, now: float) -> list[FeedEntry]:
        top = self.seq.get(sid, WINDOW - 1) + 1 + (sid + int(now)) % 2
        self.seq[sid] = top
        return [FeedEntry(key=f"https://h{sid % 997}.example/{sid}/{k}", title=None,
                          link=None, published=now - 60.0 * (top - k), engagement=None)
                for k in range(top, top - WINDOW, -1)]


def _settings(n: int, budget: int, policy: str, urls, clock, sc, extra=None) -> dict:
    settings = {"WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": 3600.0, "WHITTLE_POLICY": policy,
                "WHITTLE_SOURCES": urls, "WHITTLE_LOGSTATS_INTERVAL": 0,
                "WHITTLE_STATE": False, "WHITTLE_CLOCK": clock,
                "DOWNLOADER_MIDDLEWARES": {"scrapy_whittle.FeedObserverMiddleware": 540}}
    if policy in ("oracle", "greedy", "static", "whittle-oracle", "diurnal-oracle"):
        spu = 3600.0      # news-mix: one hour per unit, rates per second
        p = sc.params
        settings["WHITTLE_ORACLE_PARAMS"] = {
            u: {"rate": p.rate[i] / spu, "mean_utility": p.mean_utility[i],
                "decay": p.decay[i] / spu} for i, u in enumerate(urls)}
        if policy == "diurnal-oracle":
            # a daily rhythm for each source (hourly bins, 3:1 day/night, 24 time zones; the
            # cost of the policy does not depend on the shape)
            shapes = [{"bins": [2.0 + math.cos(2 * math.pi * (h - z) / 24) for h in range(24)],
                       "bin_seconds": 3600.0} for z in range(24)]
            for i, u in enumerate(urls):
                settings["WHITTLE_ORACLE_PARAMS"][u]["profile"] = shapes[i % 24]
    settings.update(extra or {})
    return settings


def _open(settings: dict) -> WhittleScheduler:
    crawler = _crawler(settings)
    sched = WhittleScheduler.from_crawler(crawler)
    sched.open(Spider("bench"))
    return sched


def _crawl_epoch(sched: WhittleScheduler, clock: SimulatedClock, feeds: Feeds,
                 sent: list[float] | None = None) -> tuple[int, float]:
    """Hand out and 'fetch' every crawl of the current epoch; returns how many, and the
    seconds spent in the scheduler and the service (not in making up the feeds). ``sent``:
    the simulated instants the crawls left at are appended to it."""
    service, crawls, spent = sched.service, 0, 0.0
    end = clock.now() + service.config.period
    while True:
        t = time.perf_counter()
        request = sched.next_request()
        spent += time.perf_counter() - t
        if request is None:
            # the epoch's next decision step (WHITTLE_STEP), if it has one before its end
            if service.wake_at >= end - 1e-6:
                break
            clock.advance_to(service.wake_at)
            continue
        crawl = request.meta[META_CRAWL]
        if sent is not None:
            sent.append(clock.now())
        entries = feeds.entries(crawl.source, clock.now())
        t = time.perf_counter()
        # as the middleware does: the answer's latency (Scrapy's download_latency) with it
        service.feed_fetched(crawl, entries, latency=LATENCY)
        spent += time.perf_counter() - t
        crawls += 1
    t = time.perf_counter()
    service.flush()
    spent += time.perf_counter() - t
    clock.advance_to(end)
    return crawls, spent


def minute_peak(sent: list[float], start: float, end: float, budget: float,
                period: float) -> float:
    """The most crawls that left in one minute of [start, end), over the budget's mean
    rate per minute (1: perfectly paced; 60 at one plan an hour leaving at once)."""
    if not sent or end <= start:
        return math.nan
    minutes = np.floor((np.asarray(sent) - start) / 60.0).astype(np.int64)
    return float(np.bincount(minutes).max()) / (budget * 60.0 / period)


def bench_whittle(n: int, budget: int, epochs: int, policy: str, hosts: int,
                  warmup: int = 1, extra: dict | None = None) -> tuple[float, float, float]:
    """Microseconds per crawl (decision + request + feed_fetched + batched learning), and
    of them the policy's: its selections (with the state checks before them) and its batch
    learning, as the service's ``decision/<policy>/seconds`` stat times them (the rest is
    the path every crawl takes whatever the policy); and the pacing of the measured epochs
    (``minute_peak``)."""
    sc = make_scenario("news-mix", n=n, seed=0)
    urls = [f"http://h{i % hosts}.example/feed/{i}.xml" for i in range(n)]
    clock = SimulatedClock(start=1_700_000_000.0)
    sched = _open(_settings(n, budget, policy, urls, clock, sc, extra))
    feeds = Feeds()
    for _ in range(warmup):
        _crawl_epoch(sched, clock, feeds)
    timer = f"decision/{sched.service.config.policy}/seconds"
    crawls, elapsed, deciding = 0, 0.0, -sched.service.stats.get(timer, 0.0)
    sent: list[float] = []
    start = clock.now()
    for _ in range(epochs):
        done, spent = _crawl_epoch(sched, clock, feeds, sent)
        crawls += done
        elapsed += spent
    deciding += sched.service.stats.get(timer, 0.0)
    pacing = minute_peak(sent, start, clock.now(), budget, sched.service.config.period)
    sched.service.close()
    del sched
    thaw()                   # the next crawl measured starts as in a fresh process
    return 1e6 * elapsed / max(crawls, 1), 1e6 * deciding / max(crawls, 1), pacing


def bench_scrapy(n: int, hosts: int = 1000) -> float:
    """Microseconds per re-crawl through Scrapy's default scheduler: the request (a re-crawl
    needs a new one, as a FIFO re-crawling spider yields it), ``enqueue_request`` and
    ``next_request``."""
    crawler = _crawler()
    sched = Scheduler.from_crawler(crawler)
    sched.open(Spider("bench"))
    urls = [f"http://h{i % hosts}.example/page/{i}" for i in range(n)]
    t = time.perf_counter()
    for url in urls:
        sched.enqueue_request(Request(url, dont_filter=True))
    while sched.next_request() is not None:
        pass
    elapsed = time.perf_counter() - t
    sched.close("finished")
    return 1e6 * elapsed / n


def bench_state(n: int, budget: int, policy: str, hosts: int, fill: bool) -> dict:
    """Start-up, memory, checkpoints and restore of a crawl of N sources with JOBDIR."""
    sc = make_scenario("news-mix", n=n, seed=0)
    tmp = Path(tempfile.mkdtemp(prefix="bench-state-"))
    try:
        urls = [f"http://h{i % hosts}.example/feed/{i}.xml" for i in range(n)]
        sources = tmp / "feeds.txt"
        sources.write_text("\n".join(urls) + "\n")
        clock = SimulatedClock(start=1_700_000_000.0)
        extra = {"WHITTLE_STATE": True, "JOBDIR": str(tmp / "job"),
                 "WHITTLE_CHECKPOINT_INTERVAL": 1e9}
        base_rss = _rss_mb()
        t = time.perf_counter()
        sched = _open(_settings(n, budget, policy, str(sources), clock, sc, extra))
        first = sched.next_request()
        startup = time.perf_counter() - t
        service, feeds = sched.service, Feeds()
        service.feed_fetched(first.meta[META_CRAWL], feeds.entries(0, clock.now()))
        _crawl_epoch(sched, clock, feeds)
        t = time.perf_counter()
        cp = service.prepare_checkpoint()
        service.store.write(cp)
        full_checkpoint = time.perf_counter() - t
        _crawl_epoch(sched, clock, feeds)
        t = time.perf_counter()
        cp = service.prepare_checkpoint()
        prepared = time.perf_counter() - t
        service.store.write(cp)
        checkpoint = time.perf_counter() - t
        rows = cp.n_changed
        rss_epoch = _rss_mb()
        out = {"startup_s": startup, "full_checkpoint_s": full_checkpoint,
               "checkpoint_s": checkpoint, "checkpoint_prepare_s": prepared,
               "checkpoint_rows": rows, "rss_mb_after_epoch": rss_epoch,
               "bytes_per_source_after_epoch": (rss_epoch - base_rss) * 2**20 / n}
        if fill:
            for _ in range(-(-n // budget)):
                _crawl_epoch(sched, clock, feeds)
            rss_full = _rss_mb()
            out.update(rss_mb_filled=rss_full,
                       bytes_per_source_filled=(rss_full - base_rss) * 2**20 / n,
                       sources_crawled=int((service.state.crawls > 0).sum()))
        service.close()
        del sched, service
        t = time.perf_counter()
        again = _open(_settings(n, budget, policy, str(sources), clock, sc, extra))
        out["restore_s"] = time.perf_counter() - t
        out["restored_sources"] = len(again.service.sources)
        again.service.close()
        out["store_mb"] = sum(p.stat().st_size for p in (tmp / "job").iterdir()) / 2**20
        out["peak_rss_mb"] = _peak_rss_mb()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser("scheduler", __doc__)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--budget", type=int, default=None, help="crawls per epoch (1%% of n)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=1000, help="distinct hosts (download slots)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="epochs crawled before measuring (N / budget + 1: every source crawled "
                         "before, the steady state)")
    ap.add_argument("--scrapy-requests", type=int, default=20_000,
                    help="requests through Scrapy's scheduler (its cost grows with hosts)")
    ap.add_argument("--policy", default="whittle",
                    help="comma-separated WHITTLE_POLICY values, or 'all' (every policy a "
                         "Scrapy crawl can use, dqn and lspe excepted)")
    ap.add_argument("--state", action="store_true",
                    help="also measure start-up, memory, checkpoints and restore")
    ap.add_argument("--fill", action="store_true",
                    help="with --state: crawl N / budget more epochs (as many crawls as sources, "
                         "where the policy chooses) before measuring memory again")
    ap.add_argument("--dedup", choices=("entry", "link"), default=None,
                    help="WHITTLE_DEDUP (default: the setting's default); the entries' ids are "
                         "URLs, so 'link' computes their story keys")
    ap.add_argument("--step", type=float, default=None,
                    help="WHITTLE_STEP in seconds (default: the setting's default)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    from scrapy.utils.reactor import install_reactor

    install_reactor("twisted.internet.asyncioreactor.AsyncioSelectorReactor")
    budget = args.budget or max(1, args.n // 100)
    if args.policy == "all":
        names = ["whittle", "oracle", "thompson-whittle", "round_robin", "uniform", "nutch",
                 "miniflux", "thompson", "greedy", "static", "diurnal-whittle",
                 "diurnal-oracle"]
    else:
        names = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES and p not in ("whittle", "oracle")]
    if unknown:
        ap.error(f"unknown policies: {', '.join(unknown)}")
    scrapy_us = bench_scrapy(min(args.n, args.scrapy_requests), args.hosts)
    rows = {}
    for name in names:
        if name in EXCLUDED:
            rows[name] = {"excluded": EXCLUDED[name]}
            continue
        extra = {"WHITTLE_DEDUP": args.dedup} if args.dedup else {}
        if args.step is not None:
            extra["WHITTLE_STEP"] = args.step
        us, deciding, pacing = bench_whittle(args.n, budget, args.epochs, name, args.hosts,
                                             args.warmup, extra)
        rows[name] = {"us_per_crawl": us, "ratio": us / scrapy_us,
                      "deciding_us_per_crawl": deciding,
                      "deciding_ms_per_epoch": 1e-3 * deciding * budget,
                      "minute_peak": pacing}
    report = {"n": args.n, "hosts": args.hosts, "budget": budget, "epochs": args.epochs,
              "warmup": args.warmup, "step": args.step,
              "scrapy_us_per_request": scrapy_us, "policies": rows}
    if args.state:
        report["state"] = bench_state(args.n, budget, names[0], args.hosts, args.fill)
    report["peak_rss_mb"] = _peak_rss_mb()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"N = {args.n} sources on {args.hosts} hosts, budget = {budget} crawls per epoch, "
          f"{args.epochs} epochs measured after {args.warmup} of warm-up")
    print(f"Scrapy default scheduler: {scrapy_us:8.2f} us per request (enqueue + next_request)")
    print("policy              us/crawl   ratio to Scrapy's   of which deciding: us/crawl "
          "(ms/epoch)   busiest minute / mean")
    for name, row in rows.items():
        if "excluded" in row:
            print(f"{name:18s}  (not measured: {row['excluded']})")
        else:
            print(f"{name:18s}  {row['us_per_crawl']:8.2f}   {row['ratio']:.3f}"
                  f"               {row['deciding_us_per_crawl']:6.2f} "
                  f"({row['deciding_ms_per_epoch']:.2f})"
                  f"{'':12s}{row['minute_peak']:.2f}")
    if args.state:
        s = report["state"]
        print(f"state ({names[0]}): start-up {s['startup_s']:.2f} s (sources file to first "
              f"request); first checkpoint (all sources) {s['full_checkpoint_s']:.2f} s; "
              f"checkpoint after one epoch ({s['checkpoint_rows']} sources) "
              f"{s['checkpoint_s']:.3f} s (prepared on the reactor in "
              f"{s['checkpoint_prepare_s']:.3f} s); restore {s['restore_s']:.2f} s; "
              f"store {s['store_mb']:.0f} MB")
        print(f"memory: RSS {s['rss_mb_after_epoch']:.0f} MB after one epoch "
              f"({s['bytes_per_source_after_epoch']:.0f} bytes/source)", end="")
        if "bytes_per_source_filled" in s:
            print(f", {s['rss_mb_filled']:.0f} MB once {s['sources_crawled']} sources "
                  f"were crawled ({s['bytes_per_source_filled']:.0f} bytes/source)", end="")
        print(f"; peak RSS {report['peak_rss_mb']:.0f} MB")
    return 0
