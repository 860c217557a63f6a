"""Parsing RSS / Atom feeds into what the estimators need, without Scrapy.

``parse_feed`` turns a response body into a :class:`ParsedFeed` (kind, entries, warnings) or
raises :class:`FeedError` when the body is unusable. Which entries are new is decided by
:mod:`scrapy_whittle.entry_memory`.

Entry identity (``FeedEntry.key``): the entry's id (Atom ``id``, RSS ``guid``; feedparser
resolves it against the feed URL), else its link, else a hash of title and summary.
Publication time (``FeedEntry.published``): ``published`` else ``updated``, in unix seconds,
or None when absent or absurd (beyond ``now + max_skew`` or older than ``max_age``); a caller
then uses the entry's first-seen time. Engagement: ``slash:comments``, else ``thr:total``.
"""

from __future__ import annotations

import calendar
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import feedparser

FEED_ERROR_KINDS = ("empty", "not_a_feed", "malformed", "too_large", "encoding")
MAX_BYTES = 10 * 1024 * 1024
MAX_SKEW = 15 * 60.0                       # seconds a publication date may lie in the future
MAX_AGE = 20 * 365.25 * 86400.0            # older than this is taken for a broken date

_HTML_START = re.compile(rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*"
                         rb"(?:<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>])",
                         re.IGNORECASE | re.DOTALL)


class FeedError(ValueError):
    """The body is not a usable feed. ``kind`` is one of ``FEED_ERROR_KINDS`` (for stats keys
    such as ``whittle/errors/feed/not_a_feed``)."""

    def __init__(self, kind: str, message: str) -> None:
        if kind not in FEED_ERROR_KINDS:
            raise ValueError(f"unknown FeedError kind {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class FeedEntry:
    key: str
    title: str | None
    link: str | None
    published: float | None       # unix seconds; None if absent or absurd
    engagement: float | None      # slash:comments or thr:total


@dataclass(frozen=True)
class ParsedFeed:
    kind: str                     # feedparser's version: "rss20", "atom10", "rss10", ...
    entries: list[FeedEntry]
    warnings: list[str] = field(default_factory=list)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    s = str(value).strip()
    return s or None


def _number(value: Any) -> float | None:
    try:
        x = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return x if x >= 0 and x != float("inf") else None


def _encoding_problem(exc: BaseException | None) -> bool:
    names = {"CharacterEncodingOverride", "CharacterEncodingUnknown", "UnicodeDecodeError"}
    return exc is not None and type(exc).__name__ in names


def parse_feed(body: bytes, *, url: str, now: float, content_type: str | None = None,
               max_bytes: int = MAX_BYTES, max_skew: float = MAX_SKEW,
               max_age: float = MAX_AGE) -> ParsedFeed:
    """Parse ``body`` (the raw bytes of a response from ``url``, fetched at unix time ``now``).

    Raises FeedError("empty" | "not_a_feed" | "malformed" | "too_large" | "encoding").
    A feed with parse problems that still yields entries is returned with warnings.
    """
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"body must be bytes, got {type(body).__name__}")
    body = bytes(body)
    if len(body) > max_bytes:
        raise FeedError("too_large", f"{len(body)} bytes from {url} (limit {max_bytes})")
    if not body.strip():
        raise FeedError("empty", f"empty body from {url}")
    ctype = (content_type or "").split(";")[0].strip().lower()
    looks_html = bool(_HTML_START.match(body[:4096]))
    headers = {"content-location": url}
    if content_type:
        headers["content-type"] = content_type
    parsed = feedparser.parse(body, response_headers=headers)
    version = parsed.get("version") or ""
    exc = parsed.get("bozo_exception") if parsed.get("bozo") else None
    warnings: list[str] = []
    if exc is not None:
        warnings.append(f"{type(exc).__name__}: {exc}")
    raw = list(parsed.get("entries") or [])
    if not version and not raw:
        if looks_html or ctype in ("text/html", "application/xhtml+xml"):
            raise FeedError("not_a_feed", f"{url} returned an HTML page ({ctype or 'no type'})")
        if _encoding_problem(exc):
            raise FeedError("encoding", f"{url}: {exc}")
        if exc is not None:
            raise FeedError("malformed", f"{url}: {type(exc).__name__}: {exc}")
        raise FeedError("not_a_feed", f"{url} is neither RSS nor Atom")
    if looks_html and not version:
        raise FeedError("not_a_feed", f"{url} returned an HTML page")
    entries: list[FeedEntry] = []
    dropped = future = ancient = 0
    for e in raw:
        title, link = _text(e.get("title")), _text(e.get("link"))
        key = _text(e.get("id")) or link
        if key is None:
            summary = _text(e.get("summary")) or ""
            if title is None and not summary:
                dropped += 1
                continue
            digest = hashlib.sha1(f"{title or ''}\x00{summary}".encode()).hexdigest()
            key = f"sha1:{digest}"
        published = None
        stamp = e.get("published_parsed") or e.get("updated_parsed")
        if stamp is not None:
            try:
                published = float(calendar.timegm(stamp))
            except (TypeError, ValueError, OverflowError):
                published = None
            if published is not None and published > now + max_skew:
                future += 1
                published = None
            elif published is not None and published < now - max_age:
                ancient += 1
                published = None
        engagement = _number(e.get("slash_comments"))
        if engagement is None:
            engagement = _number(e.get("thr_total"))
        entries.append(FeedEntry(key=key, title=title, link=link, published=published,
                                 engagement=engagement))
    if raw and not entries:
        raise FeedError("malformed", f"{url}: no entry has an id, link, title or summary")
    if dropped:
        warnings.append(f"{dropped} entries without id, link, title or summary dropped")
    if future:
        warnings.append(f"{future} publication dates in the future ignored")
    if ancient:
        warnings.append(f"{ancient} publication dates older than {max_age / 86400:.0f} days "
                        "ignored")
    return ParsedFeed(kind=version or "unknown", entries=entries, warnings=warnings)
