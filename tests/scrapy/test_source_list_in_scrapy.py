"""A source list at a URL, fetched through Scrapy, read again as the crawl goes (on the
crawl's simulated clock), and a list that cannot be fetched."""

from __future__ import annotations

import logging

import pytest_twisted
from twisted.web.resource import Resource
from twisted.web.server import Site

from scrapy_whittle.service.clock import SimulatedClock
from tests.scrapy.conftest import START, make_crawler, run, whittle
from tests.scrapy.test_crawl import keep_scheduler


class ListAndFeeds(Resource):
    """/list.txt: feeds a, b, c for the first three hours, then a, c, d; 404 when
    ``broken``. /feed/<name>: one new entry per hour."""

    isLeaf = True

    def __init__(self, clock: SimulatedClock) -> None:
        super().__init__()
        self.clock = clock
        self.broken = False
        self.typo = False              # a malformed URL among the list's lines
        self.hits: dict[str, int] = {}

    def render_GET(self, request) -> bytes:
        path = request.path.decode()
        self.hits[path] = self.hits.get(path, 0) + 1
        hour = int((self.clock.now() - START) // 3600)
        base = f"http://{request.getHost().host}:{request.getHost().port}"
        if path == "/list.txt":
            if self.broken:
                request.setResponseCode(404)
                return b"gone"
            names = "abc" if hour < 3 else "acd"
            request.setHeader("Content-Type", "text/plain")
            typo = "htp://typo/feed\n" if self.typo else ""
            return (typo + "".join(f"{base}/feed/{n}\n" for n in names)).encode()
        name = path.rsplit("/", 1)[-1]
        request.setHeader("Content-Type", "application/rss+xml")
        return (f'<?xml version="1.0"?><rss version="2.0"><channel><title>{name}</title>'
                f"<item><title>{hour}</title><guid>{name}-{hour}</guid></item>"
                "</channel></rss>").encode()


@pytest_twisted.ensureDeferred
async def test_a_list_at_a_url_is_fetched_through_scrapy_and_refreshed(tmp_path, caplog):
    from twisted.internet import reactor

    clock = SimulatedClock(start=START, speed=0.0)
    web = ListAndFeeds(clock)
    port = reactor.listenTCP(0, Site(web), interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    # one plan an epoch (WHITTLE_STEP): the hits below are counted in epochs
    settings = dict(WHITTLE_SOURCES=f"{url}/list.txt", WHITTLE_SOURCES_REFRESH=3600,
                    WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=3, WHITTLE_PERIOD=3600,
                    WHITTLE_STEP=3600,
                    WHITTLE_MAX_EPOCHS=6, WHITTLE_CLOCK=clock, JOBDIR=str(tmp_path / "job"))
    try:
        crawler = make_crawler(**settings)
        box = keep_scheduler(crawler)
        stats = await run(crawler)
        w = whittle(stats)
        service = box["scheduler"].service
        # read at start and every simulated hour, through Scrapy's downloader
        assert web.hits["/list.txt"] == 6
        assert stats["downloader/request_count"] == 6 + w["crawls"]
        assert [service.url(i).rsplit("/", 1)[-1] for i in range(4)] == list("abcd")
        assert service.sources.left.tolist() == [False, True, False, False]
        # b left at hour 3 and d joined. The list's fetch at hour 3 is in flight while the
        # epoch of hour 3 is planned: b's crawl of that hour was handed out before the new
        # list arrived, none after; d is first planned in the epoch of hour 4.
        assert web.hits["/feed/b"] == 4 and web.hits["/feed/d"] == 2
        assert w["sources"] == 3 and w["sources/left"] == 1

        # the next run cannot fetch its list: it goes on with the sources the JOBDIR holds
        web.broken = True
        caplog.clear()
        crawler = make_crawler(**{**settings, "WHITTLE_MAX_EPOCHS": 2,
                                  "WHITTLE_SOURCES_REFRESH": 1800})
        w = whittle(await run(crawler))
    finally:
        await port.stopListening()
    assert w["errors/sources_list"] == 4 and w["crawls"] == 6
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "list.txt cannot be used" in errors[0].getMessage()
    assert "404" in errors[0].getMessage()


@pytest_twisted.ensureDeferred
async def test_dqn_starts_with_no_source_and_crawls_the_list_fetched_at_a_url():
    """The scheduler opens before the list arrives: DQN is built for no source, then grows
    to the list's sources and crawls them. The list's malformed line is skipped and
    counted."""
    from twisted.internet import reactor

    clock = SimulatedClock(start=START, speed=0.0)
    web = ListAndFeeds(clock)
    web.typo = True
    port = reactor.listenTCP(0, Site(web), interface="127.0.0.1")
    url = f"http://127.0.0.1:{port.getHost().port}"
    try:
        crawler = make_crawler(WHITTLE_SOURCES=f"{url}/list.txt", WHITTLE_POLICY="dqn",
                               WHITTLE_POLICY_OPTIONS={"hidden": [8]}, WHITTLE_BUDGET=2,
                               WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=3, WHITTLE_CLOCK=clock)
        w = whittle(await run(crawler))
    finally:
        await port.stopListening()
    assert w["sources"] == 3 and w["crawls"] > 0 and w.get("errors/sources_list", 0) == 0
    assert w["sources/skipped"] == 1
    assert sum(web.hits.get(f"/feed/{n}", 0) for n in "abc") == w["crawls"]


@pytest_twisted.ensureDeferred
async def test_a_bad_entry_of_the_list_is_skipped_named_and_counted(tmp_path, caplog):
    """One malformed URL among eleven: the crawl goes on with the ten, one WARNING line
    names the bad one, and ``whittle/sources/skipped`` counts it."""
    good = [f"http://127.0.0.1:1/feed/{i}.xml" for i in range(10)]
    listed = tmp_path / "feeds.txt"
    listed.write_text("\n".join([*good[:3], "htp://typo/feed.xml", *good[3:]]) + "\n")
    crawler = make_crawler(WHITTLE_SOURCES=str(listed), WHITTLE_POLICY="round_robin",
                           WHITTLE_BUDGET=2, WHITTLE_PERIOD=3600, WHITTLE_MAX_EPOCHS=1,
                           WHITTLE_CLOCK=SimulatedClock(start=START, speed=0.0))
    with caplog.at_level(logging.WARNING):
        w = whittle(await run(crawler))
    assert w["sources"] == 10 and w["sources/skipped"] == 1
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "bad entr" in r.getMessage()]
    assert warnings == [f"WHITTLE_SOURCES ({str(listed)!r}): 1 bad entry skipped, the crawl "
                        "goes on with the other 10: line 4: 'htp://typo/feed.xml' is not an "
                        "http(s) URL"]
