from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle import upper_bound
from scrapy_whittle.core.index import whittle_index
from scrapy_whittle.core.selection import select_top, select_within_hosts


def brute_force_host_bound(alpha, u, budget, cost, host, allowance, lambdas, mus,
                           nmax=3000):
    """min over a grid of (lambda, mu_0) of the Lagrangian (one limited host, id 0), each
    source's best cycle by enumeration."""
    n = np.arange(1, nmax + 1, dtype=np.float64)
    lam = np.asarray(lambdas, dtype=np.float64)[:, None, None]
    mu = np.asarray(mus, dtype=np.float64)[None, :, None]
    total = lam[..., 0] * budget + mu[..., 0] * allowance[0]
    for a, uu, c, h in zip(alpha, u, cost, host, strict=True):
        price = lam * c + (mu if h == 0 else 0.0)
        xn = uu * (1 - a**n) / (1 - a)
        total = total + np.maximum(0.0, np.max((xn - price) / n, axis=2))
    return float(total.min())


def problem(seed, n=6):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0.1, 0.95, n), rng.lognormal(0, 1, n), rng.uniform(0.5, 2.0, n))


def test_a_host_limit_that_binds_lowers_the_bound_to_the_brute_force_minimum():
    for seed in range(3):
        a, u, c = problem(seed)
        host = np.array([0, 0, 0, 0, 1, 1])
        budget = 3.0
        free = upper_bound(a, u, budget, c)
        hosted = upper_bound(a, u, budget, c, host=host, allowance=[0.5, np.inf])
        assert hosted.value < free.value
        assert hosted.host_price[0] > 0 and hosted.host_price[1] == 0
        # the relaxed crawls of host 0 meet its allowance
        assert np.sum(1.0 / hosted.cycle[host == 0]) <= 0.5 + 1e-6
        lambdas = np.concatenate([np.linspace(0, 2 * hosted.price + 1e-9, 60),
                                  [hosted.price]])
        mus = np.concatenate([np.linspace(0, 2 * hosted.host_price[0], 60),
                              [hosted.host_price[0]]])
        brute = brute_force_host_bound(a, u, budget, c, host, [0.5, np.inf], lambdas, mus)
        assert hosted.value <= brute + 1e-9 * max(1, brute)
        assert hosted.value == pytest.approx(brute, rel=1e-3)


def test_limits_that_do_not_bind_give_the_unconstrained_bound():
    a, u, c = problem(4, n=40)
    host = np.arange(40) % 4
    free = upper_bound(a, u, 5.0, c)
    hosted = upper_bound(a, u, 5.0, c, host=host, allowance=[np.inf, 40.0, 40.0, np.inf])
    assert hosted.value == pytest.approx(free.value, rel=1e-8)
    np.testing.assert_array_equal(hosted.host_price, 0.0)


def simulate(a, u, budget, host, caps, epochs=600):
    """Mean reward per epoch of the Whittle index policy with host caps, deterministic
    dynamics, unit costs (after a warm-up of a third)."""
    x = np.zeros(a.shape[0])
    rewards = []
    for _ in range(epochs):
        x = a * x + u
        prio = whittle_index(x, a, u)
        chosen = select_within_hosts(lambda b, e, prio=prio: select_top(prio, None, b, e),
                                     host, caps, budget)
        assert np.all(np.bincount(host[chosen], minlength=caps.shape[0]) <= caps)
        assert chosen.shape[0] <= budget
        rewards.append(float(x[chosen].sum()))
        x[chosen] = 0.0
    return float(np.mean(rewards[epochs // 3:]))


def test_the_host_bound_holds_for_a_policy_that_respects_the_limits():
    rng = np.random.default_rng(7)
    n = 30
    a, u = rng.uniform(0.3, 0.99, n), rng.lognormal(0, 1, n)
    host = np.repeat(np.arange(3), 10)
    caps = np.array([1.0, 2.0, np.inf])
    bound = upper_bound(a, u, 5.0, host=host, allowance=caps)
    earned = simulate(a, u, 5.0, host, caps)
    assert earned <= bound.value * (1 + 1e-9)
    assert earned >= 0.9 * bound.value


def test_bad_host_constraints_are_rejected():
    with pytest.raises(ValueError):
        upper_bound([0.5], [1.0], 1.0, host=[1], allowance=[1.0])
    with pytest.raises(ValueError):
        upper_bound([0.5], [1.0], 1.0, host=[0], allowance=[-1.0])
    with pytest.raises(ValueError):
        upper_bound([0.5], [1.0], 1.0, host=[0])
