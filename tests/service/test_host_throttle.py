"""Host allowances in the re-crawl service: a configured limit in each epoch's plan, the
budget a host cannot take going to other hosts, throttling after a 429 and its recovery,
and the allowances kept across a restart."""

from __future__ import annotations

import math
from collections import Counter
from itertools import pairwise
from urllib.parse import urlsplit

import pytest

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore

START = 1_700_000_000.0
BIG = "big.example"
#: the big host's feeds come first: a round-robin policy wants them first
URLS = [f"https://{BIG}/feed/{i}.xml" for i in range(12)] + [
    f"https://o{i}.example/feed.xml" for i in range(8)]


def make_service(clock, store=None, **settings):
    # one plan an epoch: these tests count in epochs (the default's steps: test_steps.py)
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 6, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_STEP": 600.0,
                                          "WHITTLE_POLICY": "round_robin", **settings})
    service = RecrawlService(config, clock=clock, store=store)
    service.open([SourceSpec(url=u) for u in URLS])
    return service


class FakeWeb:
    """Each host answers a feed of one new entry; the big host answers 429 to the requests
    beyond ``rate`` in an epoch (with ``retry_after`` seconds, if given), and its feed number
    ``broken`` (if given) to every request."""

    def __init__(self, rate=float("inf"), retry_after=None, kind="http_429", broken=None):
        self.rate, self.retry_after, self.kind = rate, retry_after, kind
        self.broken = None if broken is None else f"https://{BIG}/feed/{broken}.xml"
        self.sent: Counter = Counter()          # (epoch, host) -> requests
        self.refused: Counter = Counter()       # epoch -> 429s

    def fetch(self, service, crawl, epoch):
        host = urlsplit(crawl.url).hostname
        self.sent[epoch, host] += 1
        if host == BIG and (self.sent[epoch, host] > self.rate or crawl.url == self.broken):
            self.refused[epoch] += 1
            service.crawl_failed(crawl, self.kind, "refused", self.retry_after)
            return
        now = service.clock.now()
        service.feed_fetched(crawl, [FeedEntry(key=f"{crawl.url}@{now}", title=None,
                                               link=None, published=now - 1,
                                               engagement=None)])


def crawl_epochs(service, clock, web, epochs):
    """Drive the service as Scrapy would, every download instantaneous, waking when the
    service says (``wake_at``) within each epoch; returns the (big host's, all) crawls of
    each epoch."""
    out = []
    for _ in range(epochs):
        epoch = service.timeline.epoch_of(clock.now())
        end = START + (epoch + 1) * 600.0
        while True:
            while (crawl := service.next_crawl()) is not None:
                web.fetch(service, crawl, epoch)
            if not service.wake_at < end:
                break
            clock.advance_to(service.wake_at)
        sent = {h: c for (k, h), c in web.sent.items() if k == epoch}
        out.append((sent.get(BIG, 0), sum(sent.values())))
        clock.advance_to(START + (epoch + 1) * 600.0)
    return out


def test_a_configured_limit_is_never_exceeded_and_the_rest_goes_to_other_hosts():
    clock = SimulatedClock(start=START)
    service = make_service(clock, WHITTLE_HOST_LIMITS={BIG: 2})
    epochs = crawl_epochs(service, clock, FakeWeb(), 8)
    assert all(big <= 2 for big, _ in epochs), epochs
    # the budget the big host cannot take goes to other hosts in the same epoch
    assert all(total == 6 for _, total in epochs), epochs
    assert epochs[0] == (2, 6)
    assert service.stats.get("hosts/decreases") == 0


def test_a_fractional_limit_is_one_crawl_every_few_epochs():
    clock = SimulatedClock(start=START)
    service = make_service(clock, WHITTLE_HOST_LIMITS=f'{{"{BIG}": 0.5}}')
    epochs = crawl_epochs(service, clock, FakeWeb(), 8)
    taken = 0
    for k, (big, _) in enumerate(epochs):
        taken += big
        assert big <= 1 and taken <= (k + 1) // 2, epochs      # half a crawl an epoch
    assert taken >= 3
    assert all(total == 6 for _, total in epochs), epochs


def limited(service, clock, web):
    """Two epochs of every feed answering well (every source of the big host has answered
    once, as in a crawl that ran a while), then ``web`` as it was made."""
    rate, broken = web.rate, web.broken
    web.rate, web.broken = math.inf, None
    crawl_epochs(service, clock, web, 2)
    web.rate, web.broken = rate, broken
    web.refused.clear()
    return web


