"""sim.web.ephemeral.EphemeralWeb: API, determinism, the mean dynamics, and the stochastic model."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.problem import SourceParams
from sim.web.ephemeral import EphemeralWeb, newest_ages
from sim.web.scenarios import TCNS2018_PARAMS, make_scenario


def one_source(rate=3.0, xi=2.0, mu=0.5, period=1.0):
    return SourceParams(rate=[rate], mean_utility=[xi], decay=[mu], period=period)


def run(env, actions, seed=0):
    env.reset(seed=seed)
    out = []
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a)
        assert terminated is False and truncated is False
        out.append((obs, reward))
    return out


def test_api_shape_and_problem():
    env = EphemeralWeb(TCNS2018_PARAMS, budget=1)
    obs, info = env.reset(seed=1)
    assert obs.sources.size == 0 and info == {}
    assert env.n == 4 and env.budget == 1.0 and env.epoch == 0
    np.testing.assert_allclose(env.problem.u, [179.79, 147.66, 35.96, 18.04], atol=5e-3)
    np.testing.assert_allclose(env.problem.alpha, np.exp(-TCNS2018_PARAMS.decay))
    obs, reward, *_ = env.step(np.array([0]))
    assert obs.epoch == 0 and env.epoch == 1 and reward == 0.0   # X(0) = 0


@pytest.mark.parametrize("action, message", [
    ([4], "out of range"),
    ([-1], "out of range"),
    ([0, 0], "duplicate"),
    ([0, 1], "exceeds the budget"),
    ([[0]], "1-D"),
    ([0.5], "integer"),
])
def test_bad_actions_raise(action, message):
    env = EphemeralWeb(TCNS2018_PARAMS, budget=1)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        env.step(np.array(action))


def test_step_before_reset_and_bad_options():
    with pytest.raises(RuntimeError, match="reset"):
        EphemeralWeb(TCNS2018_PARAMS, budget=1).step([0])
    with pytest.raises(ValueError, match="budget"):
        EphemeralWeb(TCNS2018_PARAMS, budget=0)
    with pytest.raises(ValueError, match="stochastic"):
        EphemeralWeb(TCNS2018_PARAMS, budget=1, window=5)
    with pytest.raises(ValueError, match="lifetime"):
        EphemeralWeb(TCNS2018_PARAMS, budget=1, lifetime=-1)


def test_unequal_costs_checked_against_budget():
    env = EphemeralWeb(TCNS2018_PARAMS, budget=2.5, cost=[1.0, 1.5, 2.0, 1.0])
    env.reset(seed=0)
    env.step([0, 1])
    with pytest.raises(ValueError, match="exceeds"):
        env.step([1, 2])


def test_deterministic_rewards_follow_the_recursion():
    """X(t+1) = alpha X(t) + u if not crawled, u if crawled; reward = X(t) when crawled."""
    env = EphemeralWeb(TCNS2018_PARAMS, budget=2, initial_state=[5.0, 0.0, 1.0, 2.0])
    env.reset(seed=0)
    a, u = env.problem.alpha, env.problem.u
    x = np.array([5.0, 0.0, 1.0, 2.0])
    rng = np.random.default_rng(3)
    for _ in range(60):
        ids = rng.choice(4, size=rng.integers(0, 3), replace=False)
        np.testing.assert_allclose(env.expected_state(), x, rtol=1e-12)
        obs, reward, *_ = env.step(ids)
        np.testing.assert_allclose(obs.reward, x[ids], rtol=1e-12)
        assert reward == pytest.approx(x[ids].sum(), rel=1e-12)
        assert obs.item_offsets is None
        x = a * x + u
        x[ids] = u[ids]


def test_deterministic_new_items_is_rounded_expected_count():
    env = EphemeralWeb(one_source(rate=2.3), budget=1)
    out = run(env, [[], [], [], [0], [0]])
    assert out[3][0].new_items.tolist() == [round(2.3 * 3)]
    assert out[4][0].new_items.tolist() == [2]


def test_same_seed_same_trajectory_and_seeds_differ():
    sc = make_scenario("news-mix", n=300, stochastic=True, seed=4)
    rng = np.random.default_rng(0)
    actions = [rng.choice(300, size=3, replace=False) for _ in range(40)]
    first = run(sc.make_env(), actions, seed=11)
    second = run(sc.make_env(), actions, seed=11)
    other = run(sc.make_env(), actions, seed=12)
    for (o1, r1), (o2, r2) in zip(first, second, strict=True):
        assert r1 == r2
        np.testing.assert_array_equal(o1.item_published, o2.item_published)
        np.testing.assert_array_equal(o1.item_value, o2.item_value)
        np.testing.assert_array_equal(o1.new_items, o2.new_items)
    assert [r for _, r in first] != [r for _, r in other]


def test_stochastic_items_are_consistent_with_the_reward():
    p = one_source(rate=5.0, xi=2.0, mu=0.3)
    env = EphemeralWeb(p, budget=1, stochastic=True)
    out = run(env, [[], [], [], [0], [], [0]], seed=5)
    obs, reward = out[3]
    times, values = obs.items_of(0)
    assert obs.new_items[0] == times.size and obs.item_offsets.tolist() == [0, times.size]
    assert np.all((times >= 0) & (times < 3.0))
    assert np.all(np.diff(times) <= 0)                       # newest first
    assert reward == pytest.approx(np.sum(values * np.exp(-0.3 * (3.0 - times))))
    times2, _ = out[5][0].items_of(0)
    assert np.all((times2 >= 3.0) & (times2 < 5.0))          # only items since the last crawl


def test_stochastic_mean_matches_deterministic():
    """Crawling a source every 3 epochs earns x_3 = u (1 + alpha + alpha^2) per crawl on average:
    many independent copies of two sources, the sample mean within 4 standard errors."""
    copies = 2000
    p = SourceParams(rate=np.repeat([4.0, 1.0], copies), mean_utility=np.repeat([1.5, 0.5], copies),
                     decay=np.repeat([0.4, 0.05], copies))
    env = EphemeralWeb(p, budget=2 * copies, stochastic=True)
    everything = np.arange(2 * copies)
    out = run(env, [everything if t % 3 == 0 else [] for t in range(31)], seed=7)
    rewards = np.stack([obs.reward for obs, _ in out[3::3]])   # crawls after the first
    a, u = env.problem.alpha, env.problem.u
    x3 = u * (1 + a + a**2)
    for kind in (0, 1):
        sample = rewards[:, kind * copies:(kind + 1) * copies].ravel()
        se = sample.std(ddof=1) / np.sqrt(sample.size)
        assert abs(sample.mean() - x3[kind * copies]) < 4 * se, (kind, sample.mean(), se)


def test_stochastic_initial_state_is_one_old_item():
    env = EphemeralWeb(one_source(rate=0.0), budget=1, stochastic=True, initial_state=[4.0])
    out = run(env, [[], [], [0], [0]])
    obs, reward = out[2]
    assert obs.new_items[0] == 1 and obs.item_published[0] == 0.0 and obs.item_value[0] == 4.0
    assert reward == pytest.approx(4.0 * np.exp(-0.5 * 2))
    assert out[3][1] == 0.0


def test_window_keeps_only_the_newest_items():
    p = one_source(rate=50.0, xi=1.0, mu=0.0)
    full = EphemeralWeb(p, budget=1, stochastic=True)
    windowed = EphemeralWeb(p, budget=1, stochastic=True, window=10)
    actions = [[]] * 4 + [[0]]
    o_full = run(full, actions, seed=2)[-1][0]
    o_win, r_win = run(windowed, actions, seed=2)[-1]
    assert o_full.new_items[0] > 10
    assert o_win.new_items[0] == 10 and bool(o_win.window_full[0])
    assert r_win == pytest.approx(o_win.item_value.sum())           # mu = 0: worth xi
    # the visible items are the newest: all younger than the oldest visible one
    assert o_win.item_published.min() > 3.0
    small = EphemeralWeb(one_source(rate=0.5), budget=1, stochastic=True, window=10)
    o_small = run(small, [[], [0]], seed=1)[-1][0]
    assert not o_small.window_full[0]


def test_window_full_when_at_least_window_new_items():
    """window_full is what a crawler sees: every visible entry is new."""
    env = EphemeralWeb(one_source(rate=3.0), budget=1, stochastic=True, window=3)
    for seed in range(20):
        obs = run(env, [[], [], [0]], seed=seed)[-1][0]
        assert bool(obs.window_full[0]) == (obs.new_items[0] >= 3)


def test_newest_ages_are_order_statistics():
    rng = np.random.default_rng(0)
    n = np.array([5] * 20000 + [1, 0, 3])
    keep = np.array([2] * 20000 + [1, 0, 3])
    age, group = newest_ages(n, keep, rng)
    assert age.shape == (40004,) and np.all((age > 0) & (age < 1))
    newest, second = age[0:40000:2], age[1:40000:2]
    assert np.all(newest <= second) and np.all(group[0:40000:2] == np.arange(20000))
    # 1 - U_(5) and 1 - U_(4) of five uniforms have means 1/6 and 2/6
    assert newest.mean() == pytest.approx(1 / 6, abs=0.005)
    assert second.mean() == pytest.approx(2 / 6, abs=0.005)
    assert group[-4:].tolist() == [20000, 20002, 20002, 20002]
    assert np.all(np.diff(age[-3:]) >= 0)


def test_lifetime_drops_old_items():
    p = one_source(rate=20.0, xi=1.0, mu=0.0)
    env = EphemeralWeb(p, budget=1, stochastic=True, lifetime=2.0)
    obs, _ = run(env, [[]] * 10 + [[0]], seed=3)[-1]
    assert np.all(obs.item_published > 10 - 2.0)
    assert 20 < obs.new_items[0] < 60                          # about 40, not 200
    det = EphemeralWeb(p, budget=1, lifetime=2.0)
    _, r_det = run(det, [[]] * 10 + [[0]])[-1]
    assert r_det == pytest.approx(40.0)


def test_deterministic_lifetime_closed_form():
    p = one_source(rate=2.0, xi=3.0, mu=0.5)
    env = EphemeralWeb(p, budget=1, lifetime=2.5)
    _, r = run(env, [[]] * 6 + [[0]])[-1]
    assert r == pytest.approx(2.0 * 3.0 * (1 - np.exp(-0.5 * 2.5)) / 0.5)


def test_step_touches_only_crawled_sources():
    sc = make_scenario("news-mix", n=50_000)
    env = sc.make_env()
    env.reset(seed=0)
    before = env._last.copy()
    env.step(np.array([7, 9]))
    changed = np.flatnonzero(env._last != before)
    assert changed.tolist() == [] or set(changed.tolist()) <= {7, 9}
