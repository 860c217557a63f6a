"""Redis calls that survive an outage: retried with back-off, logged once per outage."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    ConnectionError,
    TimeoutError,
    TryAgainError,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
#: a Redis Cluster with a shard away answers CLUSTERDOWN, and TRYAGAIN while its slots move
TRANSIENT = (ConnectionError, TimeoutError, BusyLoadingError, ClusterDownError, TryAgainError,
             OSError)


class RedisUnavailable(Exception):
    """Redis stayed unreachable longer than a call was willing to wait."""


class Retrier:
    """Runs Redis calls until they succeed: on a connection error it waits (0.1 s, doubling
    up to ``max_delay``) and tries again. One outage is logged once: its first failure as a
    warning with the cause, the recovery at INFO; failures within ``settle`` seconds of a
    recovery (connections that died with the server, found one by one) belong to the same
    outage and are not logged again. ``stopping()`` ends the retries of a closing crawl (the
    call then raises ``asyncio.CancelledError``). A call given ``within`` seconds (else
    ``patience``, None: no limit) raises :class:`RedisUnavailable` once it has failed for
    that long: what a closing crawl or a waiting download cannot wait for indefinitely."""

    def __init__(self, name: str, stats=None, max_delay: float = 5.0, settle: float = 30.0,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.name = name
        self.stats = stats
        self.max_delay = max_delay
        self.settle = settle
        self.stopping = stopping
        self.down_since: float | None = None
        self.recovered_at = -float("inf")
        self.patience: float | None = None
        #: calls made, by what they were for (each a command, a pipeline or a script)
        self.calls: dict[str, int] = {}

    async def __call__(self, call: Callable[[], Awaitable[T]], what: str,
                       within: float | None = None) -> T:
        delay = 0.1
        limit = self.patience if within is None else within
        first_failure = None
        self.calls[what] = self.calls.get(what, 0) + 1
        while True:
            try:
                result = await call()
            except TRANSIENT as exc:
                now = asyncio.get_running_loop().time()
                if self.down_since is None:
                    self.down_since = now
                    if now - self.recovered_at > self.settle:
                        logger.warning("%s: Redis unreachable while %s (%s: %s); retrying "
                                       "with back-off", self.name, what, type(exc).__name__,
                                       exc)
                        if self.stats is not None:
                            self.stats.inc("cluster/redis_outages")
                    else:
                        logger.debug("%s: Redis failed again while %s (%s)", self.name,
                                     what, exc)
                if first_failure is None:
                    first_failure = now
                if limit is not None and now - first_failure >= limit:
                    raise RedisUnavailable(f"{type(exc).__name__}: {exc}") from exc
                if self.stopping():
                    raise asyncio.CancelledError from exc
                if limit is not None:           # the last try at the limit, not past it
                    delay = min(delay, max(first_failure + limit - now, 0.0))
                await asyncio.sleep(delay)
                delay = min(self.max_delay, delay * 2)
                continue
            if self.down_since is not None:
                now = asyncio.get_running_loop().time()
                if now - self.recovered_at > self.settle:
                    logger.info("%s: Redis reachable again after %.1f s", self.name,
                                now - self.down_since)
                self.down_since = None
                self.recovered_at = now
            return result
