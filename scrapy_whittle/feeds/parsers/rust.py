"""Adapter of feedparser-rs (a Rust parser with feedparser's API and field names).

Checked on version 0.7.1 (``docs/parsing.md``): it never resolves entities, internal or
external (a reference stays as text), it fetches nothing when given bytes (only ``str``
sources that look like URLs are fetched, so it is always handed bytes here), and it keeps
the GIL while it parses (two threads parse no faster than one), so large bodies go to the
worker processes of the parse pool. It stops reading entries at ``ParserLimits.max_entries``
and keeps the first ones in feed order. It takes no HTTP headers: the body arrives already
in UTF-8 (``prepare.to_utf8``). Its HTML sanitizer is off (see below), which about halves
its time. Timings are in ``docs/parsing.md``.

A feed it reads only in part (an XML syntax error, or no entry at all with errors) is marked
``incomplete``, and ``parse_feed`` also asks feedparser, whose lenient mode often reads more.

Two corrections bring its output to feedparser's (``docs/parsing.md``):

* titles: its HTML sanitizer is off (it costs about as much as the parse itself, and with
  it on it escapes text titles as HTML: ``Fish &amp; chips``). A title is text, as
  feedparser reads it, unless the feed declares HTML titles (``<title type="html">``):
  then one with markup goes through feedparser's sanitizer (scripts and event handlers
  removed), as feedparser does; in a feed with HTML entities undefined in XML
  (``Caf&eacute;``), titles are unescaped, as feedparser's lenient parser reads them;
* dates: a date it cannot read (``... CEST``), or reads wrongly (ISO 8601 with a ``+0100``
  zone, taken for UTC), is read by feedparser's date parser from the raw string.
"""

from __future__ import annotations

import html
import re

from scrapy_whittle.feeds.hints import FeedHints, feed_hints
from scrapy_whittle.feeds.parsers.types import ParseLimits, RawFeed

NAME = "feedparser-rs"
#: bodies up to this size are parsed on the event loop, where they cost less than the round
#: trip to a worker; a larger one costs the loop less in a worker (sending it and reading the
#: result back) than parsed inline
INLINE_MAX_BYTES = 16 * 1024

_LIMIT_EXCEEDED = "Entry limit exceeded"
_XML_ERROR = "XML parsing error"
_UNRESOLVED = "Unresolvable entity"
_HTML_TITLES = re.compile(rb"<title[^>]*\stype\s*=\s*[\"'](?:html|text/html|xhtml)[\"']")
_TAG = re.compile(r"<\s*/?\s*[A-Za-z][^>]*>")
_ISO_ZONE_NO_COLON = re.compile(r"\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?\s*[+-]\d{4}$")


class ParserFailed(RuntimeError):
    """feedparser-rs raised (or panicked) on this body."""


def available() -> str | None:
    """None when usable, else why not."""
    try:
        import feedparser_rs  # noqa: F401
    except ImportError as exc:
        return f"feedparser-rs is not installed ({exc}): pip install feedparser-rs"
    return None


def parse(data: bytes, *, url: str, limits: ParseLimits) -> RawFeed:
    """Parse UTF-8 ``data`` (prepared by :mod:`scrapy_whittle.feeds.parsers.prepare`)."""
    import feedparser_rs

    rs_limits = feedparser_rs.ParserLimits(max_entries=limits.max_entries,
                                           max_feed_size_bytes=max(limits.max_bytes,
                                                                   len(data)))
    try:
        parsed = feedparser_rs.parse_with_limits(bytes(data), limits=rs_limits,
                                                 sanitize_html=False)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:    # a Rust panic arrives as pyo3's PanicException
        raise ParserFailed(f"{type(exc).__name__}: {exc}") from exc
    problem = parsed.get("bozo_exception") if parsed.get("bozo") else None
    capped = False
    if problem is not None and _LIMIT_EXCEEDED in str(problem):
        capped, problem = True, None
    html_titles = _HTML_TITLES.search(data) is not None
    unresolved = problem is not None and _UNRESOLVED in str(problem)
    entries = [_entry(e, html_titles, unresolved) for e in parsed.entries]
    incomplete = problem is not None and (not entries or
                                          str(problem).startswith(_XML_ERROR))
    return RawFeed(version=parsed.get("version") or "", entries=entries,
                   problem=_as_exception(problem), capped=capped, incomplete=incomplete,
                   hints=_hints(parsed.feed))


def _hints(feed) -> FeedHints:
    get = feed.get
    return feed_hints(get("ttl"), get("skiphours"), get("skipdays"), get("sy_updateperiod"),
                      get("sy_updatefrequency"))


def _entry(e, html_titles: bool, unresolved: bool) -> dict:
    # every .get converts a Rust value to Python: ask only for what will be used
    get = e.get
    entry_id, link, title = get("id"), get("link"), get("title")
    if title:
        if html_titles:
            if "<" in title and _TAG.search(title):
                title = _sanitize(title)
        elif unresolved and "&" in title:      # HTML entities in XML: what feedparser reads
            title = html.unescape(title)
    published, updated = get("published_parsed"), None
    raw = get("published")
    if raw and (published is None or _ISO_ZONE_NO_COLON.search(raw)):
        published = _parse_date(raw)
    if published is None:
        updated = get("updated_parsed")
        raw = get("updated")
        if raw and (updated is None or _ISO_ZONE_NO_COLON.search(raw)):
            updated = _parse_date(raw)
    comments = get("slash_comments")
    return {"id": entry_id, "title": title, "link": link,
            "summary": get("summary") if not (entry_id or link) else None,
            "published_parsed": published, "updated_parsed": updated,
            "slash_comments": comments,
            "thr_total": get("thr_total") if comments is None else None}


def _sanitize(fragment: str) -> str:
    """feedparser's HTML sanitizer (scripts, event handlers, ... removed)."""
    from feedparser.sanitizer import _sanitize_html  # the sanitizer feedparser applies

    return _sanitize_html(fragment, "utf-8", "text/html")


def _parse_date(raw: str):
    """feedparser's reading of a date string (struct_time in UTC or None)."""
    from feedparser.datetimes import _parse_date as parse_date  # feedparser's date parser

    try:
        return parse_date(raw)
    except Exception:      # a date parser failing on garbage loses only the date
        return None


def _as_exception(problem) -> BaseException | None:
    if problem is None or isinstance(problem, BaseException):
        return problem
    return ParserFailed(str(problem))
