"""The feed window and the maximum interval in the index policies: the learned ``whittle``
learns each feed's window from its crawls and ranks a filling feed by the window's index; the
oracle does with the window it is told; both crawl first a source that waited its maximum
interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.core.policies.due import with_max_interval
from scrapy_whittle.core.problem import Problem, SourceParams
from scrapy_whittle.core.window import index_at_state


def crawl(epoch: float, sources, published: list[list[float]], full=None) -> Observation:
    """A crawl of ``sources`` at ``epoch`` (unit epochs) finding entries ``published``."""
    counts = [len(p) for p in published]
    off = np.concatenate([[0], np.cumsum(counts)])
    return Observation(epoch=int(epoch), sources=np.asarray(sources), time=float(epoch),
                       new_items=counts, reward=[float(c) for c in counts],
                       window_full=full, item_offsets=off,
                       item_published=np.concatenate([np.asarray(p, float) for p in published]),
                       item_value=np.ones(int(off[-1])))


def test_the_window_is_learned_from_the_crawls_that_found_it_full():
    pol = make_policy("whittle", Problem(n=3))
    pol.select(0, 3)
    # first crawls show everything new, whatever the feed lists: they say nothing of it
    pol.observe(crawl(1, [0, 1, 2], [list(np.linspace(0.1, 0.9, 5)), [0.5, 0.6], []]))
    assert np.isnan(pol.window).all()
    # a crawl whose every listed entry was new: the feed lists that many
    pol.observe(crawl(2, [1], [[1.5, 1.6, 1.7]], full=[True]))
    assert pol.window[1] == 3.0
    # ... at least: a later one found more
    pol.observe(crawl(3, [1], [[2.2, 2.4, 2.6, 2.8]], full=[True]))
    pol.observe(crawl(4, [1], [[3.5]]))
    assert pol.window[1] == 4.0 and np.isnan(pol.window[[0, 2]]).all()


def learned_fast_feed(window: float | None):
    """A policy that learned two feeds alike but for the first one's window."""
    pol = make_policy("whittle", Problem(n=2), prior_half_life=1.0)
    pol.select(0, 2)
    for t in range(1, 40):
        times = [t - 1 + (j + 0.5) / 10 for j in range(10)]   # ten an epoch, evenly
        pol.observe(crawl(t, [0, 1], [times, times]))
    pol.window[:] = [np.nan if window is None else window, np.nan]
    return pol


def test_a_feed_whose_window_fills_outranks_the_same_feed_without_one():
    pol = learned_fast_feed(window=12.0)
    prio = pol.priority(41)            # two epochs after the last crawl: 20 arrivals, 12 listed
    assert prio[0] > prio[1]
    rate = pol.rates.mean_at(np.array([0]))
    mu = pol._decay_rates_at(np.array([0]))
    x, u = pol._expected(41)
    expected = index_at_state(2.0, x[0], u[0], mu, 1.0, rate, 12.0)
    assert prio[0] == pytest.approx(float(expected[0]))
    # a window that cannot fill changes nothing
    same = learned_fast_feed(window=1000.0).priority(41)
    assert same[0] == pytest.approx(same[1])
    # the pruned selection ranks it the same way
    assert learned_fast_feed(window=12.0).select(41, 1).tolist() == [0]
    assert learned_fast_feed(window=None).select(41, 1).tolist() == [0]  # tie: lower id


def test_the_oracle_ranks_a_filling_window_by_the_windows_index():
    period = 1.0
    rate = np.array([8.0, 8.0])
    problem = Problem.from_params(SourceParams(rate=rate, mean_utility=np.ones(2),
                                               decay=np.full(2, math.log(2) / 3),
                                               period=period))
    free = make_policy("oracle", problem)
    windowed = make_policy("oracle", problem, window=[10.0, np.nan], rate=rate)
    for pol in (free, windowed):
        pol.select(0, 2)
        pol.observe(Observation(epoch=0, sources=[0, 1], time=0.0, new_items=[0, 0],
                                reward=[0.0, 0.0]))
    p_free, p_win = free.priority(3), windowed.priority(3)
    assert p_win[1] == pytest.approx(p_free[1])
    assert p_win[0] > p_free[0]
    with pytest.raises(ValueError, match="rates"):
        make_policy("oracle", problem, window=[10.0, 10.0])


def test_a_source_that_waited_its_maximum_interval_goes_first():
    def top(budget, eligible):
        prio = np.array([5.0, 4.0, 3.0, 0.0])
        order = [i for i in np.argsort(-prio, kind="stable")
                 if eligible is None or eligible[i]]
        return np.asarray(order[:int(budget)], dtype=np.int64)

    waited = np.array([1.0, 2.0, 30.0, 25.0])
    cost = np.ones(4)
    assert with_max_interval(top, waited, None, cost, 2).tolist() == [0, 1]
    # 2 and 3 waited more than 24: first, the longest waiting first
    assert with_max_interval(top, waited, 24.0, cost, 3).tolist() == [2, 3, 0]
    assert with_max_interval(top, waited, 24.0, cost, 1).tolist() == [2]
    # not eligible (a hint, a host's allowance): it waits
    eligible = np.array([True, True, False, True])
    assert with_max_interval(top, waited, 24.0, cost, 2, eligible).tolist() == [3, 0]


def starved_crawl(t: int, ids: np.ndarray) -> Observation:
    """Source 0 shows five new entries at every crawl, source 1 none."""
    counts = np.where(ids == 0, 5, 0)
    off = np.concatenate([[0], np.cumsum(counts)])
    pub = np.concatenate([np.linspace(t - 0.9, t - 0.1, c) for c in counts])
    return Observation(epoch=t, sources=ids, time=float(t), new_items=counts,
                       reward=counts * 0.8, item_offsets=off, item_published=pub,
                       item_value=np.ones(int(off[-1])))


@pytest.mark.parametrize("name", ["whittle", "oracle"])
def test_the_policies_crawl_a_starved_source_at_their_maximum_interval(name):
    # source 1 publishes nothing worth a crawl against source 0: only the limit brings it in
    params = SourceParams(rate=np.array([5.0, 0.01]), mean_utility=np.ones(2),
                          decay=np.full(2, 0.5), period=1.0)
    problem = Problem.from_params(params)
    built = problem if name == "oracle" else problem.without_parameters()
    visits = {}
    for limit in (None, 10.0):
        pol = make_policy(name, built, max_interval=limit)
        visits[limit] = []
        for t in range(60):
            ids = pol.select(t, 1)
            if 1 in ids:
                visits[limit].append(t)
            pol.observe(starved_crawl(t, ids))
    # without the limit it waits 30 epochs and more; with it, never more than 10
    assert np.max(np.diff([0, *visits[None], 59])) > 30
    assert np.max(np.diff([0, *visits[10.0], 59])) <= 10
    with pytest.raises(ValueError, match="max_interval"):
        make_policy(name, built, max_interval=0.0)
