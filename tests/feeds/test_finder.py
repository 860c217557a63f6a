"""The feed finder on fixtures: the feeds a page, its Link headers and its robots.txt name,
the decoys left out, and the well-known paths."""

from scrapy_whittle.feeds.finder import (
    FEED_PATHS,
    FoundFeed,
    header_feeds,
    header_links,
    is_comments_feed,
    is_news_sitemap,
    is_sitemap,
    page_feeds,
    robots_sitemaps,
    serves_feed,
    well_known_urls,
)

PAGE = b"""<!doctype html>
<html><head>
<title>Daily News</title>
<link rel="stylesheet" href="/main.css">
<link rel="alternate" type="application/rss+xml" title="Daily News - World" href="/world/feed">
<link rel="alternate" type="application/atom+xml" title="Daily News - Sport"
      href="https://feeds.example.org/sport.atom">
<link rel="alternate" type="application/feed+json" title="JSON" href="feed.json">
<link rel="alternate" type="application/rss+xml" title="Daily News &raquo; Comments Feed"
      href="/comments/feed/">
<link rel="alternate" type="application/rss+xml" title="Commentary" href="/commentary/rss">
<link rel="alternate" type="application/json" href="/wp-json/wp/v2/pages/7">
<link rel="alternate" hreflang="de" href="/de/">
<link rel="alternate" type="application/rss+xml" href="/world/feed">
<link rel="alternate" type="application/rss+xml" href="javascript:void(0)">
<link rel="alternate" type="application/rss+xml" href="">
</head><body>
<a href="/rss">Our RSS feeds</a>
<link rel="alternate" type="application/rss+xml" title="Post 5 comments"
      href="/2026/11/post-5/feed/">
</body></html>"""


def test_a_page_names_its_feeds_and_not_its_decoys():
    found = page_feeds(PAGE, "https://news.example.com/")
    assert found == [
        FoundFeed("https://news.example.com/world/feed", "Daily News - World"),
        FoundFeed("https://feeds.example.org/sport.atom", "Daily News - Sport"),
        FoundFeed("https://news.example.com/feed.json", "JSON"),
        FoundFeed("https://news.example.com/commentary/rss", "Commentary"),
    ]


def test_base_href_and_unreadable_pages():
    page = (b'<html><head><base href="https://cdn.example.com/site/">'
            b'<link rel="alternate" type="application/rss+xml" href="rss.xml"></head></html>')
    assert page_feeds(page, "https://example.com/") == [
        FoundFeed("https://cdn.example.com/site/rss.xml")]
    assert page_feeds(b"", "https://example.com/") == []
    assert page_feeds(b"\x00\xff garbage", "https://example.com/") == []


def test_comments_feeds():
    assert is_comments_feed("https://x.org/comments/feed/", "")
    assert is_comments_feed("https://x.org/feed", "Site - Comments Feed")
    assert not is_comments_feed("https://x.org/commentary/feed", "Commentary")


def test_link_headers():
    values = ['<https://api.example.com/>; rel="https://api.w.org/", '
              '</feed/>; rel="alternate"; type="application/rss+xml"; title="News, daily"',
              '</atom>; rel=alternate; type=application/atom+xml',
              '</style.css>; rel="preload"; as="style"',
              '</comments/feed/>; rel="alternate"; type="application/rss+xml"']
    assert header_links(values[:1])[1] == ("/feed/", {"rel": "alternate",
                                                      "type": "application/rss+xml",
                                                      "title": "News, daily"})
    assert header_feeds(values, "https://example.com/index.html") == [
        FoundFeed("https://example.com/feed/", "News, daily"),
        FoundFeed("https://example.com/atom")]
    assert header_feeds(["garbage <<<"], "https://example.com/") == []


def test_robots_sitemaps_of_the_site():
    # a host may keep its sitemaps on another (a CDN); a folder's are under it
    robots = ("User-agent: *\nDisallow: /private\n"
              "Sitemap: https://example.com/sitemap_news.xml\n"
              "sitemap:/blog/news-sitemap.xml\n"
              "Sitemap: https://other.example.net/sitemap.xml\n")
    assert robots_sitemaps(robots, "https://example.com/") == [
        FoundFeed("https://example.com/sitemap_news.xml"),
        FoundFeed("https://example.com/blog/news-sitemap.xml"),
        FoundFeed("https://other.example.net/sitemap.xml")]
    # a site that is a folder of its host takes only the sitemaps under it
    assert robots_sitemaps(robots, "https://example.com/blog/") == [
        FoundFeed("https://example.com/blog/news-sitemap.xml")]


def test_well_known_urls():
    urls = well_known_urls("https://example.com/blog/", FEED_PATHS)
    assert urls[0] == "https://example.com/feed"
    assert urls[len(FEED_PATHS)] == "https://example.com/blog/feed"
    assert len(well_known_urls("https://example.com", FEED_PATHS)) == len(FEED_PATHS)


def test_what_serves_a_feed():
    rss = (b'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
           b"<item><title>a</title><link>https://example.com/a</link></item></channel></rss>")
    kw = {"now": 1.8e9, "max_bytes": 1 << 20}
    assert serves_feed(rss, "https://example.com/feed", "text/html", **kw)   # a wrong type
    assert not serves_feed(PAGE, "https://example.com/feed", "application/rss+xml", **kw)
    assert not serves_feed(b'{"id": 1}', "https://example.com/feed.json", None, **kw)


def test_news_sitemaps_are_told_from_the_archive():
    import gzip

    news = (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
            b' xmlns:news="http://www.google.com/schemas/sitemap-news/0.9"><url><loc>'
            b"https://x.org/a</loc></url></urlset>")
    archive = (b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>'
               b"https://x.org/2019/a</loc></url></urlset>")
    index = (b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap>'
             b"<loc>https://x.org/s1.xml</loc></sitemap></sitemapindex>")
    assert is_news_sitemap(news, "https://x.org/s.xml")
    assert is_news_sitemap(gzip.compress(news), "https://x.org/s.xml.gz")
    assert not is_news_sitemap(archive, "https://x.org/news.xml")
    assert is_news_sitemap(index, "https://x.org/news-index.xml")
    assert not is_news_sitemap(index, "https://x.org/sitemap_index.xml")
    assert is_sitemap(archive) and is_sitemap(gzip.compress(index))
    assert not is_sitemap(PAGE)
