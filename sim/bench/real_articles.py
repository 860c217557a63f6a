"""Extraction on real news pages, through the crawl (``WHITTLE_ARTICLES``).

    python -m sim.bench articles --real [--pages N] [--per-feed 5] [--data DIR] [--json]

The pages are those of ``sim/data/real_articles`` (40 pages of Zyte's public article
extraction benchmark, each with its article body as people labelled it; see the README
there), or with ``--data`` those of a checkout of the whole benchmark (181 pages). A local
HTTP server, in the crawl's process and reactor, serves each page under its own
path (``/page/<id>``, as the benchmark stored it, ``text/html; charset=utf-8``) and an RSS feed
per ``--per-feed`` pages (``/feed/<k>.xml``) linking to them. The whole stack crawls the feeds
(``FeedSpider``, the add-on, ``WHITTLE_ARTICLES = True``, on a simulated clock), in a child
process; every entry's item is collected, and each response's body compared with the file
served (a page "fetched intact" is one whose body is the file's, byte for byte).

Each page's extracted text is then scored against its labelled body the way the benchmark
scores (:func:`score`), three times:

* ``crawl``: the item's ``text``, through the crawl (none where the item has no text);
* ``direct``: ``scrapy_whittle.feeds.article.extract_article`` on the file's bytes, with the
  URL the crawl fetched and the header the server sent: the same extractor without the
  crawl, so that a gap between the two is the crawl's;
* ``trafilatura``: ``trafilatura.extract`` on the page decoded as UTF-8 with
  ``include_comments=False``, the call the benchmark makes for trafilatura: a gap between it and
  ``direct`` is the options and input of ``extract_article``.

The metric (the benchmark's definition, our code): a text is split into tokens, the maximal
runs of word characters (``\\w+``, case kept); its shingles are the runs of four consecutive
tokens (a text of fewer tokens: one shingle of them all), counted with their repeats. Per
page, true positives are the shingles both texts hold (the smaller count of each), false
positives the extracted text's extra ones, false negatives the labelled text's missing ones;
precision = tp / (tp + fp), recall = tp / (tp + fn). Over the pages, precision is the mean over
the pages where something was extracted (a page without text has no precision), recall the
mean over the pages whose labelled text is not empty (a page without text has recall 0), and
F1 the harmonic mean of those two means, as the benchmark reports it. ``f1_pages``, the mean
of the pages' own F1 (0 for a page without text), is given beside it.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sim.bench import harness
from sim.crawls.children import run_child

DATA = Path(__file__).resolve().parents[1] / "data" / "real_articles"
#: the command that runs it: the articles benchmark's real-page mode
PROG = "python -m sim.bench articles --real"
#: tokens a shingle: the benchmark's
SHINGLE = 4
START = 1_700_000_000.0
#: the pages' header as served: the benchmark's files are UTF-8
CONTENT_TYPE = "text/html; charset=utf-8"
_TOKEN = re.compile(r"\w+")


# -- the metric -------------------------------------------------------------------------------
def tokens(text: str | None) -> list[str]:
    return _TOKEN.findall(text or "")


def shingles(text: str | None, n: int = SHINGLE) -> Counter:
    """``text``'s shingles of ``n`` tokens with their counts (a text of fewer tokens: one
    shingle of them all; no token: none)."""
    words = tokens(text)
    return Counter(tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))
                   if words[i:i + n])


@dataclass(frozen=True)
class Score:
    """One page's precision (None: nothing extracted), recall (None: nothing labelled) and F1
    (0 where either is 0 or None)."""

    precision: float | None
    recall: float | None

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p and r else 0.0


def score(extracted: str | None, truth: str) -> Score:
    """``extracted`` against ``truth``, shingle by shingle (module docstring)."""
    got, want = shingles(extracted), shingles(truth)
    tp = sum((got & want).values())
    fp = sum((got - want).values())
    fn = sum((want - got).values())
    if fp == fn == 0 and tp:
        return Score(1.0, 1.0)
    return Score(tp / (tp + fp) if tp + fp else None, tp / (tp + fn) if tp + fn else None)


def summary(scores: list[Score]) -> dict:
    """The benchmark's figures over pages: mean precision, mean recall, their harmonic mean
    ``f1``; and ``f1_pages``, the mean of the pages' F1."""
    ps = [s.precision for s in scores if s.precision is not None]
    rs = [s.recall for s in scores if s.recall is not None]
    p = sum(ps) / len(ps) if ps else 0.0
    r = sum(rs) / len(rs) if rs else 0.0
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0,
            "f1_pages": sum(s.f1 for s in scores) / max(1, len(scores)), "pages": len(scores)}


# -- the pages --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Page:
    id: str
    html: bytes           # as served: the benchmark's file, decompressed
    truth: str            # the labelled article body
    url: str | None       # where the benchmark fetched it


