"""A crawl of big news sitemaps (gzip) against a crawl of RSS feeds of the same size.

    python -m sim.bench sitemap [--urls 50000] [--sources 4] [--seconds 10] [--json]

Makes a news sitemap of ``--urls`` URLs (``<loc>``, ``<lastmod>``, ``<news:news>`` with
publication, date and a title of 8-14 words), compressed with gzip (served as the body,
``application/gzip``, as sites serve ``.xml.gz``), and an RSS 2.0 feed of the same
uncompressed size (entries with a title, link, guid, date and a 500-byte description; served
with ``Content-Encoding: gzip``, as news sites serve feeds, so that Scrapy decompresses it).
Both are served from a thread of this process on 127.0.0.1, each at ``--sources`` URLs, and
crawled, one after the other, each in a child process: the add-on, ``FeedSpider``,
``WHITTLE_POLICY = "whittle"``, a budget above what can be fetched, 1 s epochs, conditional
GET off (every fetch a full body), ``WHITTLE_MAX_FEED_SIZE`` 64 MiB (a sitemap may be 50 MB),
with the entry cap ``WHITTLE_MAX_ENTRIES_PER_SOURCE`` at its default (1000) and at ``--urls``
(every URL read). Measured after every source was fetched once (the first fetch makes an item
of every entry), for ``--seconds``: fetches per second, the largest event-loop stall (a task
sleeping 10 ms and how late it wakes), the longest single callback, CPU per fetch, and the
peak RSS of the crawler and of its parse workers. The ratios sitemap / feed are the figures
(the machine may be shared: measured in one run).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import resource
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sim.bench import harness
from sim.crawls.bare_scrapy import TWISTED_REACTOR
from sim.crawls.children import run_child as run_child_process
from sim.crawls.measure import cpu_with_children, time_callbacks
from sim.web.realistic import WORDS

NEWS = "http://www.google.com/schemas/sitemap-news/0.9"
T0 = 1_790_000_000                       # publication times: a minute apart before this


def _words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def _stamp(k: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 - 60 * k))


def news_sitemap(n: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    out = ['<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns='
           f'"http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:news="{NEWS}">']
    for k in range(n):
        title = _words(rng, 8, 14)
        slug = "-".join(title.split()[:6])
        out.append(f"<url><loc>https://news.example.com/2026/11/{slug}-{k}.html</loc>"
                   f"<lastmod>{_stamp(k)}</lastmod><news:news><news:publication>"
                   "<news:name>Example News</news:name><news:language>en</news:language>"
                   f"</news:publication><news:publication_date>{_stamp(k)}"
                   f"</news:publication_date><news:title>{title.capitalize()}</news:title>"
                   "</news:news></url>\n")
    out.append("</urlset>\n")
    return "".join(out).encode()


def rss_of_size(size: int, seed: int = 1) -> tuple[bytes, int]:
    """An RSS feed of at least ``size`` bytes and how many entries it has."""
    rng = random.Random(seed)
    out = ['<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>'
           "<title>Example News</title><link>https://news.example.com/</link>"
           "<description>d</description>"]
    total, k = len(out[0]), 0
    while total < size:
        title = _words(rng, 8, 14).capitalize()
        link = f"https://news.example.com/2026/11/{k}.html"
        item = (f"<item><title>{title}</title><link>{link}</link><guid>{link}</guid>"
                f"<pubDate>{time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime(T0 - 60 * k))}"
                f"</pubDate><description>&lt;p&gt;{_words(rng, 70, 80)}&lt;/p&gt;"
                "</description></item>\n")
        out.append(item)
        total += len(item)
        k += 1
    out.append("</channel></rss>\n")
    return "".join(out).encode(), k


def serve(bodies: dict[str, tuple[bytes, dict[str, str]]]) -> ThreadingHTTPServer:
    """Serve ``bodies`` (path -> (bytes, headers)) from a daemon thread; port 0."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            path = "/" + self.path.split("/", 2)[1] if self.path.count("/") > 1 else self.path
            found = bodies.get(path)
            if found is None:
                self.send_error(404)
                return
            body, headers = found
            self.send_response(200)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# -- one crawl (a child process) -------------------------------------------------------------
