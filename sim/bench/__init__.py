"""The benchmarks, one module each, run by one command (``sim/bench/__main__.py``)::

    python -m sim.bench [options]          # the crawl policies on the simulated web (policies)
    python -m sim.bench NAME [options]     # benchmark NAME, one of BENCHMARKS
    python -m sim.bench NAME --help        # its options

What several of them share (the report printed as a table or one JSON object, a child
process's result) is in ``harness``; the crawls they start are ``sim.crawls``'.
"""

from __future__ import annotations

#: every benchmark by name: its module under sim.bench (the name with "-" for "_") and what
#: it measures, as ``python -m sim.bench --help`` lists them
BENCHMARKS = {
    "scheduler": "the crawler's scheduling side at scale, against Scrapy's default scheduler",
    "throughput": "feeds per second: bare Scrapy against the whole stack, on the same feeds",
    "hosts": "a rate-limiting host inside a real Scrapy crawl",
    "push": "push as a noisy signal: the learned Whittle policy with and without a hub",
    "websub": "WebSub inside a real Scrapy crawl",
    "articles": "full articles: extraction quality, throughput, politeness (--real: real pages)",
    "sitemap": "a crawl of big news sitemaps against one of RSS feeds of the same size",
    "sites": "feeds found from sites' addresses, against what they link",
    "overlap": "the same story in several feeds, by each story identity (WHITTLE_DEDUP)",
    "cluster": "a cluster crawl against one process, on the same simulated web",
    "cluster-memory": "Redis memory per source of a cluster crawl at scale",
    "cluster-websub": "WebSub in a cluster crawl: K Scrapy processes behind one callback",
    "planner": "the cluster planner's crawls a second, its Redis per source, its take-over",
    "soak": "a long crawl of a hostile web, with what it cost over time",
}


def module_of(name: str) -> str:
    """The module that runs benchmark ``name``."""
    return f"sim.bench.{name.replace('-', '_')}"


def listing() -> str:
    """The benchmarks, one a line, for ``--help``."""
    width = max(map(len, BENCHMARKS))
    return "\n".join(f"  {name:{width}}  {what}" for name, what in BENCHMARKS.items())
