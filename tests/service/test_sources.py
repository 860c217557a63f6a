
import numpy as np
import pytest

from scrapy_whittle.service.sources.registry import (
    SourceListError,
    SourceRegistry,
    SourceSpec,
    load_oracle,
    load_sources,
)

OPML = b"""<?xml version="1.0"?><opml version="2.0"><head/><body>
<outline text="news"><outline xmlUrl="http://a.example/rss" title="A" weight="2.5"/>
<outline xmlUrl="https://b.example/atom" minInterval="600"/></outline>
<outline text="folder without url"/></body></opml>"""


def test_opml_text_json_and_list(tmp_path):
    opml = tmp_path / "feeds.opml"
    opml.write_bytes(OPML)
    specs = load_sources(str(opml))
    assert [s.url for s in specs] == ["http://a.example/rss", "https://b.example/atom"]
    assert specs[0].weight == 2.5 and specs[0].title == "A" and specs[1].min_interval == 600
    txt = tmp_path / "feeds.txt"
    txt.write_text("# comment\nhttp://a.example/rss\n\n https://c.example/x  trailing\n")
    assert [s.url for s in load_sources(str(txt))] == ["http://a.example/rss",
                                                      "https://c.example/x"]
    js = tmp_path / "feeds.json"
    js.write_text('["http://a.example/rss", {"url": "http://d.example/", "weight": 3}]')
    assert load_sources(str(js))[1].weight == 3
    assert load_sources(["http://a.example/rss"])[0].url == "http://a.example/rss"
    assert load_sources(None) == []


def test_bad_lists(tmp_path):
    bad = tmp_path / "bad.opml"
    bad.write_bytes(b"<opml><body><outline xmlUrl='http://x/' ")
    with pytest.raises(SourceListError, match="not well-formed"):
        load_sources(str(bad))
    bad.write_bytes(b"<opml><body><outline xmlUrl='http://x/' weight='heavy'/></body></opml>")
    with pytest.raises(SourceListError, match="not a number"):
        load_sources(str(bad))
    with pytest.raises(SourceListError, match="not an http"):
        load_sources(["not a url"])
    txt = tmp_path / "feeds.txt"
    txt.write_text("# feeds\n\n  ftp://b.example/x  # old\n")
    with pytest.raises(SourceListError, match=r"no usable entry \(1 bad: line 3: "
                                              r"'ftp://b.example/x' is not an http"):
        load_sources(str(txt))


def test_a_bad_entry_is_skipped_and_named_the_rest_is_used(tmp_path):
    """One malformed URL in a list of many leaves that entry out, not the list: each bad
    entry is named (with its line in a text file) in ``skipped``."""
    good = [f"https://s{i}.example/feed" for i in range(10)]
    txt = tmp_path / "feeds.txt"
    txt.write_text("\n".join([*good[:4], "htp:/typo.example/feed", *good[4:]]) + "\n")
    specs = load_sources(str(txt))
    assert [s.url for s in specs] == good
    assert specs.skipped == ["line 5: 'htp:/typo.example/feed' is not an http(s) URL"]
    opml = tmp_path / "feeds.opml"
    outlines = "".join(f'<outline xmlUrl="{u}"/>' for u in good)
    opml.write_text(f'<opml><body>{outlines}<outline title="E" xmlUrl=""/>'
                    '<outline xmlUrl="ftp://f.example/x"/>'
                    '<outline xmlUrl="https://w.example/f" weight="heavy"/></body></opml>')
    specs = load_sources(str(opml))
    assert [s.url for s in specs] == good
    assert specs.skipped[0] == "line 1: outline 'E': empty xmlUrl"
    assert specs.skipped[1] == "'ftp://f.example/x' is not an http(s) URL"
    assert "weight='heavy' is not a number" in specs.skipped[2]
    specs = load_sources([good[0], "", 42, {"url": good[1], "weight": -1}, good[2]])
    assert [s.url for s in specs] == [good[0], good[2]] and len(specs.skipped) == 3


def test_an_opml_with_a_broken_line_is_read_around_it(tmp_path):
    """An unclosed ``<outline`` (the parser notices it a line later) is named at its own
    line and left out, every other feed read; an outline that is neither a feed nor a
    folder (no xmlUrl, no children) is named too."""
    feeds = [f"https://s{i}.example/feed" for i in range(20)]
    lines = ['<?xml version="1.0"?>', '<opml version="2.0">', "<head><title>t</title></head>",
             "<body>", '<outline text="News">']
    lines += [f'<outline text="f{i}" xmlUrl="{u}"/>' for i, u in enumerate(feeds[:7])]
    lines += ['<outline text="broken" xmlUrl="https://broken.example/feed"']      # line 13
    lines += [f'<outline text="f{i}" xmlUrl="{u}"/>' for i, u in enumerate(feeds[7:], 7)]
    lines += ['<outline text="a podcast I forgot the URL of"/>', "</outline>", "</body>",
              "</opml>"]
    assert lines[12].startswith('<outline text="broken"')
    opml = tmp_path / "feeds.opml"
    opml.write_text("\n".join(lines))
    specs = load_sources(str(opml))
    assert [s.url for s in specs] == feeds
    assert specs.skipped[0].startswith("line 13: not well-formed XML (")
    line = lines.index('<outline text="a podcast I forgot the URL of"/>') + 1
    assert specs.skipped[1] == (f"line {line}: outline 'a podcast I forgot the URL of' has "
                                "no xmlUrl")
    assert len(specs.skipped) == 2


