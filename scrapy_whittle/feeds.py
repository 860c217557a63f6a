"""Parsing RSS / Atom feeds into what the estimators need, without Scrapy.

``parse_feed`` turns a response body into a :class:`ParsedFeed` (kind, entries, warnings) or
raises :class:`FeedError` when the body is unusable; ``EntryMemory`` remembers which entries of
each source were already seen, so a crawl's *new* entries (and their count) can be reported in
an :class:`~scrapy_whittle.observation.Observation`.

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
from collections import OrderedDict
from collections.abc import Iterable
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


class EntryMemory:
    """The keys of the entries already seen, per source, bounded to the ``max_per_source``
    most recently seen (LRU: a key still shown by the feed is refreshed at every crawl, so it
    is never forgotten before keys that left the feed; keep the bound above the feed's window).
    """

    def __init__(self, max_per_source: int = 1000) -> None:
        if int(max_per_source) < 1:
            raise ValueError(f"max_per_source ({max_per_source!r}) must be >= 1")
        self.max_per_source = int(max_per_source)
        self._seen: dict[int, OrderedDict[str, None]] = {}

    def new_entries(self, source: int, entries: Iterable[FeedEntry]) -> list[FeedEntry]:
        """The entries not seen before (first occurrence of a key inside ``entries`` too), in
        feed order; all of ``entries`` are remembered as seen."""
        seen = self._seen.setdefault(int(source), OrderedDict())
        batch: set[str] = set()
        new: list[FeedEntry] = []
        keys: list[str] = []
        for entry in entries:
            if entry.key in batch:
                continue
            batch.add(entry.key)
            keys.append(entry.key)
            if entry.key not in seen:
                new.append(entry)
        # feeds list newest first: insert oldest first so the newest end up most recent
        for key in reversed(keys):
            seen[key] = None
            seen.move_to_end(key)
        while len(seen) > self.max_per_source:
            seen.popitem(last=False)
        return new

    def seen(self, source: int) -> int:
        return len(self._seen.get(int(source), ()))

    def forget(self, source: int) -> None:
        self._seen.pop(int(source), None)

    def state_dict(self) -> dict[str, Any]:
        return {"max_per_source": self.max_per_source,
                "seen": {str(s): list(keys) for s, keys in self._seen.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._seen = {}
        for s, keys in state["seen"].items():
            od: OrderedDict[str, None] = OrderedDict((str(k), None) for k in keys)
            while len(od) > self.max_per_source:
                od.popitem(last=False)
            self._seen[int(s)] = od

    def __repr__(self) -> str:
        return f"EntryMemory(max_per_source={self.max_per_source})"
