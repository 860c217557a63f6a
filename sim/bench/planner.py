"""How many crawls a second one cluster planner hands out, where its time goes, what Redis
holds per source, and how long a take-over lasts after the planner's kill -9.

    python -m sim.bench planner [--sources 100000,1000000] [--seconds 20] [--json]
    python -m sim.bench planner --sources 1000000 --takeover 3 --lock-ttl 10

For each N of ``--sources``, on a fresh ``redis-server`` (free port, temporary directory, no
persistence): N sources are loaded as a previous planner's checkpoint leaves them
(:func:`sim.crawls.planner_load.load`, N / 100 hosts), then the real planner runs in its own process
(:func:`sim.crawls.planner_load.run_planner`: a ``ClusterNode`` that takes no crawl itself) against
``--workers`` lightweight workers in another (:func:`sim.crawls.planner_load.run_workers`: synthetic
results from a seeded model, no HTTP). The budget offers ``--offered`` crawls a second
(``WHITTLE_BUDGET`` = offered x ``--period``), more than one planner hands out, so that the
rate measured is the planner's, over ``--seconds`` after ``--warmup`` seconds of leading:

* ``crawls_per_s``: crawls handed out (dispatched to the tasks stream) a second;
* ``planner_cpu_ms_per_crawl``: the planner process's CPU (all its threads: the checkpoints
  are written from one) per crawl; ``profile``: its event loop's time under cProfile, split
  by where it goes (selection and index maths, Redis round trips, serialisation, learning);
* ``redis_commands_per_crawl`` (all clients: the planner's and the workers'), Redis CPU per
  crawl, and Redis ``used_memory`` per source after the load and after the run.

With ``--rate-standby`` a second planner process keeping a standby (``WHITTLE_REDIS_STANDBY``)
runs beside it from the first one's lead on: it restores the state during the warm-up and
follows the checkpoints during the window (its commands are among Redis's; its CPU in
``standby_cpu_s``).

``--standby-parts M``: a standby's pieces alone, in the benchmark's own process (no
planner, no worker; memory for one copy of the state): its restore, its following of a
checkpoint that rewrote M random sources, its take-over (another such checkpoint followed,
then the service resumed).

``--takeover R``: R times, a planner process leads and hands out crawls while a second one
waits; the first is killed with SIGKILL and the time until crawls are handed out again
(``takeover_s``) is measured against ``--lock-ttl`` (``WHITTLE_REDIS_LOCK_TTL``), with the
part the new planner spent restoring the state (``restore_s``). The second one keeps a
standby (``WHITTLE_REDIS_STANDBY``: it restores the state while the first leads, follows its
checkpoints, and is killed-over after ``--standby-follow`` seconds of them) with
``--standby yes``, not with ``no``; ``both`` (the default) measures each, one after the
other, on the same Redis.

Every process shares this machine's cores: the load generator and Redis take CPU from the
planner, so the rates are a floor for a planner on its own core.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sim.bench import harness
from sim.crawls.planner_load import settings_for
from sim.crawls.processes import RedisServer, reap


def _module(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sim.crawls.planner_load", *args],
                            stdout=subprocess.PIPE, text=True, **kw)


def _stop(proc: subprocess.Popen, timeout: float = 120) -> float:
    """SIGTERM ``proc`` (SIGKILL after ``timeout``); returns the CPU seconds it used."""
    if proc.returncode is not None:
        return 0.0
    proc.send_signal(signal.SIGTERM)
    return reap(proc, timeout)


def _events(proc: subprocess.Popen):
    for line in proc.stdout:
        if line.startswith("{"):
            yield json.loads(line)


def _crawls(client, prefix: str) -> int:
    return int(client.hget(f"{prefix}:totals", "crawls") or 0)


def measure(args, n: int, tmp: Path) -> dict:
    redis = RedisServer(tmp)
    prefix = "bench"
    settings = settings_for(args.offered * args.period, args.period)
    try:
        empty = redis.used_memory()
        loaded = _module("load", redis.url, prefix, str(n), json.dumps(settings))
        row = next(_events(loaded))
        loaded.wait()
        row["used_memory_per_source_loaded"] = (redis.used_memory() - empty) / n
        if args.seconds > 0:
            row.update(rate(args, redis, prefix, settings, n, tmp, empty))
        if args.standby_parts:
            row["standby_parts"] = standby_parts(redis, prefix, settings, n,
                                                 args.standby_parts, args.seed)
        if args.takeover:
            row["takeovers"] = [takeover(args, redis, prefix, settings, n, warm)
                                for warm in _standbys(args.standby)
                                for _ in range(args.takeover)]
    finally:
        redis.stop()
    return row


def rate(args, redis, prefix: str, settings: dict, n: int, tmp: Path, empty: int) -> dict:
    """The planner's rate, CPU, Redis commands and profile over a window."""
    row: dict = {}
    workers = _module("workers", redis.url, prefix, str(n), "--workers", str(args.workers),
                      "--seed", str(args.seed), stderr=subprocess.DEVNULL)
    out = tmp / f"planner-{n}.json"
    planner = _module("planner", redis.url, prefix, json.dumps(settings),
                      "--seconds", str(args.seconds), "--warmup", str(args.warmup),
                      "--lock-ttl", str(args.lock_ttl), "--backlog", str(args.backlog),
                      "--lease", str(args.lease), "--out", str(out),
                      *(["--profile"] if args.profile else []))
    lead = next(_events(planner))
    standby = None
    if args.rate_standby:       # a standby restoring, then following, during the window
        standby = _module("planner", redis.url, prefix, json.dumps(settings), "--standby",
                          "--lock-ttl", str(args.lock_ttl), "--backlog", str(args.backlog),
                          "--lease", str(args.lease), stderr=subprocess.DEVNULL)
    planner.wait()
    if standby is not None:
        row["standby_cpu_s"] = _stop(standby)
    workers_cpu = _stop(workers)
    answered = next(_events(workers))["answered"]
    result = json.loads(out.read_text())
    row["workers_cpu_ms_per_crawl"] = 1e3 * workers_cpu / max(answered, 1)
    row.update(restore_s=lead["restore_s"], **result)
    row["used_memory_per_source_after"] = (redis.used_memory() - empty) / n
    return row


