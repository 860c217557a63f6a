"""ArticleQueue: article requests wait for their host (its download slot, its allowance, the
per-epoch cap), hosts in turn; once the crawl's epochs are over, one its host has no
allowance left for is answered without a download, and so is one beyond the queue's bound."""

from __future__ import annotations

from scrapy import Request

from scrapy_whittle.scrapy.articles import ArticleQueue
from scrapy_whittle.scrapy.meta import META_ARTICLE, META_UNSENT


def req(url: str) -> Request:
    return Request(url, meta={META_ARTICLE: {"link": url}})


def make(**kwargs):
    state = {"epoch": 0, "saturated": set(), "credit": {}, "ended": False}

    def admit(host):
        left = state["credit"].get(host, 99)
        if left < 1:
            return False
        state["credit"][host] = left - 1
        return True

    queue = ArticleQueue(admit=admit, saturated=lambda h: h in state["saturated"],
                         epoch=lambda: state["epoch"], ended=lambda: state["ended"],
                         **kwargs)
    return queue, state


def test_hosts_take_turns_first_in_first_out():
    queue, _ = make()
    for url in ("http://a/1", "http://a/2", "http://b/1"):
        queue.push(req(url))
    assert len(queue) == 3
    assert [queue.pop().url for _ in range(3)] == ["http://a/1", "http://b/1", "http://a/2"]
    assert queue.pop() is None and len(queue) == 0


def test_a_saturated_or_spent_host_waits_others_go():
    queue, state = make()
    queue.push(req("http://a/1"))
    queue.push(req("http://b/1"))
    state["saturated"].add("a")
    state["credit"]["b"] = 0
    assert queue.pop() is None and len(queue) == 2
    state["saturated"].clear()
    assert queue.pop().url == "http://a/1"


def test_the_cap_per_host_and_epoch():
    queue, state = make(host_limit=2)
    for k in range(3):
        queue.push(req(f"http://a/{k}"))
    assert [queue.pop().url for _ in range(2)] == ["http://a/0", "http://a/1"]
    assert queue.pop() is None
    state["epoch"] = 1
    assert queue.pop().url == "http://a/2"


def test_after_the_last_epoch_what_has_no_allowance_goes_unsent():
    queue, state = make()
    queue.push(req("http://a/1"))
    queue.push(req("http://b/1"))
    state["credit"]["a"] = 0
    state["ended"] = True
    first, second = queue.pop(), queue.pop()
    assert (first.url, first.meta.get(META_UNSENT)) == ("http://a/1", "crawl_ended")
    assert first.meta["dont_obey_robotstxt"]
    assert (second.url, META_UNSENT in second.meta) == ("http://b/1", False)
    assert len(queue) == 0


def test_beyond_its_bound_the_busiest_host_s_oldest_goes_unsent():
    queue, state = make(max_waiting=2)
    for url in ("http://a/1", "http://a/2", "http://b/1"):
        queue.push(req(url))
    state["saturated"].update({"a", "b"})
    first = queue.pop()
    assert (first.url, first.meta[META_UNSENT]) == ("http://a/1", "too_many_waiting")
    assert queue.pop() is None and len(queue) == 2


def test_feedspider_asks_for_each_linked_entry_s_page_and_keeps_the_others_items():
    from scrapy.http import Response
    from scrapy.utils.test import get_crawler

    from scrapy_whittle.feeds.parse import FeedEntry
    from scrapy_whittle.scrapy.meta import META_ARTICLE_OF, META_BATCH, META_ENTRY
    from scrapy_whittle.scrapy.spiders import FeedSpider

    crawler = get_crawler(FeedSpider, {"WHITTLE_BUDGET": 1, "WHITTLE_ARTICLES": True,
                                       "WHITTLE_SOURCES": ["http://h/feed"]})
    spider = FeedSpider.from_crawler(crawler)
    entries = [FeedEntry("a", "A", "http://h/a", 1.0, None),
               FeedEntry("b", "B", None, 2.0, None)]
    meta = {"whittle_entries": entries, "whittle_values": [0.5, 1.0], "whittle_time": 5.0,
            "whittle_source_id": 3, "whittle_source_url": "http://h/feed", META_BATCH: 7}
    response = Response("http://h/feed", request=Request("http://h/feed", meta=meta))
    request, item = list(spider.parse(response))
    assert isinstance(request, Request) and request.url == "http://h/a"
    assert request.meta[META_ARTICLE]["entry_id"] == "a" and request.meta[META_ARTICLE_OF] == 7
    assert request.meta[META_ENTRY] == (3, 0.5) and request.dont_filter
    assert request.callback == spider.parse_article and request.errback == spider.article_failed
    assert item["entry_id"] == "b" and item["article_error"] == "no_link"
    assert item["text"] is None
