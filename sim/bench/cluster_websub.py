"""WebSub in a cluster crawl, measured: K Scrapy processes behind one callback.

    python -m sim.bench cluster-websub [--workers 2] [--feeds 100] [--seconds 60]
        [--hub loss=0.1,delay=uniform,delay_max=300] [--mirror] [--json]

Starts a ``redis-server`` and, for each run, a fresh ``sim.serve`` (news-mix, same seed: the
same entries) and K ``sim.crawls.cluster_crawl`` processes for ``--seconds``, WebSub on
(``WHITTLE_WEBSUB_CALLBACK`` the public URL of a :class:`~sim.crawls.callback_proxy.CallbackProxy`,
each process's own ``WHITTLE_WEBSUB_LISTEN`` behind it): first without a hub, then with
``--hub`` (half the sources push). The proxy hands each verification and delivery to one
process in turn, or with ``--mirror`` every delivery to every process at once.

Reported per run, from ``--warmup`` seconds on (the subscriptions made and the policy's first
lessons left out): the polls of the pushing sources and of the others, the items that came by
push, entries emitted twice across the processes, the hub's counts, the subscriptions the
planner asked for (one per pushing source, whatever K), the deliveries each process took,
those found received already (``whittle/push/repeated``: with ``--mirror``, a copy another
process took), the pushes the planner learnt (one per delivery), and the pushing sources'
delay from publication to capture, on two clocks:

* **simulated** (``delay_median_s``, ``delay_p90_s``; columns "delay med s", "p90 s"): each
  item's ``delay`` (real seconds from the publication date its feed shows to its capture)
  times ``--speed``. It is what the simulated web's own timing makes of every real second:
  a poll's schedule is right (its epochs are simulated half hours), but a delivery's real
  path (the hub's ``tick``, the proxy, a process, Redis) counts 3600 times, and so does the
  publication date's resolution (the parsed dates are whole seconds: up to a simulated hour).
* **real** (``real_delay_s``; columns "real med s", "p90 s"): the delay a deployment, whose
  clock is real, would see. A pushed entry's is the hub's lateness (the delay the hub drew
  for it, ``X-Sim-Delay``: seconds of the scenario, which a real hub spends in real seconds)
  plus the crawl's own latency (below); a polled entry's is its simulated delay.
  ``real_delay_pushed_s``: the pushed entries' alone.

The crawl's own latency (``latency_ms``, real milliseconds: median, p90, max, count): from the
moment the callback proxy received the hub's POST (its request line and headers read) to the
item of that entry reaching the pipeline of the process that emitted it (``piped_at``,
written by ``sim.crawls.cluster_crawl``): the proxy, a process's callback, its Redis read of the
subscription, the engine, the parse pool, the entry memory's Redis scripts, the spider.
Each pushed item is matched, by the entry the hub names (``X-Sim-Entry``), to the last
delivery of it that reached the proxy before its process took it (``discovered_at``: the
delivery's signature checked against the subscription read from Redis); ``to_process_ms``:
the part up to then. ``unmatched_pushed_items``: pushed items with no such delivery (0 unless
the instrument is broken). The hub sends the deliveries of an hour of the scenario in a real
second, so the crawl takes them 3600 times as fast as it would on a real clock: the latency
is measured under that load, on shared cores: deliveries that come together wait for each
other in a process, so the tail grows with the load (and with ``--mirror``, where every
process handles every delivery).

Every process, the web, the proxy and Redis share this machine's cores; the web runs at
``--speed`` 3600 (a simulated hour per second, an epoch half an hour).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sim.bench import harness
from sim.bench.cluster import Web
from sim.crawls.callback_proxy import CallbackProxy
from sim.crawls.processes import RedisServer, free_port, reap
from sim.web.websub_hub import parse_hub

PERIOD = 0.5
UNIT = 3600.0                  # news-mix: seconds per scenario time unit


def _crawl(args, tmp: Path, redis_url: str, hub: str, tag: str) -> dict[str, Any]:
    web = Web(args, ["--hub", hub] if hub else [])
    ports = [free_port() for _ in range(args.workers)]
    proxy = CallbackProxy(ports, mirror=args.mirror)
    budget = args.budget or max(1.0, args.feeds / 20)
    started = time.time()
    procs = []
    try:
        for i, port in enumerate(ports):
            settings = {"WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": PERIOD,
                        "WHITTLE_REDIS_PREFIX": f"bench-{tag}:{{spider}}",
                        "WHITTLE_REDIS_LEASE": 30.0, "WHITTLE_REDIS_LOCK_TTL": 5.0,
                        "CONCURRENT_REQUESTS": 32, "CONCURRENT_REQUESTS_PER_DOMAIN": 100_000,
                        "WHITTLE_CHECKPOINT_INTERVAL": 2.0, "LOG_LEVEL": "WARNING",
                        "CLUSTER_FSYNC": False, "CLUSTER_POLLS_AFTER": args.warmup,
                        "EXTENSIONS": {"scrapy_whittle.scrapy.websub.WebSubSubscriber": 500},
                        "WHITTLE_WEBSUB_CALLBACK": proxy.url,
                        "WHITTLE_WEBSUB_LISTEN": f"127.0.0.1:{port}"}
            with open(tmp / f"{tag}-{i}.log", "w") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "sim.crawls.cluster_crawl", redis_url, web.url,
                     str(args.feeds), str(tmp / f"{tag}-{i}.jsonl"), str(args.seconds),
                     json.dumps(settings)], stdout=subprocess.DEVNULL, stderr=log))
        for proc in procs:
            reap(proc, args.seconds * 4 + 120)
        hub_counts = web.stats().get("hub")
    finally:
        proxy.stop()
        web.stop()
    items, stats, polls = [], [], {}
    for i in range(args.workers):
        for line in (tmp / f"{tag}-{i}.jsonl").read_text().splitlines():
            row = json.loads(line)
            if "stats" in row:
                stats.append(row["stats"])
                for url, n in row.get("polls", {}).items():
                    polls[url] = polls.get(url, 0) + n
            else:
                items.append(row)
    return {"items": items, "stats": stats, "polls": polls, "hub": hub_counts,
            "started": started, "received": list(proxy.received),
            "answered": [proxy.answered[p] for p in ports]}


def _entry(link: str) -> str:
    """An item's "source:seq" from its link (``sim.serve``'s ``.../item/<source>/<seq>``)."""
    parts = link.rstrip("/").rsplit("/", 2)
    return f"{parts[-2]}:{parts[-1]}"


def _summary(values: list[float], scale: float = 1.0) -> dict[str, float | int | None]:
    """median, p90, max (times ``scale``) and count of ``values``."""
    if not values:
        return {"median": None, "p90": None, "max": None, "count": 0}
    a = np.asarray(values) * scale
    return {"median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "max": float(a.max()), "count": int(a.size)}


def real_clock(run: dict, counted: list[dict], args) -> dict[str, Any]:
    """The crawl's own latency and the discovery delay on a real clock (see the module
    docstring). ``counted``: the pushing sources' items from the warm-up on."""
    # entry -> (when a delivery of it reached the proxy, the hub's drawn delay for it)
    arrivals: dict[str, list[tuple[float, float]]] = {}
    for at, entry, delay in run["received"]:
        if entry is not None and delay is not None:
            arrivals.setdefault(entry, []).append((at, float(delay)))
    latency, to_process, pushed, polled, unmatched = [], [], [], [], 0
    for item in counted:
        if not item.get("pushed"):
            if item["delay"] is not None:     # a poll's delay is on the simulated clock
                polled.append(item["delay"] * args.speed)
            continue
        # the delivery that brought it: the last one of its entry the proxy received before
        # the process did (a duplicate, or one a bad signature dropped, may come first)
        before = [a for a in arrivals.get(_entry(item["link"]), ())
                  if a[0] <= item["discovered_at"]]
        if not before:
            unmatched += 1
            continue
        at, hub_delay = max(before)
        latency.append(item["piped_at"] - at)
        to_process.append(item["discovered_at"] - at)
        pushed.append(hub_delay + item["piped_at"] - at)
    return {"latency_ms": _summary(latency, 1000.0),
            "to_process_ms": _summary(to_process, 1000.0),
            "unmatched_pushed_items": unmatched,
            "real_delay_pushed_s": _summary(pushed),
            "real_delay_s": _summary(pushed + polled)}


