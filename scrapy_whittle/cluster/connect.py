"""Connecting to Redis, one server or a Redis Cluster, and the start-up check of a cluster
crawl: the Redis client is installed, Redis answers, and the crawl's keys there, if any, are
laid out as this version reads them.

``WHITTLE_REDIS_URL`` names one server (``redis://``, ``rediss://``, ``unix://``) or a Redis
Cluster (``redis+cluster://host:port[,host:port...]``, ``rediss+cluster://`` with TLS: some
of its nodes, the client finds the others). On a cluster the crawl's prefix is a hash tag
(:func:`key_prefix`): the crawl-wide keys share its slot, and the per-source keys spread over
tags of their own (:mod:`scrapy_whittle.cluster.keys`), so that each script and transaction
touches the keys of one slot, as a Redis Cluster requires.

All run before the spider opens (:mod:`scrapy_whittle.scrapy.startup`), so that a cluster
that cannot work stops ``scrapy crawl`` with one ERROR line and exit status 1 instead of
waiting for ever, or failing later inside the engine. The module imports ``redis`` only
inside its functions: it is what tells whether the optional dependency is there.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

from scrapy_whittle.service.config import (
    InvalidSetting,
    cluster_address,
    is_cluster,
    require_extra,
)


def public_url(url: str) -> str:
    """``url`` with its password masked (it goes into logs and error messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def key_prefix(prefix: str, url: str) -> str:
    """The prefix of the crawl's keys: on a Redis Cluster the prefix in braces (a hash tag:
    the crawl-wide keys in its slot; :meth:`~scrapy_whittle.cluster.keys.Keys.tag` derives
    the per-source tags from it), unless it holds a hash tag already (then every key of the
    crawl is in that tag's slot); on one server the prefix itself."""
    if is_cluster(url) and "{" not in prefix:
        return "{" + prefix + "}"
    return prefix


def sync_client(url: str, **options):
    """A ``redis`` client of ``url``: ``redis.Redis`` or ``redis.cluster.RedisCluster``."""
    import redis

    if not is_cluster(url):
        return redis.Redis.from_url(url, **options)
    from redis.cluster import ClusterNode, RedisCluster

    address = cluster_address(url)
    return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in address.nodes],
                        username=address.username, password=address.password,
                        ssl=address.ssl, **options)


def async_client(url: str, **options):
    """A ``redis.asyncio`` client of ``url`` (a ``RedisCluster`` for a cluster)."""
    import redis.asyncio as aioredis

    if not is_cluster(url):
        return aioredis.from_url(url, **options)
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    from scrapy_whittle.cluster.counting import with_connection_class

    address = cluster_address(url)
    client = with_connection_class(RedisCluster(
        startup_nodes=[ClusterNode(h, p) for h, p in address.nodes],
        username=address.username, password=address.password, ssl=address.ssl, **options),
        closed_writes_fail_to_connect)
    client.commands_parser = _reading_stream_keys(type(client.commands_parser))()
    return client


