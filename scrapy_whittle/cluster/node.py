"""One process of a cluster crawl: a worker, and the planner while it holds the lock.

As a worker it reads crawls from the stream ``Keys.tasks`` (consumer group ``workers``) into
a small local queue the scheduler hands to Scrapy's downloader, and it is what the feed
middleware reports to: a :class:`~scrapy_whittle.service.types.CrawlSink` like the re-crawl
service, its reports coroutines. The entries of a fetched feed are told new or old by the
shared entry memory (:mod:`scrapy_whittle.cluster.entries`) and judged by the service's own
code (:func:`~scrapy_whittle.service.outcomes.judge_fetch`); what the fetch showed goes to
``Keys.results`` (:class:`~scrapy_whittle.cluster.tasks.CrawlResult`) in one transaction with
the acknowledgement of the task. Every Redis call goes through a
:class:`~scrapy_whittle.cluster.retry.Retrier`: an outage pauses the crawl, it does not end it.

During an outage the node hands the downloader no crawl (its report could not be made), and a
fetch already made waits for Redis at most ``WHITTLE_REDIS_WAIT`` seconds to report, then is
dropped: its task stays pending in the stream, and the planner hands it out again once its
lease ends. So nothing on the downloader's path waits on Redis for ever, and a crawl closing
during an outage (``CLOSESPIDER_*``, SIGTERM: Scrapy's close waits for the downloads in
progress) ends. At close, the last words to Redis (tasks given back, the planner's last
checkpoint) are tried once each when Redis is gone.

At-least-once items: the script that tells a fetch's entries new also stores them as a
pending batch in Redis (:mod:`scrapy_whittle.cluster.entries`), whose id goes with the
response (``FetchResult.batch``) to ``DeliveryMiddleware``; :meth:`ClusterNode.delivered`
deletes it once its items passed the pipelines. Until then the node renews the batches it
holds every third of the lease (``WHITTLE_REDIS_LEASE``'s value); a batch not renewed for a
lease (its worker killed, or the script's reply lost with the connection) is reclaimed by a
live node and replayed by its scheduler (:meth:`take_replay`). At a graceful stop the
batches still held are released at once to the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import socket
from collections import deque

import redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout
from redis.retry import Retry as SyncRetry

from scrapy_whittle.cluster.connect import (
    async_client,
    key_prefix,
    public_url,
    sync_client,
)
from scrapy_whittle.cluster.counting import RoundTrips, count_round_trips
from scrapy_whittle.cluster.entries import (
    DEDUPE,
    RECLAIM,
    RENEW,
    entry_args,
    packed_hashes,
    report_arg,
)
from scrapy_whittle.cluster.keys import BUCKET, Keys
from scrapy_whittle.cluster.planner import ClusterHosts, Planner
from scrapy_whittle.cluster.retry import RedisUnavailable, Retrier
from scrapy_whittle.cluster.stories import StoryHashes, story_args
from scrapy_whittle.cluster.tasks import (
    FETCHED,
    NOT_MODIFIED,
    CrawlResult,
    report_fields,
    result_fields,
    task_crawl,
    task_fields,
)
from scrapy_whittle.feeds.hints import ServerHints
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.deliveries import Batch
from scrapy_whittle.service.once_log import OnceLog
from scrapy_whittle.service.outcomes import count_fetch, judge_fetch, report_warnings
from scrapy_whittle.service.sources import SourceSpec
from scrapy_whittle.service.types import NO_LOAD, Crawl, FetchResult, HostLoad, valued

logger = logging.getLogger(__name__)

#: pending batches a node reclaims at once (more are taken a moment later)
RECLAIM_BATCHES = 16
#: seconds a delivered batch waits for others to be forgotten with it (a tenth of the lease
#: at most: it is no longer renewed)
DELIVERY_GATHER = 0.05


class ClusterNode:
    """A :class:`~scrapy_whittle.service.types.CrawlSink`; ``start`` / ``stop`` on the
    reactor's event loop."""

    #: the node is woken by the tasks it takes (``on_tasks``), never by a due time
    wake_at = math.inf

    def __init__(self, config: WhittleConfig, *, redis_url: str, prefix: str, specs,
                 stats, clock, oracle=None, slot_delays=None, lease: float = 600.0,
                 lock_ttl: float = 10.0, backlog: int = 256, capacity: int = 16,
                 host_concurrency: int = 8, download_delay: float = 0.0,
                 wait: float = 10.0, standby: bool = False) -> None:
        self.config = config
        self.keys = Keys(key_prefix(prefix, redis_url))   # hash-tagged on a Redis Cluster
        self.redis_url = redis_url
        self.redis_label = public_url(redis_url)
        self.specs = list(specs)
        self.stats = stats
        self.clock = clock
        self.oracle = oracle
        self.slot_delays = dict(slot_delays or {})
        self.download_delay = download_delay
        self.capacity = capacity
        self.wait = wait                # WHITTLE_REDIS_WAIT: how long a report waits
        self.lease = lease              # also how long a pending batch goes unrenewed
        self.consumer = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        # a stale pooled connection (the server restarted) is retried at once by the client;
        # a server that stays away goes to the Retrier, which waits with back-off
        # (a connect bounded too: a host that drops packets would hold it for the system's
        # TCP timeout, and the synchronous client's calls in a thread past the close)
        options = {"retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
                   "retry_on_error": [ConnectionError, RedisTimeout],
                   "health_check_interval": 10, "socket_connect_timeout": wait}
        #: the requests this process sent Redis (both clients)
        self.round_trips = RoundTrips()
        self.redis = count_round_trips(async_client(redis_url, **options), self.round_trips)
        self.sync_redis = count_round_trips(sync_client(
            redis_url, retry=SyncRetry(ExponentialBackoff(cap=0.5, base=0.05), 2),
            retry_on_error=[ConnectionError, RedisTimeout], health_check_interval=10,
            socket_connect_timeout=wait), self.round_trips)
        self.stopping = False
        self.finished = False
        self.queue: deque[tuple[Crawl, str]] = deque()     # (crawl, task id) not started
        self.taken: dict[str, str] = {}                    # crawl id -> task id, started
        self.on_tasks = None                              # callback: tasks arrived
        self.on_lead = None                               # callback: the planner took over
        self.retry = Retrier(f"cluster node {self.consumer}", stats,
                             stopping=lambda: self.stopping)
        self.planner = Planner(self, lock_ttl=lock_ttl, lease=lease, backlog=backlog,
                               hosts=ClusterHosts(host_concurrency, download_delay,
                                                  self.slot_delays), standby=standby)
        self._dedupe = self.redis.register_script(DEDUPE)
        #: the stories across feeds (``WHITTLE_DEDUP = "link"``; None: entries per feed)
        self.stories = StoryHashes(config.dedup_drop_params) if config.dedup == "link" \
            else None
        self._renew = self.redis.register_script(RENEW)
        self._reclaim = self.redis.register_script(RECLAIM)
        #: store each fetch's new entries as a pending batch until delivered (set when
        #: something reports deliveries: DeliveryMiddleware)
        self.journal_deliveries = False
        self.held: set[int] = set()                       # pending batches not delivered
        self.replays: deque[Batch] = deque()              # reclaimed, to hand out again
        self._delivered: list[int] = []                   # delivered, not yet forgotten
        self._forgetting = False                          # a task forgets them soon
        self._loops: list[asyncio.Task] = []
        self._posting: set[asyncio.Future] = set()
        self._log_once = OnceLog(logger)
        self._dropped_logged = False
        self._moves: dict[str, str] = {}                  # crawl id -> URL it moved to

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._ensure_groups()
        self._loops = [asyncio.ensure_future(self._read_tasks()),
                       asyncio.ensure_future(self._plan()),
                       asyncio.ensure_future(self._keep_batches())]

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
        for crawl in unstarted:
            self._requeue(crawl)
        if self._posting:                # deliveries and messages on their way
            await asyncio.wait(list(self._posting), timeout=min(self.wait, 5.0))
        # the last words: each call tried once more after a failure (the client's own
        # retries cover a connection gone stale), none waits for a Redis that is gone
        self.retry.patience = 0.0
        try:
            await asyncio.wait_for(self._give_back(), 10)
            await asyncio.wait_for(self._release_batches(), 10)
            await asyncio.wait_for(self.planner.resign(), 30)
        except (TimeoutError, RedisUnavailable, redis.exceptions.RedisError) as exc:
            logger.warning("cluster node %s closed without a last word to Redis (%s)",
                           self.consumer, exc or type(exc).__name__)
        self.count_calls()
        await self.redis.aclose()
        self.sync_redis.close()

    def count_calls(self) -> None:
        """Publish the round trips to Redis so far, in all and by what they were for."""
        self.stats.set("cluster/round_trips", self.round_trips.count)
        for what, n in self.retry.calls.items():
            self.stats.set(f"cluster/calls/{what.replace(' ', '_')}", n)

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

    async def _release_batches(self) -> None:
        """Batches held and not delivered (the crawl closed first): renewed to time 0, so
        that a live node reclaims them at once."""
        if self.held:
            await self.redis.zadd(self.keys.pending_since, dict.fromkeys(self.held, 0),
                                  xx=True)
            self.held.clear()
            self.replays.clear()

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
        checked = 0.0
        while not self.stopping:
            free = self.capacity * 2 - len(self.queue) - len(self.taken)
            if free <= 0:
                await asyncio.sleep(0.01)
                continue
            loop_time = asyncio.get_running_loop().time()
            state = loop_time - checked > 1.0        # the crawl's state too, once a second
            if state:
                checked = loop_time
            try:
                got, state = await self.retry(lambda free=free, state=state: self._take(
                    free, state), "taking tasks")
            except asyncio.CancelledError:
                raise
            except Exception:           # the loop must outlive a client's odd error
                logger.exception("cluster node %s: taking tasks failed; it tries again",
                                 self.consumer)
                await asyncio.sleep(1.0)
                continue
            for task_id, f in (got[0][1] if got else ()):
                self.queue.append((task_crawl(f), task_id.decode()))
            if got and self.on_tasks is not None:
                self.on_tasks()
            if state is not None:
                finished, crawls, sources = state
                self.finished = bool(finished)
                self.stats.set("cluster/crawls", int(crawls or 0))
                self.stats.set("cluster/sources", int(sources or 0))
                self.count_calls()

    async def _take(self, count: int, state: bool) -> tuple[list, list | None]:
        """(Up to ``count`` tasks, waiting a moment for some; with ``state``: the crawl's
        state (finished, the cluster's crawls, its sources), read in the same round trip.)"""
        k = self.keys
        if not state:
            got = await self.redis.xreadgroup("workers", self.consumer, {k.tasks: ">"},
                                              count=count, block=200)
            return got, None
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(k.meta, "finished")
        pipe.hmget(k.totals, "crawls", "sources")
        pipe.xreadgroup("workers", self.consumer, {k.tasks: ">"}, count=count, block=200)
        finished, (crawls, sources), got = await pipe.execute()
        return got, [finished, crawls, sources]

    def next_crawl(self, hosts: HostLoad = NO_LOAD) -> Crawl | None:
        """The next task for the downloader, or None. ``hosts`` is not asked: the planner
        keeps every host polite across the cluster."""
        if not self.queue or self.retry.down_since is not None:
            return None                 # Redis unreachable: its report could not be made
        crawl, task_id = self.queue.popleft()
        self.taken[crawl.cid] = task_id
        self.stats.inc("crawls")        # this process's crawls (the planner's: planner/)
        return crawl

    def has_crawls(self) -> bool:
        return not self.finished or bool(self.queue) or bool(self.replays)

    def take_replay(self) -> Batch | None:
        """A pending batch reclaimed from a worker that did not deliver it, for the scheduler
        to hand to the spider again (``replay_request``), or None. ``on_tasks`` is called
        when some arrive."""
        return self.replays.popleft() if self.replays else None

    # -- pending batches -------------------------------------------------------------------------
    async def _keep_batches(self) -> None:
        """Every third of the lease: renew the batches held, reclaim stale ones."""
        every = max(0.05, min(self.lease / 3, 30.0))
        loop = asyncio.get_running_loop()
        while not self.stopping:
            due = loop.time() + every
            while not self.stopping and loop.time() < due:    # a stop ends it at once
                await asyncio.sleep(min(0.2, max(0.0, due - loop.time())))
            if self.stopping or self.retry.down_since is not None:
                continue
            try:
                await self._renew_and_reclaim()
            except (RedisUnavailable, redis.exceptions.RedisError) as exc:
                logger.debug("cluster node %s: pending batches not kept this round (%s)",
                             self.consumer, exc)

    async def _renew_and_reclaim(self) -> None:
        k = self.keys
        held = list(self.held)
        for i in range(0, len(held), 1000):
            chunk = held[i:i + 1000]
            await self.retry(lambda chunk=chunk: self._renew(keys=[k.pending_since],
                                                             args=chunk),
                             "renewing pending batches", within=self.wait)
        if len(self.replays) >= RECLAIM_BATCHES:
            return
        lines = await self.retry(lambda: self._reclaim(
            keys=[k.pending, k.pending_since], args=[self.lease, RECLAIM_BATCHES]),
            "reclaiming pending batches", within=self.wait)
        batches = []
        for line in lines:
            try:
                batch = Batch.from_line(line)
            except (ValueError, TypeError, KeyError):
                logger.warning("cluster node %s: a damaged pending batch skipped: %r",
                               self.consumer, line[:200])
                continue
            if batch.id not in self.held:
                batches.append(batch)
        if not batches:
            return
        self.held.update(b.id for b in batches)
        self.replays.extend(batches)
        n = sum(len(b.entries) for b in batches)
        self.stats.inc("deliveries/replayed", n)
        logger.info("cluster node %s: %d entries of %d fetches not delivered by their worker "
                    "within the lease: handed out again", self.consumer, n, len(batches))
        if self.on_tasks is not None:
            self.on_tasks()

    def delivered(self, batch: int) -> None:
        """Every item made of ``batch``'s entries passed the pipelines (or was dropped on
        purpose): its pending batch is deleted (in the background, retried), with the others
        delivered within ``DELIVERY_GATHER`` seconds: one round trip for them all."""
        self.held.discard(batch)
        self._delivered.append(batch)
        if self._forgetting:
            return
        self._forgetting = True
        task = asyncio.ensure_future(self._forget_delivered())
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    async def _forget_delivered(self) -> None:
        k = self.keys
        await asyncio.sleep(min(DELIVERY_GATHER, self.lease / 10))
        batches, self._delivered, self._forgetting = self._delivered, [], False

        async def forget():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hdel(k.pending, *batches)
            pipe.zrem(k.pending_since, *batches)
            return await pipe.execute()

        try:
            await self.retry(forget, "forgetting delivered batches", within=self.wait)
        except (RedisUnavailable, redis.exceptions.RedisError) as exc:
            # they are reclaimed after the lease and delivered again: repeats, not losses
            logger.info("cluster node %s: %d delivered batches not forgotten (%s)",
                        self.consumer, len(batches), exc)

    def queued(self) -> int:
        return len(self.queue)

    def reports_pending(self) -> bool:
        # a cluster runs on the system clock: nothing jumps past a report
        return False

    def _requeue(self, crawl: Crawl) -> None:
        """``crawl`` was taken but will not be downloaded: back to the queue given back."""
        task_id = self.taken.pop(crawl.cid, None)
        if task_id is not None:
            self.queue.append((crawl, task_id))

    # -- reporting fetches (the middleware's sink) -----------------------------------------------
    async def feed_fetched(self, crawl: Crawl, entries: list[FeedEntry], *,
                           etag: str | None = None, last_modified: str | None = None,
                           hints: ServerHints | None = None, latency: float | None = None
                           ) -> FetchResult:
        task_id = self.taken.pop(crawl.cid)
        distinct, packed = packed_hashes(entries)
        maxn = self.config.max_entries_per_source
        shown = distinct[:maxn]
        values, _ = valued(shown, crawl.weight, self.config)
        journal = []
        if self.journal_deliveries:      # the new entries: a pending batch, in the script
            journal = entry_args(crawl.url, crawl.source, self.clock.now(), shown, values)
        # the result goes in the same step: what the script fills in is judged there
        template = report_fields(CrawlResult.of(
            crawl, self.clock.now(), FETCHED, moved=self._moves.pop(crawl.cid, ""),
            etag=etag or "", last_modified=last_modified or "",
            hints=hints.encode() if hints else "", latency=latency))
        report = report_arg(task_id, template, values, shown)
        keys, args = self.dedupe_call(crawl.source, shown, packed, journal, report)
        try:
            had, flags, batch = await self.retry(lambda: self._dedupe(keys=keys, args=args),
                                                 "reporting a fetch", within=self.wait)
        except RedisUnavailable as exc:
            self._dropped(crawl, exc)
            return FetchResult([], [], False)
        flags = flags.decode() if isinstance(flags, bytes) else flags
        new = [e for e, flag in zip(distinct, flags, strict=False) if flag == "1"]
        repeats = flags.count("2")
        if repeats:                     # stories another feed (or entry) brought first
            self.stats.inc("dedup/repeats", repeats)
        found = judge_fetch(new, len(flags), int(had) > 0, crawl.weight, self.config,
                            self.stats, len(new) + repeats)
        count_fetch(self.stats, len(new), float(sum(found.values)), found.window_full)
        if int(batch):
            self.held.add(int(batch))
            found = found._replace(batch=int(batch))
        return found

    def dedupe_call(self, source: int, distinct: list[FeedEntry], packed: bytes,
                    journal: list, report: str = "") -> tuple[list[str], list]:
        """The keys and arguments of the dedupe script
        (:data:`~scrapy_whittle.cluster.entries.DEDUPE`) for a fetch of ``source`` that
        showed ``distinct`` entries (``packed``: their hashes; ``journal``: ``entry_args``'s
        or nothing; ``report``: ``report_arg``'s or nothing)."""
        k = self.keys
        shards, spec = [], b""
        if self.stories is not None:
            shards, spec = story_args(distinct, self.stories, k.stories)
        streams = [k.results, k.tasks] if report else []
        return ([k.entries(source), k.pending, k.pending_since, k.pending_next,
                 k.entry_capacity, *shards, *streams],
                [source % BUCKET, self.config.max_entries_per_source, 4, packed, spec,
                 report, *journal])

    async def not_modified(self, crawl: Crawl, *, etag: str | None = None,
                           last_modified: str | None = None,
                           hints: ServerHints | None = None, latency: float | None = None
                           ) -> None:
        task_id = self.taken.pop(crawl.cid)
        await self._send(task_id, CrawlResult.of(
            crawl, self.clock.now(), NOT_MODIFIED, moved=self._moves.pop(crawl.cid, ""),
            etag=etag or "",
            last_modified=last_modified or "", hints=hints.encode() if hints else "",
            latency=latency))
        self.stats.inc("fetched")
        self.stats.inc("not_modified")

    async def crawl_failed(self, crawl: Crawl, kind: str, cause: str,
                           retry_after: float | None = None) -> float:
        """Sent to the planner, whose service backs the source off (0 here: not known)."""
        task_id = self.taken.pop(crawl.cid)
        self._moves.pop(crawl.cid, None)
        await self._send(task_id, CrawlResult.of(crawl, self.clock.now(), kind,
                                                 cause=cause[:500],
                                                 retry_after=float(retry_after or 0.0)))
        self.stats.inc(f"errors/{kind}")
        self._log_once(crawl.source, kind, crawl.url, cause)
        return 0.0

    def moved(self, crawl: Crawl, url: str) -> Crawl:
        """The fetch of ``crawl`` was redirected permanently (301, 308) to ``url``: told to the
        planner with the fetch's outcome, whose service moves the source there (its old URL
        kept as an alias) or merges it into the source already at ``url``
        (:meth:`RecrawlService.moved`). Returns the crawl as at ``url``."""
        if url == crawl.url:
            return crawl
        self._moves[crawl.cid] = url
        return crawl._replace(url=url)

    def feed_warnings(self, crawl: Crawl, warnings: list[str]) -> None:
        report_warnings(self.stats, self._log_once, crawl, warnings)

    async def _send(self, task_id: str, result: CrawlResult) -> bool:
        """Send a result (False: dropped, Redis stayed unreachable ``wait`` seconds)."""
        k = self.keys
        message = result_fields(result)

        async def send():
            pipe = self.redis.pipeline(transaction=True)
            pipe.xadd(k.results, message)
            pipe.xack(k.tasks, "workers", task_id)
            pipe.xdel(k.tasks, task_id)
            return await pipe.execute()

        try:
            await self.retry(send, "sending a result", within=self.wait)
        except RedisUnavailable as exc:
            self._dropped(result, exc)
            return False
        return True

    def _dropped(self, crawl, exc: RedisUnavailable) -> None:
        """A report given up (``crawl``: a Crawl or a CrawlResult): its task stays pending in
        the stream, and the planner hands it out again when its lease ends."""
        self.stats.inc("cluster/reports_dropped")
        level = logging.DEBUG if self._dropped_logged else logging.WARNING
        self._dropped_logged = True
        logger.log(level, "cluster node %s: the fetch of source %d not reported, Redis did "
                   "not answer within %g s (WHITTLE_REDIS_WAIT: %s); it is crawled again "
                   "after its lease", self.consumer, crawl.source, self.wait, exc)

    # -- messages to the planner ---------------------------------------------------------------
    async def tell_planner(self, message: dict) -> None:
        try:
            await self.retry(lambda: self.redis.rpush(self.keys.inbox, json.dumps(message)),
                             "writing to the planner")
        except RedisUnavailable as exc:           # the crawl closed during an outage
            logger.info("cluster node %s: a %s message to the planner lost at close (%s)",
                        self.consumer, message.get("type"), exc)

    def _post(self, message: dict) -> None:
        task = asyncio.ensure_future(self.tell_planner(message))
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    def add_source(self, spec: SourceSpec) -> None:
        """Told to the planner: the source's id is not known here yet."""
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
