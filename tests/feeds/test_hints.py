"""What servers and feeds say about the next visit: read from responses and feeds by both
parsers, honoured by the re-crawl service (capped, persisted), never trusted beyond a day."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.feeds.hints import (
    FeedHints,
    ServerHints,
    http_not_before,
    response_hints,
    retry_after,
    skipped,
)
from scrapy_whittle.feeds.httpdates import http_date
from scrapy_whittle.feeds.parse import FeedEntry, parse_feed
from scrapy_whittle.service.state.store import SqliteStateStore
from tests.service.test_recrawl import START, make_service

HINTED = b"""<?xml version="1.0"?>
<rss version="2.0" xmlns:sy="http://purl.org/rss/1.0/modules/syndication/">
<channel><title>t</title><link>https://example.org/</link><description>d</description>
<ttl>90</ttl>
<skipHours><hour>0</hour><hour>1</hour><hour>2</hour></skipHours>
<skipDays><day>Sunday</day></skipDays>
<sy:updatePeriod>daily</sy:updatePeriod><sy:updateFrequency>4</sy:updateFrequency>
<item><title>a</title><link>https://example.org/a</link><guid>a</guid></item>
</channel></rss>"""

PLAIN = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>
<item><title>a</title><guid>a</guid></item></channel></rss>"""


@pytest.mark.parametrize("parser", ["feedparser-rs", "feedparser"])
def test_both_parsers_read_the_feed_hints(parser):
    hints = parse_feed(HINTED, url="https://example.org/feed", now=START, parser=parser).hints
    assert hints.ttl == 90 * 60
    assert hints.skip_days == 1 << 6                          # Sunday (Monday = 0)
    assert hints.update_rate == pytest.approx(4 / 86400)
    # feedparser keeps only the last <hour> of skipHours; feedparser-rs keeps them all
    assert hints.skip_hours == (0b100 if parser == "feedparser" else 0b111)
    assert parse_feed(PLAIN, url="https://example.org/feed", now=START,
                      parser=parser).hints.empty


def test_unreadable_feed_hints_are_ignored():
    from scrapy_whittle.feeds.hints import feed_hints

    h = feed_hints("soon", ["25", "x", "-1", "3"], ["Funday", "monday"], "fortnightly", "0")
    assert h == FeedHints(ttl=None, skip_hours=1 << 3, skip_days=1, update_rate=None)
    # a mask covering every hour (or day) would switch the source off: not a usable hint
    assert feed_hints(None, list(range(24)), None, None, None).skip_hours == 0
    assert feed_hints(None, None, None, "hourly", None).update_rate == pytest.approx(1 / 3600)


def test_http_caching_headers_and_retry_after():
    now = START
    assert http_not_before({"Cache-Control": b"public, max-age=600"}, now) == ("max_age",
                                                                                now + 600)
    assert http_not_before({"Cache-Control": "no-cache, max-age=0"}, now) is None
    assert http_not_before({"Expires": http_date(now + 3600)}, now) == ("expires", now + 3600)
    assert http_not_before({"Expires": "0"}, now) is None                 # "already expired"
    assert http_not_before({"Expires": http_date(now - 10)}, now) is None
    assert retry_after({"Retry-After": b"120"}, now) == 120
    assert retry_after({"Retry-After": http_date(now + 300)}, now) == pytest.approx(300)
    assert retry_after({"Retry-After": "soon"}, now) is None
    assert retry_after({}, now) is None


def test_skip_masks_are_in_gmt_hours_and_weekdays():
    monday_3am = 1_700_438_400 + 3 * 3600              # 2023-11-20 03:00 UTC, a Monday
    assert skipped(monday_3am, 1 << 3, 0) and not skipped(monday_3am + 3600, 1 << 3, 0)
    assert skipped(monday_3am, 0, 1) and not skipped(monday_3am + 86400, 0, 1)
    # the source table's masks, one answer per feed, the same as one feed at a time
    hours = np.array([0, 1 << 3, 1 << 4, 0, 1 << 3], dtype=np.uint32)
    days = np.array([0, 0, 0, 1, 1 << 1], dtype=np.uint8)
    for t in (monday_3am, monday_3am + 3600, monday_3am + 86400):
        expected = [skipped(t, int(h), int(d)) for h, d in zip(hours, days, strict=True)]
        assert skipped(t, hours, days).tolist() == expected
    assert skipped(monday_3am, hours, days).tolist() == [False, True, False, True, True]


def test_server_hints_survive_the_cluster_message_encoding():
    for h in (ServerHints(START + 5, "max_age", None),
              ServerHints(0.0, "", FeedHints(ttl=60.0, skip_hours=7, skip_days=64,
                                             update_rate=0.25)),
              ServerHints(0.0, "", FeedHints())):
        assert ServerHints.decode(h.encode()) == h
    assert ServerHints.decode("") is None


def _fetch(service, clock, crawl, hints):
    entries = [FeedEntry(key=f"{crawl.source}:{clock.now()}", title=None, link=None,
                         published=clock.now() - 60, engagement=None)]
    return service.feed_fetched(crawl, entries, hints=hints)


