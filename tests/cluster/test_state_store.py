"""The learned state in Redis (``RedisStateStore``), on a real redis-server: a new planner
restores what the last one checkpointed (its records read as one array), and its first
checkpoint writes what changed since, not every source."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.cluster.keys import Keys
from scrapy_whittle.cluster.state import RedisStateStore
from tests.service.test_recrawl import PoissonFeeds, crawl_epochs, make_service

N = 40
BUDGET = 4
RATES = [1 / 600, 1 / 1800, 1 / 300, 1 / 7200, 1 / 900, 1 / 60, 1 / 3600, 1 / 120] * 5


@pytest.fixture
def client(redis_server):
    c = redis_server.client()
    yield c
    c.close()


def _crawled(client, policy: str):
    """A service that crawled 12 epochs (ETags, failures, 304s among them), checkpointed to
    Redis."""
    feeds = PoissonFeeds(RATES, seed=3)
    service, clock = make_service(n=N, policy=policy, budget=BUDGET,
                                  store=RedisStateStore(client, Keys("st")))
    for epoch in range(12):
        while (crawl := service.next_crawl()) is not None:
            if crawl.source % 3 == 1 and epoch >= 9:
                service.crawl_failed(crawl, "http_503", "HTTP 503", retry_after=900.0)
            elif crawl.source % 5 == 2 and epoch % 2:
                service.not_modified(crawl, etag=f'"e{crawl.source}"')
            else:
                service.feed_fetched(crawl, feeds.entries(crawl.source, clock.now()),
                                     etag=f'"v{crawl.source}.{epoch}"',
                                     last_modified="Tue, 14 Nov 2023 22:13:20 GMT")
        clock.advance_to(service.wake_at)
    service.checkpoint()
    return service, clock, feeds


@pytest.mark.parametrize("policy", ["whittle", "thompson-whittle", "round_robin"])
def test_a_new_planner_restores_the_checkpointed_state(client, policy):
    service, clock, _ = _crawled(client, policy)
    restored, _ = make_service(n=N, policy=policy, budget=BUDGET, clock=clock,
                               store=RedisStateStore(client, Keys("st")))
    ids = np.arange(N)
    assert restored.policy.export_rows(ids).tobytes() == service.policy.export_rows(ids).tobytes()
    for name in ("last_crawl", "retry_at", "failures", "listed"):
        np.testing.assert_array_equal(getattr(restored.sources, name)[:N],
                                      getattr(service.sources, name)[:N], err_msg=name)
    for name in ("crawls", "errors", "new_items", "utility", "modified"):
        np.testing.assert_array_equal(getattr(restored.state, name)[:N],
                                      getattr(service.state, name)[:N], err_msg=name)
    assert restored.state.etag.get_many(ids) == service.state.etag.get_many(ids)
    assert sum(e is not None for e in restored.state.etag.get_many(ids)) > N // 2
    assert (restored.sources.retry_at[:N] > clock.now()).any()     # a back-off restored
    assert restored.origin == service.origin
    # the next epoch's choice is the one the first service makes
    assert [c.source for c in iter(restored.next_crawl, None)] == \
        [c.source for c in iter(service.next_crawl, None)]


def test_a_restored_planners_first_checkpoint_writes_what_changed(client):
    _, clock, feeds = _crawled(client, "whittle")
    restored, _ = make_service(n=N, policy="whittle", budget=BUDGET, clock=clock,
                               store=RedisStateStore(client, Keys("st")))
    crawl_epochs(restored, clock, feeds, 1)
    cp = restored.prepare_checkpoint()
    assert cp.n_new == 0
    assert 0 < cp.n_changed <= BUDGET      # the crawled sources, not the N restored
