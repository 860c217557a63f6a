import numpy as np

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.core.problem import Problem
from sim.experiments.push_polls import scaled_trust, sweep


def test_scaled_trust_counts_c_times_the_arrivals_the_pushes_miss():
    policy = make_policy("whittle", Problem(n=2, cost=np.ones(2)), rng=0)
    policy.observe_push(Observation(epoch=0, sources=[0, 1], time=[0.5, 0.6], new_items=[1, 1],
                                    reward=[1.0, 1.0], item_offsets=[0, 1, 2],
                                    item_published=[0.4, 0.5]))
    rows = np.arange(2)
    learned = policy.push.share_at(rows).copy()
    scaled_trust(0.25)(policy)
    assert np.allclose(1.0 - policy.push.share_at(rows), 0.25 * (1.0 - learned))


def test_a_smaller_c_polls_the_pushing_sources_less():
    out = sweep(n=200, budget="2%", horizon=60, seeds=1, scales=[1.0, 0.1])
    assert out[0.1][1] < out[1.0][1]