def test_url_lines_check_every_url_that_is_not_plain(tmp_path):
    # plain "http(s)://host/..." lines pass one scan; the others are checked one by one
    ok = ["http://a.example/rss", "HTTPS://B.example", "https://user@c.example:8443/f",
          "http://[::1]:8080/feed", "file:///tmp/feed.xml", "http://d.example?x=1"]
    txt = tmp_path / "feeds.txt"
    txt.write_text("\n".join(ok) + "\n")
    assert [s.url for s in load_sources(str(txt))] == ok
    for bad in ("http://", "https:///path", "ftp://e.example/", "mailto:x@y"):
        txt.write_text("\n".join([*ok, bad]) + "\n")
        specs = load_sources(str(txt))
        assert [s.url for s in specs] == ok
        assert specs.skipped == [f"line 7: {bad!r} is not an http(s) URL"]


def test_registry_keeps_ids():
    reg = SourceRegistry()
    assert reg.add(SourceSpec("http://a/")) == (0, True)
    assert reg.add(SourceSpec("http://b/")) == (1, True)
    assert reg.add(SourceSpec("http://a/")) == (0, False)
    other = SourceRegistry()
    other.load_state_dict(reg.state_dict())
    assert other.urls == reg.urls == ["http://a/", "http://b/"]
    assert other.get("http://b/") == 1 and other.get("http://c/") is None


def test_oracle_formats():
    doc = {"sources": [{"url": "http://a/", "rate": 1, "mean_utility": 2, "decay": 0.5}]}
    assert load_oracle(doc) == {"http://a/": (1.0, 2.0, 0.5)}
    assert load_oracle({"http://a/": {"rate": 1, "mean_utility": 2, "decay": 0}})


def test_url_host_agrees_with_urlsplit():
    from urllib.parse import urlsplit

    from scrapy_whittle.service.sources.registry import url_host

    for url in ["http://a.example/x", "HTTPS://User:pw@Host.Example:8080/p?q#f",
                "http://[::1]:8000/feed", "http://127.0.0.1:5/feed/1.xml", "https://a.b.c",
                "http://a.example?x=1", "http://a.example#x", "https://xn--bcher-kva.example/"]:
        assert url_host(url) == urlsplit(url).hostname, url
    assert url_host("file:///tmp/feed.xml") == ""
    for bad in ["ftp://x/y", "http://", "not a url", "http://a.example/ x", "", "mailto:a@b"]:
        assert url_host(bad) is None, bad


def test_url_hosts_of_many_urls_are_url_host_of_each():
    # plain lists take a short path (every netloc is its host); any other URL in the list
    # sends it the long way
    import random

    from scrapy_whittle.service.sources.registry import url_host, url_hosts

    plain = [f"http://h{i % 7}.example/feed/{i}.xml" for i in range(50)]
    assert url_hosts(plain) == [url_host(u) for u in plain]
    others = ["HTTP://B.Example/x", "https://u@h.example/", "http://h.example:8080/f",
              "http://[::1]/f", "file:///tmp/x", "ftp://x/", "not a url", "http://a\nb/"]
    rng = random.Random(3)
    for _ in range(200):
        urls = rng.sample(plain, 5) + rng.sample(others, rng.randint(0, 2))
        rng.shuffle(urls)
        assert url_hosts(urls) == [url_host(u) for u in urls], urls


@pytest.mark.parametrize("colliding", [False, True])
def test_registry_finds_every_url_one_by_one_or_in_bulk(monkeypatch, colliding):
    import scrapy_whittle.service.sources.registry as sources

    if colliding:            # every URL gets one of three hashes: found by comparing URLs
        monkeypatch.setattr(sources.xxhash, "xxh3_64_intdigest", lambda raw: len(raw) % 3)
    reg = SourceRegistry()
    urls = [f"https://h{i % 7}.example/feed/{i}.xml" for i in range(3000)]
    assert reg.add_many(urls[:1000]) == (list(range(1000)), list(range(1000)))
    for i, url in enumerate(urls[1000:2500], 1000):          # crosses index rebuilds
        assert reg.add(url) == (i, True)
    ids, new = reg.add_many(urls[2000:] + urls[:10] + [urls[2999]])
    assert ids == list(range(2000, 3000)) + list(range(10)) + [2999]
    assert new == list(range(500, 1000))
    assert all(reg.get(u) == i for i, u in enumerate(urls))
    assert reg.get("https://elsewhere.example/") is None and len(reg) == 3000
    assert reg.url(1234) == urls[1234]