def test_after_429s_of_two_feeds_the_host_is_held_to_what_it_bore():
    """The big host, unlisted, starts to allow 2 requests an epoch: the 429s of two of its
    feeds in a row throttle it (two 429s, not one per feed) to what it bore."""
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = limited(service, clock, FakeWeb(rate=2))
    epochs = crawl_epochs(service, clock, web, 12)
    bigs = [big for big, _ in epochs if big]
    assert bigs[0] == 4                      # two answered, two feeds refused: stopped
    assert sum(web.refused.values()) == 2    # the host's other feeds did not each find it
    assert len(web.refused) == 1             # never refused again:
    assert max(bigs[1:]) == 2, bigs          # held to what it bore
    assert all(total == 6 for _, total in epochs), epochs    # the rest to other hosts
    assert service.stats.get("hosts/decreases") == 1
    assert service.stats.get("hosts/throttled") == 1
    assert service.throttle.allowances.throttled() == {BIG: pytest.approx(2.0)}


def test_a_burst_of_403s_throttles_the_host_but_one_403_does_not():
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = limited(service, clock, FakeWeb(rate=2, kind="http_403"))
    epochs = crawl_epochs(service, clock, web, 6)
    # two 403s in an epoch do not cut it; three in a row, from three feeds, do
    cut = max(web.refused)
    assert web.refused[cut] == 3 and sorted(web.refused.values()) == [2, 3], web.refused
    assert all(big <= 2 for big, _ in epochs[-2:]), epochs
    assert service.stats.get("hosts/decreases") == 1
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = limited(service, clock, FakeWeb(rate=5, kind="http_403"))
    crawl_epochs(service, clock, web, 3)
    assert service.stats.get("hosts/decreases") == 0 and sum(web.refused.values()) == 1


def test_retry_after_holds_the_whole_host_until_it_passes():
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = limited(service, clock, FakeWeb(rate=2, retry_after=900.0))
    epochs = crawl_epochs(service, clock, web, 5)
    # the epoch after the cut starts 600 s in, before the host's Retry-After ends (900 s)
    cut = next(i for i, (big, _) in enumerate(epochs) if big)
    assert epochs[cut][0] == 4 and epochs[cut + 1][0] == 0, epochs
    assert epochs[cut + 2][0] >= 1 and epochs[cut + 1][1] == 6


def test_one_feed_refusing_everything_does_not_throttle_its_host():
    """A feed that starts answering 429 to every request, its host's other feeds answering
    well, and feeds that refuse from their first visit: they back off alone; their host
    keeps its whole share of the budget."""
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = limited(service, clock, FakeWeb(rate=math.inf, broken=1))
    epochs = crawl_epochs(service, clock, web, 6)
    assert sum(web.refused.values()) >= 2
    assert service.stats.get("hosts/decreases") == 0
    assert service.throttle.allowances.throttled() == {}
    assert all(total == 6 for _, total in epochs), epochs
    fresh = make_service(SimulatedClock(start=START))
    web = FakeWeb(rate=0)                    # never answered well: each feed's own refusal
    crawl_epochs(fresh, fresh.clock, web, 2)
    assert sum(web.refused.values()) >= 4 and fresh.stats.get("hosts/decreases") == 0


def test_a_host_that_answers_once_then_refuses_is_throttled_from_the_first_visits():
    """A fresh crawl: the big host answers its first request and refuses the next (a rate
    limit): two feeds' refusals on their first visits throttle it, since the host has
    answered well; its other feeds do not each find the limit. Its first cut halves what
    the crawl wanted of it; paced, one more refusal cuts it to what it bears."""
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = FakeWeb(rate=1)
    epochs = crawl_epochs(service, clock, web, 8)
    assert web.refused[0] == 2 and sum(web.refused.values()) <= 3, web.refused
    assert service.stats.get("hosts/decreases") == len(web.refused)
    assert all(big <= 1 for big, _ in epochs[3:]), epochs


@pytest.mark.parametrize("probing", [True, False])
def test_any_refusal_of_a_host_probing_above_its_ceiling_answers_the_probe(probing):
    """A host throttled to 2 an epoch, its allowance probing at 3 (or not): a 429 from a
    feed on its first visit, which is the feed's own otherwise, ends the probe: the
    allowance goes back to the ceiling, not halved."""
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    allowances = service.throttle.allowances
    allowances.load_rows([(BIG, 2.0, 2.0, 1)])
    h = allowances.hosts[BIG]
    h.allowance = 3.0 if probing else 2.0
    crawl = service.next_crawl()
    assert BIG in crawl.url
    service.crawl_failed(crawl, "http_429", "refused")
    assert allowances.allowance(BIG) == 2.0 and h.ceiling == 2.0
    assert service.stats.get("hosts/decreases") == (1 if probing else 0)


