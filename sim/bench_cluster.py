"""A cluster crawl against one process, on the same simulated web, in one run.

    python -m sim.bench_cluster --workers 2 [--feeds 300] [--seconds 20] [--json]

Starts a ``redis-server`` (temporary directory, free port) and, for each measurement, a fresh
``sim.serve`` (same scenario and seed, so the same entries) and crawler processes
(``sim.cluster_crawl``) for ``--seconds``:

* **utility**: a budget the machine can spend (``--budget``, default 1% of the feeds per
  half-second epoch); one process without Redis, then K processes sharing the crawl; the
  captured utility is the server's ground truth, so ``utility_ratio`` compares what K
  processes and one capture of the same entries with the same budget;
* **throughput**: a budget far above what the machine can fetch; crawls per second of one
  process and of K (``speedup``).

Also reported: entries emitted twice across the cluster (``duplicates``), budget use, Redis
memory per source (``used_memory`` after the run against before, per feed) and Redis
commands per crawl (``INFO commandstats``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.request import urlopen

PERIOD = 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Redis:
    def __init__(self, directory: Path) -> None:
        import redis

        self.port = _free_port()
        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port),
             "--bind", "127.0.0.1", "--dir", str(directory), "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(20)


class _Web:
    def __init__(self, args) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sim.serve", "--port", "0", "--scenario", "news-mix",
             "--n", str(args.feeds), "--speed", str(args.speed), "--seed", str(args.seed),
             *args.serve_args], stdout=subprocess.PIPE, text=True)
        for line in self.proc.stdout:
            if line.startswith("PORT "):
                self.url = f"http://127.0.0.1:{int(line.split()[1])}"
                break

    def stats(self) -> dict:
        with urlopen(self.url + "/stats.json", timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(20)
        self.proc.stdout.close()


def _crawl(args, tmp: Path, redis_url: str, k: int, budget: float, tag: str) -> dict:
    web = _Web(args)
    settings = {"WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": PERIOD,
                "WHITTLE_REDIS_PREFIX": f"bench-{tag}:{{spider}}",
                "WHITTLE_REDIS_LEASE": 30.0, "WHITTLE_REDIS_LOCK_TTL": 5.0,
                "CONCURRENT_REQUESTS": 32, "CONCURRENT_REQUESTS_PER_DOMAIN": 32,
                "WHITTLE_CHECKPOINT_INTERVAL": 2.0, "LOG_LEVEL": "WARNING"}
    procs = []
    for i in range(k):
        with open(tmp / f"{tag}-{i}.log", "w") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "sim.cluster_crawl", redis_url, web.url,
                 str(args.feeds), str(tmp / f"{tag}-{i}.jsonl"), str(args.seconds),
                 json.dumps(settings)], stdout=subprocess.DEVNULL, stderr=log))
    for p in procs:
        p.wait(args.seconds * 4 + 120)
    truth = web.stats()
    web.stop()
    items, stats = [], []
    for i in range(k):
        for line in (tmp / f"{tag}-{i}.jsonl").read_text().splitlines():
            row = json.loads(line)
            (stats.append(row["stats"]) if "stats" in row else items.append(row))
    keys = [(i["source"], i["entry_id"]) for i in items]
    fetched = sum(s.get("whittle/fetched", 0) for s in stats)
    used = [s[k] for s in stats for k in ("whittle/budget_used", "whittle/planner/budget_used")
            if k in s]
    return {"processes": k, "crawls_per_s": fetched / args.seconds, "crawls": fetched,
            "captured": truth["captured"], "items": len(items),
            "duplicates": len(keys) - len(set(keys)), "budget_used": max(used, default=None),
            "exit_codes": [p.returncode for p in procs]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.bench_cluster")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--feeds", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--budget", type=float, default=None,
                    help="crawls per half-second epoch for the utility runs (1%% of feeds)")
    ap.add_argument("--speed", type=float, default=36000.0,
                    help="simulated seconds per second of the simulated web")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve-args", nargs=argparse.REMAINDER, default=[],
                    help="more sim.serve options (e.g. --realistic --window 50)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    budget = args.budget or max(1.0, args.feeds / 100)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    redis = _Redis(tmp)
    try:
        before = redis.client.info("memory")["used_memory"]
        single_u = _crawl(args, tmp, "-", 1, budget, "single-u")
        cluster_u = _crawl(args, tmp, redis.url, args.workers, budget, "cluster-u")
        memory = redis.client.info("memory")["used_memory"] - before
        keys = list(redis.client.scan_iter("bench-cluster-u:*"))
        key_memory = sum(redis.client.memory_usage(k) or 0 for k in keys)
        commands = sum(v["calls"] for v in redis.client.info("commandstats").values())
        single_t = _crawl(args, tmp, "-", 1, 1e6, "single-t")
        cluster_t = _crawl(args, tmp, redis.url, args.workers, 1e6, "cluster-t")
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    report = {
        "workers": args.workers, "feeds": args.feeds, "seconds": args.seconds,
        "budget": budget, "period": PERIOD,
        "crawls_per_s": cluster_t["crawls_per_s"],
        "single_crawls_per_s": single_t["crawls_per_s"],
        "speedup": cluster_t["crawls_per_s"] / max(single_t["crawls_per_s"], 1e-9),
        "utility": cluster_u["captured"], "single_utility": single_u["captured"],
        "utility_ratio": cluster_u["captured"] / max(single_u["captured"], 1e-9),
        "budget_used": cluster_u["budget_used"], "single_budget_used": single_u["budget_used"],
        "duplicates": cluster_u["duplicates"] + cluster_t["duplicates"],
        "redis_bytes_per_source": key_memory / args.feeds,
        "redis_used_memory_per_source": memory / args.feeds,
        "redis_commands_per_crawl": commands / max(cluster_u["crawls"], 1),
        "runs": {"single_utility": single_u, "cluster_utility": cluster_u,
                 "single_throughput": single_t, "cluster_throughput": cluster_t},
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.workers} processes against 1, {args.feeds} feeds, {args.seconds:g} s each")
    print(f"utility (budget {budget:g} per {PERIOD} s): cluster {report['utility']:.1f}, "
          f"single {report['single_utility']:.1f}, ratio {report['utility_ratio']:.3f}; "
          f"budget used {report['budget_used']}, single {report['single_budget_used']}")
    print(f"throughput (budget unbounded): cluster {report['crawls_per_s']:.1f} crawls/s, "
          f"single {report['single_crawls_per_s']:.1f}, speedup {report['speedup']:.2f}")
    print(f"duplicates {report['duplicates']}; Redis: the crawl's keys "
          f"{report['redis_bytes_per_source']:.0f} bytes per source (used_memory "
          f"{report['redis_used_memory_per_source']:.0f}, with connections and scripts), "
          f"{report['redis_commands_per_crawl']:.1f} commands per crawl")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
