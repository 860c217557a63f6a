"""Parsing sources of every kind (RSS, Atom, JSON Feed, sitemaps) into what the estimators
need, without Scrapy.

``parse_feed`` turns a response body into a :class:`ParsedFeed` (kind, entries, warnings,
notices, sources) or raises :class:`FeedError` when the body is unusable. The kind is told
from the body (:mod:`scrapy_whittle.feeds.kinds`; a gzip body is decompressed first, bounded
by ``limits.max_bytes``): a JSON Feed is read by :mod:`scrapy_whittle.feeds.jsonfeed`, a
sitemap or sitemap index by :mod:`scrapy_whittle.feeds.sitemap`, RSS / Atom by the parser
chosen by name (:mod:`scrapy_whittle.feeds.parsers`: ``feedparser-rs`` by default,
``feedparser``). XML is given to every reader in UTF-8 with no DOCTYPE internal subset
(:mod:`scrapy_whittle.feeds.parsers.prepare`), and what the fast parser refuses, reads only in
part, or reads with entries that have no id, link, title or summary (an RSS ``<body>``, Atom
0.3 link text) is parsed by feedparser too; its result is kept when it has at least as many
usable entries. Which entries are new is decided by
:mod:`scrapy_whittle.service.memory.entry_memory`; parsing off the event loop is
:mod:`scrapy_whittle.feeds.parse_pool`.

Entry identity (``FeedEntry.key``): the entry's id as written (Atom ``id``, RSS ``guid``; not
resolved against the feed's URL, so that it stays when the feed moves), else its link,
else ``sha1:`` + a hash of its title and summary as plain text (tags removed, white space
collapsed, so that both parsers give the same key); an id longer than
``limits.max_field_chars`` is replaced by ``sha1:`` + its hash. Publication time
(``FeedEntry.published``): ``published`` else ``updated``, in unix seconds, or None when
absent or absurd (beyond ``now + max_skew`` or older than ``max_age``); a caller then uses the
entry's first-seen time. Links are resolved against ``xml:base`` by the parsers, and what is
still relative against ``url``. Engagement: ``slash:comments``, else ``thr:total``. At most
``limits.max_entries`` entries are kept, the first ones in feed order.
"""

from __future__ import annotations

import calendar
import hashlib
import html
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

from scrapy_whittle.feeds import jsonfeed, sitemap
from scrapy_whittle.feeds.kinds import (
    JSON,
    SITEMAP,
    detect,
    gunzip,
    gunzip_chunks,
    gunzip_head,
    is_gzip,
)
from scrapy_whittle.feeds.parsers import DEFAULT_PARSER, FALLBACK_PARSER, get_parser
from scrapy_whittle.feeds.parsers.prepare import (
    EncodingUnknown,
    looks_like_html,
    strip_internal_subset,
    to_utf8,
)
from scrapy_whittle.feeds.parsers.types import (
    FEED_ERROR_KINDS,
    MAX_BYTES,
    NOTICE_KINDS,
    FeedEntry,
    FeedError,
    ParsedFeed,
    ParseLimits,
    RawFeed,
)

MAX_SKEW = 15 * 60.0                       # seconds a publication date may lie in the future
MAX_AGE = 20 * 365.25 * 86400.0            # older than this is taken for a broken date
JSON_READER = "json"                       # ParsedFeed.parser of a JSON Feed
SITEMAP_READER = "lxml"                    # ParsedFeed.parser of a sitemap
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TAG = re.compile(r"<[^>]*>")
_SCRIPT = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_SPACE = re.compile(r"\s+")


class NeedsFallback(Exception):
    """The fast parser refused the body, or read it only in part, and ``fallback=False`` was
    asked (the parse pool then runs the fallback off the event loop)."""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    s = str(value).strip()
    return s or None


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        x = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return x if x >= 0 and x != float("inf") else None


def _plain(value: Any) -> str:
    """Text of an HTML fragment: tags removed, entities decoded, white space collapsed."""
    text = _SCRIPT.sub(" ", _text(value) or "")    # what a sanitizer removes with its content
    return _SPACE.sub(" ", html.unescape(_TAG.sub(" ", text))).strip()


def _absolute(base: str, link: str) -> str | None:
    """``link`` resolved against the feed's URL (an RSS link has no other base)."""
    try:
        return urljoin(base, link) if not urlsplit(link).scheme else link
    except ValueError:          # e.g. an invalid IPv6 literal
        return None