def standby_parts(redis, prefix: str, settings: dict, n: int, changed: int,
                  seed: int) -> dict:
    """A standby's pieces alone, in this process (no planner, no worker): its restore of the
    N sources, its following of a checkpoint that rewrote ``changed`` random sources (as a
    planner's checkpoint writes them, through ``RedisStateStore``), its take-over (following
    another such checkpoint, then ``RecrawlService.resume``)."""
    import numpy as np

    from scrapy_whittle.cluster.connect import key_prefix, sync_client
    from scrapy_whittle.cluster.keys import Keys
    from scrapy_whittle.cluster.standby import Standby
    from scrapy_whittle.cluster.state import RedisStateStore
    from scrapy_whittle.service.config import WhittleConfig
    from scrapy_whittle.service.recrawl import RecrawlService

    client = sync_client(redis.url)
    keys = Keys(key_prefix(prefix, redis.url))
    config = WhittleConfig.from_settings(settings)
    standby = Standby(client, keys, lambda store: RecrawlService(config, store=store))
    writer = RedisStateStore(client, keys)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    standby.open()
    row = {"restore_s": time.perf_counter() - t0}

    def checkpoint() -> int:
        """A checkpoint rewriting ``changed`` sources (the restored rows, marked dirty)."""
        ids = np.unique(rng.integers(0, n, changed))
        standby.service.state.dirty[ids] = True
        writer.write(standby.service.prepare_checkpoint())
        return int(ids.shape[0])

    row["changed"] = checkpoint()
    t0 = time.perf_counter()
    standby.follow()
    row["follow_s"] = time.perf_counter() - t0
    checkpoint()
    t0 = time.perf_counter()
    standby.take([])
    row["take_s"] = time.perf_counter() - t0
    client.close()
    return row


def _standbys(choice: str) -> list[bool]:
    return {"no": [False], "yes": [True], "both": [False, True]}[choice]


def _wait_warm(standby: subprocess.Popen, seconds: float) -> None:
    """Until the standby says its state is restored, then ``seconds`` more."""
    event = next(_events(standby))
    if event.get("event") != "standby":
        raise RuntimeError(f"the standby planner said {event!r}")
    time.sleep(seconds)


def takeover(args, redis, prefix: str, settings: dict, n: int, warm: bool = False) -> dict:
    """Kill -9 a leading planner while another waits (with ``warm``, keeping a standby);
    seconds until crawls flow again."""
    common = ["--lock-ttl", str(args.lock_ttl), "--backlog", str(args.backlog),
              "--lease", str(args.lease)]
    workers = _module("workers", redis.url, prefix, str(n), "--workers", str(args.workers),
                      "--seed", str(args.seed + 1), stderr=subprocess.DEVNULL)
    first = _module("planner", redis.url, prefix, json.dumps(settings), *common,
                    stderr=subprocess.DEVNULL)
    next(_events(first))
    standby = _module("planner", redis.url, prefix, json.dumps(settings), *common,
                      *(["--standby"] if warm else []), stderr=subprocess.DEVNULL)
    try:
        start = _crawls(redis.client, prefix)
        while _crawls(redis.client, prefix) < start + 100:      # the first one hands out
            time.sleep(0.01)
        if warm:        # restored, then following the first one's checkpoints a while
            _wait_warm(standby, args.standby_follow)
        time.sleep(args.lock_ttl)           # the standby has tried the lock meanwhile
        os.kill(first.pid, signal.SIGKILL)
        killed = time.time()
        first.wait()
        before = _crawls(redis.client, prefix)
        while _crawls(redis.client, prefix) == before:
            if time.time() - killed > 10 * args.lock_ttl + 600:
                raise RuntimeError("no planner took over")
            time.sleep(0.005)
        resumed = time.time()
        lead = next(_events(standby))
        return {"takeover_s": resumed - killed, "lock_ttl": args.lock_ttl,
                "ratio_to_ttl": (resumed - killed) / args.lock_ttl,
                "elected_after_s": lead["elected_at"] - killed,
                "restore_s": lead["restore_s"], "standby": warm, "warm": lead["warm"]}
    finally:
        _stop(standby)
        _stop(workers)
        if first.poll() is None:
            first.kill()


