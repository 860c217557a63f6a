"""Rising latency as a host's overload signal, in the re-crawl service: a host whose answers
slow down under the crawl's load is throttled and recovers when it calms; steady latency,
one slow feed, or a small absolute change never throttle it."""

from __future__ import annotations

from collections import deque
from urllib.parse import urlsplit

import numpy as np
import pytest

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.hosts.host_latency import LatencyWatch
from scrapy_whittle.service.invalid_setting import InvalidSetting
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec

START = 1_700_000_000.0
PERIOD = 600.0
BIG = "big.example"
URLS = [f"https://{BIG}/feed/{i}.xml" for i in range(12)] + [
    f"https://o{i}.example/feed.xml" for i in range(8)]


def make_service(clock, **settings):
    # a budget of every source each epoch: the big host is asked for 12 crawls an epoch
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": len(URLS), "WHITTLE_PERIOD": PERIOD,
                                          "WHITTLE_POLICY": "round_robin", **settings})
    service = RecrawlService(config, clock=clock)
    service.open([SourceSpec(url=u) for u in URLS])
    return service


class LatencyWeb:
    """Every feed answers one new entry; ``latency(url, recent)`` is the seconds an answer
    takes, ``recent`` the big host's requests in the last ``window`` seconds (this one
    among them). Other hosts answer in 0.1 s."""

    def __init__(self, latency, window=300.0):
        self.latency, self.window = latency, window
        self.big_times: deque[float] = deque()
        self.big_latencies: list[tuple[int, float]] = []     # (epoch, seconds)
        self.sent: dict[int, int] = {}                        # epoch -> big host's requests

    def fetch(self, service, crawl, epoch):
        now = service.clock.now()
        latency = 0.1
        if urlsplit(crawl.url).hostname == BIG:
            times = self.big_times
            times.append(now)
            while times[0] <= now - self.window:
                times.popleft()
            latency = self.latency(crawl.url, len(times))
            self.big_latencies.append((epoch, latency))
            self.sent[epoch] = self.sent.get(epoch, 0) + 1
        service.feed_fetched(crawl, [FeedEntry(key=f"{crawl.url}@{now}", title=None,
                                               link=None, published=now - 1,
                                               engagement=None)], latency=latency)


def crawl_epochs(service, clock, web, epochs):
    """Drive the service as Scrapy would, each download instantaneous (its latency only
    reported), waking when the service says within each epoch; returns the big host's
    allowance at the end of each epoch."""
    allowances = []
    for _ in range(epochs):
        epoch = service.timeline.epoch_of(clock.now())
        end = START + (epoch + 1) * PERIOD
        while True:
            while (crawl := service.next_crawl()) is not None:
                web.fetch(service, crawl, epoch)
            if not service.wake_at < end:
                break
            clock.advance_to(service.wake_at)
        allowances.append(service.throttle.allowances.allowance(BIG))
        clock.advance_to(end)
    return allowances


def loaded(url, recent):
    """A host that answers in 0.2 s while it gets at most 3 requests in 5 minutes, and 0.5 s
    slower per request beyond (a queue that grows with the load)."""
    return 0.2 + 0.5 * max(0, recent - 3)


def test_a_host_slowing_down_under_load_is_cut_and_recovers_when_it_calms():
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = LatencyWeb(loaded)
    allowances = crawl_epochs(service, clock, web, 30)
    assert service.stats.get("hosts/slowed") >= 1
    assert service.stats.get("hosts/decreases") == service.stats.get("hosts/slowed")
    before = [float("inf"), *allowances]
    cuts = [k for k, a in enumerate(allowances) if a < before[k]]
    first_cut, last_cut = cuts[0], cuts[-1]
    assert first_cut <= 1                    # the first loaded epoch finds it out
    # it calms: the epochs after the cuts answer fast again ...
    late = [s for e, s in web.big_latencies if e > last_cut + 1]
    early = [s for e, s in web.big_latencies if e <= first_cut]
    assert late and max(late) < max(early) / 2
    # ... and its allowance grows back while it answers well (additive increase)
    assert allowances[-1] > min(allowances)
    assert all(b >= a for a, b in zip(allowances[last_cut:], allowances[last_cut + 1:],
                                      strict=False))
    # the other hosts are never cut
    assert set(service.throttle.allowances.throttled()) == {BIG}