def test_ttl_and_max_age_hold_a_source_back_capped_by_the_max_delay():
    service, clock = make_service(n=3, budget=3, period=600.0,
                                  WHITTLE_HINTS_MAX_DELAY=3000.0)
    crawls = [service.next_crawl() for _ in range(3)]
    now = clock.now()
    _fetch(service, clock, crawls[0], response_hints({}, now, FeedHints(ttl=1200.0)))
    _fetch(service, clock, crawls[1], response_hints(
        {"Cache-Control": "max-age=86400"}, now, FeedHints()))
    _fetch(service, clock, crawls[2], response_hints({}, now, FeedHints()))
    assert service.sources.not_before(0) == now + 1200
    assert service.sources.not_before(1) == now + 3000            # capped at a day -> 3000 s
    assert service.sources.not_before(2) <= now
    assert service.stats.get("hints/ttl") == 1 and service.stats.get("hints/max_age") == 1
    seen = []
    for _ in range(8):                                           # 8 epochs of 600 s
        while (c := service.next_crawl()) is not None:
            seen.append((c.source, c.sent_at - now))
            _fetch(service, clock, c, None)
        clock.advance_to(service.wake_at)
    first = {sid: min(t for s, t in seen if s == sid) for sid in (0, 1, 2)}
    # source 0 is planned in the epoch its ttl ends in, and fetched the moment it ends
    assert first == {0: 1200.0, 1: 3000.0, 2: 600.0}


def test_hints_off_ignores_them():
    service, clock = make_service(n=1, budget=1, WHITTLE_HINTS=False)
    crawl = service.next_crawl()
    _fetch(service, clock, crawl, ServerHints(clock.now() + 5000, "max_age",
                                              FeedHints(ttl=9000.0, skip_hours=(1 << 24) - 2)))
    assert service.sources.not_before(0) <= clock.now()
    failed = service.next_crawl() or crawl
    assert service.crawl_failed(failed, "http_429", "HTTP 429", retry_after=7200) == 60.0


def test_retry_after_lengthens_the_back_off_but_is_capped():
    service, clock = make_service(n=2, budget=2, WHITTLE_HINTS_MAX_DELAY=3600.0)
    a, b = service.next_crawl(), service.next_crawl()
    assert service.crawl_failed(a, "http_429", "HTTP 429", retry_after=900) == 900
    assert service.crawl_failed(b, "http_503", "HTTP 503", retry_after=10 ** 7) == 3600
    assert service.sources.retry_at[0] == clock.now() + 900
    assert service.stats.get("hints/retry_after") == 2


def test_skip_hours_keep_a_source_out_of_those_hours():
    hour0 = (int(START) // 86400 + 1) * 86400.0                 # a midnight, GMT
    service, clock = make_service(n=2, budget=2, period=3600.0,
                                  clock=_clock_at(hour0))
    a, b = service.next_crawl(), service.next_crawl()
    every_night = FeedHints(skip_hours=0b1111110)               # 01:00 .. 06:59
    _fetch(service, clock, a, ServerHints(feed=every_night))
    _fetch(service, clock, b, ServerHints(feed=FeedHints()))
    assert service.stats.get("hints/skip") == 1
    assert service.sources.not_before(0) == hour0               # hour 0 itself is allowed
    assert service.sources.not_before(0, hour0 + 3600) == hour0 + 7 * 3600
    assert not service.sources.eligible(hour0 + 3600, set())[0]
    hours = []
    for _ in range(24):
        while (c := service.next_crawl()) is not None:
            hours.append((c.source, int(c.sent_at - hour0) // 3600 % 24))
            _fetch(service, clock, c, ServerHints(feed=every_night if c.source == 0
                                                  else FeedHints()))
        clock.advance_to(service.wake_at)
    assert {h for s, h in hours if s == 0} == set(range(7, 24))
    assert {h for s, h in hours if s == 1} == set(range(1, 24))


def _clock_at(t):
    from scrapy_whittle.service.clock import SimulatedClock

    return SimulatedClock(start=t)


def test_declared_rate_is_a_prior_that_evidence_outweighs():
    service, _ = make_service(n=2, budget=2, policy="whittle", period=3600.0)
    a, b = service.next_crawl(), service.next_crawl()
    service.crawl_failed(b, "timeout", "timeout")                # b learns nothing
    rates = service.policy.rate_estimator()
    before = rates.mean()[1]
    service.not_modified(a, hints=ServerHints(feed=FeedHints(update_rate=24 / 86400)))
    service.flush()
    # a 304 teaches nothing about the rate: the declared one becomes the prior
    assert rates.updates[0] == 0
    assert rates.mean()[0] == pytest.approx(24 / 86400)
    assert rates.mean()[1] == before
    assert service.stats.get("hints/update_period") == 1
    # once the policy has learned something, a declaration does not undo it
    rates.update([0], [30], [3600.0])
    learned = rates.mean()[0]
    service.policy.set_prior_rate([0], [1e-6])
    assert rates.mean()[0] == learned


def test_skip_masks_and_not_before_survive_a_restart(tmp_path):
    store = SqliteStateStore(tmp_path)
    service, clock = make_service(n=2, budget=2, store=store)
    a, b = service.next_crawl(), service.next_crawl()
    _fetch(service, clock, a, ServerHints(feed=FeedHints(ttl=1800.0, skip_hours=0b1010,
                                                        skip_days=0b11)))
    _fetch(service, clock, b, ServerHints(feed=FeedHints()))
    retry_at = float(service.sources.retry_at[0])
    service.close()
    again, _ = make_service(n=2, budget=2, store=SqliteStateStore(tmp_path), clock=clock)
    src = again.sources
    assert (int(src.skip_hours[0]), int(src.skip_days[0])) == (0b1010, 0b11)
    assert (int(src.skip_hours[1]), int(src.skip_days[1])) == (0, 0)
    assert src.retry_at[0] == retry_at and src.has_skips
    assert np.array_equal(src.eligible(clock.now(), set()),
                          service.sources.eligible(clock.now(), set()))
    again.close()
