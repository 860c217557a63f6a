"""WebSub inside a real Scrapy crawl: ``sim.bench.push``'s question asked of the product.

    python -m sim.bench websub [--n 200] [--budget 2%] [--horizon 168] [--seeds 1]
        [--runs no-hub,hub,hub-down,faults] [--first-seed 0]

A Scrapy crawl with the add-on (``scrapy_whittle.Addon``, its default learned policy) of
``sim.serve``'s news-mix feeds (warm start, epochs of one simulated hour) on a simulated
clock shared with the server (it stands still while a download or a hub delivery is on its
way and jumps when the crawler is idle). Per seed, four crawls of the same web:

* ``no-hub``: no hub; every source is polled (the reference);
* ``hub``: ``--share`` of the sources name ``sim.serve``'s hub (``sim.web.websub_hub``), which
  loses ``--loss`` of the deliveries and delays the rest (``--delay`` law, at most
  ``--delay-max-s``); the crawl subscribes (``WHITTLE_WEBSUB_CALLBACK``);
* ``hub-down``: the same hub, which delivers nothing published after ``--down-at`` (default:
  the middle of the measured epochs) and refuses subscriptions from then on;
* ``faults``: the same hub, also sending ``--duplicate`` of its deliveries twice, spurious
  pings, ``--bad-signature`` of its deliveries signed with a wrong key, and granting leases
  of ``--lease-h`` hours (shorter than the crawl); the crawl is stopped after half its epochs
  and started again with the same JOBDIR.

Utility is the server's ground truth: each entry is worth its value (``sim.web.feedweb``) at its
first capture, by a poll (the server's ledger) or by a delivery the hub signed well (the hub's
POSTs that failed are printed: none expected); summed over the measured epochs (after
``--warmup``, default a third of the horizon) and divided by ``no-hub``'s. Reported as
``sim.bench.push`` does: the pushing sources' polls against ``no-hub``'s, the median
discovery delay of their entries published in the measured epochs, and for ``hub-down``,
after the fall, the utility against ``no-hub``'s over the same epochs and, per pushing source
that ``no-hub`` polled at least twice in the measured epochs (its usual interval I) with 2 I
left after the fall, whether its first poll after the fall came within 2 I. Over every
crawl: entries emitted twice (items counted by entry id), and for ``faults`` the bad
signatures the hub sent against those the crawl counted (``whittle/errors/push_signature``),
the duplicates and spurious pings it sent against the pushes the crawl learnt, those that
brought nothing new and the repeats it acknowledged (``whittle/push/repeated``),
the subscriptions renewed (the hub's verified subscriptions beyond the first of each source,
none expired), and the subscriptions the second start kept (the same callbacks and secrets in
the state, none subscribed anew, deliveries taken).
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim.bench import harness
from sim.bench.policies import budget_arg, budget_of
from sim.crawls.in_process import run_crawls
from sim.crawls.processes import free_port

START = 1_700_000_000.0
HOUR = 3600.0
RUNS = ("no-hub", "hub", "hub-down", "faults")


@dataclass
class Ledger:
    """The server side of one crawl: each entry's first capture (virtual hours), the polls
    of each source, the deliveries that reached the crawl."""

    first: dict[tuple[int, int], tuple[float, Any]] = field(default_factory=dict)  # (at, item)
    polls: list[tuple[int, float]] = field(default_factory=list)      # (source, hour)
    pushed: int = 0

    def capture(self, item, v: float) -> None:
        key = (item.source, item.seq)
        if key not in self.first or v < self.first[key][0]:
            self.first[key] = (v, item)


def watch_server(server, ledger: Ledger) -> None:
    """Record every poll and every well-signed delivery the hub sent (the bench's
    instrument: the server's behaviour is not changed)."""
    web, resource = server.web, server.resource
    fetch = web.fetch

    def fetched(i, t):
        new, value = fetch(i, t)
        ledger.polls.append((i, t))
        for it in new:
            ledger.capture(it, t)
        return new, value

    web.fetch = fetched
    hub = resource.hub
    if hub is None:
        return
    deliver, post = hub._deliver, hub._post
    current: list = [None]          # the event being delivered

    def delivering(event):
        current[0] = event
        try:
            deliver(event)
        finally:
            current[0] = None

    def posting(callback, body, headers):
        event = current[0]
        post(callback, body, headers)
        if event is None or event.bad or event.item is None:
            return
        v = resource.clock.now()
        ledger.pushed += 1
        ledger.capture(event.item, v)

    hub._deliver, hub._post = delivering, posting


@dataclass
class Crawl:
    """What one crawl (or two, for a restart) showed."""

    name: str
    ledger: Ledger
    items: Counter
    stats: list[dict]
    hub: dict | None
    pushing: np.ndarray
    web: Any
    keys: list[set] = field(default_factory=list)   # the state's subscriptions per stop
    topics: int = 0                                 # sources the hub ever verified


def settings_for(urls, clock, budget: float, epochs: int, port: int | None,
                 jobdir: str | None) -> dict:
    s = {"ADDONS": {"scrapy_whittle.Addon": 0}, "WHITTLE_SOURCES": urls,
         "WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": HOUR, "WHITTLE_MAX_EPOCHS": epochs,
         "WHITTLE_CLOCK": clock, "WHITTLE_LOGSTATS_INTERVAL": 0, "LOGSTATS_INTERVAL": 0,
         "DOWNLOAD_DELAY": 0, "ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False,
         "LOG_LEVEL": "ERROR", "DOWNLOAD_TIMEOUT": 10, "RETRY_ENABLED": False}
    if port is not None:
        s["WHITTLE_WEBSUB_CALLBACK"] = f"http://127.0.0.1:{port}/websub"
        s["WHITTLE_WEBSUB_LISTEN"] = f"127.0.0.1:{port}"
    if jobdir is not None:
        s["JOBDIR"] = jobdir
    return s


def stored_keys(jobdir: str) -> set:
    db = sqlite3.connect(f"{jobdir}/whittle.sqlite")
    try:
        return set(db.execute("SELECT key, secret FROM websub").fetchall())
    finally:
        db.close()


async def crawl(name: str, *, n: int, budget: float, epochs: int, seed: int,
                hub: str | None, restart: bool = False, tick: float = 0.005) -> Crawl:
    """One crawl (two halves on one JOBDIR with ``restart``) on the running reactor."""
    from scrapy import signals
    from scrapy.crawler import Crawler

    from scrapy_whittle.scrapy.spiders import FeedSpider
    from scrapy_whittle.service.clock import SimulatedClock
    from sim.serve import start_server

    clock = SimulatedClock(start=START, speed=0.0)
    server = start_server("news-mix", n=n, speed=1.0, seed=seed, clock=clock, hub=hub,
                          hub_tick=tick)
    ledger = Ledger()
    watch_server(server, ledger)
    urls = [f"{server.url}/feed/{i}.xml" for i in range(n)]
    port = free_port() if hub else None
    items: Counter = Counter()
    stats: list[dict] = []
    keys: list[set] = []
    halves = [epochs // 2, epochs - epochs // 2] if restart else [epochs]
    with tempfile.TemporaryDirectory() as tmp:
        jobdir = str(Path(tmp) / "job") if restart else None
        try:
            for part in halves:
                crawler = Crawler(FeedSpider, settings_for(urls, clock, budget, part, port,
                                                           jobdir))

                def scraped(item, response, spider):
                    items[item["entry_id"]] += 1

                crawler.signals.connect(scraped, signal=signals.item_scraped, weak=False)
                await crawler.crawl()
                stats.append({k[len("whittle/"):]: v for k, v in crawler.stats.get_stats()
                              .items() if k.startswith("whittle/")})
                if jobdir is not None:
                    keys.append(stored_keys(jobdir))
        finally:
            await server.stop()
    h = server.resource.hub
    pushing = h.pushing if h is not None else np.zeros(n, dtype=bool)
    return Crawl(name, ledger, items, stats, None if h is None else h.totals(), pushing,
                 server.web, keys, 0 if h is None else len(h.subs))


def value_captured(c: Crawl, lo: float, hi: float) -> float:
    """The ground-truth value of the entries first captured in [lo, hi) (virtual hours)."""
    decay = c.web.params.decay
    return float(sum(it.base * np.exp(-decay[it.source] * (v - it.published))
                     for v, it in c.ledger.first.values() if lo <= v < hi))


def polls(c: Crawl, lo: float, hi: float) -> np.ndarray:
    """Polls per source in [lo, hi)."""
    out = np.zeros(c.web.n, dtype=np.int64)
    for i, v in c.ledger.polls:
        if lo <= v < hi:
            out[i] += 1
    return out


def delays_s(c: Crawl, pushing: np.ndarray, since: float) -> np.ndarray:
    """Seconds from publication to first capture of the pushing sources' entries published
    at or after ``since``."""
    return np.array([(v - it.published) * HOUR for v, it in c.ledger.first.values()
                     if pushing[it.source] and it.published >= since])


def first_poll_after(c: Crawl, down: float) -> np.ndarray:
    first = np.full(c.web.n, np.inf)
    for i, v in c.ledger.polls:
        if v >= down and v < first[i]:
            first[i] = v
    return first


def hub_spec(args, *, down: float | None = None, faults: bool = False) -> str:
    spec = {"share": args.share, "loss": args.loss, "delay": args.delay,
            "delay_mean": args.delay_mean_s, "delay_max": args.delay_max_s}
    if down is not None:
        spec["down_at"] = down * HOUR
    if faults:
        spec.update(duplicate=args.duplicate, spurious=args.spurious / HOUR,
                    bad_signature=args.bad_signature, lease_max=args.lease_h * HOUR)
    return ",".join(f"{k}={v:g}" if not isinstance(v, str) else f"{k}={v}"
                    for k, v in spec.items())


async def evaluate(args) -> dict[str, Any]:
    n, horizon = args.n, args.horizon
    warmup = horizon // 3 if args.warmup is None else args.warmup
    down = warmup + (horizon - warmup) // 2 if args.down_at is None else args.down_at
    budget = budget_of(args.budget, n) if isinstance(args.budget, str) else float(args.budget)
    out: dict[str, Any] = {"n": n, "budget": budget, "horizon": horizon, "warmup": warmup,
                           "down_at": down, "seeds": args.seeds,
                           "hub": hub_spec(args), "faults": hub_spec(args, faults=True),
                           "per_seed": []}
    hubs = {"no-hub": None, "hub": hub_spec(args), "hub-down": hub_spec(args, down=down),
            "faults": hub_spec(args, faults=True)}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        kw = {"n": n, "budget": budget, "epochs": horizon, "seed": seed}
        runs = {name: await crawl(name, hub=hubs[name], restart=name == "faults", **kw)
                for name in args.runs}
        out["per_seed"].append(measure(runs, warmup, horizon, down))
    return out


def measure(runs: dict[str, Crawl], warmup: int, horizon: int, down: float) -> dict:
    pushing = next(c.pushing for c in runs.values() if c.hub is not None)
    ref = runs["no-hub"]
    ref_util = value_captured(ref, warmup, horizon)
    ref_polls = polls(ref, warmup, horizon)
    rows: dict[str, dict] = {}
    for name, c in runs.items():
        p = polls(c, warmup, horizon)
        d = delays_s(c, pushing, warmup)
        rows[name] = {
            "utility": value_captured(c, warmup, horizon) / (horizon - warmup),
            "utility_vs_no_hub": value_captured(c, warmup, horizon) / ref_util,
            "pusher_polls": int(p[pushing].sum()), "other_polls": int(p[~pushing].sum()),
            "pusher_polls_vs_no_hub": p[pushing].sum() / max(1, ref_polls[pushing].sum()),
            "delay_median_s": float(np.median(d)) if d.size else float("nan"),
            "delay_p90_s": float(np.quantile(d, 0.9)) if d.size else float("nan"),
            "emitted_twice": sum(1 for k in c.items.values() if k > 1),
            "items": len(c.items), "pushed": c.ledger.pushed,
            "errors": dict(sum((Counter({k: v for k, v in s.items() if k.startswith("errors/")})
                                for s in c.stats), Counter())),
            "push_new_items": sum(s.get("push/new_items", 0) for s in c.stats),
        }
        if c.hub is not None:
            rows[name]["hub"] = c.hub
    if "hub-down" in runs:
        rows["hub-down"]["after_down"] = fall_measures(runs["hub-down"], ref, ref_polls,
                                                       pushing, warmup, horizon, down)
    if "faults" in runs:
        f = runs["faults"]
        first, second = f.stats
        rows["faults"]["restart"] = {
            "bad_signatures_sent": f.hub["bad_signatures"],
            "bad_signatures_counted": sum(s.get("errors/push_signature", 0) for s in f.stats),
            "pushers": int(pushing.sum()),
            "subscribed": f.hub["subscribed"], "expired": f.hub["expired"],
            "topics": f.topics, "renewed": f.hub["subscribed"] - f.topics,
            "active_at_end": f.hub["active_subscriptions"],
            "state_before": len(f.keys[0]), "kept_after": len(f.keys[0] & f.keys[1]),
            "new_after": len(f.keys[1] - f.keys[0]),
            "second_renewals": second.get("websub/verified", 0),
            "second_push_new_items": second.get("push/new_items", 0),
            "first_verified": first.get("websub/verified", 0),
            "duplicates_sent": f.hub["duplicates"], "spurious_sent": f.hub["spurious"],
            "pushes": sum(s.get("push/deliveries", 0) for s in f.stats),
            "empty_pushes": sum(s.get("push/empty", 0) for s in f.stats),
            "repeated": sum(s.get("push/repeated", 0) for s in f.stats)}
    return rows


def fall_measures(c: Crawl, ref: Crawl, ref_polls: np.ndarray, pushing: np.ndarray,
                  warmup: int, horizon: int, down: float) -> dict[str, Any]:
    """What the ``hub-down`` crawl ``c`` shows after the fall, against ``ref`` (no hub)."""
    measured = horizon - warmup
    usual = np.where(ref_polls >= 2, measured / np.maximum(ref_polls, 1), np.inf)
    ok = pushing & np.isfinite(usual) & (down + 2 * usual <= horizon)
    wait = first_poll_after(c, down)[ok] - down
    return {
        "utility_vs_no_hub": value_captured(c, down, horizon) / value_captured(ref, down,
                                                                               horizon),
        "judged_sources": int(ok.sum()),
        "polled_within_two_intervals": float(np.mean(wait <= 2 * usual[ok])) if ok.any()
        else float("nan"),
        "wait_over_interval_median": float(np.median(wait / usual[ok])) if ok.any()
        else float("nan")}


def format_results(report: dict[str, Any]) -> str:
    lines = [f"news-mix N = {report['n']}, budget {report['budget']:g}/epoch of 1 h, "
             f"{report['horizon']} epochs (measured after {report['warmup']}), Scrapy with the "
             f"add-on on the simulated clock; hub: {report['hub']}; hub-down at hour "
             f"{report['down_at']:g}; faults: {report['faults']}, stopped after "
             f"{report['horizon'] // 2} epochs and started again on its JOBDIR"]
    for seed, rows in enumerate(report["per_seed"]):
        lines += [f"seed {seed}",
                  f"{'run':<10}{'utility/ep':>12}{'vs no-hub':>10}{'pusher polls':>13}"
                  f"{'vs no-hub':>10}{'other polls':>12}{'delay med s':>12}{'p90 s':>9}"
                  f"{'pushed':>8}{'items':>8}{'twice':>6}"]
        for name, r in rows.items():
            lines.append(f"{name:<10}{r['utility']:>12.1f}{r['utility_vs_no_hub']:>10.4f}"
                         f"{r['pusher_polls']:>13}{r['pusher_polls_vs_no_hub']:>10.3f}"
                         f"{r['other_polls']:>12}{r['delay_median_s']:>12.1f}"
                         f"{r['delay_p90_s']:>9.0f}{r['pushed']:>8}{r['items']:>8}"
                         f"{r['emitted_twice']:>6}")
        fall = rows.get("hub-down", {}).get("after_down")
        if fall is not None:
            lines.append(f"hub-down, after the fall: utility {fall['utility_vs_no_hub']:.4f} of "
                         f"no-hub's (lost {1 - fall['utility_vs_no_hub']:+.2%}); first poll "
                         f"within 2 usual intervals: {fall['polled_within_two_intervals']:.1%} of "
                         f"{fall['judged_sources']} pushing sources (median wait "
                         f"{fall['wait_over_interval_median']:.2f} intervals)")
        if "faults" in rows:
            r = rows["faults"]["restart"]
            lines.append(
                f"faults: bad signatures sent {r['bad_signatures_sent']}, counted "
                f"{r['bad_signatures_counted']}; {r['pushers']} pushing sources, "
                f"{r['topics']} subscribed, {r['subscribed']} verified subscriptions "
                f"({r['renewed']} renewals), {r['expired']} expired, {r['active_at_end']} "
                f"active at the end; at the stop {r['state_before']} subscriptions in the "
                f"state, {r['kept_after']} of them kept (same callback and secret) by the "
                f"second start ({r['new_after']} sources subscribed anew), which verified "
                f"{r['second_renewals']} subscriptions, "
                f"{r['second_push_new_items']} entries pushed; the hub sent "
                f"{r['duplicates_sent']} duplicates and {r['spurious_sent']} spurious pings, "
                f"the crawl learnt {r['pushes']} pushes ({r['empty_pushes']} bringing "
                f"nothing new) and acknowledged {r['repeated']} repeats")
        lines.append("hub's failed POSTs: " + ", ".join(
            f"{name} {r['hub']['failed_posts']}" for name, r in rows.items() if "hub" in r))
        for name, r in rows.items():
            if r["errors"]:
                lines.append(f"{name} errors: {r['errors']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = harness.parser("websub", __doc__)
    ap.add_argument("--n", type=int, default=200, help="sources (news-mix)")
    ap.add_argument("--budget", type=budget_arg, default="2%",
                    help="crawls per epoch, a number or a share of the sources")
    ap.add_argument("--horizon", type=int, default=168, help="epochs (hours) per crawl")
    ap.add_argument("--warmup", type=int, default=None, help="epochs left out")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--share", type=float, default=0.5, help="share of sources that push")
    ap.add_argument("--loss", type=float, default=0.1)
    ap.add_argument("--delay", choices=("exponential", "uniform"), default="exponential")
    ap.add_argument("--delay-mean-s", type=float, default=30.0)
    ap.add_argument("--delay-max-s", type=float, default=300.0)
    ap.add_argument("--down-at", type=float, default=None, help="hour the hub goes down")
    ap.add_argument("--duplicate", type=float, default=0.1, help="faults run")
    ap.add_argument("--spurious", type=float, default=0.5,
                    help="faults run: spurious pings per hour and pushing source")
    ap.add_argument("--bad-signature", type=float, default=0.05, help="faults run")
    ap.add_argument("--lease-h", type=float, default=None,
                    help="faults run: longest lease, hours (default a quarter of the horizon)")
    ap.add_argument("--runs", default=",".join(RUNS),
                    help="the crawls to make, of " + ", ".join(RUNS) + " (no-hub always)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = sorted(set(runs) - set(RUNS))
    if unknown:
        ap.error(f"unknown runs {unknown}; known: {', '.join(RUNS)}")
    args.runs = [r for r in RUNS if r in runs or r == "no-hub"]
    if args.runs == ["no-hub"]:
        ap.error("--runs needs a run with a hub")
    if args.lease_h is None:
        args.lease_h = max(1.0, args.horizon / 4)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run_crawls(lambda: evaluate(args))
    harness.emit(report, args.json, format_results, default=float)
    return 0
