"""Feeds per second: bare Scrapy against the whole scrapy-whittle stack, on the same feeds.

    python -m sim.bench throughput --feeds 1000 --seconds 20 [--json]

Starts ``sim.serve --realistic`` (news-mix, real-sized entries, gzip, ``--window`` entries
per feed) on a free 127.0.0.1 port, plus two hostile feeds (``/bad/many``: 20,000 entries;
``/bad/longtitle``: a 1 MB title), then runs, one after the other, each in its own process
for ``--seconds`` seconds with ``--concurrency`` requests in flight:

* **bare**: a Scrapy spider that downloads the same URLs round-robin and does nothing else;
* **stack**: ``FeedSpider`` with the add-on (``WhittleScheduler``, ``FeedObserverMiddleware``:
  parsing, entry memory, observations, the learning Whittle policy; the add-on's
  ``CONCURRENT_ITEMS``), with a budget above what the machine can fetch and conditional GET
  off (every fetch is a full feed, as for bare).

For each it reports feeds fetched per second (after a warm-up of ``--warmup`` seconds), CPU
seconds per feed (the crawler's process and its parse workers), the largest event-loop stall
(a task that sleeps 10 ms and records how late it wakes up: a sampler, not a timed test),
and the peak RSS of the crawler and of its workers. ``--json`` prints one object with
``bare_per_s``, ``stack_per_s``, ``ratio``, ``max_stall_ms``, ``peak_rss_mb`` and the rest.
Also reported: the median parse time of a 40 KB, 50-entry realistic feed per parser, and the
load average (the machine is shared: compare the ratio, measured in one run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from sim.bench import harness
from sim.crawls.bare_scrapy import bare_settings, round_robin_spider
from sim.crawls.children import run_child as run_child_process
from sim.crawls.children import start_web
from sim.crawls.measure import cpu_with_children, process_cpu, time_callbacks


# -- the two crawls (run in a child process each) ------------------------------------------
def _crawl(mode: str, urls: list[str], seconds: float, concurrency: int, warmup: float,
           workers: int | None, parser: str | None, inline_max_bytes: int | None,
           warmup_max: float) -> dict:
    """One crawl; measured from the moment every URL has been fetched once (and at least
    ``warmup`` seconds have passed) for ``seconds`` seconds: the steady state, where a feed
    shows the entries published since its previous crawl rather than its whole window."""
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    settings = bare_settings(concurrency)
    feed_urls = set(urls)
    if mode == "bare":
        spidercls = round_robin_spider(urls, concurrency)
    else:
        from scrapy_whittle.scrapy.spiders import FeedSpider

        settings.update({
            "ADDONS": {"scrapy_whittle.Addon": 0},      # as the README's quick start
            "WHITTLE_SOURCES": urls, "WHITTLE_POLICY": "whittle",
            "WHITTLE_BUDGET": 100 * len(urls), "WHITTLE_PERIOD": 1.0,
            "WHITTLE_CONDITIONAL_GET": False, "WHITTLE_LOGSTATS_INTERVAL": 0,
            "WHITTLE_BACKOFF_BASE": 1.0, "WHITTLE_BACKOFF_MAX": 2.0,
        })
        if workers is not None:
            settings["WHITTLE_PARSE_WORKERS"] = workers
        if parser is not None:
            settings["WHITTLE_FEED_PARSER"] = parser
        if inline_max_bytes is not None:
            settings["WHITTLE_PARSE_INLINE_MAX_BYTES"] = inline_max_bytes
        spidercls = FeedSpider

    settings["CLOSESPIDER_TIMEOUT"] = warmup_max + seconds + 60   # a safety net only
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(spidercls)
    longest = time_callbacks()
    arrivals: list[float] = []
    body_bytes = [0]
    stalls: list[tuple[float, float]] = []
    seen: set[str] = set()
    per_url: dict[str, int] = {}
    state: dict = {"measure": None}

    def begin_measuring(now: float) -> None:
        state["measure"] = now
        state["cpu0"] = cpu_with_children()
        state["items0"] = crawler.stats.get_value("whittle/new_items", 0)
        state["crawls0"] = crawler.stats.get_value("whittle/crawls", 0)
        loop = asyncio.get_running_loop()
        loop.call_later(seconds, lambda: asyncio.ensure_future(
            crawler.engine.close_spider_async(reason="bench_done")))

    def received(response, request, spider):
        if request.url in feed_urls and response.status == 200:
            now = time.perf_counter()
            arrivals.append(now)
            body_bytes[0] += len(response.body)
            seen.add(request.url)
            per_url[request.url] = per_url.get(request.url, 0) + 1
            if state["measure"] is None and (
                    (len(seen) == len(feed_urls) and now >= state["t0"] + warmup)
                    or now >= state["t0"] + warmup_max):
                begin_measuring(now)

    async def sampler():
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(0.01)
            stalls.append((time.perf_counter(), loop.time() - t - 0.01))

    def opened(spider):
        state["t0"] = time.perf_counter()
        state["task"] = asyncio.ensure_future(sampler())

    def closed(spider):
        state["t1"] = time.perf_counter()
        state["cpu1"] = cpu_with_children()
        state["task"].cancel()

    crawler.signals.connect(received, signal=signals.response_received)
    crawler.signals.connect(lambda spider: longest.clear(), signal=signals.spider_opened)
    crawler.signals.connect(opened, signal=signals.spider_opened)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    process.crawl(crawler)
    process.start()
    t0, t1, m0 = state["t0"], state["t1"], state["measure"]
    if m0 is None:
        raise RuntimeError(f"{mode}: the warm-up never ended ({len(seen)} of "
                           f"{len(feed_urls)} feeds fetched)")
    counted = [a for a in arrivals if a > m0]
    lags = sorted(lag for when, lag in stalls if when > m0)
    stats = crawler.stats.get_stats()
    crawls = stats.get("whittle/crawls", 0) - state["crawls0"]
    return {
        "per_s": len(counted) / (t1 - m0), "fetched": len(counted),
        "warmup_s": m0 - t0, "cpu_ms_per_feed": 1000 * (state["cpu1"] - state["cpu0"])
        / max(1, len(counted)),
        "max_stall_ms": 1000 * (lags[-1] if lags else 0.0),
        "longest_callback_ms": 1000 * max((d for when, d in longest if when > m0), default=0),
        "warmup_longest_callback_ms": 1000 * max((d for when, d in longest if when <= m0),
                                                 default=0),
        "p99_stall_ms": 1000 * (lags[int(0.99 * (len(lags) - 1))] if lags else 0.0),
        "warmup_max_stall_ms": 1000 * max((lag for when, lag in stalls if when <= m0),
                                          default=0.0),
        "mean_body_kb": body_bytes[0] / max(1, len(arrivals)) / 1024,
        "new_items_per_crawl": (stats.get("whittle/new_items", 0) - state["items0"])
        / max(1, crawls),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "most_fetched": sorted(per_url.items(), key=lambda kv: -kv[1])[:3],
        "distinct_fetched": len(per_url),
        "whittle": {k[8:]: v for k, v in stats.items() if k.startswith("whittle/")
                    and ("errors" in k or "warnings" in k or k in ("whittle/crawls",))},
    }


# -- the driver -----------------------------------------------------------------------------
def parse_times(repeat: int = 200) -> dict[str, float]:
    """Median ms of parse_feed on one realistic 50-entry RSS feed, per parser."""
    from scrapy_whittle.feeds.parse import parse_feed
    from scrapy_whittle.feeds.parsers import PARSERS
    from sim.web.realistic import RealisticItems

    items = RealisticItems(0)
    parts = ['<?xml version="1.0" encoding="utf-8"?><rss version="2.0" xmlns:slash='
             '"http://purl.org/rss/1.0/modules/slash/" xmlns:dc="http://purl.org/dc/elements'
             '/1.1/"><channel><title>t</title><link>https://example.com/</link>'
             "<description>d</description>"]
    for k in range(50):
        head, tail = items.parts(0, k, "rss", f"https://example.com/a/{k}", f"urn:x:{k}",
                                 1.7e9 - 600 * k)
        parts += (head, str(k * 7), tail)
    body = ("".join(parts) + "</channel></rss>").encode()
    out = {"feed_kb": len(body) / 1024}
    for name in sorted(PARSERS):
        n = repeat if name == "feedparser-rs" else max(5, repeat // 20)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            feed = parse_feed(body, url="https://example.com/feed", now=1.8e9, parser=name)
            times.append(time.perf_counter() - t)
        assert len(feed.entries) == 50
        out[name] = 1000 * statistics.median(times)
    return out


def warm(urls: list[str]) -> None:
    """Fetch every feed once, so that neither crawl pays the server's first rendering."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    def get(url: str) -> None:
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(get, urls))


