"""One process of a cluster crawl: a worker, and the planner while it holds the lock.

As a worker it reads crawls from the stream ``Keys.tasks`` (consumer group ``workers``) into
a small local queue the scheduler hands to Scrapy's downloader, and it is what the feed
middleware reports to: a :class:`~scrapy_whittle.service.sink.CrawlSink`, as the re-crawl
service's :class:`~scrapy_whittle.service.sink.LocalSink` is. The entries of a fetched feed
are told new or old by the shared entry memory (:mod:`scrapy_whittle.cluster.entries`) and
judged by the service's own code (:func:`~scrapy_whittle.service.decisions.outcomes.judge_fetch`);
what the fetch showed goes to ``Keys.results`` (:class:`~scrapy_whittle.cluster.tasks.CrawlResult`)
in one atomic step with the acknowledgement of the task (a script for a fetched feed, after the one
that told its entries; a transaction for a 304 or a failure). Every Redis call goes through a
:class:`~scrapy_whittle.cluster.retry.Retrier`: an outage pauses the crawl, it does
not end it.

During an outage the node hands the downloader no crawl (its report could not be made), and a
fetch already made waits for Redis at most ``WHITTLE_REDIS_WAIT`` seconds to report, then is
dropped: its task stays pending in the stream, and the planner hands it out again once its
lease ends. So nothing on the downloader's path waits on Redis for ever, and a crawl closing
during an outage (``CLOSESPIDER_*``, SIGTERM: Scrapy's close waits for the downloads in
progress) ends. At close, the last words to Redis (tasks given back, the planner's last
checkpoint) are tried once each when Redis is gone.

At-least-once items: the script that tells a fetch's entries new also stores them as a
pending batch in Redis, under the source's tag (:mod:`scrapy_whittle.cluster.entries`), whose
id goes with the response (``FetchResult.batch``) to ``DeliveryMiddleware``;
:meth:`ClusterNode.delivered` deletes it once its items passed the pipelines. Until then the
node renews the batches it holds every third of the lease (``WHITTLE_REDIS_LEASE``'s value); a
batch not renewed for a lease (its worker killed, or a script's reply lost with the
connection) is reclaimed by a
live node and replayed by its scheduler (:meth:`take_replay`). At a graceful stop the
batches still held are released at once to the others.

A fetched sitemap index's listing goes to the planner with the fetch's result
(``feed_fetched(..., listing=)``), and a source the spider registers (``add_source``) on the
results stream after it, so the planner's checkpoint acknowledges both with what it learnt.

WebSub (:mod:`scrapy_whittle.cluster.websub`): the hub a fetched feed names goes to the
planner with the fetch's result; a delivery this process's callback took is reported by
:meth:`ClusterNode.pushed`, through the same script as a fetch.
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
from typing import NamedTuple

import redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout
from redis.retry import Retry as SyncRetry

from scrapy_whittle.cluster.article_room import ArticleRoom
from scrapy_whittle.cluster.connect import (
    async_client,
    key_prefix,
    public_url,
    sync_client,
)
from scrapy_whittle.cluster.counting import RoundTrips, count_round_trips
from scrapy_whittle.cluster.entries import (
    ENTRIES,
    FETCH_ENTRIES,
    PUSH_ENTRIES,
    REPORT,
    entry_args,
    packed_hashes,
    report_arg,
)
from scrapy_whittle.cluster.keys import BUCKET, Keys
from scrapy_whittle.cluster.pending_batches import PendingBatches
from scrapy_whittle.cluster.planner import ClusterHosts, Planner
from scrapy_whittle.cluster.retry import RedisUnavailable, Retrier
from scrapy_whittle.cluster.stories import StoryHashes, story_args
from scrapy_whittle.cluster.task_queue import TaskQueue
from scrapy_whittle.cluster.tasks import (
    FETCHED,
    NOT_MODIFIED,
    PUSH,
    CrawlResult,
    listing_fields,
    report_fields,
    result_fields,
    source_fields,
    value_fields,
)
from scrapy_whittle.cluster.websub import DELIVERY, HubsFound
from scrapy_whittle.cluster.writes import RUN as WRITES
from scrapy_whittle.cluster.writes import Writes
from scrapy_whittle.feeds.hints import ServerHints
from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.config import WhittleConfig, is_cluster
from scrapy_whittle.service.decisions.outcomes import count_fetch, judge_fetch, report_warnings
from scrapy_whittle.service.once_log import OnceLog
from scrapy_whittle.service.sink import CrawlSink
from scrapy_whittle.service.sources.index_children import Listing
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.deliveries import Batch
from scrapy_whittle.service.types import NO_LOAD, Crawl, FetchResult, HostLoad, valued

logger = logging.getLogger(__name__)


class PushSource(NamedTuple):
    """What a WebSub delivery's subscription in Redis says of its source (a task carries it
    for a fetch): its URL and weight."""

    url: str
    weight: float


UNKNOWN_PUSH_SOURCE = PushSource("", 1.0)


class ClusterNode(CrawlSink):
    """A :class:`~scrapy_whittle.service.sink.CrawlSink`; ``start`` / ``stop`` on the
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
        self.stopped = asyncio.Event()                    # set with ``stopping``
        self.finished = False
        #: the tasks taken, not started or not yet reported
        self.tasks = TaskQueue(self)
        self.on_tasks = None                              # callback: tasks arrived
        self.on_lead = None                               # callback: the planner took over
        self.retry = Retrier(f"cluster node {self.consumer}", stats,
                             stopping=lambda: self.stopping)
        self.planner = Planner(self, lock_ttl=lock_ttl, lease=lease, backlog=backlog,
                               hosts=ClusterHosts(host_concurrency, download_delay,
                                                  self.slot_delays), standby=standby)
        #: a Redis Cluster: scripts on many tags go out concurrently, not in a pipeline
        self.cluster = is_cluster(redis_url)
        self._entries = self.redis.register_script(ENTRIES)
        self._report = self.redis.register_script(REPORT)
        #: the stories across feeds (``WHITTLE_DEDUP = "link"``; None: entries per feed)
        self.stories = StoryHashes(config.dedup_drop_params) if config.dedup == "link" \
            else None
        self._writes = self.redis.register_script(WRITES)
        #: a WebSub delivery's subscription read, its receipt marked (cluster.websub)
        self.delivery_script = self.redis.register_script(DELIVERY)
        #: store each fetch's new entries as a pending batch until delivered (set when
        #: something reports deliveries: DeliveryMiddleware)
        self.journal_deliveries = False
        self.batches = PendingBatches(self)
        self._loops: list[asyncio.Task] = []
        self._posting: set[asyncio.Future] = set()
        self._log_once = OnceLog(logger)
        self._dropped_logged = False
        self._moves: dict[str, str] = {}                  # crawl id -> URL it moved to
        #: WebSub (``WHITTLE_WEBSUB_CALLBACK``; None: off): the hubs fetched feeds name, the
        #: URL and weight of each source a delivery came for (:mod:`scrapy_whittle.cluster.websub`)
        self.websub = HubsFound() if config.websub_callback else None
        self.push_sources: dict[int, PushSource] = {}
        #: the article requests the planner granted per host (``WHITTLE_ARTICLES``; None:
        #: off): :mod:`scrapy_whittle.cluster.article_room`
        self.articles = (ArticleRoom(self.redis, self.keys, self.retry,
                                     woken=lambda: self.on_tasks and self.on_tasks())
                         if config.articles.enabled else None)
        #: callback: sends the planner's requests to hubs (set by the WebSub extension)
        self.on_hub_requests = None

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        await self._ensure_groups()
        self._loops = [asyncio.ensure_future(self.tasks.read()),
                       asyncio.ensure_future(self._plan()),
                       asyncio.ensure_future(self.batches.keep())]

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
        self.stopped.set()
        for task in self._loops:
            try:
                await asyncio.wait_for(asyncio.shield(task), 3)
            except (TimeoutError, asyncio.CancelledError, Exception):
                task.cancel()
        for crawl in unstarted:
            self.tasks.requeue(crawl)
        if self._posting:                # deliveries and messages on their way
            await asyncio.wait(list(self._posting), timeout=min(self.wait, 5.0))
        # the last words: each call tried once more after a failure (the client's own
        # retries cover a connection gone stale), none waits for a Redis that is gone
        self.retry.patience = 0.0
        try:
            await asyncio.wait_for(self.tasks.give_back(), 10)
            await asyncio.wait_for(self.batches.release(), 10)
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

    async def write(self, writes: Writes) -> None:
        """Run ``writes`` (write commands on the crawl's keys) as one atomic step."""
        await writes.run(self._writes)

    async def _plan(self) -> None:
        block = 0.0
        while not self.stopping:
            try:
                wait = await self.planner.step(block)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("the planner failed a round; it tries again")
                block = 0.0
                await asyncio.sleep(1.0)
                continue
            # a leader with nothing due waits for the workers' results in its next read
            # (woken by the first); a follower sleeps until it tries the lock again
            block = wait if self.planner.leader else 0.0
            if wait and not block:
                await asyncio.sleep(wait)

    def crawl_state(self, finished, crawls, sources) -> None:
        """The crawl's state as Redis holds it (read with the tasks, once a second)."""
        self.finished = bool(finished)
        self.stats.set("cluster/crawls", int(crawls or 0))
        self.stats.set("cluster/sources", int(sources or 0))
        self.count_calls()

    def next_crawl(self, hosts: HostLoad = NO_LOAD) -> Crawl | None:
        """The next task for the downloader, or None. ``hosts`` is not asked: the planner
        keeps every host polite across the cluster."""
        if self.retry.down_since is not None:
            return None                 # Redis unreachable: its report could not be made
        crawl = self.tasks.start()
        if crawl is not None:
            self.stats.inc("crawls")    # this process's crawls (the planner's: planner/)
        return crawl

    def has_crawls(self) -> bool:
        return not self.finished or bool(self.tasks.queue) or bool(self.batches.replays)

    def take_replay(self) -> Batch | None:
        """A pending batch reclaimed from a worker that did not deliver it, for the scheduler
        to hand to the spider again (``replay_request``), or None. ``on_tasks`` is called
        when some arrive."""
        return self.batches.take_replay()

    def delivered(self, batch: int) -> None:
        """Every item made of ``batch``'s entries passed the pipelines (or was dropped on
        purpose): its pending batch is deleted (:meth:`PendingBatches.delivered`)."""
        self.batches.delivered(batch)

    def queued(self) -> int:
        return len(self.tasks.queue)

    def reports_pending(self) -> bool:
        # a cluster runs on the system clock: nothing jumps past a report
        return False

    # -- reporting fetches (the middleware's sink) -----------------------------------------------
    async def feed_fetched(self, crawl: Crawl, entries: list[FeedEntry], *,
                           etag: str | None = None, last_modified: str | None = None,
                           hints: ServerHints | None = None, latency: float | None = None,
                           listing: Listing | None = None) -> FetchResult:
        """``listing``: the feed is a sitemap index listing those children; it goes to the
        planner with the result, whose service retires the children it lists no more."""
        task_id = self.tasks.release(crawl)
        distinct, packed = packed_hashes(entries)
        maxn = self.config.max_entries_per_source
        shown = distinct[:maxn]
        values, _ = valued(shown, crawl.weight, self.config)
        journal = []
        if self.journal_deliveries:      # the new entries: a pending batch, in the script
            journal = entry_args(crawl.url, crawl.source, self.clock.now(), shown, values)
        hub, topic = self.websub.take(crawl.source) if self.websub is not None else ("", "")
        # the result goes in the same step: what the script fills in is judged there
        template = report_fields(CrawlResult.of(
            crawl, self.clock.now(), FETCHED, moved=self._moves.pop(crawl.cid, ""),
            etag=etag or "", last_modified=last_modified or "",
            hints=hints.encode() if hints else "", latency=latency, hub=hub, topic=topic,
            **listing_fields(listing)))
        report = report_arg(task_id, template, values, shown)
        keys, args = self.entry_call(crawl.source, packed, journal)
        try:
            had, shown_flags, batch, grown = await self.retry(
                lambda: self._entries(keys=keys, args=args), "telling new entries",
                within=self.wait)
            shown_flags = _text(shown_flags)
            keys, args = self.report_call(shown, shown_flags, int(grown), int(had), report)
            told, flags = await self.retry(lambda: self._report(keys=keys, args=args),
                                           "reporting a fetch", within=self.wait)
        except RedisUnavailable as exc:
            # (a batch stored meanwhile is not held: it is reclaimed after the lease)
            self._dropped(crawl, exc)
            return FetchResult([], [], False)
        if not int(told):
            # reported already (a reply lost, the retry finding the task acknowledged; a
            # task the planner took back): nothing emitted here, the batch left to be
            # reclaimed and replayed after the lease
            self.stats.inc("cluster/reported_already")
            return FetchResult([], [], False)
        flags = _text(flags)
        new = [e for e, flag in zip(distinct, flags, strict=False) if flag == "1"]
        repeats = flags.count("2")
        if repeats:                     # stories another feed (or entry) brought first
            self.stats.inc("dedup/repeats", repeats)
        found = judge_fetch(new, len(flags), int(had) > 0, crawl.weight, self.config,
                            self.stats, len(new) + repeats)
        count_fetch(self.stats, len(new), float(sum(found.values)), found.window_full)
        if int(batch):
            self.batches.held.add(int(batch))
            found = found._replace(batch=int(batch))
        return found

    async def pushed(self, source: int, entries: list[FeedEntry], *,
                     now: float | None = None) -> FetchResult:
        """A WebSub delivery of ``source`` (its URL and weight in ``push_sources``)
        received here at ``now``: its entries told new by the shared entry memory's scripts,
        as a fetch's, the new ones a pending batch, and its result (kind ``push``: no task,
        no budget) added to the results stream by the report's step
        (:mod:`scrapy_whittle.cluster.websub`)."""
        now = self.clock.now() if now is None else now
        distinct, packed = packed_hashes(entries)
        shown = distinct[:self.config.max_entries_per_source]
        known = self.push_sources.get(source, UNKNOWN_PUSH_SOURCE)
        values, _ = valued(shown, known.weight, self.config)
        journal = entry_args(known.url, source, now, shown, values) \
            if self.journal_deliveries else []
        report = report_arg("", report_fields(CrawlResult(source, "", 0, now, now, PUSH)),
                            values, shown)
        keys, args = self.entry_call(source, packed, journal, push=True)
        try:
            had, shown_flags, batch, grown = await self.retry(
                lambda: self._entries(keys=keys, args=args), "telling pushed entries",
                within=self.wait)
            keys, args = self.report_call(shown, _text(shown_flags), int(grown), int(had),
                                          report)
            _told, flags = await self.retry(lambda: self._report(keys=keys, args=args),
                                            "reporting a push", within=self.wait)
        except RedisUnavailable as exc:
            self.stats.inc("cluster/reports_dropped")
            logger.info("cluster node %s: a WebSub delivery of source %d not reported (%s); "
                        "its entries are found by a poll", self.consumer, source, exc)
            return FetchResult([], [], False)
        flags = _text(flags)
        new = [e for e, flag in zip(distinct, flags, strict=False) if flag == "1"]
        new_values = [v for v, flag in zip(values, flags, strict=False) if flag == "1"]
        repeats = flags.count("2")
        if repeats:
            self.stats.inc("dedup/repeats", repeats)
        self.stats.inc("push/deliveries")
        self.stats.inc("push/new_items", len(new))
        self.stats.inc("push/utility", float(sum(new_values)))
        if not new:
            self.stats.inc("push/empty")
        found = FetchResult(new, new_values, False)
        if int(batch):
            self.batches.held.add(int(batch))
            found = found._replace(batch=int(batch))
        return found

    def entry_call(self, source: int, packed: bytes, journal: list, *,
                   push: bool = False) -> tuple[list[str], list]:
        """The keys and arguments of :data:`~scrapy_whittle.cluster.entries.ENTRIES` for a
        fetch of ``source`` (``push``: a WebSub delivery, which forgets nothing) that showed
        the entries whose hashes are ``packed`` (``journal``: ``entry_args``'s or nothing)."""
        k, t = self.keys, Keys.tag_of(source)
        return ([k.entries(source), k.pending(t), k.pending_since(t), k.pending_next(t)],
                [source % BUCKET, self.config.max_entries_per_source, 4, packed, t,
                 PUSH_ENTRIES if push else FETCH_ENTRIES, *journal])

    def report_call(self, shown: list[FeedEntry], flags: str, grown: int, had: int,
                    report: str = "") -> tuple[list[str], list]:
        """The keys and arguments of :data:`~scrapy_whittle.cluster.entries.REPORT` for a
        fetch that showed ``shown`` (``flags``, ``grown``, ``had``: what
        :data:`~scrapy_whittle.cluster.entries.ENTRIES` said; ``report``: ``report_arg``'s
        or nothing)."""
        k = self.keys
        shards, spec = [], b""
        if self.stories is not None and "1" in flags:
            shards, spec = story_args(shown, self.stories, k.stories)
        streams = [k.results, k.tasks] if report else []
        return [k.entry_capacity, *shards, *streams], [flags, spec, report, grown, had]

    async def not_modified(self, crawl: Crawl, *, etag: str | None = None,
                           last_modified: str | None = None,
                           hints: ServerHints | None = None, latency: float | None = None
                           ) -> None:
        task_id = self.tasks.release(crawl)
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
        task_id = self.tasks.release(crawl)
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
            await self.write(Writes().xadd(k.results, message)
                             .add("XACK", k.tasks, "workers", task_id)
                             .add("XDEL", k.tasks, task_id))

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
    def _tell(self, write, what: str, subject: str) -> None:
        """``write()`` (a Redis call) in the background, retried through an outage; given up
        with a line in the log only when the crawl closes during one."""
        async def tell() -> None:
            try:
                await self.retry(write, what)
            except RedisUnavailable as exc:           # the crawl closed during an outage
                logger.info("cluster node %s: %s %s lost at close (%s)", self.consumer, what,
                            subject, exc)

        self.in_background(tell())

    def in_background(self, work) -> None:
        """Run the coroutine ``work`` as a task that a stop waits for a moment."""
        task = asyncio.ensure_future(work)
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    def add_source(self, spec: SourceSpec) -> None:
        """Told to the planner on the results stream (:func:`~scrapy_whittle.cluster.tasks.
        source_fields`: kept until the planner's checkpoint holds it, and after the result
        of the fetch that named it, a sitemap index's); the source's id is not known here
        yet."""
        fields = source_fields(spec.url)
        self._tell(lambda: self.redis.xadd(self.keys.results, fields),
                   "registering a source", spec.url)

    def admit_article(self, host: str) -> bool:
        """Whether an article request to ``host`` may go now: within the requests the
        planner granted for the host (:mod:`scrapy_whittle.cluster.article_room`)."""
        return self.articles is None or self.articles.admit(host)

    def article_seen(self, source: int, canonical: str | None, fingerprint: int | None,
                     value: float | None) -> str | None:
        """Articles are not judged across the cluster: their stories are the feeds'."""
        return None

    def set_crawl_delay(self, host: str, delay: float) -> bool:
        """Kept in Redis (``Keys.crawl_delays``, which a planner taking over reads whole) and
        told to the planner through its inbox, in one transaction: a planner killed after it
        popped the message, or after its next checkpoint (which holds no crawl delay),
        leaves the delay to the next."""
        message = json.dumps({"type": "crawl_delay", "host": host, "delay": delay})

        def both():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hset(self.keys.crawl_delays, host, repr(float(delay)))
            pipe.rpush(self.keys.inbox, message)
            return pipe.execute()

        self._tell(both, "telling the crawl delay of", host)
        return True

    def report_value(self, source, value, *, published, at=None, base_value=None) -> bool:
        """Feedback from a pipeline, passed to the planner on the results stream
        (:func:`~scrapy_whittle.cluster.tasks.value_fields`: kept until the planner's
        checkpoint holds what it taught; True: sent, not yet judged)."""
        fields = value_fields(source, value, published,
                              self.clock.now() if at is None else at, base_value)
        self._tell(lambda: self.redis.xadd(self.keys.results, fields),
                   "feeding back the value of an entry of", str(source))
        return True


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

