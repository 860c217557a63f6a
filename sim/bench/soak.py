"""Soak: a long crawl of a hostile web, with what it cost over time.

    python -m sim.bench soak --minutes 10            # the table of docs/benchmarks.md
    python -m sim.bench soak --minutes 0.2 --json    # a smoke run

starts ``sim.serve`` (news-mix, ``--feeds`` healthy feeds at ``--speed``, every fault of
``sim.web.faults`` on, ``--copies`` sources of each) and, in a second process, a Scrapy crawl of
its ``/feeds.opml`` with the add-on's defaults (retries, redirects, compression, parsing in
worker processes, state in a JOBDIR) at ``--budget`` crawls per ``--period`` seconds, for
``--minutes``. The crawl process samples itself every ``--sample`` seconds (RSS of itself and
of its parse workers, open file descriptors, crawls so far) and measures event-loop stalls
(a 10 ms timer's lateness). At the end it reports:

* crawls per second sustained (overall and in the last quarter of the run: still crawling);
* peak RSS, RSS and open descriptors over time (a leak shows as a slope);
* tracebacks in the log (must be 0), ERROR lines, duplicate items (the same entry of the same
  feed handed out twice: must be 0);
* every ``whittle/errors/<kind>`` count, and which hostile cases were counted under their
  documented kind (``sim.web.faults.FAULTS``) and logged once per source;
* healthy feeds: entries captured / (captured + missed), from the server's ledger;
* event-loop stalls over 100 ms, the longest stall.

The crawl's own process runs this module with ``--crawl`` (not for people).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from sim.bench import harness
from sim.crawls import children
from sim.web.faults import FAULTS, parse_faults

logger = logging.getLogger(__name__)
STALL_MS = 100.0


# -- the crawl process -------------------------------------------------------------------------
def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


class SoakMonitor:
    """Scrapy extension of the crawl process: the loop-stall timer and the samples."""

    def __init__(self, crawler, path: str, every: float) -> None:
        self.crawler, self.path, self.every = crawler, path, every
        self.stalls, self.max_stall, self.ticks = 0, 0.0, 0
        self._last_tick = time.monotonic()
        self.t0 = time.monotonic()
        self._tasks: list[asyncio.Task] = []
        from scrapy import signals

        crawler.signals.connect(self.opened, signal=signals.spider_opened)
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler):
        s = crawler.settings
        return cls(crawler, s.get("SOAK_SAMPLES"), s.getfloat("SOAK_SAMPLE_EVERY"))

    def opened(self, spider=None) -> None:
        self.t0 = time.monotonic()
        self._tasks = [asyncio.ensure_future(self._timer()), asyncio.ensure_future(self._sample())]
        if os.environ.get("SOAK_STACKS"):
            import threading

            self._main = threading.get_ident()
            threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        """Debugging aid (SOAK_STACKS=1): the main thread's stack during each stall."""
        import traceback

        seen = None
        while True:
            time.sleep(0.02)
            if time.monotonic() - self._last_tick > 0.08 and seen != self._last_tick:
                seen = self._last_tick
                frame = sys._current_frames().get(self._main)
                stack = "".join(traceback.format_stack(frame)[-12:]) if frame else ""
                with open(self.path + ".stalls", "a") as f:
                    f.write(f"--- stall at {time.monotonic() - self.t0:.2f}\n{stack}\n")

    async def _timer(self) -> None:
        loop = asyncio.get_running_loop()
        tick = 0.01
        while True:
            self._last_tick = time.monotonic()
            start = loop.time()
            await asyncio.sleep(tick)
            late = (loop.time() - start - tick) * 1000.0
            self.ticks += 1
            self.max_stall = max(self.max_stall, late)
            if late > STALL_MS:
                self.stalls += 1
                logger.info("event loop stalled %.0f ms", late)

    async def _sample(self) -> None:
        while True:
            self._write_sample()
            await asyncio.sleep(self.every)

    def _write_sample(self) -> None:
        pid = os.getpid()
        workers = _children(pid)
        stats = self.crawler.stats
        row = {"t": round(time.monotonic() - self.t0, 2), "rss_mib": _rss_kib(pid) / 1024,
               "workers_rss_mib": sum(_rss_kib(c) for c in workers) / 1024,
               "fds": len(os.listdir(f"/proc/{pid}/fd")),
               "crawls": stats.get_value("whittle/crawls", 0),
               "fetched": stats.get_value("whittle/fetched", 0),
               "max_stall_ms": round(self.max_stall, 1), "stalls": self.stalls}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")

    def closed(self, spider=None, reason=None) -> None:
        for task in self._tasks:
            task.cancel()
        self._write_sample()
        self.crawler.stats.set_value("soak/max_stall_ms", self.max_stall)
        self.crawler.stats.set_value("soak/stalls_over_100ms", self.stalls)
        self.crawler.stats.set_value("soak/timer_ticks", self.ticks)


