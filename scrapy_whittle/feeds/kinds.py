"""What kind of source a body is, told from the body alone (never from the URL or the
Content-Type, which publishers get wrong): a gzip body is told from what it decompresses to
(its first ``CHUNK`` bytes; it is then decompressed a chunk at a time, bounded); then
a body whose first character is ``{`` is a JSON document (:mod:`scrapy_whittle.feeds.jsonfeed`
reads it if it is a JSON Feed), one whose root element is ``urlset`` or ``sitemapindex`` a
sitemap (:mod:`scrapy_whittle.feeds.sitemap`), anything else RSS / Atom for the feed parsers.

Also here: the reading of the dates these kinds write (RFC 3339 / W3C datetime), shared by
JSON Feed and sitemaps.
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime

from scrapy_whittle.feeds.parsers.types import FeedError

GZIP_MAGIC = b"\x1f\x8b"
#: bytes decompressed at a time (and looked at to tell a body's kind)
CHUNK = 64 * 1024
JSON = "json"
SITEMAP = "sitemap"
XML = "xml"

_ROOT = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?([A-Za-z_][\w.-]*)")
_BOM = b"\xef\xbb\xbf"


def is_gzip(body: bytes) -> bool:
    return body[:2] == GZIP_MAGIC


def gunzip(body: bytes, *, max_bytes: int, url: str) -> bytes:
    """``body`` decompressed, at most ``max_bytes`` of it (see :func:`gunzip_chunks`)."""
    return b"".join(gunzip_chunks(body, max_bytes=max_bytes, url=url))


def gunzip_chunks(body: bytes, *, max_bytes: int, url: str,
                  chunk: int = CHUNK) -> Iterator[bytes]:
    """``body`` (gzip, several members allowed) decompressed ``chunk`` bytes at a time, so
    that a reader may stop early (a sitemap read up to its entry cap) and never holds more
    than a chunk of output. More than ``max_bytes`` of output (a gzip bomb, or a body past
    the size limit) is the error ``too_large``, raised once ``max_bytes + 1`` bytes have come
    out, not after all of them; corrupt or cut data is ``malformed``."""
    size = 0
    data = body
    try:
        while data:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while data:
                out = inflater.decompress(data, chunk)
                size += len(out)
                if size > max_bytes:
                    raise FeedError("too_large", f"{url}: gzip body over {max_bytes} bytes "
                                    "once decompressed")
                if out:
                    yield out
                data = inflater.unconsumed_tail
                if inflater.eof:
                    break
            if not inflater.eof:
                raise FeedError("malformed", f"{url}: gzip body cut short")
            data = inflater.unused_data
            if data and not is_gzip(data):      # trailing junk after the last member
                break
    except zlib.error as exc:
        raise FeedError("malformed", f"{url}: gzip body unreadable ({exc})") from None


def gunzip_head(body: bytes, size: int = CHUNK) -> bytes:
    """The first ``size`` bytes ``body`` decompresses to (fewer if it is shorter; b"" if it
    is not gzip), to tell its kind."""
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, size)
    except zlib.error:
        return b""


def detect(body: bytes) -> str:
    """``JSON``, ``SITEMAP`` or ``XML`` (RSS, Atom, or something no parser will read)."""
    head = body[:4096].lstrip()
    if head.startswith(_BOM):
        head = head[len(_BOM):].lstrip()
    if head[:1] == b"{":
        return JSON
    name = root_element(body)
    return SITEMAP if name in (b"urlset", b"sitemapindex") else XML


def root_element(body: bytes, window: int = 65536) -> bytes | None:
    """The local name of the first element of ``body`` after its prolog (declaration,
    processing instructions, comments, DOCTYPE), looked for in its first ``window`` bytes."""
    head = body[:window]
    i = head.find(b"<")
    while 0 <= i < len(head):
        if head.startswith(b"<?", i):
            j = head.find(b"?>", i + 2)
        elif head.startswith(b"<!--", i):
            j = head.find(b"-->", i + 4)
        elif head.startswith(b"<!", i):
            j = head.find(b">", i + 2)
        else:
            match = _ROOT.match(head, i)
            return match.group(1) if match else None
        if j < 0:
            return None
        i = head.find(b"<", j + 1)
    return None


def w3c_date(value: object) -> time.struct_time | None:
    """A W3C datetime / RFC 3339 date (``2026-11-25``, ``2026-11-25T08:00+01:00``,
    ``2026-11-25T08:00:00.5Z``) as a UTC ``struct_time``; a date without a zone is taken as
    UTC. None for anything else (a wrong type included)."""
    if not isinstance(value, str) or not 10 <= len(value.strip()) <= 64:
        return None
    text = value.strip()
    if text[-1:] in "zZ":
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC).timetuple()
    except (OverflowError, ValueError):
        return None
