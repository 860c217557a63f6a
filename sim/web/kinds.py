"""Sources of every kind on the simulated web (``python -m sim.serve --kinds mix``).

With ``mix``, source i is served as RSS 2.0 (i % 4 == 0), Atom (1), JSON Feed 1.1 (2) or a
news sitemap (3), all at ``/feed/<i>.xml`` (the crawler tells the kind from the body, never
from the URL), with the same items, ETag and Last-Modified as any feed. The news sitemaps
with i % 8 == 7 are not in ``/feeds.opml``: one sitemap index, ``/sitemap_index.xml``, lists
them at ``/sitemap/<i>.xml.gz`` (served gzip-compressed as the body, ``application/gzip``, as
sites serve ``.xml.gz`` sitemaps), so a crawler finds them only through the index. Without
``--kinds`` the web is as before (RSS for even i, Atom for odd i).

``--index-rotate T`` (scenario time units): the index lists half its children at a time, as
sites rotate their daily news sitemaps through their index: the j-th child (in source order)
is listed while ``(j + floor(t / T))`` is even, so every T the listed half is rotated out and
the other half in (its ETag changes with it). The children stay served when not listed.

JSON Feed and sitemaps carry no comment count: a crawler values their entries with its
default item value, not the served engagement.
"""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from xml.sax.saxutils import escape

KINDS = ("rss", "atom", "json", "sitemap")
INDEX_PATH = "/sitemap_index.xml"
NEWS_NS = "http://www.google.com/schemas/sitemap-news/0.9"
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_kinds(spec: str | None) -> str | None:
    """``--kinds``: "" / None (RSS and Atom only) or "mix"; ValueError otherwise."""
    if not spec:
        return None
    if spec != "mix":
        raise ValueError(f"--kinds must be 'mix' (got {spec!r})")
    return spec


class SourceKinds:
    """Which kind each source is served as, where, and how it is rendered."""

    def __init__(self, n: int, mix: str | None, rotate: float = 0.0) -> None:
        if not rotate >= 0:
            raise ValueError(f"the index's rotation ({rotate!r}) must be >= 0")
        self.n, self.mix, self.rotate = n, mix, float(rotate)

    def kind(self, i: int) -> str:
        if self.mix is None:
            return KINDS[i % 2]
        return KINDS[i % 4]

    def indexed(self, i: int) -> bool:
        """Whether source i is listed only in the sitemap index."""
        return self.mix is not None and i % 8 == 7

    def url(self, base: str, i: int) -> str:
        return f"{base}/sitemap/{i}.xml.gz" if self.indexed(i) else f"{base}/feed/{i}.xml"

    def listed(self, base: str) -> list[tuple[str, str]]:
        """(name, URL) of the sources of ``/feeds.opml``: every source not behind the index,
        then the index."""
        listed = [(f"source {i}", self.url(base, i)) for i in range(self.n)
                  if not self.indexed(i)]
        if any(self.indexed(i) for i in range(self.n)):
            listed.append(("sitemap index", base + INDEX_PATH))
        return listed

    def source_of(self, path: str) -> int | None:
        """The source a ``/sitemap/<i>.xml.gz`` path serves, or None."""
        if not (path.startswith("/sitemap/") and path.endswith(".xml.gz")):
            return None
        try:
            i = int(path[len("/sitemap/"):-len(".xml.gz")])
        except ValueError:
            return None
        return i if 0 <= i < self.n and self.indexed(i) else None

    def phase(self, now: float) -> int:
        """Which half of the children the index lists at scenario time ``now`` (0 without
        rotation: all of them)."""
        return int(now // self.rotate) % 2 if self.rotate else 0

    def listed_children(self, now: float) -> list[int]:
        """The sources the index lists at scenario time ``now``."""
        children = [i for i in range(self.n) if self.indexed(i)]
        if not self.rotate:
            return children
        phase = self.phase(now)
        return [i for j, i in enumerate(children) if (j + phase) % 2 == 0]

    def index(self, base: str, now: float = 0.0) -> bytes:
        entries = "".join(f"<sitemap><loc>{escape(self.url(base, i))}</loc></sitemap>"
                          for i in self.listed_children(now))
        return (f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{SITEMAP_NS}">'
                f"{entries}</sitemapindex>").encode()

    def render(self, i: int, items, real, base: str) -> tuple[bytes, str]:
        """(body, Content-Type) of source i of kind json or sitemap; ``real`` maps a
        scenario time to unix seconds."""
        if self.kind(i) == "json":
            return json_feed(i, items, real, base), "application/feed+json"
        body = news_sitemap(i, items, real, base)
        if self.indexed(i):
            return gzip.compress(body, compresslevel=1, mtime=0), "application/gzip"
        return body, "application/xml"


def json_feed(i: int, items, real, base: str) -> bytes:
    return json.dumps({
        "version": "https://jsonfeed.org/version/1.1", "title": f"Simulated source {i}",
        "home_page_url": f"{base}/source/{i}", "feed_url": f"{base}/feed/{i}.xml",
        "items": [{"id": f"urn:sim:{i}:{it.seq}", "url": f"{base}/item/{i}/{it.seq}",
                   "title": f"Item {it.seq} of source {i}",
                   "content_text": f"Item {it.seq} of source {i}",
                   "date_published": _iso(real(it.published)),
                   "authors": [{"name": f"Desk {i}"}]} for it in items],
    }).encode()


def news_sitemap(i: int, items, real, base: str) -> bytes:
    out = [f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SITEMAP_NS}" '
           f'xmlns:news="{NEWS_NS}">']
    for it in items:
        when = _iso(real(it.published))
        out.append(f"<url><loc>{base}/item/{i}/{it.seq}</loc><lastmod>{when}</lastmod>"
                   "<news:news><news:publication><news:name>Simulated source "
                   f"{i}</news:name><news:language>en</news:language></news:publication>"
                   f"<news:publication_date>{when}</news:publication_date>"
                   f"<news:title>Item {it.seq} of source {i}</news:title></news:news></url>")
    out.append("</urlset>")
    return "".join(out).encode()
