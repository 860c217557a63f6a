"""Article requests (``WHITTLE_ARTICLES``) within the hosts' allowances across a cluster.

The hosts' allowances are the planner's (:mod:`~scrapy_whittle.service.hosts.host_allowances`),
and the workers fetch the articles; a worker cannot ask the planner request by request. So
the planner grants: after each round's hand-out it takes from each host with a finite
allowance the article requests the host may take now, beyond what its feeds are likely to
take still this epoch (:meth:`HostAllowances.article_room`, spent from the host's credit at
once), and adds them to the hash ``Keys.article_room`` (host -> requests granted, not yet
claimed). At each new epoch the hash is written afresh in one transaction: what was not
claimed is gone, as an unspent allowance is. A host with a finite allowance is in the hash
even with nothing granted (0).

A worker's :meth:`ArticleRoom.admit` lets an article go to a host that is not in the hash
(no allowance: its download slot paces it) and spends one of the requests it claimed for a
host that is; with none left it claims up to :data:`CLAIM` more (:data:`CLAIM_SCRIPT`, one
atomic step, in the background) and the article waits: the scheduler asks again. Which hosts
are in the hash the worker reads with the crawl's state, once a second. A worker's claimed
requests left over at an epoch's end may still go in the next (at most :data:`CLAIM` a
host), and an article to a host no feed of the crawl is on (the planner has no allowance for
it) is paced by its download slot alone.
"""

from __future__ import annotations

import asyncio
import logging
import math

from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.retry import RedisUnavailable

logger = logging.getLogger(__name__)

#: requests a worker claims for a host at once
CLAIM = 4
#: seconds a worker waits before claiming again for a host the last claim found empty
EMPTY_WAIT = 0.5

#: KEYS[1] the hash of grants; ARGV: host, most to claim. Returns -1 when the host is not in
#: the hash (no allowance), else the requests claimed (0 or more)
CLAIM_SCRIPT = """
local n = redis.call('HGET', KEYS[1], ARGV[1])
if not n then return -1 end
local k = math.min(tonumber(n), tonumber(ARGV[2]))
if k > 0 then redis.call('HINCRBY', KEYS[1], ARGV[1], -k) end
return k
"""


def grant(pipe, keys: Keys, room: dict[str, int], fresh: bool) -> None:
    """Queue on ``pipe`` (a transaction) the planner's grants ``room`` (host -> requests;
    with ``fresh``, a new epoch's: the hash written afresh, every host of ``room`` in it)."""
    if fresh:
        pipe.delete(keys.article_room)
    for host, n in room.items():
        if n or fresh:
            pipe.hincrby(keys.article_room, host, n)


class ArticleRoom:
    """A worker's side: the hosts with an allowance and the requests claimed for them.
    ``redis``: the node's asyncio client; ``retry``: its Retrier; ``woken``: called when a
    claim brought requests (the scheduler then asks again)."""

    def __init__(self, redis, keys: Keys, retry, woken=None) -> None:
        self.keys = keys
        self.retry = retry
        self.woken = woken
        self.script = redis.register_script(CLAIM_SCRIPT)
        self.hosts: set[str] = set()            # the hosts in the hash, as last read
        self.claimed: dict[str, int] = {}        # host -> requests claimed, not sent
        self._claiming: dict[str, asyncio.Future] = {}
        self._empty_at: dict[str, float] = {}    # host -> when a claim found none
        self.empty_wait = EMPTY_WAIT

    def read(self, hosts) -> None:
        """The hosts of the hash (bytes or str), read with the crawl's state."""
        self.hosts = {h.decode() if isinstance(h, bytes) else str(h) for h in hosts}

    def admit(self, host: str) -> bool:
        if host not in self.hosts:
            return True
        left = self.claimed.get(host, 0)
        if left > 0:
            self.claimed[host] = left - 1
            return True
        loop = asyncio.get_running_loop()
        if host not in self._claiming and \
                loop.time() - self._empty_at.get(host, -math.inf) >= self.empty_wait:
            task = asyncio.ensure_future(self._claim(host))
            self._claiming[host] = task
            task.add_done_callback(lambda _t, host=host: self._claiming.pop(host, None))
        return False

    async def _claim(self, host: str) -> None:
        try:
            got = int(await self.retry(
                lambda: self.script(keys=[self.keys.article_room], args=[host, CLAIM]),
                "claiming article requests"))
        except RedisUnavailable as exc:
            logger.info("article requests for %s not claimed (%s)", host, exc)
            return
        if got < 0:
            self.hosts.discard(host)
        elif got == 0:
            self._empty_at[host] = asyncio.get_running_loop().time()
        else:
            self.claimed[host] = self.claimed.get(host, 0) + got
        if got and self.woken is not None:
            self.woken()

    async def settled(self) -> None:
        """The claims under way, done (for a test, and a stop)."""
        if self._claiming:
            await asyncio.gather(*self._claiming.values(), return_exceptions=True)