def crawl(urls: list[str], cap: int, seconds: float, warmup_max: float) -> dict:
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    from scrapy_whittle.scrapy.spiders import FeedSpider

    settings = {
        "TWISTED_REACTOR": TWISTED_REACTOR, "LOG_LEVEL": "ERROR", "TELNETCONSOLE_ENABLED": False,
        "ROBOTSTXT_OBEY": False, "COOKIES_ENABLED": False, "LOG_INSTALL_ROOT_HANDLER": False,
        "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 60, "LOGSTATS_INTERVAL": 0,
        "ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_SOURCES": urls,
        "WHITTLE_POLICY": "whittle", "WHITTLE_BUDGET": 100 * len(urls), "WHITTLE_PERIOD": 1.0,
        "WHITTLE_CONDITIONAL_GET": False, "WHITTLE_LOGSTATS_INTERVAL": 0,
        "WHITTLE_MAX_FEED_SIZE": 64 * 1024 * 1024, "WHITTLE_MAX_ENTRIES_PER_SOURCE": cap,
        "CLOSESPIDER_TIMEOUT": warmup_max + seconds + 60,
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(FeedSpider)
    longest = time_callbacks()
    stalls: list[tuple[float, float]] = []
    arrivals: list[float] = []
    seen: set[str] = set()
    state: dict = {"measure": None}

    def received(response, request, spider):
        if request.url in urls and response.status == 200:
            now = time.perf_counter()
            arrivals.append(now)
            seen.add(request.url)
            if state["measure"] is None and (len(seen) == len(urls)
                                             or now > state["t0"] + warmup_max):
                state["measure"], state["cpu0"] = now, cpu_with_children()
                asyncio.get_running_loop().call_later(seconds, lambda: asyncio.ensure_future(
                    crawler.engine.close_spider_async(reason="bench_done")))

    async def sampler():
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(0.01)
            stalls.append((time.perf_counter(), loop.time() - t - 0.01))

    def opened(spider):
        longest.clear()
        state["t0"] = time.perf_counter()
        state["task"] = asyncio.ensure_future(sampler())

    def closed(spider):
        state["t1"], state["cpu1"] = time.perf_counter(), cpu_with_children()
        state["task"].cancel()

    crawler.signals.connect(received, signal=signals.response_received)
    crawler.signals.connect(opened, signal=signals.spider_opened)
    crawler.signals.connect(closed, signal=signals.spider_closed)
    process.crawl(crawler)
    process.start()
    m0 = state["measure"]
    if m0 is None:
        raise RuntimeError(f"the warm-up never ended ({len(seen)} of {len(urls)} fetched)")
    counted = [a for a in arrivals if a > m0]
    lags = sorted(lag for when, lag in stalls if when > m0)
    stats = crawler.stats.get_stats()
    return {
        "per_s": len(counted) / (state["t1"] - m0), "fetched": len(counted),
        "cpu_ms_per_fetch": 1000 * (state["cpu1"] - state["cpu0"]) / max(1, len(counted)),
        "max_stall_ms": 1000 * (lags[-1] if lags else 0.0),
        "p99_stall_ms": 1000 * (lags[int(0.99 * (len(lags) - 1))] if lags else 0.0),
        "longest_callback_ms": 1000 * max((d for w, d in longest if w > m0), default=0.0),
        "warmup_max_stall_ms": 1000 * max((lag for w, lag in stalls if w <= m0),
                                          default=0.0),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "new_items": stats.get("whittle/new_items", 0),
        "problems": {k[8:]: v for k, v in stats.items()
                     if k.startswith(("whittle/errors", "whittle/warnings"))},
    }


def run_child(urls: list[str], cap: int, args) -> dict:
    return run_child_process("sitemap", "--child", json.dumps(urls), "--cap", str(cap),
                             "--seconds", str(args.seconds), what="the crawl")


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser("sitemap", __doc__)
    ap.add_argument("--urls", type=int, default=50_000)
    ap.add_argument("--sources", type=int, default=4, help="URLs serving each body")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cap", type=int, default=1000, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(crawl(json.loads(args.child), args.cap, args.seconds, 120.0)))
        return 0
    load0 = os.getloadavg()
    plain = news_sitemap(args.urls)
    packed = gzip.compress(plain, compresslevel=6, mtime=0)
    rss, rss_entries = rss_of_size(len(plain))
    server = serve({
        "/sitemap": (packed, {"Content-Type": "application/gzip"}),
        "/feed": (gzip.compress(rss, compresslevel=6, mtime=0),
                  {"Content-Type": "application/rss+xml", "Content-Encoding": "gzip"}),
    })
    base = f"http://127.0.0.1:{server.server_address[1]}"
    results: dict = {}
    try:
        for cap in (1000, args.urls):
            for kind, path in (("sitemap", "sitemap/{}.xml.gz"), ("feed", "feed/{}.xml")):
                urls = [f"{base}/{path.format(k)}" for k in range(args.sources)]
                results[f"{kind}@{cap}"] = run_child(urls, cap, args)
    finally:
        server.shutdown()
    report = {"urls": args.urls, "sitemap_mb": len(plain) / 2**20,
              "sitemap_gzip_mb": len(packed) / 2**20, "feed_mb": len(rss) / 2**20,
              "feed_entries": rss_entries, "sources": args.sources, "seconds": args.seconds,
              "runs": results, "load_before": load0, "load_after": os.getloadavg()}
    harness.emit(report, args.json, render)
    return 0


def render(r: dict) -> str:
    lines = [
        f"news sitemap: {r['urls']} URLs, {r['sitemap_mb']:.1f} MB "
        f"({r['sitemap_gzip_mb']:.1f} MB gzip); RSS feed of the same size: "
        f"{r['feed_mb']:.1f} MB, {r['feed_entries']} entries; {r['sources']} sources of "
        f"each, {r['seconds']:g} s each",
        f"{'':16}{'fetches/s':>10}{'CPU ms/fetch':>13}{'max stall ms':>13}{'p99':>7}"
        f"{'longest cb':>11}{'RSS MB':>8}{'workers':>9}",
    ]
    for name, x in r["runs"].items():
        lines.append(f"{name:16}{x['per_s']:10.2f}{x['cpu_ms_per_fetch']:13.0f}"
                     f"{x['max_stall_ms']:13.0f}{x['p99_stall_ms']:7.0f}"
                     f"{x['longest_callback_ms']:11.0f}{x['peak_rss_mb']:8.0f}"
                     f"{x['worker_peak_rss_mb']:9.0f}")
    for cap in sorted({int(k.split("@")[1]) for k in r["runs"]}):
        s, f = r["runs"][f"sitemap@{cap}"], r["runs"][f"feed@{cap}"]
        lines.append(f"entry cap {cap}: sitemap / feed: max stall "
                     f"{s['max_stall_ms'] / max(f['max_stall_ms'], 1e-9):.2f}, CPU per fetch "
                     f"{s['cpu_ms_per_fetch'] / max(f['cpu_ms_per_fetch'], 1e-9):.2f}, "
                     f"crawler RSS {s['peak_rss_mb'] / f['peak_rss_mb']:.2f}, workers' RSS "
                     f"{s['worker_peak_rss_mb'] / max(f['worker_peak_rss_mb'], 1e-9):.2f}")
    problems = {k: v["problems"] for k, v in r["runs"].items() if v["problems"]}
    if problems:
        lines.append(f"errors and warnings: {problems}")
    lines.append("load average before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
        *r["load_before"], *r["load_after"]))
    return "\n".join(lines)
