"""The pieces of the planner's load test (``sim.bench.planner``): a crawl of N sources loaded
into Redis as a previous planner's checkpoint leaves it, the real planner in its own process,
and lightweight workers answering its crawls with synthetic results.

    python -m sim.crawls.planner_load load REDIS_URL PREFIX N [--hosts H]
    python -m sim.crawls.planner_load planner REDIS_URL PREFIX SETTINGS_JSON [--seconds S] ...
    python -m sim.crawls.planner_load workers REDIS_URL PREFIX N [--workers K] [--seed S] ...

``REDIS_URL`` may name a Redis Cluster (``redis+cluster://host:port,...``): Redis's memory,
commands and CPU are then summed over its primaries.

**Loading.** A planner with a source list writes each new source with a few commands in its
first checkpoint; ten million sources that way take minutes, which is not what is measured
here. The loader lets the real service write one fresh source through
:class:`~scrapy_whittle.cluster.state.RedisStateStore` on a scratch prefix, reads back the
record, the policy's global state and the meta it wrote, and repeats that record for N
sources in whole chunks (``keys.CHUNK`` records a string, and a list of their URLs):
the layout the planner restores, written with a few commands per thousand sources.

**The planner.** A :class:`~scrapy_whittle.cluster.node.ClusterNode` that takes no crawl
itself (``capacity`` 0): the class a Scrapy process runs, electing itself, restoring the
state, handing out crawls and learning the results. With ``--profile`` its event loop is run
under cProfile for a window and the time is split by where it goes (:func:`split_profile`).

**Workers.** K asyncio consumers of the tasks stream (group ``workers``), the node's own
calls and messages (XREADGROUP, :func:`~scrapy_whittle.cluster.tasks.task_crawl`,
:class:`~scrapy_whittle.cluster.tasks.CrawlResult`, XADD to the results, XACK and XDEL of the
task), the result of each task drawn from a seeded model (:class:`SyntheticWeb`); the replies
to one read go in one transaction, so that the load generator costs the shared cores less than
what it measures. No HTTP, no parsing, no entry memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import logging
import os
import pstats
import resource
import signal
import sys
import time

import numpy as np

from sim.crawls.measure import process_cpu

#: a crawl's result: not modified (when nothing is new), failed
P_NOT_MODIFIED = 0.3
P_FAILED = 0.01
#: entries a feed shows (the window): no more new entries than this per fetch
WINDOW = 20


# -- loading ------------------------------------------------------------------------------------
def url_of(sid: int, hosts: int) -> str:
    return f"https://h{sid % hosts}.example/feed/{sid}.xml"


def settings_for(budget: float, period: float, **more) -> dict:
    """The planner's settings: the learned Whittle policy, no JOBDIR (Redis holds the state)."""
    return {"WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": period,
            "WHITTLE_LOGSTATS_INTERVAL": 0, **more}


def _fresh_record(client, url: str, prefix: str,
                  settings: dict) -> tuple[bytes, dict, bytes | None]:
    """(the record of a listed source selectable but never crawled yet, the meta hash, the
    policy's global state) as the real service writes them in a checkpoint after its first
    selection (on a scratch prefix, deleted after)."""
    from scrapy_whittle.cluster.connect import key_prefix
    from scrapy_whittle.cluster.keys import Keys
    from scrapy_whittle.cluster.state import HEADER, RedisStateStore, _row_size
    from scrapy_whittle.service.config import WhittleConfig
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sources.registry import SourceSpec

    keys = Keys(key_prefix(prefix + ":scratch", url))
    service = RecrawlService(WhittleConfig.from_settings(settings),
                             store=RedisStateStore(client, keys))
    service.open([SourceSpec(url=f"https://scratch.example/{i}.xml") for i in range(2)])
    service.next_crawl()       # the first epoch's selection sets the rows up; 0 is handed out
    service.checkpoint()
    meta = client.hgetall(keys.meta)
    record = HEADER.size + _row_size(meta[b"layout"].decode())
    row = client.getrange(keys.rows(1), record, 2 * record - 1)
    glob = client.get(keys.global_state)
    # (the crawl-wide keys and its tags': "{p:scratch}:..." and "{p:scratch:t0}:...")
    for key in client.scan_iter(match=keys.prefix.rstrip("}") + "*", count=1000):
        client.delete(key)
    return row, meta, glob