def test_allowances_survive_a_restart(tmp_path):
    clock = SimulatedClock(start=START)
    service = make_service(clock, store=SqliteStateStore(tmp_path / FILE_NAME))
    crawl_epochs(service, clock, limited(service, clock, FakeWeb(rate=2)), 3)
    throttled = service.throttle.allowances.throttled()
    assert throttled == {BIG: pytest.approx(2.0)}     # of the 4 it was sent at first
    service.close()
    restored = make_service(clock, store=SqliteStateStore(tmp_path / FILE_NAME))
    assert restored.throttle.allowances.throttled() == throttled
    assert restored.throttle.allowances.hosts[BIG].ceiling == 2.0
    assert restored.stats.get("hosts/throttled") == 1
    # the restored crawl keeps to the allowance: no 429 rediscovers the limit
    web = FakeWeb(rate=2)
    epochs = crawl_epochs(restored, clock, web, 3)
    assert all(big <= 2 for big, _ in epochs) and not web.refused, epochs


def test_a_host_not_heard_yet_gets_one_request_at_a_time_then_twice_as_many():
    """Slow start: a host's first request goes alone; each good answer doubles how many
    may fly; a refusal brings it back to one."""
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = FakeWeb()

    def flying():
        out = []
        while (crawl := service.next_crawl()) is not None:
            out.append(crawl)
        return out

    first = flying()               # round robin plans six of the big host's feeds
    assert len(first) == 1 and BIG in first[0].url
    web.fetch(service, first[0], 0)                    # answered well: two may fly
    second = flying()
    assert len(second) == 2
    web.fetch(service, second[0], 0)                   # and four
    assert len(flying()) == 3                          # (one is still in flight)
    FakeWeb(rate=0).fetch(service, second[1], 0)       # a refusal: back to one at a time
    assert service.throttle.window[service.sources.hosts[BIG]] == 1


def test_a_throttled_host_s_crawls_are_paced_over_the_epoch():
    """Once cut, a host's crawls go T / allowance apart: its rate limit (here per epoch, as
    a per-minute one would be) is not met by a burst."""
    clock = SimulatedClock(start=START)
    service = make_service(clock)
    web = limited(service, clock, FakeWeb(rate=2))
    times = []
    fetch = web.fetch

    def timed(service, crawl, epoch):
        if BIG in crawl.url:
            times.append(service.clock.now())
        fetch(service, crawl, epoch)

    web.fetch = timed
    crawl_epochs(service, clock, web, 6)
    allowance = service.throttle.allowances.allowance(BIG)
    cut = service.throttle.allowances.hosts[BIG].cut_in
    paced = [t for t in times if t >= START + (cut + 1) * 600.0]
    assert len(paced) >= 4
    gaps = [b - a for a, b in pairwise(paced)]
    assert min(gaps) >= 600.0 / allowance - 1e-6, (gaps, allowance)


class SpacedWeb(FakeWeb):
    """The big host answers a request at least ``gap`` seconds after the last it answered
    (a rate limit in time, as ``sim.rate_limit``'s), else 429."""

    def __init__(self, gap):
        super().__init__()
        self.gap = gap
        self.last_ok = -math.inf
        self.answered: Counter = Counter()       # epoch -> the big host's good answers

    def fetch(self, service, crawl, epoch):
        now = service.clock.now()
        if urlsplit(crawl.url).hostname == BIG:
            if now - self.last_ok < self.gap - 1e-6:
                self.sent[epoch, BIG] += 1
                self.refused[epoch] += 1
                service.crawl_failed(crawl, "http_429", "refused")
                return
            self.last_ok = now
            self.answered[epoch] += 1
        super().fetch(service, crawl, epoch)


def test_with_minute_steps_a_rate_limited_host_climbs_to_what_it_bears():
    """Decision steps of a minute (the default), a host bearing one request every 45 s (13
    of an epoch of 10 minutes) that the plan wants more of: its first refusals, early in
    an epoch, cut its allowance below what it bears; probes above the ceiling then climb to
    it, a refused probe finding it, and the host answers what it bears from then on."""
    clock = SimulatedClock(start=START)
    urls = [f"https://{BIG}/feed/{i}.xml" for i in range(30)] + [
        f"https://o{i}.example/feed.xml" for i in range(2)]
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 24, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_POLICY": "round_robin"})
    service = RecrawlService(config, clock=clock)
    service.open([SourceSpec(url=u) for u in urls])
    web = SpacedWeb(45.0)
    epochs = 28
    crawl_epochs(service, clock, web, epochs)
    assert service.throttle.allowances.allowance(BIG) >= 12.0
    last = [web.answered[k] for k in range(epochs - 10, epochs)]
    assert sum(last) >= 0.9 * 600 / 45 * len(last), last      # what it bears, answered
    assert sum(web.refused.values()) <= 8, web.refused         # found by a few refusals
