from __future__ import annotations

import itertools

import numpy as np
import pytest

from scrapy_whittle import Observation, Problem, make_policy
from scrapy_whittle.core.policies import POLICIES, policy_class
from tests.core.test_index import TABLE_I_ALPHA, TABLE_I_U


def _crawl(policy, epoch, budget):
    chosen = policy.select(epoch, budget)
    policy.observe(Observation(epoch=epoch, sources=chosen, time=float(epoch),
                               new_items=np.ones(len(chosen)), reward=np.zeros(len(chosen))))
    return chosen


def test_unknown_policy_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown policy 'nope'.*round_robin"):
        make_policy("nope", Problem(n=3))


def test_oracle_policies_refuse_a_problem_without_parameters():
    with pytest.raises(ValueError, match="needs the sources' parameters"):
        make_policy("oracle", Problem(n=3))


def test_whittle_on_table_i_alternates_sources_1_and_2_at_budget_1():
    policy = make_policy("oracle", Problem(n=4, alpha=TABLE_I_ALPHA, u=TABLE_I_U))
    crawled = [int(_crawl(policy, t, 1)[0]) for t in range(200)]
    tail = crawled[20:]
    assert set(tail) == {0, 1}
    assert all(a != b for a, b in itertools.pairwise(tail))


def test_round_robin_cycles_through_every_source():
    policy = make_policy("round_robin", Problem(n=5))
    seen = np.concatenate([_crawl(policy, t, 2) for t in range(5)])
    np.testing.assert_array_equal(seen, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4])


def test_uniform_is_seeded_and_within_budget():
    a = make_policy("uniform", Problem(n=50), rng=3)
    b = make_policy("uniform", Problem(n=50), rng=3)
    for t in range(10):
        sa, sb = a.select(t, 5), b.select(t, 5)
        np.testing.assert_array_equal(sa, sb)
        assert len(set(sa.tolist())) == 5


def test_greedy_takes_the_fullest_source():
    policy = make_policy("greedy", Problem(n=4, alpha=TABLE_I_ALPHA, u=TABLE_I_U))
    assert _crawl(policy, 0, 1).size == 1
    # after one epoch the fullest expected value is source 1 (u = 179.8)
    assert int(_crawl(policy, 1, 1)[0]) in (0, 1)


def test_state_dict_round_trip_continues_identically():
    problem = Problem(n=6, alpha=np.full(6, 0.8), u=np.arange(1.0, 7.0))
    a = make_policy("oracle", problem)
    for t in range(7):
        _crawl(a, t, 2)
    b = make_policy("oracle", problem)
    b.load_state_dict(a.state_dict())
    for t in range(7, 20):
        np.testing.assert_array_equal(_crawl(a, t, 2), _crawl(b, t, 2))


def test_grow_adds_sources_that_are_then_crawled():
    policy = make_policy("round_robin", Problem(n=2))
    policy.grow(2)
    assert policy.n == 4
    seen = np.concatenate([_crawl(policy, t, 1) for t in range(4)])
    np.testing.assert_array_equal(seen, [0, 1, 2, 3])


def test_registry_names_resolve_to_classes_with_that_name():
    for name in ("oracle", "greedy", "uniform", "round_robin"):
        assert policy_class(name).name == name
    assert set(POLICIES) >= {"oracle", "static", "nutch", "miniflux", "dqn", "thompson",
                             "lspe", "whittle", "thompson-whittle"}
    # one name, one policy: learned as diurnal-whittle is, given its parameters as the oracles
    learned = policy_class("whittle")
    assert learned.name == "whittle" and not learned.needs_parameters
    assert policy_class("oracle").needs_parameters
    assert policy_class("adaptive-whittle") is policy_class("whittle")      # an accepted alias


def test_whittle_pruned_selection_is_exactly_the_full_top_m():
    from scrapy_whittle.core.selection import select_top
    from sim.web.scenarios import make_scenario

    scenario = make_scenario("news-mix", n=5000, seed=4)
    fast = make_policy("oracle", scenario.problem)
    for t in range(400):
        chosen = fast.select(t, scenario.budget)
        full = select_top(fast._table.index(fast.x.copy()), None, scenario.budget)
        np.testing.assert_array_equal(chosen, full)
        fast.observe(Observation(epoch=t, sources=chosen, time=float(t),
                                 new_items=np.ones(len(chosen)), reward=np.zeros(len(chosen))))
    assert fast.pruned_decisions > 300     # the fast path really ran