def load(redis_url: str, prefix: str, n: int, hosts: int, settings: dict,
         batch: int = 20_000) -> dict:
    """Write N fresh sources under ``prefix`` (the state a planner restores) and the streams'
    groups; returns the seconds it took and the bytes per source Redis holds."""
    import redis

    from scrapy_whittle.cluster.connect import key_prefix, sync_client
    from scrapy_whittle.cluster.keys import CHUNK, Keys

    client = sync_client(redis_url)
    t0 = time.perf_counter()
    base = info_sum(client, "memory", "used_memory")
    keys = Keys(key_prefix(prefix, redis_url))
    row, meta, glob = _fresh_record(client, redis_url, prefix, settings)
    chunk = row * CHUNK
    pipe = client.pipeline(transaction=False)
    pipe.hset(keys.meta, mapping=meta)
    if glob is not None:
        pipe.set(keys.global_state, glob)
    batch = -(-batch // CHUNK) * CHUNK              # whole chunks a pipeline
    for start in range(0, n, batch):
        stop = min(n, start + batch)
        for first in range(start, stop, CHUNK):
            pipe.rpush(keys.urls(first), *(url_of(i, hosts)
                                           for i in range(first, min(stop, first + CHUNK))))
            pipe.set(keys.rows(first), chunk)
        pipe.execute()
    for stream, group in ((keys.tasks, "workers"), (keys.results, "planner")):
        with contextlib.suppress(redis.exceptions.ResponseError):
            client.xgroup_create(stream, group, id="0", mkstream=True)
    seconds = time.perf_counter() - t0
    used = info_sum(client, "memory", "used_memory") - base
    client.close()
    return {"sources": n, "load_s": seconds, "used_memory_per_source": used / max(n, 1)}


# -- the planner --------------------------------------------------------------------------------
IDLE = "idle (the event loop waiting)"
#: where the planner's time goes, by the file a function is in (first match wins)
CATEGORIES = (
    ("redis round trips", ("/redis/", "asyncio/", "socket", "selectors", "/ssl")),
    ("serialisation", ("cluster/tasks.py", "json/", "struct", "feeds/hints.py")),
    ("selection and index maths", ("/core/", "service/decisions/planning.py", "host_throttle.py",
                                   "source_table.py", "service/decisions/discovery.py", "numpy/",
                                   "service/sources/retirement.py", "policy_keeper.py")),
    ("learning the results", ("service/decisions/outcomes.py", "service/recrawl.py",
                              "service/decisions/epochs.py", "service/decisions/measures.py",
                              "service/state/publications.py", "source_state.py",
                              "core/sanitize.py")),
    ("checkpoints", ("cluster/state.py", "service/state/persistence.py", "service/state/store.py")),
    ("planner book-keeping", ("cluster/planner.py", "cluster/node.py", "cluster/retry.py")),
)


def category(filename: str, name: str) -> str:
    where = f"{filename}:{name}"
    if "select.epoll" in name:
        return IDLE
    for label, marks in CATEGORIES:
        if any(m in where for m in marks):
            return label
    if filename == "~":                 # a builtin: numpy's C calls, dict/list methods
        if "numpy" in name:
            return "selection and index maths"
        return "builtins (containers, time)"
    return "other Python"


def split_profile(profile: cProfile.Profile, top: int = 25) -> dict:
    """Self time by category (shares of the busy time: the idle waits left out), and the
    functions with the most self time."""
    stats = pstats.Stats(profile)
    by_cat: dict[str, float] = {}
    rows = []
    for (filename, line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        label = category(filename, name)
        by_cat[label] = by_cat.get(label, 0.0) + tt
        rows.append((tt, ct, nc, f"{filename.split('site-packages/')[-1]}:{line}({name})"))
    idle = by_cat.pop(IDLE, 0.0)
    busy = sum(by_cat.values())
    rows.sort(reverse=True)
    return {"busy_s": busy, "idle_s": idle,
            "share": {k: v / busy for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])},
            "top": [{"self_s": tt, "cum_s": ct, "calls": nc, "where": w}
                    for tt, ct, nc, w in rows[:top]]}