def _sha1(text: str) -> str:
    return "sha1:" + hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def parse_feed(body: bytes, *, url: str, now: float, content_type: str | None = None,
               max_bytes: int | None = None, max_skew: float = MAX_SKEW,
               max_age: float = MAX_AGE, parser: str = DEFAULT_PARSER,
               limits: ParseLimits | None = None, fallback: bool = True) -> ParsedFeed:
    """Parse ``body`` (the raw bytes of a response from ``url``, fetched at unix time ``now``).

    Raises FeedError("empty" | "not_a_feed" | "malformed" | "too_large" | "encoding").
    ``parser`` reads RSS / Atom; JSON Feeds and sitemaps have their own readers.
    A feed with parse problems that still yields entries is returned with warnings.
    ``max_bytes`` overrides ``limits.max_bytes``. With ``fallback=False`` a body the parser
    refuses raises :class:`NeedsFallback` instead of being handed to feedparser.
    """
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"body must be bytes, got {type(body).__name__}")
    limits = limits or ParseLimits()
    if max_bytes is not None:
        limits = ParseLimits(max_bytes=max_bytes, max_entries=limits.max_entries,
                             max_field_chars=limits.max_field_chars)
    body = bytes(body)
    if len(body) > limits.max_bytes:
        raise FeedError("too_large", f"{len(body)} bytes from {url} (limit {limits.max_bytes})")
    if is_gzip(body):
        if detect(gunzip_head(body)) == SITEMAP:     # read as far as the entry cap, no further
            notices: list[str] = []
            chunks = _first_prepared(gunzip_chunks(body, max_bytes=limits.max_bytes, url=url),
                                     notices)
            return _sitemap(chunks, url=url, now=now, max_skew=max_skew, max_age=max_age,
                            limits=limits, warnings=[], notices=notices)
        body = gunzip(body, max_bytes=limits.max_bytes, url=url)
    if not body.strip():
        raise FeedError("empty", f"empty body from {url}")
    if detect(body) == JSON:
        return _convert(jsonfeed.parse(body, url=url, limits=limits), url=url, now=now,
                        max_skew=max_skew, max_age=max_age, limits=limits, warnings=[],
                        notices=[], parser=JSON_READER)
    ctype = (content_type or "").split(";")[0].strip().lower()
    looks_html = looks_like_html(body)
    warnings: list[str] = []
    notices: list[str] = []
    try:
        data, encoding_warning = to_utf8(body, content_type)
    except EncodingUnknown as exc:
        raise FeedError("encoding", f"{url}: {exc}") from None
    if encoding_warning:
        warnings.append(encoding_warning)
    data, stripped = strip_internal_subset(data)
    if stripped:
        notices.append("doctype_removed")
        warnings.append("DOCTYPE internal subset removed: entities are never expanded")
    if detect(data) == SITEMAP:
        return _sitemap([data], url=url, now=now, max_skew=max_skew, max_age=max_age,
                        limits=limits, warnings=warnings, notices=notices)
    adapter = get_parser(parser)
    raw, why = _run(adapter, data, url, limits)
    fieldless = _fieldless(raw.entries)
    if (why is not None or raw.incomplete or fieldless) and parser != FALLBACK_PARSER \
            and not looks_html:
        reason = why or _describe(raw.problem) or (
            f"{fieldless} entries without id, link, title or summary" if fieldless
            else "incomplete")
        if not fallback:
            raise NeedsFallback(reason)
        other, other_why = _run(get_parser(FALLBACK_PARSER), data, url, limits)
        if other_why is None and _usable(other.entries) >= _usable(raw.entries):
            notices.append("fallback_parser")
            warnings.append(f"{parser} could not read the feed ({reason}); "
                            f"parsed by {FALLBACK_PARSER}")
            raw, why, parser = other, None, FALLBACK_PARSER
    if raw.problem is not None:
        warnings.append(f"{type(raw.problem).__name__}: {raw.problem}")
    if not raw.version and not raw.entries:
        if looks_html or ctype in _HTML_TYPES:
            raise FeedError("not_a_feed", f"{url} returned an HTML page ({ctype or 'no type'})")
        if raw.problem is not None or why is not None:
            raise FeedError("malformed", f"{url}: {_describe(raw.problem) or why}")
        raise FeedError("not_a_feed", f"{url} is neither RSS nor Atom")
    if looks_html and not raw.version:
        raise FeedError("not_a_feed", f"{url} returned an HTML page")
    return _convert(raw, url=url, now=now, max_skew=max_skew, max_age=max_age, limits=limits,
                    warnings=warnings, notices=notices, parser=parser)


def _first_prepared(chunks, notices: list[str]):
    """``chunks`` with the DOCTYPE internal subset removed from the first (where the prolog
    is: no reader ever sees an entity declaration)."""
    first = True
    for chunk in chunks:
        if first:
            chunk, stripped = strip_internal_subset(chunk)
            if stripped:
                notices.append("doctype_removed")
            first = False
        yield chunk


def _sitemap(chunks, *, url: str, now: float, max_skew: float, max_age: float,
             limits: ParseLimits, warnings: list[str], notices: list[str]) -> ParsedFeed:
    raw = sitemap.parse(chunks, url=url, limits=limits)
    if not raw.version:
        raise FeedError("malformed", f"{url}: {_describe(raw.problem)}")
    if "doctype_removed" in notices and not any("DOCTYPE" in w for w in warnings):
        warnings.append("DOCTYPE internal subset removed: entities are never expanded")
    if raw.problem is not None:
        warnings.append(f"{type(raw.problem).__name__}: {raw.problem}")
    return _convert(raw, url=url, now=now, max_skew=max_skew, max_age=max_age, limits=limits,
                    warnings=warnings, notices=notices, parser=SITEMAP_READER)


