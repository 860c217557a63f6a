"""Sources of every kind behind one entry model: JSON Feed 1.0 / 1.1 and (news) sitemaps,
told from the body, read into the same FeedEntry as RSS / Atom, bounded like feeds."""

from __future__ import annotations

import gzip
import io
import json

import feedparser
import pytest

from scrapy_whittle.feeds.kinds import detect, gunzip, w3c_date
from scrapy_whittle.feeds.parse import FeedError, ParseLimits, parse_feed
from scrapy_whittle.feeds.parsers import PARSERS

URL = "https://news.example.com/feed"
NOW = 1_800_000_000.0            # 2027-01-15T08:00:00Z
T1 = "2027-01-15T07:00:00Z"      # NOW - 3600
T2 = "2027-01-15T08:30:00+01:00"  # NOW - 1800


def json_feed(items, version="https://jsonfeed.org/version/1.1", **extra) -> bytes:
    return json.dumps({"version": version, "title": "J", "items": items, **extra}).encode()


def urlset(*urls: str) -> bytes:
    return ("<?xml version='1.0' encoding='UTF-8'?>\n"
            "<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9' "
            "xmlns:news='http://www.google.com/schemas/sitemap-news/0.9'>"
            + "".join(urls) + "</urlset>").encode()


def news_url(loc, published=None, title=None, lastmod=None) -> str:
    news = ""
    if published or title:
        news = ("<news:news><news:publication><news:name>N</news:name>"
                "<news:language>en</news:language></news:publication>"
                + (f"<news:publication_date>{published}</news:publication_date>"
                   if published else "")
                + (f"<news:title>{title}</news:title>" if title else "") + "</news:news>")
    mod = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    return f"<url><loc>{loc}</loc>{mod}{news}</url>"


@pytest.fixture(params=sorted(PARSERS))
def parse(request):
    """parse_feed with each WHITTLE_FEED_PARSER: the kind is read the same under both."""
    def run(body, **kw):
        kw.setdefault("url", URL)
        return parse_feed(body, now=NOW, parser=request.param, **kw)
    return run


# -- JSON Feed ---------------------------------------------------------------------------
def test_json_feed_items_become_entries(parse):
    body = json_feed([
        {"id": "a1", "url": "https://news.example.com/a", "title": "A",
         "date_published": T1, "authors": [{"name": "x"}]},
        {"id": 42, "external_url": "https://elsewhere.example/b", "date_modified": T2},
        {"url": "/c", "content_text": "just text"},
        {"content_html": "<p>only <b>html</b></p>"},
    ])
    feed = parse(body, content_type="text/xml")          # the type is not believed
    assert feed.kind == "json11" and feed.parser == "json"
    a, b, c, d = feed.entries
    assert (a.key, a.link, a.title, a.published) == ("a1", "https://news.example.com/a", "A",
                                                     NOW - 3600)
    assert (b.key, b.link, b.published) == ("42", "https://elsewhere.example/b", NOW - 1800)
    assert c.key == c.link == "https://news.example.com/c"
    assert d.key.startswith("sha1:") and d.link is None and d.published is None
    assert "no_dates" in feed.notices


def test_json_feed_10_and_its_version_name(parse):
    feed = parse(json_feed([{"id": "x", "url": "https://n.example/x"}],
                           version="https://jsonfeed.org/version/1"))
    assert feed.kind == "json10" and [e.key for e in feed.entries] == ["x"]


def test_feedparser_does_not_read_json_feed():
    parsed = feedparser.parse(io.BytesIO(json_feed([{"id": "x", "url": "https://n/x"}])))
    assert not parsed.entries and not parsed.version


@pytest.mark.parametrize(("body", "kind"), [
    (b'{"title": "no version"}', "not_a_feed"),
    (b'{"version": "https://example.com/version/1", "items": []}', "not_a_feed"),
    (b'{"version": "https://jsonfeed.org/version/1.1", "items": [', "malformed"),
    (b'{"version": "https://jsonfeed.org/version/1.1", "x": ' + b"[" * 50_000
     + b"]" * 50_000 + b"}", "malformed"),                          # nesting
    (b'{"version": "https://jsonfeed.org/version/1.1", "x": ' + b"9" * 5000 + b"}",
     "malformed"),                                                  # a 5000-digit integer
    (b'{"version": "https://jsonfeed.org/version/1.1", "t": "\xff\xfe"}', "malformed"),
    (b'{"version": "https://jsonfeed.org/version/1.1", "items": ['
     + b",".join([b"{}"] * 200_001) + b"]}", "too_large"),          # 200,001 objects
], ids=["no_version", "other_version", "cut", "deep", "huge_int", "not_utf8", "objects"])
def test_hostile_or_foreign_json_is_a_clear_error(parse, body, kind):
    with pytest.raises(FeedError) as info:
        parse(body)
    assert info.value.kind == kind


