"""Hostile sources for ``sim.serve``: the ways a feed server misbehaves, one URL family each.

``/hostile/<case>/<k>.xml`` serves copy k of fault ``case`` (copies are distinct sources with
their own counters). With ``--faults`` (``all`` or a comma-separated list of cases)
``/feeds.opml`` lists, after the healthy feeds, ``--fault-copies`` copies of each chosen
fault; without it nothing changes (the routes answer, but no source list names them).

What each case does, and what a crawler should make of it (``FAULTS``; the kinds are those of
``scrapy_whittle.scrapy.errors``):

* transport: ``reset`` (TCP reset after the request), ``truncated`` (a Content-Length never
  reached, then close), ``hang`` (no answer; the connection is closed after ``hang_seconds``),
  ``drip`` (a byte every half second, never done);
* HTTP: ``http_404``, ``http_410``, ``http_500``, ``http_503`` and ``http_429`` (both with
  ``Retry-After``), ``redirect_loop`` (two URLs redirecting to each other),
  ``redirect_chain`` (an endless chain of distinct URLs);
* size: ``gzip_bomb`` (a small gzip body that inflates to ``bomb_bytes``, 1.5 GiB by
  default), ``huge`` (12 MiB announced in Content-Length), ``huge_chunked`` (12 MiB chunked,
  no length);
* bodies: ``malformed``, ``html``, ``empty``, ``binary``, ``entity_bomb`` ("billion laughs");
* usable but hostile feeds: ``many`` (20,000 entries), ``huge_fields`` (1 MB title, link and
  id), ``engagement`` (``slash:comments`` of 1e308, 1e400, NaN, -5, 10^23; even copies end in
  a broken closing tag, so that feedparser-rs hands them to feedparser, which reads 1e308),
  ``bad_dates`` (one impossible date, 2024-13-45T25:61:61Z, among honest ones), ``burst``
  (from its third fetch on, its archive of 5,000 old entries under new ids at every fetch:
  a feed that regenerates its ids), ``nodates``, ``dupids``, ``future``. The entries of
  ``engagement`` and ``bad_dates`` are new at every fetch, dated ``item_gap`` seconds apart
  (like the healthy feeds of a fast simulated web), so that a crawler keeps fetching them.

Fetch counts per path are kept in ``HostileFeeds.fetches`` (what a redirect loop cost).
Everything runs on the Twisted reactor given; bodies that are costly to build (the bomb, the
huge ones) are built once, on first use.
"""

from __future__ import annotations

import zlib
from collections import Counter
from email.utils import formatdate
from typing import TYPE_CHECKING

from twisted.web.server import NOT_DONE_YET

if TYPE_CHECKING:
    from twisted.web.server import Request

#: case -> (what the server does, the error kind or "usable" expected of a crawler)
FAULTS: dict[str, tuple[str, str]] = {
    "reset": ("TCP reset after reading the request", "connection"),
    "truncated": ("Content-Length 100000, 1000 bytes sent, then close", "connection"),
    "hang": ("accepts the request and never answers", "timeout"),
    "drip": ("one byte every 0.5 s, never finished", "timeout"),
    "http_404": ("404 Not Found", "http_404"),
    "http_410": ("410 Gone", "http_410"),
    "http_500": ("500 Internal Server Error", "http_500"),
    "http_503": ("503 with Retry-After: 120", "http_503"),
    "http_429": ("429 with Retry-After: 60", "http_429"),
    "redirect_loop": ("302 between two URLs", "redirect_loop"),
    "redirect_chain": ("302 to a new URL, endlessly", "too_many_redirects"),
    "gzip_bomb": ("gzip body that inflates to bomb_bytes", "too_large"),
    "huge": ("12 MiB with Content-Length", "too_large"),
    "huge_chunked": ("12 MiB chunked, no Content-Length", "too_large"),
    "malformed": ("broken XML", "malformed"),
    "html": ("an HTML page", "not_a_feed"),
    "empty": ("an empty body", "empty"),
    "binary": ("random bytes", "malformed"),
    "entity_bomb": ("a DOCTYPE with a billion-laughs entity", "usable"),
    "many": ("20,000 entries, no dates", "usable"),
    "huge_fields": ("1 MB title, link and id", "usable"),
    "engagement": ("slash:comments of 1e308, 1e400, NaN, -5, 10^23", "usable"),
    "bad_dates": ("one impossible date among honest ones", "usable"),
    "burst": ("5,000 old entries under new ids at every fetch from the third", "usable"),
    "nodates": ("entries without dates", "usable"),
    "dupids": ("entries sharing one id", "usable"),
    "future": ("a date a year ahead", "usable"),
}

