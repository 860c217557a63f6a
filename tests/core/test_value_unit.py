"""The value prior on the unit of the values observed (``ValueEstimator(pooled=True)``): a
crawl's values are engagement counts in whatever unit its feeds show, and the learned
Whittle policy chooses the same whatever that unit is."""

from __future__ import annotations

import numpy as np
import pytest

from scrapy_whittle.core.estimators import ValueEstimator
from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.core.problem import Problem


def crawl_choices(unit: float, pooled: bool = True, n: int = 40, epochs: int = 120,
                  seed: int = 0) -> list[list[int]]:
    """The sources the learned Whittle policy crawls, epoch by epoch, on a small warm web
    whose captures (values at capture only, no base value) are counted in ``unit``."""
    rng = np.random.default_rng(seed)
    rate = 0.5 * rng.lognormal(0.0, 1.0, n)
    xi = rng.lognormal(0.0, 1.0, n)
    mu = np.log(2) / (6.0 * rng.lognormal(0.0, 1.0, n))
    pending = [np.sort(rng.uniform(-30.0, 0.0, rng.poisson(r * 30.0))) for r in rate]
    policy = make_policy("whittle", Problem(n=n, cost=np.ones(n)), rng=0)
    policy.values.pooled = pooled
    out = []
    for t in range(epochs):
        for i in range(n):
            new = np.sort(rng.uniform(t - 1.0, float(t), rng.poisson(rate[i])))
            pending[i] = np.concatenate([pending[i], new])
        chosen = sorted(int(i) for i in policy.select(t, 3.0))
        out.append(chosen)
        pub = [pending[i] for i in chosen]
        base = [rng.exponential(xi[i], p.shape[0]) for i, p in zip(chosen, pub, strict=True)]
        reward = [unit * float(np.sum(b * np.exp(-mu[i] * (t - p))))
                  for i, p, b in zip(chosen, pub, base, strict=True)]
        off = np.concatenate([[0], np.cumsum([p.shape[0] for p in pub])])
        policy.observe(Observation(epoch=t, sources=chosen, time=[float(t)] * len(chosen),
                                   new_items=[p.shape[0] for p in pub], reward=reward,
                                   item_offsets=off, item_published=np.concatenate(pub)))
        for i in chosen:
            pending[i] = pending[i][:0]
    return out


def test_the_policy_chooses_the_same_whatever_unit_the_values_come_in():
    """Values counted 1024 times larger (a power of 2: every product and quotient is as
    exact as in the unit 1), the same crawls, epoch by epoch."""
    assert crawl_choices(1024.0) == crawl_choices(1.0)


def test_an_unpooled_prior_makes_the_unit_matter():
    """The check above can fail: with the prior fixed at one unit per unit of weight, the
    unit alone changes what is crawled."""
    assert crawl_choices(1024.0, pooled=False) != crawl_choices(1.0, pooled=False)


def test_the_pooled_scale_is_the_median_value_per_unit_of_weight_on_its_grid():
    est = ValueEstimator(5, prior_mean=[1.0, 2.0, 1.0, 1.0, 1.0], prior_weight=1.0,
                         pooled=True)
    assert est.pooled_scale() == 1.0                  # nothing observed: the prior's unit
    est.update([0, 1, 2, 3], [100.0, 400.0, 1000.0, 50.0], weight=[1.0, 1.0, 2.0, 1.0])
    # per unit of weight: 100, 200, 1000, 50: median 150, on the grid 2^(29/4) = 152.2
    assert est.pooled_scale() == pytest.approx(2.0 ** (29 / 4))
    assert est.scale == 1.0                           # until rescaled
    assert est.rescale() and not est.rescale()
    assert est.mean()[4] == pytest.approx(2.0 ** (29 / 4))   # a source not yet seen
    # a source seen weighs its values against that prior, worth one value
    assert est.mean()[0] == pytest.approx((2.0 ** (29 / 4) + 100.0) / 2)
    restored = ValueEstimator(0, pooled=True)
    restored.load_state_dict(est.state_dict())
    assert restored.scale == est.scale


def test_an_unpooled_estimator_keeps_its_prior():
    est = ValueEstimator(2, prior_mean=1.0, prior_weight=1.0)
    est.update([0], [1000.0])
    assert not est.rescale() and est.scale == 1.0
    assert est.mean()[1] == 1.0
