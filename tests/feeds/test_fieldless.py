"""Feeds the fast parser reads but whose entries come out without any usable field (no id,
link, title or summary): they go to feedparser as well, which reads them."""

from __future__ import annotations

import pytest

from scrapy_whittle.feeds.parse import NeedsFallback, parse_feed

URL = "https://example.com/feed"
NOW = 1_800_000_000.0

#: an RSS feed whose items carry their text only in <body> (feedparser reads it as content)
RSS_BODY_ONLY = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>
<link>https://example.com/</link>
<item><body>First story text</body></item><item><body>Second story</body></item>
</channel></rss>"""

#: an Atom 0.3 feed whose links are the <link> element's text, not an href
ATOM03_LINK_TEXT = b"""<?xml version="1.0"?><feed version="0.3" xmlns="http://purl.org/atom/ns#">
<title>t</title>
<entry><link>https://example.com/a</link><issued>2027-01-15T07:00:00Z</issued></entry>
<entry><link>https://example.com/b</link></entry></feed>"""


def test_rss_items_with_text_only_in_body_are_read_by_the_fallback():
    feed = parse_feed(RSS_BODY_ONLY, url=URL, now=NOW)
    assert feed.parser == "feedparser" and "fallback_parser" in feed.notices
    assert len(feed.entries) == 2
    assert all(e.key.startswith("sha1:") for e in feed.entries)
    assert feed.entries[0].key != feed.entries[1].key


def test_atom03_link_text_is_read_by_the_fallback():
    feed = parse_feed(ATOM03_LINK_TEXT, url=URL, now=NOW)
    assert feed.parser == "feedparser"
    assert [e.link for e in feed.entries] == ["https://example.com/a", "https://example.com/b"]
    assert [e.key for e in feed.entries] == ["https://example.com/a", "https://example.com/b"]
    assert feed.entries[0].published == 1_799_996_400.0


@pytest.mark.parametrize("body", [RSS_BODY_ONLY, ATOM03_LINK_TEXT], ids=["rss_body", "atom03"])
def test_without_fallback_they_ask_for_it(body):
    with pytest.raises(NeedsFallback, match="without id, link, title or summary"):
        parse_feed(body, url=URL, now=NOW, fallback=False)


def test_a_feed_whose_entries_have_fields_stays_with_the_fast_parser():
    body = RSS_BODY_ONLY.replace(b"<body>First story text</body>", b"<title>First</title>")
    body = body.replace(b"<body>Second story</body>", b"<title>Second</title>")
    feed = parse_feed(body, url=URL, now=NOW, fallback=False)
    assert feed.parser == "feedparser-rs" and [e.title for e in feed.entries] == \
        ["First", "Second"]