def main(argv: list[str] | None = None) -> int:
    p = harness.parser("planner", __doc__, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sources", default="100000,1000000",
                   help="comma-separated source counts (default 100000,1000000)")
    p.add_argument("--seconds", type=float, default=20.0,
                   help="measured window (0: no rate measured, the take-overs only)")
    p.add_argument("--warmup", type=float, default=10.0,
                   help="seconds of leading before the window")
    p.add_argument("--workers", type=int, default=16, help="lightweight workers")
    p.add_argument("--offered", type=float, default=10_000.0,
                   help="crawls a second the budget offers (default 10000)")
    p.add_argument("--period", type=float, default=10.0, help="WHITTLE_PERIOD (s)")
    p.add_argument("--backlog", type=int, default=256, help="WHITTLE_REDIS_BACKLOG")
    p.add_argument("--lease", type=float, default=60.0, help="WHITTLE_REDIS_LEASE")
    p.add_argument("--lock-ttl", type=float, default=10.0, help="WHITTLE_REDIS_LOCK_TTL")
    p.add_argument("--takeover", type=int, default=0, help="take-overs measured per N")
    p.add_argument("--standby", choices=("no", "yes", "both"), default="both",
                   help="take-overs by a process without a standby, with one, or each")
    p.add_argument("--standby-follow", type=float, default=20.0,
                   help="seconds the standby follows the checkpoints before the kill")
    p.add_argument("--rate-standby", action="store_true",
                   help="a process keeping a standby runs beside the measured planner")
    p.add_argument("--standby-parts", type=int, default=0, metavar="M",
                   help="a standby's restore, following of a checkpoint of M changed "
                        "sources and take-over, alone in this process")
    p.add_argument("--no-profile", dest="profile", action="store_false")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = []
    for n in (int(float(s)) for s in args.sources.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-planner-") as tmp:
            row = measure(args, n, Path(tmp))
        rows.append(row)
        if not args.json:
            report(row)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


def report(row: dict) -> None:
    n = row["sources"]
    if "crawls_per_s" not in row:
        print(f"N = {n:,}: loaded in {row['load_s']:.1f} s; Redis used_memory "
              f"{row['used_memory_per_source_loaded']:.0f} B/source")
    else:
        _report_rate(row)
    parts = row.get("standby_parts")
    if parts:
        print(f"  a standby alone: restore {parts['restore_s']:.1f} s, a checkpoint of "
              f"{parts['changed']:,} changed sources followed in {parts['follow_s']:.2f} s, "
              f"taken over (another followed, then resumed) in {parts['take_s']:.2f} s")
    for t in row.get("takeovers", ()):
        print(f"  take-over after kill -9 ({'a standby' if t['standby'] else 'no standby'}"
              f"{', warm' if t['warm'] else ''}): {t['takeover_s']:.2f} s = "
              f"{t['ratio_to_ttl']:.2f} x lock TTL {t['lock_ttl']:g} s (lock won after "
              f"{t['elected_after_s']:.2f} s, restore {t['restore_s']:.2f} s)")


def _report_rate(row: dict) -> None:
    n = row["sources"]
    print(f"N = {n:,}: {row['crawls_per_s']:.0f} crawls/s handed out by one planner "
          f"(planner CPU {row['planner_cpu_ms_per_crawl']:.3f} ms/crawl, Redis CPU "
          f"{row['redis_cpu_ms_per_crawl']:.3f} ms/crawl, {row['redis_commands_per_crawl']:.1f}"
          f" commands/crawl; workers {row['workers_cpu_ms_per_crawl']:.3f} ms/crawl, load "
          f"average {row['loadavg_1min']:.1f}); loaded in {row['load_s']:.1f} s; Redis used_memory "
          f"{row['used_memory_per_source_loaded']:.0f} B/source loaded, "
          f"{row['used_memory_per_source_after']:.0f} after; restore {row['restore_s']:.1f} s; "
          f"planner peak RSS {row['planner_max_rss_mb']:.0f} MB")
    prof = row.get("profile")
    if prof:
        print(f"  profiled window ({prof['crawls_per_s']:.0f} crawls/s under cProfile), the "
              "planner's event loop: " + ", ".join(
            f"{k} {v:.0%}" for k, v in prof["share"].items() if v >= 0.005))
        for t in prof["top"][:8]:
            print(f"    {t['self_s']:7.3f} s self {t['cum_s']:7.3f} cum {t['calls']:9d} "
                  f"{t['where']}")