def node_infos(client, section: str) -> list[dict]:
    """INFO ``section`` of each node: one server's, or every primary's of a Redis Cluster."""
    if hasattr(client, "get_primaries"):
        return [client.info(section, target_nodes=node) for node in client.get_primaries()]
    return [client.info(section)]


def info_sum(client, section: str, field: str) -> float:
    return sum(info[field] for info in node_infos(client, section))


def _redis_counts(client) -> dict:
    """Commands run and CPU used so far, summed over the nodes."""
    commands: dict[str, int] = {}
    for stats in node_infos(client, "commandstats"):
        for k, v in stats.items():
            name = k.removeprefix("cmdstat_")
            commands[name] = commands.get(name, 0) + v["calls"]
    return {"commands": commands,
            "cpu": sum(c["used_cpu_user"] + c["used_cpu_sys"]
                       for c in node_infos(client, "cpu"))}


async def run_planner(redis_url: str, prefix: str, settings: dict, *, seconds: float,
                      warmup: float, lock_ttl: float, lease: float, backlog: int,
                      profile: bool, out: str | None, standby: bool = False,
                      events: str | None = None) -> dict:
    """Run a planner node for ``seconds`` (0: until killed); measure the window after
    ``warmup`` seconds of leading: crawls handed out, CPU, Redis commands."""
    from scrapy_whittle.cluster.connect import sync_client
    from scrapy_whittle.cluster.node import ClusterNode
    from scrapy_whittle.service.clock import SystemClock
    from scrapy_whittle.service.config import WhittleConfig
    from scrapy_whittle.service.types import DictStats

    logging.getLogger("scrapy_whittle").setLevel(logging.ERROR)   # a line per failed source
    config = WhittleConfig.from_settings(settings)
    stats = DictStats()
    node = ClusterNode(config, redis_url=redis_url, prefix=prefix, specs=[], stats=stats,
                       clock=SystemClock(), lease=lease, lock_ttl=lock_ttl, backlog=backlog,
                       capacity=0, standby=standby)
    led = asyncio.get_running_loop().create_future()
    take_over = node.planner._take_over

    async def timed_take_over():        # the restore's duration, from the lock won
        elected = time.time()
        await take_over()
        if not led.done():              # (a planner that lost its lock takes it again)
            led.set_result((elected, time.time()))
    node.planner._take_over = timed_take_over
    await node.start()
    if standby:
        await _standby_ready(node, led, events)
    elected, lead_at = await led
    took_over = {"event": "lead", "at": lead_at, "elected_at": elected,
                 "restore_s": lead_at - elected, "pid": os.getpid(),
                 "warm": bool(stats.get("cluster/standby/takeovers", 0)),
                 "followed": stats.get("cluster/standby/checkpoints", 0),
                 "follow_failures": stats.get("cluster/standby/failures", 0)}
    _event(took_over, events)
    if seconds <= 0:                      # a standby or a victim: runs until told to stop
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await node.stop()
        return took_over
    await asyncio.sleep(warmup)
    sync = sync_client(redis_url)
    result = await _window(node, stats, sync, seconds, backlog)
    if profile:                 # a second window under cProfile: where the time goes
        prof = cProfile.Profile()
        prof.enable()
        profiled = await _window(node, stats, sync, seconds, backlog)
        prof.disable()
        result["profile"] = split_profile(prof)
        result["profile"]["crawls_per_s"] = profiled["crawls_per_s"]
    await node.stop()
    sync.close()
    if out:
        with open(out, "w") as f:
            json.dump(result, f)
    print(json.dumps({k: v for k, v in result.items() if k != "profile"}), flush=True)
    return result