def _measure(run: dict, pushing: np.ndarray, args) -> dict[str, Any]:
    def index(url: str) -> int:
        return int(url.rsplit("/", 1)[1].split(".")[0])

    polls = np.zeros(args.feeds, dtype=np.int64)
    for url, n in run["polls"].items():
        polls[index(url)] += n
    since = run["started"] + args.warmup
    counted = [i for i in run["items"]
               if pushing[index(i["source"])] and i["discovered_at"] >= since]
    delays = np.array([i["delay"] * args.speed for i in counted if i["delay"] is not None])
    keys = [(i["source"], i["entry_id"]) for i in run["items"]]

    def total(key: str) -> float:
        return sum(s.get(f"whittle/{key}", 0) for s in run["stats"])

    return {"pusher_polls": int(polls[pushing].sum()), "other_polls": int(polls[~pushing].sum()),
            "delay_median_s": float(np.median(delays)) if delays.size else None,
            "delay_p90_s": float(np.percentile(delays, 90)) if delays.size else None,
            "items": len(keys), "twice": len(keys) - len(set(keys)),
            "pushed_items": int(total("push/new_items")),
            "subscribe_requests": int(total("websub/subscribe_requests")),
            "deliveries_taken": [int(s.get("whittle/websub/deliveries", 0))
                                 for s in run["stats"]],
            "deliveries_repeated": int(total("push/repeated")),
            "pushes_learnt": int(total("planner/push/deliveries")),
            "bad_signatures_counted": int(total("errors/push_signature")),
            **real_clock(run, counted, args), "hub": run["hub"]}