def test_a_host_with_steady_latency_is_never_cut():
    rng = np.random.default_rng(7)
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    # a noisy host: 0.3 s typical, heavy-tailed, whatever its load
    web = LatencyWeb(lambda url, recent: float(0.3 * rng.lognormal(0.0, 0.6)))
    allowances = crawl_epochs(service, clock, web, 30)
    assert sum(web.sent.values()) == 30 * 12
    assert service.stats.get("hosts/slowed") == 0
    assert all(a == float("inf") for a in allowances)


def test_one_slow_feed_does_not_cut_its_host():
    """Feed 0 of the big host answers in 6 s every time (a slow generator); the host's
    other feeds in 0.1 s."""
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    slow = f"https://{BIG}/feed/0.xml"
    web = LatencyWeb(lambda url, recent: 6.0 if url == slow else 0.1)
    allowances = crawl_epochs(service, clock, web, 30)
    assert sum(web.sent.values()) == 30 * 12
    assert service.stats.get("hosts/slowed") == 0
    assert all(a == float("inf") for a in allowances)


def test_a_small_absolute_change_does_not_cut_the_host():
    """20 ms while lightly loaded, 45 ms or more (more than twice) under the crawl's load."""
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = LatencyWeb(lambda url, recent: 0.020 if recent <= 3 else 0.045 + 0.002 * recent)
    allowances = crawl_epochs(service, clock, web, 30)
    assert max(s for _, s in web.big_latencies) > 2 * 0.020
    assert sum(web.sent.values()) == 30 * 12
    assert service.stats.get("hosts/slowed") == 0
    assert all(a == float("inf") for a in allowances)


def test_latency_factor_zero_turns_the_watch_off():
    clock = SimulatedClock(start=START)
    service = make_service(clock, WHITTLE_HOST_LATENCY_FACTOR=0)
    web = LatencyWeb(loaded)
    crawl_epochs(service, clock, web, 5)
    assert service.stats.get("hosts/slowed") == 0
    assert sum(web.sent.values()) == 5 * 12


def test_latencies_that_measure_nothing_are_ignored():
    watch = LatencyWatch()
    for latency in (float("nan"), float("inf"), -1.0):
        assert not watch.slowing(0, 0, latency, lambda hid: 2)
    assert watch.hosts == {}


@pytest.mark.parametrize("value", ["1", "0.5", "-2", "nan", "x"])
def test_a_bad_latency_factor_is_refused_with_its_name(value):
    with pytest.raises(InvalidSetting, match="WHITTLE_HOST_LATENCY_FACTOR"):
        WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_HOST_LATENCY_FACTOR": value})


def warmed(watch, hid=0, sources=(1, 2), latency=0.1):
    """``watch`` with host ``hid`` answering in ``latency`` s from ``sources``, ten times."""
    for k in range(10):
        assert not watch.slowing(hid, sources[k % len(sources)], latency, lambda hid: 12)
    return watch


def test_a_run_of_slow_answers_of_one_source_does_not_speak_for_its_host():
    """One feed answering slowly many times in a row (nothing else of its host asked
    meanwhile): its own; the same run from two of the host's feeds: the host's."""
    watch = warmed(LatencyWatch())
    assert not any(watch.slowing(0, 1, 5.0, lambda hid: 12) for _ in range(20))
    watch = warmed(LatencyWatch())
    assert [watch.slowing(0, 1 + k % 2, 5.0, lambda hid: 12) for k in range(3)] == [
        False, False, True]
    # a host of a single feed is that feed: its run is the host's
    watch = warmed(LatencyWatch(), sources=(1,))
    assert [watch.slowing(0, 1, 5.0, lambda hid: 1) for _ in range(3)] == [False, False, True]