def run_child(mode: str, urls_file: str, args, warmup_max: float) -> dict:
    cmd = ["throughput", "--child", mode, "--urls", urls_file, "--seconds", str(args.seconds),
           "--concurrency", str(args.concurrency), "--warmup", str(args.warmup),
           "--warmup-max", str(warmup_max)]
    if args.workers is not None:
        cmd += ["--workers", str(args.workers)]
    if args.parser is not None:
        cmd += ["--parser", args.parser]
    if args.inline_max_bytes is not None:
        cmd += ["--inline-max-bytes", str(args.inline_max_bytes)]
    return run_child_process(*cmd, what=f"the {mode} crawl")


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser("throughput", __doc__)
    ap.add_argument("--feeds", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0,
                    help="seconds at least before measuring (and until every feed was "
                         "fetched once)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--speed", type=float, default=360.0,
                    help="simulated seconds per real second (sim.serve --speed); at 360 "
                         "a feed crawled every 10 s shows the entries of the last hour")
    ap.add_argument("--start", type=float, default=500.0,
                    help="virtual hours already elapsed when the server starts, so that "
                         "the feeds' windows are full (sim.serve --start)")
    ap.add_argument("--workers", type=int, default=None, help="WHITTLE_PARSE_WORKERS")
    ap.add_argument("--parser", default=None, help="WHITTLE_FEED_PARSER")
    ap.add_argument("--inline-max-bytes", type=int, default=None,
                    help="WHITTLE_PARSE_INLINE_MAX_BYTES")
    ap.add_argument("--no-hostile", action="store_true", help="leave out the hostile feeds")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=("bare", "stack"), help=argparse.SUPPRESS)
    ap.add_argument("--urls", help=argparse.SUPPRESS)
    ap.add_argument("--warmup-max", type=float, default=120.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        urls = json.loads(Path(args.urls).read_text())
        print(json.dumps(_crawl(args.child, urls, args.seconds, args.concurrency, args.warmup,
                                args.workers, args.parser, args.inline_max_bytes,
                                args.warmup_max)))
        return 0
    if args.feeds < 1 or args.seconds <= 0:
        ap.error("--feeds must be >= 1 and --seconds > 0")
    load0 = os.getloadavg()
    server, port = start_web("--n", str(args.feeds), "--realistic", "--window", str(args.window),
                             "--speed", str(args.speed), "--seed", "0", "--start", str(args.start))
    try:
        base = f"http://127.0.0.1:{port}"
        urls = [f"{base}/feed/{i}.xml" for i in range(args.feeds)]
        if not args.no_hostile:
            urls += [f"{base}/bad/many", f"{base}/bad/longtitle"]
        warm(urls[:args.feeds])                 # the server renders each item once, now
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(urls, fh)
        results, server_cpu = {}, {}
        warmup_max = 120.0
        for mode in ("bare", "stack"):
            cpu0 = process_cpu(server.pid)
            results[mode] = run_child(mode, fh.name, args, warmup_max)
            # the stack's policy may never fetch some feeds (budget above capacity: the
            # highest priorities first); it warms up as long as bare needed to see them all
            warmup_max = max(args.warmup, results[mode]["warmup_s"])
            server_cpu[mode] = 1000 * (process_cpu(server.pid) - cpu0) / max(
                1, results[mode]["fetched"])
        os.unlink(fh.name)
    finally:
        server.terminate()
        server.wait(10)
    bare, stack = results["bare"], results["stack"]
    report = {
        "feeds": args.feeds, "seconds": args.seconds, "concurrency": args.concurrency,
        "window": args.window, "hostile": not args.no_hostile,
        "bare_per_s": bare["per_s"], "stack_per_s": stack["per_s"],
        "ratio": stack["per_s"] / bare["per_s"] if bare["per_s"] else float("nan"),
        "max_stall_ms": stack["max_stall_ms"], "bare_max_stall_ms": bare["max_stall_ms"],
        "longest_callback_ms": {"bare": bare["longest_callback_ms"],
                                "stack": stack["longest_callback_ms"]},
        "warmup_longest_callback_ms": {"bare": bare["warmup_longest_callback_ms"],
                                       "stack": stack["warmup_longest_callback_ms"]},
        "p99_stall_ms": stack["p99_stall_ms"], "bare_p99_stall_ms": bare["p99_stall_ms"],
        "warmup_max_stall_ms": {"bare": bare["warmup_max_stall_ms"],
                                "stack": stack["warmup_max_stall_ms"]},
        "warmup_s": {"bare": bare["warmup_s"], "stack": stack["warmup_s"]},
        "new_items_per_crawl": stack["new_items_per_crawl"], "speed": args.speed,
        "peak_rss_mb": stack["peak_rss_mb"], "worker_peak_rss_mb": stack["worker_peak_rss_mb"],
        "bare_peak_rss_mb": bare["peak_rss_mb"],
        "cpu_ms_per_feed": {"bare": bare["cpu_ms_per_feed"], "stack": stack["cpu_ms_per_feed"]},
        "server_cpu_ms_per_feed": server_cpu, "mean_body_kb": bare["mean_body_kb"],
        "parse_ms_40kb": parse_times(), "stack_stats": stack["whittle"],
        "load_before": load0, "load_after": os.getloadavg(),
    }
    harness.emit(report, args.json, render)
    return 0


def render(r: dict) -> str:
    pt = r["parse_ms_40kb"]
    lines = [
        f"{r['feeds']} realistic feeds (window {r['window']}, mean body "
        f"{r['mean_body_kb']:.1f} KB uncompressed){' + 2 hostile feeds' if r['hostile'] else ''}"
        f", {r['concurrency']} concurrent requests, {r['seconds']:g} s each",
        f"measured after every feed was fetched once (warm-up: bare "
        f"{r['warmup_s']['bare']:.1f} s, stack {r['warmup_s']['stack']:.1f} s); "
        f"speed {r['speed']:g}: {r['new_items_per_crawl']:.1f} new entries per crawl",
        f"{'':12}{'feeds/s':>9}{'CPU ms/feed':>13}{'max stall ms':>14}{'p99 stall':>11}"
        f"{'peak RSS MB':>13}",
        f"{'bare Scrapy':12}{r['bare_per_s']:9.1f}{r['cpu_ms_per_feed']['bare']:13.2f}"
        f"{r['bare_max_stall_ms']:14.1f}{r['bare_p99_stall_ms']:11.1f}"
        f"{r['bare_peak_rss_mb']:13.0f}",
        f"{'full stack':12}{r['stack_per_s']:9.1f}{r['cpu_ms_per_feed']['stack']:13.2f}"
        f"{r['max_stall_ms']:14.1f}{r['p99_stall_ms']:11.1f}{r['peak_rss_mb']:13.0f}"
        f"  (+ workers {r['worker_peak_rss_mb']:.0f} MB)",
        f"longest single callback: bare {r['longest_callback_ms']['bare']:.0f} ms, stack "
        f"{r['longest_callback_ms']['stack']:.0f} ms (warm-up: bare "
        f"{r['warmup_longest_callback_ms']['bare']:.0f}, stack "
        f"{r['warmup_longest_callback_ms']['stack']:.0f})",
        f"ratio stack / bare: {r['ratio']:.2f}   largest stall during warm-up: bare "
        f"{r['warmup_max_stall_ms']['bare']:.0f} ms, stack "
        f"{r['warmup_max_stall_ms']['stack']:.0f} ms",
        f"server CPU ms/feed: bare {r['server_cpu_ms_per_feed']['bare']:.2f}, stack "
        f"{r['server_cpu_ms_per_feed']['stack']:.2f}",
        f"parse of one {pt['feed_kb']:.0f} KB 50-entry feed (median): feedparser-rs "
        f"{pt['feedparser-rs']:.2f} ms, feedparser {pt['feedparser']:.1f} ms",
        f"stack: {r['stack_stats']}",
        "load average before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
            *r["load_before"], *r["load_after"]),
    ]
    return "\n".join(lines)
