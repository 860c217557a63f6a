"""A host's delay is its allowance in the plan: a robots.txt Crawl-delay, a DOWNLOAD_SLOTS
delay or DOWNLOAD_DELAY (every host's) of d seconds lets floor(T / d) of its crawls into an
epoch of T seconds, the rest of the budget going to other hosts; it is no longer a cost of
each source. First fetches and retired sources' probes spend the same allowance."""

from __future__ import annotations

import math
from collections import Counter
from urllib.parse import urlsplit

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.hosts.host_allowances import delay_limit
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from tests.service.test_host_throttle import BIG, START, URLS, FakeWeb, crawl_epochs


def make_service(clock, *, urls=URLS, slot_delays=None, download_delay=0.0, **settings):
    # one plan an epoch: these tests count in epochs (the default's steps: test_steps.py)
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 6, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_STEP": 600.0,
                                          "WHITTLE_POLICY": "round_robin", **settings})
    service = RecrawlService(config, clock=clock, slot_delays=slot_delays,
                             download_delay=download_delay)
    service.open([SourceSpec(url=u) for u in urls])
    return service


def test_delay_limit_is_the_crawls_an_epoch_leaves():
    assert delay_limit(250.0, 600.0) == 2.0          # floor(600 / 250)
    assert delay_limit(600.0, 600.0) == 1.0
    assert delay_limit(1200.0, 600.0) == 0.5         # one crawl every other epoch
    assert delay_limit(0.0, 600.0) == math.inf


def test_a_crawl_delay_host_gets_its_allowance_and_the_rest_goes_elsewhere():
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    assert service.set_crawl_delay(BIG, 250.0)       # 600 s / 250 s: 2 crawls an epoch
    assert not service.set_crawl_delay(BIG, 250.0)   # said again: nothing new
    epochs = crawl_epochs(service, clock, FakeWeb(), 8)
    assert [big for big, _ in epochs] == [2] * 8, epochs
    assert all(total == 6 for _, total in epochs), epochs
    # not a cost of each source any more: every crawl costs 1 of the budget
    assert list(service.policy.problem.cost) == [1.0] * len(URLS)
    assert service.stats.get("crawls/cost") == service.stats.get("crawls") == 48


def test_a_delay_longer_than_an_epoch_is_one_crawl_every_few_epochs():
    clock = SimulatedClock(start=START)
    service = make_service(clock, slot_delays={BIG: 1800.0})     # a third of a crawl
    epochs = crawl_epochs(service, clock, FakeWeb(), 9)
    bigs = [big for big, _ in epochs]
    assert sum(bigs) == 3 and max(bigs) == 1, bigs
    assert all(total == 6 for _, total in epochs), epochs


def test_download_delay_is_an_allowance_of_every_host_and_a_slot_s_own_delay_wins():
    urls = [f"https://h{h}.example/feed/{i}.xml" for h in range(3) for i in range(6)]
    clock = SimulatedClock(start=START)
    service = make_service(clock, urls=urls, download_delay=300.0,    # 2 crawls an epoch
                           slot_delays={"h2.example": 0.0}, WHITTLE_BUDGET=12)
    sent: Counter = Counter()
    for _ in range(4):
        epoch = service.timeline.epoch_of(clock.now())
        while (crawl := service.next_crawl()) is not None:
            sent[epoch, urlsplit(crawl.url).hostname] += 1
            service.feed_fetched(crawl, [FeedEntry(key=f"{crawl.url}@{epoch}", title=None,
                                                   link=None, published=clock.now() - 1,
                                                   engagement=None)])
        clock.advance_to(START + (epoch + 1) * 600.0)
    for k in range(4):
        assert sent[k, "h0.example"] == sent[k, "h1.example"] == 2, sent
        assert sent[k, "h2.example"] == 6, sent      # its slot has no delay: no allowance
    # a configured limit and a delay: the lesser holds
    clock = SimulatedClock(start=START)
    service = make_service(clock, slot_delays={BIG: 200.0},          # 3 an epoch
                           WHITTLE_HOST_LIMITS={BIG: 5})
    bigs = [big for big, _ in crawl_epochs(service, clock, FakeWeb(), 3)]
    assert bigs[0] == 3 and max(bigs) == 3, bigs
    clock = SimulatedClock(start=START)
    service = make_service(clock, slot_delays={BIG: 200.0}, WHITTLE_HOST_LIMITS={BIG: 1})
    bigs = [big for big, _ in crawl_epochs(service, clock, FakeWeb(), 3)]
    assert bigs[0] == 1 and max(bigs) == 1, bigs


def test_no_delay_means_no_allowance():
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    assert not service.throttle.limited()
    epochs = crawl_epochs(service, clock, FakeWeb(), 3)
    assert epochs[0] == (6, 6)                 # round robin takes the big host's first


def test_first_fetches_spend_the_host_s_allowance():
    """With WHITTLE_DISCOVERY every source is fetched once outside the budget, spread over a
    period: the big host's twelve first fetches take two epochs' worth of its limit of 6,
    never more than 6 an epoch with the plan's."""
    clock = SimulatedClock(start=START)
    service = make_service(clock, WHITTLE_DISCOVERY=True, WHITTLE_HOST_LIMITS={BIG: 6},
                           WHITTLE_BUDGET=2)
    web = FakeWeb()
    for _ in range(4):
        epoch = service.timeline.epoch_of(clock.now())
        # time runs within the epoch so that the sweep's first fetches come due
        for step in range(60):
            clock.advance_to(START + epoch * 600.0 + step * 10.0)
            while (crawl := service.next_crawl()) is not None:
                web.fetch(service, crawl, epoch)
        clock.advance_to(START + (epoch + 1) * 600.0)
    bigs = [web.sent[k, BIG] for k in range(4)]
    assert max(bigs) <= 6, bigs
    assert (service.state.crawls[:len(URLS)] > 0).all()     # every source fetched in the end
    assert bigs[0] == 6 and bigs[1] >= 6, bigs


class GoneWeb(FakeWeb):
    """The big host's feeds answer 410 Gone; the others a feed."""

    def fetch(self, service, crawl, epoch):
        host = urlsplit(crawl.url).hostname
        if host != BIG:
            return super().fetch(service, crawl, epoch)
        self.sent[epoch, host] += 1
        service.crawl_failed(crawl, "http_410", "gone")


def test_probes_of_retired_sources_spend_the_host_s_allowance():
    """The big host's twelve feeds are gone (retired in the first epoch), each probed every
    epoch; then its robots.txt asks for 200 s between requests: 3 probes an epoch go
    through, the others wait for later epochs."""
    clock = SimulatedClock(start=START)
    service = make_service(clock, WHITTLE_BUDGET=12, WHITTLE_RETIRE_PROBE=600.0)
    web = GoneWeb()
    first = crawl_epochs(service, clock, web, 1)
    assert first[0][0] == 12 and len(service.retirement.probes) == 12
    service.set_crawl_delay(BIG, 200.0)
    epochs = crawl_epochs(service, clock, web, 8)
    assert [big for big, _ in epochs] == [3] * 8, epochs      # its whole allowance, no more
    assert service.stats.get("probes/crawls") == 24
