"""Sitemaps (https://www.sitemaps.org/protocol.html) and news sitemaps
(``xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"``), read into the entries every
parser returns (:class:`RawFeed`), so that :func:`scrapy_whittle.feeds.parse.parse_feed`
applies the same rules to them as to RSS / Atom.

* ``<urlset>``: one entry per ``<url>``: its ``<loc>`` is the entry's link and identity, its
  ``<news:publication_date>``, else its ``<lastmod>``, the publication time (W3C datetime), its
  ``<news:title>`` the title. A ``<url>`` without a date is an entry without one, as in a feed.
* ``<sitemapindex>``: no entries; its children's ``<loc>`` are :attr:`RawFeed.sources`,
  sources of their own (the crawl adds them: ``docs/parsing.md``). Only children on the
  index's own host are kept (the protocol's rule; a crawler that followed an index to other
  hosts could be made to fetch anything from anyone): the others are counted in
  ``RawFeed.sources_refused``.

Read with lxml's pull parser, fed chunk by chunk (streamed: each ``<url>`` is cleared once
read, so memory does not grow with the sitemap; the reading stops at ``limits.max_entries``,
and a gzip body is decompressed only as far as the reading went), with entities
never resolved, no network, no DTD and lxml's own bounds on depth and text size
(``huge_tree`` off). lxml is what Scrapy's own ``scrapy.utils.sitemap.Sitemap`` uses, but that
class flattens each ``<url>`` to its direct children's text (``news:publication_date`` and
``news:title`` are inside ``<news:news>``, lost), keeps the whole tree, and the feeds layer
does not import Scrapy. The body reaching here is already UTF-8 with no DOCTYPE internal
subset (the first chunk's, for a gzip body) and within the size limit
(:mod:`scrapy_whittle.feeds.parsers.prepare`, :func:`scrapy_whittle.feeds.kinds.gunzip_chunks`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from urllib.parse import urljoin, urlsplit

from scrapy_whittle.feeds.kinds import root_element, w3c_date
from scrapy_whittle.feeds.parsers.types import FeedError, ParseLimits, RawFeed

URLSET = "sitemap"
INDEX = "sitemapindex"


_ROOT_END = re.compile(rb"(?:</(?:[\w.-]+:)?(?:urlset|sitemapindex)\s*>|/>)\s*"
                       rb"(?:<!--.*?-->\s*|<\?.*?\?>\s*)*$", re.DOTALL)


class SitemapSyntaxError(ValueError):
    """The sitemap is not well-formed XML (what lxml's recovery read is kept)."""


def parse(chunks: Iterable[bytes], *, url: str, limits: ParseLimits) -> RawFeed:
    """The entries of the sitemap whose bytes are ``chunks`` (or the child sitemaps of a
    sitemap index), read until the chunks end or ``limits.max_entries`` are read: the chunks
    after that are never asked for (a gzip body is not decompressed further). A
    :class:`FeedError` the chunks raise (a gzip body too large once decompressed) passes."""
    from lxml import etree

    chunks = iter(chunks)
    first = next(chunks, b"")
    index = root_element(first) == b"sitemapindex"
    wanted = "sitemap" if index else "url"
    # only the <url> / <sitemap> elements are reported (lxml filters, in C)
    parser = etree.XMLPullParser(events=("end",), tag=("{*}" + wanted, wanted),
                                 resolve_entities=False, no_network=True, load_dtd=False,
                                 huge_tree=False, recover=True, remove_comments=True,
                                 remove_pis=True)
    entries: list[dict] = []
    sources: list[str] = []
    refused = 0
    capped = False
    problem: BaseException | None = None
    host = urlsplit(url).hostname
    try:
        last = first
        for chunk in itertools.chain((first,), chunks):
            last = chunk or last
            parser.feed(chunk)
            for _event, element in parser.read_events():
                parent = element.getparent()
                if parent is None or parent.getparent() is not None:
                    continue                # the root itself, or a <url> of an extension
                if len(entries) + len(sources) + refused >= limits.max_entries:
                    capped = True
                    break
                loc, title, published, modified = _read(element)
                _forget(element)
                if loc is None:             # nothing to know it by: dropped, counted
                    if not index:
                        entries.append({})
                    continue
                link = loc if loc.startswith(("https://", "http://")) or \
                    urlsplit(loc).scheme else urljoin(url, loc)
                if index:
                    parts = urlsplit(link)
                    if parts.scheme in ("http", "https") and parts.hostname == host:
                        sources.append(link)
                    else:
                        refused += 1
                    continue
                entries.append({"link": link, "title": title,
                                "published_parsed": w3c_date(published) or w3c_date(modified)})
            if capped:
                break
        if not capped:
            parser.close()
    except FeedError:
        raise
    except (etree.LxmlError, ValueError) as exc:   # what recover could not get past
        problem = exc
    if problem is None and not capped:
        errors = parser.error_log.filter_from_errors()
        if errors:                    # what recover got past: the sitemap is broken
            first_error = errors[0]
            problem = SitemapSyntaxError(f"line {first_error.line}: {first_error.message} "
                                         f"({len(errors)} errors)")
        elif not _ROOT_END.search(last[-256:]):     # recover ends a cut body silently
            problem = SitemapSyntaxError("the body ends before the root element does")
    version = INDEX if index else URLSET
    if problem is not None and not entries and not sources:
        version = ""
    return RawFeed(version=version, entries=entries, problem=problem, capped=capped,
                   incomplete=problem is not None, sources=tuple(dict.fromkeys(sources)),
                   sources_refused=refused)


def _read(element) -> tuple[str | None, str | None, str | None, str | None]:
    """(loc, news:title, news:publication_date, lastmod) of a ``<url>`` or ``<sitemap>``
    (children in any namespace, or none). One pass over the children, names compared by
    their ends: several times faster than ``findtext("{*}loc")`` and the like."""
    loc = title = published = modified = None
    for child in element:
        tag = child.tag
        if not isinstance(tag, str):              # an entity reference left unresolved
            continue
        if tag.endswith("}loc") or tag == "loc":
            loc = child.text
        elif tag.endswith("}lastmod") or tag == "lastmod":
            modified = child.text
        elif tag.endswith("}news") or tag == "news":
            for field in child:
                inner = field.tag
                if not isinstance(inner, str):
                    continue
                if inner.endswith("}publication_date") or inner == "publication_date":
                    published = field.text
                elif inner.endswith("}title") or inner == "title":
                    title = field.text
    return _strip(loc), _strip(title), _strip(published), _strip(modified)


def _strip(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text or None


def _forget(element) -> None:
    """Free what was read: the element's content and the siblings before it."""
    element.clear(keep_tail=False)
    parent = element.getparent()
    if parent is not None:
        while element.getprevious() is not None:
            del parent[0]