def run_crawl(args) -> int:
    from scrapy.crawler import CrawlerProcess

    from scrapy_whittle.scrapy.spiders import FeedSpider

    out = Path(args.out)
    settings = {
        "ADDONS": {"scrapy_whittle.Addon": 0},
        "EXTENSIONS": {"sim.bench.soak.SoakMonitor": 0},
        "SOAK_SAMPLES": str(out / "samples.jsonl"), "SOAK_SAMPLE_EVERY": args.sample,
        "WHITTLE_SOURCES": str(out / "feeds.opml"), "WHITTLE_PERIOD": args.period,
        "WHITTLE_BUDGET": args.budget, "WHITTLE_ENGAGEMENT_SCALE": 1000,
        "WHITTLE_LOGSTATS_INTERVAL": 60, "WHITTLE_BACKOFF_BASE": args.backoff_base,
        "WHITTLE_SPREAD": True,         # a high budget's crawls spread over the epoch
        "DOWNLOAD_DELAY": 0, "CONCURRENT_REQUESTS": 64,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 64, "DOWNLOAD_TIMEOUT": args.timeout,
        "CLOSESPIDER_TIMEOUT": args.minutes * 60.0, "JOBDIR": str(out / "job"),
        "FEEDS": {str(out / "items.jsonl"): {"format": "jsonlines"}},
        "LOG_FILE": str(out / "crawl.log"), "LOG_LEVEL": "INFO", "LOGSTATS_INTERVAL": 60,
        "TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
        # the hostile HTML page stands for a feed serving a page, the error not_a_feed; site
        # search would take it, from its first answer, for a site without feeds
        "WHITTLE_SITE_SEARCH": False,
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(FeedSpider)
    process.crawl(crawler)
    process.start()
    stats = {k: v for k, v in crawler.stats.get_stats().items()
             if isinstance(v, int | float | str)}
    (out / "stats.json").write_text(json.dumps(stats, default=str, indent=1))
    return 0


# -- the orchestrator ---------------------------------------------------------------------------
def _start_server(args) -> tuple[subprocess.Popen, str]:
    proc, port = children.start_web(
        "--n", str(args.feeds), "--speed", str(args.speed), "--seed", str(args.seed),
        "--faults", args.faults, "--fault-copies", str(args.copies),
        "--bomb-mib", str(args.bomb_mib), "--hang-seconds", str(max(2 * args.timeout, 30.0)))
    return proc, f"http://127.0.0.1:{port}"


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def analyse(out: Path, minutes: float, healthy: dict, start: dict, faults: list[str]
            ) -> dict:
    stats = json.loads((out / "stats.json").read_text())
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines() if x]
    log = (out / "crawl.log").read_text(errors="replace")
    keys, dupes, items = set(), 0, 0
    items_path = out / "items.jsonl"
    for line in items_path.read_text().splitlines() if items_path.exists() else ():
        item = json.loads(line)
        key = (item["source"], item["entry_id"])
        dupes += key in keys
        keys.add(key)
        items += 1
    errors = {k.split("/", 2)[2]: v for k, v in stats.items()
              if k.startswith("whittle/errors/")}
    logged = collections.Counter()
    for m in re.finditer(r"WARNING: source \d+ \((\S+/hostile/([a-z_0-9]+)/\d+\.xml)\)", log):
        logged[m.group(1)] += 1
    cases = {}
    for case, (_, kind) in FAULTS.items():
        if kind == "usable" or case not in faults:
            continue
        urls = [u for u in logged if f"/hostile/{case}/" in u]
        cases[case] = {"kind": kind, "counted": errors.get(kind, 0) > 0,
                       "logged_sources": len(urls),
                       "logged_once": all(logged[u] == 1 for u in urls) and bool(urls)}
    last = samples[-1] if samples else {}
    end = minutes * 60.0                   # the crawl's end; after it, it closes
    tail = [s for s in samples if 0.75 * end <= s["t"] <= end + 1e-6]
    tail_rate = ((tail[-1]["crawls"] - tail[0]["crawls"]) / max(tail[-1]["t"] - tail[0]["t"],
                                                                1e-9)) if len(tail) > 1 else 0
    seconds = last.get("t", minutes * 60) or 1e-9
    captured = healthy["captured_items"] - start.get("captured_items", 0)
    missed = healthy["missed_items"] - start.get("missed_items", 0)
    return {
        "minutes": minutes, "seconds": seconds,
        "crawls": stats.get("whittle/crawls", 0),
        "crawls_per_s": stats.get("whittle/crawls", 0) / seconds,
        "crawls_per_s_last_quarter": tail_rate,
        "fetched": stats.get("whittle/fetched", 0), "items": items, "duplicates": dupes,
        "tracebacks": log.count("Traceback"),
        "error_lines": len(re.findall(r"\] ERROR: ", log)),
        "retry_give_ups": len(re.findall(r"\[scrapy.downloadermiddlewares.retry\] ERROR: ",
                                         log)),
        "whittle_error_lines": len(re.findall(r"\[scrapy_whittle[.a-z_]*\] ERROR: ", log)),
        "peak_rss_mib": max((s["rss_mib"] for s in samples), default=0),
        "peak_workers_rss_mib": max((s["workers_rss_mib"] for s in samples), default=0),
        "fds_first_last": (samples[0]["fds"], last.get("fds")) if samples else None,
        "max_stall_ms": stats.get("soak/max_stall_ms"),
        "stalls_over_100ms": stats.get("soak/stalls_over_100ms"),
        "healthy_capture": captured / max(captured + missed, 1),
        "healthy_captured": captured, "healthy_missed": missed,
        "errors": errors, "cases": cases,
        "state_resets": stats.get("whittle/state_resets", 0),
        "bursts": stats.get("whittle/bursts", 0),
        "clipped_values": stats.get("whittle/clipped/value", 0),
        "samples": samples,
    }


