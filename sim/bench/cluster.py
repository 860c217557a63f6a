"""A cluster crawl against one process, on the same simulated web, in one run.

    python -m sim.bench cluster --workers 2 [--feeds 1000] [--seconds 30] [--json]

Starts a ``redis-server`` (temporary directory, free port) and, for each measurement, a fresh
``sim.serve`` (same scenario and seed, so the same entries) and crawler processes
(``sim.crawls.cluster_crawl``) for ``--seconds``:

* **utility**: a budget the machine can spend (``--budget``, default 1% of the feeds per
  half-second epoch); one process without Redis, then K processes sharing the crawl; the
  captured utility is the server's ground truth, so ``utility_ratio`` compares what K
  processes and one capture of the same entries with the same budget
  (``steady_utility_ratio``: from ``--warmup`` seconds on, the start-up left out);
* **throughput**: a budget far above what the machine can fetch; crawls per second of one
  process and of K (``speedup``).

The simulated web runs at ``--speed`` 3600 (a simulated hour per second, an epoch half an
hour): faster, the milliseconds a task spends between the planner and a worker become
simulated hours, a cost a real crawl with hourly epochs never sees. The web is one host
standing for many, so the per-host limit is lifted (in a cluster it holds across the
processes, from dispatch until the planner has learned the result: on one host it caps the
cluster's crawl rate at the limit over that round trip). Every process, the web and Redis
share this machine's cores.

**CPU per crawl** (``cpu_per_crawl``, ``cpu_ratio``: the crawlers', K processes against one)
divides the same CPU by the same crawls: the CPU each process (with its parse workers), the
web and Redis used in the steady window, from ``--warmup`` seconds to a second before the
close, over the feeds the web served in it, in the utility runs (the same budget: the same
crawls, with as many new entries each). Start-up and close, which each of K processes pays
once however long it crawls, are left out; they are in ``whole_run_cpu_per_crawl``. The
throughput runs' figures (``throughput_cpu_per_crawl``) are reported with the new entries a
crawl brought: there the cluster re-crawls each feed at its own rate, so its crawls are not
the same work as one process's (more new entries each, fewer 304s, when it crawls slower).

Also reported: entries emitted twice across the cluster (``duplicates``), budget use, Redis
memory per source (``used_memory`` after the run against before, per feed), Redis
commands per crawl (``INFO commandstats``: a script's commands count one each) and round
trips per crawl (the requests the processes' clients wrote: a command, a pipeline or a
script call is one; ``whittle/cluster/round_trips``), with the calls by what they were for
(``redis_calls_per_crawl``: a checkpoint is one call of a few round trips).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import mean
from urllib.request import urlopen

from sim.bench import harness
from sim.crawls.children import start_web
from sim.crawls.planner_load import info_sum, node_infos
from sim.crawls.processes import RedisServer, reap, tree_cpu

PERIOD = 0.5
#: seconds before a crawl's close at which its steady window ends
END_MARGIN = 1.0


class Web:
    """A ``sim.serve`` of ``args.feeds`` news-mix feeds (``args.speed``, ``args.seed``) with
    ``serve_args`` more, on a free port (``url``)."""

    def __init__(self, args, serve_args: list[str]) -> None:
        self.proc, port = start_web("--scenario", "news-mix", "--n", str(args.feeds),
                                    "--speed", str(args.speed), "--seed", str(args.seed),
                                    *serve_args)
        self.url = f"http://127.0.0.1:{port}"

    def stats(self) -> dict:
        with urlopen(self.url + "/stats.json", timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> float:
        """Stop the server; returns the CPU seconds it used."""
        self.proc.terminate()
        cpu = reap(self.proc, 20)
        self.proc.stdout.close()
        return cpu


def _story_memory(client, prefix: str) -> dict | None:
    """The story memory's keys (``WHITTLE_DEDUP = "link"``): stories held and bytes each
    (``MEMORY USAGE`` of its hashes over the story hashes they hold); None without."""
    from scrapy_whittle.cluster.stories import KEPT

    keys = list(client.scan_iter(f"{prefix}:*:stories:*"))
    if not keys:
        return None
    stories = sum(len(v) // KEPT for k in keys for v in client.hgetall(k).values())
    used = sum(client.memory_usage(k) or 0 for k in keys)
    return {"stories": stories, "bytes": used, "bytes_per_story": used / max(stories, 1)}


def _redis_cpu(client) -> float:
    if client is None:
        return 0.0
    return sum(float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
               for info in node_infos(client, "cpu"))


def _cpu_now(procs, web: Web, redis_client) -> dict:
    """CPU seconds used so far: the crawler processes (with their parse workers), the
    simulated web, Redis."""
    return {"crawlers": sum(tree_cpu(p.pid) for p in procs),
            "server": tree_cpu(web.proc.pid), "redis": _redis_cpu(redis_client)}


def _crawl(args, tmp: Path, redis_url: str, k: int, budget: float, tag: str,
           redis_client=None) -> dict:
    web = Web(args, args.serve_args)
    redis_before = _redis_cpu(redis_client)
    settings = {"WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": PERIOD,
                "WHITTLE_REDIS_PREFIX": f"bench-{tag}:{{spider}}",
                "WHITTLE_REDIS_LEASE": 30.0, "WHITTLE_REDIS_LOCK_TTL": 5.0,
                # the simulated web is one host standing for many: its per-host limit must not
                # bind (in a cluster it holds across processes, counted from dispatch until
                # the planner learns the result, which caps the crawl rate on one host)
                "CONCURRENT_REQUESTS": 32, "CONCURRENT_REQUESTS_PER_DOMAIN": 100_000,
                "WHITTLE_CHECKPOINT_INTERVAL": 2.0, "LOG_LEVEL": "WARNING",
                "CLUSTER_FSYNC": False, **args.settings}
    procs = []
    started = time.monotonic()
    for i in range(k):
        with open(tmp / f"{tag}-{i}.log", "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "sim.crawls.cluster_crawl", redis_url, web.url,
                 str(args.feeds), str(tmp / f"{tag}-{i}.jsonl"), str(args.seconds),
                 json.dumps(settings)], stdout=subprocess.DEVNULL, stderr=log))
    # the utility captured once the processes are up (start-up, election and the first
    # registration of the sources in Redis excluded): sampled after --warmup seconds
    time.sleep(args.warmup)
    warm_stats = web.stats()
    warm = warm_stats["captured"]
    # the steady window, from --warmup to a moment before the crawl's close: the CPU of
    # each process (with its parse workers), the web and Redis, and the feeds the web
    # served meanwhile (each a crawl); start-up and close, paid once per process however
    # long it crawls, are outside it
    at_warm = _cpu_now(procs, web, redis_client)
    time.sleep(max(0.0, started + args.seconds - END_MARGIN - time.monotonic()))
    at_end = _cpu_now(procs, web, redis_client)
    window_crawls = web.stats()["requests"] - warm_stats["requests"]
    crawler_cpu = sum(reap(p, args.seconds * 4 + 120) for p in procs)
    truth = web.stats()
    server_cpu = web.stop()
    redis_cpu = _redis_cpu(redis_client) - redis_before
    items, stats = [], []
    for i in range(k):
        for line in (tmp / f"{tag}-{i}.jsonl").read_text().splitlines():
            row = json.loads(line)
            (stats.append(row["stats"]) if "stats" in row else items.append(row))
    keys = [(i["source"], i["entry_id"]) for i in items]
    fetched = sum(s.get("whittle/fetched", 0) for s in stats)
    used = [s[k] for s in stats for k in ("whittle/budget_used", "whittle/planner/budget_used")
            if k in s]
    calls: dict[str, int] = {}
    for s in stats:
        for key, n in s.items():
            if key.startswith("whittle/cluster/calls/"):
                what = key.rsplit("/", 1)[1]
                calls[what] = calls.get(what, 0) + n
    return {"processes": k, "crawls_per_s": fetched / args.seconds, "crawls": fetched,
            # requests each process sent Redis (a command, pipeline or script: one each)
            "round_trips": sum(s.get("whittle/cluster/round_trips", 0) for s in stats),
            "calls": calls,
            "captured": truth["captured"], "captured_after_warmup": truth["captured"] - warm,
            "items": len(items),
            "duplicates": len(keys) - len(set(keys)), "budget_used": max(used, default=None),
            "exit_codes": [p.returncode for p in procs],
            # what a crawl brought: a crawl of more new entries costs more (parsing, items)
            "items_per_crawl": len(items) / max(fetched, 1),
            "not_modified_share": sum(s.get("whittle/not_modified", 0) for s in stats)
            / max(fetched, 1),
            # CPU seconds per crawl in the steady window: the crawler processes, the
            # simulated web and redis-server, which all share this machine's cores
            "steady_crawls": window_crawls,
            "cpu_per_crawl": {what: (at_end[what] - at_warm[what]) / max(window_crawls, 1)
                              for what in at_end},
            # over the whole run, each process's start-up and close included
            "whole_run_cpu_per_crawl": {"crawlers": crawler_cpu / max(fetched, 1),
                                        "server": server_cpu / max(fetched, 1),
                                        "redis": redis_cpu / max(fetched, 1)}}


def _steady_cpu(runs: list[dict]) -> dict:
    """CPU seconds per crawl of ``runs``' steady windows, all their crawls together."""
    crawls = max(sum(r["steady_crawls"] for r in runs), 1)
    return {what: sum(r["cpu_per_crawl"][what] * r["steady_crawls"] for r in runs) / crawls
            for what in runs[0]["cpu_per_crawl"]}


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser("cluster", __doc__)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--feeds", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--budget", type=float, default=None,
                    help="crawls per half-second epoch for the utility runs (1%% of feeds)")
    ap.add_argument("--speed", type=float, default=3600.0,
                    help="simulated seconds per second of the simulated web")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1,
                    help="utility runs of each kind (their ratio of means is reported); 0: "
                         "throughput only")
    ap.add_argument("--settings", type=json.loads, default={},
                    help="more Scrapy settings for every crawler process, as JSON")
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="seconds after start from which steady_utility_ratio counts")
    ap.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[],
                    help="more sim.serve options (e.g. --realistic --window 50)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--redis-cluster", action="store_true",
                    help="the cluster runs on a three-node Redis Cluster (Redis's figures "
                         "summed over its nodes)")
    args = ap.parse_args(argv)
    if args.warmup >= args.seconds - END_MARGIN:
        ap.error(f"--warmup ({args.warmup:g}) must end before the last {END_MARGIN:g} s of "
                 f"--seconds ({args.seconds:g})")
    budget = args.budget or max(1.0, args.feeds / 100)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    redis = RedisServer(tmp, nodes=3 if args.redis_cluster else 0)
    try:
        before = info_sum(redis.client, "memory", "used_memory")
        pairs = []
        for r in range(args.repeat):     # the simulated web is stochastic in time: repeat
            single_u = _crawl(args, tmp, "-", 1, budget, f"single-u{r}")
            cluster_u = _crawl(args, tmp, redis.url, args.workers, budget, f"cluster-u{r}",
                               redis.client)
            pairs.append((single_u, cluster_u))
            if r == 0:                   # Redis as the first cluster run left it
                memory = info_sum(redis.client, "memory", "used_memory") - before
                keys = list(redis.client.scan_iter(redis.opening("bench-cluster-u0") + ":*"))
                key_memory = sum(redis.client.memory_usage(k) or 0 for k in keys)
                commands = sum(v["calls"] for info in node_infos(redis.client, "commandstats")
                               for v in info.values())
                story_memory = _story_memory(redis.client,
                                             redis.opening("bench-cluster-u0"))
        if not pairs:
            key_memory = commands = 0
            story_memory = None
            memory = None
        single_t = _crawl(args, tmp, "-", 1, 1e6, "single-t")
        cluster_t = _crawl(args, tmp, redis.url, args.workers, 1e6, "cluster-t",
                           redis.client)
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report = {
        "workers": args.workers, "feeds": args.feeds, "seconds": args.seconds,
        "budget": budget, "period": PERIOD,
        "crawls_per_s": cluster_t["crawls_per_s"],
        "single_crawls_per_s": single_t["crawls_per_s"],
        "speedup": cluster_t["crawls_per_s"] / max(single_t["crawls_per_s"], 1e-9),
        "duplicates": sum(c["duplicates"] for _, c in pairs) + cluster_t["duplicates"],
        # the same budget (the utility runs; without them, the throughput runs), so the
        # same crawls of the same feeds, with as many new entries each: CPU per crawl in
        # the steady window, over all runs of a kind
        "cpu_per_crawl": {"single": _steady_cpu([s for s, _ in pairs] or [single_t]),
                          "cluster": _steady_cpu([c for _, c in pairs] or [cluster_t])},
        # at a budget above what the machine fetches: the cluster re-crawls each feed at
        # its own rate, so its crawls may bring more new entries each, and fewer 304s
        "throughput_cpu_per_crawl": {"single": single_t["cpu_per_crawl"],
                                     "cluster": cluster_t["cpu_per_crawl"]},
        "throughput_items_per_crawl": {"single": single_t["items_per_crawl"],
                                       "cluster": cluster_t["items_per_crawl"]},
        "cores": os.cpu_count(),
        "runs": {"utility": pairs, "single_throughput": single_t,
                 "cluster_throughput": cluster_t},
    }
    report["cpu_ratio"] = report["cpu_per_crawl"]["cluster"]["crawlers"] / max(
        report["cpu_per_crawl"]["single"]["crawlers"], 1e-12)
    if pairs:
        def avg(which, key):
            return mean([run[which][key] for run in pairs])

        report.update({
            "utility": avg(1, "captured"), "single_utility": avg(0, "captured"),
            "utility_ratio": avg(1, "captured") / max(avg(0, "captured"), 1e-9),
            "utility_ratios": [c["captured"] / max(s["captured"], 1e-9) for s, c in pairs],
            "steady_utility_ratio": avg(1, "captured_after_warmup")
            / max(avg(0, "captured_after_warmup"), 1e-9),
            "budget_used": pairs[0][1]["budget_used"],
            "single_budget_used": pairs[0][0]["budget_used"],
            "redis_bytes_per_source": key_memory / args.feeds,
            "redis_used_memory_per_source": memory / args.feeds,
            "redis_commands_per_crawl": commands / max(pairs[0][1]["crawls"], 1),
            "redis_round_trips_per_crawl": pairs[0][1]["round_trips"]
            / max(pairs[0][1]["crawls"], 1),
            "redis_calls_per_crawl": {what: n / max(pairs[0][1]["crawls"], 1)
                                      for what, n in sorted(pairs[0][1]["calls"].items())},
            "redis_story_memory": story_memory})
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.workers} processes against 1, {args.feeds} feeds, {args.seconds:g} s each")
    if pairs:
        print(f"utility (budget {budget:g} per {PERIOD} s, mean of {args.repeat} runs): "
              f"cluster {report['utility']:.1f}, single {report['single_utility']:.1f}, "
              f"ratio {report['utility_ratio']:.3f} (after the first {args.warmup:g} s: "
              f"{report['steady_utility_ratio']:.3f}; runs "
              f"{', '.join(f'{r:.3f}' for r in report['utility_ratios'])}); budget used "
              f"{report['budget_used']}, single {report['single_budget_used']}")
    print(f"throughput (budget unbounded): cluster {report['crawls_per_s']:.1f} crawls/s, "
          f"single {report['single_crawls_per_s']:.1f}, speedup {report['speedup']:.2f}")
    same = "at the same budget" if pairs else "at full speed"
    for name in ("single", "cluster"):
        c = report["cpu_per_crawl"][name]
        print(f"CPU ms per crawl {same} (after the first {args.warmup:g} s), {name}: "
              f"crawlers {c['crawlers'] * 1e3:.2f}, simulated web {c['server'] * 1e3:.2f}, "
              f"redis {c['redis'] * 1e3:.2f}")
    print(f"crawler CPU per crawl, cluster / single: {report['cpu_ratio']:.2f}")
    if pairs:
        for name in ("single", "cluster"):
            c = report["throughput_cpu_per_crawl"][name]
            total = sum(c.values())
            print(f"CPU ms per crawl at full speed, {name}: crawlers "
                  f"{c['crawlers'] * 1e3:.2f}, simulated web {c['server'] * 1e3:.2f}, redis "
                  f"{c['redis'] * 1e3:.2f} ({report['throughput_items_per_crawl'][name]:.1f} "
                  f"items a crawl); {report['cores']} cores allow at most "
                  f"{report['cores'] / max(total, 1e-9):.0f} crawls/s")
    print(f"duplicates {report['duplicates']}")
    if pairs:
        print(f"Redis: the crawl's keys {report['redis_bytes_per_source']:.0f} bytes per "
              f"source (used_memory {report['redis_used_memory_per_source']:.0f}, with "
              f"connections and scripts), {report['redis_commands_per_crawl']:.1f} commands "
              f"per crawl in {report['redis_round_trips_per_crawl']:.2f} round trips")
    return 0
