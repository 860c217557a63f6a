"""Decision steps within an epoch (``WHITTLE_STEP``): the budget is a rate, each step plans the
share due by its end, crawls leave paced, and the policy decides at fractional epochs with the
index of the step."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.service.config import WhittleConfig
from tests.service.test_recrawl import START, PoissonFeeds, make_service


def hand_out(service, clock, feeds, until):
    """Every crawl the service gives until ``until``, fetched at once: (time, source)."""
    out = []
    while clock.now() < until:
        while (crawl := service.next_crawl()) is not None:
            out.append((clock.now() - START, crawl.source))
            service.feed_fetched(crawl, feeds.entries(crawl.source, clock.now()))
        clock.advance_to(min(service.wake_at, until))
    return out


def test_an_epochs_budget_leaves_paced_over_its_steps():
    feeds = PoissonFeeds([2.0 / 3600] * 8)
    service, clock = make_service(n=8, budget=6, period=3600.0, WHITTLE_STEP=600)
    crawls = hand_out(service, clock, feeds, START + 2 * 3600)
    times = np.array([t for t, _ in crawls])
    assert times.shape[0] == 12                                  # 6 an epoch, no more
    # one a step, at the step's start: never the whole budget at the epoch's start
    np.testing.assert_allclose(times, 600.0 * np.arange(12))
    assert service.stats.get("epochs") == 2


def test_what_a_step_leaves_unspent_later_steps_may_spend():
    feeds = PoissonFeeds([2.0 / 3600] * 3)
    service, clock = make_service(n=3, budget=3, period=3600.0, WHITTLE_STEP=600)
    crawls = hand_out(service, clock, feeds, START + 3600)
    # half a crawl is due each step: a crawl every other step, as soon as a whole one is due
    assert [t for t, _ in crawls] == [600.0, 1800.0, 3000.0]


def test_one_step_an_epoch_is_the_epochs_plan():
    feeds = PoissonFeeds([2.0 / 3600] * 8)
    service, clock = make_service(n=8, budget=4, period=3600.0, WHITTLE_STEP=3600)
    crawls = hand_out(service, clock, feeds, START + 3 * 3600)
    # the whole budget at each epoch's start, as the plan of an epoch always did
    assert [t for t, _ in crawls] == [0.0] * 4 + [3600.0] * 4 + [7200.0] * 4


def test_the_default_decides_every_minute_or_once_per_crawl_the_budget_allows():
    def steps(**settings):
        return WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, **settings}).steps_per_epoch

    assert steps(WHITTLE_BUDGET=1000) == 60                      # a minute
    assert steps(WHITTLE_BUDGET=60) == 60
    assert steps(WHITTLE_BUDGET=12) == 12                        # one a crawl: 5 minutes
    assert steps(WHITTLE_BUDGET=1) == 1                          # the hour itself
    assert steps(WHITTLE_BUDGET=1000, WHITTLE_PERIOD=30) == 1    # a period under a minute
    assert steps(WHITTLE_BUDGET=1000, WHITTLE_STEP=3600) == 1    # one plan an epoch, asked


def test_the_default_paces_an_epochs_budget_over_the_epoch():
    feeds = PoissonFeeds([2.0 / 3600] * 30)
    service, clock = make_service(n=30, budget=20, period=3600.0, WHITTLE_STEP=None,
                                  policy="whittle")
    crawls = hand_out(service, clock, feeds, START + 2 * 3600)
    times = np.array([t for t, _ in crawls])
    assert times.shape[0] == 40                                  # the budget, no more
    assert service.config.decision_step == 180.0                 # one crawl a step
    np.testing.assert_allclose(times, 180.0 * np.arange(40))


def test_the_learned_policy_decides_at_fractional_epochs_with_the_steps_index():
    feeds = PoissonFeeds([6.0 / 3600, 0.5 / 3600, 3.0 / 3600, 1.0 / 3600], window=20)
    service, clock = make_service(n=4, policy="whittle", budget=4, period=3600.0,
                                  WHITTLE_STEP=300)
    policy = service.keeper.policy
    assert policy.resolution == pytest.approx(1 / 12)
    hand_out(service, clock, feeds, START + 6 * 3600)
    service.outcomes.flush()
    # what it learned is in epochs, at the steps the crawls left in
    last = policy.last_epoch[np.isfinite(policy.last_epoch)]
    assert last.shape[0] == 4 and np.all((last >= 0) & (last < 6.0))
    np.testing.assert_allclose(last * 12, np.round(last * 12), atol=1e-9)
    assert np.any(last != np.floor(last))


def test_a_crawl_resumes_under_another_step_with_what_it_learned(tmp_path):
    from scrapy_whittle.service.state.store import FILE_NAME, SqliteStateStore

    feeds = PoissonFeeds([6.0 / 3600, 0.5 / 3600, 3.0 / 3600, 1.0 / 3600], window=20)
    service, clock = make_service(n=4, policy="whittle", budget=4, period=3600.0,
                                  store=SqliteStateStore(tmp_path / FILE_NAME))
    hand_out(service, clock, feeds, START + 5 * 3600)
    service.checkpoint()
    learned = service.keeper.policy.export_rows(np.arange(4))
    resumed, _ = make_service(n=4, policy="whittle", budget=4, period=3600.0, clock=clock,
                              store=SqliteStateStore(tmp_path / FILE_NAME), WHITTLE_STEP=600)
    policy = resumed.keeper.policy
    # what it learned, in epochs, is read as it was written: the same rows
    assert policy.export_rows(np.arange(4)).tobytes() == learned.tobytes()
    assert policy.resolution == pytest.approx(1 / 6)
    crawls = hand_out(resumed, clock, feeds, START + 7 * 3600)
    times = np.array([t for t, _ in crawls])
    # its epochs go on (the origin kept), now a crawl at most each ten-minute step
    assert times.shape[0] == 8 and np.all(times >= 5 * 3600)
    assert np.all(np.diff(np.sort(times)) >= 600 - 1e-6)