def load(pages: int | None = None, data: Path = DATA) -> list[Page]:
    """The first ``pages`` pages (all: None) in the order of their ids, from ``data``: this
    set's layout (``<id>.html.gz``, ``ground_truth.json``) or a checkout of the whole
    benchmark (``html/<id>.html.gz``, ``ground-truth.json``)."""
    data = Path(data)
    whole = (data / "ground-truth.json").exists()
    labels = data / ("ground-truth.json" if whole else "ground_truth.json")
    truth = json.loads(labels.read_text(encoding="utf-8"))
    html = data / "html" if whole else data
    ids = sorted(truth)[:pages]
    return [Page(i, gzip.decompress((html / f"{i}.html.gz").read_bytes()),
                 truth[i]["articleBody"], truth[i].get("url")) for i in ids]


def feeds_of(pages: list[Page], per_feed: int) -> list[list[Page]]:
    return [pages[k:k + per_feed] for k in range(0, len(pages), per_feed)]


def rss(base: str, k: int, pages: list[Page]) -> bytes:
    """Feed ``k``: an RSS 2.0 channel with an entry per page, linking to it."""
    items = "".join(
        f"<item><title>Page {p.id[:12]}</title><link>{base}/page/{p.id}</link>"
        f"<guid isPermaLink=\"true\">{base}/page/{p.id}</guid>"
        f"<pubDate>Tue, 19 Nov 2019 {j:02d}:00:00 GMT</pubDate></item>"
        for j, p in enumerate(pages))
    return (f"<?xml version=\"1.0\" encoding=\"utf-8\"?><rss version=\"2.0\"><channel>"
            f"<title>Real pages {k}</title><link>{base}/</link>"
            f"<description>sim.bench.real_articles</description>{items}</channel></rss>").encode()


def start_server(pages: list[Page], per_feed: int, reactor=None):
    """Serve ``pages`` and their feeds on 127.0.0.1 (a free port) in this process' reactor;
    returns the listening port (``.getHost().port``, ``.stopListening()``)."""
    from twisted.web.resource import Resource
    from twisted.web.server import Site

    if reactor is None:
        from twisted.internet import reactor
    by_id = {p.id: p for p in pages}
    groups = feeds_of(pages, per_feed)

    class RealPages(Resource):
        isLeaf = True

        def render_GET(self, request):
            path = request.path.decode("utf-8", "replace")
            base = f"http://127.0.0.1:{request.getHost().port}"
            if path.startswith("/page/") and path[len("/page/"):] in by_id:
                request.setHeader(b"Content-Type", CONTENT_TYPE.encode())
                return by_id[path[len("/page/"):]].html
            m = re.fullmatch(r"/feed/(\d+)\.xml", path)
            if m and int(m[1]) < len(groups):
                request.setHeader(b"Content-Type", b"application/rss+xml; charset=utf-8")
                return rss(base, int(m[1]), groups[int(m[1])])
            request.setResponseCode(404)
            return b"not found"

    return reactor.listenTCP(0, Site(RealPages()), interface="127.0.0.1")


# -- the crawl (in a child process: a reactor of its own) -------------------------------------
def crawl(args) -> dict:
    """Crawl the served feeds with the whole stack; per page: the item's text and error,
    whether its body came intact, and the URL fetched."""
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess
    from scrapy.utils.reactor import install_reactor

    from scrapy_whittle.scrapy.spiders import FeedSpider
    from scrapy_whittle.service.clock import SimulatedClock
    from sim.crawls.bare_scrapy import TWISTED_REACTOR

    install_reactor(TWISTED_REACTOR)
    pages = load(args.pages, args.data)
    n_feeds = len(feeds_of(pages, args.per_feed))
    clock = SimulatedClock(start=START, speed=0.0)
    settings = {
        "TWISTED_REACTOR": TWISTED_REACTOR, "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": False, "LOGSTATS_INTERVAL": 0, "ROBOTSTXT_OBEY": False,
        "ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_CLOCK": clock,
        "WHITTLE_POLICY": "round_robin", "WHITTLE_BUDGET": n_feeds, "WHITTLE_PERIOD": 3600,
        "WHITTLE_MAX_EPOCHS": args.epochs, "WHITTLE_ARTICLES": True,
        "WHITTLE_LOGSTATS_INTERVAL": 0, "WHITTLE_SEED": args.seed,
    }
    if args.workers is not None:
        settings["WHITTLE_PARSE_WORKERS"] = args.workers
    process = CrawlerProcess(settings)
    port = start_server(pages, args.per_feed)
    base = f"http://127.0.0.1:{port.getHost().port}"
    process.settings.set("WHITTLE_SOURCES", [f"{base}/feed/{k}.xml" for k in range(n_feeds)])
    crawler = process.create_crawler(FeedSpider)
    items: list[dict] = []
    digest = {p.id: hashlib.sha256(p.html).hexdigest() for p in pages}
    intact: dict[str, bool] = {}

    def received(response, request, spider):
        if "/page/" in response.url:
            page = response.url.rsplit("/page/", 1)[1]
            intact[page] = (response.status == 200
                            and hashlib.sha256(response.body).hexdigest() == digest.get(page))

    crawler.signals.connect(received, signal=signals.response_received, weak=False)
    crawler.signals.connect(lambda item, response, spider: items.append(dict(item)),
                            signal=signals.item_scraped, weak=False)
    process.crawl(crawler)
    process.start()
    out: dict = {}
    for item in items:
        page = (item.get("link") or "").rsplit("/page/", 1)[-1]
        out[page] = {"url": item.get("link"), "text": item.get("text"),
                     "error": item.get("article_error"), "intact": intact.get(page, False)}
    stats = crawler.stats.get_stats()
    return {"base": base, "items": len(items), "pages": out,
            "extracted": stats.get("whittle/articles/extracted", 0),
            "failed": {k[len("whittle/articles/failed/"):]: v for k, v in stats.items()
                       if k.startswith("whittle/articles/failed/")}}