def test_registry_bulk_add_into_an_empty_registry_keeps_repeated_urls_as_one():
    urls = [f"https://h{i % 7}.example/feed/{i}.xml" for i in range(2000)]
    reg = SourceRegistry()
    ids, new = reg.add_many([*urls, urls[5], urls[1999]])
    assert ids == [*range(2000), 5, 1999]
    assert new == list(range(2000)) and len(reg) == 2000
    fresh = SourceRegistry()              # all new and distinct: one pass without lookups
    assert fresh.add_many(urls) == (list(range(2000)), list(range(2000)))
    assert all(fresh.get(u) == i for i, u in enumerate(urls)) and fresh.url(1999) == urls[1999]


def _random_plain_url(rng) -> str:
    def chars(alphabet, lo, hi):
        return "".join(rng.choice(list(alphabet), int(rng.integers(lo, hi))))

    lower = "abcdefghijklmnopqrstuvwxyz0123456789-"
    unreserved = lower + "ABCDEFGHIJKLMNOPQRSTUVWXYZ._~"
    host = ".".join(chars(lower, 1, 12) for _ in range(int(rng.integers(1, 4))))
    port = f":{rng.integers(1, 65536)}" if rng.random() < 0.3 else ""
    path = "".join("/" + chars(unreserved, 0, 10) for _ in range(int(rng.integers(0, 4))))
    query = "?" + chars(unreserved + "=&", 1, 20) if rng.random() < 0.3 else ""
    return f"{rng.choice(['http', 'https'])}://{host}{port}{path}{query}"


def test_plain_urls_are_what_scrapy_and_aiohttp_make_of_them():
    """A plain URL's request skips Scrapy's escaping (``verbatim_url``): it must be exactly
    what w3lib's safe_url_string and yarl would make of it, for every URL called plain."""
    import yarl
    from scrapy import Request
    from w3lib.url import safe_url_string

    from scrapy_whittle.service.sources.registry import is_plain_url

    rng = np.random.default_rng(7)
    plain = 0
    for _ in range(3000):
        url = _random_plain_url(rng)
        if is_plain_url(url):            # random ones may hold a dot segment or port 80
            plain += 1
            assert safe_url_string(url) == url == Request(url).url, url
            assert str(yarl.URL(url)) == url, url
    assert plain > 2500
    for url in ["http://h1.example/feed/1.xml", "https://news.example.com/rss?cat=world&n=20",
                "http://127.0.0.1:8080/f.xml", "http://xn--bcher-kva.example/~u/a_b.rss"]:
        assert is_plain_url(url), url
    for url in ["http://Example.com/", "http://a.b/x?", "http://a.b/\u00e4", "http://a.b/x y",
                "http://a.b/%7E", "http://a.b:80/x", "https://a.b:443/", "http://a.b/./x",
                "http://a.b/x/..", "http://a.b/x#top", "ftp://a.b/", "http://a..b/",
                "http://a.b/x?q=\u00e4", "http://user@a.b/", " http://a.b/"]:
        assert not is_plain_url(url), url


def test_source_requests_skip_the_escaping_only_where_it_changes_nothing():
    from types import SimpleNamespace

    from scrapy import Spider
    from scrapy.core.downloader import Downloader

    from scrapy_whittle.scrapy.meta import META_CRAWL
    from scrapy_whittle.scrapy.scheduler import WhittleScheduler
    from scrapy_whittle.service.clock import SimulatedClock
    from tests.scrapy.conftest import make_crawler

    plain, other = "http://h1.example/feed/1.xml", "http://h2.example/fl\u00fcsse.xml"
    crawler = make_crawler(WHITTLE_SOURCES=[plain, other], WHITTLE_BUDGET=2,
                           WHITTLE_STEP=3600,        # one plan: both requests at once
                           WHITTLE_POLICY="round_robin", WHITTLE_STATE=False,
                           WHITTLE_CLOCK=SimulatedClock(start=1e9))
    crawler.engine = SimpleNamespace(downloader=Downloader(crawler))   # what open() reads
    sched = WhittleScheduler.from_crawler(crawler)
    sched.open(Spider("s"))
    requests = {r.meta[META_CRAWL].url: r for r in (sched.next_request(), sched.next_request())}
    assert requests[plain].url == plain and requests[plain].meta["verbatim_url"]
    assert requests[other].url == "http://h2.example/fl%C3%BCsse.xml"
    assert "verbatim_url" not in requests[other].meta
    # a redirect (RedirectMiddleware replaces the URL, meta kept) to a URL that is not
    # plain is escaped again when it comes back to the scheduler; a plain one stays as is
    for target, expected in [("http://h3.example/\u00e9t\u00e9.xml",
                              "http://h3.example/%C3%A9t%C3%A9.xml"),
                             ("http://h3.example/ok.xml", "http://h3.example/ok.xml")]:
        redirected = requests[plain].replace(url=target)
        assert redirected.url == target                  # verbatim: not escaped
        assert sched.enqueue_request(redirected)
        followup = sched.next_request()
        assert followup.url == expected
        assert followup.meta[META_CRAWL] is requests[plain].meta[META_CRAWL]
        assert bool(followup.meta.get("verbatim_url")) == (target == expected)
    sched.service.close()
