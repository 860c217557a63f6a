"""The learned Whittle policy with pushes: it polls at the arrivals pushes miss."""

from __future__ import annotations

import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.core.problem import Problem


def twins(epochs: int = 60, loss: float = 0.1, seed: int = 0, silent_from: int | None = None):
    """Two sources publishing alike (2 entries per epoch, base value 1), polled every epoch;
    source 0 also pushes, losing ``loss`` of its entries (none from ``silent_from`` on).
    Returns the policy."""
    rng = np.random.default_rng(seed)
    policy = make_policy("whittle", Problem(n=2, cost=np.ones(2)), rng=0)
    for t in range(epochs):
        pub = [t - rng.uniform(0, 1, rng.poisson(2)) for _ in range(2)]
        hub_up = silent_from is None or t < silent_from
        pushed = rng.uniform(size=pub[0].shape[0]) >= loss if hub_up else \
            np.zeros(pub[0].shape[0], dtype=bool)
        polled = [pub[0][~pushed], pub[1]]
        counts = np.array([p.shape[0] for p in polled])
        items = np.concatenate(polled)
        policy.observe(Observation(
            epoch=t, sources=[0, 1], time=float(t), new_items=counts,
            reward=[np.exp(-0.1 * (t - p)).sum() for p in polled],
            item_offsets=np.concatenate([[0], np.cumsum(counts)]), item_published=items,
            item_value=np.ones(items.shape[0])))
        if pushed.any():                     # delivered in the next epoch, 0.01 late
            k = int(pushed.sum())
            when = pub[0][pushed] + 1.0 + 0.01
            policy.observe_push(Observation(
                epoch=t, sources=np.zeros(k), time=when, new_items=np.ones(k),
                reward=np.ones(k), item_offsets=np.arange(k + 1),
                item_published=pub[0][pushed] + 1.0, item_value=np.ones(k)))
        policy.select(t + 1, 1.0)
    return policy


def test_a_pusher_is_worth_what_its_pushes_miss():
    policy = twins(loss=0.1)
    _, u = policy.parameters()
    est = policy.estimates()
    assert abs(est["push_share"][0] - 0.9) < 0.1 and est["push_share"][1] == 0.0
    # both publish alike: the rate learned counts pushed and polled entries
    assert abs(est["rate"][0] / est["rate"][1] - 1.0) < 0.3
    assert u[0] < 0.25 * u[1]


def test_a_silent_hub_brings_the_source_back():
    policy = twins(epochs=80, silent_from=50)
    _, u = policy.parameters()
    assert policy.estimates()["push_share"][0] > 0.5      # learned, but no longer trusted
    assert u[0] > 0.5 * u[1]


def test_a_policy_that_never_sees_a_push_chooses_as_before():
    rng = np.random.default_rng(1)
    n = 30
    a = make_policy("whittle", Problem(n=n, cost=np.ones(n)), rng=0)
    b = make_policy("whittle", Problem(n=n, cost=np.ones(n)), rng=0)
    # b is told of pushes that carry nothing and concern nobody it ranks differently:
    # an empty batch, and a batch with a source id out of range
    b.observe_push(Observation.empty(0))
    b.observe_push(Observation(epoch=0, sources=[n + 5], time=0.0, new_items=[1],
                               reward=[1.0]))
    for t in range(40):
        ca, cb = a.select(t, 3.0), b.select(t, 3.0)
        assert np.array_equal(ca, cb)
        k = rng.poisson(3, n)
        obs = Observation(epoch=t, sources=ca, time=float(t), new_items=k[ca],
                          reward=k[ca] * 0.5)
        a.observe(obs)
        b.observe(obs)
    assert b.push.n == 0


def test_push_state_survives_a_restore_and_repair():
    policy = twins(epochs=40)
    copy = make_policy("whittle", Problem(n=2, cost=np.ones(2)), rng=0)
    copy.load_state_dict(policy.state_dict())
    assert np.array_equal(copy.estimates()["push_share"], policy.estimates()["push_share"])
    assert np.allclose(copy.parameters()[1], policy.parameters()[1])
    row = copy.push_rows.rows(np.array([0]))
    copy.push.pushed[row] = np.nan
    assert 0 in copy.repair(None).tolist()
    assert copy.estimates()["push_share"][0] == 0.0


def test_a_fallen_hub_counts_full_arrivals_only_since_its_last_useful_push():
    policy = twins(epochs=60)
    # source 0 is no longer polled; its hub delivers 2 entries an epoch until epoch 100
    for t in range(60, 100):
        when = t + np.array([0.3, 0.7])
        policy.observe_push(Observation(
            epoch=t, sources=[0, 0], time=when, new_items=[1, 1], reward=[1.0, 1.0],
            item_offsets=[0, 1, 2], item_published=when - 0.01, item_value=[1.0, 1.0]))
    policy.select(100, 1.0)
    assert policy._push_failed is None               # the hub speaks: not fallen
    policy.select(112, 1.0)                          # silent for 12 epochs: fallen
    ids, share, since = policy._push_failed
    assert ids.tolist() == [0] and share[0] > 0.8
    x, alpha, u = policy.expected_state(112)
    k, s = 112 - 59, 112 - 99.7
    g = [(1 - alpha[0] ** j) / (1 - alpha[0]) for j in (k, s)]
    # the full arrivals since the last crawl would be u G_k; since the last push only, u G_s
    assert u[0] * g[1] < x[0] < 0.9 * u[0] * g[0]


