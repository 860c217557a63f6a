"""Finding a site's feeds: what its home page, its HTTP headers and its robots.txt name, and
the few paths sites put feeds at when they name none.

Pure functions of bytes and strings (no fetching): :mod:`scrapy_whittle.scrapy.site_search`
fetches the pages through Scrapy and hands them here.

* A home page names its feeds in ``<link rel="alternate" type="...">`` elements
  (:func:`page_feeds`), an HTTP response in ``Link`` headers of the same shape
  (:func:`header_feeds`, RFC 8288). The types taken are those of RSS, Atom, RSS 1.0 (RDF) and
  JSON Feed (``FEED_TYPES``); a plain ``application/json`` link is taken unless it points
  into WordPress's REST API (``/wp-json/``), which pages link with that type too. A page's
  ``<base href>`` is honoured.
* Comments feeds are left out (a title or URL that speaks of comments): they carry readers'
  replies, not stories, and WordPress links one from every page.
* robots.txt names sitemaps in ``Sitemap:`` lines (:func:`robots_sitemaps`: all of them for
  a site at its host's root, those under its folder for a site that is a folder of a host).
  Most are the site's whole archive, not news: one is taken only when what it serves is a
  news sitemap (:func:`is_news_sitemap`); the crawl reads news sitemaps like feeds.
* When neither the page nor its headers name a feed, the usual feed paths are tried
  (:data:`FEED_PATHS`, at the host's root and, for a site that is a folder of a host, under
  that folder; the list follows what feed readers such as Miniflux try), and when robots.txt
  names no sitemap the usual names of news sitemaps (:data:`SITEMAP_PATHS`). A guess counts
  only if what it serves reads as a feed (:func:`serves_feed`): many sites answer an unknown
  path with their home page.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import urljoin, urlsplit

from scrapy_whittle.feeds.kinds import gunzip_head, is_gzip, root_element
from scrapy_whittle.feeds.parse import parse_feed
from scrapy_whittle.feeds.parsers.types import FeedError

#: the ``type`` of a ``<link rel="alternate">`` that names a feed
FEED_TYPES = frozenset({"application/rss+xml", "application/atom+xml", "application/rdf+xml",
                        "application/feed+json", "application/json"})

#: tried, in this order, when a site's page and headers name no feed; the first that serves
#: a feed is taken (several are often one feed in several formats)
FEED_PATHS = ("feed", "rss", "atom.xml", "feed.xml", "rss.xml", "index.xml", "index.rss",
              "feed.atom", "feed.json", "rss/feed.xml")
#: tried the same way when robots.txt names no sitemap
SITEMAP_PATHS = ("sitemap_news.xml", "news-sitemap.xml", "sitemap-news.xml")
WELL_KNOWN_PATHS = FEED_PATHS + SITEMAP_PATHS

_COMMENTS = re.compile(r"(?<![a-z])comments?(?![a-z])", re.IGNORECASE)


class FoundFeed(NamedTuple):
    """A feed a site names: its absolute URL, and the title it gives it ("" if none)."""

    url: str
    title: str = ""


def is_comments_feed(url: str, title: str) -> bool:
    """Whether a named feed is one of readers' comments (not taken)."""
    return bool(_COMMENTS.search(title) or _COMMENTS.search(urlsplit(url).path))


def _taken(href: str, ftype: str, title: str, base: str) -> FoundFeed | None:
    """The feed a link names, or None when the link is no feed, a comments feed, or not
    http(s)."""
    ftype = ftype.split(";")[0].strip().lower()
    href = href.strip()
    if ftype not in FEED_TYPES or not href:
        return None
    if ftype == "application/json" and "/wp-json/" in href:
        return None
    url = urljoin(base, href)
    if urlsplit(url).scheme not in ("http", "https"):
        return None
    title = " ".join(title.split())
    if is_comments_feed(url, title):
        return None
    return FoundFeed(url.split("#")[0], title)


def _unique(found: list[FoundFeed]) -> list[FoundFeed]:
    seen: set[str] = set()
    out = []
    for feed in found:
        if feed.url not in seen:
            seen.add(feed.url)
            out.append(feed)
    return out


