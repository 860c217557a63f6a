"""Adapter of feedparser (the Universal Feed Parser, pure Python): the reference for what a
feed means, and the fallback for what the fast parser refuses.

It is handed a ``BytesIO``, never the bytes themselves: given ``bytes``, ``feedparser.parse``
first tries them as a file name (a body ``/etc/passwd`` would be read from disk). It is not
told the feed's URL, so that an RSS ``guid`` comes out as written (feedparser would resolve
``<guid>123</guid>`` against the URL: a key that changes when the feed moves, and that
feedparser-rs does not make); :func:`scrapy_whittle.feeds.parse.parse_feed` resolves relative links
against the URL instead.
It holds the GIL throughout (pure Python) and takes tens of milliseconds for a typical news
feed, so the parse pool runs it in worker processes.
"""

from __future__ import annotations

import io

from scrapy_whittle.feeds.hints import feed_hints
from scrapy_whittle.feeds.parsers.types import FIELDS, ParseLimits, RawFeed

NAME = "feedparser"
#: bodies up to this size are parsed on the event loop: this parser is slow, so only small
#: ones, whose parse costs the loop little more than handing them to a worker
INLINE_MAX_BYTES = 8 * 1024


def available() -> str | None:
    """None when usable, else why not."""
    try:
        import feedparser  # noqa: F401
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        return f"feedparser is not installed ({exc})"
    return None


def parse(data: bytes, *, url: str, limits: ParseLimits) -> RawFeed:
    """Parse UTF-8 ``data`` (prepared by :mod:`scrapy_whittle.feeds.parsers.prepare`). Fields are
    read with ``dict.get``, past feedparser's key aliases (which warn when an absent
    ``updated_parsed`` is read)."""
    import feedparser

    headers = {"content-type": "application/xml; charset=utf-8"}
    parsed = feedparser.parse(io.BytesIO(data), response_headers=headers)
    entries = list(parsed.get("entries") or ())
    capped = len(entries) > limits.max_entries
    problem = parsed.get("bozo_exception") if parsed.get("bozo") else None
    feed = parsed.get("feed") or {}
    # feedparser keeps only the last <hour> / <day> of skipHours / skipDays
    hints = feed_hints(dict.get(feed, "ttl"), dict.get(feed, "hour"), dict.get(feed, "day"),
                       dict.get(feed, "sy_updateperiod"), dict.get(feed, "sy_updatefrequency"))
    return RawFeed(version=parsed.get("version") or "", problem=problem, capped=capped,
                   entries=[{key: dict.get(e, key) for key in FIELDS}
                            for e in entries[:limits.max_entries]], hints=hints)
