"""``next_crawls``: a batch of crawls in one pass over the plan (what a cluster's planner
asks for) is what as many calls of ``next_crawl`` give at the same instant, hosts' load
counted as each crawl is chosen."""

from __future__ import annotations

from collections import defaultdict

import pytest

from scrapy_whittle.service.clock import SimulatedClock
from scrapy_whittle.service.config import WhittleConfig
from scrapy_whittle.service.recrawl import RecrawlService
from scrapy_whittle.service.sources.registry import SourceSpec

START = 1_700_000_000.0
N, HOSTS, PER_HOST = 90, 6, 2


class CountingHosts:
    """At most PER_HOST crawls of a host in flight."""

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = defaultdict(int)

    def saturated(self, host: str) -> bool:
        return self.in_flight[host] >= PER_HOST

    def all_saturated(self) -> list[str]:
        return [h for h, c in self.in_flight.items() if c >= PER_HOST]


def _service(policy: str, **settings) -> tuple[RecrawlService, SimulatedClock]:
    clock = SimulatedClock(start=START)
    # one plan an epoch: these tests count in epochs (the default's steps: test_steps.py)
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 40, "WHITTLE_PERIOD": 600.0,
                                          "WHITTLE_STEP": 600.0,
                                          "WHITTLE_POLICY": policy, **settings})
    service = RecrawlService(config, clock=clock)
    service.open([SourceSpec(url=f"https://h{i % HOSTS}.example/{i}.xml") for i in range(N)])
    return service, clock


def _drive(policy: str, batch: int | None, **settings) -> list[tuple]:
    """Three epochs; in each, crawls handed out until none comes, then the oldest half
    answered (their hosts freed) and handed out again, twice."""
    service, clock = _service(policy, **settings)
    hosts = CountingHosts()
    given: list[tuple] = []
    flying: list = []

    def taken(crawl) -> None:
        hosts.in_flight[service.sources.host_names[service.sources.host[crawl.source]]] += 1
        flying.append(crawl)
        given.append((crawl.source, crawl.epoch, tuple(sorted(crawl.headers.items()))))

    for _ in range(3):
        for _round in range(3):
            if batch is None:
                while (crawl := service.next_crawl(hosts)) is not None:
                    taken(crawl)
            else:
                while service.planner.next_crawls(hosts, batch, taken):
                    pass
            for crawl in flying[:len(flying) // 2 + 1]:
                flying.remove(crawl)
                hosts.in_flight[service.sources.host_names[
                    service.sources.host[crawl.source]]] -= 1
                service.not_modified(crawl, etag=f'"{crawl.source}"')
        clock.advance_to(clock.now() + 600.0)
    return given


@pytest.mark.parametrize("policy", ["whittle", "round_robin"])
@pytest.mark.parametrize("batch", [1, 5, 64])
def test_a_batch_is_what_calls_one_by_one_give(policy, batch):
    one_by_one = _drive(policy, None)
    assert len(one_by_one) > 60                   # hosts were saturated and freed
    assert _drive(policy, batch) == one_by_one


def test_with_a_discovery_sweep_a_batch_is_calls_one_by_one():
    assert _drive("whittle", 7, WHITTLE_DISCOVERY=True) == _drive("whittle", None,
                                                                  WHITTLE_DISCOVERY=True)


def test_an_empty_batch_asked_gives_nothing():
    service, _ = _service("whittle")
    assert service.planner.next_crawls(CountingHosts(), 0) == []
    assert len(service.planner.next_crawls(CountingHosts(), 3)) == 3
