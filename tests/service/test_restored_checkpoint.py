"""A crawl restored from its state file writes in its first checkpoint what changed since,
not every source (the policy's first selection after a restore leaves the restored rows as
they were)."""

from __future__ import annotations

import pytest

from scrapy_whittle.service.store import FILE_NAME, StateStore
from tests.service.test_recrawl import PoissonFeeds, crawl_epochs, make_service

N, BUDGET = 50, 5


@pytest.mark.parametrize("policy", ["whittle", "thompson-whittle", "diurnal-whittle"])
def test_the_first_checkpoint_after_a_restore_writes_the_crawled_sources(tmp_path, policy):
    feeds = PoissonFeeds([1 / 600] * N)
    service, clock = make_service(n=N, policy=policy, budget=BUDGET,
                                  store=StateStore(tmp_path / FILE_NAME))
    crawl_epochs(service, clock, feeds, 3)
    service.checkpoint()
    restored, _ = make_service(n=N, policy=policy, budget=BUDGET, clock=clock,
                               store=StateStore(tmp_path / FILE_NAME))
    crawl_epochs(restored, clock, feeds, 1)
    cp = restored.prepare_checkpoint()
    assert cp.n_new == 0
    assert 0 < cp.n_changed <= BUDGET
