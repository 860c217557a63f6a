"""Redis memory per source of a cluster crawl at scale, written through the crawl's own code.

    python -m sim.bench cluster-memory --sources 1000000 [--entries 10] [--json]

No crawl, no HTTP: a ``redis-server`` (temporary, free port) receives what a cluster holds of
``--sources`` sources after each was fetched once, through the code a cluster runs:

* the planner's state (``RedisStateStore``): the sources registered by a
  ``RecrawlService`` and checkpointed (packed records with the policy's per-source row,
  URLs, each source's last new entry), then one fetch per source learnt and checkpointed
  (its ETag);
* the workers' entry memory and story memory (``WHITTLE_DEDUP = "link"``): the entry and
  report scripts (``cluster.entries.ENTRIES`` and ``REPORT``, with the node's own arguments:
  ``ClusterNode.entry_call``, ``ClusterNode.report_call``) run once per source on
  ``--entries`` entries of its own (distinct stories).

Reported: ``used_memory`` after against before, per source, and ``MEMORY USAGE`` of the
crawl's keys by family (``rows``, ``urls``, ``entries``, ``stories``, ...) per source.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from sim.bench import harness
from sim.crawls.processes import RedisServer

PREFIX = "mem:{crawl}"


def _fill_state(client, keys, n: int, hosts: int) -> tuple[float, float]:
    from scrapy_whittle.cluster.state import RedisStateStore
    from scrapy_whittle.service.config import WhittleConfig
    from scrapy_whittle.service.recrawl import RecrawlService
    from scrapy_whittle.service.sources.registry import SourceSpec
    from scrapy_whittle.service.types import Crawl

    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": max(1.0, n / 100)})
    service = RecrawlService(config, store=RedisStateStore(client, keys))
    started = time.perf_counter()
    service.open([SourceSpec(url=f"https://h{i % hosts}.example.com/feeds/{i}/rss.xml")
                  for i in range(n)])
    service.store.write(service.prepare_checkpoint())
    registered = time.perf_counter() - started
    now = service.clock.now()
    for sid in range(n):          # each source fetched once: its record and ETag written
        crawl = Crawl(sid, service.url(sid), 0, now, {})
        service.record_fetch(crawl, 3, 3.0, False, [now - 60.0] * 3,
                             etag=f'W/"{sid:x}-5f3e2a"', now=now)
    service.store.write(service.prepare_checkpoint())
    return registered, time.perf_counter() - started - registered


def _fill_entries(client, keys, n: int, entries: int) -> float:
    from scrapy_whittle.cluster.entries import ENTRIES, REPORT, packed_hashes
    from scrapy_whittle.cluster.node import ClusterNode
    from scrapy_whittle.cluster.stories import StoryHashes
    from scrapy_whittle.feeds.parse import FeedEntry
    from scrapy_whittle.service.config import WhittleConfig

    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1.0})
    node = SimpleNamespace(keys=keys, config=config,
                           stories=StoryHashes(config.dedup_drop_params)
                           if config.dedup == "link" else None)
    told, report = client.register_script(ENTRIES), client.register_script(REPORT)
    started = time.perf_counter()
    batch = 500
    for first in range(0, n, batch):
        pipe = client.pipeline(transaction=False)
        fetches = []
        for sid in range(first, min(n, first + batch)):
            shown = [FeedEntry(key=f"https://h{sid % 1000}.example.com/{sid}/{j}", title=None,
                               link=f"https://h{sid % 1000}.example.com/{sid}/{j}",
                               published=None, engagement=None)
                     for j in range(entries)]
            distinct, packed = packed_hashes(shown)
            fetches.append(distinct)
            k, a = ClusterNode.entry_call(node, sid, packed, [])
            told(keys=k, args=a, client=pipe)
        pipe2 = client.pipeline(transaction=False)
        for distinct, (had, flags, _batch, grown) in zip(fetches, pipe.execute(), strict=True):
            k, a = ClusterNode.report_call(node, distinct, flags.decode(), int(grown), int(had))
            report(keys=k, args=a, client=pipe2)
        pipe2.execute()
    return time.perf_counter() - started


def _by_family(client, n: int) -> dict[str, dict]:
    size, count = Counter(), Counter()
    for key in client.scan_iter(f"{PREFIX}:*", count=1000):
        parts = key.decode()[len(PREFIX) + 1:].split(":")
        family = parts[1] if parts[0].startswith("t") and parts[0][1:].isdigit() else parts[0]
        size[family] += client.memory_usage(key, samples=0) or 0
        count[family] += 1
    return {f: {"keys": count[f], "bytes_per_source": size[f] / n} for f in sorted(size)}


def _encodings(client) -> dict[str, str]:
    """The encoding of one key of each family (``OBJECT ENCODING``)."""
    out = {}
    for f in ("rows", "urls", "etag", "entries", "stories", "alive"):
        key = next(iter(client.scan_iter(f"{PREFIX}:*{f}:*", count=1000)), None)
        if key is not None:
            out[f] = client.object("encoding", key).decode()
    return out


def main(argv: list[str] | None = None) -> int:
    from scrapy_whittle.cluster.keys import Keys

    ap = harness.parser("cluster-memory", __doc__)
    ap.add_argument("--sources", type=int, default=100_000)
    ap.add_argument("--entries", type=int, default=10, help="entries each feed shows")
    ap.add_argument("--hosts", type=int, default=5000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-memory-"))
    redis = RedisServer(tmp)
    try:
        client, keys, n = redis.client, Keys(PREFIX), args.sources
        before = client.info("memory")["used_memory"]
        register_s, fetch_s = _fill_state(client, keys, n, args.hosts)
        state = client.info("memory")["used_memory"] - before
        entries_s = _fill_entries(client, keys, n, args.entries) if args.entries else 0.0
        used = client.info("memory")["used_memory"] - before
        report = {"sources": n, "entries_per_feed": args.entries,
                  "used_memory_per_source": used / n,
                  "state_used_memory_per_source": state / n,
                  "keys": _by_family(client, n),
                  "encodings": _encodings(client),
                  "seconds": {"register": register_s, "fetch_once": fetch_s,
                              "entries": entries_s}}
    finally:
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{n} sources, {args.entries} entries a feed: used_memory "
          f"{report['used_memory_per_source']:.0f} bytes per source (the planner's state "
          f"alone {report['state_used_memory_per_source']:.0f})")
    for family, v in report["keys"].items():
        print(f"  {family:10s} {v['keys']:8d} keys {v['bytes_per_source']:8.1f} B/source")
    return 0
