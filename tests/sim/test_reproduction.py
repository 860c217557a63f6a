"""The papers' numerical examples, reproduced (figures checked in the papers' README)."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.bound import upper_bound
from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.core.policies.static import static_distribution
from scrapy_whittle.core.problem import Problem
from sim.web.scenarios import ICC2021_IMPORTANCE, ICC2021_SINGLE_RATES, make_scenario


def run_whittle(budget: float, horizon: int, stochastic: bool = False, seed: int = 0):
    sc = make_scenario("tcns2018", budget=budget, stochastic=stochastic)
    env = sc.make_env()
    env.reset(seed=seed)
    policy = make_policy("oracle", sc.problem)
    rewards = np.empty(horizon)
    crawls = np.zeros((horizon, 4), dtype=bool)
    for t in range(horizon):
        action = policy.select(t, budget)
        obs, rewards[t], *_ = env.step(action)
        policy.observe(obs)
        crawls[t, action] = True
    return sc, rewards, crawls


def test_table1_m1_long_run_is_the_bound():
    """M = 1: sources 1 and 2 alternately, 3 and 4 never; long-run average
    (u1 (1 + a1) + u2 (1 + a2)) / 2 = 260.39 = the Lagrangian bound (so it is optimal)."""
    sc, rewards, crawls = run_whittle(1, 400)
    p = sc.problem
    closed_form = (p.u[0] * (1 + p.alpha[0]) + p.u[1] * (1 + p.alpha[1])) / 2
    assert closed_form == pytest.approx(260.39, abs=0.005)
    assert rewards[100:].mean() == pytest.approx(closed_form, rel=1e-12)
    bound = upper_bound(p.alpha, p.u, 1.0, p.cost).value
    assert bound == pytest.approx(closed_form, rel=1e-9)
    assert not crawls[:, 2:].any()
    assert np.all(crawls[100:, 0] != crawls[100:, 1])            # alternate
    assert np.all(crawls[100::2, 0] == crawls[100, 0])
    # crawling source 1 only gives u1 = 179.79, as the paper says
    assert p.u[0] == pytest.approx(179.79, abs=0.005)


def test_table1_m1_paper_figure_is_a_transient_average():
    """The paper prints 254.66: the average of the first 61 epochs from X(0) = 0."""
    _, rewards, _ = run_whittle(1, 61)
    assert rewards.mean() == pytest.approx(254.66, abs=0.005)


def test_table1_m2():
    """M = 2: source 1 every epoch, source 4 about one epoch in seven; about 337.7 against a
    bound of 338.05."""
    sc, rewards, crawls = run_whittle(2, 1500)
    p = sc.problem
    bound = upper_bound(p.alpha, p.u, 2.0, p.cost).value
    assert bound == pytest.approx(338.05, abs=0.005)
    long_run = rewards[300:].mean()
    assert long_run == pytest.approx(337.7, abs=0.1)
    assert long_run <= bound
    assert crawls[:, 0].all()
    assert crawls[300:, 3].mean() == pytest.approx(1 / 7, abs=0.01)
    assert crawls[300:, 1].any() and crawls[300:, 2].any()


def test_table1_stochastic_same_long_run_mean():
    """Stochastic model (17): the oracle's schedule is the same, its mean reward too."""
    _, rewards, crawls = run_whittle(1, 2000, stochastic=True, seed=3)
    assert not crawls[:, 2:].any()
    per_epoch = rewards[100:]
    se = per_epoch.std(ddof=1) / np.sqrt(per_epoch.size) * 2    # crude allowance for correlation
    assert abs(per_epoch.mean() - 260.39) < 4 * se


def test_icc2021_static_optimum():
    """Azar et al.'s static optimisation on the ICC 2021 single-page example:
    p* = (0.942, 0.003, 0.055, 0.000) (the paper prints the middle two swapped)."""
    p = Problem.from_pages(ICC2021_SINGLE_RATES, ICC2021_IMPORTANCE)
    dist = static_distribution(p.alpha, p.u, 1.0)
    np.testing.assert_allclose(dist, [0.942, 0.003, 0.055, 0.0], atol=5e-4)
    assert dist[3] == 0.0 and dist.sum() == pytest.approx(1.0, abs=1e-12)


def test_icc2021_whittle_beats_static_and_uniform():
    sc = make_scenario("icc2021-single")
    results = {}
    for name in ("oracle", "static", "uniform"):
        env = sc.make_env()
        env.reset(seed=1)
        policy = make_policy(name, sc.problem, rng=1)
        total = 0.0
        for t in range(3000):
            obs, reward, *_ = env.step(policy.select(t, 1))
            policy.observe(obs)
            total += reward
        results[name] = total / 3000
    bound = upper_bound(sc.problem.alpha, sc.problem.u, 1.0).value
    assert results["uniform"] < results["static"] < results["oracle"] <= bound * 1.05
