"""The cluster's planner: the one process (elected) that decides what the cluster crawls.

It holds the Redis lock ``Keys.planner`` (a random token with a time-to-live, renewed every
third of it; a planner that cannot renew stops planning at once) and runs the re-crawl
service: each epoch's selection, the budget, the politeness of every host (its crawls in
flight across the cluster, its delay), and the learning from the workers' results.

* **Dispatch.** A crawl the service hands out becomes a task on the stream ``Keys.tasks``, in
  one transaction with its in-flight record (``Keys.in_flight``: deadline and crawl id) and
  the epoch's spent budget (``Keys.spent``). At most ``backlog`` crawls are in flight.
* **Results.** Workers add what each fetch showed to ``Keys.results``; the planner learns
  them and acknowledges them, and ends their in-flight records, in the transaction of the
  next checkpoint, so a new planner learns again what the last one had not checkpointed
  (a worker's report of a moved or dead feed included). A result whose crawl id is not the
  source's current one (a crawl taken back from a slow worker) is counted and dropped. The
  sources the workers' spiders register and the entries' values their item pipelines feed
  back ride the same stream, acknowledged the same way; a value a checkpoint cut short wrote
  into its source's tag is recorded there as a result is, and not learnt twice. A
  robots.txt ``Crawl-delay`` comes through the inbox, and is kept in ``Keys.crawl_delays``
  by the worker that read it: a planner taking over reads them whole.
* **Leases.** A task a worker has held longer than ``lease`` seconds without an answer (the
  worker died) is taken back with XAUTOCLAIM and handed out again.
* **Take-over.** A new planner restores the last checkpoint (``RedisStateStore``), the
  crawls in flight, the epoch's spent budget and the pending results. A process with a
  standby (``WHITTLE_REDIS_STANDBY``: :mod:`scrapy_whittle.cluster.standby`) keeps the
  checkpointed state warm while it waits for the lock, following each checkpoint, and tries
  the lock as it expires: taking over, it only reads the last checkpoints' changes.
* **Sitemap indexes.** A fetched index's result carries its listing (its children's URLs,
  whether it was read whole): the service retires the children it lists no more as one
  process does (:mod:`scrapy_whittle.service.sources.index_children`; a 304 repeats the previous
  listing), their rows checkpointed with the rest (``Keys.children``).
* **WebSub** (:mod:`scrapy_whittle.cluster.websub`): the planner owns the subscriptions,
  learns the hubs from the results, writes the subscriptions to Redis as they change and
  hands the requests due to its process's engine; a push's result (kind ``push``) is
  learnt at no budget, and no crawl was in flight for it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections import defaultdict

from scrapy_whittle.cluster.article_room import grant
from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.learning import Learning
from scrapy_whittle.cluster.standby import Standby
from scrapy_whittle.cluster.state import RedisStateStore
from scrapy_whittle.cluster.tasks import task_fields
from scrapy_whittle.cluster.websub import PlannerWebSub
from scrapy_whittle.cluster.writes import Writes
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.types import Crawl, PrefixedStats

logger = logging.getLogger(__name__)

#: seconds an idle planner's read waits at most for a result (an inbox message waits as
#: long; a stop too)
IDLE_READ = 0.5

RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class ClusterHosts:
    """``HostLoad`` across the cluster: a host is saturated while it has ``concurrency``
    crawls in flight, or less than its delay has passed since its last dispatch."""

    def __init__(self, concurrency: int, delay: float, delays: dict[str, float]) -> None:
        self.concurrency = max(1, int(concurrency))
        self.delay = float(delay)
        self.delays = dict(delays)
        self.in_flight: dict[str, int] = defaultdict(int)
        self.next_allowed: dict[str, float] = {}
        self.now = time.time

    def dispatched(self, host: str, now: float) -> None:
        self.in_flight[host] += 1
        self.next_allowed[host] = now + max(self.delay, self.delays.get(host, 0.0))

    def done(self, host: str) -> None:
        if self.in_flight.get(host, 0) > 0:
            self.in_flight[host] -= 1

    def saturated(self, host: str) -> bool:
        return (self.in_flight.get(host, 0) >= self.concurrency
                or self.next_allowed.get(host, 0.0) > self.now())

    def all_saturated(self) -> list[str]:
        now = self.now()
        return [h for h in set(self.in_flight) | set(self.next_allowed)
                if self.in_flight.get(h, 0) >= self.concurrency
                or self.next_allowed.get(h, 0.0) > now]


class Planner:
    def __init__(self, node, *, lock_ttl: float, lease: float, backlog: int,
                 hosts: ClusterHosts, standby: bool = False) -> None:
        self.node = node
        self.keys: Keys = node.keys
        self.lock_ttl = lock_ttl
        self.lease = lease
        self.backlog = backlog
        self.hosts = hosts
        self.token = secrets.token_hex(8)
        self.consumer = f"planner-{self.token}"
        self.service: RecrawlService | None = None
        #: the WebSub subscriptions' owner while leading (None: WebSub off, or not leading)
        self.websub: PlannerWebSub | None = None
        self.in_flight: dict[int, str] = {}       # source id -> crawl id
        self.deadline: dict[int, float] = {}
        #: the results, values and messages learnt since the checkpoint
        self.learning = Learning(self)
        self._seq = 0
        self._renewed = 0.0
        self._reclaimed = 0.0
        self._writing: asyncio.Future | None = None
        self._selecting: asyncio.Future | None = None   # an epoch's selection, in a thread
        self._sources_told = -1          # the source count last written to Keys.totals
        self.retry = node.retry          # one outage, logged once per process
        #: the warm state kept while another process plans (None: no standby here)
        self.standby = Standby(node.sync_redis, self.keys, self._new_service,
                               label=node.redis_label, stats=node.stats) if standby else None
        self._standing: asyncio.Future | None = None    # its restore or follow, in a thread
        self._standby_failing = False
        self._granted_epoch: int | None = None    # the epoch of the last article grants

    @property
    def leader(self) -> bool:
        return self.service is not None

    # -- leadership ---------------------------------------------------------------------------
    async def step(self, block: float = 0.0) -> float:
        """One round; returns how long to sleep before the next, or, leading, how long
        nothing is due: the next round's ``block``, how long its read of the results may
        wait for one (the first result ends the wait)."""
        r = self.node.redis
        if not self.leader:
            if self.standby is not None:
                self._keep_standby()
                # the lock tried as it expires, not up to a third of its life after
                def elect():
                    pipe = r.pipeline(transaction=False)
                    pipe.set(self.keys.planner, self.token, nx=True,
                             px=int(self.lock_ttl * 1000))
                    pipe.pttl(self.keys.planner)
                    return pipe.execute()

                got, left = await self.retry(elect, "electing")
                wait = min(self.lock_ttl / 3, max(left, 0) / 1000 + 0.01)
            else:
                got = await self.retry(lambda: r.set(self.keys.planner, self.token, nx=True,
                                                     px=int(self.lock_ttl * 1000)),
                                       "electing")
                wait = self.lock_ttl / 3
            if not got:
                return wait
            await self._holding_lock(self._take_over())
        now = time.monotonic()
        if now - self._renewed > self.lock_ttl / 3:
            kept = await self.retry(lambda: r.eval(RENEW, 1, self.keys.planner, self.token,
                                                   int(self.lock_ttl * 1000)), "renewing")
            if not kept:
                logger.warning("planner %s lost its lock: it stops planning", self.token)
                self._step_down()
                self.node.stats.inc("cluster/planner_lost")
                return 0.0
            self._renewed = now
        await self.learning.read_messages(block)
        await self._tell_sources()
        await self._dispatch()
        if self.service.config.articles.enabled:
            await self._grant_articles()
        if self.websub is not None:
            await self.websub.step(self.service.clock.now())
        if now - self._reclaimed > self._reclaim_every():
            await self._reclaim()
            self._reclaimed = now
        if self.service.checkpoint_due():
            await self.checkpoint()
        if self.service.finished:
            await self.retry(lambda: r.hset(self.keys.meta, "finished", 1), "finishing")
        # busy or not, the next read may wait: results there end it at once, and what
        # else can be done now (an epoch, a host free again) is due in ``_idle``
        return self._idle()

    def _reclaim_every(self) -> float:
        return min(self.lease / 4, 5.0)

    def _idle(self) -> float:
        """Seconds until something is due (an epoch, a host's next crawl, the lock's renewal,
        the leases' check, a checkpoint), at most ``IDLE_READ``. With the backlog full no
        crawl is due before a result comes back."""
        now = time.monotonic()
        wait = min(IDLE_READ, self.node.config.checkpoint_interval,
                   self._renewed + self.lock_ttl / 3 - now,
                   self._reclaimed + self._reclaim_every() - now)
        if len(self.in_flight) < self.backlog:
            wait = min(wait, self.service.wake_at - self.service.clock.now())
        return max(wait, 0.0)

    async def _holding_lock(self, work):
        """Await ``work`` (a take-over, an epoch's selection: at millions of sources they
        outlast the lock's time-to-live) while the lock is renewed every third of it; a
        renewal refused ends the renewing, and the next round finds the lock lost. Returns
        what ``work`` returns."""
        r = self.node.redis

        async def renew() -> None:
            while True:
                await asyncio.sleep(self.lock_ttl / 3)
                kept = await self.retry(lambda: r.eval(RENEW, 1, self.keys.planner,
                                                       self.token,
                                                       int(self.lock_ttl * 1000)),
                                        "renewing")
                if not kept:
                    return
                self._renewed = time.monotonic()

        renewing = asyncio.ensure_future(renew())
        try:
            return await work
        finally:
            renewing.cancel()

    def _step_down(self) -> None:
        """Forget what leading kept here: the crawls in flight (and their hosts' load), the
        results learnt and not checkpointed. Whoever leads next, this process again too,
        restores them from Redis; kept, they would count twice once restored."""
        for sid in list(self.in_flight):
            self.forget(sid)
        self.deadline.clear()
        self.learning.clear()
        self.service = None
        self.websub = None

    def _new_service(self, store: RedisStateStore) -> RecrawlService:
        node = self.node
        return RecrawlService(node.config, clock=node.clock, store=store,
                              oracle=node.oracle, slot_delays=node.slot_delays,
                              download_delay=node.download_delay, max_flight=self.lease * 3,
                              stats=PrefixedStats(node.stats, "planner/"))

    def _keep_standby(self) -> None:
        """The standby's restore, then its following of the checkpoints, in a thread of its
        own (a daemon: a restore of millions of sources does not hold a closing process)."""
        standing = self._standing
        if standing is not None and not standing.done():
            return
        failed = standing is not None and not standing.cancelled() \
            and standing.exception() is not None
        if failed:
            self.standby.service = None
            self.node.stats.inc("cluster/standby/failures")
            if not self._standby_failing:       # once a run of failures (an outage)
                logger.warning("planner %s: the standby could not follow the checkpoints "
                               "(%s): it restores them again", self.token,
                               standing.exception())
        self._standby_failing = failed
        self._standing = _in_thread(self.standby.follow)

    async def _service_taken_over(self) -> RecrawlService:
        """The standby's service if it holds one (level with the last checkpoint), else a
        service restored from Redis."""
        node = self.node
        if self.standby is not None and self._standing is not None:
            await asyncio.wait([self._standing])        # a restore or follow under way
            if not self._standing.cancelled() and self._standing.exception() is not None:
                self.standby.service = None             # (logged by the restore below)
            if self.standby.ready:
                try:
                    service = await _in_thread(self.standby.take, node.specs)
                    node.stats.inc("cluster/standby/takeovers")
                    return service
                except Exception as exc:
                    logger.warning("planner %s: the standby's state could not be taken "
                                   "over (%s): restored from Redis", self.token, exc)
                    self.standby.service = None
        store = RedisStateStore(node.sync_redis, self.keys, label=node.redis_label)
        service = self._new_service(store)
        await asyncio.to_thread(service.open, node.specs)
        return service

    async def _take_over(self) -> None:
        node, r, k = self.node, self.node.redis, self.keys
        service = await self._service_taken_over()
        store = service.store
        flights = await self.retry(lambda: r.hgetall(k.in_flight), "restoring")
        for sid_raw, value in flights.items():
            sid = int(sid_raw)
            deadline, cid = value.decode().split(" ", 1)
            if (sid, cid) in store.applied:
                # learnt by a checkpoint cut short (its source's record has it): the crawl
                # is over, its record ends with the next checkpoint
                self.learning.learnt.append((sid, cid))
            elif sid < len(service.sources):
                self.in_flight[sid] = cid
                self.deadline[sid] = float(deadline)
                service.sources.dispatched(sid, float(deadline))
                self.hosts.in_flight[self._host(service, sid)] += 1
        spent = await self.retry(lambda: r.hgetall(k.spent), "restoring")
        service.planner.resume_spent({int(e): float(c) for e, c in spent.items()})
        # the robots.txt delays the workers found (no checkpoint holds them; a message in
        # the inbox a dead planner popped is among them)
        delays = await self.retry(lambda: r.hgetall(k.crawl_delays), "restoring")
        for host, delay in delays.items():
            self.learning.crawl_delay(service, host.decode("utf-8", "replace"), delay)
        self.service = service
        if service.websub is not None:
            self.websub = PlannerWebSub(service.websub, lambda sid: (
                service.url(sid), service.sources.weight.item(sid)), node)
        await self.learning.claim_results()
        await self.checkpoint()
        logger.info("planner %s took over: %d sources, %d crawls in flight", self.token,
                    len(service.sources), len(self.in_flight))
        node.stats.inc("cluster/takeovers")
        if node.on_lead is not None:
            node.on_lead()

    async def _tell_sources(self) -> None:
        """The cluster's source count, for every process's progress line."""
        sources = self.service.sources
        n = len(sources) - sources.n_left
        if n != self._sources_told:
            await self.retry(lambda: self.node.redis.hset(self.keys.totals, "sources", n),
                             "counting the sources")
            self._sources_told = n

    @staticmethod
    def _host(service: RecrawlService, sid: int) -> str:
        return service.sources.host_names[int(service.sources.host[sid])]

    # -- handing out crawls -------------------------------------------------------------------
    async def _dispatch(self) -> int:
        room, service = self.backlog - len(self.in_flight), self.service
        if room > 0 and service.timeline.epoch_of(service.clock.now()) != service.epoch:
            # an epoch's selection takes seconds at millions of sources: in a thread (the
            # loop keeps nothing else of the service's), the lock renewed meanwhile
            self._selecting = asyncio.ensure_future(asyncio.to_thread(self._hand_out, room))
            tasks = await self._holding_lock(asyncio.shield(self._selecting))
        else:
            tasks = self._hand_out(room)
        if not tasks:
            return 0
        await self.retry(lambda: self._send_tasks(tasks), "dispatching")
        return len(tasks)

    def _hand_out(self, room: int) -> list[tuple[Crawl, float]]:
        """Up to ``room`` crawls from the service, in one pass over its plan (each host's
        load counted as its crawls are chosen); (crawl with its id, deadline) each."""
        service = self.service
        if room <= 0:
            return []
        names, host_of = service.sources.host_names, service.sources.host

        def taken(crawl: Crawl) -> None:
            self.hosts.dispatched(names[host_of.item(crawl.source)], self.hosts.now())

        tasks = []
        weight = service.sources.weight
        for crawl in service.planner.next_crawls(self.hosts, room, taken):
            self._seq += 1
            cid = f"{self.token}:{self._seq}"
            deadline = crawl.sent_at + self.lease * 3
            self.in_flight[crawl.source] = cid
            self.deadline[crawl.source] = deadline
            tasks.append((crawl._replace(cid=cid, weight=weight.item(crawl.source)), deadline))
        return tasks

    async def _send_tasks(self, tasks: list[tuple[Crawl, float]]) -> None:
        """The tasks, their in-flight records and the budget they spend: one atomic step
        (:mod:`~scrapy_whittle.cluster.writes`), a command per task and three for the
        batch."""
        k, cost = self.keys, self.service.sources.cost
        spent: dict[int, float] = defaultdict(float)
        writes = Writes()
        for crawl, _deadline in tasks:
            writes.xadd(k.tasks, task_fields(crawl))
            spent[crawl.epoch] += cost.item(crawl.source)
        writes.hset(k.in_flight, {crawl.source: f"{deadline} {crawl.cid}"
                                  for crawl, deadline in tasks})
        for epoch, total in spent.items():
            writes.add("HINCRBYFLOAT", k.spent, epoch, total)
        writes.add("HINCRBY", k.totals, "crawls", len(tasks))
        await self.node.write(writes)

    async def _grant_articles(self) -> None:
        """The article requests each host with an allowance may take now, granted to the
        workers (:mod:`scrapy_whittle.cluster.article_room`); a new epoch's afresh."""
        service = self.service
        fresh = service.epoch != self._granted_epoch
        room = service.throttle.article_room()
        if fresh or any(room.values()):
            def write():
                pipe = self.node.redis.pipeline(transaction=True)
                grant(pipe, self.keys, room, fresh)
                return pipe.execute()

            await self.retry(write, "granting article requests")
        self._granted_epoch = service.epoch

    async def _reclaim(self) -> int:
        """Take back the tasks workers hold past the lease, hand them out again; forget the
        crawls whose deadline passed without a trace."""
        r, k = self.node.redis, self.keys
        claimed = await self.retry(
            lambda: r.xautoclaim(k.tasks, "workers", self.consumer,
                                 min_idle_time=int(self.lease * 1000), start_id="0-0",
                                 count=500), "reclaiming")
        entries = claimed[1] if claimed else []
        again = []
        for entry_id, fields in entries:
            if not fields:
                continue
            sid = int(fields[b"sid"])
            if self.in_flight.get(sid) == fields[b"cid"].decode():
                again.append((entry_id, fields))
            else:
                again.append((entry_id, None))
        if again:
            async def resend():
                writes = Writes()
                for entry_id, fields in again:
                    if fields is not None:
                        writes.xadd(k.tasks, {key.decode(): v for key, v in fields.items()})
                    writes.add("XACK", k.tasks, "workers", entry_id)
                    writes.add("XDEL", k.tasks, entry_id)
                await self.node.write(writes)

            await self.retry(resend, "handing out again")
            self.node.stats.inc("cluster/reclaimed", sum(f is not None for _, f in again))
        now = self.service.clock.now()
        lost = [sid for sid, d in self.deadline.items() if d < now]
        for sid in lost:
            self.forget(sid)
        if lost:
            self.node.stats.inc("cluster/lost_crawls", len(lost))
            await self.retry(lambda: r.hdel(k.in_flight, *lost), "forgetting")
        return len(again)

    def forget(self, sid: int) -> None:
        """The crawl of ``sid`` in flight no more (its result learnt, or its deadline past)."""
        if self.in_flight.pop(sid, None) is not None:
            self.hosts.done(self._host(self.service, sid))
        self.deadline.pop(sid, None)

    # -- checkpoints ----------------------------------------------------------------------------
    async def checkpoint(self) -> None:
        """Write what changed and acknowledge the results it learnt from (in a thread)."""
        if self._writing is not None:
            await self._writing
        cp = self.service.prepare_checkpoint()
        acks, learnt, valued = self.learning.taken()
        # (a source handed out again since keeps its new record)
        done = [sid for sid in dict.fromkeys(sid for sid, _ in learnt)
                if sid not in self.in_flight]
        learnt += valued
        store = self.service.store
        epoch = self.service.timeline.epoch_of(self.service.clock.now())

        def write():
            store.write(cp, acks=acks, done=done, learnt=learnt)
            old = [e for e in self.node.sync_redis.hkeys(self.keys.spent)
                   if int(e) < epoch - 1]
            if old:
                self.node.sync_redis.hdel(self.keys.spent, *old)

        self._writing = asyncio.ensure_future(
            self.retry(lambda: asyncio.to_thread(write), "checkpointing"))
        try:
            await self._writing
        finally:
            self._writing = None

    async def resign(self) -> None:
        """Last checkpoint, then give the lock up (a graceful close)."""
        if not self.leader:
            return
        if self._selecting is not None:      # the service is not touched while it runs
            await asyncio.wait([self._selecting])
        if self.websub is not None:
            await self.websub.sync()
        await self.checkpoint()
        await self.retry(lambda: self.node.redis.eval(RELEASE, 1, self.keys.planner,
                                                      self.token), "resigning")
        used = self.service.budget_used()
        if used is not None:
            self.service.stats.set("budget_used", used)
        self.service = None
        self.websub = None


def _in_thread(fn, *args) -> asyncio.Future:
    """``fn(*args)`` in a daemon thread; its result (or exception) as a future of the
    running loop."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result, exc) -> None:
        if not future.done():
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)

    def run() -> None:
        try:
            result, exc = fn(*args), None
        except BaseException as e:
            result, exc = None, e
        try:
            loop.call_soon_threadsafe(settle, result, exc)
        except RuntimeError:            # the loop closed meanwhile: nobody awaits it
            pass

    threading.Thread(target=run, daemon=True, name="whittle-standby").start()
    return future
