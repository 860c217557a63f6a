"""A host of the simulated web that rate-limits crawlers, as Reddit does (about one request a
minute per address, commafeed#2181): ``python -m sim.serve --rate-limit 50:1[:60]``.

The first ``feeds`` feeds of the served web are listed under a host of their own,
``localhost`` (the same server: the crawler sees two hosts, ``localhost`` and
``127.0.0.1``). That host answers a request with 429 Too Many Requests when it has already
answered ``per_minute`` requests in the 60 seconds before it (a sliding window on the
server's clock, the crawler's time when both share a simulated clock), with ``Retry-After:
<retry_after>`` when given. Refused requests do not count against the window. Every request
is logged (time, feed, status) for :mod:`sim.bench.hosts`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

#: the host name the rate-limited feeds are listed under (the server's own address)
HOST = "localhost"
WINDOW = 60.0


@dataclass
class RateLimit:
    """``feeds`` feeds on a host answering at most ``per_minute`` requests a minute, 429
    beyond (``retry_after`` seconds asked, None: no header)."""

    feeds: int
    per_minute: int
    retry_after: float | None = None
    #: (time, feed, status) of every request to the host
    log: list[tuple[float, int, int]] = field(default_factory=list)
    _answered: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.feeds < 1 or self.per_minute < 1:
            raise ValueError(f"a rate limit needs feeds >= 1 and per_minute >= 1, got "
                             f"{self.feeds}:{self.per_minute}")
        if self.retry_after is not None and not self.retry_after >= 0:
            raise ValueError(f"retry_after ({self.retry_after!r}) must be >= 0")

    def covers(self, feed: int) -> bool:
        return 0 <= feed < self.feeds

    def admit(self, feed: int, now: float) -> bool:
        """Whether a request of ``feed`` at ``now`` is answered (else 429); logged."""
        answered = self._answered
        while answered and answered[0] <= now - WINDOW:
            answered.popleft()
        ok = len(answered) < self.per_minute
        if ok:
            answered.append(now)
        self.log.append((now, feed, 200 if ok else 429))
        return ok

    def headers(self) -> dict[str, str]:
        """The headers of a 429."""
        if self.retry_after is None:
            return {}
        return {"retry-after": f"{self.retry_after:g}"}


def parse_rate_limit(text: str | None) -> RateLimit | None:
    """``FEEDS:PER_MINUTE[:RETRY_AFTER]`` (``--rate-limit``); None for an empty text."""
    if not text:
        return None
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        feeds, per_minute = int(parts[0]), int(parts[1])
        retry_after = float(parts[2]) if len(parts) == 3 else None
    except ValueError:
        raise ValueError(f"--rate-limit {text!r}: expected FEEDS:PER_MINUTE[:RETRY_AFTER], "
                         "e.g. 50:1 or 50:1:60") from None
    try:
        return RateLimit(feeds, per_minute, retry_after)
    except ValueError as exc:
        raise ValueError(f"--rate-limit {text!r}: {exc}") from None
