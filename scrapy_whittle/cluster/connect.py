"""The start-up check of a cluster crawl: the Redis client is installed, and Redis answers.

Both run before the spider opens (:mod:`scrapy_whittle.scrapy.startup`), so that a cluster
that cannot work stops ``scrapy crawl`` with one ERROR line and exit status 1 instead of
waiting for ever, or failing later inside the engine. The module imports ``redis`` only
inside its functions: it is what tells whether the optional dependency is there.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

from scrapy_whittle.service.config import InvalidSetting, require_extra


def public_url(url: str) -> str:
    """``url`` with its password masked (it goes into logs and error messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def check_client(url: str) -> None:
    """Raise InvalidSetting when the ``redis`` package (extra ``cluster``) is missing."""
    require_extra("redis", "cluster", "WHITTLE_REDIS_URL", public_url(url))


def reach(url: str, wait: float) -> None:
    """PING Redis at ``url`` until it answers, trying again with back-off for at most
    ``wait`` seconds (``WHITTLE_REDIS_WAIT``); raise InvalidSetting naming the URL and the
    last cause when it never does."""
    import redis
    from redis.exceptions import RedisError

    from scrapy_whittle.cluster.retry import TRANSIENT

    deadline = time.monotonic() + wait
    delay = 0.1
    while True:
        # each attempt bounded by what is left of the wait: a host that drops packets
        # would otherwise hold the connect for the system's TCP timeout
        left = max(deadline - time.monotonic(), 0.05)
        try:
            client = redis.Redis.from_url(url, socket_connect_timeout=left,
                                          socket_timeout=left)
        except ValueError as exc:
            raise InvalidSetting(f"WHITTLE_REDIS_URL ({public_url(url)!r}) is not a usable "
                                 f"Redis URL: {exc}") from None
        try:
            client.ping()
            return
        except TRANSIENT as exc:
            cause = exc
        except RedisError as exc:           # Redis answered, and refused (a wrong password)
            raise InvalidSetting(f"WHITTLE_REDIS_URL ({public_url(url)!r}) refuses the "
                                 f"crawl: {type(exc).__name__}: {exc}") from None
        finally:
            client.close()
        left = deadline - time.monotonic()
        if left <= 0:
            raise InvalidSetting(
                f"WHITTLE_REDIS_URL ({public_url(url)!r}) did not answer within {wait:g} s "
                f"(WHITTLE_REDIS_WAIT): {type(cause).__name__}: {cause}; start Redis there "
                "or correct the URL")
        time.sleep(min(delay, left))
        delay = min(1.0, delay * 2)
