"""One site's search, step by step, its requests answered by hand: what it asks for, in which
order, and what it keeps; a failed fetch only skips its step."""

from __future__ import annotations

from scrapy import Request
from scrapy.http import HtmlResponse, TextResponse
from scrapy.spidermiddlewares.httperror import HttpError
from twisted.internet.error import ConnectionRefusedError
from twisted.python.failure import Failure

from scrapy_whittle.feeds.finder import FEED_PATHS, SITEMAP_PATHS, FoundFeed
from scrapy_whittle.scrapy.site_search import Search

SITE = "https://news.example.com/"
RSS = (b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title><item><title>a'
       b"</title><link>https://news.example.com/a</link></item></channel></rss>")
PAGE = b"<!doctype html><html><head><title>News</title></head><body>Hello</body></html>"


class Searching:
    def __init__(self) -> None:
        self.sent: list[Request] = []
        self.done: list[Search] = []
        self.errors: list[str] = []
        self.search = Search(SITE, self.sent.append, self.done.append, now=lambda: 1.8e9,
                             max_bytes=1 << 20, on_error=self.errors.append)

    def answer(self, body: bytes = b"", status: int = 200, url: str | None = None,
               cls=TextResponse) -> None:
        request = self.sent[-1]
        response = cls(url or request.url, status=status, body=body, request=request,
                       encoding="utf-8")
        if status >= 300:
            failure = Failure(HttpError(response))
            request.errback(failure)
        else:
            request.callback(response)

    def fail(self) -> None:
        self.sent[-1].errback(Failure(ConnectionRefusedError()))


def page(body: bytes, headers: dict | None = None) -> HtmlResponse:
    return HtmlResponse(SITE, body=body, headers=headers or {}, encoding="utf-8")


NEWS = (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        b'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"><url>'
        b"<loc>https://news.example.com/a</loc><news:news><news:publication_date>2026-11-28"
        b"</news:publication_date><news:title>A</news:title></news:news></url></urlset>")
ARCHIVE = (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
           b"<url><loc>https://news.example.com/2019/a</loc></url></urlset>")


def test_a_page_that_names_feeds_needs_no_guess_of_a_feed():
    s = Searching()
    head = (b'<html><head><link rel="alternate" type="application/rss+xml" href="/rss">'
            b"</head></html>")
    s.search.start(page(head))
    assert [r.url for r in s.sent] == [SITE + "robots.txt"]
    s.answer(b"User-agent: *\nSitemap: https://news.example.com/sitemap.xml\n"
             b"Sitemap: https://news.example.com/news.xml\n"
             b"Sitemap: https://news.example.com/latest.rss\n")
    s.answer(ARCHIVE)                               # the archive: not news, not taken
    s.answer(NEWS)
    s.answer(RSS)                                   # a feed as a sitemap: the protocol's
    assert [r.url for r in s.sent[1:]] == [SITE + "sitemap.xml", SITE + "news.xml",
                                           SITE + "latest.rss"]
    assert s.done == [s.search]
    assert s.search.found == [FoundFeed(SITE + "rss"), FoundFeed(SITE + "news.xml"),
                              FoundFeed(SITE + "latest.rss")]
    assert s.errors == []


def test_guesses_go_one_by_one_and_stop_at_the_first_feed():
    s = Searching()
    s.search.start(page(PAGE))
    s.answer(b"", status=404)                       # no robots.txt: an answer, no error
    assert s.sent[-1].url == SITE + FEED_PATHS[0]
    s.answer(PAGE, url=SITE)                        # /feed redirected home: no feed
    assert s.sent[-1].url == SITE + FEED_PATHS[1]
    s.fail()                                        # /rss: the connection failed
    assert s.sent[-1].url == SITE + FEED_PATHS[2]
    s.answer(RSS)                                   # /atom.xml: a feed, the last feed guess
    assert s.sent[-1].url == SITE + SITEMAP_PATHS[0]
    for _ in SITEMAP_PATHS:
        s.answer(b"", status=404)
    assert s.done == [s.search]
    assert s.search.found == [FoundFeed(SITE + FEED_PATHS[2])]
    assert len(s.errors) == 1 and "ConnectionRefusedError" in s.errors[0]
    assert len(s.sent) == 4 + len(SITEMAP_PATHS)


def test_a_site_without_anything_ends_with_nothing():
    s = Searching()
    s.search.start(page(b"\x00\x01 not html at all"))
    s.fail()                                        # robots.txt unreachable
    while not s.done:
        s.answer(b"", status=404)
    assert s.search.found == []
    assert len(s.sent) == 1 + len(FEED_PATHS) + len(SITEMAP_PATHS)


def test_link_headers_count_as_named():
    s = Searching()
    s.search.start(page(PAGE, {"Link": '</feed.atom>; rel="alternate"; '
                                       'type="application/atom+xml"'}))
    s.answer(b"User-agent: *\n")                 # no sitemap: only sitemaps are guessed
    while not s.done:
        s.answer(b"", status=404)
    assert [r.url for r in s.sent[1:]] == [SITE + p for p in SITEMAP_PATHS]
    assert s.search.found == [FoundFeed(SITE + "feed.atom")]