# -- the report -------------------------------------------------------------------------------
def direct(page: Page, url: str) -> str | None:
    from scrapy_whittle.feeds.article import ArticleError, extract_article

    try:
        return extract_article(page.html, url, content_type=CONTENT_TYPE).text
    except ArticleError:
        return None


def trafilatura_alone(page: Page) -> str | None:
    import trafilatura

    return trafilatura.extract(page.html.decode("utf-8"), include_comments=False)


def report(args) -> dict:
    cmd = ["articles", "--real", "--child", "--data", str(args.data),
           "--per-feed", str(args.per_feed), "--epochs", str(args.epochs),
           "--seed", str(args.seed)]
    for flag, value in (("--pages", args.pages), ("--workers", args.workers)):
        if value is not None:
            cmd += [flag, str(value)]
    crawled = run_child(*cmd, what="the crawl")
    pages = load(args.pages, args.data)
    per_page = []
    scores: dict[str, list[Score]] = {"crawl": [], "direct": [], "trafilatura": []}
    for page in pages:
        got = crawled["pages"].get(page.id, {})
        url = f"{crawled['base']}/page/{page.id}"
        texts = {"crawl": got.get("text"), "direct": direct(page, url),
                 "trafilatura": trafilatura_alone(page)}
        row = {"id": page.id, "item": bool(got), "with_text": bool(got.get("text")),
               "error": got.get("error"), "intact": got.get("intact", False)}
        for kind, text in texts.items():
            s = score(text, page.truth)
            scores[kind].append(s)
            row[kind] = {"precision": s.precision, "recall": s.recall, "f1": s.f1}
        per_page.append(row)
    linked = len(pages)
    return {"pages": linked, "feeds": len(feeds_of(pages, args.per_feed)),
            "items": crawled["items"],
            "with_text": sum(r["with_text"] for r in per_page),
            "share_with_text": sum(r["with_text"] for r in per_page) / max(1, linked),
            "intact": sum(r["intact"] for r in per_page), "failed": crawled["failed"],
            **{kind: summary(s) for kind, s in scores.items()}, "per_page": per_page}


def render(r: dict) -> str:
    lines = [f"{r['pages']} real news pages linked from {r['feeds']} feeds: items "
             f"{r['items']}, with text {r['with_text']} ({r['share_with_text']:.1%}), "
             f"fetched intact {r['intact']}, failed {r['failed']}",
             f"{'4-token shingles':28}{'F1':>8}{'precision':>11}{'recall':>8}{'F1 pages':>10}"]
    for kind, what in (("crawl", "through the crawl"),
                       ("direct", "extract_article alone"),
                       ("trafilatura", "trafilatura.extract alone")):
        s = r[kind]
        lines.append(f"{what:28}{s['f1']:8.3f}{s['precision']:11.3f}{s['recall']:8.3f}"
                     f"{s['f1_pages']:10.3f}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=None,
                    help="the first N pages of the set (default: all)")
    ap.add_argument("--data", type=Path, default=DATA,
                    help="the pages: this set (default) or a checkout of the whole benchmark")
    ap.add_argument("--per-feed", type=int, default=5, help="pages an RSS feed links to")
    ap.add_argument("--epochs", type=int, default=2,
                    help="the crawl's WHITTLE_MAX_EPOCHS (every feed is crawled each epoch)")
    ap.add_argument("--workers", type=int, default=None,
                    help="WHITTLE_PARSE_WORKERS (default: the setting's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.child:
        print(json.dumps(crawl(args)))
        return 0
    r = report(args)
    harness.emit(r, args.json, render)
    return 0
