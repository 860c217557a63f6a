"""Story identity across feeds: link normalisation and the keys of an entry."""

import pytest

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.feeds.story import ParamFilter, normalise_link, story_keys


def entry(key, link=None):
    return FeedEntry(key=key, title="t", link=link, published=None, engagement=None)


@pytest.mark.parametrize("a, b", [
    ("https://www.example.com/world/2024/05/story.html",
     "HTTP://WWW.Example.COM:80/world/2024/05/story.html"),
    ("https://news.example.org/a/b/", "https://news.example.org/a/b"),
    ("https://news.example.org/a?utm_source=rss&utm_medium=feed&id=7",
     "https://news.example.org/a?id=7"),
    ("https://news.example.org/a?fbclid=IwAR3x&gclid=abc&mc_cid=1&mc_eid=2",
     "https://news.example.org/a"),
    ("https://news.example.org/a?b=2&a=1", "https://news.example.org/a?a=1&b=2"),
    ("https://news.example.org/a#comments", "https://news.example.org/a"),
    ("https://news.example.org:443/a", "https://news.example.org/a"),
    ("https://news.example.org./a", "https://news.example.org/a"),
    ("https://user:pw@news.example.org/a", "https://news.example.org/a"),
    ("https://news.example.org", "https://news.example.org/"),
    ("https://x.org/a?UTM_Campaign=x", "https://x.org/a"),
])
def test_same_story(a, b):
    assert normalise_link(a) == normalise_link(b) is not None


@pytest.mark.parametrize("a, b", [
    ("https://news.example.org/a?id=7", "https://news.example.org/a?id=8"),
    ("https://news.example.org/A", "https://news.example.org/a"),
    ("https://news.example.org/a", "https://www.news.example.org/a"),
    ("https://news.example.org:8080/a", "https://news.example.org/a"),
    ("https://a.example.org/x", "https://b.example.org/x"),
])
def test_different_stories(a, b):
    assert normalise_link(a) != normalise_link(b)


@pytest.mark.parametrize("url", [None, "", "tag:example.org,2024:1", "urn:uuid:1234",
                                 "ftp://x.org/a", "/relative/path", "https://", "http://[::1"])
def test_not_a_story_link(url):
    assert normalise_link(url) is None


def test_ipv6_host_and_port_kept():
    assert normalise_link("http://[2001:DB8::1]:8080/a/") == "[2001:db8::1]:8080/a"


def test_drop_list_is_settable():
    keep_utm = ParamFilter(["ref"])
    assert normalise_link("https://x.org/a?utm_source=rss", keep_utm) == "x.org/a?utm_source=rss"
    assert normalise_link("https://x.org/a?ref=home", keep_utm) == "x.org/a"
    assert normalise_link("https://x.org/a?ref=home") == "x.org/a?ref=home"


def test_story_keys():
    assert story_keys(entry("https://x.org/a", "https://x.org/a?utm_source=rss")) == ("x.org/a",)
    # a syndicated copy: its own page, the wire's URL as guid
    assert story_keys(entry("https://wire.example/123", "https://outlet.example/123")) == (
        "outlet.example/123", "wire.example/123")
    assert story_keys(entry("tag:x.org,2024:1", "https://x.org/a")) == ("x.org/a",)
    assert story_keys(entry("https://x.org/a")) == ("x.org/a",)
    assert story_keys(entry("tag:x.org,2024:1")) == ()
    assert story_keys(entry("sha1:abc")) == ()
