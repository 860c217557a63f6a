"""DeliveryMiddleware: a feed response's batch is delivered once its callback is done and
every item it yielded went through the pipelines (scraped, dropped or failed there), whatever
the order of those events; a replay request is answered without a download."""

from __future__ import annotations

import pytest
import pytest_twisted
from scrapy import Request, signals
from scrapy.http import Response
from scrapy.utils.test import get_crawler

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.scrapy.delivery import DeliveryMiddleware, replay_request, replay_response
from scrapy_whittle.scrapy.meta import META_BATCH
from scrapy_whittle.scrapy.sink import publish
from scrapy_whittle.service.state.deliveries import Batch


class Sink:
    def __init__(self) -> None:
        self.batches: list[int] = []

    def delivered(self, batch: int) -> None:
        self.batches.append(batch)


@pytest.fixture
def setup():
    crawler = get_crawler()
    sink = Sink()
    publish(crawler, sink)                 # as the scheduler publishes its sink
    return crawler, sink, DeliveryMiddleware.from_crawler(crawler)


def response(batch: int | None) -> Response:
    meta = {} if batch is None else {META_BATCH: batch}
    return Response("http://h/feed", request=Request("http://h/feed", meta=meta))


def through(crawler, item, resp, signal=signals.item_scraped) -> None:
    extra = {"exception": ValueError("dropped")} if signal is signals.item_dropped else {}
    if signal is signals.item_error:
        extra = {"failure": None}
    crawler.signals.send_catch_log(signal, item=item, response=resp, spider=None, **extra)


def test_a_batch_is_delivered_when_its_last_item_is_through_after_the_callback(setup):
    crawler, sink, mw = setup
    resp = response(4)
    items = [{"n": 1}, {"n": 2}, Request("http://h/article")]     # a request is no item
    out = list(mw.process_spider_output(resp, iter(items)))
    assert out == items and sink.batches == []
    through(crawler, items[0], resp)
    assert sink.batches == []
    through(crawler, items[1], resp, signals.item_dropped)      # dropped on purpose counts
    assert sink.batches == [4]


def test_items_through_before_the_callback_ends_wait_for_its_end(setup):
    crawler, sink, mw = setup
    resp = response(5)
    gen = mw.process_spider_output(resp, iter([{"n": 1}, {"n": 2}]))
    first = next(gen)
    through(crawler, first, resp, signals.item_error)
    assert sink.batches == []
    second = next(gen)
    through(crawler, second, resp)
    assert sink.batches == []                   # the callback may yield more
    assert list(gen) == []
    assert sink.batches == [5]


def test_a_callback_that_makes_no_item_or_fails_delivers_its_batch(setup):
    crawler, sink, mw = setup
    assert list(mw.process_spider_output(response(6), iter([]))) == []

    def failing():
        yield {"n": 1}
        raise RuntimeError("the spider's bug")

    resp = response(7)
    gen = mw.process_spider_output(resp, failing())
    item = next(gen)
    with pytest.raises(RuntimeError):
        next(gen)
    through(crawler, item, resp)
    assert sink.batches == [6, 7]


@pytest_twisted.ensureDeferred
async def test_async_callbacks_are_counted_too(setup):
    crawler, sink, mw = setup
    resp = response(8)

    async def output():
        yield {"n": 1}

    out = [x async for x in mw.process_spider_output_async(resp, output())]
    through(crawler, out[0], resp)
    assert sink.batches == [8]


def test_responses_without_a_batch_pass_untouched(setup):
    crawler, sink, mw = setup
    resp = response(None)
    item = {"n": 1}
    assert list(mw.process_spider_output(resp, iter([item]))) == [item]
    through(crawler, item, resp)
    assert sink.batches == [] and mw.open == {}


def test_a_replay_is_answered_with_the_batch_s_entries():
    entries = [FeedEntry("k", "t", "http://127.0.0.1/a", 1.0, None)]
    batch = Batch(3, "http://h/feed", 2, entries, [0.5], 100.0)
    request = replay_request(batch)
    resp = replay_response(request)
    assert resp.status == 200 and resp.url == "http://h/feed" and resp.body == b""
    meta = resp.meta
    assert meta["whittle_entries"] == entries and meta["whittle_values"] == [0.5]
    assert meta["whittle_time"] == 100.0 and meta[META_BATCH] == 3
    assert meta["whittle_source_id"] == 2 and meta["dont_obey_robotstxt"]
