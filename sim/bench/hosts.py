"""A rate-limiting host inside a real Scrapy crawl: does the throttle listen?

    python -m sim.bench hosts [--feeds 50] [--others 50] [--per-minute 1] [--retry-after S]
                              [--budget 40] [--epochs 48] [--seeds 3]

A Scrapy crawl with the add-on (``scrapy_whittle.Addon``, the learned ``whittle`` policy,
Scrapy's default concurrency and retries) of ``sim.serve``'s news-mix feeds on its simulated
clock (epochs of an hour; the clock stands still while a download runs and jumps when the
crawler is idle, so two days of crawl take seconds). ``--feeds`` feeds are on a host that
answers 429 above ``--per-minute`` requests a minute (``sim.web.rate_limit``, the commafeed#2181
case: Reddit allows about one request a minute per address), with ``Retry-After`` when
``--retry-after`` is given; ``--others`` feeds are on another host without a limit. Nobody
tells the crawler the limit. Reported, per seed and over the seeds:

* ``429 after first``: the share of the host's requests answered 429 after its first 429;
* ``429 after learnt``: the same from the epoch after the host's first throttle cut (the
  requests of the epoch it learnt in are left out);
* ``allowance used``: the host's crawls in each epoch after the cut over its allowance of
  that epoch (what the throttle lets the plan give it), summed over the epochs: how much of
  the allowance its feeds still get;
* the host's allowance at the end, its requests answered per epoch over the crawl, and the
  crawls per epoch the host bears (``--per-minute`` x the epoch's minutes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.bench import harness
from sim.crawls.in_process import run_crawls

START = 1_700_000_000.0


@dataclass
class HostRun:
    """What one crawl did to the rate-limited host."""

    seed: int
    requests: int                 # to the host
    refused: int                  # 429s
    after_first: int              # requests answered from the first 429 on (itself included)
    refused_after_first: int
    cut_epoch: int | None         # the epoch of the first throttle cut (None: never cut)
    after_cut: int                # requests from the epoch after that on
    refused_after_cut: int
    planned_after_cut: int        # crawls of the host planned in those epochs
    answered_after_cut: int       # and answered (not 429) by the host
    allowed_after_cut: int        # the host's caps of those epochs
    allowance: float              # at the end (inf: none)
    cuts: int                     # the throttle's cuts of the host
    bearable: float               # crawls per epoch the host answers
    epochs: int                   # of the crawl

    @property
    def answered_per_epoch(self) -> float:
        """The host's requests answered (not 429) per epoch of the crawl."""
        return (self.requests - self.refused) / self.epochs if self.epochs else 0.0

    @property
    def share_after_first(self) -> float:
        return self.refused_after_first / self.after_first if self.after_first else 0.0

    @property
    def share_after_cut(self) -> float:
        return self.refused_after_cut / self.after_cut if self.after_cut else 0.0

    @property
    def allowance_used(self) -> float:
        """The host's answered crawls over its caps, from the epoch after the cut on."""
        return (self.answered_after_cut / self.allowed_after_cut if self.allowed_after_cut
                else math.nan)


class HostWatch:
    """Each epoch's cap and plan of ``host``, read from the service's throttle as each
    epoch's selection is made (the bench's instrument: the service is not changed)."""

    def __init__(self, service, host: str) -> None:
        self.host = host
        self.epochs: dict[int, tuple[int, int, int]] = {}   # epoch -> (planned, cap, cuts)
        self.calls: list[tuple[int, int]] = []              # each selection: (epoch, cuts)
        throttle = service.throttle
        select = throttle.select

        def watched(pick, epoch, *args, **kwargs):
            chosen = select(pick, epoch, *args, **kwargs)
            h = throttle.allowances.hosts.get(host)
            if h is not None and math.isfinite(h.allowance):
                # the cap was the whole credit before the plan spent some of it
                cap = h.planned + math.floor(max(h.credit, 0.0) + 1e-9)
                self.epochs[epoch] = (h.planned, cap, h.throttles)
            else:
                self.epochs[epoch] = (0, -1, 0 if h is None else h.throttles)
            self.calls.append((epoch, self.epochs[epoch][2]))
            return chosen

        throttle.select = watched

    def cut_epoch(self) -> int | None:
        """The epoch the host's allowance was first cut in: that of the selection before
        the first that saw a cut (the epoch before, with one selection an epoch; with
        decision steps, most often the same)."""
        first = next((j for j, (_, cuts) in enumerate(self.calls) if cuts), None)
        if first is None:
            return None
        return self.calls[first - 1][0] if first else self.calls[0][0] - 1


def settings_for(urls: list[str], clock, budget: float, period: float, epochs: int) -> dict:
    """The crawl's settings: the add-on's defaults, the simulated clock."""
    return {
        "ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_SOURCES": urls,
        "WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": period, "WHITTLE_MAX_EPOCHS": epochs,
        "WHITTLE_CLOCK": clock, "WHITTLE_LOGSTATS_INTERVAL": 0, "LOGSTATS_INTERVAL": 0,
        "DOWNLOAD_DELAY": 0, "ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "ERROR", "DOWNLOAD_TIMEOUT": 10,
    }


