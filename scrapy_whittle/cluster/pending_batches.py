"""The pending batches a cluster node holds: the new entries of its fetches stored in Redis
until their items passed the pipelines (:mod:`scrapy_whittle.cluster.entries`).

A :class:`PendingBatches` renews the batches its node holds every third of the lease
(``WHITTLE_REDIS_LEASE``'s value), reclaims those another node left unrenewed for a lease
(its worker killed, or a script's reply lost with the connection) for its scheduler to
replay (:meth:`take_replay`), deletes a batch once delivered (:meth:`delivered`, gathered
with the others delivered within :data:`DELIVERY_GATHER` seconds: one round trip for them
all), and at a graceful stop releases those still held to the others at once
(:meth:`release`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

import redis

from scrapy_whittle.cluster.entries import RECLAIM, RENEW
from scrapy_whittle.cluster.keys import SPREAD, batch_tag
from scrapy_whittle.cluster.retry import RedisUnavailable
from scrapy_whittle.service.state.deliveries import Batch

logger = logging.getLogger(__name__)

#: pending batches a node reclaims at once (more are taken a moment later)
RECLAIM_BATCHES = 16
#: seconds a delivered batch waits for others to be forgotten with it (a tenth of the lease
#: at most: it is no longer renewed)
DELIVERY_GATHER = 0.05


class PendingBatches:
    """The pending batches of ``node`` (a :class:`~scrapy_whittle.cluster.node.ClusterNode`:
    its Redis client, keys, retrier, lease and callbacks)."""

    def __init__(self, node) -> None:
        self.node = node
        self.held: set[int] = set()                       # pending batches not delivered
        self.replays: deque[Batch] = deque()              # reclaimed, to hand out again
        self._delivered: list[int] = []                   # delivered, not yet forgotten
        self._forgetting = False                          # a task forgets them soon
        self._renew = node.redis.register_script(RENEW)
        self._reclaim = node.redis.register_script(RECLAIM)

    def take_replay(self) -> Batch | None:
        """A pending batch reclaimed from a worker that did not deliver it, or None."""
        return self.replays.popleft() if self.replays else None

    async def keep(self) -> None:
        """Every third of the lease: renew the batches held, reclaim stale ones (until the
        node stops)."""
        node = self.node
        every = max(0.05, min(node.lease / 3, 30.0))
        while not node.stopping:
            with contextlib.suppress(TimeoutError):          # a stop ends it at once
                await asyncio.wait_for(node.stopped.wait(), every)
            if node.stopping or node.retry.down_since is not None:
                continue
            try:
                await self.renew_and_reclaim()
            except (RedisUnavailable, redis.exceptions.RedisError) as exc:
                logger.debug("cluster node %s: pending batches not kept this round (%s)",
                             node.consumer, exc)

    async def release(self) -> None:
        """Batches held and not delivered (the crawl closed first): renewed to time 0, so
        that a live node reclaims them at once."""
        if self.held:
            pipe = self.node.redis.pipeline(transaction=False)
            for t, ids in _by_tag(self.held).items():
                pipe.zadd(self.node.keys.pending_since(t), dict.fromkeys(ids, 0), xx=True)
            await pipe.execute()
            self.held.clear()
            self.replays.clear()

    async def _per_tag(self, script, calls: list[tuple[list, list]]) -> list:
        """``script`` run once per (keys, args) of ``calls`` (each on one tag's keys): in one
        pipeline on one Redis; on a Redis Cluster, which pipelines no script, a few at once."""
        if not calls:
            return []
        if not self.node.cluster:
            pipe = self.node.redis.pipeline(transaction=False)
            for keys, args in calls:
                await script(keys=keys, args=args, client=pipe)
            return await pipe.execute()
        gate = asyncio.Semaphore(8)

        async def one(keys, args):
            async with gate:
                return await script(keys=keys, args=args)

        return list(await asyncio.gather(*(one(k, a) for k, a in calls)))

    async def renew_and_reclaim(self) -> None:
        node, k = self.node, self.node.keys
        renewals = [([k.pending_since(t)], ids[i:i + 1000])
                    for t, ids in _by_tag(self.held).items() for i in range(0, len(ids), 1000)]
        await node.retry(lambda: self._per_tag(self._renew, renewals),
                         "renewing pending batches", within=node.wait)
        if len(self.replays) >= RECLAIM_BATCHES:
            return

        async def reclaim() -> list:
            pipe = node.redis.pipeline(transaction=False)
            for t in range(SPREAD):                   # the tags holding batches
                pipe.zcard(k.pending_since(t))
            busy = [t for t, n in enumerate(await pipe.execute()) if n]
            got = await self._per_tag(self._reclaim, [
                ([k.pending(t), k.pending_since(t)], [node.lease, RECLAIM_BATCHES])
                for t in busy])
            return [line for lines in got for line in lines]

        lines = await node.retry(reclaim, "reclaiming pending batches", within=node.wait)
        batches = []
        for line in lines:
            try:
                batch = Batch.from_line(line)
            except (ValueError, TypeError, KeyError):
                logger.warning("cluster node %s: a damaged pending batch skipped: %r",
                               node.consumer, line[:200])
                continue
            if batch.id not in self.held:
                batches.append(batch)
        if not batches:
            return
        self.held.update(b.id for b in batches)
        self.replays.extend(batches)
        n = sum(len(b.entries) for b in batches)
        node.stats.inc("deliveries/replayed", n)
        logger.info("cluster node %s: %d entries of %d fetches whose delivery their worker "
                    "did not confirm within the lease: handed out again (the item pipelines "
                    "may see some of them twice)", node.consumer, n, len(batches))
        if node.on_tasks is not None:
            node.on_tasks()

    def delivered(self, batch: int) -> None:
        """Every item made of ``batch``'s entries passed the pipelines (or was dropped on
        purpose): its pending batch is deleted (in the background, retried), with the others
        delivered within ``DELIVERY_GATHER`` seconds: one round trip for them all."""
        self.held.discard(batch)
        self._delivered.append(batch)
        if self._forgetting:
            return
        self._forgetting = True
        self.node.in_background(self._forget_delivered())

    async def _forget_delivered(self) -> None:
        node, k = self.node, self.node.keys
        await asyncio.sleep(min(DELIVERY_GATHER, node.lease / 10))
        batches, self._delivered, self._forgetting = self._delivered, [], False

        async def forget():
            # each tag's batch before its renewal time (the two on one shard, in this order):
            # a renewal time left by a failure between is dropped by the next reclaim
            pipe = node.redis.pipeline(transaction=False)
            for t, ids in _by_tag(batches).items():
                pipe.hdel(k.pending(t), *ids)
                pipe.zrem(k.pending_since(t), *ids)
            return await pipe.execute()

        try:
            await node.retry(forget, "forgetting delivered batches", within=node.wait)
        except (RedisUnavailable, redis.exceptions.RedisError) as exc:
            # they are reclaimed after the lease and delivered again: repeats, not losses
            logger.info("cluster node %s: %d delivered batches not forgotten (%s)",
                        node.consumer, len(batches), exc)


def _by_tag(batches) -> dict[int, list[int]]:
    """Batch ids by the tag whose keys hold them."""
    out: dict[int, list[int]] = {}
    for b in batches:
        out.setdefault(batch_tag(b), []).append(b)
    return out
