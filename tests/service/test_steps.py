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
    a, clock_a = make_service(n=8, budget=4, period=3600.0)
    b, clock_b = make_service(n=8, budget=4, period=3600.0, WHITTLE_STEP=3600)
    assert hand_out(a, clock_a, feeds, START + 3 * 3600) == \
        hand_out(b, clock_b, feeds, START + 3 * 3600)


def test_the_step_divides_the_period():
    config = WhittleConfig.from_settings({"WHITTLE_BUDGET": 1, "WHITTLE_PERIOD": 3600,
                                          "WHITTLE_STEP": 700})
    assert config.steps_per_epoch == 6                          # 600 s, not 700
    assert WhittleConfig.from_settings({"WHITTLE_BUDGET": 1}).steps_per_epoch == 1


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
    from scrapy_whittle.service.store import FILE_NAME, SqliteStateStore

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