def test_restoring_keeps_the_costs_of_sources_added_during_the_crawl():
    a = make_policy("round_robin", Problem(n=2))
    a.grow(2, cost=np.array([3.0, 2.0]))
    b = make_policy("round_robin", Problem(n=2))
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(b.problem.cost, [1.0, 1.0, 3.0, 2.0])
    oracle = make_policy("oracle", Problem(n=1, alpha=[0.5], u=[1.0]))
    oracle.grow(1, cost=2.0, alpha=0.9, u=3.0)
    restored = make_policy("oracle", Problem(n=1, alpha=[0.5], u=[1.0]))
    restored.load_state_dict(oracle.state_dict())
    np.testing.assert_array_equal(restored.problem.u, [1.0, 3.0])
    np.testing.assert_array_equal(restored.problem.cost, [1.0, 2.0])


def test_set_cost_changes_what_the_budget_affords_and_the_index():
    problem = Problem(n=3, alpha=np.full(3, 0.5), u=np.array([3.0, 2.0, 1.0]))
    policy = make_policy("oracle", problem)
    assert len(policy.select(0, 2)) == 2
    policy.set_cost([0, 1], 2.0)
    np.testing.assert_array_equal(policy.problem.cost, [2.0, 2.0, 1.0])
    chosen = policy.select(1, 2)
    assert policy.problem.cost[chosen].sum() <= 2
    # the ranking is the index per unit of the new cost
    from scrapy_whittle import whittle_index

    np.testing.assert_allclose(policy.priority(1),
                               whittle_index(policy.x, 0.5, problem.u, [2.0, 2.0, 1.0]))


def test_everything_but_dqn_works_without_torch():
    import subprocess
    import sys

    code = """
import sys
sys.modules['torch'] = None          # as if torch were not installed
import numpy as np
import scrapy_whittle, sim.bench, sim.web.scenarios
from scrapy_whittle import make_policy, Problem
from scrapy_whittle.core.policies import POLICIES
for name in POLICIES:
    if name == 'dqn':
        continue
    scrapy_whittle.core.policies.policy_class(name)
try:
    make_policy('dqn', Problem(n=4))
except ValueError as exc:
    assert "pip install 'scrapy-whittle[dqn]'" in str(exc), exc
else:
    raise SystemExit('dqn built without torch')
assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def _given(cls, n: int) -> tuple[Problem, dict, dict]:
    """(problem, constructor arguments, ``grow`` arguments of 3 new sources) for a policy of
    class ``cls`` with ``n`` sources, given what it declares it needs as the re-crawl
    service gives it: the sources' parameters, their daily rhythms."""
    from scrapy_whittle.core.periodic import PeriodicArrivals

    if not cls.needs_parameters:
        return Problem(n=n), {}, {}
    phases = 4
    alpha = np.full(n, 0.5)
    if cls.needs_rhythms:
        u = np.ones((n, phases))
        return (Problem(n=n, alpha=alpha, u=u.mean(axis=1)),
                {"periodic": PeriodicArrivals(alpha, u, 0)},
                {"alpha": np.full(3, 0.5), "periodic_u": np.ones((3, phases))})
    return Problem(n=n, alpha=alpha, u=np.ones(n)), {}, {"alpha": np.full(3, 0.5),
                                                          "u": np.ones(3)}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_starts_from_no_source_and_grows(name):
    """A crawl whose list is fetched after start-up (WHITTLE_SOURCES at a URL) builds its
    policy for no source, then grows it: every registered policy selects nothing, learns
    from nothing, then crawls the sources it is given."""
    cls = policy_class(name)
    problem, supplied, grown = _given(cls, 0)
    policy = make_policy(name, problem, rng=0, **supplied)
    assert policy.n == 0
    assert _crawl(policy, 0, 2).size == 0
    policy.grow(3, 1.0, **grown)
    assert policy.n == 3
    chosen = np.concatenate([_crawl(policy, t, 2) for t in range(1, 40)])
    assert chosen.size and set(chosen.tolist()) <= {0, 1, 2}
