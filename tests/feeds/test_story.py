"""Story identity across feeds: link normalisation and the keys of an entry."""

import numpy as np
import pytest

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.feeds.story import (
    DEFAULT_FILTER,
    ParamFilter,
    _normalise_parsed,
    normal_links,
    normalise_link,
    story_key_column,
    story_keys,
)


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


# -- the fast path for links in their normal form ---------------------------------------------

def test_normal_links_fast_path():
    urls = ["https://news.example.org/world/2024/05/a-story.html", "http://x.org/a/b",
            "https://www.example.com/a//b;v=1/%C3%A9~x"]
    assert normal_links(urls) == ["news.example.org/world/2024/05/a-story.html", "x.org/a/b",
                                  "www.example.com/a//b;v=1/%C3%A9~x"]
    assert normal_links([]) == []


@pytest.mark.parametrize("url", [
    "https://x.org/", "https://x.org", "https://X.org/a", "HTTPS://x.org/a", "https://x.org/a/",
    "https://x.org./a", "https://x.org:443/a", "https://u@x.org/a", "https://x.org/a?b=1",
    "https://x.org/a#b", "https://x.org/a:b", " https://x.org/a", "https://x.org/a b",
    "https://x.org/\u00e9", "https://[::1]/a", "https:///a", "tag:x.org,2024:1",
    "https://x.org/a\nhttps://y.org/b",
])
def test_normal_links_refuses_what_needs_parsing(url):
    """Each of these needs the full normaliser: the batch refuses it, alone or among normal
    links, and normalise_link still gives the full normaliser's key."""
    assert normal_links([url]) is None
    assert normal_links(["https://ok.example/1", url, "https://ok.example/2"]) is None
    assert normalise_link(url) == _normalise_parsed(url, DEFAULT_FILTER)


_SCHEMES = ["https://", "http://", "HTTP://", "Https://", "ftp://", "", "https:/", "//"]
_HOSTS = ["x.org", "news.example.com", "WWW.Example.COM", "x.org.", ".x.org", "a_b-c.d9",
          "127.0.0.1", "[2001:db8::1]", "[::1", "", "ex\u00e4mple.de", "x..org"]
_PORTS = ["", "", "", ":443", ":80", ":8080", ":", ":x", ":99999"]
_USERS = ["", "", "", "u@", "u:p@"]
_SEGMENT_CHARS = [*"abcxyzABC019-._~%!$&'()*+,;=@:", "%2F", "\u00e9", " ", "\t", "\x01"]
_QUERIES = ["", "", "", "?", "?a=1", "?utm_source=rss&id=7", "?b=2&a=1", "?x", "?a=1&&b"]
_FRAGMENTS = ["", "", "", "#", "#top"]


def _random_url(rng):
    def pick(options):
        return options[rng.integers(len(options))]

    path = "".join("/" + "".join(pick(_SEGMENT_CHARS) for _ in range(rng.integers(0, 6)))
                   for _ in range(rng.integers(0, 4)))
    if rng.random() < 0.2:
        path += "/"
    url = (pick(_SCHEMES) + pick(_USERS) + pick(_HOSTS) + pick(_PORTS) + path
           + pick(_QUERIES) + pick(_FRAGMENTS))
    return (" " + url) if rng.random() < 0.05 else url


def _plain_url(rng):
    """A link in its normal form (what the fast path is for)."""
    segments = ["".join(rng.choice(list("abcdefXYZ0123-_.~%!$&'()*+,;=@"),
                                   size=rng.integers(1, 12)))
                for _ in range(rng.integers(1, 5))]
    return f"{rng.choice(['http', 'https'])}://{rng.choice(_HOSTS[:2] + _HOSTS[5:7])}/" \
        + "/".join(segments)


def test_fast_path_gives_the_full_normalisers_keys():
    """On many generated URLs (seeded), the fast paths (one link; a feed's links at once)
    give exactly the keys of the full normaliser, and take most plain links."""
    rng = np.random.default_rng(27)
    fast = 0
    for _ in range(4000):
        urls = [_plain_url(rng) if rng.random() < 0.5 else _random_url(rng)
                for _ in range(rng.integers(1, 6))]
        full = [_normalise_parsed(u, DEFAULT_FILTER) for u in urls]
        assert [normalise_link(u) for u in urls] == full, urls
        batch = normal_links(urls)
        if batch is not None:
            fast += 1
            assert batch == full, urls
    assert fast > 400       # the batch took every plain feed (about a sixth of them)


def test_story_key_column_agrees_with_story_keys():
    rng = np.random.default_rng(5)
    taken = 0
    for _ in range(2000):
        rows = []
        shape = rng.integers(4)
        for _ in range(rng.integers(1, 5)):
            link = _plain_url(rng) if rng.random() < 0.9 else _random_url(rng)
            key = {0: link, 1: "tag:x.org,2024:" + link[-3:], 2: _plain_url(rng),
                   3: link}[int(shape)]
            rows.append(entry(key, None if shape == 3 else link))
        column = story_key_column(rows)
        if column is not None:
            taken += 1
            assert [(k,) for k in column] == [story_keys(e) for e in rows]
    assert taken > 500
    assert story_key_column([entry("https://a.example/1", "https://b.example/1")]) is None
    assert story_key_column([entry("tag:1"), entry("https://a.example/1")]) is None