MIB = 1024 * 1024
RSS = ('<?xml version="1.0" encoding="utf-8"?><rss version="2.0" '
       'xmlns:slash="http://purl.org/rss/1.0/modules/slash/"><channel><title>hostile</title>'
       "{}</channel></rss>")
XML = "application/rss+xml"


def parse_faults(spec: str | None) -> list[str]:
    """``--faults`` as a list of cases: None or "" -> [], "all" -> every case."""
    if not spec:
        return []
    names = list(FAULTS) if spec.strip() == "all" else [s.strip() for s in spec.split(",")
                                                        if s.strip()]
    unknown = [s for s in names if s not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault {unknown[0]!r}; choose among: {', '.join(FAULTS)}")
    return names


class HostileFeeds:
    """Renders ``/hostile/<case>/<k>.xml`` (see the module docstring).

    time_source: the server's unix time (entries are dated against it); reactor: Twisted's;
    bomb_bytes: inflated size of the gzip bomb; hang_seconds: how long a hung connection is
    held before it is closed; item_gap: seconds between the dates of consecutive entries;
    burst_entries: the size of ``burst``'s archive."""

    burst_entries = 5000

    def __init__(self, time_source, reactor, *, bomb_bytes: int = 1536 * MIB,
                 hang_seconds: float = 600.0, item_gap: float = 600.0) -> None:
        self.time_source, self.reactor = time_source, reactor
        self.bomb_bytes, self.hang_seconds = int(bomb_bytes), float(hang_seconds)
        self.item_gap = float(item_gap)
        self.t0 = time_source()
        self.fetches: Counter[str] = Counter()
        self._cache: dict[str, bytes] = {}

    def urls(self, base: str, cases: list[str], copies: int) -> list[str]:
        return [f"{base}/hostile/{case}/{k}.xml" for case in cases for k in range(copies)]

    # -- dispatch -------------------------------------------------------------------------
    def render(self, request: Request, path: str, base: str):
        """Answer ``path`` (``/hostile/...``); None when it names no case."""
        parts = path.split("/")          # ["", "hostile", case, "k.xml"]
        if len(parts) != 4 or parts[2] not in FAULTS:
            return None
        case, leaf = parts[2], parts[3]
        self.fetches[path] += 1
        handler = getattr(self, "_" + case, None) or self._http
        return handler(request, case, leaf, base)

    @staticmethod
    def _send(request: Request, body: bytes, ctype: str = XML, status: int = 200) -> bytes:
        request.setResponseCode(status)
        request.setHeader("content-type", ctype)
        return body

    def _items(self, n: int, prefix: str, base: str, *, dated: bool = True,
               comments: list[str] | None = None, start: int = 0,
               now: float | None = None) -> str:
        now = self.time_source() if now is None else now
        out = []
        for j in range(start, start + n):
            when = now - self.item_gap * (j - start)
            date = f"<pubDate>{formatdate(when, usegmt=True)}</pubDate>" if dated else ""
            extra = f"<slash:comments>{comments[j % len(comments)]}</slash:comments>" \
                if comments else ""
            out.append(f"<item><title>{prefix} {j}</title><link>{base}/{prefix}/{j}</link>"
                       f"<guid>{prefix}-{j}</guid>{date}{extra}</item>")
        return "".join(out)

    # -- transport --------------------------------------------------------------------------
    def _reset(self, request, case, leaf, base):
        request.channel.transport.abortConnection()
        return NOT_DONE_YET

    def _truncated(self, request, case, leaf, base):
        request.setHeader("content-type", XML)
        request.setHeader("content-length", "100000")
        request.write(b"<" * 1000)
        self.reactor.callLater(0.05, request.channel.transport.loseConnection)
        return NOT_DONE_YET

    def _hang(self, request, case, leaf, base):
        self.reactor.callLater(self.hang_seconds, request.channel.transport.loseConnection)
        return NOT_DONE_YET

    def _drip(self, request, case, leaf, base):
        request.setHeader("content-type", XML)
        end = self.reactor.seconds() + self.hang_seconds

        def drip():
            if request._disconnected or request.finished:
                return
            if self.reactor.seconds() > end:
                request.channel.transport.loseConnection()
                return
            request.write(b" ")
            self.reactor.callLater(0.5, drip)

        drip()
        return NOT_DONE_YET

    # -- HTTP ----------------------------------------------------------------------------------
    def _http(self, request, case, leaf, base):
        status = int(case.split("_")[1])
        if status in (429, 503):
            request.setHeader("retry-after", "60" if status == 429 else "120")
        return self._send(request, b"hostile error", "text/plain", status)

    def _redirect_loop(self, request, case, leaf, base):
        k = leaf.split(".")[0]
        other = "b" if request.args.get(b"side", [b"a"])[0] == b"a" else "a"
        request.setResponseCode(302)
        request.setHeader("location", f"{base}/hostile/redirect_loop/{k}.xml?side={other}")
        return b""

    def _redirect_chain(self, request, case, leaf, base):
        k = leaf.split(".")[0]
        hop = int(request.args.get(b"hop", [b"0"])[0]) + 1
        request.setResponseCode(302)
        request.setHeader("location", f"{base}/hostile/redirect_chain/{k}.xml?hop={hop}")
        return b""

    # -- size ------------------------------------------------------------------------------
    def bomb(self) -> bytes:
        """gzip of ``bomb_bytes`` of spaces inside an RSS document (built once)."""
        key = f"bomb:{self.bomb_bytes}"
        if key not in self._cache:
            comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            chunk = b" " * MIB
            parts = [comp.compress(RSS.split("{}")[0].encode())]
            for _ in range(self.bomb_bytes // MIB):
                parts.append(comp.compress(chunk))
            parts += [comp.compress(RSS.split("{}")[1].encode()), comp.flush()]
            self._cache[key] = b"".join(parts)
        return self._cache[key]

    def _gzip_bomb(self, request, case, leaf, base):
        request.setHeader("content-encoding", "gzip")
        return self._send(request, self.bomb())

    def _huge_body(self) -> bytes:
        if "huge" not in self._cache:
            pad = "<item><title>" + "x" * 1000 + "</title></item>"
            self._cache["huge"] = RSS.format(pad * (12 * MIB // len(pad) + 1)).encode()
        return self._cache["huge"]

    def _huge(self, request, case, leaf, base):
        return self._send(request, self._huge_body())

    def _huge_chunked(self, request, case, leaf, base):
        request.setHeader("content-type", XML)
        body = self._huge_body()
        for i in range(0, len(body), MIB):       # no Content-Length: chunked
            request.write(body[i:i + MIB])
        request.finish()
        return NOT_DONE_YET

    # -- broken bodies ---------------------------------------------------------------------
    def _malformed(self, request, case, leaf, base):
        return self._send(request, b"<rss><channel><item><title>oops</channel>")

    def _html(self, request, case, leaf, base):
        return self._send(request, b"<!doctype html><html><body>Hello</body></html>",
                          "text/html")

    def _empty(self, request, case, leaf, base):
        return self._send(request, b"")

    def _binary(self, request, case, leaf, base):
        return self._send(request, bytes(range(256)) * 64, "application/octet-stream")

    def _entity_bomb(self, request, case, leaf, base):
        decl = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
        body = ('<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY l0 "lol">' + decl + ']>'
                '<rss version="2.0"><channel><title>&l9;</title>'
                + self._items(3, "lol", base) + "</channel></rss>")
        return self._send(request, body.encode())

    # -- usable but hostile ----------------------------------------------------------------
    def _many(self, request, case, leaf, base):
        if "many" not in self._cache:
            self._cache["many"] = RSS.format(self._items(20_000, "m", base, dated=False)
                                             ).encode()
        return self._send(request, self._cache["many"])

    def _huge_fields(self, request, case, leaf, base):
        big = "y" * MIB
        item = (f"<item><title>{big}</title><link>{base}/{big}</link><guid>{big}</guid>"
                "</item>")
        return self._send(request, RSS.format(item + self._items(2, "hf", base)).encode())

    def _engagement(self, request, case, leaf, base):
        k = self.fetches[request.path.decode("latin-1")]
        items = self._items(5, f"e{leaf[0]}-{k}", base,
                            comments=["1e308", "1e400", "NaN", "-5", "9" * 23])
        body = RSS.format(items)
        if int(leaf.split(".")[0]) % 2 == 0:  # feedparser-rs refuses it, feedparser reads it
            body = body.replace("</rss>", "</rsss>")
        return self._send(request, body.encode())

    def _bad_dates(self, request, case, leaf, base):
        k = self.fetches[request.path.decode("latin-1")]
        items = self._items(5, f"d{leaf[0]}-{k}", base)
        bad = (f"<item><title>impossible {k}</title><guid>bad-{k}</guid>"
               "<pubDate>2024-13-45T25:61:61Z</pubDate></item>")
        return self._send(request, RSS.format(items + bad).encode())

    def _burst(self, request, case, leaf, base):
        k = self.fetches[request.path.decode("latin-1")]
        if k <= 2:
            items = self._items(5, f"b{leaf[0]}", base, now=self.t0)
        else:
            items = self._items(self.burst_entries, f"b{leaf[0]}-{k}", base, now=self.t0)
        return self._send(request, RSS.format(items).encode())

    def _nodates(self, request, case, leaf, base):
        return self._send(request, RSS.format(self._items(3, "n", base, dated=False)).encode())

    def _dupids(self, request, case, leaf, base):
        items = "".join(f"<item><title>d{j}</title><guid>same</guid></item>" for j in range(3))
        return self._send(request, RSS.format(items).encode())

    def _future(self, request, case, leaf, base):
        now = self.time_source()
        item = (f"<item><title>f</title><guid>f1</guid>"
                f"<pubDate>{formatdate(now + 86400 * 365, usegmt=True)}</pubDate></item>")
        return self._send(request, RSS.format(item).encode())


# -- dead and moved feeds ----------------------------------------------------------------------
#: what can become of a healthy feed of ``sim.serve`` (``--fates``)
FATES: dict[str, str] = {
    "301": "moved: 301 Moved Permanently to /moved/<i>.xml, which serves the feed",
    "308": "moved: 308 Permanent Redirect to /moved/<i>.xml, which serves the feed",
    "302": "a temporary 302 to /moved/<i>.xml (nothing moved)",
    "410": "410 Gone",
    "404": "404 Not Found",
}


def parse_fates(spec: str | dict | None) -> dict[int, tuple[str, float]]:
    """``--fates``: comma-separated ``i:fate`` or ``i:fate:seconds`` (the feed answers so
    for the first ``seconds`` of the server's clock, then serves its feed again: a feed
    that revives) -> {feed: (fate, until)}; a dict of that form is taken as it is."""
    if isinstance(spec, dict):
        return dict(spec)
    fates: dict[int, tuple[str, float]] = {}
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        fields = part.strip().split(":")
        if len(fields) not in (2, 3) or fields[1] not in FATES:
            raise ValueError(f"fate {part!r}: expected i:fate[:seconds], fate among "
                             f"{', '.join(FATES)}")
        fates[int(fields[0])] = (fields[1], float(fields[2]) if len(fields) == 3
                                 else float("inf"))
    return fates


class FeedFates:
    """Healthy feeds that move or die (``FATES``), on the server's clock ``time_source``."""

    def __init__(self, fates: dict[int, tuple[str, float]], time_source) -> None:
        self.fates = fates
        self.time_source = time_source
        self.t0 = time_source()
        self.answered: Counter[int] = Counter()     # feed -> requests its fate answered

    def render(self, request: Request, i: int, base: str) -> bytes | None:
        """The answer of ``/feed/<i>.xml`` when its fate says one; None: serve the feed."""
        fate, until = self.fates.get(i, ("", 0.0))
        if not fate or self.time_source() - self.t0 >= until:
            return None
        self.answered[i] += 1
        request.setResponseCode(int(fate))
        if fate in ("301", "308", "302"):
            request.setHeader("location", f"{base}/moved/{i}.xml")
            return b""
        request.setHeader("content-type", "text/plain")
        return b"gone" if fate == "410" else b"not found"
