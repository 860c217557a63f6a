"""News sites on the simulated web (``python -m sim.serve --sites K``): home pages that link
their feeds the ways real sites do, so that a crawl can start from sites' addresses offline.

The listed sources (those of ``/feeds.opml`` but the sitemap index) are dealt among K sites
in an order drawn from the seed; each site has a host of its own (a port of its own on
127.0.0.1), and one more site has no feed at all. A site's home page ``/`` carries the
boilerplate of a news front page (navigation, teasers, scripts, a footer) and names its feeds
in one of three ways, by its style (site j: ``STYLES[j % 4]``):

* ``links``: ``<link rel="alternate" type="...">`` in ``<head>``, one per feed, with the type
  of its kind (RSS, Atom, JSON Feed);
* ``header``: HTTP ``Link: <url>; rel="alternate"; type="..."`` headers only;
* ``well-known``: nothing; its first feed is at a usual path of its host (``/feed``, or for
  odd j/4 ``/rss.xml``, with ``/feed`` redirecting to the home page as many sites do with a
  path they do not know), a 301 to the feed. Its other feeds are linked nowhere.

News sitemaps (``--kinds mix``) are named in the site's ``/robots.txt`` (``Sitemap:``), in
every style, after its archive ``/sitemap.xml`` (a sitemap of its pages, not of news: a
decoy). Every page also carries decoys a finder must not take: a comments feed
(``/comments/feed/``, real RSS of readers' comments), an ``hreflang`` alternate, a WordPress
REST link typed ``application/json``, a "RSS" anchor to a help page, and a non-feed ``Link``
header. ``/home`` is an old address of the home page (a 301 to ``/``).
:meth:`SimSites.linked` is the truth: the feeds each site links, in one of those ways.
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

import numpy as np

from sim.web.kinds import SITEMAP_NS, SourceKinds

STYLES = ("links", "links", "header", "well-known")
TYPES = {"rss": "application/rss+xml", "atom": "application/atom+xml",
         "json": "application/feed+json"}


class SimSites:
    """K sites sharing ``kinds``' listed sources (dealt in an order drawn from ``seed``), and
    one site without feeds."""

    def __init__(self, kinds: SourceKinds, k: int, seed: int = 0) -> None:
        if k < 1:
            raise ValueError(f"--sites must be >= 1 (got {k})")
        self.kinds, self.k = kinds, int(k)
        listed = np.array([i for i in range(kinds.n) if not kinds.indexed(i)], dtype=np.int64)
        order = np.random.default_rng([seed, 5173]).permutation(listed)
        self.members = [sorted(order[j::k].tolist()) for j in range(k)] + [[]]

    def __len__(self) -> int:
        return self.k + 1

    def style(self, j: int) -> str:
        return STYLES[j % 4] if j < self.k else "none"

    def _feeds(self, j: int) -> list[int]:
        return [i for i in self.members[j] if self.kinds.kind(i) != "sitemap"]

    def _sitemaps(self, j: int) -> list[int]:
        return [i for i in self.members[j] if self.kinds.kind(i) == "sitemap"]

    def _well_known(self, j: int) -> tuple[str, str | None]:
        """(the path a well-known site's feed is at, the path that redirects home)."""
        return ("/rss.xml", "/feed") if (j // 4) % 2 else ("/feed", None)

    def linked(self, j: int, feeds: str) -> list[str]:
        """The URLs of the feeds site j links (``feeds``: the base URL of the feeds' host)."""
        own = self._feeds(j)
        if self.style(j) == "well-known":
            own = own[:1]
        return [self.kinds.url(feeds, i) for i in own + self._sitemaps(j)]

    # -- what a site's host serves ----------------------------------------------------------
    def render(self, j: int, path: str, feeds: str, base: str = ""
               ) -> tuple[int, bytes, str, list[tuple[str, str]]]:
        """(status, body, Content-Type, extra headers) of ``path`` on site j's host, whose
        base URL is ``base``."""
        style = self.style(j)
        if path == "/":
            return 200, self.home(j, feeds), "text/html; charset=utf-8", self._links(j, feeds)
        if path == "/home":                   # an old address of the home page
            return 301, b"", "text/plain", [("Location", "/")]
        if path == "/robots.txt":
            lines = ["User-agent: *", "Disallow: /private/", f"Sitemap: {base}/sitemap.xml"]
            lines += [f"Sitemap: {self.kinds.url(feeds, i)}" for i in self._sitemaps(j)]
            return 200, ("\n".join(lines) + "\n").encode(), "text/plain", []
        if path == "/sitemap.xml":           # the archive: a sitemap, not of news
            return 200, self.archive(j, base), "application/xml", []
        if path == "/comments/feed/":
            return 200, self.comments(j), "application/rss+xml", []
        if path.startswith("/wp-json/"):
            return 200, b'{"id": 1, "type": "page"}', "application/json", []
        if style == "well-known" and self._feeds(j):
            at, home = self._well_known(j)
            if path == at:
                return 301, b"", "text/plain", [("Location",
                                                 self.kinds.url(feeds, self._feeds(j)[0]))]
            if path == home:
                return 302, b"", "text/plain", [("Location", "/")]
        return 404, b"not found", "text/plain", []

    def _links(self, j: int, feeds: str) -> list[tuple[str, str]]:
        headers = [("Link", '</wp-json/>; rel="https://api.w.org/"')]
        if self.style(j) == "header":
            headers += [("Link", f'<{self.kinds.url(feeds, i)}>; rel="alternate"; '
                                 f'type="{TYPES[self.kinds.kind(i)]}"; title="Section {i}"')
                        for i in self._feeds(j)]
        return headers

    def home(self, j: int, feeds: str) -> bytes:
        head = [f"<title>Simulated site {j}</title>",
                '<meta charset="utf-8">',
                '<link rel="stylesheet" href="/static/site.css">',
                '<link rel="alternate" hreflang="fr" href="/fr/">',
                '<link rel="alternate" type="application/json" href="/wp-json/wp/v2/pages/1">',
                '<link rel="alternate" type="application/rss+xml" '
                f'title="Simulated site {j} &raquo; Comments Feed" href="/comments/feed/">',
                '<script src="/static/ads.js" async></script>']
        if self.style(j) == "links":
            head += [f'<link rel="alternate" type="{TYPES[self.kinds.kind(i)]}" '
                     f'title="Section {i}" href={quoteattr(self.kinds.url(feeds, i))}>'
                     for i in self._feeds(j)]
        sections = "".join(f'<li><a href="/section/{i}/">Section {i}</a></li>'
                           for i in self.members[j])
        teasers = "".join(f'<article><h2><a href="/section/{i}/story-{t}">Story {t} of '
                          f"section {i}</a></h2><p>A teaser of a few words.</p></article>"
                          for i in self.members[j][:4] for t in range(3))
        body = (f"<header><nav><ul><li><a href=\"/\">Home</a></li>{sections}</ul></nav>"
                f"</header><main>{teasers}</main><aside><h3>Most read</h3>"
                '<a href="/rss-info">RSS</a> <a href="/newsletter">Newsletter</a></aside>'
                "<footer><p>&copy; Simulated Media</p>"
                "<script>window.dataLayer = [];</script></footer>")
        return (f"<!doctype html>\n<html lang=\"en\"><head>{''.join(head)}</head>"
                f"<body>{body}</body></html>").encode()

    def archive(self, j: int, base: str) -> bytes:
        urls = "".join(f"<url><loc>{base}/section/{i}/story-{t}</loc>"
                       "<lastmod>2026-01-01</lastmod></url>"
                       for i in self.members[j] for t in range(3))
        return ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="'
                f'{SITEMAP_NS}">{urls}</urlset>').encode()

    @staticmethod
    def comments(j: int) -> bytes:
        return (f'<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel>'
                f"<title>Comments on simulated site {j}</title><link>/</link>"
                "<item><title>Re: Story 1</title><link>/section/0/story-1#c1</link>"
                "<guid>c1</guid></item></channel></rss>").encode()


class SiteHosts:
    """The running sites: ``sites``, their base URLs ``urls`` (one port each) and the
    listening ports; ``documents`` of the main server: ``/sites.txt`` (one address a line: a
    ``WHITTLE_SOURCES``) and ``/sites.json`` (the truth: each site's style and the feeds it
    links)."""

    def __init__(self, sites: SimSites, urls: list[str], ports: list) -> None:
        self.sites, self.urls, self.ports = sites, urls, ports

    def document(self, path: str, feeds: str) -> tuple[bytes, str] | None:
        if path == "/sites.txt":
            return ("".join(f"{u}/\n" for u in self.urls)).encode(), "text/plain"
        if path == "/sites.json":
            import json

            rows = [{"url": f"{u}/", "style": self.sites.style(j),
                     "feeds": self.sites.linked(j, feeds)} for j, u in enumerate(self.urls)]
            return json.dumps({"sites": rows}).encode(), "application/json"
        return None

    def stop(self):
        """A Deferred that fires when every site's port is closed."""
        from twisted.internet.defer import gatherResults

        return gatherResults([port.stopListening() for port in self.ports])


def listen_sites(sites: SimSites, feeds: str, reactor) -> SiteHosts:
    """Serve each of ``sites`` on a port of its own on 127.0.0.1 (``feeds``: the base URL of
    the server of the feeds)."""
    from twisted.web.resource import Resource
    from twisted.web.server import Site

    class SiteResource(Resource):
        isLeaf = True

        def __init__(self, j: int) -> None:
            super().__init__()
            self.j = j

        def render_GET(self, request):
            host = request.getHeader("host") or f"127.0.0.1:{request.getHost().port}"
            status, body, ctype, headers = sites.render(
                self.j, request.path.decode("latin-1"), feeds, f"http://{host}")
            request.setResponseCode(status)
            request.setHeader("content-type", ctype)
            for name, value in headers:
                request.responseHeaders.addRawHeader(name, value)
            return body

    ports, urls = [], []
    for j in range(len(sites)):
        site = Site(SiteResource(j))
        site.noisy = False
        port = reactor.listenTCP(0, site, interface="127.0.0.1")
        ports.append(port)
        urls.append(f"http://127.0.0.1:{port.getHost().port}")
    return SiteHosts(sites, urls, ports)