def stream_keys(args) -> list | None:
    """The keys of an ``XREADGROUP`` or ``XREAD`` command (``args``: its name and
    arguments): the first half of what follows ``STREAMS`` (the streams, then their ids);
    None for another command."""
    if str(args[0]).upper() not in ("XREADGROUP", "XREAD"):
        return None
    words = [a.upper() if isinstance(a, str) else a for a in args]
    at = words.index("STREAMS") if "STREAMS" in words else words.index(b"STREAMS")
    rest = args[at + 1:]
    return list(rest[:len(rest) // 2])


def _reading_stream_keys(base: type) -> type:
    """``base`` (redis-py's parser of the commands' keys, which a cluster client asks which
    slot a command goes to) finding the keys of the stream reads itself. redis-py asks the
    server for the keys of a command whose keys move (``COMMAND GETKEYS``: a round trip
    before every ``XREADGROUP``, the planner's and the workers' reads, on their own or in a
    pipeline); they follow ``STREAMS``, as Redis's own ``xreadGetKeys`` finds them."""

    class StreamKeysParser(base):
        __slots__ = ()

        async def get_keys(self, *args):
            keys = stream_keys(args)
            return keys if keys is not None else await super().get_keys(*args)

    return StreamKeysParser


def closed_writes_fail_to_connect(base: type) -> type:
    """``base`` (a ``redis.asyncio`` connection class) whose write on a connection closed
    under it (a node restarted while another task was reconnecting) raises ConnectionError,
    which the cluster client and the Retrier handle, instead of the AttributeError or
    TypeError of the closed transport that redis-py lets through (redis/redis-py#4287)."""
    from redis.exceptions import ConnectionError

    if getattr(base, "_closed_writes_fail", False):
        return base

    async def send_packed_command(self, command, check_health=True):
        try:
            return await base.send_packed_command(self, command, check_health=check_health)
        except (AttributeError, TypeError) as exc:
            writer = self._writer
            transport = getattr(writer, "transport", None)
            if writer is not None and transport is not None and not transport.is_closing():
                raise                                   # not a closed connection's
            await self.disconnect(nowait=True)
            raise ConnectionError(f"connection closed while writing to "
                                  f"{self.host}:{self.port}") from exc

    return type(f"ClosedWritesFail{base.__name__}", (base,),
                {"send_packed_command": send_packed_command, "_closed_writes_fail": True})


def check_layout(url: str, prefix: str) -> None:
    """Raise InvalidSetting when the crawl ``prefix`` at ``url`` was begun by a version whose
    keys are laid out otherwise (:data:`~scrapy_whittle.cluster.keys.LAYOUT`)."""
    from scrapy_whittle.cluster.keys import Keys
    from scrapy_whittle.cluster.state import LayoutMismatch, check_layout

    client = sync_client(url)
    try:
        origin, layout = client.hmget(Keys(key_prefix(prefix, url)).meta, "origin",
                                      "keys_layout")
    finally:
        client.close()
    meta = {name: value.decode() for name, value in
            (("origin", origin), ("keys_layout", layout)) if value is not None}
    try:
        check_layout(meta, prefix)
    except LayoutMismatch as exc:
        raise InvalidSetting(f"WHITTLE_REDIS_URL ({public_url(url)!r}): {exc}") from None


def check_client(url: str) -> None:
    """Raise InvalidSetting when the ``redis`` package (extra ``cluster``) is missing."""
    require_extra("redis", "cluster", "WHITTLE_REDIS_URL", public_url(url))


def reach(url: str, wait: float) -> None:
    """PING Redis at ``url`` until it answers, trying again with back-off for at most
    ``wait`` seconds (``WHITTLE_REDIS_WAIT``); raise InvalidSetting naming the URL and the
    last cause when it never does."""
    from redis.exceptions import RedisClusterException, RedisError

    from scrapy_whittle.cluster.retry import TRANSIENT

    deadline = time.monotonic() + wait
    delay = 0.1
    while True:
        # each attempt bounded by what is left of the wait: a host that drops packets
        # would otherwise hold the connect for the system's TCP timeout
        left = max(deadline - time.monotonic(), 0.05)
        client = None
        try:
            client = sync_client(url, socket_connect_timeout=left, socket_timeout=left)
            client.ping()
            return
        except ValueError as exc:
            raise InvalidSetting(f"WHITTLE_REDIS_URL ({public_url(url)!r}) is not a usable "
                                 f"Redis URL: {exc}") from None
        except (*TRANSIENT, RedisClusterException) as exc:   # a cluster none of whose
            cause = exc                                        # start-up nodes answers
        except RedisError as exc:           # Redis answered, and refused (a wrong password)
            raise InvalidSetting(f"WHITTLE_REDIS_URL ({public_url(url)!r}) refuses the "
                                 f"crawl: {type(exc).__name__}: {exc}") from None
        finally:
            if client is not None:
                client.close()
        left = deadline - time.monotonic()
        if left <= 0:
            raise InvalidSetting(
                f"WHITTLE_REDIS_URL ({public_url(url)!r}) did not answer within {wait:g} s "
                f"(WHITTLE_REDIS_WAIT): {type(cause).__name__}: {cause}; start Redis there "
                "or correct the URL")
        time.sleep(min(delay, left))
        delay = min(1.0, delay * 2)