def test_wrong_types_lose_only_the_field(parse):
    body = json_feed([
        "not an object", ["a list"], None,
        {"id": {"x": 1}, "url": 7, "title": ["t"], "date_published": 12,
         "external_url": "https://n.example/ok"},
        {"id": True, "title": "a bool id is no id", "date_published": "yesterday"},
    ])
    feed = parse(body)
    assert [e.key for e in feed.entries[:1]] == ["https://n.example/ok"]
    assert feed.entries[0].title is None and feed.entries[0].published is None
    assert feed.entries[1].key.startswith("sha1:")
    assert "entries_dropped" in feed.notices
    assert parse(json_feed("items should be a list")).entries == []


def test_json_feed_limits_apply(parse):
    items = [{"id": str(k), "title": "t" * 5000} for k in range(30)]
    feed = parse(json_feed(items), limits=ParseLimits(max_entries=10, max_field_chars=100))
    assert [e.key for e in feed.entries] == [str(k) for k in range(10)]
    assert all(len(e.title) == 100 for e in feed.entries)
    assert {"too_many_entries", "field_too_long"} <= set(feed.notices)


# -- sitemaps ----------------------------------------------------------------------------
def test_news_sitemap_entries(parse):
    body = urlset(
        news_url("https://news.example.com/1", published=T1, title="One", lastmod=T2),
        news_url("https://news.example.com/2", lastmod=T2),
        news_url("/3"),
        "<url><lastmod>2027-01-15</lastmod></url>",                     # no loc: dropped
    )
    feed = parse(body, url="https://news.example.com/news.xml")
    assert feed.kind == "sitemap" and feed.parser == "lxml" and feed.sources == ()
    one, two, three = feed.entries
    assert (one.key, one.link, one.title, one.published) == (
        "https://news.example.com/1", "https://news.example.com/1", "One", NOW - 3600)
    assert (two.title, two.published) == (None, NOW - 1800)       # lastmod without news
    assert three.key == "https://news.example.com/3" and three.published is None
    assert {"no_dates", "entries_dropped"} <= set(feed.notices)


def test_sitemap_index_children_become_sources(parse):
    body = (b"<?xml version='1.0'?><sitemapindex "
            b"xmlns='http://www.sitemaps.org/schemas/sitemap/0.9'>"
            b"<sitemap><loc>https://news.example.com/s1.xml</loc></sitemap>"
            b"<sitemap><loc>/s2.xml.gz</loc><lastmod>2027-01-01</lastmod></sitemap>"
            b"<sitemap><loc>https://attacker.example/s3.xml</loc></sitemap>"
            b"<sitemap><loc>file:///etc/passwd</loc></sitemap>"
            b"<sitemap><loc>https://news.example.com/s1.xml</loc></sitemap>"
            b"</sitemapindex>")
    feed = parse(body, url="https://news.example.com/index.xml")
    assert feed.kind == "sitemapindex" and feed.entries == []
    assert feed.sources == ("https://news.example.com/s1.xml",
                            "https://news.example.com/s2.xml.gz")
    assert "sources_refused" in feed.notices
    assert not feed.sources_partial


def test_a_sitemap_index_read_only_in_part_says_so(parse):
    """Its children beyond the entry cap, or after broken XML, are not in ``sources``: the
    crawl must not take them for children it no longer lists."""
    children = b"".join(b"<sitemap><loc>https://news.example.com/s%d.xml</loc></sitemap>" % i
                        for i in range(5))
    whole = b"<sitemapindex>" + children + b"</sitemapindex>"
    url = "https://news.example.com/index.xml"
    assert not parse(whole, url=url).sources_partial
    capped = parse(whole, url=url, limits=ParseLimits(max_entries=3))
    assert len(capped.sources) == 3 and capped.sources_partial
    broken = parse(whole[:-30], url=url)
    assert broken.sources and broken.sources_partial
    assert not parse(urlset("https://news.example.com/1"), url=url).sources_partial


def test_sitemap_without_namespace_and_with_comments_first(parse):
    body = (b"<?xml version='1.0'?><!-- generated --><?pi x?><urlset>"
            b"<url><loc>https://n.example/a</loc></url></urlset>")
    assert [e.key for e in parse(body).entries] == ["https://n.example/a"]


def test_sitemap_entry_cap_stops_the_reading(parse):
    body = urlset(*(news_url(f"https://n.example/{k}") for k in range(50)))
    feed = parse(body, limits=ParseLimits(max_entries=7))
    assert [e.key for e in feed.entries] == [f"https://n.example/{k}" for k in range(7)]
    assert "too_many_entries" in feed.notices


def test_sitemap_entities_are_never_expanded(parse):
    body = (b"<?xml version='1.0'?><!DOCTYPE urlset [<!ENTITY a 'aaaaaaaaaa'>"
            b"<!ENTITY b '&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;'>"
            b"<!ENTITY ext SYSTEM 'file:///etc/passwd'>]>"
            b"<urlset><url><loc>https://n.example/&b;&ext;</loc></url></urlset>")
    feed = parse(body)
    assert "aaaa" not in feed.entries[0].key and "root" not in feed.entries[0].key
    assert "doctype_removed" in feed.notices


