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
  zone, taken for UTC), is read by feedparser's date parser from the raw string;
* links: it blanks a link to a loopback, private or intranet host (``127.0.0.1``,
  ``localhost``, ``10.x``, ``192.168.x``: a guard against server-side request forgery,
  which matters to a client that follows links, not to a crawler that reports them), and
  keeps no copy of it. Such an entry's link is read again from the body: the entries' raw
  links are picked out with regular expressions by feedparser-rs's own rules (RSS: the
  last ``<link>``, else a permalink ``<guid>``; Atom: the first alternate ``<link>``) and
  matched to its entries by position. Only a feed with a blanked link pays for that scan.
  CDATA sections holding markup and comments are left out of the scan; where the count of
  raw entries still does not match its entries (prefixed elements such as ``<atom:entry>``),
  the links come from feedparser instead.
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
    blanked = [k for k, e in enumerate(entries) if e["link"] == ""]
    if blanked:
        _restore_links(entries, blanked, data, parsed.get("version") or "", capped)
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


_NOT_PERMALINK = re.compile(rb"isPermaLink\s*=\s*[\"']false[\"']")
_ATTR = re.compile(rb"""([\w:.-]+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_CDATA = re.compile(rb"<!\[CDATA\[(.*?)\]\]>", re.S)


def _restore_links(entries: list[dict], blanked: list[int], data: bytes, version: str,
                   capped: bool) -> None:
    """Put back the links feedparser-rs blanked (``""``), read from the raw ``data``."""
    raw = _raw_links(data, atom=version.startswith("atom"))
    if not (len(raw) == len(entries) or (capped and len(raw) > len(entries))):
        raw = _reference_links(data)
        if len(raw) < len(entries):
            raw = []
    for k in blanked:
        entries[k]["link"] = raw[k] if k < len(raw) else None


def _raw_links(data: bytes, atom: bool) -> list[str | None]:
    """Each entry's link in the body, as feedparser-rs picks it, before its host filter."""
    # markup quoted in CDATA or a comment is no element: not scanned
    data = _drop_quoted(data, b"<!--", b"-->", keep_plain=False)
    data = _drop_quoted(data, b"<![CDATA[", b"]]>", keep_plain=True)
    # bytes.split and .find rather than one regular expression over the body: several
    # times faster on long descriptions
    name, pick = (b"entry", _atom_link) if atom else (b"item", _rss_link)
    links = []
    for chunk in data.split(b"<" + name)[1:]:
        if chunk[:1] not in _AFTER_NAME:        # <items>, <entryPoint>: another element
            continue
        end = chunk.find(b"</" + name)
        links.append(pick(chunk if end < 0 else chunk[:end]))
    return links


_AFTER_NAME = frozenset((b">", b" ", b"\t", b"\n", b"\r", b"/"))


def _tags(item: bytes, name: bytes, last: bool):
    """Each ``<name ...>`` start tag of ``item`` (its end, its attributes), the last first or
    the first first."""
    start = b"<" + name
    n = len(start)
    pos = item.rfind(start) if last else item.find(start)
    while pos >= 0:
        tag_end = item.find(b">", pos)
        if tag_end < 0:
            return
        if item[pos + n:pos + n + 1] in _AFTER_NAME:
            yield tag_end, item[pos + n:tag_end]
        pos = item.rfind(start, 0, pos) if last else item.find(start, pos + 1)


def _element_text(item: bytes, name: bytes, last: bool) -> tuple[bytes, bytes] | None:
    """(attributes, content) of the first or last ``<name>`` element of ``item``."""
    for tag_end, attrs in _tags(item, name, last):
        close = item.find(b"</" + name, tag_end)
        if close >= 0 and not attrs.endswith(b"/"):
            return attrs, item[tag_end + 1:close]
    return None


def _drop_quoted(data: bytes, start: bytes, end: bytes, keep_plain: bool) -> bytes:
    """``data`` without its ``start...end`` sections (those without markup kept where
    ``keep_plain``: a link may be written in CDATA)."""
    pos = data.find(start)
    if pos < 0:
        return data
    kept, done = [], 0
    while pos >= 0:
        close = data.find(end, pos + len(start))
        if close < 0:
            break
        close += len(end)
        if not keep_plain or data.find(b"<", pos + len(start), close - len(end)) >= 0:
            kept.append(data[done:pos])
            done = close
        pos = data.find(start, close)
    kept.append(data[done:])
    return b"".join(kept)


def _rss_link(item: bytes) -> str | None:
    link = _element_text(item, b"link", last=True)   # feedparser-rs keeps the last one
    if link is not None:
        return _text(link[1])
    guid = _element_text(item, b"guid", last=False)
    if guid is not None and not _NOT_PERMALINK.search(guid[0]):
        return _text(guid[1])
    return None


def _atom_link(entry: bytes) -> str | None:
    for _, tag in _tags(entry, b"link", last=False):
        attrs = {k: v or w for k, v, w in _ATTR.findall(tag)}
        if attrs.get(b"rel", b"alternate").strip() == b"alternate" and b"href" in attrs:
            return html.unescape(attrs[b"href"].decode("utf-8", "replace")).strip() or None
    return None


def _text(raw: bytes) -> str | None:
    cdata = _CDATA.search(raw)
    text = cdata.group(1) if cdata else raw
    text = text.decode("utf-8", "replace")
    return (text if cdata else html.unescape(text)).strip() or None


def _reference_links(data: bytes) -> list[str | None]:
    """feedparser's links of the entries, where the raw scan cannot be matched."""
    import feedparser

    return [e.get("link") or None for e in feedparser.parse(data).entries]


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
