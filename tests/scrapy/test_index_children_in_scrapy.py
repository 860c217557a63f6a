"""A sitemap index's children leave the crawl when the index stops listing them, through
Scrapy against ``sim.serve --kinds mix --index-rotate``: the index lists half its children
at a time and rotates them every six hours; a child it has not listed in three of its
fetches (one an hour) retires and is not crawled, a child listed again is crawled again,
and a child the user listed too is crawled throughout. Counted in the stats."""

from __future__ import annotations

from collections import defaultdict

import pytest_twisted
from scrapy import signals

from tests.scrapy.conftest import START, VirtualWeb, make_crawler, run, whittle

HOUR = 3600.0
ROTATE = 6                     # hours between two rotations of the index
HOURS = 30


@pytest_twisted.ensureDeferred
async def test_children_no_longer_listed_retire_and_come_back_when_listed():
    web = VirtualWeb(n=32, seed=3, kinds="mix", index_rotate=float(ROTATE))
    kinds = web.server.resource.kinds
    children = [i for i in range(32) if kinds.indexed(i)]          # 7, 15, 23, 31
    user_child = children[-1]                # on the user's list as well as in the index
    listed = [url for _name, url in kinds.listed(web.url)]
    listed.append(kinds.url(web.url, user_child))
    crawled: dict[int, list[int]] = defaultdict(list)             # child -> hours crawled
    try:
        crawler = make_crawler(WHITTLE_SOURCES=listed, WHITTLE_CLOCK=web.clock,
                               WHITTLE_POLICY="round_robin", WHITTLE_BUDGET=40,
                               WHITTLE_PERIOD=HOUR, WHITTLE_MAX_EPOCHS=HOURS,
                               CONCURRENT_REQUESTS=16, CONCURRENT_REQUESTS_PER_DOMAIN=16)

        def received(response, request, spider):
            if "whittle_crawl" in request.meta:
                i = kinds.source_of(response.url.split(web.url, 1)[1])
                if i is not None:
                    crawled[i].append(int((web.clock.now() - START) // HOUR))

        crawler.signals.connect(received, signal=signals.response_received, weak=False)
        w = whittle(await run(crawler))
    finally:
        await web.stop()
    assert w["sources/named"] > 0 and not [k for k in w if k.startswith("errors/")], w
    assert set(crawled[user_child]) == set(range(HOURS))      # listed by the user: always
    periods = range(HOURS // ROTATE)
    unlisted = relisted = 0
    for j, i in enumerate(children):
        if i == user_child:
            continue
        hours = set(crawled[i])
        shown = [(j + p) % 2 == 0 for p in periods]      # the periods the index lists it
        first = shown.index(True)
        for p in periods[first:]:
            start = p * ROTATE
            if shown[p]:
                # registered (or listed again) at the index's fetch in the period's first
                # hour, crawled in every later hour of it
                assert set(range(start + 1, start + ROTATE)) <= hours, (i, p, sorted(hours))
                relisted += p > first
            else:
                # the index's fetches in its first three hours miss it: retired, not crawled
                assert not hours & set(range(start + 3, start + ROTATE)), (i, p, sorted(hours))
                unlisted += 1
    assert (w["sources/unlisted"], w["sources/relisted"]) == (unlisted, relisted)
    assert w["sources/retired"] == unlisted