def _event(event: dict, events: str | None) -> None:
    """A line of JSON on stdout (and appended to the file ``events``, if given)."""
    line = json.dumps(event)
    print(line, flush=True)
    if events:
        with open(events, "a", encoding="utf-8") as f:
            f.write(line + "\n")


async def _standby_ready(node, led: asyncio.Future, events: str | None) -> None:
    """Print a line once the node's standby holds the state (unless it leads first)."""
    while not led.done():
        if node.planner.standby.ready:
            _event({"event": "standby", "at": time.time(),
                    "sources": len(node.planner.standby.service.sources)}, events)
            return
        await asyncio.sleep(0.05)


async def _window(node, stats, sync, seconds: float, backlog: int) -> dict:
    """What the planner did over ``seconds``: crawls handed out, its CPU, Redis's."""
    before = _redis_counts(sync)
    seq0, cpu0, t0 = node.planner._seq, process_cpu(), time.perf_counter()
    learned0, load0 = stats.get("planner/fetched", 0), os.getloadavg()[0]
    await asyncio.sleep(seconds)
    seq1, cpu1, t1 = node.planner._seq, process_cpu(), time.perf_counter()
    after = _redis_counts(sync)
    crawls = max(seq1 - seq0, 1)
    calls = {c: after["commands"].get(c, 0) - before["commands"].get(c, 0)
             for c in after["commands"]}
    calls = {c: v for c, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v}
    return {
        "event": "measured", "crawls": seq1 - seq0, "seconds": t1 - t0,
        "crawls_per_s": (seq1 - seq0) / (t1 - t0), "planner_cpu_s": cpu1 - cpu0,
        "planner_cpu_ms_per_crawl": 1e3 * (cpu1 - cpu0) / crawls,
        "redis_cpu_ms_per_crawl": 1e3 * (after["cpu"] - before["cpu"]) / crawls,
        "redis_commands_per_crawl": sum(calls.values()) / crawls,
        "redis_commands": {c: v / crawls for c, v in calls.items()},
        "learned": stats.get("planner/fetched", 0) - learned0,
        "skipped": stats.get("planner/skipped", 0), "in_flight_cap": backlog,
        "loadavg_1min": (load0 + os.getloadavg()[0]) / 2,
        "planner_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# -- the workers --------------------------------------------------------------------------------
class SyntheticWeb:
    """What fetching a source shows, drawn from a seeded model: source i publishes as a
    Poisson process of rate ``rate[i]`` (log-normal across sources, per second); a fetch sees
    the entries since its last fetch (at most ``WINDOW``), published uniformly in between;
    a fetch that finds nothing is a 304 with probability ``P_NOT_MODIFIED``; ``P_FAILED`` of
    the fetches fail (HTTP 503)."""

    def __init__(self, n: int, rng: np.random.Generator, mean_rate: float = 1 / 60) -> None:
        self.rng = rng
        self.rate = mean_rate * rng.lognormal(-0.5, 1.0, size=n)
        self.seen = np.full(n, time.time() - 3600.0)

    def result(self, crawl, now: float):
        from scrapy_whittle.cluster.tasks import FETCHED, NOT_MODIFIED, CrawlResult

        rng, sid = self.rng, crawl.source
        if rng.random() < P_FAILED:
            return CrawlResult.of(crawl, now, "http_503", cause="HTTP 503 (synthetic)")
        since = self.seen[sid]
        self.seen[sid] = now
        new = min(int(rng.poisson(self.rate[sid] * max(now - since, 0.0))), WINDOW)
        if new == 0 and rng.random() < P_NOT_MODIFIED:
            return CrawlResult.of(crawl, now, NOT_MODIFIED)
        published = sorted(rng.uniform(since, now, size=new).tolist())
        return CrawlResult.of(crawl, now, FETCHED, new_items=new,
                              reward=new * crawl.weight, window_full=new == WINDOW,
                              published=published)


async def run_workers(redis_url: str, prefix: str, n: int, *, workers: int, take: int,
                      seed: int, seconds: float, log: str | None = None) -> dict:
    """K workers answering the planner's crawls until SIGTERM (or ``seconds``); with
    ``log``, a JSON line per crawl answered (source, URL, epoch, crawl id)."""
    from scrapy_whittle.cluster.connect import async_client, key_prefix
    from scrapy_whittle.cluster.keys import Keys
    from scrapy_whittle.cluster.tasks import result_fields, task_crawl

    keys = Keys(key_prefix(prefix, redis_url))
    web = SyntheticWeb(n, np.random.default_rng(seed))
    client = async_client(redis_url, max_connections=workers + 2)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    answered = [0]
    journal = open(log, "a", encoding="utf-8") if log else None

    async def worker(name: str) -> None:
        while not stop.is_set():
            got = await client.xreadgroup("workers", name, {keys.tasks: ">"}, count=take,
                                          block=100)
            entries = got[0][1] if got else []
            if not entries:
                continue
            now = time.time()
            pipe = client.pipeline(transaction=True)
            ids = []
            for task_id, fields in entries:
                crawl = task_crawl(fields)
                pipe.xadd(keys.results, result_fields(web.result(crawl, now)))
                ids.append(task_id)
                if journal is not None:
                    journal.write(json.dumps({"sid": crawl.source, "url": crawl.url,
                                              "epoch": crawl.epoch, "cid": crawl.cid}) + "\n")
            pipe.xack(keys.tasks, "workers", *ids)
            pipe.xdel(keys.tasks, *ids)
            await pipe.execute()
            answered[0] += len(ids)

    tasks = [asyncio.ensure_future(worker(f"load-{os.getpid()}-{i}")) for i in range(workers)]
    if seconds > 0:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
        stop.set()
    for failed in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(failed, BaseException):
            print(f"a worker failed: {failed!r}", file=sys.stderr)
    await client.aclose()
    if journal is not None:
        journal.close()
    return {"answered": answered[0]}


# -- command line -------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.crawls.planner_load")
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("load")
    p.add_argument("redis_url")
    p.add_argument("prefix")
    p.add_argument("n", type=int)
    p.add_argument("settings")
    p.add_argument("--hosts", type=int, default=0)
    p = sub.add_parser("planner")
    p.add_argument("redis_url")
    p.add_argument("prefix")
    p.add_argument("settings")
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--lock-ttl", type=float, default=10.0)
    p.add_argument("--lease", type=float, default=60.0)
    p.add_argument("--backlog", type=int, default=256)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--standby", action="store_true",
                   help="keep a standby while another plans (WHITTLE_REDIS_STANDBY)")
    p.add_argument("--events", help="a file the lines of JSON are appended to as well")
    p.add_argument("--out")
    p = sub.add_parser("workers")
    p.add_argument("redis_url")
    p.add_argument("prefix")
    p.add_argument("n", type=int)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--take", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--log")
    args = parser.parse_args(argv)
    if args.role == "load":
        hosts = args.hosts or max(1, args.n // 100)
        print(json.dumps(load(args.redis_url, args.prefix, args.n, hosts,
                              json.loads(args.settings))), flush=True)
    elif args.role == "planner":
        asyncio.run(run_planner(args.redis_url, args.prefix, json.loads(args.settings),
                                seconds=args.seconds, warmup=args.warmup,
                                lock_ttl=args.lock_ttl, lease=args.lease,
                                backlog=args.backlog, profile=args.profile, out=args.out,
                                standby=args.standby, events=args.events))
    else:
        print(json.dumps(asyncio.run(run_workers(
            args.redis_url, args.prefix, args.n, workers=args.workers, take=args.take,
            seed=args.seed, seconds=args.seconds, log=args.log))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