def test_a_comment_after_the_root_is_no_defect(parse):
    body = urlset(news_url("https://n.example/a")) + b"\n<!-- XML Sitemap generated by X -->\n"
    feed = parse(body)
    assert [e.key for e in feed.entries] == ["https://n.example/a"]
    assert not any("Syntax" in w for w in feed.warnings)


def test_a_gzip_sitemap_is_decompressed_only_as_far_as_the_entry_cap():
    body = urlset(*(news_url(f"https://n.example/{k:05d}", published=T1)
                    for k in range(20_000)))
    packed = gzip.compress(body)
    small = ParseLimits(max_bytes=len(body) // 4, max_entries=1000)
    feed = parse_feed(packed, url=URL, now=NOW, limits=small)
    assert len(feed.entries) == 1000 and "too_many_entries" in feed.notices
    assert feed.entries[-1].key == "https://n.example/00999"
    with pytest.raises(FeedError) as info:            # the cap past the size limit
        parse_feed(packed, url=URL, now=NOW,
                   limits=ParseLimits(max_bytes=len(body) // 4, max_entries=20_000))
    assert info.value.kind == "too_large"
    whole = parse_feed(packed, url=URL, now=NOW, limits=ParseLimits(max_bytes=len(body),
                                                                     max_entries=20_000))
    assert len(whole.entries) == 20_000 and "too_many_entries" not in whole.notices


def test_broken_sitemap_keeps_what_was_read_or_is_malformed(parse):
    cut = urlset(news_url("https://n.example/a"), news_url("https://n.example/b"))[:-40]
    assert [e.key for e in parse(cut).entries][:1] == ["https://n.example/a"]
    assert any("SitemapSyntaxError" in w for w in parse(cut).warnings)
    with pytest.raises(FeedError) as info:
        parse(b"<urlset \x01\x02>")
    assert info.value.kind == "malformed"


# -- detection and gzip ------------------------------------------------------------------
@pytest.mark.parametrize(("body", "kind"), [
    (b'  \xef\xbb\xbf {"version": 1}', "json"),
    (b"<?xml version='1.0'?>\n<!-- c --><urlset/>", "sitemap"),
    (b"<sm:sitemapindex xmlns:sm='x'/>", "sitemap"),
    (b"<rss version='2.0'><channel/></rss>", "xml"),
    (b"<!-- <urlset> --><feed/>", "xml"),
])
def test_the_kind_is_told_from_the_body(body, kind):
    assert detect(body) == kind


def test_gzip_bodies_of_every_kind(parse):
    sitemap = urlset(news_url("https://n.example/a", published=T1))
    assert parse(gzip.compress(sitemap)).entries[0].published == NOW - 3600
    feed = json_feed([{"id": "j"}])
    assert parse(gzip.compress(feed)).kind == "json11"
    rss = (b"<rss version='2.0'><channel><item><guid>g</guid></item></channel></rss>")
    assert [e.key for e in parse(gzip.compress(rss)).entries] == ["g"]


def test_a_gzip_bomb_stops_at_the_size_limit():
    bomb = gzip.compress(b"<urlset>" + b" " * (64 * 1024 * 1024) + b"</urlset>")
    assert len(bomb) < 100_000
    with pytest.raises(FeedError) as info:
        parse_feed(bomb, url=URL, now=NOW, limits=ParseLimits(max_bytes=1_000_000))
    assert info.value.kind == "too_large"
    with pytest.raises(FeedError) as info:
        gunzip(bomb, max_bytes=1_000_000, url=URL)
    assert info.value.kind == "too_large"


@pytest.mark.parametrize("body", [b"\x1f\x8b\x08\x00garbage", gzip.compress(b"x" * 1000)[:30]],
                         ids=["corrupt", "cut"])
def test_a_broken_gzip_body_is_malformed(body):
    with pytest.raises(FeedError) as info:
        parse_feed(body, url=URL, now=NOW)
    assert info.value.kind == "malformed"


def test_gzip_members_are_all_read():
    assert gunzip(gzip.compress(b"ab") + gzip.compress(b"cd"), max_bytes=10, url=URL) == b"abcd"


@pytest.mark.parametrize(("text", "expected"), [
    ("2027-01-15T07:00:00Z", NOW - 3600),
    ("2027-01-15T08:30+01:00", NOW - 1800),
    ("2027-01-15T07:00:00.25-00:00", NOW - 3600),
    ("2027-01-15", NOW - 8 * 3600),
    ("yesterday", None), ("", None), (None, None), (12, None), ("9" * 100, None),
])
def test_w3c_dates(text, expected):
    import calendar

    stamp = w3c_date(text)
    assert (calendar.timegm(stamp) if stamp else None) == expected


def test_a_url_element_of_an_extension_is_no_entry(parse):
    body = (b"<urlset xmlns='http://www.sitemaps.org/schemas/sitemap/0.9' xmlns:x='urn:x'>"
            b"<url><loc>https://n.example/a</loc><x:ext><x:url>inner</x:url><url>b</url>"
            b"</x:ext><lastmod>2027-01-15T07:00:00Z</lastmod></url></urlset>")
    feed = parse(body)
    assert [(e.key, e.published) for e in feed.entries] == [("https://n.example/a",
                                                            NOW - 3600)]
