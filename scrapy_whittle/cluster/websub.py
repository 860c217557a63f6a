"""WebSub in a cluster crawl: the subscriptions in Redis, one owner, every process a callback.

The protocol is the one process's (:mod:`scrapy_whittle.service.sources.websub`); what a cluster
adds is where each part runs:

* **One owner: the planner.** Its re-crawl service keeps the crawl's
  :class:`~scrapy_whittle.service.sources.websub.Subscriptions` (restored at a take-over, as the
  rest of the learned state), learns the hubs the workers' fetches found (a result's ``hub`` and
  ``topic``), and decides what to ask the hubs (subscribe, renew, unsubscribe): a hub gets one
  subscription per topic, whatever the number of processes. The planner is elected and
  replaced, so is the owner; a lock per subscription would add a second election for what
  the planner already does alone. The requests themselves go out through the planner
  process's Scrapy engine (``ClusterNode.on_hub_requests``).
* **The subscriptions in Redis** (``Keys.websub``: callback key -> the subscription's row
  and its source's URL and weight, JSON; under the crawl's prefix, hash-tagged on a Redis
  Cluster like every key of the crawl): :class:`PlannerWebSub` writes every change before
  any request leaves for a hub, since the hub's verification may reach any process, which
  reads it there. They are part of the crawl's state: a new planner restores them
  (:func:`saved_rows`), the same callbacks and secrets, renewed on their schedule.
* **Any process is a callback.** A hub's verification of intent is answered by whichever process
  receives it, from the row in Redis (:func:`~scrapy_whittle.service.sources.websub.intended`), and
  told to the planner through its inbox (``{"type": "websub", ...}``), which starts the lease; a
  delivery is checked against the secret in Redis and its entries told new by the shared entry
  memory's script (:meth:`ClusterNode.pushed`), whose result goes to the planner on the results
  stream with kind ``push``: no task, no budget. So of a delivery sent to two processes, or one
  racing a poll, the entries are emitted once.
* **A delivery is one delivery, however many processes receive it.** The call that reads its
  subscription (:data:`DELIVERY`, a script) also marks its receipt (``Keys.delivered``: the
  crawl's time of the first receipt, expiring), so the same delivery received again within
  :data:`~scrapy_whittle.service.sources.websub.REPEAT_WINDOW` (a copy that reached another process,
  a hub's retry landing anywhere) is answered 2xx and told to nobody: no entries told, no push
  result for the planner to learn (a push that brought nothing). The mark is under the crawl's
  prefix, the slot of ``Keys.websub`` it is read with: one call as before, and on a Redis
  Cluster the shard that every delivery reaches already (the subscription, the results
  stream); the source's tag would need the source, known only once the subscription is read.
  It is keyed by the signature (:func:`~scrapy_whittle.service.sources.websub.delivery_id`), set
  before the signature is checked: a forged delivery marks its own signature only. A process
  that marked a delivery and died before reporting it loses the push to a poll, as a delivery
  made while the crawl is down is.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from scrapy_whittle.service.sources.websub import (
    REPEAT_WINDOW,
    HubRequest,
    Subscription,
    Subscriptions,
    delivery_id,
)

if TYPE_CHECKING:
    from scrapy_whittle.cluster.keys import Keys

logger = logging.getLogger(__name__)

#: seconds between the planner's looks for requests due to hubs (a lease's renewal is due
#: days ahead; a retry minutes)
CHECK_EVERY = 1.0

#: a delivery's subscription, and whether the delivery is a repeat (the rule of
#: ``RecentDeliveries``, on the crawl's clock: the processes' clocks agree within far less
#: than the window). KEYS: ``Keys.websub``, the delivery's mark (``Keys.delivered``); ARGV:
#: the callback key, the crawl's time now, the window, the mark's time-to-live (whole
#: seconds of Redis's clock: the window's length, enough while the crawl's clock runs no
#: slower than real time), "1" to mark (a delivery without a signature is not). Returns [] (no
#: subscription there: nothing marked) or [the subscription's value, 1 if a repeat else 0].
DELIVERY = """
local row = redis.call('HGET', KEYS[1], ARGV[1])
if not row then return {} end
if ARGV[5] ~= '1' then return {row, 0} end
local now = tonumber(ARGV[2])
local first = tonumber(redis.call('GET', KEYS[2]) or '')
if first and math.abs(now - first) < tonumber(ARGV[3]) then return {row, 1} end
redis.call('SET', KEYS[2], ARGV[2], 'EX', tonumber(ARGV[4]))
return {row, 0}
"""


def encode(sub: Subscription, source: tuple[str, float]) -> str:
    """A subscription's value in ``Keys.websub``: its row, its source's URL and weight (what
    a worker needs to take a delivery as the source's: a task carries them for a fetch)."""
    return json.dumps([*sub.row(), *source], separators=(",", ":"))


def decode(raw: bytes | str) -> tuple[Subscription, str, float]:
    """Inverse of :func:`encode`: (subscription, URL, weight); ValueError, TypeError: not a
    subscription's value."""
    values = json.loads(raw)
    if not isinstance(values, list) or len(values) < 3:
        raise ValueError(f"not a subscription: {str(raw)[:100]!r}")
    weight = float(values[-1])
    if not (math.isfinite(weight) and weight >= 0):
        raise ValueError(f"not a weight: {weight!r}")
    return Subscription.from_row(values[:-2]), str(values[-2]), weight


def saved_rows(client, keys: Keys) -> list[tuple]:
    """The subscriptions' rows in Redis (a synchronous client), for the planner's store; an
    unreadable value is skipped with a warning."""
    rows = []
    for key, raw in client.hgetall(keys.websub).items():
        try:
            rows.append(decode(raw)[0].row())
        except (ValueError, TypeError) as exc:
            logger.warning("a damaged WebSub subscription skipped (%r: %s)", key, exc)
    return rows


async def read(node, key: str) -> tuple[Subscription, str, float] | None:
    """The subscription at callback ``key``, its source's URL and weight, from Redis (None:
    none, or unreadable); waits for Redis at most ``WHITTLE_REDIS_WAIT`` (``RedisUnavailable``)."""
    raw = await node.retry(lambda: node.redis.hget(node.keys.websub, key), "reading WebSub",
                           within=node.wait)
    if raw is None:
        return None
    try:
        return decode(raw)
    except (ValueError, TypeError):
        return None


async def read_delivery(node, key: str, signature: str | None, now: float
                        ) -> tuple[tuple[Subscription, str, float] | None, bool]:
    """For a delivery to callback ``key`` signed ``signature``, received at ``now``: the
    subscription there, its source's URL and weight (None: none, or unreadable), and whether
    the same delivery was received within the window (by any process; the receipt marked
    otherwise, in the same call); waits for Redis at most ``WHITTLE_REDIS_WAIT``
    (``RedisUnavailable``)."""
    keys = node.keys
    mark = delivery_id(key, signature) if signature else ""
    args = [key, repr(float(now)), REPEAT_WINDOW, math.ceil(REPEAT_WINDOW),
            "1" if signature else "0"]
    got = await node.retry(lambda: node.delivery_script(keys=[keys.websub,
                                                              keys.delivered(mark)],
                                                        args=args),
                           "reading WebSub", within=node.wait)
    if not got:
        return None, False
    try:
        return decode(got[0]), int(got[1]) == 1
    except (ValueError, TypeError):
        return None, False


async def tell_planner(node, event: str, key: str, mode: str, topic: str, at: float,
                       lease: str | None = None) -> None:
    """A verification answered (``event`` "verified") or a denial ("denied") at callback
    ``key``, told to the planner through its inbox; waits for Redis at most
    ``WHITTLE_REDIS_WAIT`` (``RedisUnavailable``)."""
    message = json.dumps({"type": "websub", "event": event, "key": key, "mode": mode,
                          "topic": topic, "at": at, "lease": lease})
    await node.retry(lambda: node.redis.rpush(node.keys.inbox, message),
                     "writing to the planner", within=node.wait)


class HubsFound:
    """A worker's side: the hub each fetched feed names, until the fetch's result carries it
    to the planner (``discovered`` has the signature of ``Subscriptions.discovered``, which
    the feed middleware calls on whichever it reports to)."""

    def __init__(self) -> None:
        self.found: dict[int, tuple[str, str]] = {}

    def discovered(self, source: int, hub: str, topic: str, now: float) -> bool:
        self.found[source] = (hub, topic)
        return False

    def take(self, source: int) -> tuple[str, str]:
        """(hub, topic) of the last fetch of ``source`` (empty strings: none)."""
        return self.found.pop(source, ("", ""))


class PlannerWebSub:
    """The planner's side: ``websub`` (its service's subscriptions) written to Redis when it
    changed, the requests due handed to ``send`` (the process's Scrapy engine; None: nothing
    sends them, none is made), the callbacks' reports applied."""

    def __init__(self, websub: Subscriptions, about: Callable[[int], tuple[str, float]],
                 node) -> None:
        self.websub = websub
        self.about = about
        self.node = node
        self.checked = -math.inf
        # Redis holds what was restored from it: from now on, what changes is written
        websub.dirty = set()

    def _source(self, source: int) -> tuple[str, float]:
        try:
            return self.about(source)
        except (IndexError, KeyError):
            return "", 1.0

    async def step(self, now: float) -> None:
        """The requests due (at most every :data:`CHECK_EVERY` seconds), once what changed is
        in Redis."""
        requests: list[HubRequest] = []
        send = self.node.on_hub_requests
        if send is not None and now - self.checked >= CHECK_EVERY:
            self.checked = now
            requests = self.websub.due(now)
        await self.sync()
        if requests:
            send(requests)

    async def sync(self) -> None:
        """Write the subscriptions changed since the last write, delete those gone."""
        websub = self.websub
        if not websub.dirty:
            return
        keys, websub.dirty = websub.dirty, set()
        changed = {k: encode(websub.by_key[k], self._source(websub.by_key[k].source))
                   for k in keys if k in websub.by_key}
        gone = [k for k in keys if k not in websub.by_key]
        r, key = self.node.redis, self.node.keys.websub

        async def write():
            pipe = r.pipeline(transaction=True)
            if changed:
                pipe.hset(key, mapping=changed)
            if gone:
                pipe.hdel(key, *gone)
            return await pipe.execute()

        try:
            await self.node.retry(write, "writing WebSub")
        except BaseException:
            websub.dirty |= keys         # written at the next round
            raise

    def told(self, message: dict) -> None:
        """A callback's report (an inbox message): a verification answered, a denial."""
        websub = self.websub
        try:
            at = float(message.get("at") or 0.0)
        except (TypeError, ValueError):
            at = math.nan
        key, topic = str(message.get("key", "")), str(message.get("topic", ""))
        lease = message.get("lease")
        if not math.isfinite(at):        # a garbled message: nothing of ours to change
            return
        if message.get("event") == "verified":
            websub.verify(key, str(message.get("mode", "")), topic,
                          None if lease is None else str(lease), at)
        elif message.get("event") == "denied":
            websub.denied(key, topic, at)

    def failed(self, key: str, now: float) -> None:
        """A request of this planner the hub refused or never answered."""
        self.websub.failed(key, now)