def soak(args) -> dict:
    out = Path(args.out or tempfile.mkdtemp(prefix="whittle-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    server, url = _start_server(args)
    try:
        start = _get_json(f"{url}/stats.json")
        with urllib.request.urlopen(f"{url}/feeds.opml", timeout=30) as r:
            (out / "feeds.opml").write_bytes(r.read())
        cmd = [sys.executable, "-m", "sim.bench", "soak", "--crawl", "--url", url,
               "--out", str(out),
               *[f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                 if k in ("minutes", "budget", "period", "timeout", "sample",
                          "backoff_base")]]
        rc = subprocess.run(cmd, cwd=children.ROOT, env=children.env(),
                            timeout=args.minutes * 60 + 300).returncode
        healthy = _get_json(f"{url}/stats.json")
    finally:
        server.terminate()
        server.wait(30)
        server.stdout.close()
    report = analyse(out, args.minutes, healthy, start, parse_faults(args.faults))
    report["exit_status"] = rc
    report["out"] = str(out)
    report["load_average"] = os.getloadavg()
    return report


def table(r: dict) -> str:
    rows = [
        ("duration", f"{r['seconds']:.0f} s"),
        ("crawls, crawls/s (last quarter)",
         f"{r['crawls']}, {r['crawls_per_s']:.1f} ({r['crawls_per_s_last_quarter']:.1f})"),
        ("fetched, items, duplicates", f"{r['fetched']}, {r['items']}, {r['duplicates']}"),
        ("tracebacks, exit status", f"{r['tracebacks']}, {r['exit_status']}"),
        ("ERROR lines: all, Scrapy's retry give-ups, scrapy_whittle's",
         f"{r['error_lines']}, {r['retry_give_ups']}, {r['whittle_error_lines']}"),
        ("peak RSS crawler / parse workers",
         f"{r['peak_rss_mib']:.0f} / {r['peak_workers_rss_mib']:.0f} MiB"),
        ("open fds first / last", f"{r['fds_first_last']}"),
        ("loop stalls > 100 ms, longest", f"{r['stalls_over_100ms']}, "
                                          f"{r['max_stall_ms']:.0f} ms"),
        ("healthy feeds: entries captured", f"{100 * r['healthy_capture']:.1f}% "
                                            f"({r['healthy_captured']} of "
                                            f"{r['healthy_captured'] + r['healthy_missed']})"),
        ("bursts, clipped values, state resets",
         f"{r['bursts']}, {r['clipped_values']}, {r['state_resets']}"),
        ("errors", ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items()))),
        ("hostile cases counted and logged once",
         f"{sum(c['counted'] and c['logged_once'] for c in r['cases'].values())} of "
         f"{len(r['cases'])}" + "".join(f"; {k}: not" for k, c in r["cases"].items()
                                         if not (c['counted'] and c['logged_once']))),
        ("load average (1, 5, 15 min)", ", ".join(f"{x:.1f}" for x in r["load_average"])),
    ]
    rss = [f"{s['t']:.0f}s {s['rss_mib']:.0f}" for s in r["samples"]]
    step = max(1, len(rss) // 10)
    rows.append(("RSS over time (MiB)", ", ".join(rss[::step])))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser("soak", __doc__)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--feeds", type=int, default=200, help="healthy feeds (news-mix)")
    ap.add_argument("--speed", type=float, default=900.0,
                    help="simulated seconds per real second (900: an hour in 4 s; the "
                         "busiest news-mix feed then publishes 11 entries a second)")
    ap.add_argument("--budget", type=float, default=100.0, help="crawls per period")
    ap.add_argument("--period", type=float, default=1.0, help="WHITTLE_PERIOD, seconds")
    ap.add_argument("--copies", type=int, default=2, help="sources per hostile case")
    ap.add_argument("--faults", default="all",
                    help="hostile cases served: 'all', a comma-separated list, or '' (none)")
    ap.add_argument("--bomb-mib", type=float, default=1536.0)
    ap.add_argument("--timeout", type=float, default=10.0, help="DOWNLOAD_TIMEOUT, seconds")
    ap.add_argument("--backoff-base", type=float, default=5.0,
                    help="WHITTLE_BACKOFF_BASE, seconds")
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="directory for the log, items, samples")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--crawl", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.crawl:
        return run_crawl(args)
    report = soak(args)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print(table(report))
        print(f"(log, items and samples in {report['out']})")
    return 0