def _describe(problem: BaseException | None) -> str | None:
    return f"{type(problem).__name__}: {problem}" if problem is not None else None


def _has_field(e: Mapping[str, Any]) -> bool:
    return any(_text(e.get(name)) for name in ("id", "link", "title", "summary"))


def _fieldless(entries) -> int:
    """How many entries have no id, link, title or summary: nothing to know them by."""
    return sum(not _has_field(e) for e in entries)


def _usable(entries) -> int:
    return len(entries) - _fieldless(entries)


def _run(adapter, data: bytes, url: str, limits: ParseLimits) -> tuple[RawFeed, str | None]:
    """(what the adapter read, why it counts as a refusal or None)."""
    try:
        raw = adapter.parse(data, url=url, limits=limits)
    except Exception as exc:   # a parser failing is a refusal, not a crash
        return RawFeed(version="", entries=[], problem=exc), _describe(exc)
    if not raw.version and not raw.entries:
        return raw, _describe(raw.problem) or "no feed found"
    return raw, None


def _convert(raw: RawFeed, *, url: str, now: float, max_skew: float, max_age: float,
             limits: ParseLimits, warnings: list[str], notices: list[str],
             parser: str) -> ParsedFeed:
    entries: list[FeedEntry] = []
    dropped = future = ancient = too_long = undated = 0
    keys: set[str] = set()
    cap = limits.max_field_chars
    for e in raw.entries:
        title, link = _text(e.get("title")), _text(e.get("link"))
        if link is not None and not link.startswith(("http://", "https://")):
            link = _absolute(url, link)
        if title is not None and len(title) > cap:
            title, too_long = title[:cap], too_long + 1
        if link is not None and len(link) > cap:
            link, too_long = None, too_long + 1
        key = _text(e.get("id")) or link
        if key is None:
            summary = _plain(e.get("summary"))
            plain_title = _plain(title)
            if not plain_title and not summary:
                dropped += 1
                continue
            key = _sha1(f"{plain_title}\x00{summary}")
        elif len(key) > cap:
            key, too_long = _sha1(key), too_long + 1
        published, absurd = _published(e, now, max_skew, max_age)
        future += absurd == "future"
        ancient += absurd == "ancient"
        undated += published is None and absurd is None
        keys.add(key)
        entries.append(FeedEntry(key=key, title=title, link=link, published=published,
                                 engagement=_engagement(e)))
    if raw.entries and not entries:
        raise FeedError("malformed", f"{url}: no entry has an id, link, title or summary")
    if raw.capped:
        notices.append("too_many_entries")
        warnings.append(f"more than {limits.max_entries} entries: the first "
                        f"{limits.max_entries} kept (WHITTLE_MAX_FEED_ENTRIES)")
    if too_long:
        notices.append("field_too_long")
        warnings.append(f"{too_long} titles, links or ids longer than {cap} characters cut, "
                        "dropped or hashed (WHITTLE_MAX_FIELD_LENGTH)")
    if dropped:
        notices.append("entries_dropped")
        warnings.append(f"{dropped} entries without id, link, title or summary dropped")
    if undated:
        notices.append("no_dates")
        warnings.append(f"{undated} entries without a publication date (the time first seen "
                        "is used)")
    if future:
        notices.append("future_dates")
        warnings.append(f"{future} publication dates in the future ignored")
    if ancient:
        notices.append("ancient_dates")
        warnings.append(f"{ancient} publication dates older than {max_age / 86400:.0f} days "
                        "ignored")
    if raw.sources_refused:
        notices.append("sources_refused")
        warnings.append(f"{raw.sources_refused} child sitemaps on another host or not http(s) "
                        "left out")
    if len(keys) < len(entries):
        notices.append("duplicate_ids")
        warnings.append(f"{len(entries) - len(keys)} entries repeat the id of an earlier one "
                        "(counted once)")
    return ParsedFeed(kind=raw.version or "unknown", entries=entries, warnings=warnings,
                      notices=tuple(dict.fromkeys(notices)), parser=parser, hints=raw.hints,
                      sources=raw.sources,
                      sources_partial=raw.version == sitemap.INDEX and (raw.capped
                                                                        or raw.incomplete))


def _published(e: Mapping[str, Any], now: float, max_skew: float,
               max_age: float) -> tuple[float | None, str | None]:
    """(publication time in unix seconds or None, "future" / "ancient" when absurd)."""
    stamp = e.get("published_parsed") or e.get("updated_parsed")
    if stamp is None:
        return None, None
    try:
        t = float(calendar.timegm(stamp))
    except (TypeError, ValueError, OverflowError):
        return None, None
    if t > now + max_skew:
        return None, "future"
    if t < now - max_age:
        return None, "ancient"
    return t, None


def _engagement(e: Mapping[str, Any]) -> float | None:
    engagement = _number(e.get("slash_comments"))
    return engagement if engagement is not None else _number(e.get("thr_total"))


__all__ = [
    "FEED_ERROR_KINDS", "MAX_AGE", "MAX_BYTES", "MAX_SKEW", "NOTICE_KINDS", "FeedEntry",
    "FeedError", "NeedsFallback", "ParseLimits", "ParsedFeed", "parse_feed",
]
