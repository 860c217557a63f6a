"""AdaptiveWhittlePolicy: learns (Lambda, xi, mu) or (lambda, m) online and crawls by the
Whittle index at its estimates.

Thresholds come from measured figures (docs/estimators.md): over epochs 1,000-10,000 the policy
earns 1.000 of the oracle Whittle policy on tcns2018 (stochastic, M = 1) and 0.99-1.00 on both
icc2021 scenarios. These short runs (1,000-1,500 epochs, averaged from epoch 400-500) measured
>= 0.99 (news-mix with 200 sources, deterministic: 0.994); the tests ask for 0.95, which a broken
learner misses by far: crawling source 1 only earns 179.79 / 260.39 = 0.69 of the oracle on
tcns2018, and uniform random crawling earns 1.08 / 2.36 = 0.46 of it on icc2021-single.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from scrapy_whittle.core.observation import Observation
from scrapy_whittle.core.policies import make_policy
from scrapy_whittle.core.policies.whittle import AdaptiveWhittlePolicy
from scrapy_whittle.core.problem import Problem
from scrapy_whittle.core.selection import select_top
from sim.web.scenarios import make_scenario

TCNS_M1_ORACLE = 260.39       # long-run average of the oracle Whittle policy (papers' README)


def run(scenario, name, epochs, seed=0, policy=None, problem=None):
    env = scenario.make_env()
    env.reset(seed=seed)
    if policy is None:
        p = env.problem if name == "oracle" else env.problem.without_parameters()
        policy = make_policy(name, p if problem is None else problem, rng=seed)
    rewards = np.zeros(epochs)
    actions = []
    for t in range(epochs):
        ids = policy.select(t, scenario.budget)
        actions.append(ids.copy())
        obs, rewards[t], *_ = env.step(ids)
        policy.observe(obs)
    return rewards, policy, actions


def test_registered_and_needs_no_parameters():
    pol = make_policy("whittle", Problem(n=3))
    assert isinstance(pol, AdaptiveWhittlePolicy) and not pol.needs_parameters


def test_tcns2018_stochastic_learns_the_parameters_and_matches_the_oracle():
    scn = make_scenario("tcns2018", stochastic=True)
    rewards, pol, _ = run(scn, "whittle", 1200)
    assert rewards[400:].mean() >= 0.95 * TCNS_M1_ORACLE
    est = pol.estimates()
    p = scn.params
    np.testing.assert_allclose(est["rate"][:2], p.rate[:2], rtol=0.05)
    np.testing.assert_allclose(est["decay"][:2], p.decay[:2], rtol=0.05)
    np.testing.assert_allclose(est["mean_utility"][:2], p.mean_utility[:2], rtol=0.1)
    assert np.all(est["rate_lo90"] <= est["rate"]) and np.all(est["rate"] <= est["rate_hi90"])
    assert np.all(np.isfinite(est["decay_std"]))


def test_icc2021_single_pages_match_the_oracle():
    scn = make_scenario("icc2021-single")
    ours, pol, _ = run(scn, "whittle", 1500)
    oracle, _, _ = run(scn, "oracle", 1500)
    assert ours[500:].mean() >= 0.95 * oracle[500:].mean()
    assert np.all(pol.kind == 2.0)                           # recognised as pages
    assert pol.estimates()["change_rate"][0] == pytest.approx(0.6, rel=0.15)
    assert pol.estimates()["importance"][0] == pytest.approx(5.0, rel=0.05)


def test_news_mix_deterministic_counts_only_matches_the_oracle():
    scn = make_scenario("news-mix", n=200)
    ours, pol, _ = run(scn, "whittle", 1500)
    oracle, _, _ = run(scn, "oracle", 1500)
    # count-only ephemeral content; a source crawled once with one new entry is ambiguous
    assert np.mean(pol.kind == 3.0) >= 0.8
    assert ours[400:].mean() >= 0.95 * oracle[400:].mean()


def test_restored_policy_continues_identically():
    scn = make_scenario("tcns2018", stochastic=True, window=300)
    _, pol, actions = run(scn, "whittle", 300, seed=4)
    state = pickle.loads(pickle.dumps(pol.state_dict()))
    env = scn.make_env()
    env.reset(seed=4)
    for ids in actions:
        env.step(ids)
    clone = AdaptiveWhittlePolicy(Problem(n=4))
    clone.load_state_dict(state)
    for t in range(300, 400):
        a, b = pol.select(t, 1.0), clone.select(t, 1.0)
        np.testing.assert_array_equal(a, b)
        obs, *_ = env.step(a)
        pol.observe(obs)
        clone.observe(obs)
    for key, val in pol.estimates().items():
        np.testing.assert_array_equal(val, clone.estimates()[key], err_msg=key)


def test_scrapy_time_in_seconds_gives_the_same_decisions():
    """problem.period = 3600 s: times and publication dates in seconds, epochs unchanged."""
    scn = make_scenario("tcns2018", stochastic=True)
    env = scn.make_env()
    env.reset(seed=2)
    hours = AdaptiveWhittlePolicy(Problem(n=4))
    seconds = AdaptiveWhittlePolicy(Problem(n=4, period=3600.0))
    same = 0
    for t in range(250):
        a = hours.select(t, 1.0)
        same += np.array_equal(a, seconds.select(t, 1.0))
        obs, *_ = env.step(a)
        hours.observe(obs)
        seconds.observe(Observation(
            epoch=obs.epoch, sources=obs.sources, time=obs.time * 3600.0,
            new_items=obs.new_items, reward=obs.reward, window_full=obs.window_full,
            item_offsets=obs.item_offsets, item_published=obs.item_published * 3600.0,
            item_value=obs.item_value))
    assert same >= 247
    np.testing.assert_allclose(seconds.estimates()["rate"] * 3600, hours.estimates()["rate"],
                               rtol=1e-6)


def test_unexplored_and_grown_sources_get_crawled_failed_crawls_teach_nothing():
    pol = AdaptiveWhittlePolicy(Problem(n=3))
    for t in range(3):
        ids = pol.select(t, 1.0)
        pol.observe(Observation(epoch=t, sources=ids, time=float(t), new_items=[0],
                                reward=[0.0], ok=[False]))
    assert not pol.explored().any()
    pol.grow(2, weights=50.0)                 # promising new sources go first
    pol.select(3, 2.0)
    assert set(pol.select(4, 2.0).tolist()) == {3, 4}
    assert pol.estimates()["mean_utility"].shape == (5,)


def test_report_value_feeds_the_decay_estimator():
    pol = AdaptiveWhittlePolicy(Problem(n=2), prior_half_life=10.0)
    for _ in range(30):
        assert pol.report_value(1, value_at_capture=0.5, age=1.0, base_value=1.0)
    assert not pol.report_value(1, value_at_capture=float("nan"), age=1.0)
    assert pol.estimates()["decay"][1] == pytest.approx(np.log(2), rel=0.05)
    assert pol.estimates()["decay"][0] == pytest.approx(np.log(2) / 10.0)


def test_pruned_selection_is_the_full_top_m():
    """select() computes the index only where it can matter; the choice is exactly the top M
    of priority(), epoch after epoch, with and without an eligibility mask."""
    sc = make_scenario("news-mix", n=3000, seed=4, stochastic=True)
    env = sc.make_env()
    env.reset(seed=4)
    pol = make_policy("whittle", sc.problem.without_parameters(), rng=4)
    rng = np.random.default_rng(4)
    for t in range(150):
        eligible = rng.random(3000) < 0.97 if t % 3 == 0 else None
        full = select_top(pol.priority(t), None, sc.budget, eligible)
        chosen = pol.select(t, sc.budget, eligible)
        np.testing.assert_array_equal(np.sort(chosen), np.sort(full))
        obs, *_ = env.step(chosen)
        pol.observe(obs)
    assert pol.pruned_decisions > 50         # the pruned path was taken, and agreed


def test_deciding_several_times_an_epoch_the_threshold_form_is_the_full_top_m():
    """At decision steps (resolution < 1) select() ranks only the sources whose priority may
    have reached a threshold a little below the last cut-off (``ReachingTop``: each source's
    epoch of reaching it kept, computed again where a crawl taught something); the choice is
    exactly the top M of priority(), step after step, with and without an eligibility mask,
    and after the state is restored."""
    from dataclasses import replace

    sc = make_scenario("news-mix", n=3000, seed=5, stochastic=True)
    env = sc.make_env()
    env.reset(seed=5)
    pol = make_policy("whittle", sc.problem.without_parameters(), rng=5, resolution=0.25)
    rng = np.random.default_rng(5)
    for t in range(240):
        at = t * 0.25
        if t == 120:
            pol.load_state_dict(pol.state_dict())
        eligible = rng.random(3000) < 0.97 if t % 3 == 0 else None
        full = select_top(pol.priority(at), None, sc.budget, eligible)
        chosen = pol.select(at, sc.budget, eligible)
        np.testing.assert_array_equal(np.sort(chosen), np.sort(full))
        obs, *_ = env.step(chosen)
        pol.observe(replace(obs, epoch=at))
    assert pol.reaching.decisions > 100       # the threshold form decided, and agreed


def test_the_threshold_form_ranks_sources_never_crawled_by_class():
    """A crawl's start over many sources: most were never crawled, and those alike (u, prior
    weight, group, epoch added) rank together (``FreshClasses``: the lowest eligible ids of
    each class); the choice is still exactly the top M, with weights, groups and half-life
    hints making several classes, masks, and a restore."""
    from dataclasses import replace

    n = 4000
    sc = make_scenario("news-mix", n=n, seed=6, stochastic=True)
    env = sc.make_env()
    env.reset(seed=6)
    weights = np.array([1.0, 2.0, 0.5])[np.arange(n) % 3]
    pol = make_policy("whittle", sc.problem.without_parameters(), rng=6, resolution=0.25,
                      weights=weights, groups=np.arange(n) % 20)
    pol.set_prior_half_life(np.arange(0, n, 7), np.full(len(range(0, n, 7)), 0.5))
    rng = np.random.default_rng(6)
    most = 0
    for t in range(120):
        at = t * 0.25
        if t == 60:
            pol.load_state_dict(pol.state_dict())
        eligible = rng.random(n) < 0.9 if t % 2 == 0 else None
        full = select_top(pol.priority(at), None, sc.budget, eligible)
        chosen = pol.select(at, sc.budget, eligible)
        np.testing.assert_array_equal(np.sort(chosen), np.sort(full))
        obs, *_ = env.step(chosen)
        pol.observe(replace(obs, epoch=at))
        most = max(most, len(pol.reaching.classes.runs))
    assert most >= 6            # weights x hints: the classes the test means to make
    assert pol.reaching.by_class > 50        # decided with classes, and agreed

def test_expected_state_is_the_closed_form_whether_few_or_most_sources_were_crawled():
    """x = u G_k k epochs after a source's last crawl; before its first, the population's
    expected index (the mean over the learned sources j of gamma_j(u_j G(t - h_j)), h_j the
    start of j's history) or u x (epochs since it joined), whichever is larger: computed on
    the explored sources only while they are few, on all after."""
    from scrapy_whittle.core.dynamics import expected_state
    from scrapy_whittle.core.index import whittle_index

    sc = make_scenario("news-mix", n=400, seed=2, stochastic=True)
    env = sc.make_env()
    env.reset(seed=2)
    pol = make_policy("whittle", sc.problem.without_parameters(), rng=2)
    fractions = []
    for t in range(120):
        x, alpha, u = pol.expected_state(t)
        explored = pol.explored()
        fractions.append(explored.mean())
        k = np.where(explored, t - np.nan_to_num(pol.last_epoch), 0.0)
        waited = t - np.where(np.isnan(pol.added_epoch), t, pol.added_epoch)
        unknown = u * np.maximum(waited, 0.0)
        if explored.any():
            j = np.flatnonzero(explored)
            xj = expected_state(0.0, alpha[j], u[j], t - pol.history_epoch[j])
            unknown = np.maximum(unknown, np.mean(whittle_index(xj, alpha[j], u[j])))
        want = np.where(explored, expected_state(0.0, alpha, u, np.maximum(k, 0.0)), unknown)
        np.testing.assert_allclose(x, want, rtol=1e-12, atol=0.0)
        obs, *_ = env.step(pol.select(t, sc.budget))
        pol.observe(obs)
    assert min(fractions) < 0.5 < max(fractions)        # both ways were taken


@pytest.mark.parametrize("name, n, stochastic", [("news-mix", 300, True),
                                                 ("news-mix", 200, False),
                                                 ("icc2021-single", None, True)])
def test_kept_parameters_equal_a_fresh_computation(name, n, stochastic):
    """select() keeps u between epochs and recomputes only the sources whose estimates
    changed (log alpha and 1 - alpha come from the decay fits each time): after
    observations (items, counts, pages), value reports, priors set for some sources, a
    poisoned source repaired, sources added and a state restored, what it uses is element
    for element what a fresh computation gives."""
    sc = make_scenario(name, n=n, seed=5, stochastic=stochastic)
    n = sc.problem.n
    env = sc.make_env()
    env.reset(seed=5)
    pol = make_policy("whittle", sc.problem.without_parameters(), rng=5)

    def check():
        alpha, log_alpha, one_minus = pol._alphas_at(slice(None))
        kept = (alpha, pol._kept_u(), log_alpha, one_minus)
        fresh = pol._parameters_at(np.arange(pol.n))
        for a, b in zip(kept, fresh, strict=True):
            np.testing.assert_array_equal(a, b)

    rng = np.random.default_rng(5)
    for t in range(60):
        chosen = pol.select(t, sc.budget)
        check()
        obs, *_ = env.step(chosen)
        pol.observe(obs)
        if t % 7 == 3:
            other = int(np.setdiff1d(np.arange(n), chosen)[0])    # not observed now
            assert pol.report_value(other, 0.3, 2.0, base_value=1.0)
        if t % 11 == 5:
            ids = rng.choice(n, 3, replace=False)
            pol.set_prior_half_life(ids, np.full(3, 7.0))
            pol.set_prior_rate(ids, np.full(3, 0.2))
        if t == 20:                      # an estimate gone bad: repaired, then recomputed
            pol.values.total[int(chosen[0])] = np.inf
            assert int(chosen[0]) in pol.repair(None)
        if t == 30:
            pol.load_state_dict(pickle.loads(pickle.dumps(pol.state_dict())))
        check()
    pol.grow(2)
    pol.select(60, sc.budget)
    check()
    with pytest.raises(ValueError):      # read-only: nothing outside changes the kept u
        pol._kept_u()[0] = 1.0


@pytest.mark.parametrize("resolution", [1.0, 1 / 60])
def test_the_population_prior_is_kept_for_an_epoch_only_under_decision_steps(resolution):
    """The prior of sources never crawled, an average over the learned ones, is computed once
    an epoch under decision steps (every step would pay a pass over them), and again at each
    selection that follows learning with one decision an epoch (the papers' policy)."""
    scn = make_scenario("news-mix", n=200, seed=0)
    _, pol, _ = run(scn, "whittle", 30, problem=None)
    pol.resolution = resolution
    first = pol.population_prior(30.0)
    pol._estimates_changed(np.arange(5))                   # (what a crawl's learning does)
    again = pol.population_prior(30.5 if resolution < 1 else 30.0)
    assert (again is first) == (resolution < 1)
    assert pol.population_prior(31.0) is not first         # a new epoch: computed again
