"""What servers and feeds say about when to come back, honoured as good feed readers do.

Each hint is either a **hard constraint** (the source is not fetched before a time, or not in
some hours) or a **prior** (the publishing rate the policy starts from), whichever is right:

* ``Retry-After`` on 429 / 503: a back-off of at least that long. The server asks not to
  come back before; coming back earlier only earns another refusal.
* ``Cache-Control: max-age`` / ``Expires`` on 200 / 304: not before (capped). The server
  promises the representation stays fresh until then: an earlier fetch returns the same feed.
* RSS ``<ttl>`` (minutes): not before (capped). "How long a channel can be cached before
  refreshing", which Miniflux and other readers treat as a minimum interval.
* RSS ``<skipHours>`` / ``<skipDays>`` (GMT): not in those hours / on those days. The
  publisher asks aggregators not to read then.
* ``sy:updatePeriod`` x ``sy:updateFrequency``: the prior of the publishing rate, never a
  constraint. It is self-declared and often a template's default (WordPress says "hourly, 1"
  for every blog): a starting point that the crawl's own evidence soon outweighs.

Every "not before" is capped at ``WHITTLE_HINTS_MAX_DELAY`` (a day by default): a hostile or
mistaken server cannot switch a source off for months. ``WHITTLE_HINTS = False`` ignores them
all. Each hint read is counted under ``whittle/hints/<kind>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from scrapy_whittle.feeds.httpdates import unix_seconds

#: sy:updatePeriod in seconds
UPDATE_PERIODS = {"hourly": 3600.0, "daily": 86400.0, "weekly": 7 * 86400.0,
                  "monthly": 30.4375 * 86400.0, "yearly": 365.25 * 86400.0}
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


@dataclass(frozen=True)
class FeedHints:
    """The hints a feed document gives (parsed by the parser adapters)."""

    ttl: float | None = None                 # seconds
    skip_hours: int = 0                      # bit h set: do not read in hour h (GMT)
    skip_days: int = 0                       # bit d set: do not read on weekday d (Monday 0)
    update_rate: float | None = None         # entries per second the feed declares

    @property
    def empty(self) -> bool:
        return (self.ttl is None and not self.skip_hours and not self.skip_days
                and self.update_rate is None)


class ServerHints(NamedTuple):
    """What one response said about the next visit: the HTTP caching headers' "not before"
    (``why``: ``max_age`` or ``expires``; 0 for none) and the feed's own hints (None when the
    body was not read: a 304)."""

    not_before: float = 0.0
    why: str = ""
    feed: FeedHints | None = None

    def encode(self) -> str:
        """A compact text form (a cluster's result messages)."""
        if self.feed is None:
            return f"{self.not_before!r},{self.why}"
        f = self.feed
        return (f"{self.not_before!r},{self.why},{f.ttl or 0.0!r},{f.skip_hours},"
                f"{f.skip_days},{f.update_rate or 0.0!r}")

    @classmethod
    def decode(cls, text: str) -> ServerHints | None:
        if not text:
            return None
        parts = text.split(",")
        feed = None
        if len(parts) == 6:
            ttl, rate = float(parts[2]), float(parts[5])
            feed = FeedHints(ttl=ttl or None, skip_hours=int(parts[3]),
                             skip_days=int(parts[4]), update_rate=rate or None)
        return cls(float(parts[0]), parts[1], feed)


def response_hints(headers, now: float, feed: FeedHints | None = None) -> ServerHints | None:
    """The hints of a response (its headers, and the parsed feed's if it had a body: even
    none, which lifts a skipHours the feed no longer asks for), or None when it gave none."""
    http = http_not_before(headers, now)
    if http is None and feed is None:
        return None
    why, until = http if http is not None else ("", 0.0)
    return ServerHints(until, why, feed)


def feed_hints(ttl, skip_hours, skip_days, update_period, update_frequency) -> FeedHints:
    """FeedHints from the raw feed-level values a parser found (strings, numbers or lists);
    anything unreadable is ignored."""
    return FeedHints(ttl=_ttl(ttl), skip_hours=_hour_mask(skip_hours),
                     skip_days=_day_mask(skip_days),
                     update_rate=_update_rate(update_period, update_frequency))


def _ttl(value) -> float | None:
    try:
        minutes = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return minutes * 60.0 if math.isfinite(minutes) and minutes > 0 else None


def _hour_mask(values) -> int:
    mask = 0
    for v in _items(values):
        try:
            hour = int(str(v).strip())
        except ValueError:
            continue
        if 0 <= hour <= 24:
            mask |= 1 << (hour % 24)             # RSS 2.0 allows 0..23; some write 24
    return mask if mask != (1 << 24) - 1 else 0   # "never read" is not a usable hint


def _day_mask(values) -> int:
    mask = 0
    for v in _items(values):
        name = str(v).strip().lower()
        if name in DAYS:
            mask |= 1 << DAYS.index(name)
    return mask if mask != (1 << 7) - 1 else 0


def _items(values) -> list:
    if values is None:
        return []
    if isinstance(values, str | int | float):
        return [values]
    return list(values)


def _update_rate(period, frequency) -> float | None:
    seconds = UPDATE_PERIODS.get(str(period).strip().lower()) if period else None
    if seconds is None and frequency is None:
        return None
    try:
        times = float(str(frequency).strip()) if frequency is not None else 1.0
    except ValueError:
        return None
    if not (math.isfinite(times) and times > 0):
        return None
    return times / (seconds or 86400.0)       # the module's default period is daily


def http_not_before(headers, now: float) -> tuple[str, float] | None:
    """("max_age" | "expires", unix time) from ``Cache-Control: max-age`` or ``Expires``
    (``headers.get(name)`` -> bytes or str), or None. ``no-cache``/``no-store``/``private``
    max-age=0 give nothing."""
    cc = _header(headers, "Cache-Control")
    if cc:
        for part in cc.lower().split(","):
            name, _, value = part.strip().partition("=")
            if name in ("max-age", "s-maxage"):
                try:
                    age = float(value.strip().strip('"'))
                except ValueError:
                    continue
                if math.isfinite(age) and age > 0:
                    return "max_age", now + age
                return None
    expires = _header(headers, "Expires")
    if expires:
        t = unix_seconds(expires)
        if t > now:
            return "expires", float(t)
    return None


def retry_after(headers, now: float) -> float | None:
    """Seconds the server asks to wait (``Retry-After``: seconds or an HTTP date), or None."""
    value = _header(headers, "Retry-After")
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        t = unix_seconds(value)
        return t - now if t > now else None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _header(headers, name: str) -> str | None:
    value = headers.get(name) if headers is not None else None
    if value is None:
        return None
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def skipped(now: float, skip_hours, skip_days):
    """Whether feeds with these masks (ints, or arrays of them: one answer per feed) ask not to
    be read at unix time ``now``: bit h of ``skip_hours`` set for its hour (GMT), or bit d of
    ``skip_days`` for its weekday (Monday 0)."""
    days, seconds = divmod(int(now), 86400)
    hour = seconds // 3600
    weekday = (days + 3) % 7                  # 1970-01-01 was a Thursday (Monday = 0)
    return ((skip_hours >> hour) & 1 | (skip_days >> weekday) & 1) != 0
