from __future__ import annotations

import pytest

from scrapy_whittle.feeds.parse import FeedError, parse_feed
from scrapy_whittle.feeds.parsers import PARSERS

NOW = 1_700_000_000.0          # 2023-11-14T22:13:20Z

RSS20 = b"""<?xml version="1.0" encoding="utf-8"?>
<rss version="2.0" xmlns:slash="http://purl.org/rss/1.0/modules/slash/"
     xmlns:thr="http://purl.org/syndication/thread/1.0">
<channel><title>News</title><link>http://example.com/</link><description>d</description>
<item><title>First</title><link>http://example.com/1</link><guid>http://example.com/g1</guid>
  <pubDate>Tue, 14 Nov 2023 21:00:00 GMT</pubDate><slash:comments>12</slash:comments></item>
<item><title>Second</title><link>http://example.com/2</link>
  <pubDate>Tue, 14 Nov 2023 20:00:00 GMT</pubDate><thr:total>3</thr:total></item>
<item><title>No link no id</title><description>body text</description></item>
<item><title>Future</title><link>http://example.com/f</link>
  <pubDate>Tue, 14 Nov 2034 20:00:00 GMT</pubDate></item>
<item><title>Ancient</title><link>http://example.com/a</link>
  <pubDate>Mon, 01 Jan 1900 00:00:00 GMT</pubDate></item>
<item><title>Dup</title><link>http://example.com/1b</link><guid>http://example.com/g1</guid></item>
</channel></rss>"""

ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>A</title><id>urn:feed</id>
<updated>2023-11-14T20:00:00Z</updated>
<entry><title>E1</title><id>urn:e1</id><link href="http://example.com/e1"/>
  <updated>2023-11-14T19:00:00Z</updated></entry>
<entry><title>E2</title><id>urn:e2</id><link href="http://example.com/e2"/>
  <published>2023-11-14T18:30:00Z</published><updated>2023-11-14T19:30:00Z</updated></entry>
</feed>"""

RSS10 = b"""<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/"
  xmlns:dc="http://purl.org/dc/elements/1.1/">
<channel rdf:about="http://example.com/"><title>R</title><link>http://example.com/</link>
<description>d</description></channel>
<item rdf:about="http://example.com/r1"><title>R1</title><link>http://example.com/r1</link>
<dc:date>2023-11-14T10:00:00Z</dc:date></item>
</rdf:RDF>"""


@pytest.fixture(params=sorted(PARSERS))
def parse(request):
    """parse_feed with each parser in turn: every test here holds for both."""
    def run(body, **kw):
        return parse_feed(body, url="http://example.com/feed", now=NOW, parser=request.param,
                          **kw)
    return run


def test_rss20_entries_keys_dates_and_engagement(parse):
    feed = parse(RSS20, content_type="application/rss+xml")
    assert feed.kind == "rss20"
    first, second, nolink, future, ancient, dup = feed.entries
    assert first.key == "http://example.com/g1" and first.title == "First"
    assert first.published == 1_699_995_600.0 and first.engagement == 12.0
    assert second.key == "http://example.com/2" and second.engagement == 3.0   # link as key
    assert nolink.key.startswith("sha1:") and nolink.link is None
    assert future.published is None and ancient.published is None
    assert dup.key == first.key
    assert any("future" in w for w in feed.warnings)


def test_atom_and_rss10(parse):
    atom = parse(ATOM)
    assert atom.kind == "atom10"
    assert [e.key for e in atom.entries] == ["urn:e1", "urn:e2"]
    assert atom.entries[0].published == 1_699_988_400.0           # updated as fallback
    assert atom.entries[1].published == 1_699_986_600.0           # published preferred
    rdf = parse(RSS10)
    assert rdf.kind == "rss10" and rdf.entries[0].link == "http://example.com/r1"
    assert rdf.entries[0].published == 1_699_956_000.0


@pytest.mark.parametrize(("body", "ctype", "kind"), [
    (b"", None, "empty"),
    (b"   \n ", None, "empty"),
    (b"<!DOCTYPE html><html><head><title>x</title></head><body>hi</body></html>",
     "text/html; charset=utf-8", "not_a_feed"),
    (b"<html><body><p>no type given</p></body></html>", None, "not_a_feed"),
    (b"this is \xff\xfe not xml at all", None, "malformed"),
])
def test_unusable_bodies_raise_typed_errors(parse, body, ctype, kind):
    with pytest.raises(FeedError) as exc:
        parse(body, content_type=ctype)
    assert exc.value.kind == kind


def test_huge_body_is_refused_before_parsing(parse):
    with pytest.raises(FeedError) as exc:
        parse(b"<rss>" + b" " * 2000 + b"</rss>", max_bytes=1000)
    assert exc.value.kind == "too_large"


def test_wrong_encoding_declaration_is_usable_with_a_warning(parse):
    body = RSS20.replace(b'encoding="utf-8"', b'encoding="ascii"').replace(
        b"<title>First</title>", "<title>Café</title>".encode("latin-1"))
    feed = parse(body)
    assert feed.entries[0].title == "Café"
    assert any("Encoding" in w for w in feed.warnings)


def test_truncated_feed_is_bozo_but_usable(parse):
    feed = parse(RSS20[: RSS20.index(b"<item><title>Future")])
    assert [e.title for e in feed.entries][:2] == ["First", "Second"]
    assert feed.warnings
