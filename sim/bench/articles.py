"""Full articles (``WHITTLE_ARTICLES``): extraction quality, throughput against bare Scrapy,
politeness and the feeds' own crawl rate.

    python -m sim.bench articles --feeds 200 --seconds 15 [--json]

Three measures, each in a process of its own:

* **On the simulated clock** (``sim.serve``'s article pages, in process, hours of crawl in
  seconds): ``--sim-feeds`` feeds on one host allowed ``--host-limit`` requests an epoch,
  ``--budget`` of them the feeds', crawled ``--epochs`` epochs with articles off, then on:
  the requests any epoch sent the host beyond its allowance (feeds and articles), the feeds
  crawled with articles on over off. Then on with an allowance of ``--ample-limit``, room for
  every article: the share of the entries' items that came with text, through the crawl,
  and the extraction's F1 at the level of three-word shingles against the text the pages
  hold (``sim.web.articles.ArticlePages.text``), mean and lowest.
* **Throughput** (wall clock, ``sim.serve`` in a process, its feeds empty at the start and
  ``--speed`` fast enough that they bring more entries than the crawler can fetch pages
  of, without the backlog of full windows at the first crawls): the whole stack
  (``FeedSpider`` with the add-on and ``WHITTLE_ARTICLES``: feeds crawled ``--feed-rate``
  times a second each, parsing, learning, article requests, extraction in the parse
  workers) for ``--seconds`` after ``--warmup``, recording
  the article URLs it fetched; then **bare** Scrapy fetching those same URLs round-robin with
  ``--concurrency`` requests in flight and extracting each page with the same function
  (``scrapy_whittle.feeds.article.extract_article``) in its callback. Articles per second
  (pages fetched and extracted) and CPU milliseconds per article (the crawler and its
  workers; the stack's include its feeds). Last, the stack with articles off on the same
  feeds: its feeds crawled per second, against the stack's with articles on.

``--real``: extraction on real news pages with labelled text instead, through the crawl
(``sim.bench.real_articles``: 40 pages of Zyte's article extraction benchmark, served locally);
the quality above is that of the simulated pages' boilerplate only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from sim.bench import harness
from sim.crawls.bare_scrapy import TWISTED_REACTOR, bare_settings, round_robin_spider
from sim.crawls.children import run_child, start_web
from sim.crawls.measure import cpu_with_children, process_cpu

START = 1_700_000_000.0
_WORD = re.compile(r"\w+")


def shingles(text: str, k: int = 3) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i:i + k]) for i in range(max(1, len(words) - k + 1))}


def f1(extracted: str, truth: str) -> float:
    """F1 of ``extracted``'s three-word shingles against ``truth``'s."""
    got, want = shingles(extracted), shingles(truth)
    both = len(got & want)
    if not both:
        return 0.0
    precision, recall = both / len(got), both / len(want)
    return 2 * precision * recall / (precision + recall)


# -- on the simulated clock -------------------------------------------------------------------
def simulated(args, articles: bool) -> dict:
    """One crawl of the simulated web on its clock (run in a child process)."""
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess
    from scrapy.utils.reactor import install_reactor

    from scrapy_whittle.scrapy.spiders import FeedSpider
    from scrapy_whittle.service.clock import SimulatedClock
    from sim.serve import start_server
    from sim.web.articles import ArticlePages

    install_reactor(TWISTED_REACTOR)        # before the server's import of the reactor
    clock = SimulatedClock(start=START, speed=0.0)
    process = CrawlerProcess({
        "TWISTED_REACTOR": TWISTED_REACTOR, "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": False, "LOGSTATS_INTERVAL": 0, "ROBOTSTXT_OBEY": False,
        "ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_CLOCK": clock,
        "WHITTLE_POLICY": "whittle", "WHITTLE_BUDGET": args.budget, "WHITTLE_PERIOD": 3600,
        "WHITTLE_MAX_EPOCHS": args.epochs, "WHITTLE_HOST_LIMITS": {"127.0.0.1": args.host_limit},
        "WHITTLE_ARTICLES": articles, "WHITTLE_LOGSTATS_INTERVAL": 0, "WHITTLE_SEED": 0,
        "CONCURRENT_REQUESTS": 16, "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
    })
    server = start_server("news-mix", n=args.sim_feeds, speed=1.0, seed=args.seed, clock=clock)
    process.settings.set("WHITTLE_SOURCES",
                         [f"{server.url}/feed/{i}.xml" for i in range(args.sim_feeds)])
    crawler = process.create_crawler(FeedSpider)
    sent: list[tuple[float, bool]] = []
    items: list[dict] = []
    crawler.signals.connect(lambda request, spider: sent.append(
        (clock.now(), "whittle_article" in request.meta)),
        signal=signals.request_reached_downloader, weak=False)
    crawler.signals.connect(lambda item, response, spider: items.append(item),
                            signal=signals.item_scraped, weak=False)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    origin = min(t for t, _ in sent)
    per_epoch = Counter(int((t - origin) // 3600) for t, _ in sent)
    out = {"crawls": stats.get("whittle/crawls", 0), "epochs": args.epochs,
           "over_allowance": sum(max(0, c - args.host_limit) for c in per_epoch.values()),
           "items": len(items)}
    if articles:
        pages = ArticlePages(args.seed)
        scores = []
        for item in items:
            if item.get("text"):
                i, seq = (int(x) for x in item["link"].rsplit("/item/", 1)[1].split("/"))
                scores.append(f1(item["text"], pages.text(i, seq)))
        ended = sum(1 for i in items if i.get("article_error") == "crawl_ended")
        out.update(with_text=len(scores), crawl_ended=ended,
                   articles_sent=sum(1 for _, a in sent if a),
                   f1_mean=sum(scores) / max(1, len(scores)), f1_min=min(scores, default=0.0),
                   failed={k[len("whittle/articles/failed/"):]: v for k, v in stats.items()
                           if k.startswith("whittle/articles/failed/")})
    return out


# -- throughput -------------------------------------------------------------------------------
def throughput(mode: str, args, urls: list[str]) -> dict:
    """One timed crawl (run in a child process): the stack on the feeds ``urls``, or bare
    Scrapy on the article pages ``urls``."""
    import asyncio

    from scrapy import signals
    from scrapy.crawler import CrawlerProcess

    from scrapy_whittle.feeds.article import ArticleError, extract_article

    settings = bare_settings(args.concurrency)
    state: dict = {"measure": None, "pages": [], "extracted": 0}
    if mode == "bare":
        class BareArticles(round_robin_spider(urls, args.concurrency)):
            def parse(self, response):
                try:
                    ctype = response.headers.get("Content-Type") or b""
                    article = extract_article(response.body, response.url,
                                              content_type=ctype.decode("latin-1") or None)
                except ArticleError:
                    article = None
                if article is not None and state["measure"] is not None:
                    state["extracted"] += 1
                yield self.next_request()
        spidercls = BareArticles
    else:
        from scrapy_whittle.scrapy.spiders import FeedSpider

        settings.update({
            "ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_SOURCES": urls,
            "WHITTLE_POLICY": "whittle", "WHITTLE_BUDGET": args.feed_rate * len(urls),
            "WHITTLE_PERIOD": 1.0, "WHITTLE_LOGSTATS_INTERVAL": 0,
            "WHITTLE_ARTICLES": mode == "stack",          # "stack-off": the feeds alone
        })
        if args.workers is not None:
            settings["WHITTLE_PARSE_WORKERS"] = args.workers
        spidercls = FeedSpider
    settings["CLOSESPIDER_TIMEOUT"] = args.warmup + args.seconds + 60     # a safety net
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(spidercls)

    def begin() -> None:
        state["measure"] = time.perf_counter()
        state["cpu0"] = cpu_with_children()
        state["items0"] = crawler.stats.get_value("whittle/articles/extracted", 0)
        state["crawls0"] = crawler.stats.get_value("whittle/crawls", 0)
        state["new0"] = crawler.stats.get_value("whittle/new_items", 0)
        asyncio.get_running_loop().call_later(args.seconds, lambda: asyncio.ensure_future(
            crawler.engine.close_spider_async(reason="bench_done")))

    def received(response, request, spider):
        if "/item/" in request.url and response.status == 200 and state["measure"]:
            state["pages"].append(request.url)

    def opened(spider):
        asyncio.get_running_loop().call_later(args.warmup, begin)

    def closed(spider):
        state["t1"] = time.perf_counter()
        state["cpu1"] = cpu_with_children()

    crawler.signals.connect(received, signal=signals.response_received, weak=False)
    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
    crawler.signals.connect(closed, signal=signals.spider_closed, weak=False)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    if mode == "stack":
        state["extracted"] = stats.get("whittle/articles/extracted", 0) - state["items0"]
    seconds = state["t1"] - state["measure"]
    articles = state["extracted"]
    entries = stats.get("whittle/new_items", 0) - state.get("new0", 0)
    return {"per_s": articles / seconds, "articles": articles, "pages": state["pages"],
            "entries_per_s": entries / seconds,
            "cpu_ms_per_article": 1000 * (state["cpu1"] - state["cpu0"]) / max(1, articles),
            "feeds_per_s": (stats.get("whittle/crawls", 0) - state.get("crawls0", 0)) / seconds}


def child(kind: str, args, urls_file: str | None = None) -> dict:
    cmd = ["articles", "--child", kind, *args.passed]
    if urls_file is not None:
        cmd += ["--urls", urls_file]
    return run_child(*cmd, what=kind)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--real" in argv:
        from sim.bench import real_articles

        return real_articles.main([a for a in argv if a != "--real"])
    ap = harness.parser("articles", __doc__)
    ap.add_argument("--feeds", type=int, default=200, help="feeds of the throughput runs")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--speed", type=float, default=9000.0,
                    help="simulated seconds per real second of the throughput runs' server")
    ap.add_argument("--feed-rate", type=float, default=0.05,
                    help="crawls per feed and second of the throughput runs' budget: the "
                         "feeds bring more entries than the crawler fetches pages of")
    ap.add_argument("--workers", type=int, default=None,
                    help="WHITTLE_PARSE_WORKERS of the stack (default: the setting's)")
    ap.add_argument("--sim-feeds", type=int, default=40)
    ap.add_argument("--budget", type=float, default=20, help="feeds per epoch (simulated)")
    ap.add_argument("--host-limit", type=float, default=60,
                    help="the host's requests per epoch (simulated)")
    ap.add_argument("--ample-limit", type=float, default=1000,
                    help="the host's requests per epoch of the quality run (simulated)")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--urls", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        urls = json.loads(Path(args.urls).read_text()) if args.urls else []
        if args.child.startswith("sim-"):
            if args.child == "sim-ample":           # room for every article
                args.host_limit = args.ample_limit
            result = simulated(args, args.child != "sim-off")
        else:
            result = throughput(args.child, args, urls)
        print(json.dumps(result))
        return 0
    args.passed = [a for a in argv if a != "--json"]
    report: dict = {"off": child("sim-off", args), "on": child("sim-on", args),
                    "ample": child("sim-ample", args)}
    server, port = start_web("--n", str(args.feeds), "--window", "50", "--speed", str(args.speed),
                             "--seed", str(args.seed), "--history", "empty")
    try:
        base = f"http://127.0.0.1:{port}"
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump([f"{base}/feed/{i}.xml" for i in range(args.feeds)], fh)
        cpu0 = process_cpu(server.pid)
        stack = child("stack", args, fh.name)
        server_stack = process_cpu(server.pid) - cpu0
        with open(fh.name, "w") as out:
            json.dump(stack.pop("pages"), out)
        cpu0 = process_cpu(server.pid)
        bare = child("bare", args, fh.name)
        server_bare = process_cpu(server.pid) - cpu0
        bare.pop("pages")
        with open(fh.name, "w") as out:
            json.dump([f"{base}/feed/{i}.xml" for i in range(args.feeds)], out)
        alone = child("stack-off", args, fh.name)
        alone.pop("pages")
        os.unlink(fh.name)
    finally:
        server.terminate()
        server.wait(10)
    report.update(stack=stack, bare=bare, ratio=stack["per_s"] / bare["per_s"],
                  feeds_alone_per_s=alone["feeds_per_s"],
                  server_cpu_s={"stack": server_stack, "bare": server_bare},
                  load=os.getloadavg())
    harness.emit(report, args.json, render)
    return 0


def render(r: dict) -> str:
    on, off, ample, stack, bare = r["on"], r["off"], r["ample"], r["stack"], r["bare"]
    items = max(1, ample["items"])
    return "\n".join([
        f"simulated clock, {on['epochs']} epochs, ample allowance: items with text "
        f"{ample['with_text']}/{ample['items']} ({ample['with_text'] / items:.1%}; failed "
        f"{ample['failed']})",
        f"extraction F1 (3-word shingles) mean {ample['f1_mean']:.4f}, lowest "
        f"{ample['f1_min']:.4f}",
        f"tight allowance: requests over it: articles on {on['over_allowance']}, off "
        f"{off['over_allowance']}; feeds crawled on/off {on['crawls']}/{off['crawls']} = "
        f"{on['crawls'] / max(1, off['crawls']):.3f}; articles sent {on['articles_sent']}, "
        f"left unsent at the end {on['crawl_ended']}",
        f"{'':12}{'articles/s':>11}{'CPU ms/article':>16}",
        f"{'bare Scrapy':12}{bare['per_s']:11.1f}{bare['cpu_ms_per_article']:16.2f}",
        f"{'full stack':12}{stack['per_s']:11.1f}{stack['cpu_ms_per_article']:16.2f}"
        f"  (and {stack['feeds_per_s']:.1f} feeds/s bringing {stack['entries_per_s']:.1f} "
        f"entries/s)",
        f"ratio stack / bare: {r['ratio']:.2f}; the stack's feeds/s with articles on / off: "
        f"{stack['feeds_per_s']:.2f} / {r['feeds_alone_per_s']:.2f} = "
        f"{stack['feeds_per_s'] / r['feeds_alone_per_s']:.3f}   load {r['load'][0]:.2f}",
    ])