def evaluate(args) -> dict[str, Any]:
    pushing = parse_hub(args.hub, UNIT)["model"].pushers(args.feeds, args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-websub-"))
    redis = RedisServer(tmp)
    try:
        runs = {"no-hub": _crawl(args, tmp, redis.url, "", "nohub"),
                "hub": _crawl(args, tmp, redis.url, args.hub, "hub")}
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    out = {name: _measure(run, pushing, args) for name, run in runs.items()}
    ref = max(out["no-hub"]["pusher_polls"], 1)
    out["hub"]["pusher_polls_vs_no_hub"] = out["hub"]["pusher_polls"] / ref
    return {"workers": args.workers, "feeds": args.feeds, "seconds": args.seconds,
            "warmup": args.warmup, "hub_spec": args.hub, "mirror": args.mirror,
            "pushers": int(pushing.sum()), "runs": out}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser("cluster-websub", __doc__)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--feeds", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=20.0,
                    help="seconds after the start from which polls and delays count")
    ap.add_argument("--budget", type=float, default=None,
                    help="crawls per half-second epoch (default: 5%% of the feeds)")
    ap.add_argument("--speed", type=float, default=3600.0)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--hub", default="loss=0.1,delay=uniform,delay_max=300",
                    help="sim.serve's --hub for the second run")
    ap.add_argument("--mirror", action="store_true",
                    help="every delivery to every process at once")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    report = evaluate(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.workers} processes, {args.feeds} feeds ({report['pushers']} pushing), "
          f"{args.seconds:g} s a run, counted from {args.warmup:g} s; hub {args.hub}"
          f"{', every delivery to every process' if args.mirror else ''}")
    print(f"{'run':<8}{'pusher polls':>13}{'other polls':>12}{'delay med s':>12}"
          f"{'p90 s':>9}{'real med s':>11}{'p90 s':>9}{'pushed':>8}{'items':>7}{'twice':>6}"
          f"{'subscribed':>11}")
    for name, r in report["runs"].items():
        real = r["real_delay_s"]
        print(f"{name:<8}{r['pusher_polls']:>13}{r['other_polls']:>12}"
              f"{_fmt(r['delay_median_s'], '.0f'):>12}{_fmt(r['delay_p90_s'], '.0f'):>9}"
              f"{_fmt(real['median'], '.1f'):>11}{_fmt(real['p90'], '.1f'):>9}"
              f"{r['pushed_items']:>8}{r['items']:>7}{r['twice']:>6}"
              f"{r['subscribe_requests']:>11}")
    hub = report["runs"]["hub"]
    print(f"pushing sources' polls against no hub: {hub['pusher_polls_vs_no_hub']:.3f}; "
          f"deliveries taken per process {hub['deliveries_taken']}, repeats "
          f"{hub['deliveries_repeated']}, pushes the planner learnt {hub['pushes_learnt']}; "
          f"hub {hub['hub']}")
    lat, to, real = hub["latency_ms"], hub["to_process_ms"], hub["real_delay_pushed_s"]
    print(f"crawl's latency, hub's POST at the proxy -> item in the pipeline (real ms): "
          f"median {_fmt(lat['median'], '.1f')}, p90 {_fmt(lat['p90'], '.1f')}, "
          f"max {_fmt(lat['max'], '.1f')}, {lat['count']} items (to the process's callback: "
          f"median {_fmt(to['median'], '.1f')}, p90 {_fmt(to['p90'], '.1f')}); "
          f"{hub['unmatched_pushed_items']} pushed items matched no delivery")
    print(f"pushed entries on a real clock, hub's delay + crawl's latency (s): median "
          f"{_fmt(real['median'], '.1f')}, p90 {_fmt(real['p90'], '.1f')}")
    return 0
