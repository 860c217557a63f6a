"""The crawls a cluster node took from the stream ``Keys.tasks`` (consumer group
``workers``): those not started yet, queued for the downloader, and those started and not
yet reported, by crawl id.

A :class:`TaskQueue` reads tasks while there is room for them (twice the node's capacity,
started or not; a report makes room), with the crawl's state (finished, the cluster's
crawls and sources, the hosts with article grants) once a second in the same round trip,
and at a stop gives the tasks it never started back to the stream for the other workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from scrapy_whittle.cluster.tasks import task_crawl, task_fields
from scrapy_whittle.cluster.writes import Writes
from scrapy_whittle.service.types import Crawl

logger = logging.getLogger(__name__)

#: milliseconds a worker's read of the tasks waits for one when there is none (a stop waits
#: as long)
TASK_WAIT = 500


class TaskQueue:
    """The tasks of ``node`` (a :class:`~scrapy_whittle.cluster.node.ClusterNode`: its Redis
    client, keys, retrier, capacity and callbacks)."""

    def __init__(self, node) -> None:
        self.node = node
        self.queue: deque[tuple[Crawl, str]] = deque()     # (crawl, task id) not started
        #: crawl id -> the task ids started for it (two when a task whose lease ran out was
        #: handed out again to this process while its first download was still running)
        self.taken: dict[str, list[str]] = {}
        self._room = asyncio.Event()                      # set when a task is reported

    async def read(self) -> None:
        """Take tasks while there is room, until the node stops."""
        node = self.node
        checked = 0.0
        while not node.stopping:
            free = node.capacity * 2 - len(self.queue) - len(self.taken)
            if free <= 0:                # woken by a report (or a stop, within a moment)
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), 0.5)
                continue
            loop_time = asyncio.get_running_loop().time()
            state = loop_time - checked > 1.0        # the crawl's state too, once a second
            if state:
                checked = loop_time
            try:
                got, state = await node.retry(lambda free=free, state=state: self.take(
                    free, state), "taking tasks")
            except asyncio.CancelledError:
                raise
            except Exception:           # the loop must outlive a client's odd error
                logger.exception("cluster node %s: taking tasks failed; it tries again",
                                 node.consumer)
                await asyncio.sleep(1.0)
                continue
            for task_id, f in (got[0][1] if got else ()):
                self.queue.append((task_crawl(f), task_id.decode()))
            if got and node.on_tasks is not None:
                node.on_tasks()
            if state is not None:
                node.crawl_state(*state)

    async def take(self, count: int, state: bool) -> tuple[list, list | None]:
        """(Up to ``count`` tasks, waiting a moment for some; with ``state``: the crawl's
        state (finished, the cluster's crawls, its sources), read in the same round trip.)"""
        node, k = self.node, self.node.keys
        if not state:
            got = await node.redis.xreadgroup("workers", node.consumer, {k.tasks: ">"},
                                              count=count, block=TASK_WAIT)
            return got, None
        pipe = node.redis.pipeline(transaction=False)
        pipe.hget(k.meta, "finished")
        pipe.hmget(k.totals, "crawls", "sources")
        if node.articles is not None:
            pipe.hkeys(k.article_room)
        pipe.xreadgroup("workers", node.consumer, {k.tasks: ">"}, count=count,
                        block=TASK_WAIT)
        finished, (crawls, sources), *room, got = await pipe.execute()
        if room:
            node.articles.read(room[0])
        return got, [finished, crawls, sources]

    def start(self) -> Crawl | None:
        """The next task not started, now started, or None."""
        if not self.queue:
            return None
        crawl, task_id = self.queue.popleft()
        self.taken.setdefault(crawl.cid, []).append(task_id)
        return crawl

    def release(self, crawl: Crawl) -> str:
        """The task id of ``crawl``, reported: its place is free for another task."""
        self._room.set()
        ids = self.taken[crawl.cid]
        task_id = ids.pop(0)
        if not ids:
            del self.taken[crawl.cid]
        return task_id

    def requeue(self, crawl: Crawl) -> None:
        """``crawl`` was taken but will not be downloaded: back to the queue given back."""
        ids = self.taken.get(crawl.cid)
        if ids:
            self.queue.append((crawl, ids.pop()))
            if not ids:
                del self.taken[crawl.cid]

    async def give_back(self) -> None:
        """Tasks taken but not started go back to the stream for the other workers."""
        if not self.queue:
            return
        writes, tasks = Writes(), self.node.keys.tasks
        for crawl, task_id in self.queue:
            writes.xadd(tasks, task_fields(crawl))
            writes.add("XACK", tasks, "workers", task_id).add("XDEL", tasks, task_id)
        self.queue.clear()
        await self.node.write(writes)
