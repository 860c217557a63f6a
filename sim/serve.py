"""Serve a simulated scenario as real feeds over HTTP on 127.0.0.1.

    python -m sim.serve --scenario news-mix --n 300 --speed 3600 --port 0 --seed 0
    python -m sim.serve --scenario news-diurnal --n 300     # the same feeds with daily rhythms

prints ``serving N feeds at http://127.0.0.1:PORT/feeds.opml`` (port 0 picks a free port) and
serves until interrupted:

* ``/feed/<i>.xml``: source i's newest ``--window`` items, RSS 2.0 for even i, Atom for odd i,
  each with ``slash:comments`` = round(engagement_scale x current value of the item);
* ``/feeds.opml``: every feed; ``/params.json``: the true parameters per feed URL in *real
  seconds* (the format of ``WHITTLE_ORACLE_PARAMS``; with ``news-diurnal`` each source also
  carries its ``profile``: rate multipliers per bin of one period, from unix time
  ``origin``); ``/stats.json``: the ground-truth
  ledger (utility captured, items missed) and the virtual time;
* ``/item/<i>/<seq>``: every entry's article page, boilerplate around it, some of them
  wire copies or syndicated copies of another source's story (``sim.web.articles``);
* ``/bad/<case>``: broken feeds for tests (see ``BAD_CASES``);
* ``/hostile/<case>/<k>.xml``: servers that misbehave (``sim.web.faults``: resets, hangs, slow
  drip, 5xx/429 with Retry-After, redirect loops, gzip bombs, huge and malformed feeds,
  hostile field values, impossible dates); ``--faults all`` (or a list) adds
  ``--fault-copies`` copies of each to ``/feeds.opml``, after the healthy feeds.
* ``--fates 3:301,5:410:86400``: healthy feeds that move (301, 308 to ``/moved/<i>.xml``,
  which serves feed i; 302 for a temporary redirect) or die (410, 404), for good or for the
  server's first given seconds (then they revive): ``sim.web.faults.FeedFates``.
* ``--rate-limit 50:1[:60]``: the first 50 feeds on a host of their own (``localhost``) that
  answers 429 above one request a minute (with ``Retry-After: 60``): ``sim.web.rate_limit``.
* ``/robots.txt``: allows everything; announces ``--crawl-delay`` when given.
* ``--sites K``: the listed feeds shared among K news sites, each on a port of its own, whose
  home pages link them (``<link rel="alternate">``, ``Link`` headers, a usual path,
  ``Sitemap:`` in robots.txt) among decoys, and one site without feeds (``sim.web.sites``);
  ``/sites.txt`` lists their addresses, ``/sites.json`` the feeds each links.
* ``--kinds mix``: sources served as RSS, Atom, JSON Feed and news sitemaps, some of the
  sitemaps (gzip) behind one sitemap index (``sim.web.kinds``); with ``--index-rotate T`` the
  index lists half of them at a time, the other half every T scenario time units.
* ``--hub on`` (or ``--hub loss=0.1,delay_max=300,...``): a WebSub hub at ``/hub`` that some
  sources name and that POSTs their new entries to subscribers, with faults
  (``sim.web.websub_hub``); its counts are in ``/stats.json`` under ``hub``.

Time: ``--speed S`` simulated seconds per real second; one scenario time unit is
``--unit`` seconds (3600 for news-mix, whose unit is the hour; 1 for the papers' examples).
So with news-mix and ``--speed 3600`` an epoch of one hour lasts one real second, and the
matching Scrapy setting is ``WHITTLE_PERIOD = unit * T / speed``. Conditional GET: weak ETag
per item set, Last-Modified = publication of the newest item, 304 when unchanged.
``--latency`` delays every feed response; ``--error-rate`` answers 503 at random.
``--realistic`` serves entries of real size (``sim.web.realistic``: title, 500-byte description,
categories, author; ~40 KB for ``--window 50``), gzip-compressed when the client accepts it;
without it entries are minimal (title, link, guid, date, comments), as before.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

import numpy as np
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from sim.web.articles import ArticlePages
from sim.web.faults import MIB, FeedFates, HostileFeeds, parse_fates, parse_faults
from sim.web.feedweb import FeedWeb, Item
from sim.web.kinds import INDEX_PATH, SourceKinds, parse_kinds
from sim.web.rate_limit import HOST as RATE_LIMITED_HOST
from sim.web.rate_limit import RateLimit, parse_rate_limit
from sim.web.realistic import RealisticItems
from sim.web.scenarios import make_scenario
from sim.web.sites import SimSites, listen_sites
from sim.web.websub_hub import HUB_PATH, WebSubHub, parse_hub

if TYPE_CHECKING:
    from twisted.web.server import Request

SLASH = "http://purl.org/rss/1.0/modules/slash/"
BAD_CASES = ("malformed", "html", "empty", "huge", "latin1", "nodates", "future", "dupids",
             "404", "500", "slow", "redirect", "many", "longtitle")


class VirtualClock:
    """Scenario time (units) <-> the crawler's unix time r: v = (r - r0) * speed / unit.

    ``time_source`` gives r (default the wall clock; a ``scrapy_whittle.service.clock``
    clock's ``now`` when the crawler and the server share simulated time in one process)."""

    def __init__(self, speed: float, unit: float, real0: float | None = None,
                 time_source=time.time) -> None:
        if not (speed > 0 and unit > 0):
            raise ValueError("speed and unit must be > 0")
        self.speed, self.unit = float(speed), float(unit)
        self.time_source = time_source
        self.real0 = time_source() if real0 is None else real0

    def reset(self, real0: float | None = None) -> None:
        self.real0 = self.time_source() if real0 is None else real0

    def now(self) -> float:
        return self.virtual(self.time_source())

    def virtual(self, real: float) -> float:
        return (real - self.real0) * self.speed / self.unit

    def real(self, virtual: float) -> float:
        return self.real0 + virtual * self.unit / self.speed

    @property
    def seconds_per_unit(self) -> float:
        """Real seconds per scenario time unit."""
        return self.unit / self.speed


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


class FeedRenderer:
    def __init__(self, web: FeedWeb, clock: VirtualClock, engagement_scale: float,
                 realistic: RealisticItems | None = None) -> None:
        self.web, self.clock, self.scale = web, clock, engagement_scale
        self.realistic = realistic

    def _comments(self, item: Item, v: float) -> int:
        return round(self.scale * self.web.value(item, v))

    def rss(self, i: int, items: list[Item], v: float, base: str) -> bytes:
        out = [f'<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0" '
               f'xmlns:slash="{SLASH}" xmlns:dc="http://purl.org/dc/elements/1.1/">'
               f"<channel><title>Simulated source {i}</title>"
               f"<link>{base}/source/{i}</link><description>sim feed</description>"]
        if self.realistic is not None:
            for it in items:
                published = self.clock.real(it.published)
                head, tail = self.realistic.parts(i, it.seq, "rss", f"{base}/item/{i}/{it.seq}",
                                                  f"urn:sim:{i}:{it.seq}", published)
                out += (head, str(self._comments(it, v)), tail)
            out.append("</channel></rss>")
            return "".join(out).encode()
        for it in items:
            out.append(
                f"<item><title>Item {it.seq} of source {i}</title>"
                f"<link>{base}/item/{i}/{it.seq}</link>"
                f'<guid isPermaLink="false">urn:sim:{i}:{it.seq}</guid>'
                f"<pubDate>{formatdate(self.clock.real(it.published), usegmt=True)}</pubDate>"
                f"<slash:comments>{self._comments(it, v)}</slash:comments></item>")
        out.append("</channel></rss>")
        return "".join(out).encode()

    def atom(self, i: int, items: list[Item], v: float, base: str) -> bytes:
        updated = _iso(self.clock.real(items[0].published if items else 0.0))
        out = [f'<?xml version="1.0" encoding="utf-8"?>\n<feed '
               f'xmlns="http://www.w3.org/2005/Atom" xmlns:slash="{SLASH}">'
               f"<title>Simulated source {i}</title><id>urn:sim:feed:{i}</id>"
               f"<updated>{updated}</updated>"]
        if self.realistic is not None:
            for it in items:
                published = self.clock.real(it.published)
                head, tail = self.realistic.parts(i, it.seq, "atom", f"{base}/item/{i}/{it.seq}",
                                                  f"urn:sim:{i}:{it.seq}", published, _iso)
                out += (head, str(self._comments(it, v)), tail)
            out.append("</feed>")
            return "".join(out).encode()
        for it in items:
            ts = _iso(self.clock.real(it.published))
            out.append(
                f"<entry><title>Item {it.seq} of source {i}</title>"
                f"<id>urn:sim:{i}:{it.seq}</id>"
                f"<link href={quoteattr(f'{base}/item/{i}/{it.seq}')}/>"
                f"<published>{ts}</published><updated>{ts}</updated>"
                f"<slash:comments>{self._comments(it, v)}</slash:comments></entry>")
        out.append("</feed>")
        return "".join(out).encode()


class SimWebResource(Resource):
    isLeaf = True

    def __init__(self, web: FeedWeb, clock: VirtualClock, *, scenario: str = "",
                 engagement_scale: float = 1000.0, latency: float = 0.0,
                 error_rate: float = 0.0, seed: int = 0, crawl_delay: float | None = None,
                 reactor=None, realistic: bool = False, gzip_level: int = 1,
                 faults: list[str] | None = None, fault_copies: int = 2,
                 bomb_bytes: int = 1536 * MIB, hang_seconds: float = 600.0,
                 fates: dict[int, tuple[str, float]] | None = None,
                 kinds: str | None = None, rate_limit: RateLimit | None = None,
                 index_rotate: float = 0.0, article_faults: float = 0.0) -> None:
        super().__init__()
        self.kinds = SourceKinds(web.n, kinds, index_rotate)
        self.rate_limit = rate_limit
        # hostile entries dated ten simulated minutes apart, like a busy healthy feed
        self.crawl_delay = crawl_delay
        self.web, self.clock, self.scenario = web, clock, scenario
        self.renderer = FeedRenderer(web, clock, engagement_scale,
                                     RealisticItems(seed) if realistic else None)
        self.realistic, self.gzip_level = realistic, gzip_level
        self._hostile: dict[str, bytes] = {}
        self.engagement_scale = engagement_scale
        self.latency, self.error_rate = latency, error_rate
        self.rng = np.random.default_rng([seed, 503])
        if reactor is None:
            from twisted.internet import reactor
        self.reactor = reactor
        self.faults, self.fault_copies = list(faults or []), int(fault_copies)
        self.hostile = HostileFeeds(clock.time_source, reactor, bomb_bytes=bomb_bytes,
                                    hang_seconds=hang_seconds,
                                    item_gap=max(1.0, 600.0 / clock.speed))
        self.fates = FeedFates(fates or {}, clock.time_source)
        self.requests = 0
        self.not_modified = 0
        self.serving: dict[int, int] = {}       # feed -> responses being sent (latency)
        self.max_concurrent = 0                 # most requests of one feed served at once
        self.hub: WebSubHub | None = None       # set by start_server with ``hub``
        self.sites = None                       # sim.web.sites.SiteHosts, with ``sites``
        self.articles = ArticlePages(seed, faults=article_faults)   # /item/<i>/<seq>
        self.article_requests = 0
        #: (source, seq) -> publication (scenario time) of the entries feeds listed: an
        #: article page states its date after its entry left the feed's window too
        self.dates: dict[tuple[int, int], float] = {}

    # -- helpers ------------------------------------------------------------------------
    def base(self, request: Request) -> str:
        host = request.getHeader("host") or f"127.0.0.1:{request.getHost().port}"
        return f"http://{host}"

    def _send(self, request: Request, body: bytes, ctype: str, status: int = 200) -> bytes:
        request.setResponseCode(status)
        request.setHeader("content-type", ctype)
        return body

    def _later(self, request: Request, delay: float, body: bytes):
        def finish():
            if not request._disconnected:
                request.write(body)
                request.finish()
        self.reactor.callLater(delay, finish)
        return NOT_DONE_YET

    # -- routes -------------------------------------------------------------------------
    def render_GET(self, request: Request):
        self.requests += 1
        path = request.path.decode("latin-1")
        if path == "/robots.txt":
            lines = ["User-agent: *", "Allow: /"]
            if self.crawl_delay:
                lines.append(f"Crawl-delay: {self.crawl_delay:g}")
            return self._send(request, ("\n".join(lines) + "\n").encode(), "text/plain")
        if path == "/feeds.opml":
            return self._send(request, self.opml(self.base(request)), "text/x-opml")
        if self.sites is not None and path in ("/sites.txt", "/sites.json"):
            return self._send(request, *self.sites.document(path, self.base(request)))
        if path == "/params.json":
            return self._send(request, json.dumps(self.params(self.base(request))).encode(),
                              "application/json")
        if path == "/stats.json":
            stats = {**self.web.totals(), "virtual_time": self.clock.now(),
                     "requests": self.requests, "not_modified": self.not_modified,
                     "max_concurrent_per_feed": self.max_concurrent}
            if self.hub is not None:
                stats["hub"] = self.hub.totals()
            return self._send(request, json.dumps(stats).encode(), "application/json")
        if path.startswith("/feed/") and path.endswith(".xml"):
            try:
                i = int(path[6:-4])
            except ValueError:
                i = -1
            if 0 <= i < self.web.n:
                limit = self.rate_limit
                if limit is not None and limit.covers(i) \
                        and not limit.admit(i, self.clock.time_source()):
                    for name, value in limit.headers().items():
                        request.setHeader(name, value)
                    return self._send(request, b"too many requests", "text/plain", 429)
                fate = self.fates.render(request, i, self.base(request))
                return self.feed(request, i) if fate is None else fate
        if path.startswith("/moved/") and path.endswith(".xml"):
            try:
                i = int(path[7:-4])
            except ValueError:
                i = -1
            if i in self.fates.fates:
                return self.feed(request, i)
        if path == INDEX_PATH and self.kinds.mix:
            now = self.clock.now()
            etag = f'W/"index-{self.kinds.phase(now)}"'
            if self._not_modified(request, etag, None):
                request.setResponseCode(304)
                return b""
            request.setHeader("etag", etag)
            return self._send(request, self.kinds.index(self.base(request), now),
                              "application/xml")
        if (i := self.kinds.source_of(path)) is not None:
            return self.feed(request, i)
        if path.startswith("/item/"):
            return self.article(request, path)
        if path.startswith("/bad/"):
            return self.bad(request, path[5:].split(".")[0])
        if path.startswith("/hostile/"):
            answer = self.hostile.render(request, path, self.base(request))
            if answer is not None:
                return answer
        return self._send(request, b"not found", "text/plain", 404)

    def feed(self, request: Request, i: int):
        """Feed i; with ``--latency`` the requests of one feed served at once are counted."""
        if not self.latency:
            return self._feed(request, i)
        self.serving[i] = self.serving.get(i, 0) + 1
        self.max_concurrent = max(self.max_concurrent, self.serving[i])
        request.notifyFinish().addBoth(lambda _: self.serving.__setitem__(i, self.serving[i] - 1))
        return self._feed(request, i)

    def _feed(self, request: Request, i: int):
        if self.error_rate and self.rng.random() < self.error_rate:
            return self._send(request, b"injected error", "text/plain", 503)
        v = self.clock.now()
        seq = self.web.latest_seq(i, v)
        etag = f'W/"{i}-{seq}"'
        items = self.web.feed(i, v)
        newest = self.clock.real(items[0].published) if items else None
        request.setHeader("etag", etag)
        if newest is not None:
            request.setHeader("last-modified", formatdate(int(newest), usegmt=True))
        if self._not_modified(request, etag, newest):
            self.web.fetch(i, v)  # nothing new: keeps the ledger's last fetch time
            self.not_modified += 1
            request.setResponseCode(304)
            return b"" if not self.latency else self._later(request, self.latency, b"")
        self.web.fetch(i, v)
        if len(self.dates) > 1_000_000:
            self.dates.clear()
        self.dates.update(((i, it.seq), it.published) for it in items)
        base = self.base(request)
        body, ctype = self.document(i, items, v, base)
        if self.hub is not None:
            body = self.hub.announce(request, i, body, self.kinds.kind(i), base)
        if self.realistic:     # as WordPress and most news sites send it
            ctype += "; charset=UTF-8"
        request.setHeader("content-type", ctype)
        body = self._maybe_gzip(request, body)
        if self.latency:
            return self._later(request, self.latency, body)
        return body

    def document(self, i: int, items: list[Item], v: float, base: str) -> tuple[bytes, str]:
        """(body, Content-Type) of source i's feed listing ``items`` at virtual time v."""
        if self.kinds.kind(i) in ("json", "sitemap"):
            return self.kinds.render(i, items, self.clock.real, base)
        body = (self.renderer.rss if i % 2 == 0 else self.renderer.atom)(i, items, v, base)
        return body, "application/rss+xml" if i % 2 == 0 else "application/atom+xml"

    def article(self, request: Request, path: str):
        """``/item/<i>/<seq>``: entry seq's article page (``sim.web.articles``), dated as the
        feed dated it; 404 before it is published."""
        self.article_requests += 1
        try:
            i, seq = (int(x) for x in path[6:].split("/"))
        except ValueError:
            i = seq = -1
        v = self.clock.now()
        if not (0 <= i < self.web.n and 0 <= seq <= self.web.latest_seq(i, v)):
            return self._send(request, b"not found", "text/plain", 404)
        when = self.dates.get((i, seq))
        if when is None:
            when = next((it.published for it in self.web.feed(i, v) if it.seq == seq), None)
        published = _iso(self.clock.real(when)) if when is not None else None
        fault = self.articles.fault(i, seq)
        if fault in ("404", "500"):
            return self._send(request, b"no such page", "text/plain", int(fault))
        if fault == "binary":
            return self._send(request, b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png")
        if fault == "empty":
            return self._send(request, b"<html><head><title>Loading</title></head><body>"
                              b"<div id='app'></div><script>render()</script></body></html>",
                              "text/html")
        body = self.articles.page(i, seq, self.base(request), published)
        return self._send(request, self._maybe_gzip(request, body), "text/html; charset=utf-8")

    def render_POST(self, request: Request):
        if self.hub is not None and request.path == HUB_PATH.encode():
            return self.hub.render_POST(request)
        return self._send(request, b"not found", "text/plain", 404)

    def _maybe_gzip(self, request: Request, body: bytes) -> bytes:
        """gzip (level ``gzip_level``, nginx's default 1) for realistic feeds when accepted."""
        if not self.realistic or "gzip" not in (request.getHeader("accept-encoding") or ""):
            return body
        request.setHeader("content-encoding", "gzip")
        request.setHeader("vary", "Accept-Encoding")
        return gzip.compress(body, compresslevel=self.gzip_level, mtime=0)

    @staticmethod
    def _not_modified(request: Request, etag: str, newest: float | None) -> bool:
        inm = request.getHeader("if-none-match")
        if inm is not None:
            return any(tag.strip() in (etag, etag[2:], "*") for tag in inm.split(","))
        ims = request.getHeader("if-modified-since")
        if ims is None:
            return False
        try:
            since = parsedate_to_datetime(ims).timestamp()
        except (TypeError, ValueError):
            return False
        return newest is None or newest <= since

    def bad(self, request: Request, case: str):
        base = self.base(request)
        now = self.clock.time_source()
        good_items = "".join(
            f"<item><title>t{k}</title><link>{base}/x/{k}</link><guid>g{k}</guid>"
            f"<pubDate>{formatdate(now - 60 * k, usegmt=True)}</pubDate></item>"
            for k in range(3))
        rss = ('<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel>'
               "<title>bad</title>{}</channel></rss>")
        xml = "application/rss+xml"
        if case == "malformed":
            return self._send(request, b"<rss><channel><item><title>oops</channel>", xml)
        if case == "html":
            return self._send(request, b"<!doctype html><html><body>Hello</body></html>",
                              "text/html")
        if case == "empty":
            return self._send(request, b"", xml)
        if case == "huge":
            pad = "<item><title>" + "x" * 1000 + "</title></item>"
            return self._send(request, rss.format(pad * 2_000).encode(), xml)
        if case in ("many", "longtitle"):      # hostile but within size limits; built once
            if case not in self._hostile:
                self._hostile[case] = self._hostile_body(case, base, rss)
            return self._send(request, self._hostile[case], xml)
        if case == "latin1":
            body = rss.format("<item><title>caf\u00e9 \u00e0 la cr\u00e8me</title>"
                              "<guid>l1</guid></item>")
            return self._send(request, body.encode("latin-1"), xml)
        if case == "nodates":
            items = "".join(f"<item><title>n{k}</title><guid>n{k}</guid></item>"
                            for k in range(3))
            return self._send(request, rss.format(items).encode(), xml)
        if case == "future":
            items = (f"<item><title>f</title><guid>f1</guid>"
                     f"<pubDate>{formatdate(now + 86400 * 365, usegmt=True)}</pubDate></item>")
            return self._send(request, rss.format(items).encode(), xml)
        if case == "dupids":
            items = "".join(f"<item><title>d{k}</title><guid>same</guid></item>"
                            for k in range(3))
            return self._send(request, rss.format(items).encode(), xml)
        if case in ("404", "500"):
            return self._send(request, b"error", "text/plain", int(case))
        if case == "slow":
            request.setHeader("content-type", xml)
            return self._later(request, 30.0, rss.format(good_items).encode())
        if case == "redirect":
            request.setResponseCode(302)
            request.setHeader("location", f"{base}/feed/0.xml")
            return b""
        return self._send(request, b"unknown case", "text/plain", 404)

    @staticmethod
    def _hostile_body(case: str, base: str, rss: str) -> bytes:
        """``many``: 20,000 entries (1.4 MB); ``longtitle``: one entry with a 1 MB title of
        markup (feedparser: 6 s to parse)."""
        if case == "many":
            items = "".join(f"<item><title>m{k}</title><guid>m{k}</guid>"
                            f"<link>{base}/m/{k}</link></item>" for k in range(20_000))
        else:
            items = ("<item><title>" + "&lt;b&gt;x&lt;/b&gt; &amp;amp; " * 40_000 +
                     "</title><guid>long</guid></item>")
        return rss.format(items).encode()

    def opml(self, base: str) -> bytes:
        lines = ['<?xml version="1.0" encoding="utf-8"?>', '<opml version="2.0"><head>'
                 f"<title>{escape(self.scenario)} simulated web</title></head><body>"]
        # the rate-limited feeds are listed under their own host (sim.web.rate_limit)
        limited = {self.kinds.url(base, i) for i in range(
            min(self.rate_limit.feeds, self.web.n) if self.rate_limit else 0)}
        other = base.replace("127.0.0.1", RATE_LIMITED_HOST, 1)
        lines += [f'<outline type="rss" text="{name}" xmlUrl="'
                  f'{other + url[len(base):] if url in limited else url}"/>'
                  for name, url in self.kinds.listed(base)]
        lines += [f'<outline type="rss" text="hostile" xmlUrl="{url}"/>'
                  for url in self.hostile.urls(base, self.faults, self.fault_copies)]
        lines.append("</body></opml>")
        return "\n".join(lines).encode()

    def params(self, base: str) -> dict:
        """True parameters per feed URL, rates in real seconds (``WHITTLE_ORACLE_PARAMS``)."""
        p, spu = self.web.params, self.clock.seconds_per_unit
        return {
            "scenario": self.scenario, "time_unit": "second", "speed": self.clock.speed,
            "unit_seconds": self.clock.unit, "period_seconds": p.period * spu,
            "engagement_scale": self.engagement_scale, "window": self.web.window,
            "sources": [{"url": self.kinds.url(base, i), "rate": float(p.rate[i]) / spu,
                         "mean_utility": float(p.mean_utility[i]),
                         "decay": float(p.decay[i]) / spu, **self._profile(i)}
                        for i in range(p.n)],
        }

    def _profile(self, i: int) -> dict:
        """A source's rhythm for a rhythm-aware oracle (``news-diurnal``): p_i on the bins of
        one period (mean 1), bin 0 starting at unix time ``origin`` (scenario time 0)."""
        prof = self.web.profile
        if prof is None:
            return {}
        spu = self.clock.seconds_per_unit
        return {"profile": {"origin": self.clock.real(0.0),
                            "bin_seconds": prof.bin_width * spu,
                            "bins": prof.bin_rates([i])[0].round(6).tolist()}}


class SimServer:
    """A running server: ``url``, ``port``, ``web``, ``clock``, ``resource``; ``stop()``."""

    def __init__(self, port, resource: SimWebResource) -> None:
        self._port = port
        self.resource = resource
        self.web, self.clock = resource.web, resource.clock
        self.port = port.getHost().port
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        if self.resource.hub is not None:
            self.resource.hub.stop()
        if self.resource.sites is not None:
            from twisted.internet.defer import gatherResults

            return gatherResults([self._port.stopListening(), self.resource.sites.stop()])
        return self._port.stopListening()


def default_unit(scenario: str) -> float:
    return 3600.0 if scenario in ("news-mix", "news-diurnal") else 1.0


def start_server(scenario: str = "news-mix", *, n: int | None = None, speed: float = 3600.0,
                 port: int = 0, seed: int = 0, window: int = 20, unit: float | None = None,
                 engagement_scale: float = 1000.0, latency: float = 0.0,
                 error_rate: float = 0.0, crawl_delay: float | None = None,
                 reactor=None, clock=None, realistic: bool = False,
                 start: float = 0.0, history: str | None = None,
                 faults: list[str] | str | None = None,
                 fault_copies: int = 2, bomb_bytes: int = 1536 * MIB,
                 hang_seconds: float = 600.0, fates: str | dict | None = None,
                 kinds: str | None = None, index_rotate: float = 0.0,
                 rate_limit: str | RateLimit | None = None,
                 hub: str | dict | None = None, hub_tick: float = 0.05,
                 sites: int = 0, article_faults: float = 0.0) -> SimServer:
    """Start serving in this process on the running (or about to run) Twisted reactor.

    ``clock``: a ``scrapy_whittle.service.clock`` clock shared with an in-process crawl (its time is
    the server's "real" time); default the wall clock. ``start``: the virtual clock reads
    ``start`` (scenario units) now, so the feeds have a history at once. ``history``: what the
    feeds list before time 0, "warm" (each window full, the stationary law: see
    ``sim.web.feedweb``) or "empty"; default the scenario's start (warm for the news scenarios,
    empty for the papers'). ``faults``: hostile
    cases listed in ``/feeds.opml`` (``sim.web.faults``; "all" or a list), ``fault_copies`` of
    each; ``bomb_bytes``, ``hang_seconds``: see ``sim.web.faults.HostileFeeds``; ``fates``: feeds
    that move or die (``sim.web.faults.parse_fates``); ``kinds``: "mix" serves sources of every kind
    (``sim.web.kinds``), its sitemap index listing half its children at a time, rotated every
    ``index_rotate`` scenario time units (0: all, always); ``sites``: the listed sources
    shared among that many news sites, each on a port of its own, plus one without feeds
    (``sim.web.sites``; 0: none); ``rate_limit``: feeds on a host
    that answers 429 above a rate (``sim.web.rate_limit``); ``hub``: a WebSub hub
    (``sim.web.websub_hub.parse_hub``), checking every ``hub_tick`` real seconds what is due
    (and, on a simulated ``clock``, holding it); ``article_faults``: the share of article
    pages that fail (``sim.web.articles``)."""
    if isinstance(faults, str) or faults is None:
        faults = parse_faults(faults)
    if reactor is None:
        from twisted.internet import reactor
    sc = make_scenario(scenario, n=n, seed=seed)
    if sc.kind not in ("ephemeral", "diurnal"):
        raise ValueError(f"scenario {scenario!r} is not about feeds (kind {sc.kind!r})")
    web = FeedWeb(sc.params, seed=seed, window=window, profile=sc.profile,
                  start=sc.start if history is None else history)
    unit = default_unit(scenario) if unit is None else unit
    shared = clock                     # the crawl's clock, when it runs in this process
    source = time.time if clock is None else clock.now
    clock = VirtualClock(speed, unit, real0=source() - start * unit / speed,
                         time_source=source)
    resource = SimWebResource(web, clock, scenario=scenario, engagement_scale=engagement_scale,
                              latency=latency, error_rate=error_rate, seed=seed,
                              crawl_delay=crawl_delay, reactor=reactor, realistic=realistic,
                              faults=faults, fault_copies=fault_copies,
                              bomb_bytes=bomb_bytes, hang_seconds=hang_seconds,
                              fates=parse_fates(fates), kinds=parse_kinds(kinds),
                              index_rotate=index_rotate, article_faults=article_faults,
                              rate_limit=(parse_rate_limit(rate_limit)
                                          if isinstance(rate_limit, str | None) else rate_limit))
    hub_args = parse_hub(hub, unit)
    if hub_args is not None:
        from scrapy_whittle.service.clock import SimulatedClock

        horizon = shared if isinstance(shared, SimulatedClock) else None
        resource.hub = WebSubHub(resource, seed=seed, reactor=reactor, tick=hub_tick,
                                 sim_clock=horizon, **hub_args)
    site = Site(resource)
    site.noisy = False
    listening = reactor.listenTCP(port, site, interface="127.0.0.1")
    if sites:
        feeds = f"http://127.0.0.1:{listening.getHost().port}"
        resource.sites = listen_sites(SimSites(resource.kinds, sites, seed), feeds, reactor)
    return SimServer(listening, resource)


def crawl_command(server: SimServer, budget: float, engagement_scale: float,
                  spider: str = "news") -> str:
    """The ``scrapy crawl`` command line that crawls what ``server`` serves: one Scrapy epoch
    per scenario epoch, decided every sixtieth of it (a simulated minute of the news
    scenarios' hour), the scenario's budget, values read back at the served engagement
    scale. All feeds are on one host (127.0.0.1), so DOWNLOAD_DELAY must be 0 (Scrapy's
    project template sets 1 s, one request a second for the whole web)."""
    period = server.web.params.period * server.clock.seconds_per_unit
    scale = engagement_scale
    settings = {"WHITTLE_SOURCES": f"{server.url}/feeds.opml", "WHITTLE_PERIOD": f"{period:g}",
                "WHITTLE_STEP": f"{period / 60:g}",
                "WHITTLE_BUDGET": f"{budget:g}", "WHITTLE_ENGAGEMENT_SCALE": f"{scale:g}",
                "DOWNLOAD_DELAY": "0"}
    return f"scrapy crawl {spider} " + " ".join(f"-s {k}={v}" for k, v in settings.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.serve", description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="news-mix")
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--speed", type=float, default=3600.0,
                    help="simulated seconds per real second (default 3600)")
    ap.add_argument("--unit", type=float, default=None,
                    help="seconds per scenario time unit (news-mix: 3600, others: 1)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--engagement-scale", type=float, default=1000.0)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds added to each feed")
    ap.add_argument("--error-rate", type=float, default=0.0, help="probability of a 503")
    ap.add_argument("--crawl-delay", type=float, default=None,
                    help="Crawl-delay (seconds) announced in /robots.txt")
    ap.add_argument("--realistic", action="store_true",
                    help="real-sized entries (~800 bytes: title, 500-byte description, "
                         "categories, author), gzip when accepted; use --window 20-100")
    ap.add_argument("--start", type=float, default=0.0,
                    help="virtual time at start, in scenario units (feeds then have history)")
    ap.add_argument("--history", choices=("warm", "empty"), default=None,
                    help="what the feeds list before time 0: warm (each window full of "
                         "entries from the model's stationary law; the default for the news "
                         "scenarios) or empty (the default for the papers' scenarios)")
    ap.add_argument("--faults", default="",
                    help="hostile sources to list in /feeds.opml: 'all' or a comma-separated "
                         "list of sim.web.faults cases (default none)")
    ap.add_argument("--fault-copies", type=int, default=2,
                    help="sources per hostile case (default 2)")
    ap.add_argument("--bomb-mib", type=float, default=1536.0,
                    help="inflated size of the gzip bomb, MiB (default 1536)")
    ap.add_argument("--hang-seconds", type=float, default=600.0,
                    help="how long hang and drip hold a connection (default 600)")
    ap.add_argument("--fates", default="",
                    help="feeds that move or die: comma-separated i:fate[:seconds], fate "
                         "among 301, 308, 302, 410, 404 (sim.web.faults.FATES; with seconds, "
                         "for the server's first seconds only)")
    ap.add_argument("--kinds", default="",
                    help="'mix': sources served as RSS, Atom, JSON Feed and news sitemaps, "
                         "some behind a sitemap index (sim.web.kinds; default RSS and Atom)")
    ap.add_argument("--index-rotate", type=float, default=0.0,
                    help="with --kinds mix: the sitemap index lists half its children at a "
                         "time, the other half every this many scenario time units (default "
                         "0: all, always)")
    ap.add_argument("--rate-limit", default="",
                    help="FEEDS:PER_MINUTE[:RETRY_AFTER]: the first FEEDS feeds on a host of "
                         "their own (localhost) answering 429 above PER_MINUTE requests a "
                         "minute (sim.web.rate_limit)")
    ap.add_argument("--article-faults", type=float, default=0.0,
                    help="share of the article pages /item/<i>/<seq> that fail (404, 500, "
                         "not HTML, no article: sim.web.articles)")
    ap.add_argument("--hub", default="",
                    help="a WebSub hub at /hub: 'on', or options key=value,... among "
                         "share, loss, delay (exponential|uniform), delay_mean, delay_max, "
                         "duplicate, spurious (per second and source), bad_signature, down_at, "
                         "lease_max (times in seconds; sim.web.websub_hub)")
    ap.add_argument("--sites", type=int, default=0,
                    help="the feeds shared among this many news sites, each on a port of its "
                         "own, whose home pages link them (sim.web.sites); their addresses at "
                         "/sites.txt (a WHITTLE_SOURCES), the truth at /sites.json")
    args = ap.parse_args(argv)
    try:
        parse_hub(args.hub, 1.0)
        faults = parse_faults(args.faults)
        parse_fates(args.fates)
        parse_kinds(args.kinds)
        parse_rate_limit(args.rate_limit)
    except ValueError as exc:
        ap.error(str(exc))
    from twisted.internet import reactor

    server = start_server(args.scenario, n=args.n, speed=args.speed, port=args.port,
                          seed=args.seed, window=args.window, unit=args.unit,
                          engagement_scale=args.engagement_scale, latency=args.latency,
                          error_rate=args.error_rate, crawl_delay=args.crawl_delay,
                          reactor=reactor, realistic=args.realistic, start=args.start,
                          history=args.history,
                          faults=faults, fault_copies=args.fault_copies,
                          bomb_bytes=int(args.bomb_mib * MIB),
                          hang_seconds=args.hang_seconds, fates=args.fates, kinds=args.kinds,
                          index_rotate=args.index_rotate,
                          rate_limit=args.rate_limit,
                          hub=args.hub, sites=args.sites,
                          article_faults=args.article_faults)
    budget = make_scenario(args.scenario, n=args.n, seed=args.seed).budget
    print(f"serving {server.web.n} feeds at {server.url}/feeds.opml", flush=True)
    if args.sites:
        print(f"  and {args.sites} sites linking them, addresses at {server.url}/sites.txt",
              flush=True)
    if faults:
        print(f"  and {len(faults) * args.fault_copies} hostile sources: "
              f"{', '.join(faults)} ({args.fault_copies} of each)", flush=True)
    print("crawl them from a Scrapy project (news: your spider) with:\n  "
          + crawl_command(server, budget, args.engagement_scale), flush=True)
    print(f"PORT {server.port}", flush=True)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
