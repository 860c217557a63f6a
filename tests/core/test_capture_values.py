"""Learning values and decay from captures alone (a crawl: each capture's value at its age,
no base value), as the learned Whittle policy does from a feed's polls and pushes."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.estimators import DecayEstimator
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.core.problem import Problem


def arrivals(rng, rate: float, start: float, end: float) -> np.ndarray:
    return np.sort(rng.uniform(start, end, rng.poisson(rate * (end - start))))


def captured(rng, pub: np.ndarray, now: float, mu: float, xi: float) -> float:
    """What a capture at ``now`` of entries published at ``pub`` is worth: exponential base
    values of mean ``xi``, decayed at ``mu``."""
    return float(np.sum(rng.exponential(xi, pub.shape[0]) * np.exp(-mu * (now - pub))))


def poll(t: int, now: float, pub: np.ndarray, value: float) -> Observation:
    return Observation(epoch=t, sources=[0], time=now, new_items=[pub.shape[0]],
                       reward=[value], item_offsets=[0, pub.shape[0]], item_published=pub)


@pytest.mark.parametrize("mu", [0.05, 0.7])
def test_captures_polled_several_half_lives_apart_recover_mu(mu):
    """Polls every 3 half-lives (the items of a crawl span decays from 1 to 1/8): the mean
    value at the mean age reads about a third of mu; the captures at their ages recover it."""
    rng = np.random.default_rng(3)
    gap = 3 * np.log(2) / mu
    est = DecayEstimator(1, prior_half_life=np.log(2) / mu * 4)     # a prior 4x too slow
    last = 0.0
    for j in range(1, 400):
        now = j * gap
        pub = arrivals(rng, 4.0 / gap, last, now)
        last = now
        if pub.size == 0:
            continue
        r = captured(rng, pub, now, mu, 2.0)
        assert est.update_captures([0], [r], [0, pub.shape[0]], now - pub).all()
    assert est.mean()[0] == pytest.approx(mu, rel=0.15)


def test_captures_reject_garbage():
    est = DecayEstimator(2, prior_half_life=5.0)
    ok = est.update_captures([0, 1, 0, 1], [1.0, np.nan, 1.0, 0.0], [0, 1, 2, 2, 3],
                             [1.0, 2.0, 3.0])
    assert ok.tolist() == [True, False, False, False]     # no value / no item / zero value
    ok = est.update_captures([0, 1, 1], [1.0, 1.0, 1.0], [0, 2, 3, 4], [1.0, 2.0, -1.0, np.inf])
    assert ok.tolist() == [True, False, False]             # a bad age spoils the crawl
    assert np.all(np.isfinite(est.mean()))


def slow_pusher(xi: float = 2.0, mu: float = 0.02, rate: float = 0.5, epochs: int = 200,
                loss: float = 0.1, seed: int = 0):
    """One source whose interest decays slowly (half-life 35 epochs; the policy's prior
    says 4), warm for 400 epochs before it is first polled, then pushing its entries
    (``loss`` of them lost, found by the next poll, every 10 epochs), values at capture
    only. Returns the policy."""
    rng = np.random.default_rng(seed)
    policy = make_policy("whittle", Problem(n=1, cost=np.ones(1)), rng=0)
    pub = arrivals(rng, rate, -400.0, 0.0)
    policy.observe(poll(0, 0.0, pub, captured(rng, pub, 0.0, mu, xi)))
    lost: list[float] = []
    for t in range(1, epochs):
        new = arrivals(rng, rate, t - 1.0, float(t))
        gone = rng.uniform(size=new.shape[0]) < loss
        lost += new[gone].tolist()
        for p in new[~gone]:
            when = p + 0.01
            policy.observe_push(Observation(
                epoch=t, sources=[0], time=when, new_items=[1],
                reward=[captured(rng, np.array([p]), when, mu, xi)], item_offsets=[0, 1],
                item_published=[p]))
        if t % 10 == 0:
            found = np.array(lost)
            lost = []
            policy.observe(poll(t, float(t), found, captured(rng, found, float(t), mu, xi)))
        policy.select(t + 1, 1.0)
    return policy


def test_a_pusher_whose_polls_find_old_entries_keeps_xi_bounded():
    """Its first poll finds entries hundreds of epochs old and its later polls the entries
    the hub lost, while the decay's estimate is still above mu: undone at that estimate, an
    entry of age a multiplies xi by exp((mu_hat - mu) a). The pushes (age near 0) tell xi."""
    for seed in range(4):
        policy = slow_pusher(seed=seed)
        xi_hat = policy.estimates()["mean_utility"][0]
        assert 2.0 / 1.5 < xi_hat < 2.0 * 1.5, seed


def test_captures_alone_teach_the_policy_decay_and_value():
    """A source polled every 4 epochs with values at capture only (half-life 2 epochs, the
    prior says 4): the policy's mu and xi come within a fifth of the truth."""
    rng = np.random.default_rng(5)
    mu, xi, rate = np.log(2) / 2.0, 3.0, 2.0
    policy = make_policy("whittle", Problem(n=1, cost=np.ones(1)), rng=0)
    last = -50.0
    for t in range(0, 1200, 4):
        pub = arrivals(rng, rate, last, float(t))
        last = float(t)
        policy.observe(poll(t, float(t), pub, captured(rng, pub, float(t), mu, xi)))
    est = policy.estimates()
    assert est["decay"][0] == pytest.approx(mu, rel=0.2)
    assert est["mean_utility"][0] == pytest.approx(xi, rel=0.2)


def test_values_that_do_not_decay_teach_no_decay():
    """A feed without engagement: every entry is worth the same at any age. Polled at
    irregular intervals, its decay's estimate leaves the prior (4 epochs) for a half-life
    far beyond the polls' spacing: the correction of the crawls' ages adds no decay of its
    own."""
    rng = np.random.default_rng(7)
    policy = make_policy("whittle", Problem(n=1, cost=np.ones(1)), rng=0)
    now, last = 0.0, -20.0
    for t in range(300):
        now += float(rng.choice([1, 2, 4, 8]))
        pub = arrivals(rng, 2.0, last, now)
        last = now
        policy.observe(poll(t, now, pub, float(pub.shape[0])))
    assert np.log(2) / policy.estimates()["decay"][0] > 100.0


@pytest.mark.parametrize("name", ["whittle", "thompson-whittle"])
@pytest.mark.parametrize("period", [1.0, 3600.0])
def test_each_learner_is_taught_by_captures_alone_in_any_unit_of_time(name, period):
    """The same source as above, its times counted in epochs or in seconds (a Scrapy
    crawl's, epochs of an hour): each learned policy's decay and value come within a fifth
    of the truth, from captures alone."""
    rng = np.random.default_rng(5)
    mu, xi, rate = np.log(2) / 2.0, 3.0, 2.0            # per epoch
    policy = make_policy(name, Problem(n=1, cost=np.ones(1), period=period), rng=0)
    last = -50.0
    for t in range(0, 1200, 4):
        pub = arrivals(rng, rate, last, float(t))
        last = float(t)
        value = captured(rng, pub, float(t), mu, xi)
        policy.observe(poll(t, t * period, pub * period, value))
    got = policy.summary([0])
    assert got["half_life"][0] / period == pytest.approx(2.0, rel=0.2)
    assert got["value"][0] == pytest.approx(xi, rel=0.2)
