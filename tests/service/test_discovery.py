"""WHITTLE_DISCOVERY: a first fetch of every source never fetched, outside the budget, spread
over the period after it joined; not repeated after a restart; off by default."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.feeds.parse import FeedEntry
from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.decisions.discovery import interleaved_by_host
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec
from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore

START = 1_700_000_000.0
PERIOD = 600.0


def specs(ids, host=None):
    return [SourceSpec(url=f"https://{host or f's{i}'}.example/feed{i}.xml") for i in ids]


def make_service(n=20, budget=2, clock=None, store=None, sources=None, **settings):
    config = WhittleConfig.from_settings({
        # one plan an epoch: these tests count in epochs (the default's steps: test_steps.py)
        "WHITTLE_BUDGET": budget, "WHITTLE_PERIOD": PERIOD, "WHITTLE_STEP": PERIOD,
        "WHITTLE_POLICY": "round_robin",
        "WHITTLE_DISCOVERY": True, **settings})
    clock = clock or SimulatedClock(start=START)
    service = RecrawlService(config, clock=clock, store=store)
    service.open(sources if sources is not None else specs(range(n)))
    return service, clock


def entries(sid, now):
    return [FeedEntry(key=f"{sid}:{int(now)}", title=None, link=None, published=now - 60.0,
                      engagement=None)]


def crawl_until(service, clock, until, hosts=None):
    """Drive the service as the scheduler does, every download instantaneous: the crawls
    (source, time, budgeted) handed out before ``until``."""
    done = []
    while clock.now() < until:
        before = service.stats.get("crawls")
        crawl = service.next_crawl() if hosts is None else service.next_crawl(hosts)
        if crawl is None:
            clock.advance_to(min(service.wake_at, until))
            continue
        done.append((crawl.source, clock.now(), service.stats.get("crawls") > before))
        service.feed_fetched(crawl, entries(crawl.source, clock.now()))
    return done


def test_every_source_is_fetched_once_in_the_first_epoch_beside_the_budget():
    service, clock = make_service()
    done = crawl_until(service, clock, START + PERIOD)
    budgeted = [(s, t) for s, t, b in done if b]
    swept = [(s, t) for s, t, b in done if not b]
    assert budgeted == [(0, START), (1, START)]              # round-robin's plan, at once
    # the others once each, evenly over the epoch: source i (of 20) at i T / 20
    assert swept == [(i, pytest.approx(START + i * PERIOD / 20)) for i in range(2, 20)]
    assert service.stats.get("discovery/crawls") == 18 and service.stats.get("crawls") == 2
    clock.advance_to(START + PERIOD + 1)
    assert service.budget_used() == pytest.approx(1.0)       # the sweep is not in the budget
    assert service.next_crawl().source == 2                   # then the plan alone
    assert service.queued() == 1 and service.stats.get("discovery/crawls") == 18
    service.flush()
    assert service.stats.get("crawls_per_item") == pytest.approx(21 / 21)


def test_off_by_default_only_the_budget_is_fetched():
    service, clock = make_service(WHITTLE_DISCOVERY=False)
    done = crawl_until(service, clock, START + PERIOD)
    assert [(s, t) for s, t, _ in done] == [(0, START), (1, START)]
    assert service.stats.get("discovery/crawls") == 0
    assert WhittleConfig.from_settings({"WHITTLE_BUDGET": 1}).discovery is False


def test_a_restarted_crawl_sweeps_only_the_sources_never_fetched(tmp_path):
    path = tmp_path / FILE_NAME
    service, clock = make_service(store=SqliteStateStore(path))
    first = crawl_until(service, clock, START + PERIOD / 2)     # sources 0..9, then killed
    service.checkpoint()
    assert sorted(s for s, _, _ in first) == list(range(10))
    restored, _ = make_service(store=SqliteStateStore(path), clock=clock)
    now = clock.now()
    assert len(restored.planner.sweep) == 10                    # 10..19
    done = crawl_until(restored, clock, now + PERIOD)
    swept = [(s, t) for s, t, b in done if not b]
    budgeted = {s for s, _, b in done if b}
    # round-robin's next plans (2, 3 in epoch 0, then 4, 5: fetched before) are the
    # budget's; the sweep takes the ten never fetched, over the period after the restart
    assert budgeted == {2, 3, 4, 5}
    assert swept == [(10 + j, pytest.approx(now + j * PERIOD / 10)) for j in range(10)]
    assert restored.stats.get("discovery/crawls") == 10


def test_a_source_added_later_is_swept_in_its_first_epoch():
    service, clock = make_service(n=4)
    crawl_until(service, clock, START + 2 * PERIOD + 100)
    joined_at = clock.now()
    before = service.stats.get("discovery/crawls")
    service.add_sources(specs(range(4, 9)))
    assert service.wake_at == joined_at                     # the first is due at once
    done = crawl_until(service, clock, joined_at + PERIOD)
    swept = [(s, t) for s, t, b in done if not b]
    assert swept == [(4 + j, pytest.approx(joined_at + j * PERIOD / 5)) for j in range(5)]
    assert service.stats.get("discovery/crawls") - before == 5
    service.add_source(SourceSpec(url="https://spider.example/found.xml"))
    assert crawl_until(service, clock, clock.now() + 1)[0][0] == 9     # on subscribe


class BusyHosts:
    def __init__(self, busy):
        self.busy = set(busy)

    def saturated(self, host):
        return host in self.busy

    def all_saturated(self):
        return list(self.busy)


def test_a_busy_host_waits_and_the_sweep_goes_on_with_the_others():
    sources = specs(range(4), host="big") + specs(range(4, 8), host="small")
    service, clock = make_service(n=8, budget=1, sources=sources)
    hosts = BusyHosts({"big.example"})
    done = crawl_until(service, clock, START + PERIOD, hosts)
    assert {s for s, _, _ in done} == {4, 5, 6, 7}              # big's wait for their slot
    assert len(service.planner.sweep.waiting) == 1
    hosts.busy.clear()                                          # a download of big's ended
    done = crawl_until(service, clock, clock.now() + 1, hosts)
    assert [s for s, _, b in done if not b] == [0, 1, 2, 3]     # in the order they were due


def test_interleaved_by_host_takes_one_source_of_each_host_in_turn():
    ids = np.arange(10, 17)
    hosts = np.array([5, 5, 5, 2, 2, 9, 5])
    assert interleaved_by_host(ids, hosts).tolist() == [10, 13, 15, 11, 14, 12, 16]
