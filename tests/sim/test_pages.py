"""sim.web.pages.ChangingPages: the ICC 2021 page-change model."""

from __future__ import annotations

import numpy as np
import pytest

from sim.web.pages import ChangingPages
from sim.web.scenarios import make_scenario


def test_api_and_problem_bridge():
    sc = make_scenario("icc2021-groups")
    env = sc.make_env()
    obs, info = env.reset(seed=0)
    assert obs.sources.size == 0 and info == {} and env.n == 100
    p = env.problem
    np.testing.assert_allclose(p.alpha, np.exp(-sc.change_rate))
    np.testing.assert_allclose(p.u, sc.importance * (1 - np.exp(-sc.change_rate)))
    np.testing.assert_array_equal(p.groups, sc.groups)
    obs, reward, terminated, truncated, _ = env.step([0])
    assert (terminated, truncated) == (False, False)
    assert obs.new_items.tolist() == [0] and reward == 0.0      # nothing changed since slot 0


def test_errors():
    env = ChangingPages([0.1, 0.2], [1.0, 2.0], budget=1)
    with pytest.raises(RuntimeError, match="reset"):
        env.step([0])
    env.reset(seed=0)
    for bad in ([2], [0, 1], [1, 1]):
        with pytest.raises(ValueError):
            env.step(bad)
    with pytest.raises(ValueError, match="same length"):
        ChangingPages([0.1, 0.2], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=">= 0"):
        ChangingPages([-0.1], [1.0])


def test_reward_is_importance_times_changed_bit_and_deterministic_per_seed():
    env = ChangingPages([0.5, 0.05, 2.0], [3.0, 1.0, 0.5], budget=2)
    rng = np.random.default_rng(1)
    actions = [rng.choice(3, size=2, replace=False) for _ in range(200)]
    runs = []
    for _ in range(2):
        env.reset(seed=9)
        trace = []
        for a in actions:
            obs, reward, *_ = env.step(a)
            assert set(obs.new_items.tolist()) <= {0, 1}
            np.testing.assert_allclose(obs.reward, env.importance[a] * obs.new_items)
            trace.append(reward)
        runs.append(trace)
    assert runs[0] == runs[1]


def test_change_probability_after_k_slots():
    """A page crawled every k slots changed with probability 1 - (1 - Delta)^k."""
    lam, k, copies = 0.2, 4, 5000
    env = ChangingPages(np.full(copies, lam), np.ones(copies), budget=copies)
    env.reset(seed=3)
    hits, crawls = 0, 0
    for t in range(4 * k + 1):
        obs, *_ = env.step(np.arange(copies) if t % k == 0 else [])
        if t >= k and t % k == 0:
            hits += int(obs.new_items.sum())
            crawls += copies
    p = 1 - np.exp(-lam * k)
    se = np.sqrt(p * (1 - p) / crawls)
    assert abs(hits / crawls - p) < 4 * se