def page_feeds(body: bytes, url: str) -> list[FoundFeed]:
    """The feeds an HTML page at ``url`` names in its ``<link rel="alternate">`` elements, in
    document order, once each. A page lxml cannot read names none."""
    import lxml.etree
    import lxml.html

    try:
        doc = lxml.html.document_fromstring(body)
    except (lxml.etree.ParserError, ValueError):
        return []
    base = url
    for element in doc.iter("base"):
        href = (element.get("href") or "").strip()
        if urlsplit(href).scheme in ("http", "https"):
            base = href
        break
    found = []
    for element in doc.iter("link"):
        rel = (element.get("rel") or "").lower().split()
        if "alternate" not in rel:
            continue
        feed = _taken(element.get("href") or "", element.get("type") or "",
                      element.get("title") or "", base)
        if feed is not None:
            found.append(feed)
    return _unique(found)


# one link of a Link header: <uri> then ;-separated parameters (RFC 8288)
_LINK = re.compile(r'\s*<([^>]*)>((?:\s*;\s*[^;,="]+(?:=(?:"[^"]*"|[^;,"]*))?)*)\s*,?')
_PARAM = re.compile(r'\s*;\s*([^;,="\s]+)\s*(?:=\s*(?:"([^"]*)"|([^;,"\s]*)))?')


def header_links(values: list[str]) -> list[tuple[str, dict[str, str]]]:
    """The links of HTTP ``Link`` header values: (target, parameters with lower-case names)."""
    out = []
    for value in values:
        pos = 0
        while pos < len(value):
            m = _LINK.match(value, pos)
            if m is None or m.end() == pos:
                break
            params = {p.group(1).lower(): p.group(2) if p.group(2) is not None
                      else (p.group(3) or "") for p in _PARAM.finditer(m.group(2))}
            out.append((m.group(1), params))
            pos = m.end()
    return out


def header_feeds(values: list[str], url: str) -> list[FoundFeed]:
    """The feeds named by ``Link: <...>; rel="alternate"; type="..."`` headers of a response
    from ``url``."""
    found = []
    for target, params in header_links(values):
        if "alternate" not in params.get("rel", "").lower().split():
            continue
        feed = _taken(target, params.get("type", ""), params.get("title", ""), url)
        if feed is not None:
            found.append(feed)
    return _unique(found)


_SITEMAP_LINE = re.compile(r"^\s*sitemap\s*:\s*(\S+)", re.IGNORECASE | re.MULTILINE)


def robots_sitemaps(text: str, site: str) -> list[FoundFeed]:
    """The sitemaps a robots.txt names for ``site``: all of them for a site at its host's
    root (a host may keep its sitemaps on another, as news sites do on a CDN); for a site
    that is a folder of its host (``https://example.com/blog/``), those under that folder."""
    home = urlsplit(site)
    folder = home.path.rsplit("/", 1)[0] + "/"
    found = []
    for m in _SITEMAP_LINE.finditer(text):
        url = urljoin(site, m.group(1))
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            continue
        if folder == "/" or (parts.netloc == home.netloc and parts.path.startswith(folder)):
            found.append(FoundFeed(url))
    return _unique(found)


def well_known_urls(site: str, paths: tuple[str, ...] = WELL_KNOWN_PATHS) -> list[str]:
    """The URLs ``paths`` name for ``site``: at its host's root, then under its folder if it
    is one."""
    root = urljoin(site, "/")
    folder = urljoin(site, "./")
    bases = [root] if folder == root else [root, folder]
    return [urljoin(base, path) for base in bases for path in paths]


NEWS_NS = b"http://www.google.com/schemas/sitemap-news/0.9"


def _head(body: bytes) -> bytes:
    return gunzip_head(body) if is_gzip(body) else body[:65536]


def is_sitemap(body: bytes) -> bool:
    """Whether ``body`` (gzip or not) is a sitemap or a sitemap index."""
    return root_element(_head(body)) in (b"urlset", b"sitemapindex")


def is_news_sitemap(body: bytes, url: str) -> bool:
    """Whether ``body`` (from ``url``; gzip or not) is a news sitemap: a ``<urlset>`` that
    declares the news namespace in its first 64 KB, or a ``<sitemapindex>`` whose URL names
    news (an index says nothing of its children's kind but in their names and its own)."""
    head = _head(body)
    root = root_element(head)
    if root == b"urlset":
        return NEWS_NS in head
    return root == b"sitemapindex" and "news" in urlsplit(url).path.lower()


def serves_feed(body: bytes, url: str, content_type: str | None, *, now: float,
                max_bytes: int) -> bool:
    """Whether ``body`` reads as a feed (RSS, Atom, JSON Feed, a sitemap) to the crawl's own
    parser: the rule by which an address is a feed or not, whatever its name or type says."""
    try:
        parse_feed(body, url=url, now=now, content_type=content_type, max_bytes=max_bytes)
    except FeedError:
        return False
    return True
