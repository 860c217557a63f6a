"""One process of a cluster crawl: a worker, and the planner while it holds the lock.

As a worker it reads crawls from the stream ``Keys.tasks`` (consumer group ``workers``) into
a small local queue the scheduler hands to Scrapy's downloader, and it is what the feed
middleware reports to (the same methods as the re-crawl service, but coroutines): the entries
of a fetched feed are told new or old by the shared entry memory
(:mod:`scrapy_whittle.cluster.entries`), and what the fetch showed goes to ``Keys.results``
in one transaction with the acknowledgement of the task. Every Redis call goes through a
:class:`~scrapy_whittle.cluster.retry.Retrier`: an outage pauses the crawl, it does not end it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
from collections import deque

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, ResponseError, TimeoutError
from redis.retry import Retry as SyncRetry

from scrapy_whittle.cluster.entries import DEDUPE, packed_hashes
from scrapy_whittle.cluster.keys import BUCKET, Keys
from scrapy_whittle.cluster.planner import ClusterHosts, Planner
from scrapy_whittle.cluster.retry import Retrier
from scrapy_whittle.cluster.tasks import task_crawl, task_fields
from scrapy_whittle.feeds.hints import ServerHints
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import Crawl, FetchResult, entry_values
from scrapy_whittle.service.sources import SourceSpec

logger = logging.getLogger(__name__)


class ClusterNode:
    def __init__(self, config: WhittleConfig, *, redis_url: str, prefix: str, specs,
                 stats, clock, oracle=None, slot_delays=None, lease: float = 600.0,
                 lock_ttl: float = 10.0, backlog: int = 256, capacity: int = 16,
                 host_concurrency: int = 8, download_delay: float = 0.0) -> None:
        self.config = config
        self.keys = Keys(prefix)
        self.redis_url = redis_url
        self.redis_label = redis_url.split("@")[-1]
        self.specs = list(specs)
        self.stats = stats
        self.clock = clock
        self.oracle = oracle
        self.slot_delays = dict(slot_delays or {})
        self.capacity = capacity
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        # a stale pooled connection (the server restarted) is retried at once by the client;
        # a server that stays away goes to the Retrier, which waits with back-off
        options = {"retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
                   "retry_on_error": [ConnectionError, TimeoutError],
                   "health_check_interval": 10}
        self.redis = aioredis.from_url(redis_url, **options)
        self.sync_redis = redis.Redis.from_url(
            redis_url, retry=SyncRetry(ExponentialBackoff(cap=0.5, base=0.05), 2),
            retry_on_error=[ConnectionError, TimeoutError], health_check_interval=10)
        self.stopping = False
        self.finished = False
        self.queue: deque[tuple[Crawl, str]] = deque()     # (crawl, task id) not started
        self.taken: dict[str, str] = {}                    # crawl id -> task id, started
        self.on_tasks = None                              # callback: tasks arrived
        self.retry = Retrier(f"cluster node {self.consumer}", stats,
                             stopping=lambda: self.stopping)
        self.planner = Planner(self, lock_ttl=lock_ttl, lease=lease, backlog=backlog,
                               hosts=ClusterHosts(host_concurrency, download_delay,
                                                  self.slot_delays))
        self._dedupe = self.redis.register_script(DEDUPE)
        self._loops: list[asyncio.Task] = []
        self._posting: set[asyncio.Future] = set()
        self._logged: set[tuple[int, str]] = set()

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._ensure_groups()
        self._loops = [asyncio.ensure_future(self._read_tasks()),
                       asyncio.ensure_future(self._plan())]

    async def _ensure_groups(self) -> None:
        for stream, group in ((self.keys.tasks, "workers"), (self.keys.results, "planner")):
            async def create(stream=stream, group=group):
                with contextlib.suppress(ResponseError):      # BUSYGROUP: it exists
                    await self.redis.xgroup_create(stream, group, id="0", mkstream=True)
            await self.retry(create, "creating the streams")

    async def stop(self, unstarted: list[Crawl] = ()) -> None:
        """Stop the loops (they end by themselves: cancelling a blocking Redis read can hang
        the client), give back the tasks not started (``unstarted``: taken ones the caller
        never downloaded), and let the planner resign."""
        self.stopping = True
        for task in self._loops:
            try:
                await asyncio.wait_for(asyncio.shield(task), 3)
            except (TimeoutError, asyncio.CancelledError, Exception):
                task.cancel()
        self.stopping = False          # the last calls below may still retry a little
        for crawl in unstarted:
            task_id = self.taken.pop(crawl.cid, None)
            if task_id is not None:
                self.queue.append((crawl, task_id))
        try:
            await asyncio.wait_for(self._give_back(), 10)
            await asyncio.wait_for(self.planner.resign(), 30)
        except (TimeoutError, redis.exceptions.RedisError) as exc:
            logger.warning("cluster node %s closed without a last word to Redis (%s)",
                           self.consumer, exc)
        await self.redis.aclose()
        self.sync_redis.close()

    async def _give_back(self) -> None:
        """Tasks taken but not started go back to the stream for the other workers."""
        if not self.queue:
            return
        pipe = self.redis.pipeline(transaction=True)
        for crawl, task_id in self.queue:
            pipe.xadd(self.keys.tasks, task_fields(crawl))
            pipe.xack(self.keys.tasks, "workers", task_id)
            pipe.xdel(self.keys.tasks, task_id)
        self.queue.clear()
        await pipe.execute()

    async def _plan(self) -> None:
        while not self.stopping:
            try:
                wait = await self.planner.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("the planner failed a round; it tries again")
                wait = 1.0
            if wait:
                await asyncio.sleep(wait)

    # -- taking tasks ---------------------------------------------------------------------------
    async def _read_tasks(self) -> None:
        k = self.keys
        checked = 0.0
        while not self.stopping:
            free = self.capacity * 2 - len(self.queue) - len(self.taken)
            if free <= 0:
                await asyncio.sleep(0.01)
                continue
            got = await self.retry(lambda free=free: self.redis.xreadgroup(
                "workers", self.consumer, {k.tasks: ">"}, count=free, block=200),
                "taking tasks")
            for task_id, f in (got[0][1] if got else ()):
                self.queue.append((task_crawl(f), task_id.decode()))
            if got and self.on_tasks is not None:
                self.on_tasks()
            loop_time = asyncio.get_running_loop().time()
            if loop_time - checked > 1.0:
                checked = loop_time
                finished = await self.retry(lambda: self.redis.hget(k.meta, "finished"),
                                            "reading the crawl's state")
                self.finished = bool(finished)

    def next_crawl(self) -> Crawl | None:
        """The next task for the downloader, or None."""
        if not self.queue:
            return None
        crawl, task_id = self.queue.popleft()
        self.taken[crawl.cid] = task_id
        return crawl

    # -- reporting fetches (the middleware's sink) -----------------------------------------------
    def _task(self, crawl: Crawl) -> tuple[str, str, float]:
        return crawl.cid, self.taken.pop(crawl.cid), crawl.weight

    async def feed_fetched(self, crawl: Crawl, entries: list[FeedEntry], *,
                           etag: str | None = None, last_modified: str | None = None,
                           hints: ServerHints | None = None) -> FetchResult:
        cid, task_id, weight = self._task(crawl)
        k = self.keys
        visible, packed = packed_hashes(entries)
        flags = await self.retry(lambda: self._dedupe(
            keys=[k.entries(crawl.source)],
            args=[crawl.source % BUCKET, self.config.max_entries_per_source, 4, packed]),
            "telling new entries")
        flags = flags.decode() if isinstance(flags, bytes) else flags
        new = [e for e, flag in zip(visible, flags, strict=False) if flag == "1"]
        had_before = "0" in flags or len(visible) < len(flags)
        window_full = bool(visible and len(new) == len(visible) and had_before)
        values = entry_values(new, weight, self.config)
        now = self.clock.now()
        published = [e.published if e.published is not None else now for e in new]
        await self._send(crawl, cid, task_id, "ok", now=now, new=len(new),
                         reward=float(sum(values)), full=int(window_full),
                         published=json.dumps(published), etag=etag or "",
                         modified=last_modified or "", hints=hints.encode() if hints else "")
        self.stats.inc("fetched")
        self.stats.inc("new_items", len(new))
        self.stats.inc("utility", float(sum(values)))
        return FetchResult(new, values, window_full)

    async def not_modified(self, crawl: Crawl, *, etag: str | None = None,
                           last_modified: str | None = None,
                           hints: ServerHints | None = None) -> None:
        cid, task_id, _ = self._task(crawl)
        await self._send(crawl, cid, task_id, "not_modified", etag=etag or "",
                         modified=last_modified or "", hints=hints.encode() if hints else "")
        self.stats.inc("fetched")
        self.stats.inc("not_modified")

    async def crawl_failed(self, crawl: Crawl, kind: str, cause: str,
                           retry_after: float | None = None) -> float:
        cid, task_id, _ = self._task(crawl)
        await self._send(crawl, cid, task_id, kind, cause=cause[:500],
                         retry=repr(float(retry_after or 0.0)))
        self.stats.inc(f"errors/{kind}")
        if (crawl.source, kind) not in self._logged:
            self._logged.add((crawl.source, kind))
            logger.warning("source %d (%s): %s", crawl.source, crawl.url, cause)
        return 0.0

    def feed_warnings(self, crawl: Crawl, warnings: list[str]) -> None:
        self.stats.inc("warnings")
        if (crawl.source, "warning") not in self._logged:
            self._logged.add((crawl.source, "warning"))
            logger.info("source %d (%s): %s", crawl.source, crawl.url, "; ".join(warnings))

    async def _send(self, crawl: Crawl, cid: str, task_id: str, kind: str, **fields) -> None:
        k = self.keys
        message = {"sid": crawl.source, "cid": cid, "epoch": crawl.epoch,
                   "sent_at": repr(crawl.sent_at), "at": repr(self.clock.now()),
                   "kind": kind, "new": 0, "reward": 0.0, "full": 0, "published": "[]",
                   "etag": "", "modified": "", "cause": "", "hints": "", "retry": "0.0",
                   **fields}

        async def send():
            pipe = self.redis.pipeline(transaction=True)
            pipe.xadd(k.results, message)
            pipe.xack(k.tasks, "workers", task_id)
            pipe.xdel(k.tasks, task_id)
            return await pipe.execute()

        await self.retry(send, "sending a result")

    # -- messages to the planner ---------------------------------------------------------------
    async def tell_planner(self, message: dict) -> None:
        await self.retry(lambda: self.redis.rpush(self.keys.inbox, json.dumps(message)),
                         "writing to the planner")

    def _post(self, message: dict) -> None:
        task = asyncio.ensure_future(self.tell_planner(message))
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    def add_source(self, spec: SourceSpec) -> None:
        self._post({"type": "source", "url": spec.url})

    def set_crawl_delay(self, host: str, delay: float) -> bool:
        self._post({"type": "crawl_delay", "host": host, "delay": delay})
        return True

    def report_value(self, source, value, *, published, at=None, base_value=None) -> bool:
        """Feedback from a pipeline, passed to the planner (True: sent, not yet judged)."""
        self._post({"type": "value", "source": source, "value": value,
                    "published": published, "at": self.clock.now() if at is None else at,
                    "base_value": base_value})
        return True