async def crawl(*, feeds: int = 50, others: int = 50, per_minute: int = 1,
                retry_after: float | None = None, budget: float = 40,
                period: float = 600.0, epochs: int = 144, seed: int = 0,
                settings: dict | None = None) -> HostRun:
    """One crawl (on the running reactor) and what it did to the rate-limited host."""
    from scrapy import signals
    from scrapy.crawler import Crawler

    from scrapy_whittle.scrapy.sink import whittle_service
    from scrapy_whittle.scrapy.spiders import FeedSpider
    from scrapy_whittle.service.clock import SimulatedClock
    from sim.serve import start_server
    from sim.web.rate_limit import HOST, RateLimit

    clock = SimulatedClock(start=START, speed=0.0)
    limit = RateLimit(feeds, per_minute, retry_after)
    server = start_server("news-mix", n=feeds + others, speed=1.0, seed=seed, clock=clock,
                          rate_limit=limit)
    urls = ([f"http://{HOST}:{server.port}/feed/{i}.xml" for i in range(feeds)]
            + [f"{server.url}/feed/{i}.xml" for i in range(feeds, feeds + others)])
    crawler = Crawler(FeedSpider, {**settings_for(urls, clock, budget, period, epochs),
                                   **(settings or {})})
    box = {}

    def opened(spider):
        box["service"] = service = whittle_service(crawler)
        box["watch"] = HostWatch(service, HOST)

    crawler.signals.connect(opened, signal=signals.spider_opened, weak=False)
    try:
        await crawler.crawl()
    finally:
        await server.stop()
    return measure(seed, limit, box["service"], box["watch"], per_minute)


def measure(seed: int, limit, service, watch: HostWatch, per_minute: int) -> HostRun:
    """What the crawl (its ``service``, ended) did to the host of ``limit``."""
    log = limit.log
    origin, period = service.origin, service.config.period
    statuses = [status for _, _, status in log]
    first = next((j for j, s in enumerate(statuses) if s == 429), None)
    after_first = statuses[first:] if first is not None else []
    cut = watch.cut_epoch()
    after_cut = [s for (t, _, s) in log
                 if cut is not None and int((t - origin) // period) > cut]
    later = [(n, c) for k, (n, c, _) in watch.epochs.items()
             if cut is not None and k > cut and c >= 0]
    measured = {k for k, (_, c, _) in watch.epochs.items()
                if cut is not None and k > cut and c >= 0}
    return HostRun(
        seed=seed, requests=len(log), refused=statuses.count(429),
        after_first=len(after_first), refused_after_first=after_first.count(429),
        cut_epoch=cut, after_cut=len(after_cut), refused_after_cut=after_cut.count(429),
        planned_after_cut=sum(n for n, _ in later), allowed_after_cut=sum(c for _, c in later),
        answered_after_cut=sum(1 for (t, _, s) in log if s != 429
                               and int((t - origin) // period) in measured),
        allowance=service.throttle.allowances.allowance(watch.host),
        cuts=getattr(service.throttle.allowances.hosts.get(watch.host), "throttles", 0),
        bearable=per_minute * period / 60.0, epochs=len(watch.epochs))


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser("hosts", __doc__)
    ap.add_argument("--feeds", type=int, default=50, help="feeds on the rate-limited host")
    ap.add_argument("--others", type=int, default=50, help="feeds on a host without limit")
    ap.add_argument("--per-minute", type=int, default=1)
    ap.add_argument("--retry-after", type=float, default=None)
    ap.add_argument("--budget", type=float, default=40, help="crawls per epoch")
    ap.add_argument("--period", type=float, default=600.0, help="seconds per epoch")
    ap.add_argument("--epochs", type=int, default=144)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--step", type=float, default=None,
                    help="WHITTLE_STEP in seconds (default: the setting's default; "
                         "--period: one plan an epoch, its crawls leaving at once)")
    args = ap.parse_args(argv)
    extra = {} if args.step is None else {"WHITTLE_STEP": args.step}

    async def every_seed() -> list[HostRun]:
        return [await crawl(feeds=args.feeds, others=args.others, per_minute=args.per_minute,
                            retry_after=args.retry_after, budget=args.budget,
                            period=args.period, epochs=args.epochs, seed=seed, settings=extra)
                for seed in range(args.seeds)]

    runs = run_crawls(every_seed)
    ra = "none" if args.retry_after is None else f"{args.retry_after:g} s"
    print(f"{args.feeds} feeds on a host answering 429 above {args.per_minute} request(s) a "
          f"minute (Retry-After: {ra}), {args.others} on another host; budget "
          f"{args.budget:g} per epoch of {args.period:g} s, {args.epochs} epochs, Scrapy with "
          "the add-on on the simulated clock"
          + ("" if args.step is None else f", a decision every {args.step:g} s"))
    print("seed  requests  429s  429 after first  cut in epoch  429 after learnt  "
          "allowance used  allowance  answered/epoch  bears")
    for r in runs:
        print(f"{r.seed:>4}  {r.requests:>8}  {r.refused:>4}  "
              f"{r.share_after_first:>15.1%}  {r.cut_epoch!s:>12}  "
              f"{r.share_after_cut:>16.1%}  {r.allowance_used:>14.1%}  "
              f"{r.allowance:>9.3g}  {r.answered_per_epoch:>14.3g}  {r.bearable:>5.3g}")
    after_first = sum(r.refused_after_first for r in runs) / max(
        1, sum(r.after_first for r in runs))
    after_cut = sum(r.refused_after_cut for r in runs) / max(1, sum(r.after_cut for r in runs))
    used = sum(r.answered_after_cut for r in runs) / max(
        1, sum(r.allowed_after_cut for r in runs))
    print(f" all  {sum(r.requests for r in runs):>8}  {sum(r.refused for r in runs):>4}  "
          f"{after_first:>15.1%}  {'':>12}  {after_cut:>16.1%}  {used:>14.1%}")
    return 0
