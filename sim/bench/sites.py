"""Feeds found from sites: a crawl started from the simulated sites' addresses, against what
they link.

    python -m sim.bench sites [--n 300] [--sites 61] [--seeds 3]

For each seed, serves ``sim.serve --kinds mix --sites K`` (a subprocess) and runs a Scrapy
crawl (a child process: ``FeedSpider``, the scheduler and middleware of the add-on,
``ROBOTSTXT_OBEY``, ``WHITTLE_SOURCES`` the server's ``/sites.txt``, a list's URL, three
epochs of ``--period`` real seconds, a ``JOBDIR``). The feeds the crawl found and kept for each site
(``JOBDIR/whittle-sites.sqlite``) are held against ``/sites.json``, the feeds each site links
in its page's head, its Link headers, at a usual path or in its robots.txt: the share of
those found, and the false feeds (found, not linked: a decoy taken). Also: the sites without
feeds reported, the search's requests per site, and the sources the crawl ended with (the
feeds, in the sites' place).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import urllib.request

from sim.bench import harness
from sim.crawls.children import run_child, start_web


def crawl(sites_url: str, jobdir: str, period: float = 3.0) -> dict:
    """The child: crawl from the sites at ``sites_url``; the whittle stats."""
    from scrapy.crawler import CrawlerProcess

    from scrapy_whittle.scrapy.spiders import FeedSpider

    process = CrawlerProcess({
        "SCHEDULER": "scrapy_whittle.WhittleScheduler",
        "DOWNLOADER_MIDDLEWARES": {"scrapy_whittle.FeedObserverMiddleware": 540},
        "LOG_LEVEL": "ERROR", "ROBOTSTXT_OBEY": True, "DOWNLOAD_DELAY": 0,
        "WHITTLE_SOURCES": sites_url, "WHITTLE_BUDGET": 1000, "WHITTLE_PERIOD": period,
        "WHITTLE_MAX_EPOCHS": 3, "WHITTLE_POLICY": "round_robin", "JOBDIR": jobdir,
        "WHITTLE_LOGSTATS_INTERVAL": 0, "LOGSTATS_INTERVAL": 0,
    })
    crawler = process.create_crawler(FeedSpider)
    process.crawl(crawler)
    process.start()
    return {k[len("whittle/"):]: v for k, v in crawler.stats.get_stats().items()
            if k.startswith("whittle/")}


def one_web(n: int, sites: int, seed: int, period: float = 3.0) -> dict:
    from scrapy_whittle.service.sources.site_table import SiteTable

    server, port = start_web("--n", str(n), "--kinds", "mix", "--sites", str(sites),
                             "--seed", str(seed), "--speed", "3600")
    try:
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/sites.json") as answer:
            truth = {s["url"]: set(s["feeds"]) for s in json.load(answer)["sites"]}
        with tempfile.TemporaryDirectory() as tmp:
            stats = run_child("sites", "--crawl", f"{base}/sites.txt", tmp,
                              "--period", str(period), what="the crawl", timeout=600)
            table = SiteTable.in_jobdir(tmp)
            table.load()
            found = {site: {f.url for f in r.feeds} for site, r in table.sites.items()}
            table.close()
    finally:
        server.terminate()
        server.wait(10)
        server.stdout.close()
    linked = sum(len(f) for f in truth.values())
    hits = sum(len(found.get(site, set()) & feeds) for site, feeds in truth.items())
    false = sum(len(f - truth.get(site, set())) for site, f in found.items())
    return {"seed": seed, "sites": len(truth), "linked": linked, "found": hits,
            "false": false, "without_feeds": stats.get("site_search/sites_without_feeds", 0),
            "truly_without": sum(1 for f in truth.values() if not f),
            "requests_per_site": stats.get("site_search/requests", 0) / max(len(truth), 1),
            "sources": stats.get("sources", 0), "new_items": stats.get("new_items", 0)}


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser("sites", __doc__)
    ap.add_argument("--n", type=int, default=300, help="simulated feeds (default 300)")
    ap.add_argument("--sites", type=int, default=61, help="sites sharing them (default 61)")
    ap.add_argument("--seeds", type=int, default=3, help="webs drawn (default 3)")
    ap.add_argument("--period", type=float, default=3.0,
                    help="real seconds per epoch of the crawl (default 3)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--crawl", nargs=2, metavar=("SITES_URL", "JOBDIR"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.crawl:
        print(json.dumps(crawl(*args.crawl, period=args.period)))
        return 0
    rows = [one_web(args.n, args.sites, seed, args.period) for seed in range(args.seeds)]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{args.n} feeds (--kinds mix) on {args.sites} sites + 1 without feeds, "
          f"{args.seeds} seeds; crawl from /sites.txt, 3 epochs")
    print(f"{'seed':>4} {'linked':>7} {'found':>6} {'share':>6} {'false':>6} "
          f"{'no-feed sites':>13} {'req/site':>8} {'sources':>7} {'new items':>9}")
    for r in rows:
        print(f"{r['seed']:>4} {r['linked']:>7} {r['found']:>6} "
              f"{r['found'] / max(r['linked'], 1):>6.1%} {r['false']:>6} "
              f"{r['without_feeds']:>6} (of {r['truly_without']}) {r['requests_per_site']:>8.2f} "
              f"{r['sources']:>7} {r['new_items']:>9}")
    linked = sum(r["linked"] for r in rows)
    found = sum(r["found"] for r in rows)
    false = sum(r["false"] for r in rows)
    print(f"all: {found} of {linked} linked feeds found ({found / max(linked, 1):.1%}), "
          f"{false} false feeds")
    return 0
